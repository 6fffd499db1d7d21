// Go duration strings: parse like time.ParseDuration, print like
// time.Duration.String(). Consul's error bodies embed both, so the exact text
// matters (e.g. "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]").
#include <boost/test/unit_test.hpp>

#include "net/duration.hpp"

#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

namespace {

using std::chrono::nanoseconds;
using tenure::detail::format_go_duration;
using tenure::detail::parse_go_duration;
using namespace std::chrono_literals;

constexpr std::int64_t ns_per_s = 1'000'000'000;

// Parses `text`, requiring success, and returns the value in nanoseconds.
std::int64_t parse_ok(std::string_view text) {
    auto r = parse_go_duration(text);
    BOOST_REQUIRE_MESSAGE(r.value.has_value(), "parse of \"" << text << "\" failed: " << r.error);
    BOOST_TEST(r.error.empty());
    return r.value->count();
}

// Parses `text`, requiring failure, and returns Go's error text.
std::string parse_err(std::string_view text) {
    auto r = parse_go_duration(text);
    BOOST_REQUIRE_MESSAGE(!r.value.has_value(),
                          "parse of \"" << text << "\" unexpectedly gave " << r.value->count() << "ns");
    return r.error;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(duration_parse)

BOOST_AUTO_TEST_CASE(single_units) {
    BOOST_TEST(parse_ok("15s") == 15 * ns_per_s);
    BOOST_TEST(parse_ok("500ms") == 500'000'000);
    BOOST_TEST(parse_ok("7ns") == 7);
    BOOST_TEST(parse_ok("3m") == 180 * ns_per_s);
    BOOST_TEST(parse_ok("2h") == 7200 * ns_per_s);
}

BOOST_AUTO_TEST_CASE(microsecond_spellings) {
    BOOST_TEST(parse_ok("1us") == 1000);
    BOOST_TEST(parse_ok("1\xC2\xB5s") == 1000);  // U+00B5 micro sign
    BOOST_TEST(parse_ok("1\xCE\xBCs") == 1000);  // U+03BC Greek small mu
}

BOOST_AUTO_TEST_CASE(compound_values) {
    BOOST_TEST(parse_ok("1m30s") == 90 * ns_per_s);
    BOOST_TEST(parse_ok("2h45m") == 9900 * ns_per_s);
    BOOST_TEST(parse_ok("1h2m3s4ms5us6ns") == 3723 * ns_per_s + 4'005'006);
    // Units may repeat and come in any order, as in Go.
    BOOST_TEST(parse_ok("1s1s") == 2 * ns_per_s);
    BOOST_TEST(parse_ok("1s1m") == 61 * ns_per_s);
}

BOOST_AUTO_TEST_CASE(fractions) {
    BOOST_TEST(parse_ok("1.5h") == 5400 * ns_per_s);
    BOOST_TEST(parse_ok("1.5s") == 1'500'000'000);
    BOOST_TEST(parse_ok(".5s") == 500'000'000);
    BOOST_TEST(parse_ok("1.s") == ns_per_s);  // Go accepts a trailing dot
    BOOST_TEST(parse_ok("0.25ms") == 250'000);
    BOOST_TEST(parse_ok("1.000000001s") == ns_per_s + 1);
    BOOST_TEST(parse_ok("15000ms") == 15 * ns_per_s);  // what the Go api sends for LockDelay
}

BOOST_AUTO_TEST_CASE(zero_and_signs) {
    BOOST_TEST(parse_ok("0") == 0);
    BOOST_TEST(parse_ok("0s") == 0);
    BOOST_TEST(parse_ok("-0") == 0);
    BOOST_TEST(parse_ok("+0") == 0);
    BOOST_TEST(parse_ok("-1s") == -ns_per_s);
    BOOST_TEST(parse_ok("+5s") == 5 * ns_per_s);
    BOOST_TEST(parse_ok("-1m30s") == -90 * ns_per_s);
}

BOOST_AUTO_TEST_CASE(missing_unit) {
    BOOST_TEST(parse_err("15") == R"(time: missing unit in duration "15")");
    BOOST_TEST(parse_err("-15") == R"(time: missing unit in duration "-15")");
    BOOST_TEST(parse_err("1s5") == R"(time: missing unit in duration "1s5")");
    BOOST_TEST(parse_err("1.5.5s") == R"(time: missing unit in duration "1.5.5s")");
}

BOOST_AUTO_TEST_CASE(invalid) {
    BOOST_TEST(parse_err("abc") == R"(time: invalid duration "abc")");
    BOOST_TEST(parse_err("") == R"(time: invalid duration "")");
    BOOST_TEST(parse_err("-") == R"(time: invalid duration "-")");
    BOOST_TEST(parse_err(".s") == R"(time: invalid duration ".s")");
    BOOST_TEST(parse_err("s") == R"(time: invalid duration "s")");
    BOOST_TEST(parse_err(" 5s") == R"(time: invalid duration " 5s")");
    BOOST_TEST(parse_err("--1s") == R"(time: invalid duration "--1s")");
}

BOOST_AUTO_TEST_CASE(unknown_unit) {
    BOOST_TEST(parse_err("1x") == R"(time: unknown unit "x" in duration "1x")");
    BOOST_TEST(parse_err("10sec") == R"(time: unknown unit "sec" in duration "10sec")");
    BOOST_TEST(parse_err("1S") == R"(time: unknown unit "S" in duration "1S")");
    BOOST_TEST(parse_err("5 s") == R"(time: unknown unit " s" in duration "5 s")");
}

BOOST_AUTO_TEST_CASE(overflow) {
    BOOST_TEST(parse_ok("9223372036854775807ns") == std::numeric_limits<std::int64_t>::max());
    BOOST_TEST(parse_err("9223372036854775808ns") == R"(time: invalid duration "9223372036854775808ns")");
    BOOST_TEST(parse_ok("2562047h") == 2562047LL * 3600 * ns_per_s);
    BOOST_TEST(parse_err("2562048h") == R"(time: invalid duration "2562048h")");
    BOOST_TEST(parse_err("2562047h48m") == R"(time: invalid duration "2562047h48m")");
    BOOST_TEST(parse_err("99999999999999999999s") == R"(time: invalid duration "99999999999999999999s")");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(duration_format)

BOOST_AUTO_TEST_CASE(examples_from_consul_messages) {
    BOOST_TEST(format_go_duration(10s) == "10s");
    BOOST_TEST(format_go_duration(24h) == "24h0m0s");
    BOOST_TEST(format_go_duration(1500ms) == "1.5s");
    BOOST_TEST(format_go_duration(500ms) == "500ms");
    BOOST_TEST(format_go_duration(0ns) == "0s");
    BOOST_TEST(format_go_duration(1us) == "1\xC2\xB5s");  // Go prints U+00B5
}

BOOST_AUTO_TEST_CASE(sub_second_units) {
    BOOST_TEST(format_go_duration(1ns) == "1ns");
    BOOST_TEST(format_go_duration(999ns) == "999ns");
    BOOST_TEST(format_go_duration(1500ns) == "1.5\xC2\xB5s");
    BOOST_TEST(format_go_duration(100ms) == "100ms");
    BOOST_TEST(format_go_duration(1'000'001ns) == "1.000001ms");
    BOOST_TEST(format_go_duration(999'999'999ns) == "999.999999ms");
}

BOOST_AUTO_TEST_CASE(seconds_minutes_hours) {
    BOOST_TEST(format_go_duration(1s) == "1s");
    BOOST_TEST(format_go_duration(59s) == "59s");
    BOOST_TEST(format_go_duration(60s) == "1m0s");
    BOOST_TEST(format_go_duration(90s) == "1m30s");
    BOOST_TEST(format_go_duration(1h) == "1h0m0s");
    BOOST_TEST(format_go_duration(90min) == "1h30m0s");
    BOOST_TEST(format_go_duration(2h + 45min) == "2h45m0s");
    BOOST_TEST(format_go_duration(1h + 1ns) == "1h0m0.000000001s");
    BOOST_TEST(format_go_duration(15s + 250ms) == "15.25s");
}

BOOST_AUTO_TEST_CASE(negative) {
    BOOST_TEST(format_go_duration(-1s) == "-1s");
    BOOST_TEST(format_go_duration(-500ms) == "-500ms");
    BOOST_TEST(format_go_duration(-90s) == "-1m30s");
    BOOST_TEST(format_go_duration(-1ns) == "-1ns");
}

BOOST_AUTO_TEST_CASE(extremes) {
    BOOST_TEST(format_go_duration(nanoseconds{std::numeric_limits<std::int64_t>::max()}) ==
               "2562047h47m16.854775807s");
    BOOST_TEST(format_go_duration(nanoseconds{std::numeric_limits<std::int64_t>::min()}) ==
               "-2562047h47m16.854775808s");
}

BOOST_AUTO_TEST_CASE(round_trip) {
    nanoseconds const samples[] = {0ns, 1ns, 1us, 1500ns, 500ms, 1500ms, 10s, 90s, 1h + 1ns, 24h, -15s,
                                   123456789012ns, nanoseconds{std::numeric_limits<std::int64_t>::max()}};
    for (nanoseconds d : samples) {
        auto text = format_go_duration(d);
        auto r = parse_go_duration(text);
        BOOST_TEST_CONTEXT("duration " << d.count() << "ns printed as " << text) {
            BOOST_REQUIRE(r.value.has_value());
            BOOST_TEST(r.value->count() == d.count());
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()
