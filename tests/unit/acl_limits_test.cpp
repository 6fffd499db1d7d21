// ACLs (include/tenure/detail/agent/acl.hpp) and abuse limits (limits.hpp) of
// the embedded agent, through the socket-free HTTP API: no sockets, mock clock.
#include <boost/test/unit_test.hpp>

#include "agent/acl.hpp"
#include "agent/http_api.hpp"
#include "agent/limits.hpp"
#include "agent/state.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace agent = tenure::detail::agent;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;

namespace {

constexpr char const* management = "root-secret";
constexpr char const* app_secret = "app-secret";
constexpr char const* reader_secret = "reader-secret";

// Tokens used below:
//  app:    write under app/, deny under app/secret/, read the exact key app/secret/public,
//          session write on node "n1" prefix, node read everywhere;
//  reader: read under "" (everything), through a linked policy.
std::string const acl_file = R"({
  "policies": [
    {"Name": "read-all", "Rules": "{\"key_prefix\": {\"\": {\"policy\": \"read\"}}}"}
  ],
  "tokens": [
    {"SecretID": "app-secret", "AccessorID": "11111111-2222-3333-4444-555555555555", "Description": "app",
     "Rules": {"key_prefix": {"app/": {"policy": "write"}, "app/secret/": "deny"},
               "key": {"app/secret/public": "read"},
               "session_prefix": {"n1": {"policy": "write"}},
               "node_prefix": {"": {"policy": "read"}}}},
    {"SecretID": "reader-secret", "Policies": [{"Name": "read-all"}]}
  ]
})";

agent::agent_config config() {
    agent::agent_config c;
    c.seed = 7;
    c.node_name = "n1";
    return c;
}

int status(agent::response const& r) { return static_cast<int>(r.result_int()); }

json::value parse(agent::response const& r) {
    boost::system::error_code ec;
    auto v = json::parse(r.body(), ec);
    BOOST_REQUIRE_MESSAGE(!ec, "body is not JSON: " << r.body());
    return v;
}

struct acl_fixture {
    agent::time_point t0{};
    agent::state_machine sm{config(), t0};
    agent::acl_store acl{agent::acl_options{.enabled = true,
                                            .default_policy = agent::acl_access::deny,
                                            .bootstrap_token = management,
                                            .file_json = acl_file}};
    agent::http_api api{sm};

    acl_fixture() { api.set_acl(&acl); }

    // `token` goes in X-Consul-Token (empty: none).
    agent::response call(http::verb method, std::string target, std::string token, std::string body = {},
                         std::vector<std::pair<std::string, std::string>> headers = {}) {
        agent::request req{method, target, 11};
        req.set(http::field::host, "127.0.0.1:8500");
        if (!token.empty()) req.set("X-Consul-Token", token);
        for (auto const& [k, v] : headers) req.set(k, v);
        req.body() = std::move(body);
        req.prepare_payload();
        agent::blocking_state bs;
        auto out = api.handle(req, t0, bs);
        BOOST_REQUIRE_MESSAGE(out.res.has_value(), "expected an immediate response for " << target);
        return std::move(*out.res);
    }

    void put_key(std::string const& key, std::string value = "v") {
        auto r = call(http::verb::put, "/v1/kv/" + key, management, std::move(value));
        BOOST_REQUIRE_MESSAGE(status(r) == 200, "PUT " << key << ": " << r.body());
    }
};

std::string const denied_prefix = "Permission denied: token with AccessorID '";

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_acl)

BOOST_FIXTURE_TEST_CASE(management_token_may_do_anything, acl_fixture) {
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/anything", management, "x")) == 200);
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/anything", management)) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/create", management, R"({"Node":"other"})")) == 500);  // no such node
    BOOST_TEST(status(call(http::verb::put, "/v1/session/create", management)) == 200);
    BOOST_TEST(status(call(http::verb::get, "/v1/agent/self", management)) == 200);
    BOOST_TEST(status(call(http::verb::delete_, "/v1/kv/?recurse", management)) == 200);
}

BOOST_FIXTURE_TEST_CASE(missing_token_is_the_anonymous_token_and_default_deny_applies, acl_fixture) {
    put_key("app/x");
    auto r = call(http::verb::get, "/v1/kv/app/x", "");
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(r.body() == "Permission denied: token with AccessorID '00000000-0000-0000-0000-000000000002' "
                           "lacks permission 'key:read' on \"app/x\"");
    r = call(http::verb::put, "/v1/kv/app/x", "", "changed");
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/x?raw", management)) == 200);
    BOOST_TEST(call(http::verb::get, "/v1/kv/app/x?raw", management).body() == "v");  // nothing changed
    // Status endpoints carry no ACL, as in Consul.
    BOOST_TEST(status(call(http::verb::get, "/v1/status/leader", "")) == 200);
}

BOOST_FIXTURE_TEST_CASE(unknown_token_is_acl_not_found, acl_fixture) {
    auto r = call(http::verb::get, "/v1/kv/app/x", "no-such-secret");
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(r.body() == "ACL not found");
    r = call(http::verb::put, "/v1/session/create", "no-such-secret");
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(r.body() == "ACL not found");
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(token_from_query_header_or_bearer, acl_fixture) {
    put_key("app/x");
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/x?token=app-secret", "")) == 200);
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/x", app_secret)) == 200);
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/x", "", {}, {{"Authorization", "Bearer app-secret"}})) == 200);
    // ?token= wins over the header, as in Consul.
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/x?token=bogus", app_secret)) == 403);
}

BOOST_FIXTURE_TEST_CASE(allow_and_deny_by_prefix_longest_wins, acl_fixture) {
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/app/config", app_secret, "1")) == 200);
    auto r = call(http::verb::put, "/v1/kv/app/secret/pw", app_secret, "1");
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(r.body() == denied_prefix + "11111111-2222-3333-4444-555555555555' lacks permission "
                                           "'key:write' on \"app/secret/pw\"");
    BOOST_TEST(sm.kv_get("app/secret/pw") == nullptr);
    put_key("app/secret/pw");
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/secret/pw", app_secret)) == 403);
    // Outside every rule: the default policy (deny).
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/other", app_secret, "1")) == 403);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/ap", app_secret, "1")) == 403);
}

BOOST_FIXTURE_TEST_CASE(exact_rule_beats_prefixes, acl_fixture) {
    put_key("app/secret/public");
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/secret/public", app_secret)) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/app/secret/public", app_secret, "x")) == 403);  // read only
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/app/secret/public2", app_secret)) == 403);       // exact: not a prefix
}

BOOST_FIXTURE_TEST_CASE(recurse_and_keys_are_filtered, acl_fixture) {
    put_key("app/a");
    put_key("app/secret/b");
    put_key("app/secret/public");
    put_key("zzz");
    auto r = call(http::verb::get, "/v1/kv/app/?recurse", app_secret);
    BOOST_REQUIRE(status(r) == 200);
    std::vector<std::string> keys;
    auto const listed = parse(r);
    for (auto const& e : listed.as_array()) keys.emplace_back(e.at("Key").as_string());
    BOOST_TEST(keys == (std::vector<std::string>{"app/a", "app/secret/public"}), boost::test_tools::per_element());
    BOOST_TEST(std::string(r["X-Consul-Results-Filtered-By-ACLs"]) == "true");

    r = call(http::verb::get, "/v1/kv/?keys", app_secret);
    BOOST_REQUIRE(status(r) == 200);
    BOOST_TEST(json::serialize(parse(r)) == R"(["app/a","app/secret/public"])");

    // Nothing readable left: 404, as when nothing matched.
    r = call(http::verb::get, "/v1/kv/zzz?recurse", app_secret);
    BOOST_TEST(status(r) == 404);
    BOOST_TEST(r.body().empty());
    // The reader token (through a linked policy) sees everything.
    r = call(http::verb::get, "/v1/kv/?recurse", reader_secret);
    BOOST_TEST(parse(r).as_array().size() == 4u);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/app/a", reader_secret, "x")) == 403);
}

BOOST_FIXTURE_TEST_CASE(delete_tree_needs_write_on_everything_under_the_prefix, acl_fixture) {
    put_key("app/a");
    put_key("app/secret/b");
    auto r = call(http::verb::delete_, "/v1/kv/app/?recurse", app_secret);
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(sm.kv_get("app/a") != nullptr);  // nothing deleted
    BOOST_TEST(status(call(http::verb::delete_, "/v1/kv/app/a/?recurse", app_secret)) == 200);
    BOOST_TEST(status(call(http::verb::delete_, "/v1/kv/app/a", app_secret)) == 200);
    BOOST_TEST(sm.kv_get("app/a") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(txn_checks_every_operation, acl_fixture) {
    put_key("app/secret/b");
    std::string const body = R"([
        {"KV": {"Verb": "set", "Key": "app/ok", "Value": "eA=="}},
        {"KV": {"Verb": "get", "Key": "app/secret/b"}},
        {"KV": {"Verb": "delete-tree", "Key": "app/"}}
    ])";
    auto r = call(http::verb::put, "/v1/txn", app_secret, body);
    BOOST_TEST(status(r) == 409);
    auto const errors = parse(r).at("Errors").as_array();
    BOOST_REQUIRE(errors.size() == 2u);
    BOOST_TEST(errors[0].at("OpIndex").to_number<int>() == 1);
    BOOST_TEST(std::string(errors[0].at("What").as_string()).find("'key:read' on \"app/secret/b\"") != std::string::npos);
    BOOST_TEST(errors[1].at("OpIndex").to_number<int>() == 2);
    BOOST_TEST(sm.kv_get("app/ok") == nullptr);  // all or nothing

    r = call(http::verb::put, "/v1/txn", app_secret, R"([{"KV": {"Verb": "set", "Key": "app/ok", "Value": "eA=="}},
                                                          {"KV": {"Verb": "get-tree", "Key": "app/"}}])");
    BOOST_REQUIRE(status(r) == 200);
    auto const results = parse(r);
    for (auto const& e : results.at("Results").as_array())
        BOOST_TEST(std::string(e.at("KV").at("Key").as_string()) != "app/secret/b");  // filtered
}

BOOST_FIXTURE_TEST_CASE(sessions_are_authorised_by_node_name, acl_fixture) {
    // Session write on node prefix "n1": the agent's node (n1) is fine.
    auto r = call(http::verb::put, "/v1/session/create", app_secret, R"({"Name":"s"})");
    BOOST_REQUIRE_MESSAGE(status(r) == 200, r.body());
    std::string const id(parse(r).at("ID").as_string());
    BOOST_TEST(status(call(http::verb::put, "/v1/session/renew/" + id, app_secret)) == 200);
    // The reader may not create, renew or destroy sessions.
    r = call(http::verb::put, "/v1/session/create", reader_secret);
    BOOST_TEST(status(r) == 403);
    BOOST_TEST(r.body().find("lacks permission 'session:write' on \"n1\"") != std::string::npos);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/destroy/" + id, reader_secret)) == 403);
    BOOST_TEST(sm.session_get(id) != nullptr);
    // Lists are filtered by session:read on the node.
    BOOST_TEST(parse(call(http::verb::get, "/v1/session/list", reader_secret)).as_array().empty());
    BOOST_TEST(parse(call(http::verb::get, "/v1/session/list", app_secret)).as_array().size() == 1u);
    // Acquire needs key write; the session belongs to the app.
    BOOST_TEST(call(http::verb::put, "/v1/kv/app/lock?acquire=" + id, app_secret, "me").body() == "true");
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/other/lock?acquire=" + id, app_secret, "me")) == 403);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/destroy/" + id, app_secret)) == 200);
}

BOOST_FIXTURE_TEST_CASE(agent_endpoints_need_agent_or_node_rules, acl_fixture) {
    BOOST_TEST(status(call(http::verb::get, "/v1/agent/self", app_secret)) == 403);
    BOOST_TEST(status(call(http::verb::put, "/v1/agent/check/register", app_secret,
                           R"({"Name":"c","TTL":"10s"})")) == 403);  // node:write
    BOOST_TEST(status(call(http::verb::get, "/v1/catalog/nodes", app_secret)) == 200);       // node read
    BOOST_TEST(parse(call(http::verb::get, "/v1/catalog/nodes", reader_secret)).as_array().empty());  // filtered
    // Unknown endpoints need management under default deny.
    BOOST_TEST(status(call(http::verb::get, "/v1/operator/raft/configuration", app_secret)) == 403);
}

BOOST_FIXTURE_TEST_CASE(blocking_query_is_checked_on_every_evaluation, acl_fixture) {
    put_key("app/w");
    auto const idx = sm.kv_key_index("app/w");
    agent::request req{http::verb::get, "/v1/kv/app/w?index=" + std::to_string(idx) + "&wait=1m", 11};
    req.set("X-Consul-Token", app_secret);
    agent::blocking_state bs;
    auto out = api.handle(req, t0, bs);
    BOOST_REQUIRE(out.wait.has_value());
    // The same query with a token that may not read the key is refused at once.
    req.set("X-Consul-Token", "");
    agent::blocking_state bs2;
    out = api.handle(req, t0, bs2);
    BOOST_REQUIRE(out.res.has_value());
    BOOST_TEST(status(*out.res) == 403);
}

BOOST_FIXTURE_TEST_CASE(acl_token_endpoints, acl_fixture) {
    auto r = call(http::verb::get, "/v1/acl/token/self", app_secret);
    BOOST_REQUIRE(status(r) == 200);
    BOOST_TEST(std::string(parse(r).at("AccessorID").as_string()) == "11111111-2222-3333-4444-555555555555");
    BOOST_TEST(status(call(http::verb::get, "/v1/acl/token/self", "")) == 403);
    // Only acl:write (here: management) creates tokens.
    std::string const body = R"({"Description":"ci","Policies":[{"Name":"read-all"}]})";
    BOOST_TEST(status(call(http::verb::put, "/v1/acl/token", app_secret, body)) == 403);
    r = call(http::verb::put, "/v1/acl/token", management, body);
    BOOST_REQUIRE_MESSAGE(status(r) == 200, r.body());
    std::string const secret(parse(r).at("SecretID").as_string());
    std::string const accessor(parse(r).at("AccessorID").as_string());
    BOOST_TEST(secret.size() == 36u);
    put_key("k");
    BOOST_TEST(status(call(http::verb::get, "/v1/kv/k", secret)) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/k", secret, "x")) == 403);
    // Deleted: its secret is unknown from now on.
    BOOST_TEST(status(call(http::verb::delete_, "/v1/acl/token/" + accessor, management)) == 200);
    BOOST_TEST(call(http::verb::get, "/v1/kv/k", secret).body() == "ACL not found");
    // Bad input: a clear 400, nothing created.
    auto const before = acl.token_count();
    r = call(http::verb::put, "/v1/acl/token", management, R"({"Rules":{"service_prefix":{"":"read"}}})");
    BOOST_TEST(status(r) == 400);
    BOOST_TEST(r.body().find("unsupported rule \"service_prefix\"") != std::string::npos);
    BOOST_TEST(acl.token_count() == before);
}

BOOST_AUTO_TEST_CASE(acls_disabled_answer_401_on_acl_endpoints_only) {
    agent::state_machine sm{config(), {}};
    agent::acl_store acl{agent::acl_options{}};
    agent::http_api api{sm};
    api.set_acl(&acl);
    agent::request req{http::verb::get, "/v1/acl/token/self", 11};
    agent::blocking_state bs;
    auto out = api.handle(req, {}, bs);
    BOOST_TEST(status(*out.res) == 401);
    BOOST_TEST(out.res->body() == "ACL support disabled");
    agent::request put{http::verb::put, "/v1/kv/x", 11};
    out = api.handle(put, {}, bs);
    BOOST_TEST(status(*out.res) == 200);
}

BOOST_AUTO_TEST_CASE(default_allow_lets_unmatched_names_through) {
    agent::state_machine sm{config(), {}};
    agent::acl_store acl{agent::acl_options{.enabled = true,
                                            .default_policy = agent::acl_access::write,
                                            .bootstrap_token = {},
                                            .file_json = R"({"tokens":[{"SecretID":"anonymous",
                                                "Rules":{"key_prefix":{"locked/":"deny"}}}]})"}};
    agent::http_api api{sm};
    api.set_acl(&acl);
    agent::blocking_state bs;
    agent::request a{http::verb::put, "/v1/kv/free", 11};
    BOOST_TEST(status(*api.handle(a, {}, bs).res) == 200);
    agent::request b{http::verb::put, "/v1/kv/locked/x", 11};
    BOOST_TEST(status(*api.handle(b, {}, bs).res) == 403);
}

BOOST_AUTO_TEST_CASE(bad_acl_files_are_refused_with_a_reason) {
    auto error_of = [](std::string file) -> std::string {
        try {
            agent::acl_options o;
            o.enabled = true;
            o.file_json = std::move(file);
            agent::acl_store s{std::move(o)};
        } catch (agent::acl_config_error const& e) {
            return e.what();
        }
        return "";
    };
    BOOST_TEST(error_of("{").find("not valid JSON") != std::string::npos);
    BOOST_TEST(error_of(R"({"tokens":[{"SecretID":"a","Rules":{"key_prefix":{"x":"admin"}}}]})")
                   .find("unknown policy \"admin\"") != std::string::npos);
    BOOST_TEST(error_of(R"({"tokens":[{"Secret":"a"}]})").find("unknown field \"Secret\"") != std::string::npos);
    BOOST_TEST(error_of(R"({"tokens":[{"SecretID":"a","Policies":["nope"]}]})").find("no policy named") !=
               std::string::npos);
    BOOST_TEST(error_of(R"({"tokens":[{"SecretID":"a"},{"SecretID":"a"}]})").find("duplicate SecretID") !=
               std::string::npos);
    BOOST_TEST(error_of(R"({"tokens":[{"Description":"no secret"}]})").find("missing \"SecretID\"") !=
               std::string::npos);
}

BOOST_AUTO_TEST_CASE(tokens_in_urls_are_redacted_for_logs) {
    BOOST_TEST(agent::redact_token("/v1/kv/a?token=s3cr3t&index=4") == "/v1/kv/a?token=<hidden>&index=4");
    BOOST_TEST(agent::redact_token("/v1/kv/a?index=4") == "/v1/kv/a?index=4");
}

BOOST_AUTO_TEST_SUITE_END()

// ---- limits ---------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(agent_limits)

struct limits_fixture {
    agent::time_point t0{};
    agent::state_machine sm{config(), t0};
    agent::http_api api{sm};

    limits_fixture() { api.set_limits({.max_sessions_per_node = 2, .max_kv_keys = 3}); }

    agent::response call(http::verb method, std::string target, std::string body = {}) {
        agent::request req{method, target, 11};
        req.body() = std::move(body);
        req.prepare_payload();
        agent::blocking_state bs;
        auto out = api.handle(req, t0, bs);
        BOOST_REQUIRE(out.res.has_value());
        return std::move(*out.res);
    }
};

BOOST_FIXTURE_TEST_CASE(sessions_per_node, limits_fixture) {
    BOOST_TEST(status(call(http::verb::put, "/v1/session/create")) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/create")) == 200);
    auto r = call(http::verb::put, "/v1/session/create");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(r.body() == "Too many sessions for node \"n1\": 2 (limit 2, -max-sessions-per-node); "
                           "destroy unused sessions first");
    BOOST_TEST(sm.session_list().size() == 2u);
    // Destroying one makes room again.
    auto id = std::string(sm.session_list().front()->id);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/destroy/" + id)) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/session/create")) == 200);
}

BOOST_FIXTURE_TEST_CASE(kv_keys_and_updates_of_existing_keys, limits_fixture) {
    for (auto k : {"a", "b", "c"}) BOOST_TEST(status(call(http::verb::put, std::string("/v1/kv/") + k, "1")) == 200);
    auto r = call(http::verb::put, "/v1/kv/d", "1");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(r.body().find("KV store is full: 3 keys (limit 3") != std::string::npos);
    BOOST_TEST(sm.kv_get("d") == nullptr);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/a", "2")) == 200);  // updates still work
    // A txn that would create a key is refused whole.
    r = call(http::verb::put, "/v1/txn",
             R"([{"KV":{"Verb":"set","Key":"a","Value":"eA=="}},{"KV":{"Verb":"set","Key":"e","Value":"eA=="}}])");
    BOOST_TEST(status(r) == 500);
    BOOST_TEST(sm.kv_get("a")->value.value_or("") == "2");
    BOOST_TEST(status(call(http::verb::delete_, "/v1/kv/a")) == 200);
    BOOST_TEST(status(call(http::verb::put, "/v1/kv/d", "1")) == 200);
}

BOOST_AUTO_TEST_CASE(token_bucket_refills_at_the_rate) {
    agent::time_point t{};
    agent::token_bucket b{10, 2, t};  // 10/s, bursts of 2
    BOOST_TEST(b.try_take(t));
    BOOST_TEST(b.try_take(t));
    BOOST_TEST(!b.try_take(t));
    t += 100ms;  // one token back
    BOOST_TEST(b.try_take(t));
    BOOST_TEST(!b.try_take(t));
    t += 10s;  // never more than the burst
    BOOST_TEST(b.try_take(t));
    BOOST_TEST(b.try_take(t));
    BOOST_TEST(!b.try_take(t));
    agent::token_bucket unlimited{0, 0, t};
    for (int i = 0; i < 1000; ++i) BOOST_REQUIRE(unlimited.try_take(t));
}

BOOST_AUTO_TEST_CASE(refusals_are_429_with_retry_after) {
    auto r = agent::rate_limited();
    BOOST_TEST(status(r) == 429);
    BOOST_TEST(r.body() == "rate limit exceeded, try again later");
    BOOST_TEST(std::string(r[http::field::retry_after]) == "1");
    BOOST_TEST(status(agent::too_many_blocking_queries(5)) == 429);
}

BOOST_AUTO_TEST_SUITE_END()
