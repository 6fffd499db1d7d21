// tenure::consul::client: request building (Boost.URL), JSON codecs
// (Boost.JSON) and the operations, over a detail::transport (HTTP or
// in-process).
#include <tenure/consul/client.hpp>
#include "net/duration.hpp"
#include "net/wire.hpp"

#include "consul/transport.hpp"
#include "consul/client_access.hpp"

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
using detail::steady_clock;
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
    : boost::system::system_error(boost::system::error_code(ec.value(), ec.category()),
                                  api_error_what(http_status, server_message)),
      status_(http_status),
      message_(std::move(server_message)) {}

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

// ---- codecs ---------------------------------------------------------------------

namespace {

// A body this client cannot make sense of; turned into api_error
// (error::unexpected_response) with the request's description.
struct decode_failure {
    std::string what;
};

std::string_view trim(std::string_view s) {
    auto const ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

std::string b64_decode(std::string_view in) {
    auto out = tenure::detail::base64_decode(in);
    if (!out) throw decode_failure{"Value is not base64 (length " + std::to_string(in.size()) + ")"};
    return std::move(*out);
}

json::object const& as_object(json::value const& v, std::string_view what) {
    if (auto const* o = v.if_object()) return *o;
    throw decode_failure{std::string(what) + " is not a JSON object"};
}

json::array const& as_array(json::value const& v, std::string_view what) {
    if (auto const* a = v.if_array()) return *a;
    throw decode_failure{std::string(what) + " is not a JSON array"};
}

// Missing or null: empty.
std::string get_string(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return {};
    if (auto const* s = v->if_string()) return std::string(*s);
    throw decode_failure{std::string(name) + " is not a string"};
}

// Integers only, never through a double (flags use all 64 bits).
std::uint64_t get_u64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* u = v->if_uint64()) return *u;
    if (auto const* i = v->if_int64(); i && *i >= 0) return static_cast<std::uint64_t>(*i);
    throw decode_failure{std::string(name) + " is not an unsigned integer"};
}

std::int64_t get_i64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* i = v->if_int64()) return *i;
    if (auto const* u = v->if_uint64(); u && *u <= static_cast<std::uint64_t>(INT64_MAX))
        return static_cast<std::int64_t>(*u);
    throw decode_failure{std::string(name) + " is not an integer"};
}

std::vector<std::string> get_string_array(json::object const& o, std::string_view name) {
    std::vector<std::string> out;
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return out;
    for (auto const& e : as_array(*v, name)) {
        auto const* s = e.if_string();
        if (!s) throw decode_failure{std::string(name) + " holds a value that is not a string"};
        out.emplace_back(*s);
    }
    return out;
}

json::value parse_json(std::string_view body, json::storage_ptr sp = {}) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec, std::move(sp));
    if (ec) throw decode_failure{"invalid JSON: " + ec.message()};
    return v;
}

bool parse_bool(std::string_view body) {
    auto const t = trim(body);
    if (t == "true") return true;
    if (t == "false") return false;
    throw decode_failure{"expected true or false"};
}

kv_pair decode_kv(json::value const& v) {
    auto const& o = as_object(v, "KV entry");
    kv_pair p;
    p.key = get_string(o, "Key");
    if (auto const* val = o.if_contains("Value"); val && !val->is_null()) {
        auto const* s = val->if_string();
        if (!s) throw decode_failure{"Value is not a string"};
        p.value = b64_decode(*s);
    }
    p.flags = get_u64(o, "Flags");
    p.lock_index = get_u64(o, "LockIndex");
    p.session = get_string(o, "Session");
    p.create_index = get_u64(o, "CreateIndex");
    p.modify_index = get_u64(o, "ModifyIndex");
    return p;
}

std::vector<kv_pair> decode_kv_list(json::value const& v) {
    std::vector<kv_pair> out;
    if (v.is_null()) return out;
    for (auto const& e : as_array(v, "KV list")) out.push_back(decode_kv(e));
    return out;
}

session_behavior decode_behavior(std::string_view b) {
    if (b.empty() || b == "release") return session_behavior::release;
    if (b == "delete") return session_behavior::delete_keys;
    throw decode_failure{"unknown session Behavior \"" + std::string(b) + "\""};
}

session_info decode_session(json::value const& v) {
    auto const& o = as_object(v, "session");
    session_info s;
    s.id = get_string(o, "ID");
    s.name = get_string(o, "Name");
    s.node = get_string(o, "Node");
    s.lock_delay = std::chrono::nanoseconds{get_i64(o, "LockDelay")};
    s.behavior = decode_behavior(get_string(o, "Behavior"));
    if (auto const ttl = get_string(o, "TTL"); !ttl.empty()) {
        auto d = tenure::detail::parse_go_duration(ttl);
        if (!d.value) throw decode_failure{"session TTL: " + d.error};
        s.ttl = *d.value;
    }
    s.node_checks = get_string_array(o, "NodeChecks");
    if (auto const* sc = o.if_contains("ServiceChecks"); sc && !sc->is_null()) {
        for (auto const& e : as_array(*sc, "ServiceChecks"))
            s.service_checks.push_back(get_string(as_object(e, "ServiceChecks entry"), "ID"));
    }
    s.create_index = get_u64(o, "CreateIndex");
    s.modify_index = get_u64(o, "ModifyIndex");
    return s;
}

std::vector<session_info> decode_session_list(json::value const& v) {
    std::vector<session_info> out;
    if (v.is_null()) return out;
    for (auto const& e : as_array(v, "session list")) out.push_back(decode_session(e));
    return out;
}

std::string encode_session_request(session_request const& r) {
    json::object o;
    o["Name"] = r.name;
    if (!r.node.empty()) o["Node"] = r.node;
    if (r.ttl.count() > 0) o["TTL"] = tenure::detail::format_go_duration(r.ttl);
    // Always sent, 0 included (the Go api omits 0 and so gets the 15s default).
    // Milliseconds as the Go api writes them; a positive sub-millisecond delay
    // rounds up to 1ms rather than disabling the delay.
    std::int64_t ms = 0;
    if (r.lock_delay.count() > 0) {
        ms = std::chrono::duration_cast<std::chrono::milliseconds>(r.lock_delay).count();
        if (ms == 0) ms = 1;
    }
    o["LockDelay"] = std::to_string(ms) + "ms";
    o["Behavior"] = r.behavior == session_behavior::delete_keys ? "delete" : "release";
    if (r.node_checks) {
        json::array a;
        for (auto const& c : *r.node_checks) a.emplace_back(c);
        o["NodeChecks"] = std::move(a);
    }
    if (!r.service_checks.empty()) {
        json::array a;
        for (auto const& c : r.service_checks) a.emplace_back(json::object{{"ID", c}});
        o["ServiceChecks"] = std::move(a);
    }
    return json::serialize(o);
}

std::string encode_txn(std::vector<txn_op> const& ops) {
    // The JSON lives only until it is serialized: no heap for it.
    unsigned char scratch[4096];
    json::monotonic_resource mr(scratch, sizeof scratch);
    json::array a(&mr);
    a.reserve(ops.size());
    for (auto const& op : ops) {
        json::object kv(&mr);
        kv.reserve(6);
        kv["Verb"] = op.verb;
        kv["Key"] = op.key;
        if (op.value) kv["Value"] = tenure::detail::base64_encode(*op.value);
        kv["Flags"] = op.flags;
        kv["Index"] = op.index;
        kv["Session"] = op.session;
        json::object item(&mr);
        item["KV"] = std::move(kv);
        a.emplace_back(std::move(item));
    }
    return json::serialize(a);
}

std::string encode_check(check_registration const& c) {
    json::object o;
    if (!c.id.empty()) o["ID"] = c.id;
    o["Name"] = c.name;
    if (c.ttl.count() > 0) o["TTL"] = tenure::detail::format_go_duration(c.ttl);
    if (!c.status.empty()) o["Status"] = c.status;
    if (!c.notes.empty()) o["Notes"] = c.notes;
    return json::serialize(o);
}

query_meta decode_meta(http::fields const& h) {
    query_meta m;
    m.index = tenure::detail::parse_u64(trim(h["X-Consul-Index"])).value_or(0);
    if (m.index < 1) m.index = 1;
    m.known_leader = trim(h["X-Consul-KnownLeader"]) == "true";
    m.last_contact_ms = tenure::detail::parse_u64(trim(h["X-Consul-LastContact"])).value_or(0);
    return m;
}

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

    steady_clock::time_point request_deadline() const { return steady_clock::now() + config.request_timeout; }

    // Adds index/wait/consistency to `q` and returns the read's deadline.
    steady_clock::time_point read_params(query_string& q, read_options const& o) const {
        auto const mode = o.mode.value_or(config.read_consistency);
        if (mode == consistency::consistent) q.flag("consistent");
        if (mode == consistency::stale) q.flag("stale");
        if (o.index == 0) return request_deadline();  // not blocking: no wait either
        q.param("index", o.index);
        if (o.wait.count() > 0) q.param("wait", wait_ms(o.wait));
        std::chrono::nanoseconds wait = o.wait.count() > 0 ? o.wait : server_default_wait;
        wait = std::min(wait, server_max_wait);
        return steady_clock::now() + std::chrono::ceil<steady_clock::duration>(wait + wait / 16) + config.blocking_margin;
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
                                        steady_clock::time_point deadline) const {
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

client::client(asio::any_io_executor ex, client_config config) : impl_(std::make_shared<impl>()) {
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
    impl_->ex = ex;
    impl_->transport = detail::make_http_transport(
        ex, {.host = addr.host,
             .port = addr.port,
             .host_header = addr.host_header,
             .unix_path = addr.unix_path,
             .token = config.token,
             .max_idle_connections = config.max_idle_connections,
             .max_connections = config.max_connections,
             .tls = std::move(tls),
             .tls_server_name = config.tls_server_name});
    impl_->config = std::move(config);
}

client::client(asio::any_io_executor ex, transport_factory make_transport, client_config config)
    : impl_(std::make_shared<impl>()) {
    if (!make_transport) throw std::invalid_argument("tenure::consul::client: an empty transport_factory");
    config.token = env_or(std::move(config.token), "CONSUL_HTTP_TOKEN");
    impl_->ex = ex;
    impl_->transport = make_transport(ex, config);
    impl_->config = std::move(config);
}

client::~client() {
    if (impl_ && impl_->transport) impl_->transport->close();
}

asio::any_io_executor client::get_executor() const noexcept { return impl_->ex; }

client_config const& client::config() const noexcept { return impl_->config; }

void client::close() { impl_->transport->close(); }

std::size_t client::open_connections() const noexcept { return impl_->transport->open_connections(); }

// ---- sessions ----

asio::awaitable<std::string> client::session_create(session_request req) {
    auto const self = impl_;
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

asio::awaitable<std::optional<session_info>> client::session_renew(std::string id) {
    auto const self = impl_;
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

asio::awaitable<void> client::session_destroy(std::string id) {
    auto const self = impl_;
    query_string q;
    auto const target = self->target("/v1/session/destroy/" + encode_segment(id), q);
    auto const r = co_await self->send(http::verb::put, target, {}, self->request_deadline());
    expect_ok(r);
}

asio::awaitable<read_result<std::optional<session_info>>> client::session_info_get(std::string id,
                                                                                    read_options opts) {
    auto const self = impl_;
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

asio::awaitable<read_result<std::vector<session_info>>> client::session_list(read_options opts) {
    auto const self = impl_;
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

asio::awaitable<read_result<std::optional<kv_pair>>> client::kv_get(std::string key, read_options opts) {
    auto const self = impl_;
    query_string q;
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/kv/" + encode_key(key), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    if (r.status == 404) co_return read_result<std::optional<kv_pair>>{std::nullopt, decode_meta(r.headers)};
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        read_result<std::optional<kv_pair>> out{std::nullopt, decode_meta(r.headers)};
        unsigned char scratch[2048];  // the parse lives only in this call: no heap for it
        json::monotonic_resource mr(scratch, sizeof scratch);
        auto list = decode_kv_list(parse_json(r.body, &mr));
        if (!list.empty()) out.value = std::move(list.front());
        return out;
    });
}

asio::awaitable<read_result<std::vector<kv_pair>>> client::kv_list(std::string prefix, read_options opts) {
    auto const self = impl_;
    query_string q;
    q.flag("recurse");
    auto const deadline = self->read_params(q, opts);
    auto const target = self->target("/v1/kv/" + encode_key(prefix), q);
    auto const r = co_await self->send(http::verb::get, target, {}, deadline);
    if (r.status == 404) co_return read_result<std::vector<kv_pair>>{{}, decode_meta(r.headers)};
    expect_ok(r);
    co_return decode(r, http::verb::get, target, [&] {
        return read_result<std::vector<kv_pair>>{decode_kv_list(parse_json(r.body)), decode_meta(r.headers)};
    });
}

asio::awaitable<read_result<std::vector<std::string>>> client::kv_keys(std::string prefix, std::string separator,
                                                                       read_options opts) {
    auto const self = impl_;
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

asio::awaitable<bool> client::kv_put(std::string key, std::optional<std::string> value, put_options opts) {
    query_string q;
    if (opts.flags != 0) q.param("flags", opts.flags);
    if (opts.cas) q.param("cas", *opts.cas);
    co_return co_await kv_put_bool(impl_, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::kv_acquire(std::string key, std::string session, std::optional<std::string> value,
                                         std::uint64_t flags) {
    query_string q;
    q.param("acquire", session);
    if (flags != 0) q.param("flags", flags);
    co_return co_await kv_put_bool(impl_, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::kv_release(std::string key, std::string session, std::optional<std::string> value,
                                         std::uint64_t flags) {
    query_string q;
    q.param("release", session);
    if (flags != 0) q.param("flags", flags);
    co_return co_await kv_put_bool(impl_, std::move(key), std::move(q), std::move(value));
}

asio::awaitable<bool> client::kv_delete(std::string key, std::optional<std::uint64_t> cas) {
    auto const self = impl_;
    query_string q;
    if (cas) q.param("cas", *cas);
    auto const target = self->target("/v1/kv/" + encode_key(key), q);
    auto const r = co_await self->send(http::verb::delete_, target, {}, self->request_deadline());
    expect_ok(r);
    co_return decode(r, http::verb::delete_, target, [&] { return parse_bool(r.body); });
}

asio::awaitable<void> client::kv_delete_tree(std::string prefix) {
    auto const self = impl_;
    query_string q;
    q.flag("recurse");
    auto const target = self->target("/v1/kv/" + encode_key(prefix), q);
    auto const r = co_await self->send(http::verb::delete_, target, {}, self->request_deadline());
    expect_ok(r);
}

asio::awaitable<txn_result> client::txn(std::vector<txn_op> ops) {
    auto const self = impl_;
    query_string q;
    auto const target = self->target("/v1/txn", q);
    auto const r = co_await self->send(http::verb::put, target, encode_txn(ops), self->request_deadline());
    if (!success(r.status) && r.status != 409) throw_status(r);
    co_return decode(r, http::verb::put, target, [&] {
        txn_result out;
        out.committed = r.status != 409;
        unsigned char scratch[4096];  // the parse lives only in this call: no heap for it
        json::monotonic_resource mr(scratch, sizeof scratch);
        auto const v = parse_json(r.body, &mr);
        auto const& o = as_object(v, "txn answer");
        if (out.committed) {
            if (auto const* res = o.if_contains("Results"); res && !res->is_null()) {
                for (auto const& e : as_array(*res, "Results")) {
                    auto const& eo = as_object(e, "Results entry");
                    if (auto const* kv = eo.if_contains("KV"); kv && !kv->is_null()) out.results.push_back(decode_kv(*kv));
                }
            }
        } else {
            if (auto const* errs = o.if_contains("Errors"); errs && !errs->is_null()) {
                for (auto const& e : as_array(*errs, "Errors")) {
                    auto const& eo = as_object(e, "Errors entry");
                    out.errors.push_back({static_cast<std::size_t>(get_u64(eo, "OpIndex")), get_string(eo, "What")});
                }
            }
            if (out.errors.empty()) throw decode_failure{"409 without Errors"};
        }
        return out;
    });
}

// ---- agent ----

asio::awaitable<agent_info> client::agent_self() {
    auto const self = impl_;
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

asio::awaitable<void> client::check_register(check_registration reg) {
    auto const self = impl_;
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

asio::awaitable<void> client::check_pass(std::string id, std::string note) {
    co_await check_put(impl_, "/v1/agent/check/pass/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::check_warn(std::string id, std::string note) {
    co_await check_put(impl_, "/v1/agent/check/warn/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::check_fail(std::string id, std::string note) {
    co_await check_put(impl_, "/v1/agent/check/fail/" + encode_segment(id), std::move(note));
}

asio::awaitable<void> client::check_deregister(std::string id) {
    co_await check_put(impl_, "/v1/agent/check/deregister/" + encode_segment(id), {});
}

}  // namespace tenure::consul

namespace tenure::detail {
std::unordered_map<std::string, std::weak_ptr<void>>& client_access::watch_hubs(consul::client& c) {
    return c.impl_->watch_hubs;
}
}  // namespace tenure::detail
