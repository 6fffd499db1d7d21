// Integration tests of `tenure agent` over real HTTP.
//
// Every test case starts its own agent process (agent_fixture), so no state
// leaks between cases; the agent runs with -session-ttl-min 100ms so that TTL
// behaviour can be observed in well under a second. The rules under test are
// those of reference/consul-semantics.md §§1-6 and §12. Time-dependent cases
// await events (blocking queries, the child's stdout, its exit) rather than
// sleep; the one exception is the end of a lock-delay, which the server does
// not announce (see lock_delay.destroy_applies_lock_delay).

#include "agent_process.hpp"
#include "awaiting.hpp"
#include "http_client.hpp"

#include <boost/json.hpp>
#include <boost/test/results_collector.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <csignal>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

namespace json = boost::json;
using namespace tenure::itest;
using namespace std::chrono_literals;

namespace {

// ---- helpers -----------------------------------------------------------------

constexpr std::uint64_t semaphore_flags = 16210313421097356768ull;  // > 2^63
constexpr std::uint64_t lock_flags = 3304740253564472344ull;
constexpr char const* unknown_session = "7a3f0c4e-5b1d-4c2a-9e8f-0123456789ab";

// "412.3 ms"
std::string show_ms(double v) {
    std::ostringstream os;
    os << std::fixed << std::setprecision(v < 10 ? 3 : 1) << v << " ms";
    return os.str();
}

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
    return s;
}

std::string base64(std::string_view in) {
    static constexpr char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    std::size_t i = 0;
    for (; i + 2 < in.size(); i += 3) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8) |
                     static_cast<unsigned char>(in[i + 2]);
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += tbl[(v >> 6) & 63];
        out += tbl[v & 63];
    }
    if (i + 1 == in.size()) {
        unsigned v = static_cast<unsigned char>(in[i]) << 16;
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += "==";
    } else if (i + 2 == in.size()) {
        unsigned v = (static_cast<unsigned char>(in[i]) << 16) | (static_cast<unsigned char>(in[i + 1]) << 8);
        out += tbl[(v >> 18) & 63];
        out += tbl[(v >> 12) & 63];
        out += tbl[(v >> 6) & 63];
        out += '=';
    }
    return out;
}

// The response expression is evaluated once (it usually is the request itself).
#define REQUIRE_STATUS(resp, code)                                                                         \
    do {                                                                                                   \
        auto const& resp_ = (resp);                                                                        \
        BOOST_REQUIRE_MESSAGE(resp_.status == (code), "expected HTTP " << (code) << ", got " << resp_.status \
                                                                       << " body '" << resp_.body << "'"); \
    } while (0)
#define CHECK_STATUS(resp, code)                                                                         \
    do {                                                                                                 \
        auto const& resp_ = (resp);                                                                      \
        BOOST_CHECK_MESSAGE(resp_.status == (code), "expected HTTP " << (code) << ", got " << resp_.status \
                                                                     << " body '" << resp_.body << "'"); \
    } while (0)

json::value parse(http_response const& r) {
    boost::system::error_code ec;
    json::value v = json::parse(r.body, ec);
    BOOST_REQUIRE_MESSAGE(!ec, "body is not JSON (" << ec.message() << "): '" << r.body << "'");
    return v;
}

json::object const& as_object(json::value const& v) {
    BOOST_REQUIRE_MESSAGE(v.is_object(), "not a JSON object: " << v);
    return v.get_object();
}

json::array const& as_array(json::value const& v) {
    BOOST_REQUIRE_MESSAGE(v.is_array(), "not a JSON array: " << v);
    return v.get_array();
}

std::string str(json::object const& o, std::string_view key) {
    auto const* p = o.if_contains(key);
    BOOST_REQUIRE_MESSAGE(p && p->is_string(), "field " << key << " missing or not a string in " << o);
    return std::string(p->get_string());
}

std::uint64_t u64(json::object const& o, std::string_view key) {
    auto const* p = o.if_contains(key);
    BOOST_REQUIRE_MESSAGE(p && (p->is_uint64() || (p->is_int64() && p->get_int64() >= 0)),
                          "field " << key << " missing or not a non-negative integer in " << o);
    return p->is_uint64() ? p->get_uint64() : static_cast<std::uint64_t>(p->get_int64());
}

std::uint64_t consul_index(http_response const& r) {
    auto h = r.header("X-Consul-Index");
    BOOST_REQUIRE_MESSAGE(h, "no X-Consul-Index header (status " << r.status << ")");
    BOOST_REQUIRE_MESSAGE(!h->empty() && h->find_first_not_of("0123456789") == std::string::npos,
                          "X-Consul-Index is not a number: '" << *h << "'");
    return std::stoull(*h);
}

std::vector<std::string> strings(json::value const& v) {
    std::vector<std::string> out;
    for (auto const& e : as_array(v)) {
        BOOST_REQUIRE_MESSAGE(e.is_string(), "not a string: " << e);
        out.emplace_back(e.get_string());
    }
    return out;
}

std::string session_create(http_client& c, std::string const& body = {}) {
    auto r = c.put("/v1/session/create", body);
    REQUIRE_STATUS(r, 200u);
    return str(as_object(parse(r)), "ID");
}

// The session as /v1/session/info shows it, or nullopt when it is gone.
std::optional<json::object> session_info(http_client& c, std::string const& id) {
    auto r = c.get("/v1/session/info/" + id);
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    auto const& a = as_array(v);
    if (a.empty()) return std::nullopt;
    BOOST_REQUIRE_EQUAL(a.size(), 1u);
    return as_object(a[0]);
}

// The KV entry of a single-key GET, or nullopt on 404.
std::optional<json::object> kv_get(http_client& c, std::string const& key) {
    auto r = c.get("/v1/kv/" + key);
    if (r.status == 404) return std::nullopt;
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    auto const& a = as_array(v);
    BOOST_REQUIRE_EQUAL(a.size(), 1u);
    return as_object(a[0]);
}

void connect_loopback(int fd, std::uint16_t port) {
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr const*>(&to), sizeof to) == 0);
}

// A blocking loopback TCP connection to the agent, for tests that need
// control over how the bytes are split or how fast they are read. A hung
// agent fails the test after 30 s instead of hanging it.
class raw_socket {
public:
    explicit raw_socket(std::uint16_t port, int receive_buffer = 0) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        BOOST_REQUIRE(fd_ >= 0);
        if (receive_buffer > 0) ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
        timeval const limit{30, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
        connect_loopback(fd_, port);
    }
    ~raw_socket() { ::close(fd_); }
    raw_socket(raw_socket const&) = delete;
    raw_socket& operator=(raw_socket const&) = delete;

    void send(std::string_view bytes) {
        BOOST_REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
    }

    // Everything until the agent closes the connection.
    std::string read_to_end() {
        std::string out;
        std::vector<char> chunk(65536);
        for (;;) {
            auto const n = ::recv(fd_, chunk.data(), chunk.size(), 0);
            if (n <= 0) return out;
            out.append(chunk.data(), static_cast<std::size_t>(n));
        }
    }

private:
    int fd_;
};

// A plain TCP connection whose reads report when the kernel received the
// data (SO_TIMESTAMPNS): the order two answers arrived in, on two sockets.
class stamped_socket {
public:
    struct received {
        std::string bytes;
        std::chrono::nanoseconds at{};  // CLOCK_REALTIME of the first read's data
    };

    explicit stamped_socket(std::uint16_t port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
        BOOST_REQUIRE(fd_ >= 0);
        int one = 1;
        BOOST_REQUIRE(::setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0);
        await_stamping();
        ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        connect_loopback(fd_, port);
    }
    ~stamped_socket() { ::close(fd_); }
    stamped_socket(stamped_socket const&) = delete;
    stamped_socket& operator=(stamped_socket const&) = delete;

    void send(std::string const& bytes) {
        BOOST_REQUIRE(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()));
    }

    // What one read returns, within 10 s.
    received receive() {
        pollfd p{fd_, POLLIN, 0};
        BOOST_REQUIRE_MESSAGE(::poll(&p, 1, 10000) == 1, "no answer within 10 s");
        char data[4096];
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
        iovec iov{data, sizeof data};
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        ssize_t const n = ::recvmsg(fd_, &m, 0);
        BOOST_REQUIRE(n > 0);
        received out;
        out.bytes.assign(data, static_cast<std::size_t>(n));
        bool stamped = false;
        for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
                timespec ts;
                std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
                out.at = std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
                stamped = true;
            }
        }
        BOOST_REQUIRE_MESSAGE(stamped, "the kernel gave no receive timestamp");
        return out;
    }

private:
    // The kernel turns receive timestamps on for everyone once a socket asks
    // (a global switch), but may do so from a deferred work item: data
    // received before it runs carries no stamp, and under load that took
    // long enough to reach the answers timed here. Waits until a datagram
    // on loopback comes back stamped (the switch stays on while this
    // socket has the option), within 10 s.
    static void await_stamping() {
        int const rx = ::socket(AF_INET, SOCK_DGRAM, 0), tx = ::socket(AF_INET, SOCK_DGRAM, 0);
        BOOST_REQUIRE(rx >= 0 && tx >= 0);
        int one = 1;
        BOOST_REQUIRE(::setsockopt(rx, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one) == 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        BOOST_REQUIRE(::bind(rx, reinterpret_cast<sockaddr const*>(&a), sizeof a) == 0);
        BOOST_REQUIRE(::getsockname(rx, reinterpret_cast<sockaddr*>(&a), &len) == 0);
        bool stamped = false;
        for (int i = 0; i < 10000 && !stamped; ++i) {
            char byte = 0;
            BOOST_REQUIRE(::sendto(tx, &byte, 1, 0, reinterpret_cast<sockaddr const*>(&a), sizeof a) == 1);
            alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
            iovec iov{&byte, 1};
            msghdr m{};
            m.msg_iov = &iov;
            m.msg_iovlen = 1;
            m.msg_control = control;
            m.msg_controllen = sizeof control;
            BOOST_REQUIRE(::recvmsg(rx, &m, 0) == 1);
            for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
                stamped = stamped || (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS);
            if (!stamped) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ::close(rx);
        ::close(tx);
        BOOST_REQUIRE_MESSAGE(stamped, "the kernel turned no receive timestamps on within 10 s");
    }

    int fd_;
};

// Index of a single-key read (present or not).
std::uint64_t kv_index(http_client& c, std::string const& key) {
    auto r = c.get("/v1/kv/" + key);
    BOOST_REQUIRE_MESSAGE(r.status == 200 || r.status == 404, "GET /v1/kv/" << key << " -> " << r.status);
    return consul_index(r);
}

// The response body of an acquire / release / cas: "true" or "false".
std::string put_bool(http_client& c, std::string const& target, std::string body = {}) {
    auto r = c.put(target, std::move(body));
    REQUIRE_STATUS(r, 200u);
    std::string b = trim(r.body);
    BOOST_REQUIRE_MESSAGE(b == "true" || b == "false", "PUT " << target << ": body is not a boolean: '" << r.body
                                                                << "'");
    return b;
}

std::string acquire(http_client& c, std::string const& key, std::string const& session, std::string value = {}) {
    return put_bool(c, "/v1/kv/" + key + "?acquire=" + session, std::move(value));
}

std::string release(http_client& c, std::string const& key, std::string const& session, std::string value = {}) {
    return put_bool(c, "/v1/kv/" + key + "?release=" + session, std::move(value));
}

bool has_session(json::object const& entry) {
    auto const* p = entry.if_contains("Session");
    return p && !(p->is_string() && p->get_string().empty());
}

// The session-table index and count, as /v1/session/list reports them.
std::pair<std::uint64_t, std::size_t> session_table(http_client& c) {
    auto r = c.get("/v1/session/list");
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    return {consul_index(r), as_array(v).size()};
}

// Waits (blocking query) until /v1/session/info/<id> changes past `index`.
http_response await_session_change(http_client& c, std::string const& id, std::uint64_t index,
                                   std::string const& wait = "5s") {
    auto r = c.get("/v1/session/info/" + id + "?index=" + std::to_string(index) + "&wait=" + wait);
    REQUIRE_STATUS(r, 200u);
    return r;
}

// One agent per test case: isolated state, and a fresh process for each rule.
struct agent_fixture {
    agent_process agent;
    http_client http{"127.0.0.1", agent.port()};

    agent_fixture() = default;
    explicit agent_fixture(agent_options opts) : agent(std::move(opts)) {}
    ~agent_fixture() {
        namespace ut = boost::unit_test;
        auto const& tc = ut::framework::current_test_case();
        if (!ut::results_collector.results(tc.p_id).passed())
            BOOST_TEST_MESSAGE("---- tenure agent stderr ----\n" << agent.log());
    }
};

}  // namespace

// =============================================================================
// §1-2 Sessions
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(sessions, agent_fixture)

BOOST_AUTO_TEST_CASE(create_defaults_and_json_shape) {
    auto [idx0, n0] = session_table(http);
    BOOST_TEST(idx0 >= 1u);  // never 0, even before any session exists
    BOOST_TEST(n0 == 0u);

    auto r = http.put("/v1/session/create");
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(r.header("Content-Type").value_or("").find("application/json") == 0u);
    auto created = parse(r);
    BOOST_TEST(as_object(created).size() == 1u);
    std::string id = str(as_object(created), "ID");
    BOOST_TEST(std::regex_match(id, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")), id);

    auto info = http.get("/v1/session/info/" + id);
    REQUIRE_STATUS(info, 200u);
    auto v = parse(info);
    BOOST_REQUIRE_EQUAL(as_array(v).size(), 1u);
    auto const& s = as_object(as_array(v)[0]);

    std::vector<std::string> keys;
    for (auto const& kv : s) keys.emplace_back(kv.key());
    std::sort(keys.begin(), keys.end());
    std::vector<std::string> const expected = {"Behavior",  "CreateIndex", "ID",            "LockDelay", "ModifyIndex",
                                               "Name",      "Node",        "NodeChecks",    "ServiceChecks", "TTL"};
    BOOST_TEST(keys == expected, boost::test_tools::per_element());

    BOOST_TEST(str(s, "ID") == id);
    BOOST_TEST(str(s, "Name") == "");
    BOOST_TEST(str(s, "Node") == "itest-node");
    BOOST_TEST((s.at("LockDelay").is_int64() || s.at("LockDelay").is_uint64()),
               "LockDelay must be an integer of nanoseconds, got " << s.at("LockDelay"));
    BOOST_TEST(u64(s, "LockDelay") == 15'000'000'000u);
    BOOST_TEST(str(s, "Behavior") == "release");
    BOOST_TEST(str(s, "TTL") == "");
    BOOST_TEST(strings(s.at("NodeChecks")) == std::vector<std::string>{"serfHealth"}, boost::test_tools::per_element());
    BOOST_TEST(s.at("ServiceChecks").is_null());
    BOOST_TEST(u64(s, "CreateIndex") == u64(s, "ModifyIndex"));
    BOOST_TEST(u64(s, "CreateIndex") >= idx0);
    BOOST_TEST(consul_index(info) == u64(s, "ModifyIndex"));

    auto [idx1, n1] = session_table(http);
    BOOST_TEST(n1 == 1u);
    BOOST_TEST(idx1 == u64(s, "CreateIndex"));
}

BOOST_AUTO_TEST_CASE(create_with_fields) {
    std::string id = session_create(http, R"({"Name":"nightly","TTL":"10s","LockDelay":"1s","Behavior":"delete"})");
    auto s = session_info(http, id);
    BOOST_REQUIRE(s);
    BOOST_TEST(str(*s, "Name") == "nightly");
    BOOST_TEST(str(*s, "TTL") == "10s");
    BOOST_TEST(u64(*s, "LockDelay") == 1'000'000'000u);
    BOOST_TEST(str(*s, "Behavior") == "delete");
    BOOST_TEST(str(*s, "Node") == "itest-node");
}

BOOST_AUTO_TEST_CASE(lowercase_fields_as_python_consul_sends) {
    std::string id = session_create(http, R"({"name":"x","lockdelay":"0s","ttl":"10s","behavior":"delete"})");
    auto s = session_info(http, id);
    BOOST_REQUIRE(s);
    BOOST_TEST(str(*s, "Name") == "x");
    BOOST_TEST(u64(*s, "LockDelay") == 0u);
    BOOST_TEST(str(*s, "TTL") == "10s");
    BOOST_TEST(str(*s, "Behavior") == "delete");

    // Any case matches (Go's encoding/json), and unknown fields are ignored.
    id = session_create(http, R"({"NAME":"y","TtL":"20s","SomethingElse":[1,2,3]})");
    s = session_info(http, id);
    BOOST_REQUIRE(s);
    BOOST_TEST(str(*s, "Name") == "y");
    BOOST_TEST(str(*s, "TTL") == "20s");
}

BOOST_AUTO_TEST_CASE(lock_delay_number_and_string_forms) {
    struct sample {
        char const* json;
        std::uint64_t ns;
    };
    sample const samples[] = {
        {"15", 15'000'000'000u},           // < 1000: seconds
        {"15000000000", 15'000'000'000u},  // nanoseconds
        {"999", 999'000'000'000u},         // still < 1000: seconds
        {"0", 0u},
        {R"("15000ms")", 15'000'000'000u},  // what the Go api sends
        {R"("1s")", 1'000'000'000u},
        {R"("0s")", 0u},
    };
    for (auto const& smp : samples) {
        BOOST_TEST_CONTEXT("LockDelay " << smp.json) {
            std::string id = session_create(http, std::string(R"({"LockDelay":)") + smp.json + "}");
            auto s = session_info(http, id);
            BOOST_REQUIRE(s);
            BOOST_TEST(u64(*s, "LockDelay") == smp.ns);
        }
    }
}

BOOST_AUTO_TEST_CASE(validation_errors_leave_state_unchanged) {
    auto const before = session_table(http);
    struct bad {
        std::string body;
        unsigned status;
        std::string text;  // exact (status 500) or prefix (400)
    };
    bad const cases[] = {
        {R"({"TTL":"50ms"})", 500, "Invalid Session TTL '50000000', must be between [100ms=24h0m0s]"},
        {R"({"TTL":"25h"})", 500, "Invalid Session TTL '90000000000000', must be between [100ms=24h0m0s]"},
        {R"({"TTL":"abc"})", 500, R"(Session TTL 'abc' invalid: time: invalid duration "abc")"},
        {R"({"Behavior":"x"})", 500, "Invalid Behavior setting 'x'"},
        {R"({"Node":""})", 500, "Must provide Node"},
        {"{", 400, "Request decode failed: "},
        {R"({"Name":"a",})", 400, "Request decode failed: "},
        {R"([1,2])", 400, "Request decode failed: "},
        {R"({"LockDelay":"15"})", 400, "Request decode failed: "},  // a string needs a unit
        {R"({"TTL":10})", 400, "Request decode failed: "},          // TTL is a string
    };
    for (auto const& c : cases) {
        BOOST_TEST_CONTEXT("body " << c.body) {
            auto r = http.put("/v1/session/create", c.body);
            CHECK_STATUS(r, c.status);
            BOOST_TEST(r.header("Content-Type").value_or("").find("text/plain") == 0u);
            if (c.status == 500)
                BOOST_TEST(trim(r.body) == c.text);
            else
                BOOST_TEST(r.body.rfind(c.text, 0) == 0u, "body '" << r.body << "'");
            BOOST_TEST((session_table(http) == before), "the session table changed after a rejected create");
        }
    }
    // The bounds themselves are accepted, and "0s" means no TTL.
    for (char const* ttl : {"100ms", "24h", "0s"}) {
        BOOST_TEST_CONTEXT("TTL " << ttl) {
            auto r = http.put("/v1/session/create", std::string(R"({"TTL":")") + ttl + "\"}");
            CHECK_STATUS(r, 200u);
        }
    }
    BOOST_TEST(session_table(http).second == 3u);
}

BOOST_AUTO_TEST_CASE(renew) {
    std::string id = session_create(http, R"({"Name":"r","TTL":"10s"})");
    auto info = session_info(http, id);
    BOOST_REQUIRE(info);

    auto r = http.put("/v1/session/renew/" + id);
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    BOOST_REQUIRE_EQUAL(as_array(v).size(), 1u);
    BOOST_TEST(as_array(v)[0] == json::value(*info), "renew must return the stored session unchanged: " << v);
    BOOST_TEST(str(as_object(as_array(v)[0]), "TTL") == "10s");

    // A session with no TTL renews too (and nothing changes).
    std::string no_ttl = session_create(http);
    CHECK_STATUS(http.put("/v1/session/renew/" + no_ttl), 200u);

    auto missing = http.put(std::string("/v1/session/renew/") + unknown_session);
    CHECK_STATUS(missing, 404u);
    BOOST_TEST(trim(missing.body) == std::string("Session id '") + unknown_session + "' not found");

    auto d = http.put("/v1/session/destroy/" + id);
    CHECK_STATUS(d, 200u);
    auto gone = http.put("/v1/session/renew/" + id);
    CHECK_STATUS(gone, 404u);
    BOOST_TEST(trim(gone.body) == "Session id '" + id + "' not found");
}

BOOST_AUTO_TEST_CASE(destroy_info_list_node) {
    auto const empty = session_table(http);

    // Unknown ids: destroy answers true, info answers [], and nothing changes.
    auto d = http.put(std::string("/v1/session/destroy/") + unknown_session);
    REQUIRE_STATUS(d, 200u);
    BOOST_TEST(trim(d.body) == "true");
    auto i = http.get(std::string("/v1/session/info/") + unknown_session);
    REQUIRE_STATUS(i, 200u);
    BOOST_TEST(trim(i.body) == "[]");
    BOOST_TEST((session_table(http) == empty));

    auto l = http.get("/v1/session/list");
    REQUIRE_STATUS(l, 200u);
    BOOST_TEST(trim(l.body) == "[]");

    std::string a = session_create(http, R"({"Name":"a"})");
    std::string b = session_create(http, R"({"Name":"b"})");

    auto ids_of = [](json::value const& v) {
        std::vector<std::string> ids;
        for (auto const& e : as_array(v)) ids.push_back(str(as_object(e), "ID"));
        std::sort(ids.begin(), ids.end());
        return ids;
    };
    std::vector<std::string> both = {a, b};
    std::sort(both.begin(), both.end());

    l = http.get("/v1/session/list");
    REQUIRE_STATUS(l, 200u);
    BOOST_TEST(ids_of(parse(l)) == both, boost::test_tools::per_element());

    auto n = http.get("/v1/session/node/itest-node");
    REQUIRE_STATUS(n, 200u);
    BOOST_TEST(ids_of(parse(n)) == both, boost::test_tools::per_element());
    auto other = http.get("/v1/session/node/some-other-node");
    REQUIRE_STATUS(other, 200u);
    BOOST_TEST(trim(other.body) == "[]");

    d = http.put("/v1/session/destroy/" + a);
    REQUIRE_STATUS(d, 200u);
    BOOST_TEST(trim(d.body) == "true");
    BOOST_TEST(!session_info(http, a));
    BOOST_TEST(session_info(http, b).has_value());
    auto [idx, count] = session_table(http);
    BOOST_TEST(count == 1u);
    BOOST_TEST(idx > empty.first);
}

BOOST_AUTO_TEST_CASE(wrong_method_is_405_with_allow) {
    auto const before = session_table(http);
    auto r = http.get("/v1/session/create");
    CHECK_STATUS(r, 405u);
    auto allow = r.header("Allow");
    BOOST_REQUIRE_MESSAGE(allow, "405 without an Allow header");
    BOOST_TEST(allow->find("PUT") != std::string::npos, "Allow: " << *allow);
    BOOST_TEST((session_table(http) == before));

    auto del = http.del("/v1/session/destroy/" + std::string(unknown_session));
    CHECK_STATUS(del, 405u);
    BOOST_TEST(del.has_header("Allow"));
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// §5 KV
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(kv, agent_fixture)

BOOST_AUTO_TEST_CASE(put_get_round_trip_and_headers) {
    auto p = http.put("/v1/kv/app/config", "hello");
    REQUIRE_STATUS(p, 200u);
    BOOST_TEST(trim(p.body) == "true");

    auto r = http.get("/v1/kv/app/config");
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(r.header("Content-Type").value_or("").find("application/json") == 0u);
    BOOST_TEST(r.header("X-Consul-KnownLeader").value_or("") == "true");
    BOOST_TEST(r.header("X-Consul-LastContact").value_or("") == "0");
    auto v = parse(r);
    BOOST_REQUIRE_EQUAL(as_array(v).size(), 1u);
    auto const& e = as_object(as_array(v)[0]);
    BOOST_TEST(str(e, "Key") == "app/config");
    BOOST_TEST(str(e, "Value") == base64("hello"));
    BOOST_TEST(u64(e, "Flags") == 0u);
    BOOST_TEST(u64(e, "LockIndex") == 0u);
    BOOST_TEST(!e.contains("Session"), "Session must be omitted when empty: " << e);
    BOOST_TEST(u64(e, "CreateIndex") == u64(e, "ModifyIndex"));
    BOOST_TEST(consul_index(r) == u64(e, "ModifyIndex"));

    // An overwrite keeps CreateIndex and moves ModifyIndex.
    REQUIRE_STATUS(http.put("/v1/kv/app/config", "world"), 200u);
    auto e2 = kv_get(http, "app/config");
    BOOST_REQUIRE(e2);
    BOOST_TEST(str(*e2, "Value") == base64("world"));
    BOOST_TEST(u64(*e2, "CreateIndex") == u64(e, "CreateIndex"));
    BOOST_TEST(u64(*e2, "ModifyIndex") > u64(e, "ModifyIndex"));

    // An empty body stores no value: "Value": null.
    REQUIRE_STATUS(http.put("/v1/kv/app/empty"), 200u);
    auto e3 = kv_get(http, "app/empty");
    BOOST_REQUIRE(e3);
    BOOST_TEST(e3->at("Value").is_null(), "Value: " << e3->at("Value"));
}

BOOST_AUTO_TEST_CASE(missing_key_is_404_with_meta_headers) {
    auto r = http.get("/v1/kv/does/not/exist");
    CHECK_STATUS(r, 404u);
    BOOST_TEST(r.body.empty(), "body '" << r.body << "'");
    BOOST_TEST(consul_index(r) >= 1u);  // never 0, even on an empty store
    BOOST_TEST(r.header("X-Consul-KnownLeader").value_or("") == "true");
    BOOST_TEST(r.has_header("X-Consul-LastContact"));

    REQUIRE_STATUS(http.put("/v1/kv/present", "x"), 200u);
    auto idx = kv_index(http, "present");
    auto r2 = http.get("/v1/kv/does/not/exist");
    CHECK_STATUS(r2, 404u);
    BOOST_TEST(consul_index(r2) >= idx);  // the table index

    auto rec = http.get("/v1/kv/does/not?recurse");
    CHECK_STATUS(rec, 404u);
    BOOST_TEST(rec.has_header("X-Consul-Index"));
    auto keys = http.get("/v1/kv/does/not?keys");
    CHECK_STATUS(keys, 404u);
    BOOST_TEST(keys.has_header("X-Consul-Index"));
}

BOOST_AUTO_TEST_CASE(flags_are_uint64_and_replaced_by_every_put) {
    auto p = http.put("/v1/kv/sem/.lock?flags=16210313421097356768", "x");
    REQUIRE_STATUS(p, 200u);
    auto r = http.get("/v1/kv/sem/.lock");
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(r.body.find("\"Flags\":16210313421097356768") != std::string::npos,
               "Flags must be written as an exact uint64: " << r.body);
    auto e = as_object(as_array(parse(r))[0]);
    BOOST_TEST(u64(e, "Flags") == semaphore_flags);

    // A PUT without ?flags sets 0.
    REQUIRE_STATUS(http.put("/v1/kv/sem/.lock", "y"), 200u);
    auto e2 = kv_get(http, "sem/.lock");
    BOOST_REQUIRE(e2);
    BOOST_TEST(u64(*e2, "Flags") == 0u);

    // Largest uint64.
    REQUIRE_STATUS(http.put("/v1/kv/sem/max?flags=18446744073709551615", "z"), 200u);
    auto e3 = kv_get(http, "sem/max");
    BOOST_REQUIRE(e3);
    BOOST_TEST(u64(*e3, "Flags") == 18446744073709551615ull);
}

BOOST_AUTO_TEST_CASE(raw_returns_the_bare_value) {
    std::string const value("bin\0ary\xff\x01 value", 15);
    REQUIRE_STATUS(http.put("/v1/kv/blob", value), 200u);
    auto r = http.get("/v1/kv/blob?raw");
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(r.body == value);
    BOOST_TEST(r.header("Content-Type").value_or("").find("text/plain") == 0u,
               "Content-Type: " << r.header("Content-Type").value_or("<none>"));
    BOOST_TEST(r.header("X-Content-Type-Options").value_or("") == "nosniff");
    auto e = kv_get(http, "blob");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Value") == base64(value));
}

BOOST_AUTO_TEST_CASE(recurse_keys_and_separator) {
    for (auto k : {"a/1", "a/2", "a/sub/3", "a/sub/4"}) REQUIRE_STATUS(http.put(std::string("/v1/kv/") + k, k), 200u);
    auto last_a = kv_get(http, "a/sub/4");
    BOOST_REQUIRE(last_a);
    REQUIRE_STATUS(http.put("/v1/kv/b/5", "b"), 200u);

    auto r = http.get("/v1/kv/a/?recurse");
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    std::vector<std::string> keys;
    for (auto const& e : as_array(v)) keys.push_back(str(as_object(e), "Key"));
    BOOST_TEST(keys == (std::vector<std::string>{"a/1", "a/2", "a/sub/3", "a/sub/4"}), boost::test_tools::per_element());
    BOOST_TEST(str(as_object(as_array(v)[2]), "Value") == base64("a/sub/3"));
    // The index of a prefix read is the largest ModifyIndex under the prefix (b/5 is later but outside).
    BOOST_TEST(consul_index(r) == u64(*last_a, "ModifyIndex"));

    auto k1 = http.get("/v1/kv/a/?keys&separator=/");
    REQUIRE_STATUS(k1, 200u);
    BOOST_TEST(strings(parse(k1)) == (std::vector<std::string>{"a/1", "a/2", "a/sub/"}),
               boost::test_tools::per_element());

    auto k2 = http.get("/v1/kv/?keys");
    REQUIRE_STATUS(k2, 200u);
    BOOST_TEST(strings(parse(k2)) == (std::vector<std::string>{"a/1", "a/2", "a/sub/3", "a/sub/4", "b/5"}),
               boost::test_tools::per_element());

    auto k3 = http.get("/v1/kv/?keys&separator=/");
    REQUIRE_STATUS(k3, 200u);
    BOOST_TEST(strings(parse(k3)) == (std::vector<std::string>{"a/", "b/"}), boost::test_tools::per_element());

    auto k4 = http.get("/v1/kv/a/s?keys");
    REQUIRE_STATUS(k4, 200u);
    BOOST_TEST(strings(parse(k4)) == (std::vector<std::string>{"a/sub/3", "a/sub/4"}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(root_keys_of_an_empty_store_is_an_empty_list) {
    auto r = http.get("/v1/kv/?keys");
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(trim(r.body) == "[]");
    BOOST_TEST(consul_index(r) >= 1u);
}

BOOST_AUTO_TEST_CASE(cas) {
    BOOST_TEST(put_bool(http, "/v1/kv/c?cas=0", "one") == "true");  // cas=0: create only if absent
    auto e = kv_get(http, "c");
    BOOST_REQUIRE(e);
    auto const mi = u64(*e, "ModifyIndex");

    BOOST_TEST(put_bool(http, "/v1/kv/c?cas=0", "two") == "false");
    BOOST_TEST(put_bool(http, "/v1/kv/c?cas=" + std::to_string(mi + 100), "two") == "false");
    auto unchanged = kv_get(http, "c");
    BOOST_REQUIRE(unchanged);
    BOOST_TEST(str(*unchanged, "Value") == base64("one"));
    BOOST_TEST(u64(*unchanged, "ModifyIndex") == mi);

    BOOST_TEST(put_bool(http, "/v1/kv/c?cas=" + std::to_string(mi), "two") == "true");
    auto changed = kv_get(http, "c");
    BOOST_REQUIRE(changed);
    BOOST_TEST(str(*changed, "Value") == base64("two"));
    BOOST_TEST(u64(*changed, "ModifyIndex") > mi);
    BOOST_TEST(put_bool(http, "/v1/kv/c?cas=" + std::to_string(mi), "three") == "false");  // stale index
}

BOOST_AUTO_TEST_CASE(delete_plain_recurse_and_cas) {
    auto d = http.del("/v1/kv/never/existed");
    REQUIRE_STATUS(d, 200u);
    BOOST_TEST(trim(d.body) == "true");

    REQUIRE_STATUS(http.put("/v1/kv/x", "1"), 200u);
    auto e = kv_get(http, "x");
    BOOST_REQUIRE(e);
    auto const mi = u64(*e, "ModifyIndex");
    auto dc = http.del("/v1/kv/x?cas=" + std::to_string(mi + 7));
    REQUIRE_STATUS(dc, 200u);
    BOOST_TEST(trim(dc.body) == "false");
    BOOST_TEST(kv_get(http, "x").has_value());
    dc = http.del("/v1/kv/x?cas=" + std::to_string(mi));
    REQUIRE_STATUS(dc, 200u);
    BOOST_TEST(trim(dc.body) == "true");
    auto gone = http.get("/v1/kv/x");
    CHECK_STATUS(gone, 404u);
    BOOST_TEST(consul_index(gone) > mi);  // the delete (tombstone) moved the index
    dc = http.del("/v1/kv/x?cas=5");  // cas on a missing key: true
    REQUIRE_STATUS(dc, 200u);
    BOOST_TEST(trim(dc.body) == "true");

    for (auto k : {"d/1", "d/2", "d/x/3", "e"}) REQUIRE_STATUS(http.put(std::string("/v1/kv/") + k, "v"), 200u);
    auto bad = http.del("/v1/kv/d?recurse&cas=1");
    CHECK_STATUS(bad, 400u);
    BOOST_TEST(kv_get(http, "d/1").has_value());

    auto dr = http.del("/v1/kv/d/?recurse");
    REQUIRE_STATUS(dr, 200u);
    BOOST_TEST(trim(dr.body) == "true");
    CHECK_STATUS(http.get("/v1/kv/d/?recurse"), 404u);
    BOOST_TEST(kv_get(http, "e").has_value());
}

BOOST_AUTO_TEST_CASE(an_answer_larger_than_the_socket_takes_arrives_whole) {
    // The agent sends what the socket takes at once and writes the rest
    // asynchronously: about 7 MB of answer (past the largest send buffer,
    // 4 MiB) to a reader with a 4 KiB receive buffer forces the rest.
    std::vector<std::string> values;
    for (int k = 0; k < 10; ++k) {
        std::string v(524288, '\0');
        for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<char>('a' + (i * 7 + i / 4096 + k) % 26);
        REQUIRE_STATUS(http.put("/v1/kv/wide/" + std::to_string(k), v), 200u);
        values.push_back(std::move(v));
    }

    raw_socket sock(agent.port(), 4096);  // a small receive buffer: the agent's writes fill it
    sock.send("GET /v1/kv/wide/?recurse HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    std::string const answer = sock.read_to_end();
    auto const head_end = answer.find("\r\n\r\n");
    BOOST_REQUIRE(head_end != std::string::npos);
    BOOST_TEST(answer.rfind("HTTP/1.1 200", 0) == 0u);
    BOOST_TEST(answer.size() - head_end - 4 > std::size_t{4} << 20);
    BOOST_TEST(answer.find("Content-Length: " + std::to_string(answer.size() - head_end - 4) + "\r\n") < head_end);
    auto const entries = json::parse(std::string_view(answer).substr(head_end + 4)).as_array();
    BOOST_REQUIRE(entries.size() == values.size());
    for (std::size_t k = 0; k < values.size(); ++k) {
        auto const& e = entries[k].as_object();
        BOOST_TEST(e.at("Key").as_string() == "wide/" + std::to_string(k));
        BOOST_TEST((e.at("Value").as_string() == base64(values[k])), "value " << k);
    }
}

BOOST_AUTO_TEST_CASE(a_body_that_comes_after_its_header_is_read_whole) {
    // The agent parses a body that came with its header from the buffer,
    // and reads what is still missing: here the header and the body's first
    // bytes come in one write, the rest in a second one after a pause.
    raw_socket sock(agent.port());
    sock.send("PUT /v1/kv/late HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 11\r\nConnection: close\r\n\r\nhello");
    std::this_thread::sleep_for(100ms);  // the scenario itself: the agent has the first part alone
    sock.send(" world");
    std::string const answer = sock.read_to_end();
    BOOST_TEST(answer.rfind("HTTP/1.1 200", 0) == 0u, answer);
    BOOST_TEST(answer.ends_with("true"), answer);
    auto raw = http.get("/v1/kv/late?raw");
    REQUIRE_STATUS(raw, 200u);
    BOOST_TEST(raw.body == "hello world");
}

BOOST_AUTO_TEST_CASE(value_size_limit) {
    std::string const max_value(524288, 'x');
    auto ok = http.put("/v1/kv/big/ok", max_value);
    REQUIRE_STATUS(ok, 200u);
    BOOST_TEST(trim(ok.body) == "true");
    auto raw = http.get("/v1/kv/big/ok?raw");
    REQUIRE_STATUS(raw, 200u);
    BOOST_TEST(raw.body.size() == 524288u);

    auto const idx = kv_index(http, "big/no");
    std::string const too_big(524289, 'y');
    auto r = http.put("/v1/kv/big/no", too_big);
    CHECK_STATUS(r, 413u);
    BOOST_TEST(r.body.rfind("Request body(524289 bytes) too large, max size: 524288 bytes.", 0) == 0u,
               "body '" << r.body << "'");

    // Nothing stored, nothing bumped, and the agent still serves.
    CHECK_STATUS(http.get("/v1/kv/big/no"), 404u);
    BOOST_TEST(kv_index(http, "big/no") == idx);
    auto keys = http.get("/v1/kv/big/?keys");
    REQUIRE_STATUS(keys, 200u);
    BOOST_TEST(strings(parse(keys)) == std::vector<std::string>{"big/ok"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// §5 Locks: acquire / release / LockIndex
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(locks, agent_fixture)

BOOST_AUTO_TEST_CASE(acquire_release_and_lock_index) {
    std::string s1 = session_create(http, R"({"Name":"s1"})");
    std::string s2 = session_create(http, R"({"Name":"s2"})");

    BOOST_TEST(acquire(http, "svc/leader", s1, "v1") == "true");
    auto e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Session") == s1);
    BOOST_TEST(u64(*e, "LockIndex") == 1u);
    BOOST_TEST(str(*e, "Value") == base64("v1"));
    BOOST_TEST(u64(*e, "CreateIndex") == u64(*e, "ModifyIndex"));

    // Re-acquire by the holder: LockIndex unchanged, value replaced.
    BOOST_TEST(acquire(http, "svc/leader", s1, "v2") == "true");
    e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(u64(*e, "LockIndex") == 1u);
    BOOST_TEST(str(*e, "Value") == base64("v2"));
    auto const mi = u64(*e, "ModifyIndex");

    // Another session: false, nothing written.
    BOOST_TEST(acquire(http, "svc/leader", s2, "other") == "false");
    BOOST_TEST(release(http, "svc/leader", s2, "other") == "false");
    e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Session") == s1);
    BOOST_TEST(str(*e, "Value") == base64("v2"));
    BOOST_TEST(u64(*e, "ModifyIndex") == mi);

    // Release by the holder: Session cleared, LockIndex kept, value replaced by the request body.
    BOOST_TEST(release(http, "svc/leader", s1, "released") == "true");
    e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(!has_session(*e), *e);
    BOOST_TEST(u64(*e, "LockIndex") == 1u);
    BOOST_TEST(str(*e, "Value") == base64("released"));
    BOOST_TEST(u64(*e, "ModifyIndex") > mi);
    BOOST_TEST(release(http, "svc/leader", s1, "again") == "false");  // no longer held

    // A clean release hands over at once: the next holder moves LockIndex to 2.
    BOOST_TEST(acquire(http, "svc/leader", s2, "v3") == "true");
    e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Session") == s2);
    BOOST_TEST(u64(*e, "LockIndex") == 2u);

    // An empty-body release wipes the value.
    BOOST_TEST(release(http, "svc/leader", s2) == "true");
    e = kv_get(http, "svc/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(e->at("Value").is_null());

    // Release of a missing key: false.
    BOOST_TEST(release(http, "svc/none", s2) == "false");
}

BOOST_AUTO_TEST_CASE(acquire_keeps_flags_and_plain_put_keeps_the_holder) {
    std::string s1 = session_create(http);
    BOOST_TEST(put_bool(http, "/v1/kv/l?acquire=" + s1 + "&flags=3304740253564472344", "me") == "true");
    auto e = kv_get(http, "l");
    BOOST_REQUIRE(e);
    BOOST_TEST(u64(*e, "Flags") == lock_flags);

    // A plain PUT over a held key does not release it.
    REQUIRE_STATUS(http.put("/v1/kv/l", "overwritten"), 200u);
    e = kv_get(http, "l");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Session") == s1);
    BOOST_TEST(str(*e, "Value") == base64("overwritten"));
}

BOOST_AUTO_TEST_CASE(acquire_with_unknown_session_is_500) {
    auto const idx = kv_index(http, "k");
    auto r = http.put(std::string("/v1/kv/k?acquire=") + unknown_session, "v");
    CHECK_STATUS(r, 500u);
    BOOST_TEST(r.body.find("invalid session") != std::string::npos, "body '" << r.body << "'");
    CHECK_STATUS(http.get("/v1/kv/k"), 404u);
    BOOST_TEST(kv_index(http, "k") == idx);
}

BOOST_AUTO_TEST_CASE(conflicting_flags_are_400) {
    std::string s = session_create(http);
    REQUIRE_STATUS(http.put("/v1/kv/k", "orig"), 200u);
    auto e0 = kv_get(http, "k");
    BOOST_REQUIRE(e0);

    for (std::string q : {"acquire=" + s + "&cas=0", "acquire=" + s + "&release=" + s,
                          "release=" + s + "&cas=" + std::to_string(u64(*e0, "ModifyIndex"))}) {
        BOOST_TEST_CONTEXT("?" << q) {
            auto r = http.put("/v1/kv/k?" + q, "new");
            CHECK_STATUS(r, 400u);
            BOOST_TEST(r.body.rfind("Conflicting flags", 0) == 0u, "body '" << r.body << "'");
            auto e = kv_get(http, "k");
            BOOST_REQUIRE(e);
            BOOST_TEST(json::value(*e) == json::value(*e0), "state changed: " << *e);
        }
    }
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// §3-4 Invalidation and lock-delay
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(lock_delay, agent_fixture)

BOOST_AUTO_TEST_CASE(destroy_applies_lock_delay) {
    std::string holder = session_create(http, R"({"Name":"holder","LockDelay":"1s"})");
    std::string contender = session_create(http, R"({"Name":"contender"})");
    BOOST_REQUIRE(acquire(http, "job/leader", holder, "holder-value") == "true");

    auto const t_destroy = steady::now();
    auto d = http.put("/v1/session/destroy/" + holder);
    REQUIRE_STATUS(d, 200u);
    BOOST_TEST(trim(d.body) == "true");

    // Behaviour release: the key stays with its value and LockIndex, Session cleared.
    auto e = kv_get(http, "job/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(!has_session(*e), *e);
    BOOST_TEST(u64(*e, "LockIndex") == 1u);
    BOOST_TEST(str(*e, "Value") == base64("holder-value"));
    auto const mi = u64(*e, "ModifyIndex");

    // During the delay: false for everyone (even an unknown session, before validation), nothing written.
    BOOST_TEST(acquire(http, "job/leader", contender, "c") == "false");
    BOOST_TEST(acquire(http, "job/leader", unknown_session, "c") == "false");
    auto txn = http.put("/v1/txn", R"([{"KV":{"Verb":"lock","Key":"job/leader","Session":")" + contender +
                                       R"(","Value":"Yw=="}}])");
    CHECK_STATUS(txn, 409u);
    if (txn.status == 409) {
        auto v = parse(txn);
        auto const* errors = as_object(v).if_contains("Errors");
        BOOST_REQUIRE_MESSAGE(errors && errors->is_array() && !errors->get_array().empty(), "txn body " << v);
        BOOST_TEST(str(as_object(errors->get_array()[0]), "What") ==
                   R"(failed to lock key "job/leader" due to lock delay)");
    }
    BOOST_TEST(ms(steady::now() - t_destroy) < 1000.0, "the checks above took longer than the delay itself");
    auto during = kv_get(http, "job/leader");
    BOOST_REQUIRE(during);
    BOOST_TEST(u64(*during, "ModifyIndex") == mi);

    // The server announces no end of a lock-delay, so poll (bounded) for the first success.
    std::optional<steady::time_point> first_success;
    int attempts = 0;
    while (steady::now() - t_destroy < 3s) {
        ++attempts;
        if (acquire(http, "job/leader", contender, "contender-value") == "true") {
            first_success = steady::now();
            break;
        }
        std::this_thread::sleep_for(10ms);
    }
    BOOST_REQUIRE_MESSAGE(first_success, "acquire still false 3 s after destroy (" << attempts << " attempts)");
    double const after = ms(*first_success - t_destroy);
    BOOST_TEST_MESSAGE("lock-delay 1s: first successful acquire " << show_ms(after) << " after destroy (" << attempts
                                                                   << " attempts)");
    BOOST_TEST(after >= 1000.0);
    BOOST_TEST(after < 1500.0);

    e = kv_get(http, "job/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(str(*e, "Session") == contender);
    BOOST_TEST(u64(*e, "LockIndex") == 2u);
}

BOOST_AUTO_TEST_CASE(clean_release_hands_over_at_once) {
    std::string holder = session_create(http, R"({"Name":"holder"})");  // default lock-delay 15s
    std::string contender = session_create(http, R"({"Name":"contender"})");
    BOOST_REQUIRE(acquire(http, "job/leader", holder, "h") == "true");
    auto const idx = kv_index(http, "job/leader");

    // The contender blocks on the key (losers never poll) ...
    background_request watch(agent.port(), "GET", "/v1/kv/job/leader?index=" + std::to_string(idx) + "&wait=10s");
    watch.wait_written();
    // ... the holder releases cleanly ...
    auto const t_release = steady::now();
    BOOST_REQUIRE(release(http, "job/leader", holder, "h") == "true");
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(consul_index(r) > idx);
    json::object const e = as_object(as_array(parse(r))[0]);
    BOOST_TEST(!has_session(e), e);
    // ... and the contender's acquire succeeds right away: no lock-delay on ?release.
    BOOST_TEST(acquire(http, "job/leader", contender, "c") == "true");
    BOOST_TEST_MESSAGE("hand-off after clean release: " << show_ms(ms(steady::now() - t_release)));
    auto e2 = kv_get(http, "job/leader");
    BOOST_REQUIRE(e2);
    BOOST_TEST(u64(*e2, "LockIndex") == 2u);
}

BOOST_AUTO_TEST_CASE(behavior_delete_deletes_and_delays) {
    std::string holder = session_create(http, R"({"Behavior":"delete","LockDelay":"1s"})");
    std::string contender = session_create(http);
    BOOST_REQUIRE(acquire(http, "job/leader", holder, "h") == "true");
    auto const idx = kv_index(http, "job/leader");

    background_request watch(agent.port(), "GET", "/v1/kv/job/leader?index=" + std::to_string(idx) + "&wait=10s");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/session/destroy/" + holder), 200u);
    auto r = watch.get();
    CHECK_STATUS(r, 404u);
    BOOST_TEST(consul_index(r) > idx);
    BOOST_TEST(!kv_get(http, "job/leader").has_value());
    // The lock-delay applies to the deleted key too.
    BOOST_TEST(acquire(http, "job/leader", contender, "c") == "false");
}

BOOST_AUTO_TEST_CASE(zero_lock_delay_means_none) {
    std::string holder = session_create(http, R"({"LockDelay":"0s"})");
    std::string contender = session_create(http);
    BOOST_REQUIRE(acquire(http, "job/leader", holder, "h") == "true");
    REQUIRE_STATUS(http.put("/v1/session/destroy/" + holder), 200u);
    BOOST_TEST(acquire(http, "job/leader", contender, "c") == "true");
}

BOOST_AUTO_TEST_CASE(ttl_lapses_at_twice_the_ttl) {
    std::string other = session_create(http);
    auto const t_create = steady::now();
    std::string id = session_create(http, R"({"Name":"short","TTL":"200ms","LockDelay":"1s"})");
    BOOST_REQUIRE(acquire(http, "job/leader", id, "h") == "true");
    auto info = http.get("/v1/session/info/" + id);
    REQUIRE_STATUS(info, 200u);
    auto const n = consul_index(info);

    // Past the TTL (but before 2xTTL) the session is still there: the 250 ms wait runs out unchanged.
    auto r1 = await_session_change(http, id, n, "250ms");
    auto const t1 = steady::now();
    BOOST_TEST(ms(t1 - t_create) >= 250.0);
    BOOST_TEST(as_array(parse(r1)).size() == 1u, "session gone before 2xTTL, at " << ms(t1 - t_create) << " ms");
    BOOST_TEST(consul_index(r1) == n);

    // Then it lapses at 2xTTL = 400 ms after create.
    auto r2 = await_session_change(http, id, n, "5s");
    auto const t2 = steady::now();
    double const lapse = ms(t2 - t_create);
    BOOST_TEST_MESSAGE("TTL 200ms: session invalidated " << show_ms(lapse) << " after create");
    BOOST_TEST(trim(r2.body) == "[]");
    BOOST_TEST(lapse >= 400.0);
    BOOST_TEST(lapse < 700.0);

    // The lapse released the key and applied the lock-delay.
    auto e = kv_get(http, "job/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(!has_session(*e), *e);
    BOOST_TEST(acquire(http, "job/leader", other, "o") == "false");
    CHECK_STATUS(http.put("/v1/session/renew/" + id), 404u);
}

BOOST_AUTO_TEST_CASE(renew_pushes_expiry_to_twice_the_ttl_from_now) {
    std::string id = session_create(http, R"({"TTL":"300ms"})");
    auto info = http.get("/v1/session/info/" + id);
    REQUIRE_STATUS(info, 200u);
    auto const n = consul_index(info);

    auto r1 = await_session_change(http, id, n, "300ms");  // nothing happens for 300 ms
    BOOST_REQUIRE_EQUAL(as_array(parse(r1)).size(), 1u);

    auto const t_renew = steady::now();
    REQUIRE_STATUS(http.put("/v1/session/renew/" + id), 200u);
    auto r2 = await_session_change(http, id, n, "5s");
    double const after = ms(steady::now() - t_renew);
    BOOST_TEST_MESSAGE("TTL 300ms renewed once: invalidated " << show_ms(after) << " after the renew");
    BOOST_TEST(trim(r2.body) == "[]");
    BOOST_TEST(after >= 600.0);
    BOOST_TEST(after < 900.0);
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// §4 Checks and nodes bound to sessions
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(checks, agent_fixture)

namespace {

void register_ttl_check(http_client& http, std::string const& id, std::string const& ttl) {
    auto r = http.put("/v1/agent/check/register", R"({"ID":")" + id + R"(","Name":")" + id + R"(","TTL":")" + ttl +
                                                       R"("})");
    REQUIRE_STATUS(r, 200u);
}

std::string check_status(http_client& http, std::string const& id) {
    auto r = http.get("/v1/agent/checks");
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    auto const* c = as_object(v).if_contains(id);
    BOOST_REQUIRE_MESSAGE(c, "check " << id << " not in /v1/agent/checks: " << v);
    return str(as_object(*c), "Status");
}

}  // namespace

BOOST_AUTO_TEST_CASE(failing_check_invalidates_session_with_lock_delay) {
    register_ttl_check(http, "c1", "10s");
    REQUIRE_STATUS(http.put("/v1/agent/check/pass/c1"), 200u);
    BOOST_TEST(check_status(http, "c1") == "passing");

    std::string bound = session_create(http, R"({"Name":"bound","LockDelay":"1s","NodeChecks":["serfHealth","c1"]})");
    std::string other = session_create(http);
    BOOST_REQUIRE(acquire(http, "job/leader", bound, "b") == "true");
    auto const idx = kv_index(http, "job/leader");

    // Warning is not critical: the session survives.
    auto const sessions_before = session_table(http);
    REQUIRE_STATUS(http.put("/v1/agent/check/warn/c1"), 200u);
    BOOST_TEST(check_status(http, "c1") == "warning");
    BOOST_TEST((session_table(http) == sessions_before));
    BOOST_TEST(session_info(http, bound).has_value());

    background_request watch(agent.port(), "GET", "/v1/kv/job/leader?index=" + std::to_string(idx) + "&wait=10s");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/agent/check/fail/c1"), 200u);
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);
    json::object const e = as_object(as_array(parse(r))[0]);
    BOOST_TEST(!has_session(e), e);
    BOOST_TEST(u64(e, "LockIndex") == 1u);

    BOOST_TEST(check_status(http, "c1") == "critical");
    BOOST_TEST(!session_info(http, bound).has_value());
    BOOST_TEST(acquire(http, "job/leader", other, "o") == "false");  // lock-delay applies
}

BOOST_AUTO_TEST_CASE(check_ttl_lapse_invalidates_session) {
    register_ttl_check(http, "c2", "200ms");
    auto const t_pass = steady::now();
    REQUIRE_STATUS(http.put("/v1/agent/check/pass/c2"), 200u);
    std::string bound = session_create(http, R"({"NodeChecks":["c2"]})");
    auto info = http.get("/v1/session/info/" + bound);
    REQUIRE_STATUS(info, 200u);
    BOOST_REQUIRE_EQUAL(as_array(parse(info)).size(), 1u);

    auto r = await_session_change(http, bound, consul_index(info), "5s");
    double const after = ms(steady::now() - t_pass);
    BOOST_TEST_MESSAGE("check TTL 200ms: session invalidated " << show_ms(after) << " after the pass");
    BOOST_TEST(trim(r.body) == "[]");
    BOOST_TEST(after >= 200.0);
    BOOST_TEST(after < 1000.0);
    BOOST_TEST(check_status(http, "c2") == "critical");
}

BOOST_AUTO_TEST_CASE(update_and_deregister) {
    register_ttl_check(http, "c3", "10s");
    auto u = http.put("/v1/agent/check/update/c3", R"({"Status":"passing","Output":"all good"})");
    REQUIRE_STATUS(u, 200u);
    BOOST_TEST(check_status(http, "c3") == "passing");

    std::string bound = session_create(http, R"({"NodeChecks":["serfHealth","c3"]})");
    auto info = http.get("/v1/session/info/" + bound);
    REQUIRE_STATUS(info, 200u);
    REQUIRE_STATUS(http.put("/v1/agent/check/deregister/c3"), 200u);
    auto r = await_session_change(http, bound, consul_index(info), "5s");
    BOOST_TEST(trim(r.body) == "[]");

}

BOOST_AUTO_TEST_CASE(session_create_checks_validation) {
    auto const before = session_table(http);
    auto r = http.put("/v1/session/create", R"({"NodeChecks":["nope"]})");
    CHECK_STATUS(r, 500u);
    BOOST_TEST(r.body.find("Missing check 'nope' registration") != std::string::npos, "body '" << r.body << "'");

    register_ttl_check(http, "c4", "10s");  // TTL checks start critical
    BOOST_TEST(check_status(http, "c4") == "critical");
    r = http.put("/v1/session/create", R"({"NodeChecks":["c4"]})");
    CHECK_STATUS(r, 500u);
    BOOST_TEST(r.body.find("Check 'c4' is in critical state") != std::string::npos, "body '" << r.body << "'");

    r = http.put("/v1/session/create", R"({"Node":"unregistered-node","NodeChecks":[]})");
    CHECK_STATUS(r, 500u);
    BOOST_TEST(r.body.find("Missing node registration") != std::string::npos, "body '" << r.body << "'");

    BOOST_TEST((session_table(http) == before));
}

BOOST_AUTO_TEST_CASE(catalog_deregister_invalidates_node_sessions) {
    auto reg = http.put("/v1/catalog/register", R"({"Node":"n2","Address":"10.0.0.2"})");
    REQUIRE_STATUS(reg, 200u);
    BOOST_TEST(trim(reg.body) == "true");
    auto nodes_of = [&] {
        auto r = http.get("/v1/catalog/nodes");
        REQUIRE_STATUS(r, 200u);
        std::vector<std::string> names;
        auto const v = parse(r);
        for (auto const& n : as_array(v)) names.push_back(str(as_object(n), "Node"));
        std::sort(names.begin(), names.end());
        return names;
    };
    BOOST_TEST(nodes_of() == (std::vector<std::string>{"itest-node", "n2"}), boost::test_tools::per_element());

    std::string on_n2 = session_create(http, R"({"Node":"n2","NodeChecks":[],"LockDelay":"1s"})");
    std::string local = session_create(http);
    BOOST_REQUIRE(acquire(http, "job/leader", on_n2, "n2") == "true");
    auto info = http.get("/v1/session/info/" + on_n2);
    REQUIRE_STATUS(info, 200u);
    BOOST_TEST(str(as_object(as_array(parse(info))[0]), "Node") == "n2");

    auto dereg = http.put("/v1/catalog/deregister", R"({"Node":"n2"})");
    REQUIRE_STATUS(dereg, 200u);
    BOOST_TEST(trim(dereg.body) == "true");
    auto r = await_session_change(http, on_n2, consul_index(info), "5s");
    BOOST_TEST(trim(r.body) == "[]");

    auto e = kv_get(http, "job/leader");
    BOOST_REQUIRE(e);
    BOOST_TEST(!has_session(*e), *e);
    BOOST_TEST(acquire(http, "job/leader", local, "l") == "false");  // lock-delay
    BOOST_TEST(session_info(http, local).has_value());
    BOOST_TEST(nodes_of() == std::vector<std::string>{"itest-node"}, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// §6 Blocking queries
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(blocking, agent_fixture)

BOOST_AUTO_TEST_CASE(put_wakes_a_blocked_get_promptly) {
    REQUIRE_STATUS(http.put("/v1/kv/watched", "before"), 200u);
    auto const idx = kv_index(http, "watched");

    background_request watch(agent.port(), "GET", "/v1/kv/watched?index=" + std::to_string(idx) + "&wait=5s");
    watch.wait_written();
    auto const t_put = steady::now();
    REQUIRE_STATUS(http.put("/v1/kv/watched", "after"), 200u);
    auto r = watch.get();
    double const latency = ms(watch.returned_at() - t_put);
    BOOST_TEST_MESSAGE("blocking GET returned " << show_ms(latency) << " after the PUT was sent");

    REQUIRE_STATUS(r, 200u);
    BOOST_TEST((watch.returned_at() >= t_put), "the blocking GET returned before the PUT: it did not block");
    json::object const e = as_object(as_array(parse(r))[0]);
    BOOST_TEST(str(e, "Value") == base64("after"));
    BOOST_TEST(consul_index(r) > idx);
    BOOST_TEST(consul_index(r) == u64(e, "ModifyIndex"));
    BOOST_TEST(latency < 1000.0);
}

// A transaction that hands a lock to another session lets the blocking
// queries it woke answer first (the new holder waits in one of them); an
// acquire or a release answers its writer first. The order is read from the
// kernel's receive timestamps of the two answers (SO_TIMESTAMPNS), not from
// when this thread happened to look.
BOOST_AUTO_TEST_CASE(a_handover_answers_the_queries_it_woke_first_other_writes_their_writer) {
    auto const a = session_create(http);
    auto const b = session_create(http);
    auto const parked = [&] {
        auto r = http.get("/v1/agent/metrics?format=prometheus");
        return r.body.find("\ntenure_blocking_queries 1\n") != std::string::npos;
    };
    // Parks a GET of the key, sends `write` on another connection; the two
    // answers, and how far the woken one arrived ahead of the write's.
    auto const race = [&](std::string const& write) {
        auto const idx = kv_index(http, "handed");
        stamped_socket watch(agent.port());
        stamped_socket writer(agent.port());
        watch.send("GET /v1/kv/handed?index=" + std::to_string(idx) + "&wait=10s HTTP/1.1\r\nHost: a\r\n\r\n");
        auto const deadline = steady::now() + 10s;
        while (!parked() && steady::now() < deadline) std::this_thread::sleep_for(1ms);
        BOOST_REQUIRE_MESSAGE(parked(), "the GET did not park");
        writer.send(write);
        auto const written = writer.receive();
        auto const woken = watch.receive();
        BOOST_TEST(written.bytes.rfind("HTTP/1.1 200", 0) == 0u, written.bytes);
        BOOST_TEST(woken.bytes.rfind("HTTP/1.1 200", 0) == 0u, woken.bytes);
        return std::pair{woken.bytes, std::chrono::duration<double, std::micro>(written.at - woken.at).count()};
    };
    auto const put = [](std::string const& target) {
        return "PUT " + target + " HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nv";
    };

    auto [taken, taken_ahead_us] = race(put("/v1/kv/handed?acquire=" + a));
    BOOST_TEST(taken.find(a) != std::string::npos, taken);
    BOOST_TEST(taken_ahead_us < 0.0, "an acquire's woken query was answered " << taken_ahead_us
                                                                              << " us before the acquire itself");

    auto [freed, freed_ahead_us] = race(put("/v1/kv/handed?release=" + a));
    BOOST_TEST(freed.find("\"Session\"") == std::string::npos, freed);
    BOOST_TEST(freed_ahead_us < 0.0, "a release's woken query was answered " << freed_ahead_us
                                                                            << " us before the release itself");

    // A handover: one transaction, a's unlock and b's lock.
    REQUIRE_STATUS(http.put("/v1/kv/handed?acquire=" + a, "v"), 200u);
    std::string const txn =
        R"([{"KV":{"Verb":"unlock","Key":"handed","Session":")" + a + R"("}},)" +
        R"({"KV":{"Verb":"lock","Key":"handed","Value":"dg==","Session":")" + b + R"("}}])";
    auto [handed, handed_ahead_us] = race("PUT /v1/txn HTTP/1.1\r\nHost: a\r\nContent-Length: " +
                                          std::to_string(txn.size()) + "\r\n\r\n" + txn);
    BOOST_TEST(handed.find(b) != std::string::npos, handed);
    BOOST_TEST(handed_ahead_us > 0.0, "a handover's woken query was answered " << -handed_ahead_us
                                                                              << " us after the handover itself");
}

BOOST_AUTO_TEST_CASE(unrelated_put_does_not_wake) {
    REQUIRE_STATUS(http.put("/v1/kv/watched", "v"), 200u);
    auto const idx = kv_index(http, "watched");

    background_request watch(agent.port(), "GET", "/v1/kv/watched?index=" + std::to_string(idx) + "&wait=300ms");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/kv/unrelated", "x"), 200u);
    REQUIRE_STATUS(http.put("/v1/kv/watched-not", "x"), 200u);  // a key with the watched key as prefix
    auto r = watch.get();
    double const blocked = ms(watch.returned_at() - watch.written_at());
    BOOST_TEST_MESSAGE("blocking GET with wait=300ms returned after " << show_ms(blocked));
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(consul_index(r) == idx);
    BOOST_TEST(str(as_object(as_array(parse(r))[0]), "Value") == base64("v"));
    BOOST_TEST(blocked >= 300.0);
    BOOST_TEST(blocked < 300.0 + 300.0 / 16 + 500.0);
}

BOOST_AUTO_TEST_CASE(missing_key_wakes_on_its_creation_only) {
    auto const idx = kv_index(http, "later");  // 404's index
    background_request watch(agent.port(), "GET", "/v1/kv/later?index=" + std::to_string(idx) + "&wait=5s");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/kv/elsewhere", "x"), 200u);
    REQUIRE_STATUS(http.put("/v1/kv/later", "here"), 200u);
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);  // a wake-up by the unrelated write would have answered 404
    json::object const e = as_object(as_array(parse(r))[0]);
    BOOST_TEST(str(e, "Value") == base64("here"));
    BOOST_TEST(consul_index(r) == u64(e, "ModifyIndex"));
}

BOOST_AUTO_TEST_CASE(recurse_wakes_on_a_write_under_the_prefix) {
    REQUIRE_STATUS(http.put("/v1/kv/svc/a", "1"), 200u);
    auto r0 = http.get("/v1/kv/svc/?recurse");
    REQUIRE_STATUS(r0, 200u);
    auto const idx = consul_index(r0);

    background_request watch(agent.port(), "GET", "/v1/kv/svc/?recurse&index=" + std::to_string(idx) + "&wait=5s");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/kv/other/x", "x"), 200u);
    REQUIRE_STATUS(http.put("/v1/kv/svc/b", "2"), 200u);
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(as_array(parse(r)).size() == 2u);
    BOOST_TEST(consul_index(r) > idx);
}

BOOST_AUTO_TEST_CASE(session_list_wakes_on_create) {
    auto [idx, count] = session_table(http);
    BOOST_REQUIRE_EQUAL(count, 0u);
    background_request watch(agent.port(), "GET", "/v1/session/list?index=" + std::to_string(idx) + "&wait=5s");
    watch.wait_written();
    auto const t = steady::now();
    std::string id = session_create(http);
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(ms(watch.returned_at() - t) < 1000.0);
    auto v = parse(r);
    BOOST_REQUIRE_EQUAL(as_array(v).size(), 1u);
    BOOST_TEST(str(as_object(as_array(v)[0]), "ID") == id);
    BOOST_TEST(consul_index(r) > idx);
}

BOOST_AUTO_TEST_CASE(no_index_or_zero_index_does_not_block) {
    REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
    for (char const* q : {"?wait=5s", "?index=0&wait=5s"}) {
        BOOST_TEST_CONTEXT(q) {
            auto const t = steady::now();
            auto r = http.get(std::string("/v1/kv/k") + q);
            REQUIRE_STATUS(r, 200u);
            BOOST_TEST(ms(steady::now() - t) < 1000.0);
        }
    }
}

BOOST_AUTO_TEST_CASE(index_ahead_of_the_store_waits_then_returns_current) {
    REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
    auto const idx = kv_index(http, "k");
    auto const t = steady::now();
    auto r = http.get("/v1/kv/k?index=" + std::to_string(idx + 1000) + "&wait=300ms");
    double const blocked = ms(steady::now() - t);
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(blocked >= 300.0);
    BOOST_TEST(consul_index(r) == idx);  // the current (smaller) index; clients must reset
}

BOOST_AUTO_TEST_CASE(long_wait_is_accepted_and_still_wakes) {
    // wait is capped at 10 min, which a test cannot observe; an hour is accepted
    // (not an error) and the query still wakes on a write.
    REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
    auto const idx = kv_index(http, "k");
    background_request watch(agent.port(), "GET", "/v1/kv/k?index=" + std::to_string(idx) + "&wait=1h");
    watch.wait_written();
    REQUIRE_STATUS(http.put("/v1/kv/k", "w"), 200u);
    auto r = watch.get();
    REQUIRE_STATUS(r, 200u);
    BOOST_TEST(consul_index(r) > idx);
}

BOOST_AUTO_TEST_CASE(bad_wait_or_index_is_400) {
    REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
    auto const idx = kv_index(http, "k");
    struct bad {
        std::string target;
        std::string text;
    };
    bad const cases[] = {
        {"/v1/kv/k?index=1&wait=xyz", "Invalid wait time"},
        {"/v1/kv/k?wait=10", "Invalid wait time"},  // no unit
        {"/v1/kv/k?index=abc", "Invalid index"},
        {"/v1/kv/k?index=-1", "Invalid index"},
        {"/v1/session/list?index=abc", "Invalid index"},
        {"/v1/session/list?index=1&wait=xyz", "Invalid wait time"},
    };
    for (auto const& c : cases) {
        BOOST_TEST_CONTEXT(c.target) {
            auto r = http.get(c.target);
            CHECK_STATUS(r, 400u);
            BOOST_TEST(trim(r.body) == c.text);
        }
    }
    BOOST_TEST(kv_index(http, "k") == idx);
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// /v1/txn
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(txn, agent_fixture)

BOOST_AUTO_TEST_CASE(success_applies_all_at_one_index) {
    auto r = http.put("/v1/txn", R"([
        {"KV":{"Verb":"set","Key":"t/a","Value":")" + base64("a") + R"("}},
        {"KV":{"Verb":"set","Key":"t/b","Value":")" + base64("b") + R"(","Flags":7}},
        {"KV":{"Verb":"get","Key":"t/a"}}
    ])");
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    auto const& o = as_object(v);
    BOOST_REQUIRE(o.contains("Results"));
    auto const& results = as_array(o.at("Results"));
    BOOST_REQUIRE_EQUAL(results.size(), 3u);
    auto const& got = as_object(as_object(results[2]).at("KV"));
    BOOST_TEST(str(got, "Key") == "t/a");
    BOOST_TEST(str(got, "Value") == base64("a"));
    BOOST_TEST((!o.contains("Errors") || o.at("Errors").is_null() || o.at("Errors").as_array().empty()));

    auto a = kv_get(http, "t/a");
    auto b = kv_get(http, "t/b");
    BOOST_REQUIRE(a);
    BOOST_REQUIRE(b);
    BOOST_TEST(u64(*a, "ModifyIndex") == u64(*b, "ModifyIndex"));
    BOOST_TEST(u64(*b, "Flags") == 7u);
    BOOST_TEST(str(*b, "Value") == base64("b"));
}

BOOST_AUTO_TEST_CASE(failure_is_409_and_applies_nothing) {
    REQUIRE_STATUS(http.put("/v1/kv/t/a", "a"), 200u);
    auto const before = http.get("/v1/kv/t/?recurse");
    REQUIRE_STATUS(before, 200u);

    auto r = http.put("/v1/txn", R"([
        {"KV":{"Verb":"set","Key":"t/c","Value":")" + base64("c") + R"("}},
        {"KV":{"Verb":"cas","Key":"t/a","Value":")" + base64("x") + R"(","Index":999999}}
    ])");
    CHECK_STATUS(r, 409u);
    auto v = parse(r);
    auto const& o = as_object(v);
    BOOST_REQUIRE(o.contains("Errors"));
    auto const& errors = as_array(o.at("Errors"));
    BOOST_REQUIRE(!errors.empty());
    BOOST_TEST(u64(as_object(errors[0]), "OpIndex") == 1u);
    BOOST_TEST(!str(as_object(errors[0]), "What").empty());
    BOOST_TEST((!o.contains("Results") || o.at("Results").is_null() || o.at("Results").as_array().empty()));

    CHECK_STATUS(http.get("/v1/kv/t/c"), 404u);
    auto after = http.get("/v1/kv/t/?recurse");
    REQUIRE_STATUS(after, 200u);
    BOOST_TEST(after.body == before.body);
    BOOST_TEST(consul_index(after) == consul_index(before));
}

BOOST_AUTO_TEST_SUITE_END()

// =============================================================================
// Agent endpoints, robustness, process contract
// =============================================================================
BOOST_FIXTURE_TEST_SUITE(agent, agent_fixture)

BOOST_AUTO_TEST_CASE(self_reports_node_and_datacenter) {
    auto r = http.get("/v1/agent/self");
    REQUIRE_STATUS(r, 200u);
    auto v = parse(r);
    auto const& o = as_object(v);
    for (auto const& kv : o) BOOST_TEST(kv.value().is_object(), "top-level " << kv.key() << " is not an object");
    BOOST_REQUIRE(o.contains("Config"));
    auto const& config = as_object(o.at("Config"));
    BOOST_TEST(str(config, "NodeName") == "itest-node");
    BOOST_TEST(str(config, "Datacenter") == "itest-dc");
}

BOOST_AUTO_TEST_CASE(status_leader_and_catalog_nodes) {
    auto l = http.get("/v1/status/leader");
    REQUIRE_STATUS(l, 200u);
    auto lv = parse(l);
    BOOST_TEST((lv.is_string() && !lv.get_string().empty()), "leader: " << l.body);

    auto n = http.get("/v1/catalog/nodes");
    REQUIRE_STATUS(n, 200u);
    bool found = false;
    auto const nodes = parse(n);
    for (auto const& node : as_array(nodes)) found = found || str(as_object(node), "Node") == "itest-node";
    BOOST_TEST(found, "own node missing from /v1/catalog/nodes: " << n.body);
    BOOST_TEST(consul_index(n) >= 1u);
}

BOOST_AUTO_TEST_CASE(malformed_http_does_not_crash_or_change_state) {
    REQUIRE_STATUS(http.put("/v1/kv/guard", "g"), 200u);
    std::string const sid = session_create(http);
    auto const kv_before = http.get("/v1/kv/?recurse");
    REQUIRE_STATUS(kv_before, 200u);
    auto const sessions_before = session_table(http);

    static char const binary_garbage[] = "\x00\x01\x02\xff\xfe\x80 garbage \r\n\r\n";
    std::string const garbage[] = {
        std::string(binary_garbage, sizeof binary_garbage - 1),
        "NOT-A-METHOD-\x01 / HTTP/1.1\r\n\r\n",
        "PUT /v1/kv/x HTTP/1.x\r\nHost: a\r\n\r\n",
        "PUT /v1/kv/x HTTP/1.1\r\nHost a\r\nno colon here\r\n\r\nbody",
        "PUT /v1/kv/x HTTP/1.1\r\nHost: a\r\nContent-Length: zz\r\n\r\nbody",
        "PUT /v1/kv/x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nhello\r\n0\r\n\r\n",
        "PUT /v1/kv/x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        "PUT /v1/session/create HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\n{\"Name\":",  // then hang up
        "GET /v1/kv/x HTTP/1.1\r\nHost: a\r\nX-Long: " + std::string(1 << 20, 'A'),  // endless header
    };
    for (std::size_t i = 0; i < std::size(garbage); ++i) {
        BOOST_TEST_CONTEXT("garbage #" << i) {
            bool const hang_up = garbage[i].find("Content-Length: 100") != std::string::npos;
            raw_exchange ex = http.send_raw(garbage[i], hang_up ? 300ms : 5000ms);
            if (!hang_up) {
                BOOST_TEST(ex.closed_by_peer, "the agent kept a broken connection open; it sent '"
                                                  << ex.received.substr(0, 200) << "'");
                BOOST_TEST((ex.received.empty() || ex.received.rfind("HTTP/1.1 4", 0) == 0),
                           "unexpected answer '" << ex.received.substr(0, 200) << "'");
            }
            BOOST_REQUIRE_MESSAGE(agent.running(), "the agent died");
            auto self = http.get("/v1/agent/self");
            CHECK_STATUS(self, 200u);
        }
    }

    CHECK_STATUS(http.get("/v1/kv/x"), 404u);
    auto const kv_after = http.get("/v1/kv/?recurse");
    REQUIRE_STATUS(kv_after, 200u);
    BOOST_TEST(kv_after.body == kv_before.body);
    BOOST_TEST(consul_index(kv_after) == consul_index(kv_before));
    BOOST_TEST((session_table(http) == sessions_before));
    BOOST_TEST(session_info(http, sid).has_value());
}

// The agent renders each answer's head itself (one buffer, not Beast's
// serializer): the framing must be exact, a HEAD answer must carry no body,
// and an HTTP/1.0 client gets its connection closed unless it asks.
BOOST_AUTO_TEST_CASE(answers_are_framed_exactly) {
    REQUIRE_STATUS(http.put("/v1/kv/framed", "hello"), 200u);
    auto const split = [](std::string const& raw) {
        auto const end = raw.find("\r\n\r\n");
        BOOST_REQUIRE(end != std::string::npos);
        return std::pair{raw.substr(0, end + 2), raw.substr(end + 4)};
    };

    auto get = http.send_raw("GET /v1/kv/framed?raw HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 5000ms);
    BOOST_TEST(get.closed_by_peer);
    auto [head, body] = split(get.received);
    BOOST_TEST(head.rfind("HTTP/1.1 200 OK\r\n", 0) == 0u, head);
    BOOST_TEST(head.find("\r\nContent-Length: 5\r\n") != std::string::npos, head);
    BOOST_TEST(head.find("\r\nX-Consul-Index: ") != std::string::npos, head);
    BOOST_TEST(head.find("\r\nDate: ") != std::string::npos, head);
    BOOST_TEST(body == "hello");

    auto head_only = http.send_raw("HEAD /v1/kv/framed HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", 5000ms);
    BOOST_TEST(head_only.closed_by_peer);
    auto [hhead, hbody] = split(head_only.received);
    BOOST_TEST(hhead.rfind("HTTP/1.1 405 Method Not Allowed\r\n", 0) == 0u, hhead);
    BOOST_TEST(hhead.find("\r\nContent-Length: ") != std::string::npos, hhead);
    BOOST_TEST(hbody.empty(), "a HEAD answer carried a body: '" << hbody << "'");

    auto old = http.send_raw("GET /v1/kv/framed?raw HTTP/1.0\r\n\r\n", 5000ms);
    BOOST_TEST(old.closed_by_peer);
    auto [ohead, obody] = split(old.received);
    BOOST_TEST(ohead.find("\r\nConnection: close\r\n") != std::string::npos, ohead);
    BOOST_TEST(obody == "hello");

    // Two requests in one write (pipelined): two answers, in order.
    auto two = http.send_raw("GET /v1/kv/framed?raw HTTP/1.1\r\nHost: a\r\n\r\n"
                             "GET /v1/kv/missing HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                             5000ms);
    BOOST_TEST(two.closed_by_peer);
    auto const second = two.received.find("HTTP/1.1 404");
    BOOST_TEST(two.received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0u, two.received);
    BOOST_REQUIRE(second != std::string::npos);
    BOOST_TEST(two.received.substr(second - 5, 5) == "hello");

    // Bodies in the same write as the next request (the agent parses a body
    // that came with its header at once): each body ends where its framing
    // says, and the request after it is read intact.
    auto bodies = http.send_raw("PUT /v1/kv/piped/a HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\none"
                                "PUT /v1/kv/piped/b HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                                "3\r\ntwo\r\n0\r\n\r\n"
                                "GET /v1/kv/piped/a?raw HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
                                5000ms);
    BOOST_TEST(bodies.closed_by_peer);
    BOOST_TEST(bodies.received.rfind("HTTP/1.1 200 OK\r\n", 0) == 0u, bodies.received);
    BOOST_TEST(bodies.received.ends_with("\r\n\r\none"), bodies.received);
    auto b = http.get("/v1/kv/piped/b?raw");
    REQUIRE_STATUS(b, 200u);
    BOOST_TEST(b.body == "two");
}

BOOST_AUTO_TEST_CASE(keep_alive_serves_many_requests_on_one_connection) {
    // The fixture's client keeps one connection; a hundred requests must not need a reconnect.
    for (int i = 0; i < 100; ++i) {
        auto r = http.put("/v1/kv/ka/" + std::to_string(i % 10), std::to_string(i));
        REQUIRE_STATUS(r, 200u);
        BOOST_REQUIRE(r.header("Connection").value_or("") != "close");
    }
    auto keys = http.get("/v1/kv/ka/?keys");
    REQUIRE_STATUS(keys, 200u);
    BOOST_TEST(strings(parse(keys)).size() == 10u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(process)

BOOST_AUTO_TEST_CASE(sigterm_exits_zero_after_exactly_one_stdout_line) {
    agent_process agent;
    BOOST_TEST(agent.banner() == "tenure agent listening on http://127.0.0.1:" + std::to_string(agent.port()));
    {
        http_client http("127.0.0.1", agent.port());
        REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
    }
    auto st = agent.stop(SIGTERM, 5000ms);
    BOOST_REQUIRE_MESSAGE(st, "the agent did not exit within 5 s of SIGTERM");
    BOOST_TEST(WIFEXITED(*st), "the agent was killed by signal " << (WIFSIGNALED(*st) ? WTERMSIG(*st) : 0));
    BOOST_TEST((WIFEXITED(*st) ? WEXITSTATUS(*st) : -1) == 0);
    BOOST_TEST(agent.remaining_stdout() == "", "stdout must hold exactly one line");
}

BOOST_AUTO_TEST_CASE(sigint_exits_zero) {
    agent_process agent;
    auto st = agent.stop(SIGINT, 5000ms);
    BOOST_REQUIRE_MESSAGE(st, "the agent did not exit within 5 s of SIGINT");
    BOOST_TEST(WIFEXITED(*st));
    BOOST_TEST((WIFEXITED(*st) ? WEXITSTATUS(*st) : -1) == 0);
}

BOOST_AUTO_TEST_CASE(busy_poll_serves_wakes_and_exits_zero) {
    // -busy-poll keeps the agent polling between requests: it must still
    // answer, wake a parked query when its key changes, and stop on SIGTERM
    // whether it is spinning or asleep.
    tenure::itest::agent_options opts;
    opts.extra_args = {"-busy-poll=200us"};
    agent_process agent(opts);
    http_client http("127.0.0.1", agent.port());
    REQUIRE_STATUS(http.put("/v1/kv/bp", "1"), 200u);
    std::uint64_t const idx = kv_index(http, "bp");
    background_request parked(agent.port(), "GET", "/v1/kv/bp?index=" + std::to_string(idx) + "&wait=10m", {}, 20s);
    parked.wait_written();
    REQUIRE_STATUS(http.put("/v1/kv/bp", "2"), 200u);
    auto const woken = parked.get();
    REQUIRE_STATUS(woken, 200u);
    BOOST_TEST(woken.body.find("\"Value\":\"Mg==\"") != std::string::npos, woken.body);  // "2"
    auto st = agent.stop(SIGTERM, 5000ms);
    BOOST_REQUIRE_MESSAGE(st, "the agent did not exit within 5 s of SIGTERM");
    BOOST_TEST((WIFEXITED(*st) ? WEXITSTATUS(*st) : -1) == 0);
}

BOOST_AUTO_TEST_CASE(bad_busy_poll_is_refused_at_start) {
    for (std::string const bad : {"-busy-poll=2s", "-busy-poll=-1ms", "-busy-poll=50"}) {
        tenure::itest::agent_options opts;
        opts.extra_args = {bad};
        try {
            agent_process agent(opts);
            BOOST_ERROR(bad << " was accepted");
        } catch (std::runtime_error const& e) {
            std::string const what = e.what();
            BOOST_TEST(what.find("invalid value for -busy-poll") != std::string::npos, what);
        }
    }
}

BOOST_AUTO_TEST_CASE(sigterm_with_parked_blocking_queries_exits_zero) {
    agent_process agent;
    std::uint64_t idx = 0;
    {
        http_client http("127.0.0.1", agent.port());
        REQUIRE_STATUS(http.put("/v1/kv/k", "v"), 200u);
        idx = kv_index(http, "k");
    }
    background_request parked(agent.port(), "GET", "/v1/kv/k?index=" + std::to_string(idx) + "&wait=10m", {}, 20s);
    parked.wait_written();
    auto const t = steady::now();
    auto st = agent.stop(SIGTERM, 5000ms);
    BOOST_REQUIRE_MESSAGE(st, "the agent did not exit within 5 s of SIGTERM with a parked query");
    BOOST_TEST_MESSAGE("exit with a parked blocking query took " << show_ms(ms(steady::now() - t)));
    BOOST_TEST(WIFEXITED(*st));
    BOOST_TEST((WIFEXITED(*st) ? WEXITSTATUS(*st) : -1) == 0);
    // The parked client sees its connection end (an error or an answer), not a hang.
    try {
        (void)parked.get();
    } catch (http_error const&) {
    }
}

BOOST_AUTO_TEST_SUITE_END()
