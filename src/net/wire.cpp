#include "net/wire.hpp"

#include <boost/beast/core/detail/base64.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

#include <sys/un.h>

namespace tenure::detail {

namespace base64 = boost::beast::detail::base64;

std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept {
    std::uint64_t v = 0;
    if (s.empty()) return std::nullopt;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

void append_base64(std::string& out, std::string_view in) {
    auto const at = out.size();
    out.resize(at + base64::encoded_size(in.size()));
    out.resize(at + base64::encode(out.data() + at, in.data(), in.size()));
}

std::string base64_encode(std::string_view in) {
    std::string out;
    append_base64(out, in);
    return out;
}

std::optional<std::string> base64_decode(std::string_view in) {
    if (in.size() % 4 != 0) return std::nullopt;
    // Beast's decoder stops at the '=' padding and does not count it.
    std::size_t padding = 0;
    while (padding < 2 && padding < in.size() && in[in.size() - 1 - padding] == '=') ++padding;
    std::string out(base64::decoded_size(in.size()), '\0');
    auto [written, read] = base64::decode(out.data(), in.data(), in.size() - padding);
    if (read != in.size() - padding) return std::nullopt;
    out.resize(written);
    return out;
}

std::optional<unix_address> parse_unix_address(std::string_view text) {
    constexpr std::string_view scheme = "unix://";
    if (text.size() < scheme.size() ||
        !std::equal(scheme.begin(), scheme.end(), text.begin(),
                    [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); }))
        return std::nullopt;
    unix_address a;
    a.path = std::string(text.substr(scheme.size()));
    constexpr std::size_t capacity = sizeof(sockaddr_un::sun_path);
    if (a.path.empty() || a.path.front() != '/')
        a.error = "a unix:// address needs an absolute socket path (unix:///path/to/socket)";
    else if (a.path.size() >= capacity)
        a.error = "the socket path is longer than " + std::to_string(capacity - 1) + " bytes";
    else if (a.path.find('\0') != std::string::npos)
        a.error = "the socket path contains a NUL byte";
    return a;
}

}  // namespace tenure::detail
