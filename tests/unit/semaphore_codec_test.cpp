// The Go api.Semaphore's encodings: `.lock` as Go's json.Marshal writes it,
// json.Unmarshal's leniency and strictness, path.Join for the keys.
#include <boost/test/unit_test.hpp>

#include "consul/semaphore_codec.hpp"
#include "net/go_path.hpp"

using tenure::detail::decode_semaphore_lock;
using tenure::detail::encode_semaphore_lock;
using tenure::detail::go_json_quote;
using tenure::detail::go_path_join;
using tenure::detail::semaphore_lock;

BOOST_AUTO_TEST_SUITE(semaphore_codec)

BOOST_AUTO_TEST_CASE(lock_is_compact_with_sorted_holders) {
    semaphore_lock l;
    l.limit = 3;
    BOOST_TEST(encode_semaphore_lock(l) == R"({"Limit":3,"Holders":{}})");
    l.holders["b6e1a1c2-0000-4000-8000-000000000002"] = true;
    l.holders["0a9f3d1e-0000-4000-8000-000000000001"] = true;
    l.holders["Zed"] = false;
    BOOST_TEST(encode_semaphore_lock(l) ==
               R"({"Limit":3,"Holders":{"0a9f3d1e-0000-4000-8000-000000000001":true,"Zed":false,)"
               R"("b6e1a1c2-0000-4000-8000-000000000002":true}})");
}

BOOST_AUTO_TEST_CASE(strings_are_escaped_as_go_does) {
    BOOST_TEST(go_json_quote("plain") == "\"plain\"");
    BOOST_TEST(go_json_quote("a\"b\\c") == R"("a\"b\\c")");
    BOOST_TEST(go_json_quote("<&>") == R"("\u003c\u0026\u003e")");
    BOOST_TEST(go_json_quote("\n\r\t\b\f") == R"("\n\r\t\b\f")");
    BOOST_TEST(go_json_quote(std::string("\x01\x1f", 2)) == R"("\u0001\u001f")");
    BOOST_TEST(go_json_quote("\x7f") == "\"\x7f\"");
    BOOST_TEST(go_json_quote("caf\xc3\xa9") == "\"caf\xc3\xa9\"");            // valid UTF-8 as is
    BOOST_TEST(go_json_quote("\xe2\x80\xa8\xe2\x80\xa9") == R"("\u2028\u2029")");
    BOOST_TEST(go_json_quote("a\xff" "b") == R"("a\ufffdb")");                 // invalid byte
    BOOST_TEST(go_json_quote("\xed\xa0\x80") == R"("\ufffd\ufffd\ufffd")");   // a surrogate
    BOOST_TEST(go_json_quote("\xc0\xaf") == R"("\ufffd\ufffd")");             // overlong
    BOOST_TEST(go_json_quote("\xf0\x9f\x98\x80") == "\"\xf0\x9f\x98\x80\"");
}

BOOST_AUTO_TEST_CASE(decodes_what_go_decodes) {
    auto l = decode_semaphore_lock(R"({"Limit":2,"Holders":{"a":true,"b":true}})");
    BOOST_REQUIRE(l.has_value());
    BOOST_TEST(l->limit == 2);
    BOOST_TEST(l->holders.size() == 2u);
    // Field names match case-insensitively; unknown fields are ignored.
    l = decode_semaphore_lock(R"({"limit":4,"holders":{"x":false},"Other":[1]})");
    BOOST_REQUIRE(l.has_value());
    BOOST_TEST(l->limit == 4);
    BOOST_TEST(l->holders.count("x") == 1u);
    BOOST_TEST(!l->holders.at("x"));
    l = decode_semaphore_lock(R"({"Limit":1,"Holders":null})");
    BOOST_REQUIRE(l.has_value());
    BOOST_TEST(l->holders.empty());
    l = decode_semaphore_lock("null");
    BOOST_REQUIRE(l.has_value());
    BOOST_TEST(l->limit == 0);
    // Round trip.
    semaphore_lock w;
    w.limit = 5;
    w.holders["s1"] = true;
    w.holders["s<2>"] = true;
    auto r = decode_semaphore_lock(encode_semaphore_lock(w));
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->limit == 5);
    BOOST_TEST((r->holders == w.holders));
}

BOOST_AUTO_TEST_CASE(rejects_what_go_rejects) {
    BOOST_TEST(!decode_semaphore_lock("").has_value());
    BOOST_TEST(!decode_semaphore_lock("not json").has_value());
    BOOST_TEST(!decode_semaphore_lock("[]").has_value());
    BOOST_TEST(!decode_semaphore_lock(R"({"Limit":2.5})").has_value());
    BOOST_TEST(!decode_semaphore_lock(R"({"Limit":"2"})").has_value());
    BOOST_TEST(!decode_semaphore_lock(R"({"Limit":1e1})").has_value());
    BOOST_TEST(!decode_semaphore_lock(R"({"Holders":{"a":1}})").has_value());
    BOOST_TEST(!decode_semaphore_lock(R"({"Holders":[]})").has_value());
}

BOOST_AUTO_TEST_CASE(keys_are_joined_like_go_path_join) {
    BOOST_TEST(go_path_join("service/sem", ".lock") == "service/sem/.lock");
    BOOST_TEST(go_path_join("service/sem/", "abc") == "service/sem/abc");
    BOOST_TEST(go_path_join("a//b/./c/..", "d") == "a/b/d");
    BOOST_TEST(go_path_join("", "x") == "x");
    BOOST_TEST(go_path_join("/a", "b") == "/a/b");
    BOOST_TEST(go_path_join("", "") == "");
}

BOOST_AUTO_TEST_SUITE_END()
