#include "net/duration.hpp"

#include <cstdint>
#include <limits>

namespace tenure::detail {

namespace {

struct unit_entry {
    std::string_view name;
    std::uint64_t ns;
};

constexpr unit_entry units[] = {
    {"ns", 1ull},
    {"us", 1000ull},
    {"\xC2\xB5s", 1000ull},  // U+00B5 micro sign
    {"\xCE\xBCs", 1000ull},  // U+03BC Greek mu
    {"ms", 1000000ull},
    {"s", 1000000000ull},
    {"m", 60ull * 1000000000ull},
    {"h", 3600ull * 1000000000ull},
};

std::string quote(std::string_view s) {
    std::string out = "\"";
    out.append(s);
    out += '"';
    return out;
}

}  // namespace

duration_parse_result parse_go_duration(std::string_view orig) {
    auto invalid = [&] { return duration_parse_result{std::nullopt, "time: invalid duration " + quote(orig)}; };
    std::string_view s = orig;
    bool neg = false;
    if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
        neg = s[0] == '-';
        s.remove_prefix(1);
    }
    if (s == "0") return {std::chrono::nanoseconds{0}, {}};
    if (s.empty()) return invalid();

    constexpr std::uint64_t max_total = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    std::uint64_t total = 0;
    while (!s.empty()) {
        // Integer part.
        if (!(s[0] == '.' || (s[0] >= '0' && s[0] <= '9'))) return invalid();
        std::uint64_t whole = 0;
        bool have_whole = false;
        bool overflow = false;
        while (!s.empty() && s[0] >= '0' && s[0] <= '9') {
            if (whole > (max_total - (s[0] - '0')) / 10) overflow = true;
            else whole = whole * 10 + static_cast<std::uint64_t>(s[0] - '0');
            s.remove_prefix(1);
            have_whole = true;
        }
        if (overflow) return invalid();
        // Fraction part.
        std::uint64_t frac = 0;
        double scale = 1;
        bool have_frac = false;
        if (!s.empty() && s[0] == '.') {
            s.remove_prefix(1);
            while (!s.empty() && s[0] >= '0' && s[0] <= '9') {
                if (frac <= (max_total - 9) / 10) {  // ignore digits beyond precision, as Go does
                    frac = frac * 10 + static_cast<std::uint64_t>(s[0] - '0');
                    scale *= 10;
                }
                s.remove_prefix(1);
                have_frac = true;
            }
        }
        if (!have_whole && !have_frac) return invalid();
        // Unit.
        std::size_t ulen = 0;
        while (ulen < s.size() && s[ulen] != '.' && !(s[ulen] >= '0' && s[ulen] <= '9')) ++ulen;
        if (ulen == 0) return {std::nullopt, "time: missing unit in duration " + quote(orig)};
        std::string_view uname = s.substr(0, ulen);
        s.remove_prefix(ulen);
        std::uint64_t unit = 0;
        for (auto const& u : units)
            if (u.name == uname) unit = u.ns;
        if (unit == 0) return {std::nullopt, "time: unknown unit " + quote(uname) + " in duration " + quote(orig)};
        if (whole > max_total / unit) return invalid();
        std::uint64_t v = whole * unit;
        if (have_frac) v += static_cast<std::uint64_t>(static_cast<double>(frac) * (static_cast<double>(unit) / scale));
        if (v > max_total - total) return invalid();
        total += v;
    }
    auto value = static_cast<std::int64_t>(total);
    return {std::chrono::nanoseconds{neg ? -value : value}, {}};
}

std::string format_go_duration(std::chrono::nanoseconds d) {
    // Port of Go's time.Duration.String, which picks the unit by magnitude.
    std::int64_t v = d.count();
    if (v == 0) return "0s";
    bool neg = v < 0;
    std::uint64_t u = neg ? static_cast<std::uint64_t>(-(v + 1)) + 1 : static_cast<std::uint64_t>(v);
    char buf[40];
    int w = sizeof buf;

    auto fmt_frac = [&](std::uint64_t value, int prec) {
        bool print = false;
        for (int i = 0; i < prec; ++i) {
            int digit = static_cast<int>(value % 10);
            print = print || digit != 0;
            if (print) buf[--w] = static_cast<char>('0' + digit);
            value /= 10;
        }
        if (print) buf[--w] = '.';
        return value;
    };
    auto fmt_int = [&](std::uint64_t value) {
        if (value == 0) buf[--w] = '0';
        while (value > 0) {
            buf[--w] = static_cast<char>('0' + value % 10);
            value /= 10;
        }
    };

    if (u < 1000000000ull) {
        int prec = 0;
        buf[--w] = 's';
        if (u < 1000ull) {
            buf[--w] = 'n';
            prec = 0;
        } else if (u < 1000000ull) {
            // Go prints U+00B5 for microseconds.
            buf[--w] = '\xB5';
            buf[--w] = '\xC2';
            prec = 3;
        } else {
            buf[--w] = 'm';
            prec = 6;
        }
        u = fmt_frac(u, prec);
        fmt_int(u);
    } else {
        buf[--w] = 's';
        u = fmt_frac(u, 9);
        fmt_int(u % 60);
        u /= 60;
        if (u > 0) {
            buf[--w] = 'm';
            fmt_int(u % 60);
            u /= 60;
            if (u > 0) {
                buf[--w] = 'h';
                fmt_int(u);
            }
        }
    }
    if (neg) buf[--w] = '-';
    return std::string(buf + w, sizeof buf - w);
}

}  // namespace tenure::detail
