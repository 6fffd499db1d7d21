// Socket-free tests of tenure::consul's JSON codec (src/consul/codec.hpp): the
// bodies the client sends, read back as Consul's agent reads them, and the
// answers it decodes, in the shapes Consul writes (api/kv.go, api/session.go,
// api/txn.go; ../shared/reference/consul-semantics.md).
#include "consul/codec.hpp"
#include "net/wire.hpp"

#include <boost/beast/http/fields.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <limits>
#include <string>

namespace consul = tenure::consul;
namespace cd = tenure::consul::detail;
namespace json = boost::json;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(consul_codec)

BOOST_AUTO_TEST_CASE(a_kv_entry_decodes_with_base64_value_and_all_64_bits_of_flags) {
    auto const v = json::parse(R"({"Key":"svc/leader","Value":"bm9kZS0x","Flags":18446744073709551615,
        "LockIndex":7,"Session":"8d3e","CreateIndex":11,"ModifyIndex":42})");
    auto const p = cd::decode_kv(v);
    BOOST_TEST(p.key == "svc/leader");
    BOOST_REQUIRE(p.value.has_value());
    BOOST_TEST(*p.value == "node-1");
    BOOST_TEST(p.flags == std::numeric_limits<std::uint64_t>::max());
    BOOST_TEST(p.lock_index == 7u);
    BOOST_TEST(p.session == "8d3e");
    BOOST_TEST(p.create_index == 11u);
    BOOST_TEST(p.modify_index == 42u);
}

BOOST_AUTO_TEST_CASE(a_null_value_is_no_value_and_missing_fields_read_empty) {
    auto const p = cd::decode_kv(json::parse(R"({"Key":"k","Value":null})"));
    BOOST_TEST(!p.value.has_value());
    BOOST_TEST(p.session.empty());
    BOOST_TEST(p.lock_index == 0u);
    BOOST_TEST(cd::decode_kv_list("null").empty());
    BOOST_TEST(cd::decode_kv_list(" [ ] ").empty());
}

BOOST_AUTO_TEST_CASE(a_list_leaves_out_the_entries_its_reader_already_holds) {
    auto const body = R"([{"Key":"p/a","Value":"YQ==","ModifyIndex":5},
        {"Key":"p/b","Value":"Yg==","ModifyIndex":6},{"Key":"p/c","Value":null,"ModifyIndex":7}])";
    std::vector<std::string> asked;
    auto const list = cd::decode_kv_list(body, [&](std::string_view key, std::uint64_t modify_index) {
        asked.emplace_back(std::string(key) + "@" + std::to_string(modify_index));
        return key == "p/b";  // held at index 6 already
    });
    BOOST_TEST(asked == (std::vector<std::string>{"p/a@5", "p/b@6", "p/c@7"}), boost::test_tools::per_element());
    BOOST_REQUIRE_EQUAL(list.size(), 2u);
    BOOST_TEST(list[0].key == "p/a");
    BOOST_TEST(list[0].value.value_or("") == "a");
    BOOST_TEST(list[1].key == "p/c");
    // An entry the reader does not hold is still checked in full.
    BOOST_CHECK_THROW(cd::decode_kv_list(R"([{"Key":"p/a","Value":"not base64!"}])",
                                         [](std::string_view, std::uint64_t) { return false; }),
                      cd::decode_failure);
    BOOST_TEST(cd::decode_kv_list("null", [](std::string_view, std::uint64_t) { return true; }).empty());
}

// The list is decoded as it is parsed, with no document; each entry must read
// exactly as decode_kv reads it from the parsed document.
BOOST_AUTO_TEST_CASE(a_list_reads_each_entry_as_decode_kv_reads_it) {
    // Field order as Consul writes it and shuffled; escapes in the key; an
    // unknown field holding an object and an array; a Value longer than the
    // parser's buffer, with escaped slashes, which reaches the reader in parts.
    std::string long_value;
    for (int i = 0; i < 3000; ++i) long_value += "ab\\/c";  // base64 "ab/c", its slash escaped
    std::string const body = R"([{"LockIndex":2,"Key":"svc/a","Flags":3304740253564472344,"Value":"bm9kZS0x",)"
                             R"("Session":"8d3e","CreateIndex":11,"ModifyIndex":42},)"
                             R"({"ModifyIndex":7,"Extra":{"Key":"nested","Value":[1,{"x":null}]},"Key":"p\/a\u0062",)"
                             R"("Value":null,"Session":null,"Flags":0},)"
                             R"({"Key":"long","Value":")" + long_value + R"("}])";
    auto const list = cd::decode_kv_list(body);
    auto const doc = json::parse(body).as_array();
    BOOST_REQUIRE_EQUAL(list.size(), doc.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
        auto const want = cd::decode_kv(doc[i]);
        BOOST_TEST(list[i].key == want.key);
        BOOST_TEST(list[i].value.has_value() == want.value.has_value());
        BOOST_TEST(list[i].value.value_or("") == want.value.value_or(""));
        BOOST_TEST(list[i].flags == want.flags);
        BOOST_TEST(list[i].lock_index == want.lock_index);
        BOOST_TEST(list[i].session == want.session);
        BOOST_TEST(list[i].create_index == want.create_index);
        BOOST_TEST(list[i].modify_index == want.modify_index);
    }
    BOOST_TEST(list[1].key == "p/ab");
    BOOST_TEST(!list[1].value.has_value());
    BOOST_TEST(list[2].value.value_or("").size() == 3000u * 3u);

    // What decode_kv refuses in an entry, the list refuses too, with its words.
    auto refused = [](std::string const& entries) {
        try {
            cd::decode_kv_list(entries);
        } catch (cd::decode_failure const& f) {
            return f.what;
        }
        return std::string("accepted");
    };
    BOOST_TEST(refused(R"([{"Key":"k","Flags":1.5}])") == "Flags is not an unsigned integer");
    BOOST_TEST(refused(R"([{"Key":"k","LockIndex":-1}])") == "LockIndex is not an unsigned integer");
    BOOST_TEST(refused(R"([{"Key":"k","ModifyIndex":"7"}])") == "ModifyIndex is not an unsigned integer");
    BOOST_TEST(refused(R"([{"Key":7}])") == "Key is not a string");
    BOOST_TEST(refused(R"([{"Key":"k","Session":true}])") == "Session is not a string");
    BOOST_TEST(refused(R"([{"Key":"k","Value":{"a":1}}])") == "Value is not a string");
    BOOST_TEST(refused(R"([{"Key":"k","CreateIndex":[1]}])") == "CreateIndex is not an unsigned integer");
    BOOST_TEST(refused(R"([{"Key":"k","Value":"not base64!"}])") == "Value is not base64 (length 11)");
    // The last of a field given twice counts, as in the parsed object; the
    // checks come in decode_kv's order.
    BOOST_TEST(refused(R"([{"Key":"k","Flags":1.5,"Flags":2}])") == "accepted");
    BOOST_TEST(refused(R"([{"Key":"k","Flags":2,"Flags":-2}])") == "Flags is not an unsigned integer");
    BOOST_TEST(refused(R"([{"Key":"k","Session":7,"Value":"!!"}])") == "Value is not base64 (length 2)");
    BOOST_TEST(refused(R"([{"Key":"k"},"k2"])") == "KV entry is not a JSON object");
    BOOST_TEST(refused(R"([null])") == "KV entry is not a JSON object");
    BOOST_TEST(refused(R"([[{"Key":"k"}]])") == "KV entry is not a JSON object");
    BOOST_TEST(refused(R"({"Key":"k"})") == "KV list is not a JSON array");
    BOOST_TEST(refused(R"("k")") == "KV list is not a JSON array");
    BOOST_TEST(refused(R"(7)") == "KV list is not a JSON array");
    BOOST_TEST(refused(R"([{"Key":"k"}] [])").starts_with("invalid JSON"));
    BOOST_TEST(refused(R"([{"Key":"k"})").starts_with("invalid JSON"));
    BOOST_TEST(refused("").starts_with("invalid JSON"));
}

BOOST_AUTO_TEST_CASE(bad_answers_are_decode_failures_never_guesses) {
    BOOST_CHECK_THROW(cd::decode_kv(json::parse(R"({"Key":"k","Value":"not base64!"})")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_kv(json::parse(R"({"Key":"k","Flags":1.5})")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_kv(json::parse(R"({"Key":"k","LockIndex":-1})")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_kv(json::parse(R"({"Key":7})")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_kv(json::parse(R"([])")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_kv_list(R"({"Key":"k"})"), cd::decode_failure);
    BOOST_CHECK_THROW(cd::parse_json("{"), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_session(json::parse(R"({"ID":"a","Behavior":"explode"})")), cd::decode_failure);
    BOOST_CHECK_THROW(cd::decode_session(json::parse(R"({"ID":"a","TTL":"15"})")), cd::decode_failure);
}

BOOST_AUTO_TEST_CASE(a_session_decodes_lock_delay_in_ns_and_ttl_as_a_go_duration) {
    auto const s = cd::decode_session(json::parse(R"({"ID":"adf4238a","Name":"job","Node":"n1",
        "LockDelay":15000000000,"Behavior":"delete","TTL":"1m30s","NodeChecks":["serfHealth"],
        "ServiceChecks":[{"ID":"web","Namespace":""}],"CreateIndex":3,"ModifyIndex":4})"));
    BOOST_TEST(s.id == "adf4238a");
    BOOST_TEST(s.name == "job");
    BOOST_TEST(s.node == "n1");
    BOOST_TEST(s.lock_delay.count() == std::chrono::nanoseconds(15s).count());
    BOOST_TEST((s.behavior == consul::session_behavior::delete_keys));
    BOOST_TEST(s.ttl.count() == std::chrono::nanoseconds(90s).count());
    BOOST_TEST(s.node_checks == std::vector<std::string>{"serfHealth"});
    BOOST_TEST(s.service_checks == std::vector<std::string>{"web"});
    BOOST_TEST(s.create_index == 3u);
    BOOST_TEST(cd::decode_session_list(json::parse(R"([{"ID":"a"},{"ID":"b"}])")).size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_session_request_sends_lock_delay_zero_and_rounds_sub_ms_up) {
    consul::session_request r;
    r.name = "job";
    r.ttl = 10s;
    r.lock_delay = 0s;
    auto o = json::parse(cd::encode_session_request(r)).as_object();
    BOOST_TEST(o.at("Name").as_string() == "job");
    BOOST_TEST(o.at("TTL").as_string() == "10s");
    BOOST_TEST(o.at("LockDelay").as_string() == "0ms");  // the Go api omits 0 and gets 15s
    BOOST_TEST(o.at("Behavior").as_string() == "release");
    BOOST_TEST(!o.contains("NodeChecks"));  // nullopt: the server's default
    r.lock_delay = 300us;
    r.node_checks = std::vector<std::string>{};
    r.service_checks = {"web"};
    o = json::parse(cd::encode_session_request(r)).as_object();
    BOOST_TEST(o.at("LockDelay").as_string() == "1ms");
    BOOST_TEST(o.at("NodeChecks").as_array().empty());  // empty: no node checks at all
    BOOST_TEST(o.at("ServiceChecks").as_array().at(0).as_object().at("ID").as_string() == "web");
}

BOOST_AUTO_TEST_CASE(a_txn_encodes_each_op_as_consul_reads_kv_txn_ops) {
    std::vector<consul::txn_op> ops(2);
    ops[0].verb = "lock";
    ops[0].key = "k";
    ops[0].value = "v";
    ops[0].flags = consul::lock_flag_value;
    ops[0].session = "s1";
    ops[1].verb = "check-index";
    ops[1].key = "k2";
    ops[1].index = 9;
    auto const a = json::parse(cd::encode_txn(ops)).as_array();
    BOOST_REQUIRE_EQUAL(a.size(), 2u);
    auto const& kv0 = a[0].as_object().at("KV").as_object();
    BOOST_TEST(kv0.at("Verb").as_string() == "lock");
    BOOST_TEST(kv0.at("Value").as_string() == "dg==");
    BOOST_TEST(kv0.at("Flags").to_number<std::uint64_t>() == consul::lock_flag_value);
    BOOST_TEST(kv0.at("Session").as_string() == "s1");
    auto const& kv1 = a[1].as_object().at("KV").as_object();
    BOOST_TEST(!kv1.contains("Value"));
    BOOST_TEST(kv1.at("Index").to_number<std::uint64_t>() == 9u);
}

// The body is written by hand (no json::array built first): it must be what
// json::serialize made of the same ops, strings escaped as JSON asks.
BOOST_AUTO_TEST_CASE(a_txn_body_is_what_serializing_the_ops_as_json_gives) {
    std::vector<consul::txn_op> ops(3);
    ops[0].verb = "lock";
    ops[0].key = "jobs/\"quoted\"\\back\nline\x01\u00e9t\u00e9";
    ops[0].value = std::string("bytes\0\xff", 7);
    ops[0].flags = std::numeric_limits<std::uint64_t>::max();
    ops[0].session = "s\"1";
    ops[1].verb = "check-index";
    ops[1].key = "k2";
    ops[1].index = 9;
    ops[2].verb = "get";
    ops[2].key = std::string(600, 'x');  // longer than one read of the serializer
    json::array expected;
    for (auto const& op : ops) {
        json::object kv;
        kv["Verb"] = op.verb;
        kv["Key"] = op.key;
        if (op.value) kv["Value"] = tenure::detail::base64_encode(*op.value);
        kv["Flags"] = op.flags;
        kv["Index"] = op.index;
        kv["Session"] = op.session;
        expected.emplace_back(json::object{{"KV", std::move(kv)}});
    }
    auto const body = cd::encode_txn(ops);
    BOOST_TEST(body == json::serialize(expected));
    auto const back = json::parse(body).as_array();
    BOOST_TEST(back[0].as_object().at("KV").as_object().at("Key").as_string() == ops[0].key);
    BOOST_TEST(cd::encode_txn({}) == "[]");
}

BOOST_AUTO_TEST_CASE(txn_answers_committed_and_rolled_back) {
    auto const ok = cd::decode_txn_result(
        R"({"Results":[{"KV":{"Key":"k","LockIndex":3,"Session":"s1","ModifyIndex":20}}],"Errors":null})", true);
    BOOST_TEST(ok.committed);
    BOOST_REQUIRE_EQUAL(ok.results.size(), 1u);
    BOOST_TEST(ok.results[0].lock_index == 3u);
    auto const no = cd::decode_txn_result(
        R"({"Results":null,"Errors":[{"OpIndex":0,"What":"failed session check for key \"k\""}]})", false);
    BOOST_TEST(!no.committed);
    BOOST_REQUIRE_EQUAL(no.errors.size(), 1u);
    BOOST_TEST(no.errors[0].op_index == 0u);
    BOOST_TEST(no.errors[0].what.find("session check") != std::string::npos);
    BOOST_CHECK_THROW(cd::decode_txn_result(R"({"Errors":[]})", false), cd::decode_failure);
}

// The answer is read as the parser walks it (no document built): what it
// takes, what it passes over, and how it says what is wrong.
BOOST_AUTO_TEST_CASE(txn_answers_are_read_field_by_field) {
    auto const ok = cd::decode_txn_result(
        R"({"Index":7,"Results":[{"KV":{"Key":"a","Value":"dg==","Flags":3,"LockIndex":2,"Session":"s","CreateIndex":4,)"
        R"("ModifyIndex":5,"Extra":{"x":[1,{"y":null}]}}},{"Session":{"ID":"s"}},{"KV":null},)"
        R"({"Other":[1,2],"KV":{"Key":"b","Session":null,"Value":null}}],"Errors":"ignored when committed"})",
        true);
    BOOST_REQUIRE_EQUAL(ok.results.size(), 2u);
    BOOST_TEST(ok.results[0].key == "a");
    BOOST_TEST(ok.results[0].value.value_or("") == "v");
    BOOST_TEST(ok.results[0].flags == 3u);
    BOOST_TEST(ok.results[0].lock_index == 2u);
    BOOST_TEST(ok.results[0].session == "s");
    BOOST_TEST(ok.results[0].create_index == 4u);
    BOOST_TEST(ok.results[0].modify_index == 5u);
    BOOST_TEST(ok.results[1].key == "b");
    BOOST_TEST(!ok.results[1].value.has_value());
    BOOST_TEST(ok.results[1].session.empty());
    BOOST_TEST(cd::decode_txn_result(R"({"Results":null})", true).results.empty());
    BOOST_TEST(cd::decode_txn_result(R"({})", true).results.empty());

    auto const no = cd::decode_txn_result(
        R"({"Results":[1],"Errors":[{"OpIndex":1,"What":"a \"quoted\" why","More":{}},{"OpIndex":null,"What":null}]})",
        false);
    BOOST_REQUIRE_EQUAL(no.errors.size(), 2u);
    BOOST_TEST(no.errors[0].op_index == 1u);
    BOOST_TEST(no.errors[0].what == "a \"quoted\" why");
    BOOST_TEST(no.errors[1].op_index == 0u);
    BOOST_TEST(no.errors[1].what.empty());

    auto const failure = [](std::string_view body, bool committed) {
        try {
            (void)cd::decode_txn_result(body, committed);
        } catch (cd::decode_failure const& f) {
            return f.what;
        }
        return std::string("(no failure)");
    };
    BOOST_TEST(failure("[]", true) == "txn answer is not a JSON object");
    BOOST_TEST(failure("null", true) == "txn answer is not a JSON object");
    BOOST_TEST(failure(R"({"Results":{}})", true) == "Results is not a JSON array");
    BOOST_TEST(failure(R"({"Results":"x"})", true) == "Results is not a JSON array");
    BOOST_TEST(failure(R"({"Results":[null]})", true) == "Results entry is not a JSON object");
    BOOST_TEST(failure(R"({"Results":[{"KV":[]}]})", true) == "KV entry is not a JSON object");
    BOOST_TEST(failure(R"({"Results":[{"KV":"x"}]})", true) == "KV entry is not a JSON object");
    BOOST_TEST(failure(R"({"Results":[{"KV":{"Key":1}}]})", true) == "Key is not a string");
    BOOST_TEST(failure(R"({"Results":[{"KV":{"LockIndex":-1}}]})", true) == "LockIndex is not an unsigned integer");
    BOOST_TEST(failure(R"({"Results":[{"KV":{"Value":"!"}}]})", true) == "Value is not base64 (length 1)");
    BOOST_TEST(failure(R"({"Errors":[{"OpIndex":"1"}]})", false) == "OpIndex is not an unsigned integer");
    BOOST_TEST(failure(R"({"Errors":[{"OpIndex":1.5}]})", false) == "OpIndex is not an unsigned integer");
    BOOST_TEST(failure(R"({"Errors":[{"What":{}}]})", false) == "What is not a string");
    BOOST_TEST(failure(R"({"Errors":[[]]})", false) == "Errors entry is not a JSON object");
    BOOST_TEST(failure(R"({"Errors":null})", false) == "409 without Errors");
    BOOST_TEST(failure(R"({"Results":[)", true).starts_with("invalid JSON"));
    BOOST_TEST(failure(R"({} {})", true).starts_with("invalid JSON"));
}

BOOST_AUTO_TEST_CASE(query_meta_index_is_never_below_one) {
    boost::beast::http::fields h;
    h.set("X-Consul-Index", " 42 ");
    h.set("X-Consul-KnownLeader", "true");
    h.set("X-Consul-LastContact", "7");
    auto m = cd::decode_meta(h);
    BOOST_TEST(m.index == 42u);
    BOOST_TEST(m.known_leader);
    BOOST_TEST(m.last_contact_ms == 7u);
    h.set("X-Consul-Index", "0");
    BOOST_TEST(cd::decode_meta(h).index == 1u);
    BOOST_TEST(cd::decode_meta(boost::beast::http::fields{}).index == 1u);
}

BOOST_AUTO_TEST_CASE(acquire_answers_are_true_or_false_only) {
    BOOST_TEST(cd::parse_bool("true\n"));
    BOOST_TEST(!cd::parse_bool(" false"));
    BOOST_CHECK_THROW(cd::parse_bool("yes"), cd::decode_failure);
    BOOST_CHECK_THROW(cd::parse_bool(""), cd::decode_failure);
}

BOOST_AUTO_TEST_SUITE_END()
