// `tenure agent` observability over real HTTP: /v1/agent/metrics?format=prometheus
// parses as strict Prometheus text and its counters move with a real TTL
// invalidation; -log-json writes one JSON object per line.
#include "agent_process.hpp"
#include "http_client.hpp"
#include "../unit/prometheus_text.hpp"

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

namespace json = boost::json;
namespace fs = std::filesystem;
using namespace tenure::itest;
using namespace std::chrono_literals;
using tenure::test::parse_prometheus;

namespace {

tenure::test::prom_text scrape(http_client& c) {
    auto r = c.get("/v1/agent/metrics?format=prometheus");
    BOOST_REQUIRE_EQUAL(r.status, 200u);
    BOOST_TEST(r.header("Content-Type").value_or("").starts_with("text/plain; version=0.0.4"));
    return parse_prometheus(r.body);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_metrics_http)

BOOST_AUTO_TEST_CASE(counters_move_with_a_real_ttl_invalidation) {
    std::string tmpl = (fs::temp_directory_path() / "tenure-metrics-XXXXXX").string();
    BOOST_REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    fs::path dir = tmpl;
    {
        agent_options o;
        o.extra_args = {"-data-dir", dir.string(), "-log-json"};
        agent_process agent(o);
        http_client c("127.0.0.1", agent.port());

        auto p = scrape(c);
        BOOST_TEST(p.value("tenure_sessions") == 0);
        BOOST_TEST(p.value("tenure_session_invalidations_total", {{"cause", "ttl"}}) == 0);

        auto s = c.put("/v1/session/create", R"({"TTL":"200ms","LockDelay":"0s"})");
        BOOST_REQUIRE_EQUAL(s.status, 200u);
        std::string sid(json::parse(s.body).at("ID").as_string());
        BOOST_REQUIRE_EQUAL(c.put("/v1/kv/m/lock?acquire=" + sid, "x").body, "true");
        p = scrape(c);
        BOOST_TEST(p.value("tenure_sessions") == 1);
        BOOST_TEST(p.value("tenure_locks_held") == 1);
        BOOST_TEST(p.value("tenure_wal_commits_total") >= 2);

        // Not renewed: the agent invalidates it after 2 x TTL; a blocking
        // query on the key returns when the lock is released.
        auto k = c.get("/v1/kv/m/lock");
        request_options ro;
        ro.timeout = 20s;
        auto after = c.get("/v1/kv/m/lock?index=" + k.header("X-Consul-Index").value() + "&wait=10s", ro);
        BOOST_REQUIRE_EQUAL(after.status, 200u);
        BOOST_REQUIRE(!json::parse(after.body).at(0).as_object().contains("Session"));

        p = scrape(c);
        BOOST_TEST(p.value("tenure_session_invalidations_total", {{"cause", "ttl"}}) == 1);
        BOOST_TEST(p.value("tenure_sessions") == 0);
        BOOST_TEST(p.value("tenure_locks_held") == 0);
        BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "PUT"}, {"endpoint", "session"}, {"code", "200"}}) == 1);
        BOOST_TEST(p.value("tenure_http_requests_total", {{"method", "GET"}, {"endpoint", "kv"}, {"code", "200"}}) >= 2);
        BOOST_TEST(p.value("tenure_http_request_duration_seconds_count", {{"endpoint", "session"}}) == 1);

        // The JSON form.
        auto j = c.get("/v1/agent/metrics");
        BOOST_REQUIRE_EQUAL(j.status, 200u);
        auto v = json::parse(j.body).as_object();
        BOOST_TEST(v.at("Gauges").as_array().size() >= 5u);
        BOOST_TEST(v.at("Counters").as_array().size() >= 5u);

        // -log-json: every stderr line is one JSON object with hclog's keys.
        agent.stop(SIGTERM, 10s);
        std::istringstream log(agent.log());
        std::string line;
        int lines = 0;
        bool saw_invalidation = false;
        while (std::getline(log, line)) {
            ++lines;
            json::value l;
            BOOST_REQUIRE_NO_THROW(l = json::parse(line));
            auto const& o = l.as_object();
            for (auto key : {"@timestamp", "@level", "@module", "@message"}) BOOST_TEST(o.contains(key), key);
            if (o.at("@message").as_string().find("session invalidated") != json::string::npos) saw_invalidation = true;
        }
        BOOST_TEST(lines >= 3);
        BOOST_TEST(saw_invalidation);
    }
    fs::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
