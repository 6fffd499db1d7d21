// The agent's ACLs and limits against abuse, over real sockets against the
// real `tenure agent` binary, and the client library's token against it.
// (Rules in detail: tests/unit/acl_limits_test.cpp.)

// Designated initializers that leave members to their defaults are the point.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "http_client.hpp"
#include "test_pki.hpp"

#include <tenure/agent.hpp>
#include "agent/agent_access.hpp"
#include "consul/client_access.hpp"

#include <tenure/consul/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <future>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#error "TENURE_BINARY must name the tenure executable"
#endif

namespace asio = boost::asio;
namespace consul = tenure::consul;
using namespace std::chrono_literals;
using tenure::itest::agent_process;
using tenure::itest::http_client;
using tenure::itest::http_response;

namespace {

using tenure::itest::expect_error;

// A file in a fresh temporary directory, removed with it.
struct temp_dir {
    std::string path;
    temp_dir() {
        char tmpl[] = "/tmp/tenure-itest-sec-XXXXXX";
        if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~temp_dir() { std::system(("rm -rf '" + path + "'").c_str()); }
    std::string write(std::string const& name, std::string const& content) const {
        std::string const file = path + "/" + name;
        std::ofstream(file, std::ios::binary) << content;
        return file;
    }
};

// Runs the binary with `args` to completion: its exit code and its output (stdout and stderr).
std::pair<int, std::string> run_tenure(std::string const& args) {
    std::string const cmd = std::string(TENURE_BINARY) + " " + args + " 2>&1 </dev/null";
    FILE* p = ::popen(cmd.c_str(), "r");
    if (!p) throw std::runtime_error("popen failed");
    std::string out;
    char buf[4096];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int const st = ::pclose(p);
    return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// Runs a coroutine on a fresh io_context to completion; rethrows its exception.
void run(std::function<asio::awaitable<void>()> const& f) {
    asio::io_context ioc{1};
    std::exception_ptr ep;
    bool done = false;
    asio::co_spawn(ioc, f(), [&](std::exception_ptr e) {
        ep = e;
        done = true;
    });
    ioc.run_for(60s);
    BOOST_REQUIRE_MESSAGE(done, "scenario did not finish within 60s");
    if (ep) std::rethrow_exception(ep);
}

std::string const acl_json = R"({
  "policies": [{"Name": "app", "Rules": {"key_prefix": {"service/app/": {"policy": "write"}},
                                         "session_prefix": {"": {"policy": "write"}}}}],
  "tokens": [{"SecretID": "app-token", "Description": "the app", "Policies": [{"Name": "app"}]}]
})";

struct acl_agent {
    temp_dir dir;
    agent_process agent{tenure::itest::agent_options{
        .extra_args = {"-acl-enabled", "-acl-bootstrap-token-file", dir.write("root", "root-token\n"), "-acl-file",
                       dir.write("acl.json", acl_json)}}};

    consul::client_config config(std::string token) const {
        consul::client_config c;
        c.address = "127.0.0.1:" + std::to_string(agent.port());
        c.token = std::move(token);
        return c;
    }
};

// The client's coroutines (not its completion-token operations): they throw
// api_error with the HTTP status and the server's message.
using tenure::detail::coro;

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_acl_http)

BOOST_FIXTURE_TEST_CASE(client_library_with_a_token, acl_agent) {
    ::unsetenv("CONSUL_HTTP_TOKEN");
    // g++ 12 destroys temporaries inside a co_await expression twice: every
    // argument is named first.
    run([&]() -> asio::awaitable<void> {
        auto ex = co_await asio::this_coro::executor;
        consul::client app{ex, config("app-token")};
        consul::session_request sr;
        sr.name = "acl itest";
        sr.ttl = 10s;
        std::string const id = co_await app.session_create(sr);
        std::string const key = "service/app/leader";
        std::string me = "me";
        BOOST_TEST(co_await app.kv_acquire(key, id, me));
        auto got = co_await app.kv_get(key);
        BOOST_REQUIRE(got.value);
        BOOST_TEST(got.value->session == id);
        // A blocking read carries the token too: woken by a write.
        consul::read_options ro;
        ro.index = got.meta.index;
        ro.wait = 20s;
        auto waiter = app.kv_get(key, ro, asio::use_awaitable);
        std::optional<std::string> again = "again";
        BOOST_TEST(co_await app.kv_put(key, again));
        auto woken = co_await std::move(waiter);
        BOOST_REQUIRE(woken.value);
        BOOST_TEST(woken.value->value.value_or("") == "again");

        // Outside its prefix: 403 with Consul's message.
        std::string const other = "service/other";
        auto e = co_await expect_error<consul::api_error>(coro(app).kv_put(other, again));
        BOOST_TEST(e.http_status() == 403u);
        BOOST_TEST(e.server_message().starts_with("Permission denied: token with AccessorID '"));
        BOOST_TEST(e.server_message().find("lacks permission 'key:write' on \"service/other\"") != std::string::npos);

        // No token: the anonymous token, denied by default.
        consul::client anon{ex, config("")};
        e = co_await expect_error<consul::api_error>(coro(anon).kv_get(key));
        BOOST_TEST(e.http_status() == 403u);
        // An unknown token.
        consul::client bogus{ex, config("not-a-token")};
        e = co_await expect_error<consul::api_error>(coro(bogus).session_create(sr));
        BOOST_TEST(e.http_status() == 403u);
        BOOST_TEST(e.server_message() == "ACL not found");

        // The management token from the file may do anything.
        consul::client root{ex, config("root-token")};
        std::string const anywhere = "anywhere";
        BOOST_TEST(co_await root.kv_put(anywhere, again));
        std::optional<std::string> const none;
        BOOST_TEST(co_await app.kv_release(key, id, none));
        co_await app.session_destroy(id);
    });
}

BOOST_FIXTURE_TEST_CASE(tokens_are_created_over_the_api, acl_agent) {
    http_client http{"127.0.0.1", agent.port()};
    tenure::itest::request_options root{.headers = {{"X-Consul-Token", "root-token"}}};
    auto r = http.put("/v1/acl/token", R"({"Description":"ci","Policies":[{"Name":"app"}]})", root);
    BOOST_REQUIRE_MESSAGE(r.status == 200, r.body);
    auto const pos = r.body.find("\"SecretID\":\"");
    BOOST_REQUIRE(pos != std::string::npos);
    std::string const secret = r.body.substr(pos + 12, 36);
    tenure::itest::request_options with{.headers = {{"Authorization", "Bearer " + secret}}};
    BOOST_TEST(http.put("/v1/kv/service/app/x", "1", with).status == 200u);
    BOOST_TEST(http.put("/v1/kv/other", "1", with).status == 403u);
    BOOST_TEST(http.get("/v1/kv/service/app/x?token=" + secret).status == 200u);
    BOOST_TEST(http.get("/v1/acl/token/self", with).status == 200u);
}

BOOST_AUTO_TEST_CASE(bad_acl_flags_are_refused_at_start) {
    temp_dir dir;
    auto [rc, out] = run_tenure("agent -http-addr 127.0.0.1:0 -acl-enabled -acl-file " + dir.path + "/missing.json");
    BOOST_TEST(rc == 1);
    BOOST_TEST(out.find("cannot read ACL file") != std::string::npos, out);
    std::tie(rc, out) = run_tenure("agent -http-addr 127.0.0.1:0 -acl-enabled -acl-file " +
                                   dir.write("bad.json", R"({"tokens":[{"SecretID":"a","Rules":{"service":{}}}]})"));
    BOOST_TEST(rc == 1);
    BOOST_TEST(out.find("unsupported rule \"service\"") != std::string::npos, out);
    std::tie(rc, out) = run_tenure("agent -http-addr 127.0.0.1:0 -acl-bootstrap-token x");
    BOOST_TEST(rc == 1);
    BOOST_TEST(out.find("need -acl-enabled") != std::string::npos, out);
}

BOOST_AUTO_TEST_SUITE_END()

// ---- TLS ------------------------------------------------------------------------------------

namespace {

// A tenure::agent serving on its own thread (the test thread is the client's).
struct threaded_agent {
    asio::io_context ioc{1};
    std::unique_ptr<tenure::agent> agent;
    std::thread thread;

    explicit threaded_agent(tenure::agent_options o) {
        o.log_stream = nullptr;
        agent = std::make_unique<tenure::agent>(ioc.get_executor(), std::move(o));
        agent->start();
        thread = std::thread([this] { ioc.run(); });
    }
    ~threaded_agent() {
        asio::post(ioc, [this] { agent->stop(); });
        thread.join();
        agent.reset();
    }
    std::string https() const { return agent->https_address(); }  // fixed once constructed
    std::uint16_t http_port() const { return agent->local_endpoint().port(); }
};

tenure::agent_options tls_options(tenure::itest::test_pki const& pki, bool verify_incoming) {
    tenure::agent_options o;
    o.http_addr = "127.0.0.1:0";
    o.https_addr = "127.0.0.1:0";
    o.cert_file = pki.server_cert;
    o.key_file = pki.server_key;
    if (verify_incoming) {
        o.ca_file = pki.ca_cert;
        o.verify_incoming = true;
    }
    return o;
}

void clear_tls_env() {
    for (char const* v : {"CONSUL_CACERT", "CONSUL_CLIENT_CERT", "CONSUL_CLIENT_KEY", "CONSUL_TLS_SERVER_NAME",
                          "CONSUL_HTTP_TOKEN"})
        ::unsetenv(v);
}

// A put and a read back over `cfg`, through the library.
void round_trip(consul::client_config cfg, std::string const& value) {
    run([&]() -> asio::awaitable<void> {
        consul::client c{co_await asio::this_coro::executor, cfg};
        std::string const key = "tls/k";
        std::optional<std::string> v = value;
        BOOST_TEST(co_await c.kv_put(key, v));
        auto got = co_await c.kv_get(key);
        BOOST_REQUIRE(got.value);
        BOOST_TEST(got.value->value.value_or("") == value);
    });
}

// The api_error a put over `cfg` fails with.
consul::api_error failed_round_trip(consul::client_config cfg) {
    std::optional<consul::api_error> err;
    run([&]() -> asio::awaitable<void> {
        consul::client c{co_await asio::this_coro::executor, cfg};
        std::string const key = "tls/k";
        std::optional<std::string> v = "x";
        err = co_await expect_error<consul::api_error>(coro(c).kv_put(key, v));
    });
    BOOST_REQUIRE(err);
    return *err;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_tls)

BOOST_AUTO_TEST_CASE(round_trip_without_client_certificates) {
    clear_tls_env();
    tenure::itest::test_pki pki;
    threaded_agent a{tls_options(pki, false)};
    BOOST_TEST(a.https().starts_with("https://127.0.0.1:"));
    consul::client_config cfg;
    cfg.address = a.https();
    cfg.ca_file = pki.ca_cert;
    cfg.request_timeout = 10s;
    round_trip(cfg, "over tls");
    // The certificate names localhost too.
    cfg.address = "https://localhost:" + std::to_string(a.agent->https_endpoint().port());
    round_trip(cfg, "by name");
    // Plain HTTP keeps working beside HTTPS and sees the same data.
    http_client plain{"127.0.0.1", a.http_port()};
    BOOST_TEST(plain.get("/v1/kv/tls/k?raw").body == "by name");
    // Plain HTTP spoken to the HTTPS port gets no answer.
    http_client confused{"127.0.0.1", a.agent->https_endpoint().port()};
    BOOST_CHECK_THROW(confused.get("/v1/kv/tls/k", {.timeout = 5s}), tenure::itest::http_error);
}

BOOST_AUTO_TEST_CASE(wrong_ca_or_name_is_refused_by_the_client) {
    clear_tls_env();
    tenure::itest::test_pki pki;
    threaded_agent a{tls_options(pki, false)};
    consul::client_config cfg;
    cfg.address = a.https();
    cfg.ca_file = pki.other_ca_cert;  // does not sign the server's certificate
    cfg.request_timeout = 10s;
    auto e = failed_round_trip(cfg);
    BOOST_TEST(e.http_status() == 0u);
    BOOST_TEST(std::string(e.what()).find("TLS handshake") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("certificate verify failed") != std::string::npos, e.what());
    // The right CA but a name the certificate does not carry.
    cfg.ca_file = pki.ca_cert;
    cfg.tls_server_name = "consul.example";
    e = failed_round_trip(cfg);
    BOOST_TEST(std::string(e.what()).find("TLS handshake") != std::string::npos, e.what());
    // A missing CA file is a configuration error at construction.
    asio::io_context ioc;
    cfg.ca_file = pki.dir + "/nope.pem";
    BOOST_CHECK_THROW(consul::client(ioc.get_executor(), cfg), boost::system::system_error);
}

BOOST_AUTO_TEST_CASE(verify_incoming_requires_a_client_certificate_from_the_ca) {
    clear_tls_env();
    tenure::itest::test_pki pki;
    threaded_agent a{tls_options(pki, true)};
    consul::client_config cfg;
    cfg.address = a.https();
    cfg.ca_file = pki.ca_cert;
    cfg.request_timeout = 10s;
    cfg.cert_file = pki.client_cert;
    cfg.key_file = pki.client_key;
    round_trip(cfg, "with a client certificate");
    // No client certificate: refused.
    consul::client_config none = cfg;
    none.cert_file.clear();
    none.key_file.clear();
    auto e = failed_round_trip(none);
    BOOST_TEST(e.http_status() == 0u);
    // A client certificate from another CA: refused.
    consul::client_config other = cfg;
    other.cert_file = pki.other_client_cert;
    other.key_file = pki.other_client_key;
    e = failed_round_trip(other);
    BOOST_TEST(e.http_status() == 0u);
    // The agent kept serving the good client.
    round_trip(cfg, "still serving");
}

BOOST_AUTO_TEST_CASE(tls_with_acls_through_the_cli_flags) {
    clear_tls_env();
    tenure::itest::test_pki pki;
    // The binary prints the HTTPS address on a second line; a port chosen here keeps the fixture simple.
    std::uint16_t port = 0;
    {
        asio::io_context ioc;
        asio::ip::tcp::acceptor probe{ioc, {asio::ip::make_address("127.0.0.1"), 0}};
        port = probe.local_endpoint().port();
    }
    agent_process agent{tenure::itest::agent_options{
        .extra_args = {"-https-addr", "127.0.0.1:" + std::to_string(port), "-cert-file", pki.server_cert, "-key-file",
                       pki.server_key, "-ca-file", pki.ca_cert, "-verify-incoming", "-acl-enabled",
                       "-acl-bootstrap-token", "root"}}};
    consul::client_config cfg;
    cfg.address = "https://127.0.0.1:" + std::to_string(port);
    cfg.ca_file = pki.ca_cert;
    cfg.cert_file = pki.client_cert;
    cfg.key_file = pki.client_key;
    cfg.token = "root";
    round_trip(cfg, "tls and acl");
    cfg.token = "wrong";
    BOOST_TEST(failed_round_trip(cfg).http_status() == 403u);

    auto [rc, out] = run_tenure("agent -http-addr 127.0.0.1:0 -https-addr 127.0.0.1:0 -cert-file " + pki.dir +
                                "/missing.pem -key-file " + pki.server_key);
    BOOST_TEST(rc == 1);
    BOOST_TEST(out.find("cannot load -cert-file") != std::string::npos, out);
    std::tie(rc, out) = run_tenure("agent -http-addr 127.0.0.1:0 -https-addr 127.0.0.1:0 -cert-file " +
                                   pki.server_cert + " -key-file " + pki.client_key);
    BOOST_TEST(rc == 1);
    BOOST_TEST(out.find("-key-file") != std::string::npos, out);  // OpenSSL: key values mismatch
}

BOOST_AUTO_TEST_SUITE_END()

// ---- limits -------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(agent_limits_http)

BOOST_AUTO_TEST_CASE(request_rate_per_connection) {
    // A bucket of 3 that refills once in 1000 s: the 4th request is refused, whatever the timing.
    agent_process agent{tenure::itest::agent_options{
        .extra_args = {"-http-rate-per-conn", "0.001", "-http-burst-per-conn", "3"}}};
    http_client greedy{"127.0.0.1", agent.port()};
    for (int i = 0; i < 3; ++i) BOOST_TEST(greedy.get("/v1/kv/k").status == 404u);
    auto r = greedy.get("/v1/kv/k");
    BOOST_TEST(r.status == 429u);
    BOOST_TEST(r.body == "rate limit exceeded, try again later");
    BOOST_TEST(r.header("Retry-After").value_or("") == "1");
    BOOST_TEST(greedy.put("/v1/kv/k", "x").status == 429u);  // the connection stays open, still limited
    // Another connection has its own bucket.
    http_client other{"127.0.0.1", agent.port()};
    BOOST_TEST(other.put("/v1/kv/k", "x").status == 200u);
    BOOST_TEST(other.get("/v1/kv/k?raw").body == "x");
}

BOOST_AUTO_TEST_CASE(blocking_queries_in_flight) {
    // In-process agent on its own thread, so the test can ask it (on its
    // thread) how many queries are parked instead of guessing from timing.
    tenure::agent_options o;
    o.max_blocking_queries = 2;
    threaded_agent agent{o};
    auto parked = [&] {
        std::promise<std::size_t> p;
        auto f = p.get_future();
        asio::post(agent.ioc, [&] { p.set_value(tenure::detail::agent_access::state(*agent.agent).watcher_count()); });
        return f.get();
    };
    http_client c{"127.0.0.1", agent.http_port()};
    BOOST_REQUIRE(c.put("/v1/kv/w", "0").status == 200);
    auto const index = c.get("/v1/kv/w").header("X-Consul-Index").value();
    std::string const blocking = "/v1/kv/w?index=" + index + "&wait=60s";
    tenure::itest::background_request a{agent.http_port(), "GET", blocking};
    tenure::itest::background_request b{agent.http_port(), "GET", blocking};
    auto const deadline = std::chrono::steady_clock::now() + 20s;
    while (parked() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    BOOST_REQUIRE_EQUAL(parked(), 2u);

    auto r = c.get("/v1/kv/w?index=" + index + "&wait=10ms");
    BOOST_TEST(r.status == 429u);
    BOOST_TEST(r.body == "too many blocking queries in flight (limit 2, -max-blocking-queries), try again later");
    BOOST_TEST(r.header("Retry-After").value_or("") == "1");
    // Everything else keeps working, and the parked queries are answered.
    BOOST_TEST(c.get("/v1/kv/w").status == 200u);
    BOOST_TEST(c.put("/v1/kv/w", "1").status == 200u);
    BOOST_TEST(a.get().status == 200u);
    BOOST_TEST(b.get().status == 200u);
}

BOOST_AUTO_TEST_CASE(oversize_bodies_and_headers_and_quotas) {
    agent_process agent{tenure::itest::agent_options{
        .extra_args = {"-kv-max-value-size", "1024", "-max-header-bytes", "2048", "-max-sessions-per-node", "1",
                       "-max-kv-keys", "2"}}};
    http_client c{"127.0.0.1", agent.port()};
    auto r = c.put("/v1/kv/big", std::string(2000, 'x'));
    BOOST_TEST(r.status == 413u);
    BOOST_TEST(r.body.find("too large, max size: 1024 bytes") != std::string::npos, r.body);
    tenure::itest::request_options fat{.headers = {{"X-Padding", std::string(4096, 'p')}}};
    BOOST_TEST(c.get("/v1/kv/a", fat).status == 431u);

    BOOST_TEST(c.put("/v1/session/create").status == 200u);
    r = c.put("/v1/session/create");
    BOOST_TEST(r.status == 500u);
    BOOST_TEST(r.body.find("Too many sessions for node") != std::string::npos, r.body);
    BOOST_TEST(c.put("/v1/kv/a", "1").status == 200u);
    BOOST_TEST(c.put("/v1/kv/b", "1").status == 200u);
    r = c.put("/v1/kv/c", "1");
    BOOST_TEST(r.status == 500u);
    BOOST_TEST(r.body.find("KV store is full") != std::string::npos, r.body);
    // The agent keeps serving.
    BOOST_TEST(c.put("/v1/kv/a", std::string(1024, 'y')).status == 200u);
    BOOST_TEST(c.get("/v1/kv/a?raw").body.size() == 1024u);
}

BOOST_AUTO_TEST_SUITE_END()

