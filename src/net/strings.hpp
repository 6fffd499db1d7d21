// Small string helpers shared by the agent and the client.
#pragma once

#include <cstddef>
#include <string_view>

namespace tenure::detail {

// ASCII case-insensitive equality: only A-Z and a-z fold; every other byte
// (UTF-8 included) must match exactly. What Go's encoding/json and HTTP
// header names need, and independent of the C locale.
constexpr bool iequals(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) return false;
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

}  // namespace tenure::detail
