// tenure::consul::client: request building (Boost.URL), JSON codecs
// (Boost.JSON) and the operations, over a detail::transport (HTTP or
// in-process).
#include <tenure/consul/client.hpp>
#include "net/duration.hpp"
#include "net/wire.hpp"

#include "consul/client_access.hpp"
#include "consul/codec.hpp"
#include "consul/transport.hpp"

#include <unordered_map>

#include <boost/asio/use_awaitable.hpp>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <algorithm>
#include <stdexcept>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace tenure::consul {

namespace asio = boost::asio;
namespace json = boost::json;
namespace urls = boost::urls;
namespace http = boost::beast::http;
using detail::http_response;
using detail::clock;
using namespace std::chrono_literals;

// ---- api_error ------------------------------------------------------------------

namespace {

constexpr std::size_t max_message_in_what = 512;

std::string api_error_what(unsigned status, std::string_view message) {
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.remove_suffix(1);
    bool const cut = message.size() > max_message_in_what;
    if (cut) message = message.substr(0, max_message_in_what);
    std::string s;
    if (status != 0) {
        s = "Consul answered " + std::to_string(status);
        if (!message.empty()) {
            s += " (";
            s += message;
            if (cut) s += "...";
            s += ')';
        }
    } else {
        s = message.empty() ? std::string("Consul request failed") : std::string(message);
        if (cut) s += "...";
    }
    return s;
}

}  // namespace

api_error::api_error(boost::system::error_code ec, unsigned http_status, std::string server_message)
    // The code without its source location: what() stays readable.
    : tenure::server_error(boost::system::error_code(ec.value(), ec.category()),
                           api_error_what(http_status, server_message), http_status, server_message) {}

std::uint64_t next_wait_index(std::uint64_t previous, std::uint64_t returned) noexcept {
    if (returned < previous) return 0;
    if (returned < 1) return 1;
    return returned;
}

namespace detail {

void throw_aborted(std::string what) {
    what += ": aborted";
    throw api_error(boost::asio::error::operation_aborted, 0, std::move(what));
}

}  // namespace detail

// ---- codecs: src/consul/codec.cpp ------------------------------------------------------

using namespace detail;  // the codec's functions

namespace {

// ---- URLs -------------------------------------------------------------------------

// Keys keep their '/' separators; every other byte outside RFC 3986's
// unreserved set is percent-encoded.
std::string encode_key(std::string_view key) { return urls::encode(key, urls::unreserved_chars + '/'); }
// A single path segment (session and check IDs).
std::string encode_segment(std::string_view s) { return urls::encode(s, urls::unreserved_chars); }

class query_string {
public:
    query_string& flag(std::string_view name) {
        sep();
        s_ += name;
        return *this;
    }
    query_string& param(std::string_view name, std::string_view value) {
        sep();
        s_ += name;
        s_ += '=';
        s_ += urls::encode(value, urls::unreserved_chars);
        return *this;
    }
    query_string& param(std::string_view name, std::uint64_t value) { return param(name, std::to_string(value)); }
    std::string const& str() const noexcept { return s_; }

private:
    void sep() {
        if (!s_.empty()) s_ += '&';
    }
    std::string s_;
};

struct parsed_address {
    std::string host;
    std::uint16_t port = 80;
    std::string host_header;
    std::string normalized;  // http://host:port, or unix:///path
    bool tls = false;        // https://
    std::string unix_path;   // unix:///path
};

[[noreturn]] void bad_address(std::string const& text, std::string_view why) {
    throw boost::system::system_error(boost::asio::error::invalid_argument,
                                      "invalid Consul address \"" + text + "\": " + std::string(why));
}

parsed_address parse_address(std::string const& text) {
    // unix:///path/to/socket, as Consul's agent and CLI spell a Unix domain
    // socket (plain HTTP over it).
    if (auto u = tenure::detail::parse_unix_address(text)) {
        if (!u->error.empty()) bad_address(text, u->error);
        parsed_address a;
        a.unix_path = std::move(u->path);
        a.host = "localhost";
        a.host_header = "localhost";
        a.normalized = "unix://" + a.unix_path;
        return a;
    }
    std::string s = text;
    if (s.find("://") == std::string::npos) s = "http://" + s;
    auto u = urls::parse_uri(s);
    if (!u) bad_address(text, u.error().message());
    std::string scheme(u->scheme());
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (scheme != "http" && scheme != "https")
        bad_address(text, "only http://, https:// and unix:// addresses are supported");
    if (u->has_userinfo()) bad_address(text, "user information is not supported");
    if (!u->path().empty() && u->path() != "/") bad_address(text, "a path is not supported");
    if (u->has_query() || u->has_fragment()) bad_address(text, "a query or fragment is not supported");

    parsed_address a;
    a.tls = scheme == "https";
    if (a.tls) a.port = 443;
    switch (u->host_type()) {
    case urls::host_type::ipv4: a.host = std::string(u->host_address()); break;
    case urls::host_type::ipv6: a.host = std::string(u->host_address()); break;
    case urls::host_type::name: a.host = std::string(u->host_name()); break;
    default: bad_address(text, "unsupported host");
    }
    if (a.host.empty()) bad_address(text, "missing host");
    if (u->has_port()) {
        auto const p = tenure::detail::parse_u64(u->port());
        if (!p || *p == 0 || *p > 65535) bad_address(text, "port must be a number from 1 to 65535");
        a.port = static_cast<std::uint16_t>(*p);
    }
    std::string const host_part = u->host_type() == urls::host_type::ipv6 ? "[" + a.host + "]" : a.host;
    a.host_header = host_part + ":" + std::to_string(a.port);
    a.normalized = (a.tls ? "https://" : "http://") + a.host_header;
    return a;
}

std::string env_or(std::string value, char const* name) {
    if (!value.empty()) return value;
    if (char const* e = std::getenv(name)) return e;
    return {};
}

std::string wait_ms(std::chrono::nanoseconds wait) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wait).count();
    if (wait.count() > 0 && ms == 0) ms = 1;
    return std::to_string(ms) + "ms";
}

constexpr std::chrono::nanoseconds server_default_wait = 5min;
constexpr std::chrono::nanoseconds server_max_wait = 10min;

}  // namespace

// ---- client::impl ---------------------------------------------------------------------

struct client::impl {
    asio::any_io_executor ex;
    client_config config;
    std::shared_ptr<detail::transport> transport;
    // Shared blocking queries per KV prefix (src/consul/watch_hub.cpp).
    std::unordered_map<std::string, std::weak_ptr<void>> watch_hubs;

    clock::time_point request_deadline() const { return clock::now() + config.request_timeout; }

    // Adds index/wait/consistency to `q` and returns the read's deadline.
    clock::time_point read_params(query_string& q, read_options const& o) const {
        auto const mode = o.mode.value_or(config.read_consistency);
        if (mode == consistency::consistent) q.flag("consistent");
        if (mode == consistency::stale) q.flag("stale");
        if (o.index == 0) return request_deadline();  // not blocking: no wait either
        q.param("index", o.index);
        if (o.wait.count() > 0) q.param("wait", wait_ms(o.wait));
        std::chrono::nanoseconds wait = o.wait.count() > 0 ? o.wait : server_default_wait;
        wait = std::min(wait, server_max_wait);
        return clock::now() + std::chrono::ceil<clock::duration>(wait + wait / 16) + config.blocking_margin;
    }

    std::string target(std::string path, query_string& q) const {
        if (!config.datacenter.empty()) q.param("dc", config.datacenter);
        if (!q.str().empty()) {
            path += '?';
            path += q.str();
        }
        return path;
    }

    asio::awaitable<http_response> send(http::verb method, std::string const& target, std::string body,
                                        clock::time_point deadline) const {
        return transport->send(method, target, std::move(body), deadline);
    }
};

namespace {

std::string describe(http::verb method, std::string_view target) {
    return std::string(http::to_string(method)) + " " + std::string(target);
}

[[noreturn]] void throw_status(http_response const& r) {
    throw api_error(make_error_code(tenure::error::http_status), r.status, r.body);
}

// Runs `f` over the response, turning decode failures into api_error.
template <class F>
auto decode(http_response const& r, http::verb method, std::string_view target, F&& f) -> decltype(f()) {
    try {
        return f();
    } catch (decode_failure const& e) {
        std::string body(r.body.substr(0, 200));
        throw api_error(make_error_code(tenure::error::unexpected_response), 0,
                        describe(method, target) + ": unexpected response (" + e.what + "): " + body);
    }
}

bool success(unsigned status) { return status >= 200 && status < 300; }

void expect_ok(http_response const& r) {
    if (!success(r.status)) throw_status(r);
}

}  // namespace

// ---- client ---------------------------------------------------------------------------

client::client(asio::any_io_executor ex, client_config config) : co_{std::make_shared<impl>()} {
    config.address = env_or(std::move(config.address), "CONSUL_HTTP_ADDR");
    if (config.address.empty()) config.address = "http://127.0.0.1:8500";
    config.token = env_or(std::move(config.token), "CONSUL_HTTP_TOKEN");
    // The token goes into a request header as it is: a CR or LF would split
    // the request (and leak the rest of the token into another header).
    if (std::any_of(config.token.begin(), config.token.end(), [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; }))
        throw boost::system::system_error(boost::asio::error::invalid_argument,
                                          "invalid Consul ACL token: it contains a control character");
    auto const addr = parse_address(config.address);
    config.address = addr.normalized;
    std::shared_ptr<asio::ssl::context> tls;
    if (addr.tls) {
        config.ca_file = env_or(std::move(config.ca_file), "CONSUL_CACERT");
        config.cert_file = env_or(std::move(config.cert_file), "CONSUL_CLIENT_CERT");
        config.key_file = env_or(std::move(config.key_file), "CONSUL_CLIENT_KEY");
        config.tls_server_name = env_or(std::move(config.tls_server_name), "CONSUL_TLS_SERVER_NAME");
        tls = detail::make_client_tls_context(config);
    }
    co_.state->ex = ex;
    co_.state->transport = detail::make_http_transport(
        ex, {.host = addr.host,
             .port = addr.port,
             .host_header = addr.host_header,
             .unix_path = addr.unix_path,
             .token = config.token,
             .max_idle_connections = config.max_idle_connections,
             .max_connections = config.max_connections,
             .tls = std::move(tls),
             .tls_server_name = config.tls_server_name});
    co_.state->config = std::move(config);
}

client::client(asio::any_io_executor ex, transport_factory make_transport, client_config config)
    : co_{std::make_shared<impl>()} {
    if (!make_transport) throw std::invalid_argument("tenure::consul::client: an empty transport_factory");
    config.token = env_or(std::move(config.token), "CONSUL_HTTP_TOKEN");
    co_.state->ex = ex;
    co_.state->transport = make_transport(ex, config);
    co_.state->config = std::move(config);
}

client::~client() {
    if (co_.state && co_.state->transport) co_.state->transport->close();
}

asio::any_io_executor client::get_executor() const noexcept { return co_.state->ex; }

client_config const& client::config() const noexcept { return co_.state->config; }

void client::close() { co_.state->transport->close(); }

std::size_t client::open_connections() const noexcept { return co_.state->transport->open_connections(); }

// ---- sessions ----

asio::awaitable<std::string> client::coroutines::session_create(session_request req) const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/session/create", q);
    auto const r = co_await self->send(http::verb::put, target, encode_session_request(req), self->request_deadline());
    expect_ok(r);
    co_return decode(r, http::verb::put, target, [&] {
        auto id = get_string(as_object(parse_json(r.body), "session create answer"), "ID");
        if (id.empty()) throw decode_failure{"no ID"};
        return id;
    });
}

asio::awaitable<std::optional<session_info>> client::coroutines::session_renew(std::string id) const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/session/renew/" + encode_segment(id), q);
    auto const r = co_await self->send(http::verb::put, target, {}, self->request_deadline());
    if (r.status == 404) co_return std::nullopt;
    expect_ok(r);
    co_return decode(r, http::verb::put, target, [&]() -> std::optional<session_info> {
        auto list = decode_session_list(parse_json(r.body));
        if (list.empty()) return std::nullopt;
        return std::move(list.front());
    });
}

asio::awaitable<void> client::coroutines::session_destroy(std::string id) const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/session/destroy/" + encode_segment(id), q);
    auto const r = co_await self->send(http::verb::put, target, {}, self->request_deadline());
    expect_ok(r);
}

asio::awaitable<read_result<std::optional<session_info>>> client::coroutines::session_info_get(
    std::string id, read_options opts) const {
    auto const self = state;
    query_string q;
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/session/info/" + encode_segment(id), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        read_result<std::optional<session_info>> out{std::nullopt, decode_meta(r.headers)};
        auto list = decode_session_list(parse_json(r.body));
        if (!list.empty()) out.value = std::move(list.front());
        return out;
    });
}

asio::awaitable<read_result<std::vector<session_info>>> client::coroutines::session_list(read_options opts) const {
    auto const self = state;
    query_string q;
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/session/list", q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        return read_result<std::vector<session_info>>{decode_session_list(parse_json(r.body)), decode_meta(r.headers)};
    });
}

// ---- KV ----

asio::awaitable<read_result<std::optional<kv_pair>>> client::coroutines::kv_get(
    std::string key, read_options opts) const {
    auto const self = state;
    query_string q;
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/kv/" + encode_key(key), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    if (r.status == 404) co_return read_result<std::optional<kv_pair>>{std::nullopt, decode_meta(r.headers)};
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        read_result<std::optional<kv_pair>> out{std::nullopt, decode_meta(r.headers)};
        auto list = decode_kv_list(r.body);
        if (!list.empty()) out.value = std::move(list.front());
        return out;
    });
}

// `received`, if given, is set when the answer is in: the hub counts what
// follows (the parse, the decode, its apply) as the cost of a snapshot.
asio::awaitable<read_result<std::vector<kv_pair>>> client::coroutines::kv_list(
    std::string prefix, read_options opts, detail::kv_list_skip skip,
    tenure::detail::clock::time_point* received) const {
    auto const self = state;
    query_string q;
    q.flag("recurse");
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/kv/" + encode_key(prefix), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    if (received) *received = tenure::detail::clock::now();
    if (r.status == 404) co_return read_result<std::vector<kv_pair>>{{}, decode_meta(r.headers)};
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        return read_result<std::vector<kv_pair>>{decode_kv_list(r.body, skip),
                                                 decode_meta(r.headers)};
    });
}

asio::awaitable<read_result<std::vector<std::string>>> client::coroutines::kv_keys(
    std::string prefix, std::string separator, read_options opts) const {
    auto const self = state;
    query_string q;
    q.flag("keys");
    if (!separator.empty()) q.param("separator", separator);
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/kv/" + encode_key(prefix), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    if (r.status == 404) co_return read_result<std::vector<std::string>>{{}, decode_meta(r.headers)};
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        read_result<std::vector<std::string>> out{{}, decode_meta(r.headers)};
        auto const v = parse_json(r.body);
        if (v.is_null()) return out;
        for (auto const& e : as_array(v, "key list")) {
            auto const* s = e.if_string();
            if (!s) throw decode_failure{"key list holds a value that is not a string"};
            out.value.emplace_back(*s);
        }
        return out;
    });
}

namespace {

// PUT /v1/kv/<key> answering true or false.
asio::awaitable<bool> kv_put_bool(std::shared_ptr<client::impl> self, std::string key, query_string q,
                                  std::optional<std::string> value) {
    auto const target = self->target("/v1/kv/" + encode_key(key), q);
    auto const r = co_await self->send(http::verb::put, target, value.value_or(std::string{}), self->request_deadline());
    expect_ok(r);
    co_return decode(r, http::verb::put, target, [&] { return parse_bool(r.body); });
}

}  // namespace

asio::awaitable<bool> client::coroutines::kv_put(
    std::string key, std::optional<std::string> value, put_options opts) const {
    query_string q;
    if (opts.flags != 0) q.param("flags", opts.flags);
    if (opts.cas) q.param("cas", *opts.cas);
    co_return co_await kv_put_bool(state, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::coroutines::kv_acquire(
    std::string key, std::string session, std::optional<std::string> value, std::uint64_t flags) const {
    query_string q;
    q.param("acquire", session);
    if (flags != 0) q.param("flags", flags);
    co_return co_await kv_put_bool(state, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::coroutines::kv_release(
    std::string key, std::string session, std::optional<std::string> value, std::uint64_t flags) const {
    query_string q;
    q.param("release", session);
    if (flags != 0) q.param("flags", flags);
    co_return co_await kv_put_bool(state, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::coroutines::kv_delete(std::string key, std::optional<std::uint64_t> cas) const {
    auto const self = state;
    query_string q;
    if (cas) q.param("cas", *cas);
    auto const target = self->target("/v1/kv/" + encode_key(key), q);
    auto const r = co_await self->send(http::verb::delete_, target, {}, self->request_deadline());
    expect_ok(r);
    co_return decode(r, http::verb::delete_, target, [&] { return parse_bool(r.body); });
}

asio::awaitable<void> client::coroutines::kv_delete_tree(std::string prefix) const {
    auto const self = state;
    query_string q;
    q.flag("recurse");
    auto const target = self->target("/v1/kv/" + encode_key(prefix), q);
    auto const r = co_await self->send(http::verb::delete_, target, {}, self->request_deadline());
    expect_ok(r);
}

asio::awaitable<txn_result> client::coroutines::txn(std::vector<txn_op> ops) const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/txn", q);
    auto const r = co_await self->send(http::verb::put, target, encode_txn(ops), self->request_deadline());
    if (!success(r.status) && r.status != 409) throw_status(r);
    co_return decode(r, http::verb::put, target,
                     [&] { return detail::decode_txn_result(r.body, r.status != 409, ops.size()); });
}

// ---- agent ----

asio::awaitable<agent_info> client::coroutines::agent_self() const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/agent/self", q);
    auto const r = co_await self->send(http::verb::get, target, {}, self->request_deadline());
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        auto const v = parse_json(r.body);
        auto const* cfg = as_object(v, "agent self").if_contains("Config");
        if (!cfg) throw decode_failure{"no Config"};
        auto const& c = as_object(*cfg, "Config");
        agent_info info{get_string(c, "NodeName"), get_string(c, "Datacenter")};
        if (info.node_name.empty()) throw decode_failure{"no Config.NodeName"};
        return info;
    });
}

asio::awaitable<void> client::coroutines::check_register(check_registration reg) const {
    auto const self = state;
    query_string q;
    auto const target = self->target("/v1/agent/check/register", q);
    auto const r = co_await self->send(http::verb::put, target, encode_check(reg), self->request_deadline());
    expect_ok(r);
}

namespace {

asio::awaitable<void> check_put(std::shared_ptr<client::impl> self, std::string path, std::string note) {
    query_string q;
    if (!note.empty()) q.param("note", note);
    auto const target = self->target(std::move(path), q);
    auto const r = co_await self->send(http::verb::put, target, {}, self->request_deadline());
    expect_ok(r);
}

}  // namespace

asio::awaitable<void> client::coroutines::check_pass(std::string id, std::string note) const {
    co_await check_put(state, "/v1/agent/check/pass/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::coroutines::check_warn(std::string id, std::string note) const {
    co_await check_put(state, "/v1/agent/check/warn/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::coroutines::check_fail(std::string id, std::string note) const {
    co_await check_put(state, "/v1/agent/check/fail/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::coroutines::check_deregister(std::string id) const {
    co_await check_put(state, "/v1/agent/check/deregister/" + encode_segment(id), {});
}

}  // namespace tenure::consul

namespace tenure::detail {
std::unordered_map<std::string, std::weak_ptr<void>>& client_access::watch_hubs(consul::client& c) {
    return c.co_.state->watch_hubs;
}
}  // namespace tenure::detail
