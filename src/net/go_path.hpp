// Internal: Go's path package, for KV key layouts that Go clients (Consul's
// api.Semaphore, `consul lock -n`) build with it.
#pragma once

#include <string>
#include <string_view>

namespace tenure::detail {

// Go's path.Clean: the shortest equivalent path ("" -> ".").
std::string go_path_clean(std::string_view p);
// Go's path.Join(a, b): the non-empty elements joined by '/', then Clean()ed.
std::string go_path_join(std::string_view a, std::string_view b);

}  // namespace tenure::detail
