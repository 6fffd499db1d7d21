// The agent's metrics (include/tenure/detail/agent/metrics.hpp) through the
// socket-free HTTP API with a mock clock: /v1/agent/metrics parses as strict
// Prometheus text and its series move with sessions, locks, TTL lapses,
// destroys and lock-delay refusals; the JSON form has Consul's shape.
#include <boost/test/unit_test.hpp>

#include "prometheus_text.hpp"

#include "agent/http_api.hpp"
#include "agent/metrics.hpp"
#include "agent/state.hpp"

#include <boost/json.hpp>

#include <chrono>
#include <string>

namespace agent = tenure::detail::agent;
namespace http = boost::beast::http;
namespace json = boost::json;
using namespace std::chrono_literals;
using agent::time_point;
using tenure::test::parse_prometheus;

namespace {

struct env {
    time_point now{};
    agent::state_machine sm{[] {
                                agent::agent_config c;
                                c.seed = 99;
                                c.session_ttl_min = 1s;
                                return c;
                            }(),
                            time_point{}};
    agent::http_api api{sm};
    agent::agent_metrics metrics;

    env() {
        metrics.attach(sm);
        api.set_metrics(&metrics);
    }

    agent::response call(http::verb method, std::string target, std::string body = {}) {
        agent::request req{method, target, 11};
        req.body() = std::move(body);
        req.prepare_payload();
        agent::blocking_state bs;
        auto out = api.handle(req, now, bs);
        BOOST_REQUIRE(out.res.has_value());
        // What the server does for every answered request.
        metrics.observe_request(req.method_string(), target, out.res->result_int(), 2ms);
        return std::move(*out.res);
    }

    std::string create_session(std::string body) {
        auto r = call(http::verb::put, "/v1/session/create", std::move(body));
        BOOST_REQUIRE_EQUAL(r.result_int(), 200u);
        return std::string(json::parse(r.body()).at("ID").as_string());
    }

    tenure::test::prom_text scrape() {
        auto r = call(http::verb::get, "/v1/agent/metrics?format=prometheus");
        BOOST_REQUIRE_EQUAL(r.result_int(), 200u);
        BOOST_TEST(std::string(r[http::field::content_type]).starts_with("text/plain; version=0.0.4"));
        return parse_prometheus(r.body());
    }
};

double cause(tenure::test::prom_text const& p, std::string const& c) {
    return p.value("tenure_session_invalidations_total", {{"cause", c}});
}

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_metrics)

BOOST_AUTO_TEST_CASE(prometheus_series_move_with_the_events) {
    env e;
    auto p = e.scrape();
    BOOST_TEST(p.value("tenure_sessions") == 0);
    BOOST_TEST(p.value("tenure_locks_held") == 0);
    for (auto c : {"ttl", "destroy", "check", "node"}) BOOST_TEST(cause(p, c) == 0);
    BOOST_TEST(p.families.at("tenure_session_invalidations_total").type == "counter");
    BOOST_TEST(p.families.at("tenure_sessions").type == "gauge");

    // A session holding a lock.
    std::string sid = e.create_session(R"({"TTL":"10s","LockDelay":"5s"})");
    BOOST_TEST(e.call(http::verb::put, "/v1/kv/leader?acquire=" + sid, "me").body() == "true");
    BOOST_TEST(e.call(http::verb::put, "/v1/kv/plain", "x").body() == "true");
    p = e.scrape();
    BOOST_TEST(p.value("tenure_sessions") == 1);
    BOOST_TEST(p.value("tenure_kv_keys") == 2);
    BOOST_TEST(p.value("tenure_locks_held") == 1);
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "PUT"}, {"endpoint", "session"}, {"code", "200"}}) == 1);
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "PUT"}, {"endpoint", "kv"}, {"code", "200"}}) == 2);
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_count", {{"endpoint", "kv"}}) == 2);

    // Not renewed: invalidated by TTL (2 x 10s) on the mock clock.
    e.now += 20s;
    e.sm.advance(e.now);
    p = e.scrape();
    BOOST_TEST(cause(p, "ttl") == 1);
    BOOST_TEST(p.value("tenure_sessions") == 0);
    BOOST_TEST(p.value("tenure_locks_held") == 0);
    BOOST_TEST(e.metrics.invalidations("ttl") == 1u);

    // During its lock-delay a new session is refused the key.
    std::string other = e.create_session(R"({"LockDelay":"0s"})");
    BOOST_TEST(e.call(http::verb::put, "/v1/kv/leader?acquire=" + other, "you").body() == "false");
    p = e.scrape();
    BOOST_TEST(p.value("tenure_lock_delay_rejections_total") == 1);

    // Destroy.
    BOOST_TEST(e.call(http::verb::put, "/v1/session/destroy/" + other).result_int() == 200u);
    p = e.scrape();
    BOOST_TEST(cause(p, "destroy") == 1);
    BOOST_TEST(cause(p, "ttl") == 1);

    // A 404 is counted with its code; the metrics scrapes themselves are counted too.
    e.call(http::verb::get, "/v1/kv/missing");
    p = e.scrape();
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "GET"}, {"endpoint", "kv"}, {"code", "404"}}) == 1);
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "GET"}, {"endpoint", "agent"}, {"code", "200"}}) >= 5);
    BOOST_TEST(p.value("tenure_raft_index") == static_cast<double>(e.sm.raft_index()));
}

BOOST_AUTO_TEST_CASE(check_and_node_causes) {
    env e;
    auto reg = e.call(http::verb::put, "/v1/agent/check/register", R"({"Name":"app","TTL":"5s","Status":"passing"})");
    BOOST_REQUIRE_EQUAL(reg.result_int(), 200u);
    e.create_session(R"({"NodeChecks":["serfHealth","app"]})");
    BOOST_TEST(e.call(http::verb::put, "/v1/agent/check/fail/app").result_int() == 200u);
    BOOST_TEST(e.metrics.invalidations("check") == 1u);

    BOOST_REQUIRE_EQUAL(e.call(http::verb::put, "/v1/catalog/register", R"({"Node":"n2","Address":"10.0.0.2"})").result_int(), 200u);
    auto r = e.call(http::verb::put, "/v1/session/create", R"({"Node":"n2","NodeChecks":[]})");
    BOOST_REQUIRE_EQUAL(r.result_int(), 200u);
    BOOST_REQUIRE_EQUAL(e.call(http::verb::put, "/v1/catalog/deregister", R"({"Node":"n2"})").result_int(), 200u);
    auto p = e.scrape();
    BOOST_TEST(cause(p, "check") == 1);
    BOOST_TEST(cause(p, "node") == 1);
}

BOOST_AUTO_TEST_CASE(histogram_buckets_are_cumulative_and_blocking_queries_excluded) {
    agent::agent_metrics m;
    m.observe_request("GET", "/v1/kv/a", 200, 50us);
    m.observe_request("GET", "/v1/kv/a", 200, 3ms);
    m.observe_request("GET", "/v1/kv/a", 200, 10s);
    m.observe_request("GET", "/v1/kv/a?index=12&wait=5m", 200, 300s);  // counted, not timed
    m.observe_request("GET", "/v1/kv/a?index=0", 200, 1ms);
    m.observe_request("BREW", "/coffee", 418, 1ms);
    agent::state_machine sm(agent::agent_config{}, time_point{});
    auto p = parse_prometheus(m.prometheus(sm));
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_count", {{"endpoint", "kv"}}) == 4);
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_bucket", {{"endpoint", "kv"}, {"le", "0.0001"}}) == 1);
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_bucket", {{"endpoint", "kv"}, {"le", "0.005"}}) == 3);
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_bucket", {{"endpoint", "kv"}, {"le", "2.5"}}) == 3);
    BOOST_TEST(p.value("tenure_http_request_duration_seconds_bucket", {{"endpoint", "kv"}, {"le", "+Inf"}}) == 4);
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "GET"}, {"endpoint", "kv"}, {"code", "200"}}) == 5);
    BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "OTHER"}, {"endpoint", "other"}, {"code", "418"}}) == 1);
    BOOST_TEST(!p.has("tenure_wal_commits_total"));
    m.observe_commit(2ms, 100);
    p = parse_prometheus(m.prometheus(sm));
    BOOST_TEST(p.value("tenure_wal_commits_total") == 1);
    BOOST_TEST(p.value("tenure_wal_bytes_total") == 100);
}

BOOST_AUTO_TEST_CASE(json_form_has_consuls_shape) {
    env e;
    e.create_session("{}");
    auto r = e.call(http::verb::get, "/v1/agent/metrics");
    BOOST_REQUIRE_EQUAL(r.result_int(), 200u);
    auto v = json::parse(r.body()).as_object();
    for (auto k : {"Timestamp", "Gauges", "Points", "Counters", "Samples"}) BOOST_TEST(v.contains(k), k);
    bool found = false;
    for (auto const& g : v.at("Gauges").as_array())
        if (g.at("Name").as_string() == "tenure.session.count") found = g.at("Value").to_number<double>() == 1.0;
    BOOST_TEST(found);
    BOOST_TEST(e.call(http::verb::put, "/v1/agent/metrics").result_int() == 405u);
}

BOOST_AUTO_TEST_CASE(strict_parser_rejects_malformed_text) {
    using tenure::test::parse_prometheus;
    BOOST_CHECK_NO_THROW(parse_prometheus("# TYPE a counter\na 1\n"));
    BOOST_CHECK_THROW(parse_prometheus("a 1\n"), std::runtime_error);                           // no TYPE
    BOOST_CHECK_THROW(parse_prometheus("# TYPE a counter\na 1"), std::runtime_error);           // no newline
    BOOST_CHECK_THROW(parse_prometheus("# TYPE a counter\na{x=\"1} 1\n"), std::runtime_error);  // unterminated
    BOOST_CHECK_THROW(parse_prometheus("# TYPE a counter\na one\n"), std::runtime_error);       // bad value
    BOOST_CHECK_THROW(parse_prometheus("# TYPE a counter\na 1\na 2\n"), std::runtime_error);    // duplicate
    BOOST_CHECK_THROW(parse_prometheus("# TYPE a gauge\n# TYPE b gauge\na 1\nb 1\na{x=\"y\"} 1\n"),
                      std::runtime_error);  // split family
    BOOST_CHECK_THROW(parse_prometheus("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                                       "h_sum 1\nh_count 1\n"),
                      std::runtime_error);  // not cumulative
}

BOOST_AUTO_TEST_SUITE_END()
