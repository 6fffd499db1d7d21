// The embedded agent's state machine (include/tenure/detail/agent/state.hpp),
// driven with a mock clock: a time_point we advance by hand and sm.advance(t)
// to fire timers. Every expectation is Consul's behaviour as documented in
// /work/shared/reference/consul-semantics.md (sections cited per suite).
#include <boost/test/unit_test.hpp>

#include "agent/state.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <regex>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace agent = tenure::detail::agent;
using namespace std::chrono_literals;
using agent::time_point;
using std::chrono::nanoseconds;

// ---- printing for BOOST_TEST ----------------------------------------------

namespace tenure::detail::agent {
inline std::ostream& boost_test_print_type(std::ostream& os, invalidation_cause c) {
    return os << "invalidation_cause(" << static_cast<int>(c) << ")";
}
inline std::ostream& boost_test_print_type(std::ostream& os, session_behavior b) {
    return os << (b == session_behavior::release ? "release" : "delete");
}
}  // namespace tenure::detail::agent

namespace boost::test_tools::tt_detail {
template <>
struct print_log_value<std::optional<std::string>> {
    void operator()(std::ostream& os, std::optional<std::string> const& v) {
        if (v) os << '"' << *v << '"';
        else os << "nullopt";
    }
};
template <>
struct print_log_value<std::nullopt_t> {
    void operator()(std::ostream& os, std::nullopt_t) { os << "nullopt"; }
};
template <>
struct print_log_value<time_point> {
    void operator()(std::ostream& os, time_point t) { os << "t0+" << t.time_since_epoch().count() << "ns"; }
};
template <>
struct print_log_value<std::optional<time_point>> {
    void operator()(std::ostream& os, std::optional<time_point> const& t) {
        if (t) os << "t0+" << t->time_since_epoch().count() << "ns";
        else os << "nullopt";
    }
};
}  // namespace boost::test_tools::tt_detail

namespace {

using agent::check_critical;
using agent::check_passing;
using agent::check_warning;
using agent::invalidation_cause;
using agent::kv_entry;
using agent::session_behavior;
using agent::session_create_request;
using agent::session_entry;
using agent::state_machine;
using agent::txn_kv_op;
using agent::watch_target;
using strings = std::vector<std::string>;

constexpr std::int64_t ns_per_s = 1'000'000'000;

agent::agent_config test_config() {
    agent::agent_config c;
    c.seed = 20240601;  // deterministic UUIDs
    return c;
}

// ---- result<T> helpers ------------------------------------------------------

template <class T>
T ok(agent::result<T> r) {
    if (auto const* e = std::get_if<agent::state_error>(&r))
        BOOST_REQUIRE_MESSAGE(false, "unexpected state_error: " << e->message);
    return std::get<T>(std::move(r));
}

template <class T>
std::string err(agent::result<T> const& r) {
    BOOST_REQUIRE_MESSAGE(std::holds_alternative<agent::state_error>(r), "expected a state_error, got a value");
    return std::get<agent::state_error>(r).message;
}

std::string create(state_machine& sm, session_create_request const& req, time_point now) {
    return ok(sm.session_create(req, now));
}

bool acquire(state_machine& sm, std::string_view key, std::string_view sid, time_point now,
             std::optional<std::string> value = "v", std::uint64_t flags = 0) {
    return ok(sm.kv_acquire(key, std::move(value), flags, sid, now));
}

bool release(state_machine& sm, std::string_view key, std::string_view sid, std::optional<std::string> value = "v",
             std::uint64_t flags = 0) {
    return ok(sm.kv_release(key, std::move(value), flags, sid, {}));
}

kv_entry const& get(state_machine const& sm, std::string_view key) {
    auto const* e = sm.kv_get(key);
    BOOST_REQUIRE_MESSAGE(e != nullptr, "key \"" << key << "\" is missing");
    return *e;
}

session_entry const& session(state_machine const& sm, std::string_view id) {
    auto const* s = sm.session_get(id);
    BOOST_REQUIRE_MESSAGE(s != nullptr, "session " << id << " is missing");
    return *s;
}

bool is_uuid_v4(std::string const& s) {
    static std::regex const re{"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"};
    return std::regex_match(s, re);
}

bool contains(std::string_view hay, std::string_view needle) { return hay.find(needle) != std::string_view::npos; }

strings sorted(strings v) {
    std::sort(v.begin(), v.end());
    return v;
}

strings keys_of(std::vector<kv_entry const*> const& v) {
    strings out;
    for (auto const* e : v) out.push_back(e->key);
    return out;
}

// Registers (or replaces) an agent TTL check on the agent's node.
void register_ttl_check(state_machine& sm, std::string id, nanoseconds ttl, std::optional<std::string> status,
                        time_point now) {
    agent::health_check c;
    c.check_id = id;
    c.name = id;
    c.type = "ttl";
    c.ttl = ttl;
    if (status) c.status = *status;
    ok(sm.agent_check_register(std::move(c), now));
}

// Registers node `name` in the catalog with passing checks `check_ids`.
void register_node(state_machine& sm, std::string name, strings const& check_ids, time_point now,
                   std::string_view status = check_passing) {
    agent::node_entry n;
    n.node = name;
    n.address = "10.0.0.2";
    n.datacenter = "dc1";
    std::vector<agent::health_check> checks;
    for (auto const& id : check_ids) {
        agent::health_check c;
        c.node = name;
        c.check_id = id;
        c.name = id;
        c.status = std::string(status);
        checks.push_back(std::move(c));
    }
    ok(sm.catalog_register(std::move(n), std::move(checks), now));
}

// Records every on_invalidate call.
struct invalidation_log {
    std::vector<std::pair<std::string, invalidation_cause>> events;
    void attach(state_machine& sm) {
        sm.on_invalidate = [this](session_entry const& s, invalidation_cause c) { events.emplace_back(s.id, c); };
    }
};

struct sm_fixture {
    time_point t0{};
    state_machine sm{test_config(), t0};
    invalidation_log log;
    sm_fixture() { log.attach(sm); }

    // A session with the agent defaults plus the given overrides.
    std::string new_session(time_point now, std::int64_t lock_delay_ns = 15 * ns_per_s,
                            session_behavior behavior = session_behavior::release) {
        session_create_request req;
        req.lock_delay_ns = lock_delay_ns;
        req.behavior = behavior == session_behavior::release ? "release" : "delete";
        return create(sm, req, now);
    }

    // After an invalidation at `at` that applied an effective lock-delay of
    // `delay` to `key`: the delay window is [at, at+delay), seen both through
    // lock_delay_until and through acquires by a brand-new session.
    void expect_lock_delay(std::string const& key, time_point at, nanoseconds delay) {
        BOOST_TEST_CONTEXT("lock-delay on \"" << key << "\"") {
            auto until = sm.lock_delay_until(key, at);
            BOOST_REQUIRE(until.has_value());
            BOOST_TEST(*until == at + delay);
            BOOST_TEST(sm.lock_delay_until(key, at + delay - 1ns) == std::optional<time_point>(at + delay));
            BOOST_TEST(!sm.lock_delay_until(key, at + delay).has_value());
            auto fresh = new_session(at);
            BOOST_TEST(!acquire(sm, key, fresh, at));
            BOOST_TEST(!acquire(sm, key, fresh, at + delay - 1ns));
            BOOST_TEST(acquire(sm, key, fresh, at + delay));
            BOOST_TEST(get(sm, key).session == fresh);
        }
    }
};

}  // namespace

// ===========================================================================
// §1 Session create: defaults, validation, IDs
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_session)

BOOST_AUTO_TEST_CASE(agent_registers_its_own_node_with_passing_serf_health) {
    agent::agent_config cfg = test_config();
    cfg.node_name = "alpha";
    cfg.address = "192.0.2.7";
    cfg.datacenter = "dc9";
    state_machine sm{cfg, time_point{}};
    auto const* n = sm.node_get("alpha");
    BOOST_REQUIRE(n);
    BOOST_TEST(n->address == "192.0.2.7");
    BOOST_TEST(n->datacenter == "dc9");
    BOOST_TEST(is_uuid_v4(n->id), "generated node id " << n->id);
    auto const* serf = sm.check_get("alpha", "serfHealth");
    BOOST_REQUIRE(serf);
    BOOST_TEST(serf->status == "passing");
}

BOOST_AUTO_TEST_CASE(configured_node_id_is_used) {
    agent::agent_config cfg = test_config();
    cfg.node_id = "5d2c6a1e-0b6f-4e5a-9a53-0c7f0e6b1a01";
    state_machine sm{cfg, time_point{}};
    auto const* n = sm.node_get(cfg.node_name);
    BOOST_REQUIRE(n);
    BOOST_TEST(n->id == "5d2c6a1e-0b6f-4e5a-9a53-0c7f0e6b1a01");
}

BOOST_AUTO_TEST_CASE(create_fills_consul_defaults) {
    agent::agent_config cfg = test_config();
    cfg.node_name = "alpha";
    time_point t0{};
    state_machine sm{cfg, t0};
    auto id = create(sm, {}, t0);
    auto const& s = session(sm, id);
    BOOST_TEST(s.id == id);
    BOOST_TEST(s.name == "");
    BOOST_TEST(s.node == "alpha");
    BOOST_TEST(s.node_checks == strings{"serfHealth"}, boost::test_tools::per_element());
    BOOST_TEST(s.checks.empty());  // Checks == ["serfHealth"] is folded into NodeChecks
    BOOST_TEST(s.service_checks.empty());
    BOOST_TEST(s.check_ids() == strings{"serfHealth"}, boost::test_tools::per_element());
    BOOST_TEST(s.lock_delay_ns == 15'000'000'000);
    BOOST_TEST(s.behavior == session_behavior::release);
    BOOST_TEST(s.ttl == "");
    BOOST_TEST(s.ttl_duration.count() == 0);
    BOOST_TEST(s.create_index == sm.sessions_index());
    BOOST_TEST(s.modify_index == s.create_index);
    BOOST_TEST(sm.raft_index() == s.create_index);
}

BOOST_FIXTURE_TEST_CASE(create_keeps_given_fields, sm_fixture) {
    session_create_request req;
    req.name = "nightly-report";
    req.lock_delay_ns = 0;
    req.behavior = "delete";
    req.ttl = "1m30s";
    auto id = create(sm, req, t0);
    auto const& s = session(sm, id);
    BOOST_TEST(s.name == "nightly-report");
    BOOST_TEST(s.lock_delay_ns == 0);
    BOOST_TEST(s.behavior == session_behavior::delete_keys);
    BOOST_TEST(s.ttl == "1m30s");  // echoed as given, not normalised
    BOOST_TEST(s.ttl_duration.count() == 90 * ns_per_s);
}

BOOST_FIXTURE_TEST_CASE(empty_behavior_means_release, sm_fixture) {
    session_create_request req;
    req.behavior = "";
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).behavior == session_behavior::release);
}

BOOST_FIXTURE_TEST_CASE(lock_delay_is_stored_unclamped, sm_fixture) {
    session_create_request req;
    req.lock_delay_ns = 120 * ns_per_s;
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).lock_delay_ns == 120 * ns_per_s);
}

BOOST_FIXTURE_TEST_CASE(ids_are_unique_v4_uuids, sm_fixture) {
    std::set<std::string> ids;
    for (int i = 0; i < 50; ++i) {
        auto id = create(sm, {}, t0);
        BOOST_TEST(is_uuid_v4(id), "session id " << id);
        ids.insert(id);
    }
    BOOST_TEST(ids.size() == 50u);
    BOOST_TEST(sm.session_list().size() == 50u);
}

BOOST_AUTO_TEST_CASE(generate_uuid_is_v4_and_seeded) {
    agent::agent_config cfg = test_config();
    cfg.seed = 7;
    state_machine a{cfg, time_point{}};
    state_machine b{cfg, time_point{}};
    auto ua = a.generate_uuid();
    BOOST_TEST(is_uuid_v4(ua), ua);
    BOOST_TEST(ua == b.generate_uuid());  // same seed, same sequence (the simulator relies on it)
    BOOST_TEST(a.generate_uuid() != ua);
}

BOOST_FIXTURE_TEST_CASE(random_stagger_stays_in_bound, sm_fixture) {
    BOOST_TEST(sm.random_stagger(0ns).count() == 0);
    std::set<std::int64_t> seen;
    for (int i = 0; i < 1000; ++i) {
        auto v = sm.random_stagger(1s);
        BOOST_TEST_REQUIRE(v.count() >= 0);
        BOOST_TEST_REQUIRE(v.count() < ns_per_s);
        seen.insert(v.count());
    }
    BOOST_TEST(seen.size() > 900u);  // uniform over 1e9 values: duplicates are rare
}

// ---- validation ----------------------------------------------------------

struct rejection_fixture : sm_fixture {
    // Asserts that `req` is refused with exactly `message` (or a message
    // containing it when `exact` is false) and that nothing changed.
    void expect_rejected(session_create_request const& req, std::string const& message, bool exact = true) {
        auto const sessions_before = sm.sessions_index();
        auto const raft_before = sm.raft_index();
        auto const count_before = sm.session_list().size();
        auto const deadline_before = sm.next_deadline();
        auto r = sm.session_create(req, t0);
        auto msg = err(r);
        if (exact) BOOST_TEST(msg == message);
        else BOOST_TEST(contains(msg, message), "message \"" << msg << "\" should contain \"" << message << "\"");
        BOOST_TEST(sm.sessions_index() == sessions_before);
        BOOST_TEST(sm.raft_index() == raft_before);
        BOOST_TEST(sm.session_list().size() == count_before);
        BOOST_TEST(sm.next_deadline() == deadline_before);
    }
};

BOOST_FIXTURE_TEST_CASE(explicit_empty_node_is_refused, rejection_fixture) {
    session_create_request req;
    req.node = "";
    expect_rejected(req, "Must provide Node");
}

BOOST_FIXTURE_TEST_CASE(bad_behavior_is_refused, rejection_fixture) {
    session_create_request req;
    req.behavior = "bogus";
    expect_rejected(req, "Invalid Behavior setting 'bogus'");
    req.behavior = "Release";  // case matters
    expect_rejected(req, "Invalid Behavior setting 'Release'");
}

BOOST_FIXTURE_TEST_CASE(unparsable_ttl_is_refused, rejection_fixture) {
    session_create_request req;
    req.ttl = "abc";
    expect_rejected(req, "Session TTL 'abc' invalid: ", false);
    auto msg = err(sm.session_create(req, t0));
    BOOST_TEST(msg.rfind("Session TTL 'abc' invalid: ", 0) == 0u, msg);
    BOOST_TEST(msg == R"(Session TTL 'abc' invalid: time: invalid duration "abc")");
    req.ttl = "15";
    BOOST_TEST(err(sm.session_create(req, t0)) == R"(Session TTL '15' invalid: time: missing unit in duration "15")");
}

BOOST_FIXTURE_TEST_CASE(ttl_below_minimum_is_refused_with_nanoseconds, rejection_fixture) {
    session_create_request req;
    req.ttl = "5s";
    expect_rejected(req, "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]");
    req.ttl = "9.999s";
    expect_rejected(req, "Invalid Session TTL '9999000000', must be between [10s=24h0m0s]");
    req.ttl = "-5s";
    expect_rejected(req, "Invalid Session TTL '-5000000000', must be between [10s=24h0m0s]");
}

BOOST_FIXTURE_TEST_CASE(ttl_above_maximum_is_refused, rejection_fixture) {
    session_create_request req;
    req.ttl = "25h";
    expect_rejected(req, "Invalid Session TTL '90000000000000', must be between [10s=24h0m0s]");
    req.ttl = "24h0m0.000000001s";
    expect_rejected(req, "Invalid Session TTL '86400000000001', must be between [10s=24h0m0s]");
}

BOOST_FIXTURE_TEST_CASE(ttl_bounds_are_inclusive, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto a = create(sm, req, t0);
    BOOST_TEST(session(sm, a).ttl_duration.count() == 10 * ns_per_s);
    req.ttl = "24h";
    auto b = create(sm, req, t0);
    BOOST_TEST(session(sm, b).ttl_duration.count() == 86400 * ns_per_s);
}

BOOST_FIXTURE_TEST_CASE(zero_ttl_means_no_ttl, sm_fixture) {
    for (std::string ttl : {"0s", "0", "0m", ""}) {
        BOOST_TEST_CONTEXT("TTL \"" << ttl << "\"") {
            session_create_request req;
            req.ttl = ttl;
            auto id = create(sm, req, t0);
            BOOST_TEST(session(sm, id).ttl == ttl);
            BOOST_TEST(session(sm, id).ttl_duration.count() == 0);
        }
    }
    BOOST_TEST(!sm.next_deadline().has_value());
    sm.advance(t0 + 48h);
    BOOST_TEST(sm.session_list().size() == 4u);
    BOOST_TEST(log.events.empty());
}

BOOST_FIXTURE_TEST_CASE(unknown_node_is_refused, rejection_fixture) {
    session_create_request req;
    req.node = "ghost";
    expect_rejected(req, "apply failed: Missing node registration");
}

BOOST_FIXTURE_TEST_CASE(missing_check_is_refused, rejection_fixture) {
    session_create_request req;
    req.node_checks = strings{"serfHealth", "x"};
    expect_rejected(req, "Missing check 'x' registration", false);
    BOOST_TEST(err(sm.session_create(req, t0)) == "apply failed: Missing check 'x' registration");
}

BOOST_FIXTURE_TEST_CASE(missing_service_check_is_refused, rejection_fixture) {
    session_create_request req;
    req.service_checks = std::vector<agent::service_check_ref>{{"svc", ""}};
    expect_rejected(req, "Missing check 'svc' registration", false);
}

BOOST_FIXTURE_TEST_CASE(critical_check_is_refused, rejection_fixture) {
    register_ttl_check(sm, "x", 30s, std::nullopt, t0);  // a TTL check starts critical
    session_create_request req;
    req.node_checks = strings{"x"};
    expect_rejected(req, "Check 'x' is in critical state", false);
    BOOST_TEST(err(sm.session_create(req, t0)) == "apply failed: Check 'x' is in critical state");
}

BOOST_FIXTURE_TEST_CASE(warning_check_is_accepted, sm_fixture) {
    register_ttl_check(sm, "x", 30s, std::string(check_warning), t0);
    session_create_request req;
    req.node_checks = strings{"x"};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).node_checks == strings{"x"}, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(checks_on_another_node_are_validated_there, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    session_create_request req;
    req.node = "n2";
    // Default NodeChecks is serfHealth, which n2 does not have.
    BOOST_TEST(err(sm.session_create(req, t0)) == "apply failed: Missing check 'serfHealth' registration");
    req.node_checks = strings{"c1"};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).node == "n2");
}

BOOST_AUTO_TEST_CASE(session_ttl_min_is_configurable) {
    agent::agent_config cfg = test_config();
    cfg.session_ttl_min = 100ms;
    time_point t0{};
    state_machine sm{cfg, t0};
    session_create_request req;
    req.ttl = "200ms";
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).ttl_duration.count() == 200'000'000);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 400ms));
    req.ttl = "50ms";
    BOOST_TEST(err(sm.session_create(req, t0)) == "Invalid Session TTL '50000000', must be between [100ms=24h0m0s]");
}

// ---- Checks / NodeChecks fix-up (fixupEmptySessionChecks) ------------------

BOOST_FIXTURE_TEST_CASE(empty_checks_list_means_no_checks, sm_fixture) {
    session_create_request req;
    req.checks = strings{};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).check_ids().empty());
    BOOST_TEST(session(sm, id).node_checks.empty());
}

BOOST_FIXTURE_TEST_CASE(empty_node_checks_means_no_checks, sm_fixture) {
    session_create_request req;
    req.node_checks = strings{};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).check_ids().empty());
    BOOST_TEST(session(sm, id).checks.empty());
}

BOOST_FIXTURE_TEST_CASE(legacy_checks_merge_with_default_node_checks, sm_fixture) {
    register_ttl_check(sm, "a", 30s, std::string(check_passing), t0);
    session_create_request req;
    req.checks = strings{"a"};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).checks == strings{"a"}, boost::test_tools::per_element());
    BOOST_TEST(sorted(session(sm, id).check_ids()) == (strings{"a", "serfHealth"}), boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(explicit_node_checks_replace_the_default, sm_fixture) {
    register_ttl_check(sm, "a", 30s, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"a"};
    auto id = create(sm, req, t0);
    BOOST_TEST(session(sm, id).check_ids() == strings{"a"}, boost::test_tools::per_element());
}

// ---- get / list / destroy / renew ----------------------------------------

BOOST_FIXTURE_TEST_CASE(list_and_list_node, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    auto a = create(sm, {}, t0);
    auto b = create(sm, {}, t0);
    session_create_request on_n2;
    on_n2.node = "n2";
    on_n2.node_checks = strings{"c1"};
    auto c = create(sm, on_n2, t0);
    strings all;
    for (auto const* s : sm.session_list()) all.push_back(s->id);
    BOOST_TEST(sorted(all) == sorted({a, b, c}), boost::test_tools::per_element());
    strings local;
    for (auto const* s : sm.session_list_node("tenure")) local.push_back(s->id);
    BOOST_TEST(sorted(local) == sorted({a, b}), boost::test_tools::per_element());
    auto remote = sm.session_list_node("n2");
    BOOST_REQUIRE(remote.size() == 1u);
    BOOST_TEST(remote[0]->id == c);
    BOOST_TEST(sm.session_list_node("ghost").empty());
    BOOST_TEST(sm.session_get("no-such-id") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(destroy_removes_and_bumps_index, sm_fixture) {
    auto id = create(sm, {}, t0);
    auto before = sm.sessions_index();
    BOOST_TEST(sm.session_destroy(id, t0 + 1s));
    BOOST_TEST(sm.session_get(id) == nullptr);
    BOOST_TEST(sm.sessions_index() > before);
    BOOST_TEST(sm.sessions_index() == sm.raft_index());
    BOOST_TEST(sm.session_list().empty());
}

BOOST_FIXTURE_TEST_CASE(destroy_of_unknown_id_changes_nothing, sm_fixture) {
    auto id = create(sm, {}, t0);
    auto before = sm.sessions_index();
    auto raft_before = sm.raft_index();
    BOOST_TEST(!sm.session_destroy("00000000-0000-4000-8000-000000000000", t0));
    BOOST_TEST(sm.sessions_index() == before);
    BOOST_TEST(sm.raft_index() == raft_before);
    BOOST_TEST(sm.session_get(id) != nullptr);
    BOOST_TEST(sm.session_destroy(id, t0));
    BOOST_TEST(!sm.session_destroy(id, t0));  // second destroy: already gone
    BOOST_TEST(log.events.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(renew_returns_the_session_unchanged, sm_fixture) {
    session_create_request req;
    req.name = "n";
    req.ttl = "10s";
    auto id = create(sm, req, t0);
    auto const stored = session(sm, id);
    auto const idx = sm.sessions_index();
    auto const raft = sm.raft_index();
    auto r = sm.session_renew(id, t0 + 5s);
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->id == id);
    BOOST_TEST(r->name == "n");
    BOOST_TEST(r->ttl == "10s");
    BOOST_TEST(r->ttl_duration.count() == 10 * ns_per_s);
    BOOST_TEST(r->lock_delay_ns == stored.lock_delay_ns);
    BOOST_TEST(r->create_index == stored.create_index);
    BOOST_TEST(r->modify_index == stored.modify_index);
    // Renew is leader-local: no write.
    BOOST_TEST(sm.sessions_index() == idx);
    BOOST_TEST(sm.raft_index() == raft);
}

BOOST_FIXTURE_TEST_CASE(renew_of_unknown_id_is_nullopt, sm_fixture) {
    BOOST_TEST(!sm.session_renew("00000000-0000-4000-8000-000000000000", t0).has_value());
    auto id = create(sm, {}, t0);
    BOOST_TEST(sm.session_destroy(id, t0));
    BOOST_TEST(!sm.session_renew(id, t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(renew_without_ttl_succeeds_and_arms_nothing, sm_fixture) {
    auto id = create(sm, {}, t0);
    auto r = sm.session_renew(id, t0 + 1s);
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->ttl == "");
    BOOST_TEST(!sm.next_deadline().has_value());
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// §3 TTL invalidation timing (2 x TTL, reset by renew)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_ttl)

BOOST_FIXTURE_TEST_CASE(lapse_happens_exactly_at_twice_the_ttl, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto id = create(sm, req, t0);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 20s));
    sm.advance(t0 + 10s);
    sm.advance(t0 + 20s - 1ns);
    BOOST_TEST(sm.session_get(id) != nullptr);
    BOOST_TEST(log.events.empty());
    sm.advance(t0 + 20s);
    BOOST_TEST(sm.session_get(id) == nullptr);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == id);
    BOOST_TEST(log.events[0].second == invalidation_cause::ttl_expired);
    BOOST_TEST(!sm.next_deadline().has_value());
    BOOST_TEST(!sm.session_renew(id, t0 + 20s).has_value());
}

BOOST_FIXTURE_TEST_CASE(renew_pushes_expiry_to_now_plus_twice_the_ttl, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto id = create(sm, req, t0);
    sm.advance(t0 + 15s);
    auto r = sm.session_renew(id, t0 + 15s);
    BOOST_REQUIRE(r.has_value());
    BOOST_TEST(r->ttl == "10s");
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 35s));
    sm.advance(t0 + 20s);  // the old deadline no longer fires
    BOOST_TEST(sm.session_get(id) != nullptr);
    sm.advance(t0 + 35s - 1ns);
    BOOST_TEST(sm.session_get(id) != nullptr);
    sm.advance(t0 + 35s);
    BOOST_TEST(sm.session_get(id) == nullptr);
    BOOST_TEST(log.events.size() == 1u);
}

BOOST_FIXTURE_TEST_CASE(renewing_keeps_a_session_alive_indefinitely, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto id = create(sm, req, t0);
    for (int i = 1; i <= 100; ++i) {
        auto now = t0 + i * 5s;
        sm.advance(now);
        BOOST_REQUIRE(sm.session_renew(id, now).has_value());
    }
    BOOST_TEST(sm.session_get(id) != nullptr);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 500s + 20s));
    BOOST_TEST(log.events.empty());
}

BOOST_FIXTURE_TEST_CASE(next_deadline_is_the_earliest_timer, sm_fixture) {
    session_create_request req;
    req.ttl = "30s";
    auto a = create(sm, req, t0);
    req.ttl = "10s";
    auto b = create(sm, req, t0 + 1s);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 21s));
    sm.advance(t0 + 21s);
    BOOST_TEST(sm.session_get(b) == nullptr);
    BOOST_TEST(sm.session_get(a) != nullptr);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 60s));
}

BOOST_FIXTURE_TEST_CASE(one_advance_fires_every_due_timer, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto a = create(sm, req, t0);
    req.ttl = "15s";
    auto b = create(sm, req, t0);
    req.ttl = "1h";
    auto c = create(sm, req, t0);
    sm.advance(t0 + 1h);
    BOOST_TEST(sm.session_get(a) == nullptr);
    BOOST_TEST(sm.session_get(b) == nullptr);
    BOOST_TEST(sm.session_get(c) != nullptr);
    BOOST_TEST(log.events.size() == 2u);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 2h));
}

BOOST_FIXTURE_TEST_CASE(destroy_cancels_the_ttl_timer, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto id = create(sm, req, t0);
    BOOST_TEST(sm.session_destroy(id, t0 + 1s));
    BOOST_TEST(!sm.next_deadline().has_value());
    sm.advance(t0 + 1h);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].second == invalidation_cause::destroyed);
}

BOOST_FIXTURE_TEST_CASE(fractional_ttl_timer, sm_fixture) {
    session_create_request req;
    req.ttl = "1.5h";
    create(sm, req, t0);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 3h));
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// §4 Invalidation and lock-delay, one test per invalidation path
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_lock_delay)

BOOST_FIXTURE_TEST_CASE(destroy_applies_lock_delay, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0, "payload", 42));
    auto const at = t0 + 3s;
    BOOST_TEST(sm.session_destroy(s, at));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.session == "");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.value == "payload");
    BOOST_TEST(e.flags == 42u);
    expect_lock_delay("k", at, 15s);
}

BOOST_FIXTURE_TEST_CASE(ttl_lapse_applies_lock_delay, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    sm.advance(t0 + 20s);
    BOOST_REQUIRE(sm.session_get(s) == nullptr);
    BOOST_TEST(get(sm, "k").session == "");
    expect_lock_delay("k", t0 + 20s, 15s);
}

BOOST_FIXTURE_TEST_CASE(check_update_to_critical_applies_lock_delay, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"serfHealth", "web"};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto const at = t0 + 2s;
    BOOST_TEST(sm.agent_check_update("web", check_critical, "down", at));
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(get(sm, "k").session == "");
    expect_lock_delay("k", at, 15s);
}

BOOST_FIXTURE_TEST_CASE(check_ttl_expiry_applies_lock_delay, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"serfHealth", "web"};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 10s));
    sm.advance(t0 + 10s - 1ns);
    BOOST_TEST(sm.session_get(s) != nullptr);
    sm.advance(t0 + 10s);
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(get(sm, "k").session == "");
    expect_lock_delay("k", t0 + 10s, 15s);
}

BOOST_FIXTURE_TEST_CASE(agent_check_deregister_applies_lock_delay, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"serfHealth", "web"};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto const at = t0 + 4s;
    BOOST_TEST(sm.agent_check_deregister("web", at));
    BOOST_TEST(sm.session_get(s) == nullptr);
    expect_lock_delay("k", at, 15s);
}

BOOST_FIXTURE_TEST_CASE(catalog_check_deregister_applies_lock_delay, sm_fixture) {
    register_node(sm, "n2", {"c1", "c2"}, t0);
    session_create_request req;
    req.node = "n2";
    req.node_checks = strings{"c1"};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto const at = t0 + 5s;
    ok(sm.catalog_deregister("n2", std::string("c2"), at));  // unrelated check
    BOOST_TEST(sm.session_get(s) != nullptr);
    ok(sm.catalog_deregister("n2", std::string("c1"), at));
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(sm.check_get("n2", "c1") == nullptr);
    BOOST_TEST(sm.node_get("n2") != nullptr);
    expect_lock_delay("k", at, 15s);
}

BOOST_FIXTURE_TEST_CASE(node_deregister_applies_lock_delay, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    session_create_request req;
    req.node = "n2";
    req.node_checks = strings{};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto const at = t0 + 6s;
    ok(sm.catalog_deregister("n2", std::nullopt, at));
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(sm.node_get("n2") == nullptr);
    expect_lock_delay("k", at, 15s);
}

BOOST_FIXTURE_TEST_CASE(lock_delay_is_clamped_to_60s_when_applied, sm_fixture) {
    auto s = new_session(t0, 120 * ns_per_s);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    expect_lock_delay("k", t0, 60s);
}

BOOST_FIXTURE_TEST_CASE(custom_lock_delay, sm_fixture) {
    auto s = new_session(t0, 2'500'000'000);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0 + 1s));
    expect_lock_delay("k", t0 + 1s, 2500ms);
}

BOOST_FIXTURE_TEST_CASE(zero_lock_delay_allows_immediate_reacquire, sm_fixture) {
    auto s = new_session(t0, 0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0 + 1s));
    BOOST_TEST(!sm.lock_delay_until("k", t0 + 1s).has_value());
    auto s2 = new_session(t0 + 1s);
    BOOST_TEST(acquire(sm, "k", s2, t0 + 1s));
    BOOST_TEST(get(sm, "k").lock_index == 2u);
}

BOOST_FIXTURE_TEST_CASE(negative_lock_delay_means_none, sm_fixture) {
    auto s = new_session(t0, -5 * ns_per_s);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
    auto s2 = new_session(t0);
    BOOST_TEST(acquire(sm, "k", s2, t0));
}

BOOST_FIXTURE_TEST_CASE(release_behavior_keeps_key_and_lock_index, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0, "val", 7));
    auto const create_index = get(sm, "k").create_index;
    BOOST_TEST(sm.session_destroy(s, t0 + 1s));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.session == "");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.value == "val");
    BOOST_TEST(e.flags == 7u);
    BOOST_TEST(e.create_index == create_index);
    BOOST_TEST(e.modify_index == sm.sessions_index());  // the destroy's index
    BOOST_TEST(e.modify_index == sm.raft_index());
}

BOOST_FIXTURE_TEST_CASE(delete_behavior_deletes_held_keys_and_applies_lock_delay, sm_fixture) {
    auto s = new_session(t0, 15 * ns_per_s, session_behavior::delete_keys);
    BOOST_REQUIRE(acquire(sm, "a", s, t0));
    BOOST_REQUIRE(acquire(sm, "b", s, t0));
    sm.kv_set("c", "plain", 0);  // not held: untouched
    BOOST_TEST(sm.session_destroy(s, t0 + 1s));
    BOOST_TEST(sm.kv_get("a") == nullptr);
    BOOST_TEST(sm.kv_get("b") == nullptr);
    BOOST_TEST(sm.kv_get("c") != nullptr);
    BOOST_TEST(sm.kv_key_index("a") == sm.raft_index());  // tombstone at the destroy's index
    expect_lock_delay("a", t0 + 1s, 15s);
    expect_lock_delay("b", t0 + 1s, 15s);
    // The re-acquired key is a new entry.
    BOOST_TEST(get(sm, "a").lock_index == 1u);
}

BOOST_FIXTURE_TEST_CASE(every_held_key_is_delayed, sm_fixture) {
    auto s = new_session(t0);
    for (auto k : {"x/1", "x/2", "x/3"}) BOOST_REQUIRE(acquire(sm, k, s, t0));
    sm.kv_set("x/4", "free", 0);
    BOOST_TEST(sm.session_destroy(s, t0));
    for (auto k : {"x/1", "x/2", "x/3"}) {
        auto until = sm.lock_delay_until(k, t0);
        BOOST_TEST(until == std::optional<time_point>(t0 + 15s), k);
        BOOST_TEST(get(sm, k).session == "");
    }
    BOOST_TEST(!sm.lock_delay_until("x/4", t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(clean_release_has_no_lock_delay, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(release(sm, "k", s));
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
    auto s2 = new_session(t0);
    BOOST_TEST(acquire(sm, "k", s2, t0));
    // Destroying s afterwards must not touch a key it no longer holds.
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(get(sm, "k").session == s2);
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(release_then_destroy_is_the_go_unlock_handoff, sm_fixture) {
    // Go api.Lock.Unlock: release first, then destroy: no delay for the next holder.
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(release(sm, "k", s));
    BOOST_TEST(sm.session_destroy(s, t0 + 1s));
    BOOST_TEST(!sm.lock_delay_until("k", t0 + 1s).has_value());
    auto s2 = new_session(t0 + 1s);
    BOOST_TEST(acquire(sm, "k", s2, t0 + 1s));
}

BOOST_FIXTURE_TEST_CASE(deleted_key_is_not_delayed_by_a_later_destroy, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    sm.kv_delete("k", {});  // deleting a locked key is allowed, no lock-delay
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(sm.kv_get("k") == nullptr);  // not resurrected by the release behaviour
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(lock_delay_blocks_only_acquire, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    sm.kv_set("k", "written during delay", 3);
    BOOST_TEST(get(sm, "k").value == "written during delay");
    BOOST_TEST(sm.kv_cas("k", "cas during delay", 0, get(sm, "k").modify_index));
    BOOST_TEST(get(sm, "k").value == "cas during delay");
    // Other keys are not affected.
    auto s2 = new_session(t0);
    BOOST_TEST(acquire(sm, "other", s2, t0));
    BOOST_TEST(!acquire(sm, "k", s2, t0));
}

BOOST_FIXTURE_TEST_CASE(refused_acquire_writes_nothing_and_calls_hook, sm_fixture) {
    std::vector<std::string> rejected;
    sm.on_lock_delay_reject = [&](std::string_view key) { rejected.emplace_back(key); };
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    auto s2 = new_session(t0);
    auto const raft = sm.raft_index();
    auto const kvs = sm.kvs_index();
    auto const modify = get(sm, "k").modify_index;
    BOOST_TEST(!acquire(sm, "k", s2, t0 + 1s, "new value"));
    BOOST_TEST(sm.raft_index() == raft);
    BOOST_TEST(sm.kvs_index() == kvs);
    BOOST_TEST(get(sm, "k").modify_index == modify);
    BOOST_TEST(get(sm, "k").value == "v");
    BOOST_TEST(rejected == strings{"k"}, boost::test_tools::per_element());
}

BOOST_FIXTURE_TEST_CASE(delay_check_comes_before_session_validation, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    // An unknown session during the delay gets false, not an error.
    auto r = sm.kv_acquire("k", "v", 0, "00000000-0000-4000-8000-000000000000", t0 + 1s);
    BOOST_REQUIRE(std::holds_alternative<bool>(r));
    BOOST_TEST(std::get<bool>(r) == false);
    // The destroyed session itself, too.
    auto r2 = sm.kv_acquire("k", "v", 0, s, t0 + 1s);
    BOOST_REQUIRE(std::holds_alternative<bool>(r2));
    BOOST_TEST(std::get<bool>(r2) == false);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// §5 Acquire / release and LockIndex (kvsLockTxn / kvsUnlockTxn)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_lock)

BOOST_FIXTURE_TEST_CASE(first_acquire_creates_with_lock_index_1, sm_fixture) {
    auto s = new_session(t0);
    BOOST_TEST(acquire(sm, "k", s, t0, "v1", 3304740253564472344ull));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.key == "k");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.session == s);
    BOOST_TEST(e.value == "v1");
    BOOST_TEST(e.flags == 3304740253564472344ull);
    BOOST_TEST(e.create_index == sm.raft_index());
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(sm.kvs_index() == sm.raft_index());
}

BOOST_FIXTURE_TEST_CASE(same_session_reacquire_keeps_lock_index_and_replaces_value, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0, "v1", 1));
    auto const first_modify = get(sm, "k").modify_index;
    BOOST_TEST(acquire(sm, "k", s, t0, "v2", 2));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.value == "v2");
    BOOST_TEST(e.flags == 2u);
    BOOST_TEST(e.session == s);
    BOOST_TEST(e.modify_index > first_modify);
    BOOST_TEST(e.create_index == first_modify);
}

BOOST_FIXTURE_TEST_CASE(identical_reacquire_writes_nothing, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0, "v1", 1));
    auto const modify = get(sm, "k").modify_index;
    BOOST_TEST(acquire(sm, "k", s, t0, "v1", 1));
    BOOST_TEST(get(sm, "k").modify_index == modify);
    BOOST_TEST(get(sm, "k").lock_index == 1u);
}

BOOST_FIXTURE_TEST_CASE(new_holder_increments_lock_index, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    BOOST_TEST(release(sm, "k", a));
    BOOST_TEST(get(sm, "k").lock_index == 1u);
    BOOST_TEST(acquire(sm, "k", b, t0));
    BOOST_TEST(get(sm, "k").lock_index == 2u);
    BOOST_TEST(release(sm, "k", b));
    BOOST_TEST(acquire(sm, "k", a, t0));
    BOOST_TEST(get(sm, "k").lock_index == 3u);
}

BOOST_FIXTURE_TEST_CASE(acquire_of_existing_unheld_key, sm_fixture) {
    sm.kv_set("k", "plain", 9);
    auto const create_index = get(sm, "k").create_index;
    auto s = new_session(t0);
    BOOST_TEST(acquire(sm, "k", s, t0, "locked", 10));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.create_index == create_index);
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(e.value == "locked");
    BOOST_TEST(e.flags == 10u);
}

BOOST_FIXTURE_TEST_CASE(acquire_refused_when_held_by_another, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0, "mine", 1));
    auto const before = get(sm, "k");
    auto const kvs = sm.kvs_index();
    BOOST_TEST(!acquire(sm, "k", b, t0, "theirs", 2));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.session == a);
    BOOST_TEST(e.value == "mine");
    BOOST_TEST(e.flags == 1u);
    BOOST_TEST(e.lock_index == before.lock_index);
    BOOST_TEST(e.modify_index == before.modify_index);
    BOOST_TEST(sm.kvs_index() == kvs);
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(acquire_with_empty_session_is_an_error, sm_fixture) {
    auto const raft = sm.raft_index();
    BOOST_TEST(err(sm.kv_acquire("k", "v", 0, "", t0)) == "missing session");
    BOOST_TEST(sm.kv_get("k") == nullptr);
    BOOST_TEST(sm.raft_index() == raft);
}

BOOST_FIXTURE_TEST_CASE(acquire_with_unknown_session_is_an_error, sm_fixture) {
    std::string const ghost = "11111111-2222-4333-8444-555555555555";
    BOOST_TEST(err(sm.kv_acquire("k", "v", 0, ghost, t0)) == "invalid session \"" + ghost + "\"");
    BOOST_TEST(sm.kv_get("k") == nullptr);
    auto s = new_session(t0);
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(err(sm.kv_acquire("k", "v", 0, s, t0)) == "invalid session \"" + s + "\"");
}

BOOST_FIXTURE_TEST_CASE(release_replaces_value_and_flags_and_keeps_indexes, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0, "held", 5));
    auto const create_index = get(sm, "k").create_index;
    BOOST_TEST(release(sm, "k", s, std::nullopt, 0));  // curl -XPUT k?release=sid with no body
    auto const& e = get(sm, "k");
    BOOST_TEST(e.session == "");
    BOOST_TEST(e.lock_index == 1u);
    BOOST_TEST(e.create_index == create_index);
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(e.value == std::nullopt);
    BOOST_TEST(e.flags == 0u);
}

BOOST_FIXTURE_TEST_CASE(release_by_non_holder_is_false, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    auto const modify = get(sm, "k").modify_index;
    BOOST_TEST(!release(sm, "k", b, "x", 1));
    BOOST_TEST(get(sm, "k").session == a);
    BOOST_TEST(get(sm, "k").value == "v");
    BOOST_TEST(get(sm, "k").modify_index == modify);
}

BOOST_FIXTURE_TEST_CASE(release_of_missing_or_unheld_key_is_false, sm_fixture) {
    auto s = new_session(t0);
    BOOST_TEST(!release(sm, "missing", s));
    BOOST_TEST(sm.kv_get("missing") == nullptr);
    sm.kv_set("plain", "v", 0);
    BOOST_TEST(!release(sm, "plain", s));
}

BOOST_FIXTURE_TEST_CASE(release_with_empty_session_is_an_error, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(err(sm.kv_release("k", "v", 0, "", {})) == "missing session");
    BOOST_TEST(get(sm, "k").session == s);
}

BOOST_FIXTURE_TEST_CASE(release_with_a_destroyed_holders_id_is_false_after_invalidation, sm_fixture) {
    // The session need not exist for release; but once invalidated it holds nothing.
    auto s = new_session(t0, 0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(!release(sm, "k", s));
}

BOOST_FIXTURE_TEST_CASE(lock_index_survives_invalidation, sm_fixture) {
    auto a = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    BOOST_TEST(sm.session_destroy(a, t0));
    BOOST_TEST(get(sm, "k").lock_index == 1u);
    auto b = new_session(t0);
    BOOST_TEST(acquire(sm, "k", b, t0 + 15s));
    BOOST_TEST(get(sm, "k").lock_index == 2u);
}

BOOST_FIXTURE_TEST_CASE(invalidation_releases_only_the_sessions_own_keys, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "ka", a, t0));
    BOOST_REQUIRE(acquire(sm, "kb", b, t0));
    BOOST_TEST(sm.session_destroy(a, t0));
    BOOST_TEST(get(sm, "ka").session == "");
    BOOST_TEST(get(sm, "kb").session == b);
    BOOST_TEST(!sm.lock_delay_until("kb", t0).has_value());
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// §5 KV: set, CAS, delete, list, keys, indexes
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_kv)

BOOST_FIXTURE_TEST_CASE(set_and_get, sm_fixture) {
    BOOST_TEST(sm.kv_get("k") == nullptr);
    sm.kv_set("k", "hello", 17);
    auto const& e = get(sm, "k");
    BOOST_TEST(e.key == "k");
    BOOST_TEST(e.value == "hello");
    BOOST_TEST(e.flags == 17u);
    BOOST_TEST(e.session == "");
    BOOST_TEST(e.lock_index == 0u);
    BOOST_TEST(e.create_index == sm.raft_index());
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(sm.kvs_index() == sm.raft_index());
    BOOST_TEST(sm.kv_key_index("k") == e.modify_index);
}

BOOST_FIXTURE_TEST_CASE(null_value_round_trips, sm_fixture) {
    sm.kv_set("k", std::nullopt, 0);
    BOOST_TEST(get(sm, "k").value == std::nullopt);
}

BOOST_FIXTURE_TEST_CASE(binary_value_round_trips, sm_fixture) {
    std::string bin("a\0b\xff\n", 5);
    sm.kv_set("k", bin, 0);
    BOOST_TEST(get(sm, "k").value == bin);
    BOOST_TEST(get(sm, "k").value->size() == 5u);
}

BOOST_FIXTURE_TEST_CASE(flags_round_trip_full_uint64, sm_fixture) {
    sm.kv_set("max", "v", std::numeric_limits<std::uint64_t>::max());
    sm.kv_set("sem", "v", 16210313421097356768ull);
    BOOST_TEST(get(sm, "max").flags == 18446744073709551615ull);
    BOOST_TEST(get(sm, "sem").flags == 16210313421097356768ull);
}

BOOST_FIXTURE_TEST_CASE(set_replaces_flags, sm_fixture) {
    sm.kv_set("k", "v", 99);
    sm.kv_set("k", "v", 0);  // PUT without ?flags sets 0
    BOOST_TEST(get(sm, "k").flags == 0u);
}

BOOST_FIXTURE_TEST_CASE(update_keeps_create_index, sm_fixture) {
    sm.kv_set("k", "v1", 0);
    auto const created = get(sm, "k").create_index;
    sm.kv_set("other", "x", 0);
    sm.kv_set("k", "v2", 0);
    auto const& e = get(sm, "k");
    BOOST_TEST(e.create_index == created);
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(e.modify_index > created);
    BOOST_TEST(e.value == "v2");
}

BOOST_FIXTURE_TEST_CASE(identical_set_is_a_no_op, sm_fixture) {
    sm.kv_set("k", "v", 4);
    auto const modify = get(sm, "k").modify_index;
    sm.kv_set("k", "v", 4);
    BOOST_TEST(get(sm, "k").modify_index == modify);
    BOOST_TEST(sm.kv_key_index("k") == modify);
    sm.kv_set("k", "v", 5);  // a flags change is a change
    BOOST_TEST(get(sm, "k").modify_index > modify);
}

BOOST_FIXTURE_TEST_CASE(plain_set_on_held_key_keeps_session_and_lock_index, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto b = new_session(t0);
    BOOST_REQUIRE(release(sm, "k", s));
    BOOST_REQUIRE(acquire(sm, "k", b, t0));  // LockIndex 2
    sm.kv_set("k", "overwritten", 8);
    auto const& e = get(sm, "k");
    BOOST_TEST(e.session == b);
    // tenure keeps LockIndex on a plain set (Consul's state store resets it to 0; see §5).
    BOOST_TEST(e.lock_index == 2u);
    BOOST_TEST(e.value == "overwritten");
    BOOST_TEST(e.flags == 8u);
    // Still held: invalidating b releases it.
    BOOST_TEST(sm.session_destroy(b, t0));
    BOOST_TEST(get(sm, "k").session == "");
}

BOOST_FIXTURE_TEST_CASE(cas_zero_creates_only_if_absent, sm_fixture) {
    BOOST_TEST(sm.kv_cas("k", "first", 1, 0));
    BOOST_TEST(get(sm, "k").value == "first");
    BOOST_TEST(get(sm, "k").flags == 1u);
    auto const modify = get(sm, "k").modify_index;
    BOOST_TEST(!sm.kv_cas("k", "second", 2, 0));
    BOOST_TEST(get(sm, "k").value == "first");
    BOOST_TEST(get(sm, "k").modify_index == modify);
}

BOOST_FIXTURE_TEST_CASE(cas_index_must_match_modify_index, sm_fixture) {
    sm.kv_set("k", "v1", 0);
    auto const m1 = get(sm, "k").modify_index;
    BOOST_TEST(!sm.kv_cas("k", "stale", 0, m1 + 1));
    BOOST_TEST(!sm.kv_cas("k", "stale", 0, m1 - 1));
    BOOST_TEST(get(sm, "k").value == "v1");
    BOOST_TEST(sm.kv_cas("k", "v2", 3, m1));
    auto const& e = get(sm, "k");
    BOOST_TEST(e.value == "v2");
    BOOST_TEST(e.flags == 3u);
    BOOST_TEST(e.modify_index == sm.raft_index());
    BOOST_TEST(!sm.kv_cas("k", "v3", 0, m1));  // m1 is stale now
    BOOST_TEST(!sm.kv_cas("missing", "v", 0, 5));  // cas=N on a missing key
    BOOST_TEST(sm.kv_get("missing") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(cas_on_held_key_keeps_session, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    BOOST_TEST(sm.kv_cas("k", "cas", 0, get(sm, "k").modify_index));
    BOOST_TEST(get(sm, "k").session == s);
    BOOST_TEST(get(sm, "k").value == "cas");
}

BOOST_FIXTURE_TEST_CASE(delete_always_succeeds, sm_fixture) {
    sm.kv_set("k", "v", 0);
    sm.kv_delete("k", {});
    BOOST_TEST(sm.kv_get("k") == nullptr);
    BOOST_TEST(sm.kv_key_index("k") == sm.raft_index());
    sm.kv_delete("never-existed", {});  // no throw, nothing to check but that state is sane
    BOOST_TEST(sm.kv_get("never-existed") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(delete_cas_rules, sm_fixture) {
    BOOST_TEST(sm.kv_delete_cas("missing", 0, {}));  // true when the key does not exist
    BOOST_TEST(sm.kv_delete_cas("missing", 7, {}));
    sm.kv_set("k", "v", 0);
    auto const m = get(sm, "k").modify_index;
    BOOST_TEST(!sm.kv_delete_cas("k", 0, {}));  // cas=0 on an existing key
    BOOST_TEST(!sm.kv_delete_cas("k", m + 1, {}));
    BOOST_TEST(sm.kv_get("k") != nullptr);
    BOOST_TEST(sm.kv_delete_cas("k", m, {}));
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(delete_tree_removes_the_subtree, sm_fixture) {
    for (auto k : {"a/b/c", "a/b/d", "a/e", "ab", "z"}) sm.kv_set(k, "v", 0);
    sm.kv_delete_tree("a/b/", {});
    BOOST_TEST(sm.kv_get("a/b/c") == nullptr);
    BOOST_TEST(sm.kv_get("a/b/d") == nullptr);
    BOOST_TEST(sm.kv_get("a/e") != nullptr);
    BOOST_TEST(sm.kv_get("ab") != nullptr);
    auto const idx = sm.raft_index();
    BOOST_TEST(sm.kv_prefix_index("a/b/") == idx);
    sm.kv_delete_tree("a", {});  // plain prefix, not a path: takes "ab" as well
    BOOST_TEST(sm.kv_get("a/e") == nullptr);
    BOOST_TEST(sm.kv_get("ab") == nullptr);
    BOOST_TEST(sm.kv_get("z") != nullptr);
    sm.kv_delete_tree("", {});  // everything
    BOOST_TEST(sm.kv_list("").empty());
}

BOOST_FIXTURE_TEST_CASE(list_by_prefix_is_sorted, sm_fixture) {
    for (auto k : {"a/e", "a/b/d", "b", "a/b/c", "ab"}) sm.kv_set(k, "v", 0);
    BOOST_TEST(keys_of(sm.kv_list("a/")) == (strings{"a/b/c", "a/b/d", "a/e"}), boost::test_tools::per_element());
    BOOST_TEST(keys_of(sm.kv_list("a")) == (strings{"a/b/c", "a/b/d", "a/e", "ab"}),
               boost::test_tools::per_element());
    BOOST_TEST(keys_of(sm.kv_list("")) == (strings{"a/b/c", "a/b/d", "a/e", "ab", "b"}),
               boost::test_tools::per_element());
    BOOST_TEST(sm.kv_list("c").empty());
}

BOOST_FIXTURE_TEST_CASE(keys_with_separator, sm_fixture) {
    for (auto k : {"a/b/c", "a/b/d", "a/e"}) sm.kv_set(k, "v", 0);
    BOOST_TEST(sm.kv_keys("a/", "/") == (strings{"a/b/", "a/e"}), boost::test_tools::per_element());
    BOOST_TEST(sm.kv_keys("a/", "") == (strings{"a/b/c", "a/b/d", "a/e"}), boost::test_tools::per_element());
    BOOST_TEST(sm.kv_keys("", "/") == strings{"a/"}, boost::test_tools::per_element());
    BOOST_TEST(sm.kv_keys("a/b", "/") == strings{"a/b/"}, boost::test_tools::per_element());
    BOOST_TEST(sm.kv_keys("x", "/").empty());
}

BOOST_FIXTURE_TEST_CASE(prefix_index_counts_entries_and_tombstones, sm_fixture) {
    sm.kv_set("a/x", "1", 0);
    auto const i1 = sm.raft_index();
    sm.kv_set("a/y", "2", 0);
    auto const i2 = sm.raft_index();
    sm.kv_set("b", "3", 0);
    auto const i3 = sm.raft_index();
    BOOST_TEST(sm.kv_prefix_index("b") == i3);
    BOOST_TEST(sm.kv_prefix_index("a/") == i2);
    sm.kv_delete("a/y", {});
    auto const i4 = sm.raft_index();
    BOOST_TEST(i4 > i3);
    BOOST_TEST(sm.kv_prefix_index("a/") == i4);  // the tombstone counts
    BOOST_TEST(sm.kv_prefix_index("b") == i3);
    BOOST_TEST(get(sm, "a/x").modify_index == i1);
    BOOST_TEST(sm.kv_prefix_index("zzz/") == i4);  // none under it: the table index
}

BOOST_FIXTURE_TEST_CASE(key_index_of_missing_key_is_the_table_index, sm_fixture) {
    sm.kv_set("k", "v", 0);
    sm.kv_delete("k", {});
    auto const del = sm.raft_index();
    BOOST_TEST(sm.kv_key_index("k") >= del);
    BOOST_TEST(sm.kv_key_index("k") == del);
    BOOST_TEST(sm.kv_key_index("never") == del);
    sm.kv_set("other", "v", 0);
    BOOST_TEST(sm.kv_key_index("k") == sm.raft_index());
}

BOOST_FIXTURE_TEST_CASE(kv_index_is_independent_of_other_tables, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const kvs = sm.kvs_index();
    create(sm, {}, t0);
    BOOST_TEST(sm.kvs_index() == kvs);
    BOOST_TEST(sm.sessions_index() > kvs);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// /v1/txn: all-or-nothing, Consul's error texts
// ===========================================================================
namespace {

txn_kv_op op(std::string verb, std::string key, std::optional<std::string> value = std::nullopt,
             std::uint64_t flags = 0, std::uint64_t index = 0, std::string session = {}) {
    txn_kv_op o;
    o.verb = std::move(verb);
    o.key = std::move(key);
    o.value = std::move(value);
    o.flags = flags;
    o.index = index;
    o.session = std::move(session);
    return o;
}

// Runs a single-op txn that must fail, and returns its error text.
std::string txn_error(state_machine& sm, txn_kv_op const& o, time_point now) {
    auto out = sm.txn({o}, now);
    BOOST_REQUIRE_MESSAGE(out.errors.size() == 1u, "expected one error, got " << out.errors.size());
    BOOST_TEST(out.errors[0].op_index == 0u);
    BOOST_TEST(out.results.empty());
    return out.errors[0].what;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_txn)

BOOST_FIXTURE_TEST_CASE(writes_share_one_index, sm_fixture) {
    auto out = sm.txn({op("set", "a", "1", 1), op("set", "b", "2", 2), op("cas", "c", "3", 3, 0)}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_TEST(out.index == sm.raft_index());
    BOOST_TEST(sm.kvs_index() == out.index);
    for (auto k : {"a", "b", "c"}) {
        BOOST_TEST(get(sm, k).modify_index == out.index, k);
        BOOST_TEST(get(sm, k).create_index == out.index, k);
    }
    BOOST_REQUIRE(out.results.size() == 3u);
    BOOST_TEST(out.results[0].key == "a");
    BOOST_TEST(out.results[1].key == "b");
    BOOST_TEST(out.results[2].key == "c");
    for (auto const& r : out.results) {
        BOOST_TEST(r.value == std::nullopt);  // write results carry no value
        BOOST_TEST(r.modify_index == out.index);
    }
    BOOST_TEST(out.results[1].flags == 2u);
}

BOOST_FIXTURE_TEST_CASE(get_results_carry_values, sm_fixture) {
    sm.kv_set("c", "cval", 5);
    auto const cm = get(sm, "c").modify_index;
    auto out = sm.txn({op("set", "a", "1"), op("get", "c"), op("check-index", "c", std::nullopt, 0, cm)}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_REQUIRE(out.results.size() == 3u);
    BOOST_TEST(out.results[0].value == std::nullopt);
    BOOST_TEST(out.results[1].key == "c");
    BOOST_TEST(out.results[1].value == "cval");
    BOOST_TEST(out.results[1].flags == 5u);
    BOOST_TEST(out.results[1].modify_index == cm);
    BOOST_TEST(out.results[2].value == std::nullopt);  // check-index is not a get
}

BOOST_FIXTURE_TEST_CASE(read_only_txn_has_index_zero, sm_fixture) {
    sm.kv_set("c", "cval", 0);
    auto const raft = sm.raft_index();
    auto out = sm.txn({op("get", "c"), op("check-not-exists", "nope")}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_TEST(out.index == 0u);
    BOOST_TEST(sm.raft_index() == raft);
    BOOST_REQUIRE(out.results.size() == 1u);  // check-not-exists yields no entry
    BOOST_TEST(out.results[0].value == "cval");
}

BOOST_FIXTURE_TEST_CASE(get_tree_returns_entries_with_values, sm_fixture) {
    sm.kv_set("p/1", "one", 0);
    sm.kv_set("p/2", "two", 0);
    sm.kv_set("q", "no", 0);
    auto out = sm.txn({op("get-tree", "p/")}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_REQUIRE(out.results.size() == 2u);
    BOOST_TEST(out.results[0].key == "p/1");
    BOOST_TEST(out.results[0].value == "one");
    BOOST_TEST(out.results[1].key == "p/2");
    BOOST_TEST(out.results[1].value == "two");
}

BOOST_FIXTURE_TEST_CASE(deletes_yield_no_results, sm_fixture) {
    sm.kv_set("a", "1", 0);
    sm.kv_set("t/1", "1", 0);
    auto out = sm.txn({op("delete", "a"), op("delete-tree", "t/")}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_TEST(out.results.empty());
    BOOST_TEST(out.index == sm.raft_index());
    BOOST_TEST(sm.kv_get("a") == nullptr);
    BOOST_TEST(sm.kv_get("t/1") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(failure_undoes_every_earlier_write, sm_fixture) {
    sm.kv_set("c", "old", 1);
    sm.kv_set("d", "keep", 2);
    auto const c_before = get(sm, "c");
    auto const d_before = get(sm, "d");
    auto const raft = sm.raft_index();
    auto const kvs = sm.kvs_index();
    auto out = sm.txn({op("set", "a", "1"), op("set", "c", "new", 9), op("delete", "d"),
                       op("check-index", "c", std::nullopt, 0, c_before.modify_index + 100)},
                      t0);
    BOOST_REQUIRE(out.errors.size() == 1u);
    BOOST_TEST(out.errors[0].op_index == 3u);
    BOOST_TEST(out.results.empty());
    BOOST_TEST(sm.kv_get("a") == nullptr);
    BOOST_TEST(get(sm, "c").value == "old");
    BOOST_TEST(get(sm, "c").flags == 1u);
    BOOST_TEST(get(sm, "c").modify_index == c_before.modify_index);
    BOOST_TEST(get(sm, "d").value == "keep");
    BOOST_TEST(get(sm, "d").modify_index == d_before.modify_index);
    BOOST_TEST(sm.raft_index() == raft);
    BOOST_TEST(sm.kvs_index() == kvs);
    BOOST_TEST(sm.kv_key_index("a") == kvs);  // no tombstone left behind
}

BOOST_FIXTURE_TEST_CASE(third_op_check_index_failure, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const m = get(sm, "k").modify_index;
    auto const raft = sm.raft_index();
    auto out = sm.txn({op("set", "x", "1"), op("set", "y", "2"), op("check-index", "k", std::nullopt, 0, m - 1)}, t0);
    BOOST_REQUIRE(out.errors.size() == 1u);
    BOOST_TEST(out.errors[0].op_index == 2u);
    BOOST_TEST(out.errors[0].what == "failed index check for key \"k\", current modify index " + std::to_string(m) +
                                         " != " + std::to_string(m - 1));
    BOOST_TEST(sm.kv_get("x") == nullptr);
    BOOST_TEST(sm.kv_get("y") == nullptr);
    BOOST_TEST(sm.raft_index() == raft);
    BOOST_TEST(out.index == 0u);
}

BOOST_FIXTURE_TEST_CASE(failed_lock_in_txn_is_undone, sm_fixture) {
    auto s = new_session(t0);
    auto out = sm.txn({op("lock", "k", "v", 0, 0, s), op("get", "missing")}, t0);
    BOOST_REQUIRE(out.errors.size() == 1u);
    BOOST_TEST(sm.kv_get("k") == nullptr);
    // s holds nothing: destroying it applies no lock-delay to "k".
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(!sm.lock_delay_until("k", t0).has_value());
}

BOOST_FIXTURE_TEST_CASE(failed_unlock_in_txn_is_undone, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    auto out = sm.txn({op("unlock", "k", "v", 0, 0, s), op("get", "missing")}, t0);
    BOOST_REQUIRE(out.errors.size() == 1u);
    BOOST_TEST(get(sm, "k").session == s);
    // Still held by s: destroying s applies the delay.
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(sm.lock_delay_until("k", t0) == std::optional<time_point>(t0 + 15s));
}

BOOST_FIXTURE_TEST_CASE(lock_and_unlock_verbs, sm_fixture) {
    auto s = new_session(t0);
    auto out = sm.txn({op("lock", "k", "v", 3, 0, s)}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_TEST(get(sm, "k").session == s);
    BOOST_TEST(get(sm, "k").lock_index == 1u);
    BOOST_TEST(get(sm, "k").flags == 3u);
    out = sm.txn({op("check-session", "k", std::nullopt, 0, 0, s), op("unlock", "k", "w", 0, 0, s)}, t0);
    BOOST_REQUIRE(out.errors.empty());
    BOOST_TEST(get(sm, "k").session == "");
    BOOST_TEST(get(sm, "k").value == "w");
    BOOST_TEST(get(sm, "k").lock_index == 1u);
}

BOOST_FIXTURE_TEST_CASE(delete_cas_verb, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const m = get(sm, "k").modify_index;
    BOOST_TEST(txn_error(sm, op("delete-cas", "k", std::nullopt, 0, m + 1), t0) ==
               R"(failed to delete key "k", index is stale)");
    auto out = sm.txn({op("delete-cas", "k", std::nullopt, 0, m)}, t0);
    BOOST_TEST(out.errors.empty());
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

// Consul has no `get-or-empty` (nor any verb but its twelve): the agent
// refuses it as Consul does, so that tenure's own client cannot come to
// depend on a verb a Consul cluster would refuse.
BOOST_FIXTURE_TEST_CASE(a_verb_consul_does_not_have_is_refused, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const before = get(sm, "k").modify_index;
    BOOST_TEST(txn_error(sm, op("get-or-empty", "nope"), t0) == R"(unknown KV verb "get-or-empty")");
    auto out = sm.txn({op("set", "k", "w"), op("get-or-empty", "nope")}, t0);
    BOOST_TEST(out.errors.size() == 1u);
    BOOST_TEST(get(sm, "k").modify_index == before);  // nothing applied
}

// ---- error texts ---------------------------------------------------------

BOOST_FIXTURE_TEST_CASE(error_check_index_mismatch, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const m = get(sm, "k").modify_index;
    BOOST_TEST(txn_error(sm, op("check-index", "k", std::nullopt, 0, m + 7), t0) ==
               "failed index check for key \"k\", current modify index " + std::to_string(m) + " != " +
                   std::to_string(m + 7));
}

BOOST_FIXTURE_TEST_CASE(error_check_index_missing_key, sm_fixture) {
    BOOST_TEST(txn_error(sm, op("check-index", "k", std::nullopt, 0, 4), t0) ==
               R"(failed to check index, key "k" doesn't exist)");
}

BOOST_FIXTURE_TEST_CASE(error_check_session_missing_key, sm_fixture) {
    auto s = new_session(t0);
    BOOST_TEST(txn_error(sm, op("check-session", "k", std::nullopt, 0, 0, s), t0) ==
               R"(failed to check session, key "k" doesn't exist)");
}

BOOST_FIXTURE_TEST_CASE(error_check_session_mismatch, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    BOOST_TEST(txn_error(sm, op("check-session", "k", std::nullopt, 0, 0, b), t0) ==
               "failed session check for key \"k\", current session \"" + a + "\" != \"" + b + "\"");
    sm.kv_set("free", "v", 0);
    BOOST_TEST(txn_error(sm, op("check-session", "free", std::nullopt, 0, 0, b), t0) ==
               "failed session check for key \"free\", current session \"\" != \"" + b + "\"");
}

BOOST_FIXTURE_TEST_CASE(error_lock_delay, sm_fixture) {
    auto a = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    BOOST_TEST(sm.session_destroy(a, t0));
    auto b = new_session(t0);
    BOOST_TEST(txn_error(sm, op("lock", "k", "v", 0, 0, b), t0 + 1s) == R"(failed to lock key "k" due to lock delay)");
    BOOST_TEST(get(sm, "k").session == "");
    auto out = sm.txn({op("lock", "k", "v", 0, 0, b)}, t0 + 15s);
    BOOST_TEST(out.errors.empty());
    BOOST_TEST(get(sm, "k").session == b);
}

BOOST_FIXTURE_TEST_CASE(error_lock_held_by_another, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    BOOST_TEST(txn_error(sm, op("lock", "k", "v", 0, 0, b), t0) == R"(failed to lock key "k", lock is already held)");
}

BOOST_FIXTURE_TEST_CASE(error_lock_sessions, sm_fixture) {
    BOOST_TEST(txn_error(sm, op("lock", "k", "v", 0, 0, ""), t0) == "missing session");
    std::string const ghost = "11111111-2222-4333-8444-555555555555";
    BOOST_TEST(txn_error(sm, op("lock", "k", "v", 0, 0, ghost), t0) == "invalid session \"" + ghost + "\"");
}

BOOST_FIXTURE_TEST_CASE(error_unlock_not_held, sm_fixture) {
    auto a = new_session(t0);
    BOOST_TEST(txn_error(sm, op("unlock", "k", "v", 0, 0, a), t0) ==
               R"(failed to unlock key "k", lock isn't held, or is held by another session)");
}

BOOST_FIXTURE_TEST_CASE(error_cas_stale, sm_fixture) {
    sm.kv_set("k", "v", 0);
    auto const m = get(sm, "k").modify_index;
    BOOST_TEST(txn_error(sm, op("cas", "k", "w", 0, m + 1), t0) == R"(failed to set key "k", index is stale)");
    BOOST_TEST(txn_error(sm, op("cas", "k", "w", 0, 0), t0) == R"(failed to set key "k", index is stale)");
    BOOST_TEST(get(sm, "k").value == "v");
}

BOOST_FIXTURE_TEST_CASE(error_get_missing, sm_fixture) {
    BOOST_TEST(txn_error(sm, op("get", "k"), t0) == R"(key "k" doesn't exist)");
}

BOOST_FIXTURE_TEST_CASE(error_check_not_exists, sm_fixture) {
    sm.kv_set("k", "v", 0);
    BOOST_TEST(txn_error(sm, op("check-not-exists", "k"), t0) == R"(key "k" exists)");
}

BOOST_FIXTURE_TEST_CASE(error_unknown_verb, sm_fixture) {
    BOOST_TEST(txn_error(sm, op("x", "k"), t0) == R"(unknown KV verb "x")");
    BOOST_TEST(txn_error(sm, op("SET", "k", "v"), t0) == R"(unknown KV verb "SET")");
    BOOST_TEST(sm.kv_get("k") == nullptr);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// Watches (what a blocking query waits on)
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_watch)

BOOST_FIXTURE_TEST_CASE(key_watch_fires_only_for_its_key, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    BOOST_TEST(sm.watcher_count() == 1u);
    sm.kv_set("b", "x", 0);
    sm.kv_set("ab", "x", 0);
    sm.kv_set("a/", "x", 0);
    BOOST_TEST(fired == 0);
    sm.kv_set("a", "x", 0);
    BOOST_TEST(fired == 1);  // synchronously, inside kv_set
    BOOST_TEST(sm.watcher_count() == 0u);
}

BOOST_FIXTURE_TEST_CASE(watch_is_one_shot, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    sm.kv_set("a", "1", 0);
    sm.kv_set("a", "2", 0);
    sm.kv_delete("a", {});
    BOOST_TEST(fired == 1);
    BOOST_TEST(sm.watcher_count() == 0u);
}

BOOST_FIXTURE_TEST_CASE(prefix_watch, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::prefix, "a/"}}, [&] { ++fired; });
    sm.kv_set("b/x", "1", 0);
    sm.kv_set("a", "1", 0);
    BOOST_TEST(fired == 0);
    sm.kv_set("a/x", "1", 0);
    BOOST_TEST(fired == 1);
}

BOOST_FIXTURE_TEST_CASE(multi_target_watch_fires_once, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}, {watch_target::kind::key, "b"}}, [&] { ++fired; });
    sm.kv_set("b", "1", 0);
    sm.kv_set("a", "1", 0);
    BOOST_TEST(fired == 1);
    BOOST_TEST(sm.watcher_count() == 0u);
}

BOOST_FIXTURE_TEST_CASE(sessions_watch_fires_on_create_and_destroy, sm_fixture) {
    int created = 0;
    auto r1 = sm.watch({{watch_target::kind::sessions, ""}}, [&] { ++created; });
    sm.kv_set("k", "v", 0);  // a KV write does not touch the sessions table
    BOOST_TEST(created == 0);
    auto id = create(sm, {}, t0);
    BOOST_TEST(created == 1);
    int destroyed = 0;
    auto r2 = sm.watch({{watch_target::kind::sessions, ""}}, [&] { ++destroyed; });
    BOOST_TEST(sm.session_destroy(id, t0));
    BOOST_TEST(destroyed == 1);
    BOOST_TEST(created == 1);
}

BOOST_FIXTURE_TEST_CASE(sessions_watch_fires_on_ttl_lapse, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    create(sm, req, t0);
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::sessions, ""}}, [&] { ++fired; });
    sm.advance(t0 + 20s - 1ns);
    BOOST_TEST(fired == 0);
    sm.advance(t0 + 20s);
    BOOST_TEST(fired == 1);
}

BOOST_FIXTURE_TEST_CASE(key_watch_fires_when_holder_is_invalidated, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "k"}}, [&] { ++fired; });
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(fired == 1);
}

BOOST_FIXTURE_TEST_CASE(key_watch_fires_on_release_and_delete, sm_fixture) {
    auto s = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    int fired = 0;
    auto r1 = sm.watch({{watch_target::kind::key, "k"}}, [&] { ++fired; });
    BOOST_TEST(release(sm, "k", s));
    BOOST_TEST(fired == 1);
    auto r2 = sm.watch({{watch_target::kind::key, "k"}}, [&] { ++fired; });
    sm.kv_delete("k", {});
    BOOST_TEST(fired == 2);
}

BOOST_FIXTURE_TEST_CASE(refused_acquire_does_not_fire, sm_fixture) {
    auto a = new_session(t0);
    auto b = new_session(t0);
    BOOST_REQUIRE(acquire(sm, "k", a, t0));
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "k"}}, [&] { ++fired; });
    BOOST_TEST(!acquire(sm, "k", b, t0));
    BOOST_TEST(fired == 0);
    BOOST_TEST(sm.watcher_count() == 1u);
}

BOOST_FIXTURE_TEST_CASE(txn_fires_touched_keys_and_failed_txn_does_not, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    auto bad = sm.txn({op("set", "a", "1"), op("get", "missing")}, t0);
    BOOST_REQUIRE(bad.errors.size() == 1u);
    BOOST_TEST(fired == 0);
    auto good = sm.txn({op("set", "a", "1")}, t0);
    BOOST_REQUIRE(good.errors.empty());
    BOOST_TEST(fired == 1);
}

BOOST_FIXTURE_TEST_CASE(destroyed_registration_never_fires, sm_fixture) {
    int fired = 0;
    {
        auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
        BOOST_TEST(sm.watcher_count() == 1u);
    }
    BOOST_TEST(sm.watcher_count() == 0u);
    sm.kv_set("a", "x", 0);
    BOOST_TEST(fired == 0);
}

BOOST_FIXTURE_TEST_CASE(reset_cancels, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    auto other = sm.watch({{watch_target::kind::key, "b"}}, [&] { fired += 100; });
    BOOST_TEST(sm.watcher_count() == 2u);
    reg.reset();
    BOOST_TEST(sm.watcher_count() == 1u);
    sm.kv_set("a", "x", 0);
    BOOST_TEST(fired == 0);
    other.reset();
    BOOST_TEST(sm.watcher_count() == 0u);
}

BOOST_FIXTURE_TEST_CASE(moved_registration_stays_armed, sm_fixture) {
    int fired = 0;
    auto reg = sm.watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    auto moved = std::move(reg);
    reg.reset();  // the moved-from handle owns nothing
    BOOST_TEST(sm.watcher_count() == 1u);
    state_machine::watch_registration assigned;
    assigned = std::move(moved);
    BOOST_TEST(sm.watcher_count() == 1u);
    sm.kv_set("a", "x", 0);
    BOOST_TEST(fired == 1);
}

BOOST_AUTO_TEST_CASE(registration_may_outlive_the_state_machine) {
    auto sm = std::make_unique<state_machine>(test_config(), time_point{});
    int fired = 0;
    auto reg = sm->watch({{watch_target::kind::key, "a"}}, [&] { ++fired; });
    sm.reset();
    reg.reset();  // must not touch the destroyed machine
    BOOST_TEST(fired == 0);
}

BOOST_FIXTURE_TEST_CASE(checks_and_nodes_watches, sm_fixture) {
    int checks = 0, nodes = 0;
    auto rc = sm.watch({{watch_target::kind::checks, ""}}, [&] { ++checks; });
    auto rn = sm.watch({{watch_target::kind::nodes, ""}}, [&] { ++nodes; });
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    BOOST_TEST(checks == 1);
    BOOST_TEST(nodes == 0);
    register_node(sm, "n2", {}, t0);
    BOOST_TEST(nodes == 1);
    auto rc2 = sm.watch({{watch_target::kind::checks, ""}}, [&] { ++checks; });
    BOOST_TEST(sm.agent_check_update("web", check_warning, "slow", t0));
    BOOST_TEST(checks == 2);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// Checks and nodes
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_checks)

BOOST_FIXTURE_TEST_CASE(ttl_check_starts_critical, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::nullopt, t0);
    auto const* c = sm.check_get("tenure", "web");
    BOOST_REQUIRE(c);
    BOOST_TEST(c->status == "critical");
    BOOST_TEST(c->node == "tenure");
    BOOST_TEST(c->agent_local);
    BOOST_TEST(c->ttl.count() == 10 * ns_per_s);
    BOOST_TEST(c->create_index == sm.checks_index());
}

BOOST_FIXTURE_TEST_CASE(given_status_is_kept, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    BOOST_REQUIRE(sm.check_get("tenure", "web"));
    BOOST_TEST(sm.check_get("tenure", "web")->status == "passing");
    auto agent_checks = sm.agent_checks();
    BOOST_REQUIRE(agent_checks.size() == 1u);  // serfHealth is a catalog check, not an agent one
    BOOST_TEST(agent_checks[0]->check_id == "web");
}

BOOST_FIXTURE_TEST_CASE(ttl_expiry_makes_the_check_critical, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 10s));
    sm.advance(t0 + 10s - 1ns);
    BOOST_TEST(sm.check_get("tenure", "web")->status == "passing");
    sm.advance(t0 + 10s);
    auto const* c = sm.check_get("tenure", "web");
    BOOST_REQUIRE(c);
    BOOST_TEST(c->status == "critical");
    BOOST_TEST(contains(c->output, "TTL"), "output: " << c->output);
    BOOST_TEST(c->modify_index == sm.checks_index());
}

BOOST_FIXTURE_TEST_CASE(update_restarts_the_ttl, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    BOOST_TEST(sm.agent_check_update("web", check_passing, "ok", t0 + 6s));
    BOOST_TEST(sm.next_deadline() == std::optional<time_point>(t0 + 16s));
    sm.advance(t0 + 10s);
    BOOST_TEST(sm.check_get("tenure", "web")->status == "passing");
    BOOST_TEST(sm.check_get("tenure", "web")->output == "ok");
    sm.advance(t0 + 16s);
    BOOST_TEST(sm.check_get("tenure", "web")->status == "critical");
}

BOOST_FIXTURE_TEST_CASE(update_of_unknown_check_is_false, sm_fixture) {
    BOOST_TEST(!sm.agent_check_update("nope", check_passing, "", t0));
    BOOST_TEST(!sm.agent_check_deregister("nope", t0));
}

BOOST_FIXTURE_TEST_CASE(heartbeated_check_keeps_its_session_alive, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"serfHealth", "web"};
    auto s = create(sm, req, t0);
    for (int i = 1; i <= 12; ++i) {
        auto now = t0 + i * 5s;
        sm.advance(now);
        BOOST_REQUIRE(sm.session_get(s) != nullptr);
        BOOST_REQUIRE(sm.agent_check_update("web", check_passing, "beat", now));
    }
    sm.advance(t0 + 70s - 1ns);
    BOOST_TEST(sm.session_get(s) != nullptr);
    BOOST_TEST(log.events.empty());
    sm.advance(t0 + 70s);
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
}

BOOST_FIXTURE_TEST_CASE(legacy_checks_field_binds_too, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    session_create_request req;
    req.checks = strings{"web"};
    auto s = create(sm, req, t0);
    sm.advance(t0 + 10s);
    BOOST_TEST(sm.session_get(s) == nullptr);
}

BOOST_FIXTURE_TEST_CASE(warning_does_not_invalidate, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"web"};
    auto s = create(sm, req, t0);
    BOOST_TEST(sm.agent_check_update("web", check_warning, "slow", t0));
    BOOST_TEST(sm.session_get(s) != nullptr);
    BOOST_TEST(sm.check_get("tenure", "web")->status == "warning");
}

BOOST_FIXTURE_TEST_CASE(unbound_sessions_survive_a_critical_check, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    auto s = create(sm, {}, t0);  // serfHealth only
    BOOST_TEST(sm.agent_check_update("web", check_critical, "down", t0));
    BOOST_TEST(sm.session_get(s) != nullptr);
}

BOOST_FIXTURE_TEST_CASE(reregistering_as_critical_invalidates, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"web"};
    auto s = create(sm, req, t0);
    register_ttl_check(sm, "web", 1h, std::nullopt, t0 + 1s);  // replaced, starts critical
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
}

BOOST_FIXTURE_TEST_CASE(deregister_removes_the_check, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    BOOST_TEST(sm.agent_check_deregister("web", t0));
    BOOST_TEST(sm.check_get("tenure", "web") == nullptr);
    BOOST_TEST(sm.agent_checks().empty());
    BOOST_TEST(!sm.next_deadline().has_value());  // its TTL timer is gone
}

BOOST_FIXTURE_TEST_CASE(catalog_register_and_lookups, sm_fixture) {
    auto const before = sm.nodes_index();
    register_node(sm, "n2", {"c1", "c2"}, t0);
    BOOST_TEST(sm.nodes_index() > before);
    auto const* n = sm.node_get("n2");
    BOOST_REQUIRE(n);
    BOOST_TEST(n->address == "10.0.0.2");
    strings names;
    for (auto const* e : sm.node_list()) names.push_back(e->node);
    BOOST_TEST(sorted(names) == (strings{"n2", "tenure"}), boost::test_tools::per_element());
    auto const* c1 = sm.check_get("n2", "c1");
    BOOST_REQUIRE(c1);
    BOOST_TEST(c1->status == "passing");
    BOOST_TEST(c1->node == "n2");
    BOOST_TEST(!c1->agent_local);
    strings ids;
    for (auto const* c : sm.node_checks("n2")) ids.push_back(c->check_id);
    BOOST_TEST(sorted(ids) == (strings{"c1", "c2"}), boost::test_tools::per_element());
    BOOST_TEST(sm.check_get("n2", "serfHealth") == nullptr);
    BOOST_TEST(sm.check_get("tenure", "c1") == nullptr);
    BOOST_TEST(sm.node_get("ghost") == nullptr);
}

BOOST_FIXTURE_TEST_CASE(catalog_check_going_critical_invalidates, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    session_create_request req;
    req.node = "n2";
    req.node_checks = strings{"c1"};
    auto s = create(sm, req, t0);
    BOOST_REQUIRE(acquire(sm, "k", s, t0));
    register_node(sm, "n2", {"c1"}, t0 + 1s, check_critical);
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(sm.check_get("n2", "c1")->status == "critical");
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
    expect_lock_delay("k", t0 + 1s, 15s);
}

BOOST_FIXTURE_TEST_CASE(node_deregister_invalidates_all_its_sessions, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    session_create_request bound;
    bound.node = "n2";
    bound.node_checks = strings{"c1"};
    auto a = create(sm, bound, t0);
    session_create_request unbound;
    unbound.node = "n2";
    unbound.node_checks = strings{};
    auto b = create(sm, unbound, t0);
    auto local = create(sm, {}, t0);
    ok(sm.catalog_deregister("n2", std::nullopt, t0 + 1s));
    BOOST_TEST(sm.session_get(a) == nullptr);
    BOOST_TEST(sm.session_get(b) == nullptr);
    BOOST_TEST(sm.session_get(local) != nullptr);
    BOOST_TEST(sm.node_get("n2") == nullptr);
    BOOST_TEST(sm.check_get("n2", "c1") == nullptr);
    BOOST_TEST(sm.session_list_node("n2").empty());
    BOOST_TEST(log.events.size() == 2u);
}

BOOST_FIXTURE_TEST_CASE(critical_serf_health_invalidates_default_sessions, sm_fixture) {
    auto s = create(sm, {}, t0);
    register_node(sm, "tenure", {"serfHealth"}, t0 + 1s, check_critical);
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
}

BOOST_AUTO_TEST_SUITE_END()

// ===========================================================================
// on_invalidate: one call per invalidation with the right cause
// ===========================================================================
BOOST_AUTO_TEST_SUITE(agent_invalidate)

BOOST_FIXTURE_TEST_CASE(cause_destroyed, sm_fixture) {
    auto s = create(sm, {}, t0);
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::destroyed);
}

BOOST_FIXTURE_TEST_CASE(cause_ttl_expired, sm_fixture) {
    session_create_request req;
    req.ttl = "10s";
    auto s = create(sm, req, t0);
    sm.advance(t0 + 20s);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::ttl_expired);
}

BOOST_FIXTURE_TEST_CASE(cause_check_critical_by_update, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"web"};
    auto s = create(sm, req, t0);
    BOOST_TEST(sm.agent_check_update("web", check_critical, "", t0));
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
}

BOOST_FIXTURE_TEST_CASE(cause_check_critical_by_ttl, sm_fixture) {
    register_ttl_check(sm, "web", 10s, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"web"};
    auto s = create(sm, req, t0);
    sm.advance(t0 + 10s);
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_critical);
}

BOOST_FIXTURE_TEST_CASE(cause_check_deregistered_agent, sm_fixture) {
    register_ttl_check(sm, "web", 1h, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"web"};
    auto s = create(sm, req, t0);
    BOOST_TEST(sm.agent_check_deregister("web", t0));
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_deregistered);
}

BOOST_FIXTURE_TEST_CASE(cause_check_deregistered_catalog, sm_fixture) {
    register_node(sm, "n2", {"c1"}, t0);
    session_create_request req;
    req.node = "n2";
    req.node_checks = strings{"c1"};
    auto s = create(sm, req, t0);
    ok(sm.catalog_deregister("n2", std::string("c1"), t0));
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::check_deregistered);
}

BOOST_FIXTURE_TEST_CASE(cause_node_deregistered, sm_fixture) {
    register_node(sm, "n2", {}, t0);
    session_create_request req;
    req.node = "n2";
    req.node_checks = strings{};
    auto s = create(sm, req, t0);
    ok(sm.catalog_deregister("n2", std::nullopt, t0));
    BOOST_REQUIRE(log.events.size() == 1u);
    BOOST_TEST(log.events[0].first == s);
    BOOST_TEST(log.events[0].second == invalidation_cause::node_deregistered);
}

BOOST_FIXTURE_TEST_CASE(hook_sees_the_session_as_it_was, sm_fixture) {
    session_create_request req;
    req.name = "worker";
    req.lock_delay_ns = 3 * ns_per_s;
    std::string name;
    std::int64_t delay = 0;
    sm.on_invalidate = [&](session_entry const& e, invalidation_cause) {
        name = e.name;
        delay = e.lock_delay_ns;
    };
    auto s = create(sm, req, t0);
    BOOST_TEST(sm.session_destroy(s, t0));
    BOOST_TEST(name == "worker");
    BOOST_TEST(delay == 3 * ns_per_s);
}

BOOST_FIXTURE_TEST_CASE(one_call_per_session_even_with_several_bound_checks, sm_fixture) {
    register_ttl_check(sm, "a", 10s, std::string(check_passing), t0);
    register_ttl_check(sm, "b", 10s, std::string(check_passing), t0);
    session_create_request req;
    req.node_checks = strings{"a", "b"};
    req.ttl = "10s";
    auto s = create(sm, req, t0);
    sm.advance(t0 + 1h);  // both checks and the session TTL lapse in one advance
    BOOST_TEST(sm.session_get(s) == nullptr);
    BOOST_TEST(log.events.size() == 1u);
}

BOOST_AUTO_TEST_CASE(causes_have_distinct_names) {
    std::set<std::string> names;
    for (auto c : {invalidation_cause::destroyed, invalidation_cause::ttl_expired, invalidation_cause::check_critical,
                   invalidation_cause::check_deregistered, invalidation_cause::node_deregistered}) {
        auto n = std::string(agent::to_string(c));
        BOOST_TEST(!n.empty());
        names.insert(n);
    }
    BOOST_TEST(names.size() == 5u);
}

BOOST_AUTO_TEST_SUITE_END()
