// Socket-free tests of tenure::etcd's JSON codec (src/etcd/codec.hpp): the
// gateway's wire conventions (base64 bytes, int64 as strings, omitted zero
// fields, two error shapes) and the streamed-answer splitter, fed with every
// split of real watch output. The samples are the shapes recorded from etcd
// 3.4.23 in docs/reference (etcd-gateway.md).
#include "etcd/codec.hpp"

#include "net/wire.hpp"
#include <tenure/error.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/test/unit_test.hpp>

#include <random>
#include <string>
#include <vector>

namespace etcd = tenure::etcd;
namespace ed = tenure::etcd::detail;
namespace json = boost::json;

namespace {

// A watch stream as the gateway sends it: one message per line. Includes a
// string with an escaped newline and braces, which a naive line/brace
// splitter would cut wrongly.
std::string const created_msg =
    R"({"result":{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","revision":"7","raft_term":"2"},"created":true}})";
std::string const put_msg =
    R"({"result":{"header":{"revision":"8"},"events":[{"kv":{"key":"L3cveA==","create_revision":"8","mod_revision":"8","version":"1","value":"e1wifX0KfQ=="}}]}})";
std::string const put2_msg =
    R"({"result":{"header":{"revision":"9"},"events":[{"kv":{"key":"L3cveA==","create_revision":"8","mod_revision":"9","version":"2","value":"Mg==","lease":"9223372036854775807"},"prev_kv":{"key":"L3cveA==","create_revision":"8","mod_revision":"8","version":"1","value":"MQ=="}}],"note":"a } { \" \n tricky string"}})";
std::string const delete_msg =
    R"({"result":{"header":{"revision":"10"},"watch_id":"1","events":[{"type":"DELETE","kv":{"key":"L3cveA==","mod_revision":"10"}}]}})";

std::string stream_text(std::string_view sep) {
    return created_msg + std::string(sep) + put_msg + std::string(sep) + put2_msg + std::string(sep) + delete_msg +
           std::string(sep);
}

std::vector<std::string> serialized(ed::ndjson_decoder& d) {
    std::vector<std::string> out;
    while (d.has_value()) out.push_back(json::serialize(d.pop()));
    return out;
}

std::vector<std::string> expected_values() {
    return {json::serialize(json::parse(created_msg)), json::serialize(json::parse(put_msg)),
            json::serialize(json::parse(put2_msg)), json::serialize(json::parse(delete_msg))};
}

template <class F>
etcd::api_error expect_api_error(F&& f) {
    try {
        f();
    } catch (etcd::api_error const& e) {
        return e;
    }
    BOOST_FAIL("expected an api_error");
    throw std::logic_error("unreachable");
}

}  // namespace

BOOST_AUTO_TEST_SUITE(etcd_codec)

BOOST_AUTO_TEST_CASE(int64_parsing) {
    BOOST_TEST(ed::parse_i64("0").value() == 0);
    BOOST_TEST(ed::parse_i64("-1").value() == -1);
    BOOST_TEST(ed::parse_i64("9223372036854775807").value() == INT64_MAX);
    BOOST_TEST(ed::parse_i64("-9223372036854775808").value() == INT64_MIN);
    BOOST_TEST(!ed::parse_i64("9223372036854775808"));
    BOOST_TEST(!ed::parse_i64(""));
    BOOST_TEST(!ed::parse_i64("+1"));
    BOOST_TEST(!ed::parse_i64("1 "));
    BOOST_TEST(!ed::parse_i64("0x10"));

    // Strings or numbers; missing or null is 0.
    auto const o = json::parse(R"({"a":"8946016005763738118","b":12,"c":null,"d":"-1","e":"x","f":1.5})").as_object();
    BOOST_TEST(ed::get_i64(o, "a") == 8946016005763738118LL);
    BOOST_TEST(ed::get_i64(o, "b") == 12);
    BOOST_TEST(ed::get_i64(o, "c") == 0);
    BOOST_TEST(ed::get_i64(o, "missing") == 0);
    BOOST_TEST(ed::get_i64(o, "d") == -1);
    BOOST_CHECK_THROW(ed::get_i64(o, "e"), ed::decode_failure);
    BOOST_CHECK_THROW(ed::get_i64(o, "f"), ed::decode_failure);
    auto const u = json::parse(R"({"id":"18446744073709551615"})").as_object();
    BOOST_TEST(ed::get_u64(u, "id") == UINT64_MAX);
}

BOOST_AUTO_TEST_CASE(prefix_end) {
    BOOST_TEST(etcd::prefix_end("/svc/") == "/svc0");
    BOOST_TEST(etcd::prefix_end("a") == "b");
    BOOST_TEST(etcd::prefix_end(std::string("a\xff", 2)) == "b");
    BOOST_TEST(etcd::prefix_end(std::string("a\xfe\xff", 3)) == std::string("a\xff", 2));
    BOOST_TEST(etcd::prefix_end(std::string("\xff\xff", 2)) == std::string(1, '\0'));
    BOOST_TEST(etcd::prefix_end("") == std::string(1, '\0'));
}

BOOST_AUTO_TEST_CASE(key_value_decoding) {
    // Binary bytes, omitted zero fields, int64 beyond 2^53.
    std::string const binary("\0\x01\xff\n\"", 5);
    json::object o;
    o["key"] = tenure::detail::base64_encode(binary);
    o["create_revision"] = "4294967297";
    o["mod_revision"] = "9007199254740993";
    o["version"] = "1";
    o["lease"] = "7587823380406781187";
    auto const kv = ed::decode_kv(o);
    BOOST_TEST(kv.key == binary);
    BOOST_TEST(kv.value.empty());  // omitted: empty value
    BOOST_TEST(kv.create_revision == 4294967297LL);
    BOOST_TEST(kv.mod_revision == 9007199254740993LL);
    BOOST_TEST(kv.version == 1);
    BOOST_TEST(kv.lease == 7587823380406781187LL);

    // Unpadded or URL-safe base64 is not what the gateway sends.
    BOOST_CHECK_THROW(ed::decode_kv(json::parse(R"({"key":"YQ"})")), ed::decode_failure);
    BOOST_CHECK_THROW(ed::decode_kv(json::parse(R"({"key":"_-8="})")), ed::decode_failure);
    BOOST_CHECK_THROW(ed::decode_kv(json::parse(R"(["key"])")), ed::decode_failure);
}

BOOST_AUTO_TEST_CASE(request_encoding) {
    etcd::put_options po;
    po.lease = 8946016005763738118LL;
    po.prev_kv = true;
    auto const put = ed::put_request_json(std::string("k\0", 2), "", po);
    BOOST_TEST(json::serialize(put) == R"({"key":"awA=","value":"","lease":"8946016005763738118","prev_kv":true})");

    etcd::range_options ro;
    ro.limit = 1;
    ro.revision = 3000000000LL;
    ro.order = etcd::sort_order::descend;
    ro.target = etcd::sort_target::create;
    ro.max_create_revision = 41;
    auto const range = ed::range_request_json("/svc/", etcd::prefix_end("/svc/"), ro);
    BOOST_TEST(json::serialize(range) ==
               R"({"key":"L3N2Yy8=","range_end":"L3N2YzA=","limit":"1","revision":"3000000000",)"
               R"("sort_order":"DESCEND","sort_target":"CREATE","max_create_revision":"41"})");
    // Defaults send only the key.
    BOOST_TEST(json::serialize(ed::range_request_json("a", "", {})) == R"({"key":"YQ=="})");

    BOOST_TEST(json::serialize(ed::compare_json(etcd::compare::create_revision("k", etcd::compare_result::equal, 0))) ==
               R"({"key":"aw==","target":"CREATE","result":"EQUAL","create_revision":"0"})");
    BOOST_TEST(json::serialize(ed::compare_json(etcd::compare::mod_revision("k", etcd::compare_result::less, 5))) ==
               R"({"key":"aw==","target":"MOD","result":"LESS","mod_revision":"5"})");
    BOOST_TEST(json::serialize(ed::compare_json(etcd::compare::version("k", etcd::compare_result::greater, 2))) ==
               R"({"key":"aw==","target":"VERSION","result":"GREATER","version":"2"})");
    BOOST_TEST(json::serialize(ed::compare_json(etcd::compare::value_of("k", etcd::compare_result::not_equal, "v"))) ==
               R"({"key":"aw==","target":"VALUE","result":"NOT_EQUAL","value":"dg=="})");
    BOOST_TEST(json::serialize(ed::compare_json(etcd::compare::lease("k", etcd::compare_result::equal, 7))) ==
               R"({"key":"aw==","target":"LEASE","result":"EQUAL","lease":"7"})");

    std::vector<etcd::compare> cmp{etcd::compare::create_revision("k", etcd::compare_result::equal, 0)};
    std::vector<etcd::request_op> success{etcd::put_op{"k", "v", {}}};
    std::vector<etcd::request_op> failure{etcd::range_op{"k", "", {}}, etcd::delete_op{"a", "b", true}};
    auto const txn = json::parse(ed::encode_txn(cmp, success, failure));
    BOOST_TEST(json::serialize(txn.at("success")) == R"([{"request_put":{"key":"aw==","value":"dg=="}}])");
    BOOST_TEST(json::serialize(txn.at("failure")) ==
               R"([{"request_range":{"key":"aw=="}},{"request_delete_range":{"key":"YQ==","range_end":"Yg==","prev_kv":true}}])");

    etcd::watch_options wo;
    wo.start_revision = 5;
    wo.prev_kv = true;
    wo.no_put = true;
    BOOST_TEST(ed::encode_watch_create("/w/", "/w0", wo) ==
               R"({"create_request":{"key":"L3cv","range_end":"L3cw","start_revision":"5","prev_kv":true,"filters":["NOPUT"]}})");
    BOOST_TEST(ed::encode_lease_grant(10, 0) == R"({"TTL":"10"})");
    BOOST_TEST(ed::encode_lease_id(-5) == R"({"ID":"-5"})");
}

BOOST_AUTO_TEST_CASE(answers) {
    // Txn that failed: "succeeded" omitted; nested headers carry only the revision.
    auto const txn = ed::decode_txn(json::parse(
        R"({"header":{"cluster_id":"1","member_id":"2","revision":"6","raft_term":"3"},"responses":[{"response_range":{"header":{"revision":"6"},"kvs":[{"key":"aw==","create_revision":"6","mod_revision":"6","version":"1","value":"bm9kZUE=","lease":"8946016005763738138"}],"count":"1"}}]})"));
    BOOST_TEST(!txn.succeeded);
    BOOST_TEST(txn.header.revision == 6);
    BOOST_TEST(txn.header.member_id == 2u);
    BOOST_REQUIRE(txn.responses.size() == 1u);
    auto const& rr = std::get<etcd::range_response>(txn.responses[0]);
    BOOST_TEST(rr.header.revision == 6);
    BOOST_TEST(rr.count == 1);
    BOOST_REQUIRE(rr.kvs.size() == 1u);
    BOOST_TEST(rr.kvs[0].value == "nodeA");
    BOOST_TEST(rr.kvs[0].lease == 8946016005763738138LL);

    auto const ok = ed::decode_txn(json::parse(
        R"({"header":{"revision":"7"},"succeeded":true,"responses":[{"response_put":{"header":{"revision":"7"}}},{"response_delete_range":{"header":{},"deleted":"2"}}]})"));
    BOOST_TEST(ok.succeeded);
    BOOST_REQUIRE(ok.responses.size() == 2u);
    BOOST_TEST(std::holds_alternative<etcd::put_response>(ok.responses[0]));
    BOOST_TEST(std::get<etcd::delete_response>(ok.responses[1]).deleted == 2);

    // A missing key: no kvs, no count.
    auto const empty = ed::decode_range(json::parse(R"({"header":{"revision":"3"}})").as_object());
    BOOST_TEST(empty.kvs.empty());
    BOOST_TEST(empty.count == 0);
    BOOST_TEST(!empty.more);

    auto const grant = ed::decode_lease_grant(json::parse(R"({"header":{},"ID":"8946016005763738118","TTL":"10"})"));
    BOOST_TEST(grant.id == 8946016005763738118LL);
    BOOST_TEST(grant.ttl == 10);

    // Keep-alive: a streamed line; TTL omitted means the lease is unknown.
    BOOST_TEST(ed::decode_keepalive("{\"result\":{\"header\":{},\"ID\":\"5\",\"TTL\":\"30\"}}\n") == 30);
    BOOST_TEST(ed::decode_keepalive("{\"result\":{\"header\":{},\"ID\":\"12345\"}}\n") == 0);
    auto const e = expect_api_error([] {
        ed::decode_keepalive(
            R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})");
    });
    BOOST_TEST((e.code() == tenure::error::etcd_unavailable));
    BOOST_TEST(e.grpc_code() == 14);
    BOOST_TEST(e.http_status() == 503u);
    BOOST_TEST(e.server_message() == "etcdserver: no leader");

    auto const st = ed::decode_status(json::parse(
        R"({"header":{"member_id":"10276657743932975437"},"version":"3.4.23","dbSize":"32768","leader":"10276657743932975437","raftIndex":"61","raftTerm":"2"})"));
    BOOST_TEST(st.leader == 10276657743932975437ull);
    BOOST_TEST(st.header.member_id == st.leader);
    BOOST_TEST(st.version == "3.4.23");
}

BOOST_AUTO_TEST_CASE(errors) {
    auto const nf = ed::error_from_answer(
        404, R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested lease not found","code":5})");
    BOOST_TEST((nf.code() == tenure::error::lease_not_found));
    BOOST_TEST(nf.grpc_code() == 5);
    BOOST_TEST(nf.http_status() == 404u);
    BOOST_TEST(nf.server_message() == "etcdserver: requested lease not found");

    auto const comp = ed::error_from_answer(
        400, R"({"error":"etcdserver: mvcc: required revision has been compacted","message":"etcdserver: mvcc: required revision has been compacted","code":11})");
    BOOST_TEST((comp.code() == tenure::error::etcd_compacted));
    BOOST_TEST(comp.grpc_code() == 11);

    auto const bad = ed::error_from_answer(400, R"({"error":"etcdserver: key is not provided","code":3})");
    BOOST_TEST((bad.code() == tenure::error::etcd_error));
    BOOST_TEST(bad.server_message() == "etcdserver: key is not provided");

    auto const timeout = ed::error_from_answer(503, R"({"error":"etcdserver: request timed out","message":"etcdserver: request timed out","code":14})");
    BOOST_TEST((timeout.code() == tenure::error::etcd_unavailable));

    auto const text = ed::error_from_answer(404, "404 page not found\n");
    BOOST_TEST((text.code() == tenure::error::http_status));
    BOOST_TEST(text.grpc_code() == 0);
    BOOST_TEST(text.server_message() == "404 page not found");
}

BOOST_AUTO_TEST_CASE(watch_messages) {
    auto const created = ed::decode_watch_message(json::parse(created_msg));
    BOOST_TEST(created.created);
    BOOST_TEST(created.watch_id == 0);
    BOOST_TEST(created.header.revision == 7);
    BOOST_TEST(created.header.cluster_id == 14841639068965178418ull);

    auto const put = ed::decode_watch_message(json::parse(put_msg));
    BOOST_REQUIRE(put.events.size() == 1u);
    BOOST_TEST((put.events[0].type == etcd::event_type::put));  // "type" omitted
    BOOST_TEST(put.events[0].kv.key == "/w/x");
    BOOST_TEST(put.events[0].kv.value == "{\\\"}}\n}");
    BOOST_TEST(!put.events[0].prev_kv);

    auto const put2 = ed::decode_watch_message(json::parse(put2_msg));
    BOOST_REQUIRE(put2.events.size() == 1u);
    BOOST_REQUIRE(put2.events[0].prev_kv);
    BOOST_TEST(put2.events[0].prev_kv->value == "1");
    BOOST_TEST(put2.events[0].kv.lease == INT64_MAX);

    auto const del = ed::decode_watch_message(json::parse(delete_msg));
    BOOST_TEST(del.watch_id == 1);
    BOOST_REQUIRE(del.events.size() == 1u);
    BOOST_TEST((del.events[0].type == etcd::event_type::del));
    BOOST_TEST(del.events[0].kv.mod_revision == 10);

    auto const compacted = ed::decode_watch_message(
        json::parse(R"({"result":{"header":{"cluster_id":"1"},"canceled":true,"compact_revision":"20"}})"));
    BOOST_TEST(compacted.canceled);
    BOOST_TEST(compacted.compact_revision == 20);

    auto const progress = ed::decode_watch_message(json::parse(R"({"result":{"header":{"revision":"13"},"watch_id":"-1"}})"));
    BOOST_TEST(progress.watch_id == -1);
    BOOST_TEST(progress.events.empty());

    auto const e = expect_api_error([] {
        ed::decode_watch_message(json::parse(
            R"({"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}})"));
    });
    BOOST_TEST((e.code() == tenure::error::etcd_unavailable));
    BOOST_TEST(e.grpc_code() == 14);

    BOOST_CHECK_THROW(ed::decode_watch_message(json::parse(R"({"result":{"events":[{"type":"BOGUS"}]}})")),
                      ed::decode_failure);
}

// Every way of cutting the stream in two, and in three around each message
// boundary, yields the same values.
BOOST_AUTO_TEST_CASE(stream_split_anywhere) {
    auto const expected = expected_values();
    for (std::string_view sep : {"\n", "\r\n", "", " \n\n "}) {
        std::string const text = stream_text(sep);
        for (std::size_t i = 0; i <= text.size(); ++i) {
            ed::ndjson_decoder d;
            d.feed(std::string_view(text).substr(0, i));
            d.feed(std::string_view(text).substr(i));
            auto const got = serialized(d);
            BOOST_TEST_REQUIRE(got.size() == expected.size(), "split at " << i << " sep '" << sep << "'");
            BOOST_TEST(got == expected, boost::test_tools::per_element());
            BOOST_TEST(!d.mid_value());
        }
    }
}

BOOST_AUTO_TEST_CASE(stream_byte_by_byte_and_random_chunks) {
    auto const expected = expected_values();
    std::string const text = stream_text("\n");
    {
        ed::ndjson_decoder d;
        std::vector<std::string> got;
        for (char c : text) {
            d.feed(std::string_view(&c, 1));
            for (auto& s : serialized(d)) got.push_back(std::move(s));
        }
        BOOST_TEST(got == expected, boost::test_tools::per_element());
    }
    std::mt19937 rng(20240601);
    for (int round = 0; round < 500; ++round) {
        ed::ndjson_decoder d;
        std::vector<std::string> got;
        std::size_t pos = 0;
        while (pos < text.size()) {
            std::size_t const n = std::uniform_int_distribution<std::size_t>(0, 300)(rng);
            d.feed(std::string_view(text).substr(pos, n));
            pos += std::min(n, text.size() - pos);
            for (auto& s : serialized(d)) got.push_back(std::move(s));
        }
        BOOST_TEST_REQUIRE(got == expected, boost::test_tools::per_element());
    }
}

BOOST_AUTO_TEST_CASE(stream_partial_and_invalid) {
    ed::ndjson_decoder d;
    d.feed("\n\n");
    BOOST_TEST(!d.has_value());
    BOOST_TEST(!d.mid_value());
    d.feed(R"({"result":{"a)");
    BOOST_TEST(!d.has_value());
    BOOST_TEST(d.mid_value());
    d.feed(R"(":1}}{"x":2})");
    BOOST_TEST(d.queued() == 2u);
    BOOST_TEST(!d.mid_value());

    ed::ndjson_decoder bad;
    BOOST_CHECK_THROW(bad.feed("404 page not found\n"), ed::decode_failure);
    BOOST_CHECK_THROW(bad.feed("{}"), ed::decode_failure);  // unusable after a failure
}

BOOST_AUTO_TEST_SUITE_END()
