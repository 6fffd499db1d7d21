// The embedded agent's I/O shell: a Beast HTTP/1.1 server on C++20 coroutines
// around the socket-free state machine and HTTP API.
//
// Everything runs on the one executor handed to the agent. Coroutines:
//   accept_loop  - accepts, enforces max_connections, spawns serve()
//   tick_loop    - one steady_timer armed at state_machine::next_deadline()
//   serve        - one per connection: header, check_header, body, handle,
//                  park blocking queries, write, keep-alive
// The connection objects are owned by their serve() frames and listed in the
// agent so that stop() can close them.
#include <tenure/agent.hpp>
#include "agent/agent_access.hpp"
#include "agent/acl.hpp"
#include "agent/http_api.hpp"
#include "agent/metrics.hpp"
#include "agent/persist.hpp"
#include "agent/state.hpp"
#include "agent/log.hpp"
#include "net/wire.hpp"

#include "agent/tls.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_suffix.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/serializer.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/system/system_error.hpp>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <exception>
#include <fstream>
#include <iterator>
#include <limits>
#include <list>
#include <optional>
#include <string>
#include <string_view>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>

namespace tenure {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ag = detail::agent;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

// Waiting for (and reading) a request header, including keep-alive idle time.
constexpr auto idle_timeout = 5min;
constexpr auto body_timeout = 60s;
constexpr auto handshake_timeout = 10s;  // TLS
constexpr auto write_timeout = 60s;
// After refusing a request whose body was not read: how long, and how much,
// to drain before closing, so the peer reads our response instead of a reset.
constexpr auto linger_timeout = 1s;
constexpr std::size_t linger_max_bytes = 1 << 20;
constexpr auto accept_retry_delay = 50ms;
constexpr auto warn_interval = 1s;

constexpr auto awaitable_tuple = asio::as_tuple(asio::use_awaitable);

// A listener's or a peer's address: TCP or a Unix domain socket.
using endpoint = ag::agent_stream::protocol::endpoint;
using acceptor_type = asio::basic_socket_acceptor<ag::agent_stream::protocol>;

std::string endpoint_string(tcp::endpoint const& ep) {
    auto const a = ep.address();
    std::string s = a.is_v6() ? "[" + a.to_string() + "]" : a.to_string();
    s += ':';
    s += std::to_string(ep.port());
    return s;
}

bool is_unix(endpoint const& ep) { return ep.protocol().family() == AF_UNIX; }

// The TCP endpoint inside a generic one (default-constructed for a Unix socket).
tcp::endpoint tcp_of(endpoint const& ep) {
    tcp::endpoint t;
    if (is_unix(ep) || ep.size() > t.capacity()) return {};
    std::memcpy(t.data(), ep.data(), ep.size());
    t.resize(ep.size());
    return t;
}

// The path of a Unix socket endpoint ("" for an unnamed one, as a peer is).
std::string unix_path_of(endpoint const& ep) {
    if (!is_unix(ep) || ep.size() <= offsetof(sockaddr_un, sun_path)) return {};
    auto const* un = reinterpret_cast<sockaddr_un const*>(ep.data());
    std::size_t const n = ep.size() - offsetof(sockaddr_un, sun_path);
    return std::string(un->sun_path, ::strnlen(un->sun_path, n));
}

// "127.0.0.1:8500", "[::1]:8500", "unix:///run/tenure.sock"; a peer on a Unix socket is "unix".
std::string endpoint_string(endpoint const& ep) {
    if (!is_unix(ep)) return endpoint_string(tcp_of(ep));
    auto const path = unix_path_of(ep);
    return path.empty() ? std::string("unix") : "unix://" + path;
}

// boost::system::system_error whose what() is just the message ("cannot
// listen on 127.0.0.1:8500: Address already in use"), without the
// "[system:98 at file:line]" suffix of error_code::what().
class agent_error : public boost::system::system_error {
public:
    agent_error(boost::system::error_code const& ec, std::string const& message)
        : system_error(boost::system::error_code(ec.value(), ec.category()), message),
          message_(message + ": " + ec.message()) {}
    agent_error(boost::system::error_code const& ec, std::string const& message, std::string_view why)
        : system_error(boost::system::error_code(ec.value(), ec.category()), message),
          message_(message + " (" + std::string(why) + ")") {}
    char const* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

[[noreturn]] void throw_bad_address(std::string const& text, std::string_view why) {
    throw agent_error(asio::error::invalid_argument, "invalid HTTP address \"" + text + "\"", why);
}

// "host:port", "[v6]:port", ":port"; an optional http:// prefix and trailing
// '/' are ignored. "unix:///path" is a Unix domain socket, as in Consul's
// addresses.http.
endpoint parse_http_addr(std::string const& text) {
    if (auto u = detail::parse_unix_address(text)) {
        if (!u->error.empty()) throw_bad_address(text, u->error);
        return asio::local::stream_protocol::endpoint(u->path);
    }
    std::string_view s = text;
    if (s.substr(0, 7) == "http://") s.remove_prefix(7);
    while (!s.empty() && s.back() == '/') s.remove_suffix(1);

    std::string_view host, port;
    if (!s.empty() && s.front() == '[') {
        auto const close = s.find(']');
        if (close == s.npos) throw_bad_address(text, "missing ']'");
        host = s.substr(1, close - 1);
        auto const rest = s.substr(close + 1);
        if (rest.size() < 2 || rest.front() != ':') throw_bad_address(text, "expected [host]:port");
        port = rest.substr(1);
    } else {
        auto const colon = s.rfind(':');
        if (colon == s.npos) throw_bad_address(text, "expected host:port, e.g. 127.0.0.1:8500");
        host = s.substr(0, colon);
        port = s.substr(colon + 1);
        if (host.find(':') != host.npos) throw_bad_address(text, "write IPv6 addresses as [addr]:port");
    }

    unsigned p = 0;
    auto const [end, perr] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (port.empty() || perr != std::errc{} || end != port.data() + port.size() || p > 65535)
        throw_bad_address(text, "port must be a number from 0 to 65535");

    asio::ip::address addr;
    if (host.empty()) {
        addr = asio::ip::address_v4::any();
    } else if (host == "localhost") {
        addr = asio::ip::address_v4::loopback();
    } else {
        boost::system::error_code ec;
        addr = asio::ip::make_address(std::string(host), ec);
        if (ec) throw_bad_address(text, "host must be an IP address or localhost");
    }
    return tcp::endpoint(addr, static_cast<unsigned short>(p));
}

// A Unix socket's path must be free to bind. Like Consul, a socket left there
// by an earlier run is cleared; anything else (a file, a directory) is not
// ours to delete.
void clear_stale_socket(std::string const& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return;  // nothing there (or unreadable: bind will say)
    if (!S_ISSOCK(st.st_mode))
        throw agent_error(make_error_code(boost::system::errc::file_exists), "cannot listen on unix://" + path,
                          "the path exists and is not a socket");
    ::unlink(path.c_str());
}

ag::agent_config make_config(agent_options const& o) {
    ag::agent_config c;
    c.node_name = o.node_name;
    c.datacenter = o.datacenter;
    c.session_ttl_min = o.session_ttl_min;
    c.kv_max_value_size = o.kv_max_value_size;
    c.history_capacity = o.history_capacity;
    return c;
}

// The ACL store from the options. A missing file or bad JSON throws, so the
// agent never starts with ACLs other than those asked for.
std::unique_ptr<ag::acl_store> make_acl(agent_options const& o) {
    ag::acl_options a;
    a.enabled = o.acl_enabled;
    a.default_policy = o.acl_default_allow ? ag::acl_access::write : ag::acl_access::deny;
    a.bootstrap_token = o.acl_bootstrap_token;
    if (!o.acl_file.empty()) {
        std::ifstream in(o.acl_file, std::ios::binary);
        if (!in)
            throw agent_error(boost::system::errc::make_error_code(boost::system::errc::no_such_file_or_directory),
                              "cannot read ACL file \"" + o.acl_file + "\"");
        a.file_json.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
        if (a.file_json.empty()) a.file_json = "{}";
    }
    try {
        return std::make_unique<ag::acl_store>(std::move(a));
    } catch (ag::acl_config_error const& e) {
        throw agent_error(asio::error::invalid_argument, "invalid ACL configuration", e.what());
    }
}

ag::response text_response(http::status st, std::string body) {
    ag::response r{st, 11};
    r.set(http::field::content_type, "text/plain; charset=utf-8");
    r.body() = std::move(body);
    return r;
}

// The status to answer a failed read with, or nullopt to close silently
// (peer went away, timeout, I/O error).
std::optional<http::status> client_error_status(beast::error_code const& ec) {
    if (ec.category() != http::make_error_code(http::error::bad_target).category()) return std::nullopt;
    switch (static_cast<http::error>(ec.value())) {
    case http::error::end_of_stream:
    case http::error::partial_message:
    case http::error::need_more:
    case http::error::need_buffer:
    case http::error::stale_parser:
        return std::nullopt;
    case http::error::header_limit:
    case http::error::buffer_overflow:
        return http::status::request_header_fields_too_large;
    case http::error::body_limit:
        return http::status::payload_too_large;
    default:
        return http::status::bad_request;
    }
}

// RFC 9110 section 10.1.1: a 100 (Continue) is never sent to an HTTP/1.0 client.
bool expects_continue(http::request_header<> const& h) {
    if (h.version() < 11) return false;
    auto const it = h.find(http::field::expect);
    return it != h.end() && beast::iequals(it->value(), "100-continue");
}

// IMF-fixdate (RFC 9110 section 5.6.7), the Date header Go's net/http adds:
// "Sun, 29 Nov 2026 21:40:00 GMT". Locale-independent.
std::string http_date(std::time_t t) {
    static constexpr char const* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static constexpr char const* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                             "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", days[tm.tm_wday % 7], tm.tm_mday,
                  months[tm.tm_mon % 12], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

enum class peer_state { quiet, data, gone };

// After the socket reported readable while a request is parked: did the peer
// close (EOF, reset) or send the next request early? The socket is in
// non-blocking mode, so this never blocks.
peer_state peek_peer(ag::agent_stream::socket_type& s) {
    char byte = 0;
    boost::system::error_code ec;
    std::size_t const n = s.receive(asio::buffer(&byte, 1), asio::socket_base::message_peek, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again || ec == asio::error::interrupted)
        return peer_state::quiet;
    if (ec || n == 0) return peer_state::gone;
    return peer_state::data;
}

bool transient_accept_error(boost::system::error_code const& ec) {
    return ec == asio::error::connection_aborted || ec == asio::error::interrupted ||
           ec == asio::error::try_again || ec == asio::error::would_block ||
           ec == asio::error::connection_reset;
}

}  // namespace

// ---------------------------------------------------------------------------

struct agent::impl : std::enable_shared_from_this<impl> {
    struct connection;

    impl(asio::any_io_executor e, agent_options o);

    void start();
    void stop();
    void timers_changed();

    static asio::awaitable<void> accept_loop(std::shared_ptr<impl> self, acceptor_type& listener,
                                             asio::ssl::context* tls);
    static asio::awaitable<void> tick_loop(std::shared_ptr<impl> self);
    static asio::awaitable<void> serve(std::unique_ptr<connection> cp);
    // serve()'s steps. Socket options and the TLS handshake; false: close.
    asio::awaitable<bool> open_connection(connection& c);
    // One request: header, body, evaluate, respond. false: the connection is done.
    asio::awaitable<bool> serve_request(connection& c, beast::flat_buffer& buf);
    // check_header's refusal (or a 500 if it threw), from the header alone.
    std::optional<ag::response> refusal_from_header(http::request_header<> const& header);
    // Writes that refusal and closes, draining an unread body.
    asio::awaitable<void> refuse_early(connection& c, http::request_parser<http::empty_body> const& hp,
                                       ag::response& res, ag::time_point start);
    // The answer, after parking a blocking query and waiting for durability;
    // nullopt: the peer went away or the agent stopped.
    asio::awaitable<std::optional<ag::response>> evaluate(connection& c, beast::flat_buffer const& buf,
                                                          ag::request const& req);
    // Writes the answer. false: close (an error, stopping, or no keep-alive).
    asio::awaitable<bool> respond(connection& c, ag::request const& req, ag::response& res, ag::time_point start);

    // Writes `res` (the header only for HEAD). The caller set keep-alive and the payload.
    asio::awaitable<beast::error_code> write(connection& c, ag::response& res, bool head_only);
    // Answers an unreadable request and closes (after draining what the peer still sends).
    asio::awaitable<void> reject(connection& c, http::status st, std::string detail);
    asio::awaitable<void> linger_close(connection& c);
    // Parks a blocking query. false: the peer went away or the agent stopped.
    asio::awaitable<bool> park(connection& c, beast::flat_buffer const& buf, ag::wait_request w);
    ag::api_outcome handle(ag::request const& req, ag::blocking_state& bs);
    void log_request(connection const& c, std::string_view method, std::string_view target, unsigned status,
                     ag::time_point start);
    void warn_rejected(endpoint const& peer);
    // The Date header value, formatted at most once a second.
    std::string const& date();

    auto completion(char const* what) {
        return [log = log, what](std::exception_ptr e) {
            if (!e) return;
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& x) {
                log.error("agent", std::string(what) + " failed: " + x.what());
            } catch (...) {
                log.error("agent", std::string(what) + " failed: unknown exception");
            }
        };
    }

    asio::any_io_executor ex;
    agent_options opts;
    detail::logger log;
    ag::state_machine sm;
    ag::agent_metrics metrics;
    std::unique_ptr<ag::durable_store> store;     // with data_dir
    std::shared_ptr<ag::group_commit> commits;  // with data_dir
    ag::http_api api;
    ag::http_api::view_options views;
    acceptor_type acceptor;
    endpoint local;
    std::string unix_socket;  // the socket file this agent created (removed by stop())
    tenure::detail::timer tick;          // the state machine's next deadline
    tenure::detail::timer accept_retry;  // back-off after accept failures
    std::list<connection*> conns;
    bool started = false;
    bool stopping = false;
    bool crashed = false;  // agent_access::crash(): no final commit
    ag::time_point last_reject_warn{};
    std::uint64_t rejects_suppressed = 0;
    ag::time_point last_accept_warn{};
    std::time_t date_time = -1;
    std::string date_text;
    std::unique_ptr<ag::acl_store> acl;
    std::unique_ptr<asio::ssl::context> tls;  // with https_addr
    acceptor_type tls_acceptor;
    endpoint tls_local;
};

struct agent::impl::connection {
    connection(std::shared_ptr<impl> o, ag::agent_stream::socket_type s, asio::ssl::context* tls)
        : owner(std::move(o)), stream(std::move(s), tls), park(stream.get_executor()) {
        pos = owner->conns.insert(owner->conns.end(), this);
    }
    connection(connection const&) = delete;
    connection& operator=(connection const&) = delete;
    ~connection() { owner->conns.erase(pos); }  // the stream closes its socket

    // stop(): wake whatever the serve() coroutine is waiting on.
    void abort() noexcept {
        park.cancel();
        stream.close();
    }

    std::shared_ptr<impl> owner;  // declared first: destroyed last
    ag::agent_stream stream;  // TCP or a Unix socket; TLS on the HTTPS listener
    tenure::detail::timer park;  // deadline of a parked blocking query
    endpoint peer;
    bool can_peek = false;  // socket is non-blocking: peek_peer() is safe
    ag::token_bucket bucket;  // -http-rate-per-conn
    std::list<connection*>::iterator pos;
};

agent::impl::impl(asio::any_io_executor e, agent_options o)
    : ex(std::move(e)),
      opts(std::move(o)),
      log(opts.level, opts.log_stream, opts.log_json ? log_format::json : log_format::text),
      sm(make_config(opts), ag::clock::now()),
      api(sm),
      acceptor(ex),
      tick(ex),
      accept_retry(ex),
      tls_acceptor(ex) {
    if (!opts.data_dir.empty()) {  // recover (or refuse: directory locked) before listening
        store = std::make_unique<ag::durable_store>(ag::persist_options{opts.data_dir}, sm, ag::clock::now(), &log);
        store->on_commit = [this](std::chrono::nanoseconds d, std::size_t bytes) { metrics.observe_commit(d, bytes); };
        commits = std::make_shared<ag::group_commit>(ex, *store);
        commits->on_failure = [this](std::string const& e) {
            log.error("agent.wal", e + "; stopping the agent");
            stop();
        };
    }
    acl = make_acl(opts);  // before listening: a bad ACL file stops the start
    api.set_acl(acl.get());
    api.set_limits({.max_sessions_per_node = opts.max_sessions_per_node, .max_kv_keys = opts.max_kv_keys});
    if (!opts.https_addr.empty()) {
        try {
            tls = ag::make_server_tls_context(opts);
        } catch (std::invalid_argument const& e) {
            throw agent_error(asio::error::invalid_argument, "invalid TLS configuration", e.what());
        }
    }
    auto listen = [this](acceptor_type& acc, endpoint const& ep) {
        auto fail = [&](boost::system::error_code const& ec) {
            throw agent_error(ec, "cannot listen on " + endpoint_string(ep));
        };
        boost::system::error_code ec;
        std::string const path = unix_path_of(ep);
        if (!path.empty()) clear_stale_socket(path);
        acc.open(ep.protocol(), ec);
        if (ec) fail(ec);
        if (path.empty())
            acc.set_option(tcp::acceptor::reuse_address(true), ec);  // TIME_WAIT only; never shares a live port
        acc.bind(ep, ec);
        if (ec) fail(ec);
        if (!path.empty()) {
            unix_socket = path;
            // The file's mode is the socket's access control: who may connect.
            if (opts.unix_socket_mode && ::chmod(path.c_str(), static_cast<mode_t>(opts.unix_socket_mode)) != 0)
                fail(boost::system::error_code(errno, boost::system::system_category()));
        }
        acc.listen(asio::socket_base::max_listen_connections, ec);
        if (ec) fail(ec);
        auto const bound = acc.local_endpoint(ec);
        if (ec) fail(ec);
        return bound;
    };
    local = listen(acceptor, parse_http_addr(opts.http_addr));
    if (tls) {
        std::string_view https = opts.https_addr;
        if (https.starts_with("https://")) https.remove_prefix(8);
        if (https.starts_with("unix://"))
            throw_bad_address(opts.https_addr, "HTTPS is served on TCP only; use http_addr for a Unix socket");
        tls_local = listen(tls_acceptor, parse_http_addr(std::string(https)));
    }

    sm.on_invalidate = [this](ag::session_entry const& s, ag::invalidation_cause cause) {
        if (!log.enabled(log_level::info)) return;
        std::string m = "session invalidated: id=" + s.id;
        if (!s.name.empty()) m += " name=\"" + s.name + "\"";
        m += " cause=";
        m += ag::to_string(cause);
        log.info("agent.session", m);
    };
    sm.on_lock_delay_reject = [this](std::string_view key) {
        if (!log.enabled(log_level::debug)) return;
        log.debug("agent.kvs", "rejecting lock of key due to lock-delay: key=" + std::string(key));
    };
    metrics.attach(sm);  // wraps the two callbacks above
    api.set_metrics(&metrics);
    // One reading of both clocks: the history's instants are monotonic, its
    // answers calendar time.
    views.wall.at = ag::clock::now();
    views.wall.unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             tenure::detail::wall_clock::now().time_since_epoch())
                             .count();
    views.ui = opts.ui;
    api.set_views(views);
}

void agent::impl::start() {
    if (started || stopping) return;
    started = true;
    asio::co_spawn(ex, tick_loop(shared_from_this()), completion("timer loop"));
    asio::co_spawn(ex, accept_loop(shared_from_this(), acceptor, nullptr), completion("accept loop"));
    if (tls) asio::co_spawn(ex, accept_loop(shared_from_this(), tls_acceptor, tls.get()), completion("HTTPS accept loop"));
    if (tls && log.enabled(log_level::info))
        log.info("agent", "started HTTPS server: address=" + endpoint_string(tls_local) + " verify_incoming=" +
                              (opts.verify_incoming ? "true" : "false"));
    if (acl->enabled() && log.enabled(log_level::info))
        log.info("agent", std::string("ACLs enabled: default_policy=") + (opts.acl_default_allow ? "allow" : "deny") +
                              " tokens=" + std::to_string(acl->token_count()));
    if (log.enabled(log_level::info)) {
        log.info("agent", "started HTTP server: address=" + endpoint_string(local) +
                              (is_unix(local) ? " network=unix node=" : " network=tcp node=") + opts.node_name +
                              " datacenter=" + opts.datacenter);
    }
}

void agent::impl::stop() {
    if (stopping) return;
    stopping = true;
    if (commits && !crashed) commits->flush();  // timer-driven changes not yet on disk
    boost::system::error_code ec;
    acceptor.close(ec);
    tls_acceptor.close(ec);
    if (!unix_socket.empty()) ::unlink(unix_socket.c_str());  // as Go's listener does on Close
    tick.cancel();
    accept_retry.cancel();
    std::size_t const n = conns.size();
    for (connection* c : conns) c->abort();
    if (log.enabled(log_level::info))
        log.info("agent", "stopping HTTP server: address=" + endpoint_string(local) +
                              " open_connections=" + std::to_string(n));
}

void agent::impl::timers_changed() {
    if (!started || stopping) return;
    if (commits) commits->schedule();  // in-process changes reach the log too
    auto const d = sm.next_deadline();
    if (d && *d < tick.expiry()) tick.cancel();  // tick_loop re-arms at the new deadline
}

asio::awaitable<void> agent::impl::tick_loop(std::shared_ptr<impl> self) {
    impl& a = *self;
    // advance(now) fires everything due at or before now; a deadline that is
    // still not after `floor` would be a state-machine bug: never spin on it.
    ag::time_point floor = ag::time_point::min();
    bool warned = false;
    while (!a.stopping) {
        ag::time_point d = a.sm.next_deadline().value_or(ag::time_point::max());
        if (d <= floor) {
            if (!warned) a.log.warn("agent", "state machine keeps a deadline that advance() did not clear");
            warned = true;
            d = floor + 1ms;
        }
        a.tick.expires_at(d);
        co_await a.tick.async_wait(awaitable_tuple);  // expiry, or cancel(): re-arm
        if (a.stopping) break;
        auto const now = ag::clock::now();
        if (d <= now) {
            try {
                a.sm.advance(now);
            } catch (std::exception const& e) {
                a.log.error("agent", std::string("advance failed: ") + e.what());
            }
            if (a.commits) a.commits->schedule();  // TTL invalidations are logged too
            floor = now;
        }
    }
}

asio::awaitable<void> agent::impl::accept_loop(std::shared_ptr<impl> self, acceptor_type& listener,
                                              asio::ssl::context* tls) {
    impl& a = *self;
    while (!a.stopping) {
        auto [ec, sock] = co_await listener.async_accept(awaitable_tuple);
        if (a.stopping) break;
        if (ec) {
            if (transient_accept_error(ec)) continue;
            if (ec == asio::error::operation_aborted || ec == asio::error::bad_descriptor) {
                a.log.error("agent.http", "listener closed unexpectedly: " + ec.message());
                break;
            }
            // EMFILE, ENFILE, ENOBUFS, ENOMEM...: back off instead of spinning.
            auto const now = ag::clock::now();
            if (now - a.last_accept_warn >= warn_interval) {
                a.last_accept_warn = now;
                a.log.warn("agent.http", "accept failed: " + ec.message() + "; open_connections=" +
                                             std::to_string(a.conns.size()) + "; retrying");
            }
            a.accept_retry.expires_after(accept_retry_delay);
            co_await a.accept_retry.async_wait(awaitable_tuple);
            continue;
        }
        if (a.conns.size() >= a.opts.max_connections) {
            boost::system::error_code ig;
            auto const peer = sock.remote_endpoint(ig);
            sock.close(ig);
            a.warn_rejected(peer);
            continue;
        }
        auto c = std::make_unique<connection>(self, std::move(sock), tls);
        asio::co_spawn(a.ex, serve(std::move(c)), a.completion("connection"));
    }
}

void agent::impl::warn_rejected(endpoint const& peer) {
    auto const now = ag::clock::now();
    if (now - last_reject_warn < warn_interval) {
        ++rejects_suppressed;
        return;
    }
    last_reject_warn = now;
    std::string m = "too many connections: open=" + std::to_string(conns.size()) +
                    " max=" + std::to_string(opts.max_connections) + "; closed new connection from " +
                    endpoint_string(peer);
    if (rejects_suppressed) m += " (and " + std::to_string(rejects_suppressed) + " more since the last warning)";
    rejects_suppressed = 0;
    log.warn("agent.http", m);
}

ag::api_outcome agent::impl::handle(ag::request const& req, ag::blocking_state& bs) {
    ag::api_outcome out;
    try {
        out = api.handle(req, ag::clock::now(), bs);
    } catch (std::exception const& e) {
        log.error("agent.http", "request failed: method=" + std::string(req.method_string()) +
                                    " url=" + ag::redact_token(req.target()) + " error=" + e.what());
        out = {};
        out.res = text_response(http::status::internal_server_error, std::string("internal error: ") + e.what());
    }
    if (!out.res && !out.wait) {
        log.error("agent.http", "no response for " + std::string(req.target()));
        out.res = text_response(http::status::internal_server_error, "internal error: no response");
    }
    timers_changed();
    return out;
}

void agent::impl::log_request(connection const& c, std::string_view method, std::string_view target, unsigned status,
                              ag::time_point start) {
    metrics.observe_request(method, target, status, ag::clock::now() - start);
    if (!log.enabled(log_level::debug)) return;
    auto const us = std::chrono::duration_cast<std::chrono::microseconds>(ag::clock::now() - start).count();
    std::string m = "request: method=";
    m += method;
    m += " url=";
    m += ag::redact_token(target);
    m += " status=" + std::to_string(status);
    m += " from=" + endpoint_string(c.peer);
    m += " duration_us=" + std::to_string(us);
    log.debug("agent.http", m);
}

std::string const& agent::impl::date() {
    std::time_t const now = tenure::detail::wall_clock::to_time_t(tenure::detail::wall_clock::now());
    if (now != date_time) {
        date_time = now;
        date_text = http_date(now);
    }
    return date_text;
}

asio::awaitable<beast::error_code> agent::impl::write(connection& c, ag::response& res, bool head_only) {
    if (res.find(http::field::date) == res.end()) res.set(http::field::date, date());
    // The head rendered into one string, written with the body in one
    // gathered write: Beast's serializer walks a concatenation of the status
    // line and every field, which cost more than the rest of the write.
    std::string head;
    head.reserve(192);
    unsigned const v = res.version();
    head.append("HTTP/").append(1, static_cast<char>('0' + v / 10)).append(1, '.');
    head.append(1, static_cast<char>('0' + v % 10)).append(" ").append(std::to_string(res.result_int()));
    head.append(" ").append(res.reason()).append("\r\n");
    for (auto const& f : res) head.append(f.name_string()).append(": ").append(f.value()).append("\r\n");
    head.append("\r\n");
    std::array<asio::const_buffer, 2> const wire{asio::buffer(head),
                                                 head_only ? asio::const_buffer{} : asio::buffer(res.body())};
    // Most answers leave in one non-blocking send: no write operation, no
    // timer, no completion through the executor. What the socket did not
    // take is written within write_timeout.
    std::size_t const sent = c.stream.send_now(wire[0], wire[1]);
    if (sent == asio::buffer_size(wire)) co_return beast::error_code{};
    beast::buffers_suffix<std::array<asio::const_buffer, 2>> rest(wire);
    rest.consume(sent);
    c.stream.expires_after(write_timeout);
    auto [ec, n] = co_await asio::async_write(c.stream, rest, awaitable_tuple);
    co_return ec;
}

asio::awaitable<void> agent::impl::linger_close(connection& c) {
    boost::system::error_code ec;
    c.stream.socket().shutdown(asio::socket_base::shutdown_send, ec);
    if (ec) co_return;
    std::array<char, 4096> scratch;
    std::size_t drained = 0;
    c.stream.expires_after(linger_timeout);
    while (drained < linger_max_bytes && !stopping) {
        auto [rec, n] = co_await c.stream.async_read_some(asio::buffer(scratch), awaitable_tuple);
        if (rec) break;
        drained += n;
    }
    // ~connection closes the socket.
}

asio::awaitable<void> agent::impl::reject(connection& c, http::status st, std::string detail) {
    std::string body = std::to_string(static_cast<unsigned>(st)) + " " + std::string(http::obsolete_reason(st));
    if (!detail.empty()) body += ": " + detail;
    body += '\n';
    if (log.enabled(log_level::debug))
        log.debug("agent.http", "unreadable request from " + endpoint_string(c.peer) + ": " + body.substr(0, body.size() - 1));
    auto res = text_response(st, std::move(body));
    res.keep_alive(false);
    res.prepare_payload();
    auto const ec = co_await write(c, res, false);
    if (!ec && !stopping) co_await linger_close(c);
}

asio::awaitable<bool> agent::impl::park(connection& c, beast::flat_buffer const& buf, ag::wait_request w) {
    bool woken = false;
    // One-shot; fires synchronously inside a state-machine write. It only
    // flags and cancels the timer; this coroutine resumes later and calls
    // handle() again. Declared after `woken` so it is dropped before it.
    // It cancels the socket's wait too, right behind the timer: a write
    // wakes its watchers in a row, and were the socket's wait left for the
    // parallel group to cancel, each watcher's second completion would
    // queue behind every other watcher's first, and the first answer would
    // wait for all of them. (While parked, the wait is the socket's only
    // operation.)
    auto reg = sm.watch(std::move(w.targets), [&woken, t = &c.park, s = &c.stream.socket()] {
        woken = true;
        t->cancel();
        boost::system::error_code ig;
        s->cancel(ig);
    });
    c.park.expires_at(w.deadline);
    // Watch the socket too, so that a client that gives up frees its
    // connection at once rather than at the deadline. Not when the next
    // request is already buffered: the socket may then stay quiet.
    bool watch_peer = c.can_peek && buf.size() == 0;
    for (;;) {
        if (stopping) co_return false;
        if (!watch_peer) {
            co_await c.park.async_wait(awaitable_tuple);
            co_return !stopping;
        }
        auto [order, tec, sec] = co_await asio::experimental::make_parallel_group(
                                     c.park.async_wait(asio::deferred),
                                     c.stream.socket().async_wait(asio::socket_base::wait_read, asio::deferred))
                                     .async_wait(asio::experimental::wait_for_one(), asio::use_awaitable);
        if (stopping) co_return false;
        if (order[0] == 0) co_return true;  // woken, deadline reached
        switch (peek_peer(c.stream.socket())) {
        case peer_state::gone:
            co_return false;
        case peer_state::data:  // pipelined request: keep waiting on the timer only
            watch_peer = false;
            break;
        case peer_state::quiet:
            break;
        }
        if (woken) co_return true;
        // The timer's expiry is unchanged; if it passed meanwhile the next wait completes at once.
    }
}

asio::awaitable<bool> agent::impl::open_connection(connection& c) {
    {
        boost::system::error_code ec;
        auto& s = c.stream.socket();
        c.peer = s.remote_endpoint(ec);
        if (!is_unix(c.peer)) s.set_option(tcp::no_delay(true), ec);
        s.non_blocking(true, ec);
        c.can_peek = !ec;
        c.bucket = ag::token_bucket(opts.http_rate_per_conn, opts.http_burst_per_conn, ag::clock::now());
    }
    if (log.enabled(log_level::trace)) log.trace("agent.http", "connection opened from " + endpoint_string(c.peer));
    if (!c.stream.is_tls()) co_return true;
    c.stream.expires_after(handshake_timeout);
    auto [tec] = co_await c.stream.async_handshake(asio::ssl::stream_base::server, awaitable_tuple);
    if (stopping) co_return false;
    if (tec) {  // no certificate, wrong CA, plain HTTP on the HTTPS port...
        if (log.enabled(log_level::debug))
            log.debug("agent.http", "TLS handshake with " + endpoint_string(c.peer) + " failed: " + tec.message());
        co_return false;
    }
    co_return true;
}

std::optional<ag::response> agent::impl::refusal_from_header(http::request_header<> const& header) {
    try {
        return api.check_header(header);
    } catch (std::exception const& e) {
        log.error("agent.http", std::string("check_header failed: ") + e.what());
        return text_response(http::status::internal_server_error, std::string("internal error: ") + e.what());
    }
}

asio::awaitable<void> agent::impl::refuse_early(connection& c, http::request_parser<http::empty_body> const& hp,
                                                ag::response& res, ag::time_point start) {
    res.keep_alive(false);
    res.prepare_payload();
    bool const head = hp.get().method() == http::verb::head;
    auto const ec = co_await write(c, res, head);
    log_request(c, hp.get().method_string(), hp.get().target(), res.result_int(), start);
    if (ec || stopping) co_return;
    if (hp.is_done()) {  // nothing unread: a plain close
        boost::system::error_code ig;
        c.stream.socket().shutdown(asio::socket_base::shutdown_send, ig);
    } else {
        co_await linger_close(c);
    }
}

asio::awaitable<std::optional<ag::response>> agent::impl::evaluate(connection& c, beast::flat_buffer const& buf,
                                                                   ag::request const& req) {
    ag::blocking_state bs;
    ag::api_outcome out;
    auto const woken_before = sm.wakeups();
    auto const handovers_before = sm.handovers();
    if (c.bucket.try_take(ag::clock::now())) out = handle(req, bs);
    else out.res = ag::rate_limited();  // the connection stays open
    bool const handed_on = sm.handovers() != handovers_before && sm.wakeups() != woken_before;
    while (!out.res) {
        if (opts.max_blocking_queries && sm.watcher_count() >= opts.max_blocking_queries) {
            out.res = ag::too_many_blocking_queries(opts.max_blocking_queries);
            break;
        }
        if (!co_await park(c, buf, std::move(*out.wait))) {
            if (log.enabled(log_level::trace))
                log.trace("agent.http", "blocking query abandoned: url=" + ag::redact_token(req.target()) +
                                            " from=" + endpoint_string(c.peer));
            co_return std::nullopt;
        }
        out = handle(req, bs);
    }
    // ---- durability: nothing leaves that is not on disk (group commit) ----
    if (commits && !co_await commits->wait_durable())
        out.res = text_response(http::status::internal_server_error, "write-ahead log failed; agent stopping");
    // A transaction that handed a lock to another session lets the
    // blocking queries it woke answer first: the new holder is waiting in
    // one of them and needs no further request, while the writer knows
    // what it sent. (The woken coroutines resume from handlers the wake-up
    // queued; this one queues behind them.) Any other write answers its
    // writer first: after an acquire the writer is the new holder, and
    // after a plain release the woken race with a request of their own
    // (measured: 100 of them raced no sooner for it).
    if (handed_on) co_await asio::post(c.stream.get_executor(), asio::use_awaitable);
    co_return std::move(out.res);
}

asio::awaitable<bool> agent::impl::respond(connection& c, ag::request const& req, ag::response& res,
                                           ag::time_point start) {
    bool const keep = req.keep_alive() && !stopping;
    res.keep_alive(keep);
    if (keep && req.version() < 11) res.set(http::field::connection, "keep-alive");
    res.prepare_payload();
    auto const wec = co_await write(c, res, req.method() == http::verb::head);
    log_request(c, req.method_string(), req.target(), res.result_int(), start);
    if (wec || stopping) co_return false;
    if (!keep) {
        boost::system::error_code ig;
        c.stream.socket().shutdown(asio::socket_base::shutdown_send, ig);
        co_return false;
    }
    co_return true;
}

asio::awaitable<bool> agent::impl::serve_request(connection& c, beast::flat_buffer& buf) {
    // ---- header ----
    http::request_parser<http::empty_body> hp;
    hp.header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(opts.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    hp.body_limit(boost::none);  // Content-Length is judged by check_header, then by the body parser
    c.stream.expires_after(idle_timeout);
    auto [hec, hn] = co_await http::async_read_header(c.stream, buf, hp, awaitable_tuple);
    if (stopping) co_return false;
    if (hec) {
        if (auto st = client_error_status(hec)) co_await reject(c, *st, hec.message());
        else if (log.enabled(log_level::trace))
            log.trace("agent.http", "connection from " + endpoint_string(c.peer) + " closed: " + hec.message());
        co_return false;
    }
    auto const start = ag::clock::now();

    // ---- refusal from the header alone: the body is never read ----
    if (auto early = refusal_from_header(hp.get())) {
        co_await refuse_early(c, hp, *early, start);
        co_return false;
    }
    if (expects_continue(hp.get()) && !hp.is_done()) {
        http::response<http::empty_body> cont{http::status::continue_, 11};
        c.stream.expires_after(write_timeout);
        auto [cec, cn] = co_await http::async_write(c.stream, cont, awaitable_tuple);
        if (cec || stopping) co_return false;
    }

    // ---- body ----
    http::request_parser<http::string_body> p{std::move(hp)};
    p.body_limit(api.max_body_size());
    // A small body came with the header, in the same read: it is parsed from
    // the buffer here, without a read operation, its timer and its
    // completion through the executor. What is still missing is read.
    beast::error_code bec;
    while (!p.is_done() && buf.size() != 0) {
        auto const used = p.put(buf.data(), bec);
        buf.consume(used);
        if (bec == http::error::need_more) bec = {};
        if (bec || used == 0) break;
    }
    if (!bec && !p.is_done()) {
        c.stream.expires_after(body_timeout);
        auto [rec, rn] = co_await http::async_read(c.stream, buf, p, awaitable_tuple);
        if (stopping) co_return false;
        bec = rec;
    }
    if (bec) {
        if (auto st = client_error_status(bec)) co_await reject(c, *st, bec.message());
        co_return false;
    }
    ag::request req = p.release();

    // ---- evaluate (parking blocking queries), respond ----
    auto res = co_await evaluate(c, buf, req);
    if (!res) co_return false;
    co_return co_await respond(c, req, *res, start);
}

asio::awaitable<void> agent::impl::serve(std::unique_ptr<connection> cp) {
    connection& c = *cp;
    impl& a = *c.owner;
    if (a.stopping) co_return;
    if (!co_await a.open_connection(c)) co_return;
    // Room for a whole request in one recvmsg: Beast reads at most the free
    // room (512 bytes when empty) and the parser consumes what it reads, so
    // an unreserved buffer stays at 512 and a 900-byte transaction took two
    // reads, the second often after other connections' turns. 4 KiB a
    // connection, as Go's net/http reads with.
    beast::flat_buffer buf;
    buf.reserve(4096);
    while (co_await a.serve_request(c, buf)) {
    }
}

// ---------------------------------------------------------------------------

agent::agent(asio::any_io_executor ex, agent_options opts)
    : impl_(std::make_shared<impl>(std::move(ex), std::move(opts))) {}

agent::agent(agent&&) noexcept = default;

agent& agent::operator=(agent&& other) noexcept {
    if (this != &other) {
        if (impl_) impl_->stop();
        impl_ = std::move(other.impl_);
    }
    return *this;
}

agent::~agent() {
    if (impl_) impl_->stop();
}

tcp::endpoint agent::local_endpoint() const { return tcp_of(impl_->local); }

std::string agent::http_address() const {
    return is_unix(impl_->local) ? endpoint_string(impl_->local) : "http://" + endpoint_string(impl_->local);
}

tcp::endpoint agent::https_endpoint() const { return impl_->tls ? tcp_of(impl_->tls_local) : tcp::endpoint{}; }

std::string agent::https_address() const {
    return impl_->tls ? "https://" + endpoint_string(impl_->tls_local) : std::string{};
}

void agent::start() { impl_->start(); }

void agent::stop() { impl_->stop(); }

bool agent::stopped() const noexcept { return impl_->stopping; }

std::size_t agent::connection_count() const noexcept { return impl_->conns.size(); }

consul::transport_factory agent::in_process() {
    return [this](boost::asio::any_io_executor ex, consul::client_config const& config) {
        return detail::make_inprocess_transport(std::move(ex), *this, config.token);
    };
}

detail::agent::state_machine& detail::agent_access::state(tenure::agent& a) noexcept { return a.impl_->sm; }

detail::agent::http_api::view_options const& detail::agent_access::views(tenure::agent& a) noexcept {
    return a.impl_->views;
}

void detail::agent_access::timers_changed(tenure::agent& a) { a.impl_->timers_changed(); }

bool detail::agent_access::pending_writes(tenure::agent& a) noexcept {
    auto& i = *a.impl_;
    return i.commits && (i.commits->failed() || i.store->pending());
}

asio::awaitable<bool> detail::agent_access::wait_durable(tenure::agent& a) {
    auto commits = a.impl_->commits;  // kept: the agent may stop meanwhile
    if (!commits) co_return true;
    co_return co_await commits->wait_durable();
}

void detail::agent_access::crash(tenure::agent& a) {
    auto& i = *a.impl_;
    if (i.store) i.store->abandon();
    if (i.commits) i.commits->abandon();
    i.crashed = true;
    i.stop();
}

}  // namespace tenure
