// The Consul HTTP API of the embedded agent (include/tenure/detail/agent/http_api.hpp),
// driven with hand-built Beast requests: no sockets, mock clock. Expectations
// are Consul's, per /work/shared/reference/consul-semantics.md §1, §2, §5, §6, §12.
#include <boost/test/unit_test.hpp>

#include "agent/http_api.hpp"
#include "agent/state.hpp"

#include <boost/beast/http/empty_body.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace agent = tenure::detail::agent;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using agent::time_point;
using std::chrono::nanoseconds;

namespace {

constexpr std::int64_t ns_per_s = 1'000'000'000;

agent::agent_config api_config() {
    agent::agent_config c;
    c.seed = 424242;
    return c;
}

agent::request make_request(http::verb method, std::string target, std::string body = {}) {
    agent::request req{method, target, 11};
    req.set(http::field::host, "127.0.0.1:8500");
    req.body() = std::move(body);
    req.prepare_payload();
    return req;
}

// Nanoseconds since the mock clock's epoch (printable in failures).
std::int64_t off(time_point t) { return t.time_since_epoch().count(); }

int status(agent::response const& r) { return static_cast<int>(r.result_int()); }

// A header's value, or "<absent>".
std::string hdr(agent::response const& r, std::string_view name) {
    auto it = r.find(boost::beast::string_view{name.data(), name.size()});
    if (it == r.end()) return "<absent>";
    auto v = it->value();
    return std::string(v.data(), v.size());
}

bool has_hdr(agent::response const& r, std::string_view name) { return hdr(r, name) != "<absent>"; }

json::value parse(agent::response const& r) {
    boost::system::error_code ec;
    auto v = json::parse(r.body(), ec);
    BOOST_REQUIRE_MESSAGE(!ec, "body is not JSON: " << r.body());
    return v;
}

std::string b64(std::string_view s) {
    static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < s.size(); i += 3) {
        unsigned n = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8 | (unsigned char)s[i + 2];
        out += tbl[n >> 18 & 63];
        out += tbl[n >> 12 & 63];
        out += tbl[n >> 6 & 63];
        out += tbl[n & 63];
    }
    if (i + 1 == s.size()) {
        unsigned n = (unsigned char)s[i] << 16;
        out += tbl[n >> 18 & 63];
        out += tbl[n >> 12 & 63];
        out += "==";
    } else if (i + 2 == s.size()) {
        unsigned n = (unsigned char)s[i] << 16 | (unsigned char)s[i + 1] << 8;
        out += tbl[n >> 18 & 63];
        out += tbl[n >> 12 & 63];
        out += tbl[n >> 6 & 63];
        out += '=';
    }
    return out;
}

bool is_uuid(std::string const& s) {
    static std::regex const re{"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"};
    return std::regex_match(s, re);
}

std::uint64_t u64(json::value const& v) {
    if (v.is_uint64()) return v.as_uint64();
    BOOST_REQUIRE_MESSAGE(v.is_int64(), "not an integer: " << json::serialize(v));
    BOOST_REQUIRE(v.as_int64() >= 0);
    return static_cast<std::uint64_t>(v.as_int64());
}

struct api_fixture {
    time_point t0{};
    agent::state_machine sm{api_config(), t0};
    agent::http_api api{sm};

    // A request that must be answered at once.
    agent::response call(http::verb method, std::string target, std::string body = {},
                         std::optional<time_point> now = std::nullopt) {
        auto req = make_request(method, std::move(target), std::move(body));
        agent::blocking_state bs;
        auto out = api.handle(req, now.value_or(t0), bs);
        BOOST_REQUIRE_MESSAGE(out.res.has_value(), "expected an immediate response for " << req.target());
        BOOST_TEST(!out.wait.has_value());
        return std::move(*out.res);
    }

    std::string create_session(std::string body = {}, std::optional<time_point> now = std::nullopt) {
        auto r = call(http::verb::put, "/v1/session/create", std::move(body), now);
        BOOST_REQUIRE_MESSAGE(status(r) == 200, "session create: " << status(r) << " " << r.body());
        auto v = parse(r);
        return std::string(v.as_object().at("ID").as_string());
    }

    json::object session_json(std::string const& id) {
        auto r = call(http::verb::get, "/v1/session/info/" + id);
        BOOST_REQUIRE(status(r) == 200);
        auto v = parse(r);
        BOOST_REQUIRE(v.as_array().size() == 1u);
        return v.as_array()[0].as_object();
    }

    json::object kv_json(std::string const& key) {
        auto r = call(http::verb::get, "/v1/kv/" + key);
        BOOST_REQUIRE_MESSAGE(status(r) == 200, "GET " << key << ": " << status(r));
        auto v = parse(r);
        BOOST_REQUIRE(v.as_array().size() == 1u);
        return v.as_array()[0].as_object();
    }

    std::int64_t lock_delay_of(std::string const& create_body) {
        auto id = create_session(create_body);
        auto const* s = sm.session_get(id);
        BOOST_REQUIRE(s);
        return s->lock_delay_ns;
    }
};

}  // namespace

// ===========================================================================
// Sessions (§1, §2)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(http_session)

BOOST_FIXTURE_TEST_CASE(create_requires_put, api_fixture) {
    for (auto m : {http::verb::get, http::verb::post, http::verb::delete_}) {
        auto r = call(m, "/v1/session/create");
        BOOST_TEST(status(r) == 405);
        BOOST_TEST(hdr(r, "Allow") == "OPTIONS,PUT");
    }
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(create_without_body_uses_defaults, api_fixture) {
    auto r = call(http::verb::put, "/v1/session/create");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(hdr(r, "Content-Type") == "application/json");
    auto v = parse(r);
    BOOST_REQUIRE(v.is_object());
    BOOST_TEST(v.as_object().size() == 1u);
    std::string id(v.as_object().at("ID").as_string());
    BOOST_TEST(is_uuid(id), id);
    auto const* s = sm.session_get(id);
    BOOST_REQUIRE(s);
    BOOST_TEST(s->node == "tenure");
    BOOST_TEST(s->lock_delay_ns == 15 * ns_per_s);
    BOOST_TEST((s->behavior == agent::session_behavior::release));
    BOOST_TEST(s->check_ids() == std::vector<std::string>{"serfHealth"}, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(create_accepts_lowercase_fields, api_fixture) {
    // python-consul sends lowercase names; Consul matches case-insensitively.
    auto id = create_session(R"({"name":"py","lockdelay":"0s","behavior":"delete","ttl":"10s","checks":[]})");
    auto const* s = sm.session_get(id);
    BOOST_REQUIRE(s);
    BOOST_TEST(s->name == "py");
    BOOST_TEST(s->lock_delay_ns == 0);
    BOOST_TEST((s->behavior == agent::session_behavior::delete_keys));
    BOOST_TEST(s->ttl == "10s");
    BOOST_TEST(s->check_ids().empty());
}

BOOST_FIXTURE_TEST_CASE(create_ignores_unknown_fields, api_fixture) {
    auto id = create_session(R"({"Name":"x","Bogus":1})");
    BOOST_REQUIRE(sm.session_get(id));
    BOOST_TEST(sm.session_get(id)->name == "x");
}

BOOST_FIXTURE_TEST_CASE(lock_delay_decoding_rules, api_fixture) {
    BOOST_TEST(lock_delay_of(R"({"LockDelay":15})") == 15 * ns_per_s);           // < 1000: seconds
    BOOST_TEST(lock_delay_of(R"({"LockDelay":999})") == 999 * ns_per_s);         // still seconds
    BOOST_TEST(lock_delay_of(R"({"LockDelay":15000000000})") == 15 * ns_per_s);  // nanoseconds
    BOOST_TEST(lock_delay_of(R"({"LockDelay":"15000ms"})") == 15 * ns_per_s);    // what the Go api sends
    BOOST_TEST(lock_delay_of(R"({"LockDelay":"500ns"})") == 500 * ns_per_s);     // 500 < 1000: seconds
    BOOST_TEST(lock_delay_of(R"({"LockDelay":"0s"})") == 0);
    BOOST_TEST(lock_delay_of(R"({"LockDelay":0})") == 0);
    BOOST_TEST(lock_delay_of(R"({"LockDelay":"0"})") == 0);
    BOOST_TEST(lock_delay_of(R"({"LockDelay":"1m"})") == 60 * ns_per_s);
}

BOOST_FIXTURE_TEST_CASE(lock_delay_without_unit_is_a_decode_error, api_fixture) {
    auto r = call(http::verb::put, "/v1/session/create", R"({"LockDelay":"15"})");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body().rfind("Request decode failed: ", 0) == 0u, r.body());
    BOOST_TEST(sm.session_list().empty());
}

// Found by fuzz_agent_http: a LockDelay number beyond int64 was cast from a
// double (undefined behaviour); a negative one overflowed the seconds rule.
BOOST_FIXTURE_TEST_CASE(lock_delay_out_of_range_is_a_decode_error, api_fixture) {
    for (std::string body : {R"({"LockDelay":150000000006666666666666666666666666666666666666666666666666666666666666666666})",
                             R"({"LockDelay":18446744073709551615})", R"({"LockDelay":1e300})",
                             R"({"LockDelay":-5})", R"({"LockDelay":-9000000000000000000})", R"({"LockDelay":"-5s"})"}) {
        auto r = call(http::verb::put, "/v1/session/create", body);
        BOOST_TEST(status(r) == 400, body);
        BOOST_TEST(r.body().rfind("Request decode failed: ", 0) == 0u, r.body());
    }
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(invalid_json_is_400_and_changes_nothing, api_fixture) {
    auto const idx = sm.sessions_index();
    auto const raft = sm.raft_index();
    for (std::string body : {"{", "not json", R"({"Name":)", "[1,2"}) {
        auto r = call(http::verb::put, "/v1/session/create", body);
        BOOST_TEST(status(r) == 400, body);
        BOOST_TEST(r.body().rfind("Request decode failed: ", 0) == 0u, r.body());
        BOOST_TEST(hdr(r, "Content-Type") == "text/plain; charset=utf-8");
    }
    BOOST_TEST(sm.sessions_index() == idx);
    BOOST_TEST(sm.raft_index() == raft);
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(validation_errors_are_500_text, api_fixture) {
    struct {
        char const* body;
        char const* message;
    } const cases[] = {
        {R"({"Behavior":"bogus"})", "Invalid Behavior setting 'bogus'"},
        {R"({"TTL":"5s"})", "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]"},
        {R"({"TTL":"25h"})", "Invalid Session TTL '90000000000000', must be between [10s=24h0m0s]"},
        {R"({"Node":""})", "Must provide Node"},
        {R"({"Node":"ghost"})", "apply failed: Missing node registration"},
        {R"({"NodeChecks":["nope"]})", "apply failed: Missing check 'nope' registration"},
    };
    for (auto const& c : cases) {
        BOOST_TEST_CONTEXT("body " << c.body) {
            auto r = call(http::verb::put, "/v1/session/create", c.body);
            BOOST_TEST(status(r) == 500);
            BOOST_TEST(r.body() == c.message);
            BOOST_TEST(hdr(r, "Content-Type") == "text/plain; charset=utf-8");
        }
    }
    auto r = call(http::verb::put, "/v1/session/create", R"({"TTL":"abc"})");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(r.body().rfind("Session TTL 'abc' invalid: ", 0) == 0u, r.body());
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(namespaces_are_enterprise_only, api_fixture) {
    auto r = call(http::verb::put, "/v1/session/create?ns=team");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == R"(Invalid query parameter: "ns" - Namespaces are a Consul Enterprise feature)");
    auto req = make_request(http::verb::get, "/v1/kv/k");
    req.set("X-Consul-Namespace", "team");
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.res);
    BOOST_TEST(status(*out.res) == 400);
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(destroy, api_fixture) {
    auto id = create_session();
    auto r = call(http::verb::put, "/v1/session/destroy/" + id);
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "true");
    BOOST_TEST(sm.session_get(id) == nullptr);
    // Unknown or already destroyed: still true.
    r = call(http::verb::put, "/v1/session/destroy/" + id);
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "true");
    r = call(http::verb::put, "/v1/session/destroy/");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Missing session");
    r = call(http::verb::get, "/v1/session/destroy/" + id);
    BOOST_TEST(status(r) == 405);
    BOOST_TEST(hdr(r, "Allow") == "OPTIONS,PUT");
}

BOOST_FIXTURE_TEST_CASE(renew_returns_one_element_array, api_fixture) {
    auto id = create_session(R"({"TTL":"10s"})");
    auto r = call(http::verb::put, "/v1/session/renew/" + id, {}, t0 + 5s);
    BOOST_TEST(status(r) == 200);
    auto v = parse(r);
    BOOST_REQUIRE(v.is_array());
    BOOST_REQUIRE(v.as_array().size() == 1u);
    auto const& s = v.as_array()[0].as_object();
    BOOST_TEST(s.at("ID").as_string() == id);
    BOOST_TEST(s.at("TTL").as_string() == "10s");
    BOOST_TEST((sm.next_deadline() == std::optional<time_point>(t0 + 25s)));
}

BOOST_FIXTURE_TEST_CASE(renew_of_unknown_session_is_404, api_fixture) {
    std::string const id = "a1b2c3d4-0000-4000-8000-000000000001";
    auto r = call(http::verb::put, "/v1/session/renew/" + id);
    BOOST_TEST(status(r) == 404);
    BOOST_TEST(r.body() == "Session id '" + id + "' not found");
    BOOST_TEST(hdr(r, "Content-Type") == "text/plain; charset=utf-8");
}

BOOST_FIXTURE_TEST_CASE(renew_after_ttl_lapse_is_404, api_fixture) {
    auto id = create_session(R"({"TTL":"10s"})");
    sm.advance(t0 + 20s);
    auto r = call(http::verb::put, "/v1/session/renew/" + id, {}, t0 + 20s);
    BOOST_TEST(status(r) == 404);
    BOOST_TEST(r.body() == "Session id '" + id + "' not found");
}

BOOST_FIXTURE_TEST_CASE(session_json_shape, api_fixture) {
    auto id = create_session(R"({"Name":"lock","TTL":"15s"})");
    auto r = call(http::verb::get, "/v1/session/info/" + id);
    BOOST_TEST(status(r) == 200);
    // LockDelay is an integer of nanoseconds (Go decodes time.Duration).
    BOOST_TEST(r.body().find(R"("LockDelay":15000000000)") != std::string::npos, r.body());
    auto s = session_json(id);
    BOOST_TEST(s.at("ID").as_string() == id);
    BOOST_TEST(s.at("Name").as_string() == "lock");
    BOOST_TEST(s.at("Node").as_string() == "tenure");
    BOOST_TEST(u64(s.at("LockDelay")) == 15'000'000'000u);
    BOOST_TEST(s.at("Behavior").as_string() == "release");
    BOOST_TEST(s.at("TTL").as_string() == "15s");
    BOOST_REQUIRE(s.at("NodeChecks").is_array());
    BOOST_REQUIRE(s.at("NodeChecks").as_array().size() == 1u);
    BOOST_TEST(s.at("NodeChecks").as_array()[0].as_string() == "serfHealth");
    BOOST_TEST(s.at("ServiceChecks").is_null());
    BOOST_TEST(!s.contains("Checks"));  // omitempty
    BOOST_TEST(u64(s.at("CreateIndex")) == sm.session_get(id)->create_index);
    BOOST_TEST(u64(s.at("ModifyIndex")) == sm.session_get(id)->modify_index);
}

BOOST_FIXTURE_TEST_CASE(session_json_field_order_follows_the_go_struct, api_fixture) {
    auto id = create_session();
    auto r = call(http::verb::get, "/v1/session/info/" + id);
    std::size_t last = 0;
    for (auto name : {"\"ID\"", "\"Name\"", "\"Node\"", "\"LockDelay\"", "\"Behavior\"", "\"TTL\"", "\"NodeChecks\"",
                      "\"ServiceChecks\"", "\"CreateIndex\"", "\"ModifyIndex\""}) {
        auto pos = r.body().find(name);
        BOOST_TEST_REQUIRE(pos != std::string::npos, name);
        BOOST_TEST(pos > last, name << " out of order in " << r.body());
        last = pos;
    }
}

BOOST_FIXTURE_TEST_CASE(info_of_unknown_session_is_empty_array, api_fixture) {
    auto r = call(http::verb::get, "/v1/session/info/a1b2c3d4-0000-4000-8000-000000000001");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "[]");
    BOOST_TEST(has_hdr(r, "X-Consul-Index"));
}

BOOST_FIXTURE_TEST_CASE(list_and_node, api_fixture) {
    auto r = call(http::verb::get, "/v1/session/list");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "[]");
    auto a = create_session();
    auto b = create_session();
    r = call(http::verb::get, "/v1/session/list");
    BOOST_TEST(parse(r).as_array().size() == 2u);
    BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(sm.sessions_index()));
    r = call(http::verb::get, "/v1/session/node/tenure");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(parse(r).as_array().size() == 2u);
    r = call(http::verb::get, "/v1/session/node/");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Missing node name");
    r = call(http::verb::put, "/v1/session/list");
    BOOST_TEST(status(r) == 405);
    BOOST_TEST(hdr(r, "Allow") == "OPTIONS,GET");
    (void)a;
    (void)b;
}

BOOST_FIXTURE_TEST_CASE(info_index_is_the_sessions_table_index, api_fixture) {
    auto id = create_session();
    sm.kv_set("unrelated", "v", 0);  // moves the raft index, not the sessions table
    auto r = call(http::verb::get, "/v1/session/info/" + id);
    BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(sm.sessions_index()));
    BOOST_TEST(sm.sessions_index() < sm.raft_index());
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// KV (§5)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(http_kv)

BOOST_FIXTURE_TEST_CASE(put_then_get, api_fixture) {
    auto r = call(http::verb::put, "/v1/kv/greeting", "hello");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "true");
    auto const idx = sm.kv_get("greeting")->modify_index;
    r = call(http::verb::get, "/v1/kv/greeting");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(hdr(r, "Content-Type") == "application/json");
    BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(idx));
    BOOST_TEST(hdr(r, "X-Consul-KnownLeader") == "true");
    BOOST_TEST(hdr(r, "X-Consul-LastContact") == "0");
    auto v = parse(r);
    BOOST_REQUIRE(v.as_array().size() == 1u);
    auto const& e = v.as_array()[0].as_object();
    BOOST_TEST(e.at("Key").as_string() == "greeting");
    BOOST_TEST(e.at("Value").as_string() == b64("hello"));
    BOOST_TEST(u64(e.at("Flags")) == 0u);
    BOOST_TEST(u64(e.at("LockIndex")) == 0u);
    BOOST_TEST(u64(e.at("CreateIndex")) == idx);
    BOOST_TEST(u64(e.at("ModifyIndex")) == idx);
    BOOST_TEST(!e.contains("Session"));  // omitted when empty
}

BOOST_FIXTURE_TEST_CASE(key_with_slashes, api_fixture) {
    BOOST_TEST(call(http::verb::put, "/v1/kv/service/job/leader", "x").body() == "true");
    BOOST_REQUIRE(sm.kv_get("service/job/leader"));
    BOOST_TEST(kv_json("service/job/leader").at("Key").as_string() == "service/job/leader");
}

BOOST_FIXTURE_TEST_CASE(empty_body_is_null_value, api_fixture) {
    BOOST_TEST(call(http::verb::put, "/v1/kv/k").body() == "true");
    BOOST_TEST(kv_json("k").at("Value").is_null());
}

BOOST_FIXTURE_TEST_CASE(missing_key_is_404_with_meta, api_fixture) {
    sm.kv_set("other", "v", 0);
    sm.kv_set("gone", "v", 0);
    sm.kv_delete("gone", {});
    auto const table = sm.kv_key_index("gone");
    auto r = call(http::verb::get, "/v1/kv/gone");
    BOOST_TEST(status(r) == 404);
    BOOST_TEST(r.body() == "");
    BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(table));
    BOOST_TEST(hdr(r, "X-Consul-KnownLeader") == "true");
    BOOST_TEST(hdr(r, "X-Consul-LastContact") == "0");
}

BOOST_FIXTURE_TEST_CASE(index_header_is_never_zero, api_fixture) {
    BOOST_REQUIRE(sm.kvs_index() == 0u);  // fresh store: no KV write yet
    for (std::string target : {"/v1/kv/missing", "/v1/kv/?recurse", "/v1/kv/?keys", "/v1/kv/pre?keys"}) {
        auto r = call(http::verb::get, target);
        BOOST_TEST(hdr(r, "X-Consul-Index") == "1", target);
        BOOST_TEST(hdr(r, "X-Consul-KnownLeader") == "true", target);
        BOOST_TEST(hdr(r, "X-Consul-LastContact") == "0", target);
    }
}

BOOST_FIXTURE_TEST_CASE(missing_key_name, api_fixture) {
    for (auto m : {http::verb::get, http::verb::put, http::verb::delete_}) {
        auto r = call(m, "/v1/kv/");
        BOOST_TEST(status(r) == 400);
        BOOST_TEST(r.body() == "Missing key name");
    }
}

BOOST_FIXTURE_TEST_CASE(wrong_method_is_405_with_allow, api_fixture) {
    auto r = call(http::verb::post, "/v1/kv/k", "x");
    BOOST_TEST(status(r) == 405);
    auto allow = hdr(r, "Allow");
    for (auto m : {"GET", "PUT", "DELETE", "OPTIONS"}) BOOST_TEST(allow.find(m) != std::string::npos, allow);
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(conflicting_flags, api_fixture) {
    auto r = call(http::verb::put, "/v1/kv/k?cas=1&acquire=abc", "x");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body().rfind("Conflicting flags: ", 0) == 0u, r.body());
    BOOST_TEST(!r.body().empty());
    BOOST_TEST(r.body().back() == '\n');
    // Go's url.Values.Encode(): keys sorted.
    BOOST_TEST(r.body() == "Conflicting flags: acquire=abc&cas=1\n");
    r = call(http::verb::put, "/v1/kv/k?acquire=a&release=b", "x");
    BOOST_TEST(status(r) == 400);
    r = call(http::verb::delete_, "/v1/kv/k?recurse&cas=3");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body().rfind("Conflicting flags: ", 0) == 0u, r.body());
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(bad_flags_is_500, api_fixture) {
    auto r = call(http::verb::put, "/v1/kv/k?flags=abc", "x");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(flags_beyond_int64_round_trip, api_fixture) {
    BOOST_TEST(call(http::verb::put, "/v1/kv/sem/.lock?flags=16210313421097356768", "{}").body() == "true");
    BOOST_TEST(sm.kv_get("sem/.lock")->flags == 16210313421097356768ull);
    auto r = call(http::verb::get, "/v1/kv/sem/.lock");
    BOOST_TEST(r.body().find(R"("Flags":16210313421097356768)") != std::string::npos, r.body());
    auto v = parse(r);
    BOOST_TEST(u64(v.as_array()[0].as_object().at("Flags")) == 16210313421097356768ull);
    BOOST_TEST(call(http::verb::put, "/v1/kv/max?flags=18446744073709551615", "x").body() == "true");
    BOOST_TEST(sm.kv_get("max")->flags == 18446744073709551615ull);
}

BOOST_FIXTURE_TEST_CASE(put_without_flags_resets_them, api_fixture) {
    call(http::verb::put, "/v1/kv/k?flags=42", "x");
    call(http::verb::put, "/v1/kv/k", "x");
    BOOST_TEST(sm.kv_get("k")->flags == 0u);
}

BOOST_FIXTURE_TEST_CASE(raw_get, api_fixture) {
    sm.kv_set("k", "<b>raw</b>", 0);
    auto r = call(http::verb::get, "/v1/kv/k?raw");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "<b>raw</b>");
    BOOST_TEST(hdr(r, "Content-Type") == "text/plain");
    BOOST_TEST(hdr(r, "X-Content-Type-Options") == "nosniff");
    BOOST_TEST(hdr(r, "Content-Security-Policy") == "sandbox");
}

BOOST_FIXTURE_TEST_CASE(recurse_and_keys, api_fixture) {
    for (auto k : {"a/b/c", "a/b/d", "a/e", "z"}) sm.kv_set(k, "v", 0);
    auto r = call(http::verb::get, "/v1/kv/a/?recurse");
    BOOST_TEST(status(r) == 200);
    auto v = parse(r);
    BOOST_REQUIRE(v.as_array().size() == 3u);
    BOOST_TEST(v.as_array()[0].as_object().at("Key").as_string() == "a/b/c");
    BOOST_TEST(v.as_array()[2].as_object().at("Key").as_string() == "a/e");
    BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(sm.kv_prefix_index("a/")));

    r = call(http::verb::get, "/v1/kv/a/?keys&separator=/");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == R"(["a/b/","a/e"])");
    r = call(http::verb::get, "/v1/kv/a/?keys&seperator=/");  // Consul's misspelling is accepted
    BOOST_TEST(r.body() == R"(["a/b/","a/e"])");
    r = call(http::verb::get, "/v1/kv/a/?keys");
    BOOST_TEST(r.body() == R"(["a/b/c","a/b/d","a/e"])");
    r = call(http::verb::get, "/v1/kv/nothing?keys");
    BOOST_TEST(status(r) == 404);
    r = call(http::verb::get, "/v1/kv/nothing/?recurse");
    BOOST_TEST(status(r) == 404);
    BOOST_TEST(has_hdr(r, "X-Consul-Index"));
}

BOOST_FIXTURE_TEST_CASE(root_keys_of_empty_store_is_empty_array, api_fixture) {
    auto r = call(http::verb::get, "/v1/kv/?keys");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "[]");
}

BOOST_FIXTURE_TEST_CASE(cas_put, api_fixture) {
    BOOST_TEST(call(http::verb::put, "/v1/kv/k?cas=0", "first").body() == "true");
    BOOST_TEST(call(http::verb::put, "/v1/kv/k?cas=0", "second").body() == "false");
    auto m = sm.kv_get("k")->modify_index;
    BOOST_TEST(call(http::verb::put, "/v1/kv/k?cas=" + std::to_string(m + 1), "x").body() == "false");
    BOOST_TEST(call(http::verb::put, "/v1/kv/k?cas=" + std::to_string(m), "third").body() == "true");
    BOOST_TEST(sm.kv_get("k")->value.value_or("<null>") == "third");
}

BOOST_FIXTURE_TEST_CASE(delete_variants, api_fixture) {
    sm.kv_set("k", "v", 0);
    auto m = sm.kv_get("k")->modify_index;
    auto r = call(http::verb::delete_, "/v1/kv/k?cas=" + std::to_string(m + 1));
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "false");
    BOOST_TEST(sm.kv_get("k") != nullptr);
    BOOST_TEST(call(http::verb::delete_, "/v1/kv/k?cas=" + std::to_string(m)).body() == "true");
    BOOST_TEST(sm.kv_get("k") == nullptr);
    BOOST_TEST(call(http::verb::delete_, "/v1/kv/k?cas=5").body() == "true");  // missing key
    BOOST_TEST(call(http::verb::delete_, "/v1/kv/never").body() == "true");
    for (auto k : {"t/1", "t/2", "u"}) sm.kv_set(k, "v", 0);
    BOOST_TEST(call(http::verb::delete_, "/v1/kv/t/?recurse").body() == "true");
    BOOST_TEST(sm.kv_get("t/1") == nullptr);
    BOOST_TEST(sm.kv_get("u") != nullptr);
    BOOST_TEST(call(http::verb::delete_, "/v1/kv/?recurse").body() == "true");  // empty key allowed
    BOOST_TEST(sm.kv_list("").empty());
}

BOOST_FIXTURE_TEST_CASE(acquire_and_release, api_fixture) {
    auto a = create_session();
    auto b = create_session();
    auto r = call(http::verb::put, "/v1/kv/lock?acquire=" + a + "&flags=3304740253564472344", "me");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "true");
    auto e = kv_json("lock");
    BOOST_TEST(e.at("Session").as_string() == a);
    BOOST_TEST(u64(e.at("LockIndex")) == 1u);
    BOOST_TEST(u64(e.at("Flags")) == 3304740253564472344ull);
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?acquire=" + b, "them").body() == "false");
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?release=" + b, "them").body() == "false");
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?release=" + a, "me").body() == "true");
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?acquire=" + b, "them").body() == "true");
    BOOST_TEST(u64(kv_json("lock").at("LockIndex")) == 2u);
}

BOOST_FIXTURE_TEST_CASE(acquire_with_unknown_session_is_500, api_fixture) {
    std::string const ghost = "a1b2c3d4-0000-4000-8000-000000000001";
    auto r = call(http::verb::put, "/v1/kv/lock?acquire=" + ghost, "x");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(r.body().find("invalid session \"" + ghost + "\"") != std::string::npos, r.body());
    BOOST_TEST(sm.kv_get("lock") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(acquire_during_lock_delay_is_200_false, api_fixture) {
    auto a = create_session();
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?acquire=" + a, "x").body() == "true");
    BOOST_TEST(call(http::verb::put, "/v1/session/destroy/" + a).body() == "true");
    auto b = create_session();
    auto r = call(http::verb::put, "/v1/kv/lock?acquire=" + b, "y", t0 + 15s - 1ns);
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "false");
    r = call(http::verb::put, "/v1/kv/lock?acquire=" + b, "y", t0 + 15s);
    BOOST_TEST(r.body() == "true");
}

BOOST_FIXTURE_TEST_CASE(stale_with_consistent_is_400, api_fixture) {
    auto r = call(http::verb::get, "/v1/kv/k?stale&consistent");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Cannot specify ?stale with ?consistent, conflicting semantics.");
}

BOOST_FIXTURE_TEST_CASE(bad_wait_and_index, api_fixture) {
    auto r = call(http::verb::get, "/v1/kv/k?index=abc");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Invalid index");
    r = call(http::verb::get, "/v1/kv/k?index=-1");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Invalid index");
    r = call(http::verb::get, "/v1/kv/k?index=1&wait=abc");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Invalid wait time");
    r = call(http::verb::get, "/v1/kv/k?index=1&wait=15");  // no unit
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Invalid wait time");
    r = call(http::verb::get, "/v1/session/list?wait=x&index=1");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body() == "Invalid wait time");
}

// ---- size limit (413) -----------------------------------------------------

BOOST_FIXTURE_TEST_CASE(check_header_refuses_oversize_values, api_fixture) {
    http::request<http::empty_body> h{http::verb::put, "/v1/kv/big", 11};
    h.set(http::field::content_length, "524289");
    auto r = api.check_header(h.base());
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(status(*r) == 413);
    BOOST_TEST(r->body() ==
               "Request body(524289 bytes) too large, max size: 524288 bytes. See "
               "https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size.");
    h.set(http::field::content_length, "524288");  // exactly the limit is accepted
    BOOST_TEST(!api.check_header(h.base()).has_value());
    http::request<http::empty_body> g{http::verb::get, "/v1/kv/big", 11};
    BOOST_TEST(!api.check_header(g.base()).has_value());
}

BOOST_FIXTURE_TEST_CASE(handle_refuses_oversize_body_too, api_fixture) {
    auto r = call(http::verb::put, "/v1/kv/big", std::string(524289, 'x'));
    BOOST_TEST(status(r) == 413);
    BOOST_TEST(sm.kv_get("big") == nullptr);
    r = call(http::verb::put, "/v1/kv/big", std::string(524288, 'x'));
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r.body() == "true");
    BOOST_TEST(sm.kv_get("big")->value->size() == 524288u);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// Blocking queries (§6)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(http_blocking)

BOOST_FIXTURE_TEST_CASE(index_equal_to_current_parks_until_a_write, api_fixture) {
    sm.kv_set("k", "v1", 0);
    auto const idx = sm.kv_get("k")->modify_index;
    auto req = make_request(http::verb::get, "/v1/kv/k?index=" + std::to_string(idx) + "&wait=15s");
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(!out.res.has_value());
    BOOST_REQUIRE(out.wait.has_value());
    BOOST_TEST(off(out.wait->deadline) >= off(t0 + 15s));
    BOOST_TEST(off(out.wait->deadline) < off(t0 + 15s + nanoseconds{15s} / 16));
    BOOST_TEST(!out.wait->targets.empty());

    // The shell registers the targets; a write to another key does not wake it.
    int woken = 0;
    auto reg = sm.watch(out.wait->targets, [&] { ++woken; });
    sm.kv_set("other", "x", 0);
    BOOST_TEST(woken == 0);
    sm.kv_set("k", "v2", 0);
    BOOST_TEST(woken == 1);

    auto again = api.handle(req, t0 + 1s, bs);
    BOOST_REQUIRE(again.res.has_value());
    BOOST_TEST(!again.wait.has_value());
    BOOST_TEST(status(*again.res) == 200);
    BOOST_TEST(hdr(*again.res, "X-Consul-Index") == std::to_string(sm.kv_get("k")->modify_index));
    auto v = json::parse(again.res->body());
    BOOST_TEST(v.as_array()[0].as_object().at("Value").as_string() == b64("v2"));
}

BOOST_FIXTURE_TEST_CASE(unchanged_index_answers_at_the_deadline, api_fixture) {
    sm.kv_set("k", "v1", 0);
    auto const idx = sm.kv_get("k")->modify_index;
    auto req = make_request(http::verb::get, "/v1/kv/k?index=" + std::to_string(idx) + "&wait=10s");
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.wait.has_value());
    auto const deadline = out.wait->deadline;
    // A spurious wake-up before the deadline parks again, with the same deadline.
    auto early = api.handle(req, t0 + 1s, bs);
    BOOST_REQUIRE(!early.res.has_value());
    BOOST_REQUIRE(early.wait.has_value());
    BOOST_TEST(off(early.wait->deadline) == off(deadline));
    // At the deadline: 200 with the current (unchanged) data.
    auto late = api.handle(req, deadline, bs);
    BOOST_REQUIRE(late.res.has_value());
    BOOST_TEST(status(*late.res) == 200);
    BOOST_TEST(hdr(*late.res, "X-Consul-Index") == std::to_string(idx));
}

BOOST_FIXTURE_TEST_CASE(index_zero_or_behind_answers_at_once, api_fixture) {
    sm.kv_set("k", "v1", 0);
    sm.kv_set("k", "v2", 0);
    auto const idx = sm.kv_get("k")->modify_index;
    for (std::uint64_t given : {std::uint64_t{0}, idx - 1}) {
        auto r = call(http::verb::get, "/v1/kv/k?index=" + std::to_string(given) + "&wait=30s");
        BOOST_TEST(status(r) == 200);
        BOOST_TEST(hdr(r, "X-Consul-Index") == std::to_string(idx));
    }
}

BOOST_FIXTURE_TEST_CASE(default_and_maximum_wait, api_fixture) {
    sm.kv_set("k", "v", 0);
    auto const idx = std::to_string(sm.kv_get("k")->modify_index);
    {
        agent::blocking_state bs;
        auto out = api.handle(make_request(http::verb::get, "/v1/kv/k?index=" + idx), t0, bs);
        BOOST_REQUIRE(out.wait.has_value());
        BOOST_TEST(off(out.wait->deadline) >= off(t0 + 5min));  // default_query_time
        BOOST_TEST(off(out.wait->deadline) < off(t0 + 5min + nanoseconds{5min} / 16));
    }
    {
        agent::blocking_state bs;
        auto out = api.handle(make_request(http::verb::get, "/v1/kv/k?index=" + idx + "&wait=20m"), t0, bs);
        BOOST_REQUIRE(out.wait.has_value());
        BOOST_TEST(off(out.wait->deadline) >= off(t0 + 10min));  // capped at max_query_time
        BOOST_TEST(off(out.wait->deadline) < off(t0 + 10min + nanoseconds{10min} / 16));
    }
    {
        agent::blocking_state bs;
        auto out = api.handle(make_request(http::verb::get, "/v1/kv/k?index=" + idx + "&wait=15000ms"), t0, bs);
        BOOST_REQUIRE(out.wait.has_value());
        BOOST_TEST(off(out.wait->deadline) >= off(t0 + 15s));  // what the Go api sends
        BOOST_TEST(off(out.wait->deadline) < off(t0 + 15s + nanoseconds{15s} / 16));
    }
}

BOOST_FIXTURE_TEST_CASE(jitter_varies_within_the_bound, api_fixture) {
    sm.kv_set("k", "v", 0);
    auto const target = "/v1/kv/k?index=" + std::to_string(sm.kv_get("k")->modify_index) + "&wait=16s";
    std::vector<time_point> deadlines;
    for (int i = 0; i < 20; ++i) {
        agent::blocking_state bs;
        auto out = api.handle(make_request(http::verb::get, target), t0, bs);
        BOOST_REQUIRE(out.wait.has_value());
        BOOST_TEST_REQUIRE(off(out.wait->deadline) >= off(t0 + 16s));
        BOOST_TEST_REQUIRE(off(out.wait->deadline) < off(t0 + 17s));
        deadlines.push_back(out.wait->deadline);
    }
    std::sort(deadlines.begin(), deadlines.end());
    auto const distinct = std::unique(deadlines.begin(), deadlines.end()) - deadlines.begin();
    BOOST_TEST(distinct > 1);
}

BOOST_FIXTURE_TEST_CASE(blocking_on_a_lock_key_wakes_on_invalidation, api_fixture) {
    // The Go api's monitorLock: a blocking GET that must see the Session clear.
    auto a = create_session();
    BOOST_TEST(call(http::verb::put, "/v1/kv/lock?acquire=" + a, "x").body() == "true");
    auto const idx = sm.kv_get("lock")->modify_index;
    auto req = make_request(http::verb::get, "/v1/kv/lock?consistent=&index=" + std::to_string(idx));
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.wait.has_value());
    int woken = 0;
    auto reg = sm.watch(out.wait->targets, [&] { ++woken; });
    BOOST_TEST(sm.session_destroy(a, t0 + 1s));
    BOOST_TEST(woken == 1);
    auto again = api.handle(req, t0 + 1s, bs);
    BOOST_REQUIRE(again.res.has_value());
    auto e = json::parse(again.res->body()).as_array()[0].as_object();
    BOOST_TEST(!e.contains("Session"));
}

BOOST_FIXTURE_TEST_CASE(blocking_session_list_wakes_on_create, api_fixture) {
    create_session();
    auto const idx = sm.sessions_index();
    auto req = make_request(http::verb::get, "/v1/session/list?index=" + std::to_string(idx) + "&wait=1m");
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.wait.has_value());
    int woken = 0;
    auto reg = sm.watch(out.wait->targets, [&] { ++woken; });
    create_session();
    BOOST_TEST(woken == 1);
    auto again = api.handle(req, t0 + 1s, bs);
    BOOST_REQUIRE(again.res.has_value());
    BOOST_TEST(json::parse(again.res->body()).as_array().size() == 2u);
    BOOST_TEST(hdr(*again.res, "X-Consul-Index") == std::to_string(sm.sessions_index()));
}

BOOST_FIXTURE_TEST_CASE(blocking_recurse_wakes_on_prefix_write, api_fixture) {
    sm.kv_set("svc/a", "1", 0);
    auto const idx = sm.kv_prefix_index("svc/");
    auto req = make_request(http::verb::get, "/v1/kv/svc/?recurse&index=" + std::to_string(idx) + "&wait=15s");
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.wait.has_value());
    int woken = 0;
    auto reg = sm.watch(out.wait->targets, [&] { ++woken; });
    sm.kv_set("elsewhere", "x", 0);
    BOOST_TEST(woken == 0);
    sm.kv_set("svc/b", "2", 0);
    BOOST_TEST(woken == 1);
    auto again = api.handle(req, t0 + 1s, bs);
    BOOST_REQUIRE(again.res.has_value());
    BOOST_TEST(json::parse(again.res->body()).as_array().size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// /v1/txn and /v1/agent/self
// ===========================================================================
BOOST_AUTO_TEST_SUITE(http_misc)

BOOST_FIXTURE_TEST_CASE(txn_success, api_fixture) {
    auto body = R"([{"KV":{"Verb":"set","Key":"a","Value":")" + b64("one") + R"(","Flags":7}},)" +
                R"({"KV":{"Verb":"get","Key":"a"}}])";
    auto r = call(http::verb::put, "/v1/txn", body);
    BOOST_TEST(status(r) == 200, r.body());
    auto v = parse(r).as_object();
    BOOST_TEST(v.at("Errors").is_null());
    auto const& results = v.at("Results").as_array();
    BOOST_REQUIRE(results.size() == 2u);
    auto const& set = results[0].as_object().at("KV").as_object();
    BOOST_TEST(set.at("Key").as_string() == "a");
    BOOST_TEST(set.at("Value").is_null());
    BOOST_TEST(u64(set.at("Flags")) == 7u);
    auto const& get = results[1].as_object().at("KV").as_object();
    BOOST_TEST(get.at("Value").as_string() == b64("one"));
    BOOST_TEST(sm.kv_get("a")->value.value_or("<null>") == "one");
}

BOOST_FIXTURE_TEST_CASE(txn_values_of_every_length_decode, api_fixture) {
    // Go's encoding/json writes []byte as padded standard base64, so 1- and
    // 2-byte remainders end in "==" / "=".
    for (std::string value : {"1", "12", "123", "hello", "binary\x01\xff"}) {
        BOOST_TEST_CONTEXT("value \"" << value << "\" sent as " << b64(value)) {
            auto body = R"([{"KV":{"Verb":"set","Key":"k","Value":")" + b64(value) + R"("}}])";
            auto r = call(http::verb::put, "/v1/txn", body);
            BOOST_TEST(status(r) == 200, r.body());
            auto const* e = sm.kv_get("k");
            BOOST_TEST(e != nullptr);
            if (e) BOOST_TEST(e->value.value_or("<null>") == value);
            sm.kv_delete("k", {});
        }
    }
}

BOOST_FIXTURE_TEST_CASE(txn_failure_is_409_and_rolls_back, api_fixture) {
    sm.kv_set("c", "v", 0);
    auto const m = sm.kv_get("c")->modify_index;
    auto const raft = sm.raft_index();
    auto body = R"([{"KV":{"Verb":"set","Key":"a","Value":")" + b64("one") + R"("}},)" +
                R"({"KV":{"Verb":"set","Key":"b","Value":")" + b64("two") + R"("}},)" +
                R"({"KV":{"Verb":"check-index","Key":"c","Index":)" + std::to_string(m + 1) + "}}]";
    auto r = call(http::verb::put, "/v1/txn", body);
    BOOST_TEST(status(r) == 409, r.body());
    auto v = parse(r).as_object();
    BOOST_TEST(v.at("Results").is_null());
    auto const& errors = v.at("Errors").as_array();
    BOOST_REQUIRE(errors.size() == 1u);
    BOOST_TEST(u64(errors[0].as_object().at("OpIndex")) == 2u);
    BOOST_TEST(errors[0].as_object().at("What").as_string() ==
               "failed index check for key \"c\", current modify index " + std::to_string(m) + " != " +
                   std::to_string(m + 1));
    BOOST_TEST(sm.kv_get("a") == nullptr);
    BOOST_TEST(sm.kv_get("b") == nullptr);
    BOOST_TEST(sm.raft_index() == raft);
}

BOOST_FIXTURE_TEST_CASE(txn_bad_body_is_400_and_changes_nothing, api_fixture) {
    auto const raft = sm.raft_index();
    auto r = call(http::verb::put, "/v1/txn", "[{");
    BOOST_TEST(status(r) == 400);
    r = call(http::verb::put, "/v1/txn", R"([{"KV":{"Verb":"set","Key":"a","Value":"***"}}])");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(sm.kv_get("a") == nullptr);
    BOOST_TEST(sm.raft_index() == raft);
}

BOOST_FIXTURE_TEST_CASE(agent_self, api_fixture) {
    auto r = call(http::verb::get, "/v1/agent/self");
    BOOST_TEST(status(r) == 200);
    auto v = parse(r);
    BOOST_REQUIRE(v.is_object());
    for (auto const& kv : v.as_object())
        BOOST_TEST(kv.value().is_object(), "top-level " << kv.key() << " is not an object");
    auto const& cfg = v.as_object().at("Config").as_object();
    BOOST_TEST(cfg.at("NodeName").as_string() == "tenure");
    BOOST_TEST(cfg.at("Datacenter").as_string() == "dc1");
}

BOOST_FIXTURE_TEST_CASE(unknown_endpoint_is_404, api_fixture) {
    auto r = call(http::verb::get, "/v1/nope");
    BOOST_TEST(status(r) == 404);
}

BOOST_AUTO_TEST_SUITE_END()
