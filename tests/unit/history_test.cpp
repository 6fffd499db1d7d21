// The lock history (src/agent/history.hpp), the state machine's feed of it,
// and tenure's own read endpoints and web UI files (views.hpp, ui_assets.hpp)
// through the socket-free HTTP API, with a mock clock.
#include <boost/test/unit_test.hpp>

#include "agent/acl.hpp"
#include "agent/history.hpp"
#include "agent/http_api.hpp"
#include "agent/state.hpp"
#include "agent/ui_assets.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace agent = tenure::detail::agent;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using agent::time_point;

namespace {

time_point at(std::chrono::milliseconds ms) { return time_point{} + ms; }

agent::lock_term term(std::string key, std::uint64_t token, time_point when) {
    agent::lock_term t;
    t.key = std::move(key);
    t.session = "s" + std::to_string(token);
    t.lock_index = token;
    t.acquired = when;
    return t;
}

agent::agent_config config(std::size_t capacity = agent::default_history_capacity) {
    agent::agent_config c;
    c.seed = 99;
    c.node_name = "n1";
    c.history_capacity = capacity;
    return c;
}

std::string session(agent::state_machine& sm, std::string name, time_point now, std::string ttl = "",
                    std::int64_t lock_delay_ns = 2'000'000'000) {
    agent::session_create_request req;
    req.name = std::move(name);
    req.lock_delay_ns = lock_delay_ns;
    if (!ttl.empty()) req.ttl = std::move(ttl);
    auto r = sm.session_create(req, now);
    BOOST_REQUIRE(std::holds_alternative<std::string>(r));
    return std::get<std::string>(r);
}

bool acquire(agent::state_machine& sm, std::string const& key, std::string const& sid, time_point now) {
    auto r = sm.kv_acquire(key, "v", 0, sid, now);
    return std::holds_alternative<bool>(r) && std::get<bool>(r);
}

std::vector<agent::lock_term const*> terms_of(agent::state_machine const& sm, std::string const& key) {
    auto groups = sm.history().by_key([&](std::string_view k) { return k == key; });
    if (groups.empty()) return {};
    return groups.front().second;
}

int status(agent::response const& r) { return static_cast<int>(r.result_int()); }

json::value body(agent::response const& r) {
    boost::system::error_code ec;
    auto v = json::parse(r.body(), ec);
    BOOST_REQUIRE_MESSAGE(!ec, "not JSON: " << r.body());
    return v;
}

struct api_fixture {
    agent::state_machine sm{config(), time_point{}};
    agent::http_api api{sm};

    api_fixture() {
        agent::http_api::view_options v;
        v.wall.at = time_point{};
        v.wall.unix_ms = 1'700'000'000'000;  // instants render as this plus their offset
        api.set_views(v);
    }

    agent::api_outcome handle(std::string target, time_point now, agent::blocking_state& bs,
                              http::verb method = http::verb::get, std::string token = {}) {
        agent::request req{method, target, 11};
        if (!token.empty()) req.set("X-Consul-Token", token);
        return api.handle(req, now, bs);
    }
    agent::response get(std::string target, time_point now = {}, std::string token = {},
                        http::verb method = http::verb::get) {
        agent::blocking_state bs;
        auto out = handle(std::move(target), now, bs, method, std::move(token));
        BOOST_REQUIRE(out.res.has_value());
        return std::move(*out.res);
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(lock_history)

BOOST_AUTO_TEST_CASE(keeps_the_newest_terms_of_all_keys_within_its_capacity) {
    agent::lock_history h{3};
    for (int i = 1; i <= 5; ++i) {
        h.begin(term("k" + std::to_string(i % 2), i, at(i * 1000ms)));
        h.end("k" + std::to_string(i % 2), "released", at(i * 1000ms + 500ms), std::nullopt);
    }
    BOOST_TEST(h.size() == 3u);
    BOOST_TEST(h.recorded() == 5u);
    auto groups = h.by_key([](std::string_view) { return true; });
    BOOST_REQUIRE(groups.size() == 2u);
    BOOST_TEST(groups[0].first == "k0");  // terms 4
    BOOST_REQUIRE(groups[0].second.size() == 1u);
    BOOST_TEST(groups[0].second[0]->lock_index == 4u);
    BOOST_TEST(groups[1].first == "k1");  // terms 3 and 5, oldest first
    BOOST_REQUIRE(groups[1].second.size() == 2u);
    BOOST_TEST(groups[1].second[0]->lock_index == 3u);
    BOOST_TEST(groups[1].second[1]->lock_index == 5u);
    BOOST_TEST((groups[1].second[1]->ended == at(5500ms)));
}

BOOST_AUTO_TEST_CASE(an_open_term_pushed_out_of_the_ring_ends_nowhere) {
    agent::lock_history h{2};
    h.begin(term("long", 1, at(0ms)));  // held while two others come and go
    h.begin(term("a", 1, at(1ms)));
    h.end("a", "released", at(2ms), std::nullopt);
    h.begin(term("b", 1, at(3ms)));  // pushes "long" out
    h.end("long", "ttl-expired", at(4ms), at(5ms));
    auto groups = h.by_key([](std::string_view) { return true; });
    BOOST_REQUIRE(groups.size() == 2u);
    BOOST_TEST(groups[0].first == "a");
    BOOST_TEST(groups[1].first == "b");
    BOOST_TEST(!groups[1].second[0]->ended.has_value());
    h.end("b", "deleted", at(6ms), std::nullopt);
    BOOST_TEST(h.by_key([](std::string_view k) { return k == "b"; })[0].second[0]->end == "deleted");
}

BOOST_AUTO_TEST_CASE(capacity_zero_keeps_nothing) {
    agent::state_machine sm{config(0), time_point{}};
    auto s = session(sm, "a", at(0ms));
    BOOST_TEST(acquire(sm, "k", s, at(0ms)));
    BOOST_TEST(sm.history().size() == 0u);
    BOOST_TEST(sm.history().recorded() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(lock_history_feed)

BOOST_AUTO_TEST_CASE(records_each_holder_with_its_token_and_how_it_let_go) {
    agent::state_machine sm{config(), time_point{}};
    auto a = session(sm, "alpha", at(0ms), "10s");
    auto b = session(sm, "bravo", at(0ms), "10s");
    auto c = session(sm, "charlie", at(0ms));
    BOOST_TEST(acquire(sm, "job", a, at(100ms)));
    BOOST_TEST(acquire(sm, "job", a, at(150ms)));  // re-acquire by the holder: the same term
    BOOST_TEST(std::get<bool>(sm.kv_release("job", "v", 0, a, at(1000ms))));
    BOOST_TEST(acquire(sm, "job", b, at(1200ms)));
    sm.advance(at(20000ms));  // bravo's TTL lapses (2 x 10 s after its last renewal, at 0)
    BOOST_TEST(!acquire(sm, "job", c, at(20500ms)));  // lock-delay: 2 s from the invalidation
    BOOST_TEST(acquire(sm, "job", c, at(22000ms)));
    sm.session_destroy(c, at(23000ms));

    auto t = terms_of(sm, "job");
    BOOST_REQUIRE(t.size() == 3u);
    BOOST_TEST(t[0]->name == "alpha");
    BOOST_TEST(t[0]->node == "n1");
    BOOST_TEST(t[0]->lock_index == 1u);
    BOOST_TEST((t[0]->acquired == at(100ms)));
    BOOST_TEST((t[0]->ended == at(1000ms)));
    BOOST_TEST(t[0]->end == "released");
    BOOST_TEST(!t[0]->lock_delay_until.has_value());
    BOOST_TEST(t[1]->name == "bravo");
    BOOST_TEST(t[1]->lock_index == 2u);
    BOOST_TEST(t[1]->end == "ttl-expired");
    BOOST_TEST((t[1]->ended == at(20000ms)));
    BOOST_TEST((t[1]->lock_delay_until == at(22000ms)));
    BOOST_TEST(t[2]->name == "charlie");
    BOOST_TEST(t[2]->lock_index == 3u);
    BOOST_TEST(t[2]->end == "destroyed");
    BOOST_TEST((t[2]->lock_delay_until == at(25000ms)));
}

BOOST_AUTO_TEST_CASE(a_critical_check_and_a_delete_end_terms_too) {
    agent::state_machine sm{config(), time_point{}};
    agent::health_check chk;
    chk.check_id = "web";
    chk.name = "web";
    chk.status = "passing";
    BOOST_REQUIRE(std::holds_alternative<bool>(sm.agent_check_register(chk, at(0ms))));
    agent::session_create_request req;
    req.name = "checked";
    req.lock_delay_ns = 0;
    req.node_checks = std::vector<std::string>{"serfHealth", "web"};
    auto s = std::get<std::string>(sm.session_create(req, at(0ms)));
    auto d = session(sm, "deleted", at(0ms));
    BOOST_TEST(acquire(sm, "x", s, at(1ms)));
    BOOST_TEST(acquire(sm, "y", d, at(1ms)));
    BOOST_TEST(sm.agent_check_update("web", "critical", "down", at(5ms)));
    sm.kv_delete("y", at(6ms));
    BOOST_TEST(terms_of(sm, "x")[0]->end == "check-critical");
    BOOST_TEST(!terms_of(sm, "x")[0]->lock_delay_until.has_value());  // lock-delay 0
    BOOST_TEST(terms_of(sm, "y")[0]->end == "deleted");
    BOOST_TEST((terms_of(sm, "y")[0]->ended == at(6ms)));
}

BOOST_AUTO_TEST_CASE(a_transaction_records_on_commit_and_nothing_when_it_fails) {
    agent::state_machine sm{config(), time_point{}};
    auto a = session(sm, "a", at(0ms));
    std::vector<agent::txn_kv_op> ok{{"lock", "t", "v", 0, 0, a}};
    BOOST_TEST(sm.txn(ok, at(10ms)).errors.empty());
    BOOST_TEST(terms_of(sm, "t").size() == 1u);
    // Unlock, then a failing check: all of it rolls back, history included.
    std::vector<agent::txn_kv_op> bad{{"unlock", "t", "v", 0, 0, a}, {"check-not-exists", "t", {}, 0, 0, {}}};
    BOOST_TEST(!sm.txn(bad, at(20ms)).errors.empty());
    BOOST_TEST(!terms_of(sm, "t")[0]->ended.has_value());
    std::vector<agent::txn_kv_op> unlock{{"unlock", "t", "v", 0, 0, a}};
    BOOST_TEST(sm.txn(unlock, at(30ms)).errors.empty());
    BOOST_TEST((terms_of(sm, "t")[0]->ended == at(30ms)));
    BOOST_TEST(terms_of(sm, "t")[0]->end == "released");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(tenure_endpoints)

BOOST_FIXTURE_TEST_CASE(history_shows_holders_terms_and_the_lock_delay_in_calendar_time, api_fixture) {
    auto a = session(sm, "alpha", at(0ms), "", 3'000'000'000);
    BOOST_TEST(acquire(sm, "svc/leader", a, at(1000ms)));
    sm.session_destroy(a, at(4000ms));
    auto b = session(sm, "bravo", at(0ms));
    BOOST_TEST(acquire(sm, "other", b, at(4500ms)));

    auto r = get("/v1/tenure/history?key=svc/leader", at(5000ms));
    BOOST_TEST(status(r) == 200);
    auto o = body(r).as_object();
    BOOST_TEST(o.at("Now").as_int64() == 1'700'000'005'000);
    BOOST_TEST(o.at("Capacity").to_number<std::uint64_t>() == agent::default_history_capacity);
    BOOST_TEST(o.at("Recorded").to_number<std::uint64_t>() == 2u);
    auto const& keys = o.at("Keys").as_array();
    BOOST_REQUIRE(keys.size() == 1u);
    auto const& k = keys[0].as_object();
    BOOST_TEST(k.at("Key").as_string() == "svc/leader");
    BOOST_TEST(k.at("Session").as_string() == "");
    BOOST_TEST(k.at("LockIndex").to_number<std::uint64_t>() == 1u);
    BOOST_TEST(k.at("LockDelayUntil").as_int64() == 1'700'000'007'000);
    auto const& t = k.at("Terms").as_array().at(0).as_object();
    BOOST_TEST(t.at("Name").as_string() == "alpha");
    BOOST_TEST(t.at("Session").as_string() == a);
    BOOST_TEST(t.at("LockIndex").to_number<std::uint64_t>() == 1u);
    BOOST_TEST(t.at("Acquired").as_int64() == 1'700'000'001'000);
    BOOST_TEST(t.at("Ended").as_int64() == 1'700'000'004'000);
    BOOST_TEST(t.at("End").as_string() == "destroyed");
    BOOST_TEST(t.at("LockDelayUntil").as_int64() == 1'700'000'007'000);

    // All keys, sorted; the current holder of "other" is named.
    auto all = body(get("/v1/tenure/history", at(5000ms))).as_object().at("Keys").as_array();
    BOOST_REQUIRE(all.size() == 2u);
    BOOST_TEST(all[0].as_object().at("Key").as_string() == "other");
    BOOST_TEST(all[0].as_object().at("SessionName").as_string() == "bravo");
    BOOST_TEST(all[0].as_object().at("Terms").as_array().at(0).as_object().at("End").is_null());
    BOOST_TEST(all[0].as_object().at("LockDelayUntil").is_null());
    auto under = body(get("/v1/tenure/history?prefix=svc/", at(5000ms))).as_object().at("Keys").as_array();
    BOOST_TEST(under.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(history_terms_limits_each_key_to_its_newest, api_fixture) {
    auto a = session(sm, "a", at(0ms), "", 0);
    for (int i = 0; i < 4; ++i) {
        BOOST_TEST(acquire(sm, "k", a, at(i * 10ms)));
        BOOST_TEST(std::get<bool>(sm.kv_release("k", "v", 0, a, at(i * 10ms + 5ms))));
    }
    auto t = body(get("/v1/tenure/history?key=k&terms=2")).as_object().at("Keys").as_array()[0].as_object().at("Terms").as_array();
    BOOST_REQUIRE(t.size() == 2u);
    BOOST_TEST(t[0].as_object().at("LockIndex").to_number<std::uint64_t>() == 3u);
    BOOST_TEST(t[1].as_object().at("LockIndex").to_number<std::uint64_t>() == 4u);
}

BOOST_FIXTURE_TEST_CASE(history_rejects_bad_input_with_400_and_changes_nothing, api_fixture) {
    auto a = session(sm, "a", at(0ms));
    BOOST_TEST(acquire(sm, "k", a, at(0ms)));
    auto const index = sm.raft_index();
    for (std::string q : {"?terms=abc", "?terms=0", "?terms=-1", "?terms=4097", "?terms=99999999999999999999",
                          "?key=", "?key=k&prefix=k", "?key=k&key=j", "?index=x", "?index=1&wait=forever",
                          "?bogus=1", "?recurse"}) {
        auto r = get("/v1/tenure/history" + q);
        BOOST_TEST(status(r) == 400, q << ": " << r.body());
        BOOST_TEST(!r.body().empty(), q);
    }
    // Several good parameters at once are fine (each is checked once).
    BOOST_TEST(status(get("/v1/tenure/history?terms=50&key=k&wait=1s&token=&stale")) == 200);
    BOOST_TEST(status(get("/v1/tenure/history?prefix=&terms=1&index=0&wait=60s")) == 200);
    BOOST_TEST(status(get("/v1/tenure/history", {}, {}, http::verb::put)) == 405);
    BOOST_TEST(status(get("/v1/tenure/history", {}, {}, http::verb::delete_)) == 405);
    BOOST_TEST(status(get("/v1/tenure/bogus")) == 404);
    BOOST_TEST(sm.raft_index() == index);
    BOOST_TEST(sm.kv_get("k")->session == a);
    BOOST_TEST(sm.history().size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(history_blocks_until_the_key_changes_holder, api_fixture) {
    auto a = session(sm, "a", at(0ms), "", 0);
    auto b = session(sm, "b", at(0ms), "", 0);
    BOOST_TEST(acquire(sm, "k", a, at(0ms)));
    auto first = get("/v1/tenure/history?key=k");
    std::string const index(first["X-Consul-Index"]);
    agent::blocking_state bs;
    auto out = handle("/v1/tenure/history?key=k&wait=10s&index=" + index, at(1ms), bs);
    BOOST_REQUIRE(out.wait.has_value());
    bool woke = false;
    auto reg = sm.watch(out.wait->targets, [&] { woke = true; });
    BOOST_TEST(std::get<bool>(sm.kv_release("k", "v", 0, a, at(2ms))));
    BOOST_TEST(woke);
    BOOST_TEST(acquire(sm, "k", b, at(3ms)));
    out = handle("/v1/tenure/history?key=k&wait=10s&index=" + index, at(3ms), bs);
    BOOST_REQUIRE(out.res.has_value());
    auto const v = body(*out.res);
    auto const& k = v.as_object().at("Keys").as_array()[0].as_object();
    BOOST_TEST(k.at("SessionName").as_string() == "b");
    BOOST_TEST(k.at("Terms").as_array().size() == 2u);
}

BOOST_FIXTURE_TEST_CASE(sessions_view_shows_renewals_checks_and_held_keys_and_wakes_on_renewal, api_fixture) {
    auto a = session(sm, "alpha", at(0ms), "10s");
    BOOST_TEST(acquire(sm, "job", a, at(0ms)));
    BOOST_TEST(sm.session_renew(a, at(3000ms)).has_value());
    auto r = get("/v1/tenure/sessions", at(4000ms));
    BOOST_TEST(status(r) == 200);
    auto o = body(r).as_object();
    BOOST_TEST(o.at("Now").as_int64() == 1'700'000'004'000);
    auto const& s = o.at("Sessions").as_array().at(0).as_object();
    BOOST_TEST(s.at("Name").as_string() == "alpha");
    BOOST_TEST(s.at("TTL").as_string() == "10s");
    BOOST_TEST(s.at("LockDelay").to_number<std::int64_t>() == 2000);
    BOOST_TEST(s.at("LastRenewed").as_int64() == 1'700'000'003'000);
    BOOST_TEST(s.at("ExpiresAt").as_int64() == 1'700'000'023'000);
    BOOST_TEST(s.at("Held").as_array().at(0).as_string() == "job");
    auto const& c = s.at("Checks").as_array().at(0).as_object();
    BOOST_TEST(c.at("CheckID").as_string() == "serfHealth");
    BOOST_TEST(c.at("Status").as_string() == "passing");
    BOOST_TEST(o.at("Checks").as_array().at(0).as_object().at("CheckID").as_string() == "serfHealth");

    // A renewal moves no Consul index, yet this view wakes on it.
    std::string const index(r["X-Consul-Index"]);
    agent::blocking_state bs;
    auto out = handle("/v1/tenure/sessions?wait=10s&index=" + index, at(4000ms), bs);
    BOOST_REQUIRE(out.wait.has_value());
    bool woke = false;
    auto reg = sm.watch(out.wait->targets, [&] { woke = true; });
    auto const raft = sm.raft_index();
    BOOST_TEST(sm.session_renew(a, at(5000ms)).has_value());
    BOOST_TEST(woke);
    BOOST_TEST(sm.raft_index() == raft);
    out = handle("/v1/tenure/sessions?wait=10s&index=" + index, at(5000ms), bs);
    BOOST_REQUIRE(out.res.has_value());
    BOOST_TEST(body(*out.res).as_object().at("Sessions").as_array().at(0).as_object().at("LastRenewed").as_int64() ==
               1'700'000'005'000);
    BOOST_TEST(status(get("/v1/tenure/sessions?key=x")) == 400);
}

BOOST_FIXTURE_TEST_CASE(the_ui_is_off_by_default_and_serves_its_files_when_on, api_fixture) {
    BOOST_TEST(status(get("/ui/")) == 404);
    BOOST_TEST(status(get("/ui/app.js")) == 404);
    agent::http_api::view_options v;
    v.ui = true;
    api.set_views(v);
    auto r = get("/ui");
    BOOST_TEST(status(r) == 301);
    BOOST_TEST(r[http::field::location] == "/ui/");
    r = get("/ui/");
    BOOST_TEST(status(r) == 200);
    BOOST_TEST(r[http::field::content_type] == "text/html; charset=utf-8");
    BOOST_TEST(r.body().find("app.js") != std::string::npos);
    BOOST_TEST(std::string(r["Content-Security-Policy"]).find("default-src 'self'") != std::string::npos);
    auto const* js = agent::find_ui_asset("app.js");
    BOOST_REQUIRE(js);
    r = get("/ui/app.js");
    BOOST_TEST(r.body() == js->body);
    BOOST_TEST(r[http::field::content_type] == "text/javascript; charset=utf-8");
    BOOST_TEST(status(get("/ui/style.css")) == 200);
    BOOST_TEST(status(get("/ui/../v1/kv/x")) == 404);
    BOOST_TEST(status(get("/ui/nothing.js")) == 404);
    BOOST_TEST(status(get("/ui/", {}, {}, http::verb::put)) == 405);
}

BOOST_AUTO_TEST_CASE(with_acls_the_views_show_only_what_the_token_may_read) {
    agent::state_machine sm{config(), time_point{}};
    agent::acl_store acl{agent::acl_options{
        .enabled = true,
        .default_policy = agent::acl_access::deny,
        .bootstrap_token = "root",
        .file_json = R"({"tokens": [{"SecretID": "app", "Rules": {"key_prefix": {"app/": {"policy": "read"}},
                          "session_prefix": {"": {"policy": "read"}}, "node_prefix": {"": {"policy": "read"}}}}]})"}};
    agent::http_api api{sm};
    api.set_acl(&acl);
    agent::http_api::view_options v;
    v.ui = true;
    api.set_views(v);
    auto s = session(sm, "x", at(0ms));
    BOOST_TEST(acquire(sm, "app/a", s, at(0ms)));
    BOOST_TEST(acquire(sm, "secret/b", s, at(0ms)));
    auto call = [&](std::string target, std::string token) {
        agent::request req{http::verb::get, target, 11};
        if (!token.empty()) req.set("X-Consul-Token", token);
        agent::blocking_state bs;
        auto out = api.handle(req, {}, bs);
        BOOST_REQUIRE(out.res.has_value());
        return std::move(*out.res);
    };
    BOOST_TEST(status(call("/v1/tenure/history", "nope")) == 403);
    BOOST_TEST(status(call("/ui/", "")) == 200);  // the files hold no data
    auto r = call("/v1/tenure/history", "app");
    BOOST_TEST(status(r) == 200);
    auto keys = body(r).as_object().at("Keys").as_array();
    BOOST_REQUIRE(keys.size() == 1u);
    BOOST_TEST(keys[0].as_object().at("Key").as_string() == "app/a");
    BOOST_TEST(r["X-Consul-Results-Filtered-By-ACLs"] == "true");
    auto held = body(call("/v1/tenure/sessions", "app")).as_object().at("Sessions").as_array().at(0).as_object().at("Held").as_array();
    BOOST_REQUIRE(held.size() == 1u);
    BOOST_TEST(held[0].as_string() == "app/a");
    BOOST_TEST(body(call("/v1/tenure/history", "")).as_object().at("Keys").as_array().empty());  // anonymous: deny
    BOOST_TEST(body(call("/v1/tenure/history", "root")).as_object().at("Keys").as_array().size() == 2u);
}

BOOST_AUTO_TEST_SUITE_END()
