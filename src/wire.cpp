#include <tenure/detail/wire.hpp>

#include <boost/beast/core/detail/base64.hpp>

#include <charconv>

namespace tenure::detail {

namespace base64 = boost::beast::detail::base64;

std::optional<std::uint64_t> parse_u64(std::string_view s) noexcept {
    std::uint64_t v = 0;
    if (s.empty()) return std::nullopt;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

std::string base64_encode(std::string_view in) {
    std::string out(base64::encoded_size(in.size()), '\0');
    out.resize(base64::encode(out.data(), in.data(), in.size()));
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

}  // namespace tenure::detail
