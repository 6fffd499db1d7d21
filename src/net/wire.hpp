// Small encodings shared by the agent and the client: Consul's KV values are
// standard padded base64 in JSON, its numbers (flags, indexes) are uint64,
// and a Unix socket address is spelled unix:///path.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tenure::detail {

// Decimal uint64, the whole string (no sign, no spaces); nullopt otherwise.
std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept;

// Go's base64.StdEncoding (padded).
std::string base64_encode(std::string_view in);
// The same, appended to `out`.
void append_base64(std::string& out, std::string_view in);
// nullopt when `in` is not padded standard base64.
std::optional<std::string> base64_decode(std::string_view in);

// "unix:///path" (scheme in any case): the socket's path, or why it cannot be
// one (not absolute, too long for sockaddr_un, a NUL byte). nullopt: not a
// unix:// address at all.
struct unix_address {
    std::string path;
    std::string error;  // empty when `path` is usable
};
std::optional<unix_address> parse_unix_address(std::string_view text);

}  // namespace tenure::detail
