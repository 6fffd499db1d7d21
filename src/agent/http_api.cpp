// Consul's HTTP API over the agent state machine. Status codes and text
// bodies follow Consul's agent/*_endpoint.go (see
// reference/consul-semantics.md): 400 for decode and parameter errors, 404 for
// renew of an unknown session and for KV misses, 405 with Allow, 413 for
// oversize values, 500 for state errors.
#include "agent/acl.hpp"
#include "agent/http_api.hpp"
#include "agent/metrics.hpp"
#include "agent/reply.hpp"
#include "agent/router.hpp"
#include "agent/ui_assets.hpp"
#include "agent/views.hpp"
#include "net/duration.hpp"
#include "net/wire.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>
#include <boost/url/encode.hpp>
#include <boost/url/parse.hpp>
#include <boost/url/rfc/unreserved_chars.hpp>

#include <algorithm>
#include <charconv>
#include <initializer_list>

namespace tenure::detail::agent {

namespace json = boost::json;

namespace {

constexpr std::string_view consul_version = "1.22.0";
constexpr std::size_t max_txn_ops = 64;

// ---- small helpers ----------------------------------------------------------

// Go's strconv error text, which Consul passes through as a 500 body.
std::string strconv_error(std::string_view s) {
    bool digits = !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    return "strconv.ParseUint: parsing \"" + std::string(s) + "\": " + (digits ? "value out of range" : "invalid syntax");
}

response json_response(json::value const& v) { return json_answer(http::status::ok, v); }

// Consul's query meta headers: on every GET, including 404s.
void set_meta(response& res, std::uint64_t index) {
    res.set("X-Consul-Index", std::to_string(std::max<std::uint64_t>(index, 1)));
    res.set("X-Consul-KnownLeader", "true");
    res.set("X-Consul-LastContact", "0");
}

struct decode_error {
    std::string message;
};

std::string json_kind(json::value const& v) {
    switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "bool";
    case json::kind::int64:
    case json::kind::uint64:
    case json::kind::double_: return "number";
    case json::kind::string: return "string";
    case json::kind::array: return "array";
    case json::kind::object: return "object";
    }
    return "value";
}

[[noreturn]] void type_error(json::value const& v, std::string_view field, std::string_view want) {
    throw decode_error{"json: cannot unmarshal " + json_kind(v) + " into Go struct field ." + std::string(field) +
                       " of type " + std::string(want)};
}

// Reads an optional string member (null = absent).
std::optional<std::string> get_string(json::object const& o, std::string_view name) {
    auto const* v = member(o, name);
    if (!v || v->is_null()) return std::nullopt;
    if (!v->is_string()) type_error(*v, name, "string");
    return std::string(v->as_string());
}

std::optional<std::vector<std::string>> get_string_array(json::object const& o, std::string_view name) {
    auto const* v = member(o, name);
    if (!v) return std::nullopt;
    std::vector<std::string> out;
    if (v->is_null()) return out;  // null decodes to a nil slice
    if (!v->is_array()) type_error(*v, name, "[]string");
    for (auto const& e : v->as_array()) {
        if (!e.is_string()) type_error(e, name, "string");
        out.emplace_back(e.as_string());
    }
    return out;
}

std::optional<std::uint64_t> get_u64(json::object const& o, std::string_view name) {
    auto const* v = member(o, name);
    if (!v || v->is_null()) return std::nullopt;
    if (v->is_uint64()) return v->as_uint64();
    if (v->is_int64() && v->as_int64() >= 0) return static_cast<std::uint64_t>(v->as_int64());
    type_error(*v, name, "uint64");
}

json::object const& as_object(json::value const& v, std::string_view what) {
    if (!v.is_object()) throw decode_error{"json: cannot unmarshal " + json_kind(v) + " into Go value of type " + std::string(what)};
    return v.as_object();
}

json::value parse_json(std::string_view body, json::storage_ptr sp = {}) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec, std::move(sp));
    if (ec) throw decode_error{ec.message()};
    return v;
}

// ---- JSON renderings ------------------------------------------------------------

json::object render_kv(kv_entry const& e, json::storage_ptr sp = {}) {
    json::object o(std::move(sp));
    o.reserve(8);
    o["LockIndex"] = e.lock_index;
    o["Key"] = e.key;
    o["Flags"] = e.flags;  // uint64: 16210313421097356768 must survive
    if (e.value) o["Value"] = base64_encode(*e.value);
    else o["Value"] = nullptr;
    if (!e.session.empty()) o["Session"] = e.session;
    o["CreateIndex"] = e.create_index;
    o["ModifyIndex"] = e.modify_index;
    return o;
}

json::array string_array(std::vector<std::string> const& v) {
    json::array a;
    for (auto const& s : v) a.emplace_back(s);
    return a;
}

json::object render_session(session_entry const& s) {
    json::object o;
    o["ID"] = s.id;
    o["Name"] = s.name;
    o["Node"] = s.node;
    o["LockDelay"] = s.lock_delay_ns;  // integer nanoseconds: Go decodes a time.Duration
    o["Behavior"] = s.behavior == session_behavior::release ? "release" : "delete";
    o["TTL"] = s.ttl;
    o["NodeChecks"] = string_array(s.node_checks);
    if (s.service_checks.empty()) {
        o["ServiceChecks"] = nullptr;
    } else {
        json::array sc;
        for (auto const& c : s.service_checks) sc.emplace_back(json::object{{"ID", c.id}, {"Namespace", c.ns}});
        o["ServiceChecks"] = std::move(sc);
    }
    if (!s.checks.empty()) o["Checks"] = string_array(s.checks);
    o["CreateIndex"] = s.create_index;
    o["ModifyIndex"] = s.modify_index;
    return o;
}

json::object render_check(health_check const& c) {
    json::object o;
    o["Node"] = c.node;
    o["CheckID"] = c.check_id;
    o["Name"] = c.name;
    o["Status"] = c.status;
    o["Notes"] = c.notes;
    o["Output"] = c.output;
    o["ServiceID"] = c.service_id;
    o["ServiceName"] = c.service_name;
    o["ServiceTags"] = json::array{};
    o["Type"] = c.type;
    o["Interval"] = "";
    o["Timeout"] = c.ttl.count() > 0 ? format_go_duration(c.ttl) : "";
    o["ExposedPort"] = 0;
    o["Definition"] = json::object{};
    o["CreateIndex"] = c.create_index;
    o["ModifyIndex"] = c.modify_index;
    return o;
}

json::object render_node(node_entry const& n) {
    json::object tagged, meta;
    for (auto const& [k, v] : n.tagged_addresses) tagged[k] = v;
    for (auto const& [k, v] : n.meta) meta[k] = v;
    json::object o;
    o["ID"] = n.id;
    o["Node"] = n.node;
    o["Address"] = n.address;
    o["Datacenter"] = n.datacenter;
    o["TaggedAddresses"] = std::move(tagged);
    o["Meta"] = std::move(meta);
    o["CreateIndex"] = n.create_index;
    o["ModifyIndex"] = n.modify_index;
    return o;
}

// ---- request context -------------------------------------------------------------

struct query {
    boost::urls::url_view url;

    bool has(std::string_view name) const { return url.params().contains(name); }
    std::string get(std::string_view name) const {
        auto it = url.params().find(name);
        if (it == url.params().end()) return {};
        return std::string((*it).value);
    }
    // Go's url.Values.Encode(): sorted by key, each value query-escaped.
    std::string encoded() const {
        std::vector<std::pair<std::string, std::string>> kv;
        for (auto p : url.params()) kv.emplace_back(std::string(p.key), p.has_value ? std::string(p.value) : "");
        std::stable_sort(kv.begin(), kv.end(), [](auto const& a, auto const& b) { return a.first < b.first; });
        std::string out;
        for (auto const& [k, v] : kv) {
            if (!out.empty()) out += '&';
            out += boost::urls::encode(k, boost::urls::unreserved_chars);
            out += '=';
            out += boost::urls::encode(v, boost::urls::unreserved_chars);
        }
        return out;
    }
};

// Blocking-query parameters shared by every GET that blocks.
struct block_params {
    std::uint64_t index = 0;
    nanoseconds wait{0};
};

}  // namespace

// ---- header check ---------------------------------------------------------------

std::optional<response> http_api::check_header(http::request_header<> const& header) const {
    auto const cl = header.find(http::field::content_length);
    if (cl == header.end()) return std::nullopt;
    auto len = parse_u64(cl->value());
    if (!len) return text(http::status::bad_request, "Invalid Content-Length");
    std::size_t const max_value = sm_.config().kv_max_value_size;
    std::string_view target = header.target();
    if (target.starts_with("/v1/kv/") && header.method() == http::verb::put && *len > max_value) {
        return text(http::status::payload_too_large,
                    "Request body(" + std::to_string(*len) + " bytes) too large, max size: " +
                        std::to_string(max_value) +
                        " bytes. See "
                        "https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size.");
    }
    if (*len > max_body_size() || (target.starts_with("/v1/txn") && *len > max_value)) {
        return text(http::status::payload_too_large,
                    "Request body too large, max size: " + std::to_string(max_value) + " bytes");
    }
    return std::nullopt;
}

// ---- the handler ------------------------------------------------------------------

namespace {

class handler {
public:
    handler(state_machine& sm, request const& req, boost::urls::url_view url, route const& r, time_point now,
            blocking_state& bs, agent_metrics const* metrics = nullptr, api_limits const* limits = nullptr,
            http_api::view_options const* views = nullptr)
        : sm_(sm), req_(req), route_(r), now_(now), bs_(bs), metrics_(metrics), limits_(limits),
          views_(views ? *views : http_api::view_options{}), q_{url} {}

    api_outcome run();

private:
    using methods = std::initializer_list<http::verb>;

    // Returns a 405 (or OPTIONS answer) unless the method is allowed.
    std::optional<response> check_method(methods allowed) const {
        bool ok = std::find(allowed.begin(), allowed.end(), req_.method()) != allowed.end();
        if (ok) return std::nullopt;
        std::string allow = "OPTIONS";
        for (auto m : allowed) {
            allow += ',';
            allow += std::string(http::to_string(m));
        }
        if (req_.method() == http::verb::options) {
            response res = make_response(http::status::ok, "", "");
            res.set(http::field::allow, allow);
            return res;
        }
        response res = text(http::status::method_not_allowed,
                            "method " + std::string(req_.method_string()) + " not allowed");
        res.set(http::field::allow, allow);
        return res;
    }

    // Parses ?index= and ?wait= (400 on bad values) and checks consistency flags.
    std::optional<response> parse_block(block_params& out) const {
        if (q_.has("stale") && q_.has("consistent"))
            return text(http::status::bad_request, "Cannot specify ?stale with ?consistent, conflicting semantics.");
        if (q_.has("wait")) {
            auto d = parse_go_duration(q_.get("wait"));
            if (!d.value) return text(http::status::bad_request, "Invalid wait time");
            out.wait = *d.value;
        }
        if (q_.has("index")) {
            auto v = parse_u64(q_.get("index"));
            if (!v) return text(http::status::bad_request, "Invalid index");
            out.index = *v;
        }
        return std::nullopt;
    }

    // Consul's blocking loop (blockingquery.Query): answer at once for index 0,
    // when the index passed the client's, or at the deadline; else park.
    api_outcome block_or_answer(block_params const& bp, std::uint64_t index, bool not_found,
                                std::vector<watch_target> targets, response res) {
        set_meta(res, index);
        if (bp.index == 0) return {std::move(res), std::nullopt};
        if (!bs_.deadline) {
            nanoseconds wait = bp.wait;
            if (wait.count() <= 0) wait = default_query_time;
            if (wait > max_query_time) wait = max_query_time;
            bs_.deadline = now_ + wait + sm_.random_stagger(wait / 16);
            bs_.min_index = bp.index;
        }
        // A missing key seen twice raises the floor, so writes to other keys
        // (which move the table index) do not keep waking it.
        if (not_found) {
            if (bs_.not_found_seen > 0) bs_.min_index = std::max(bs_.min_index, index);
            ++bs_.not_found_seen;
        }
        if (index > bs_.min_index || now_ >= *bs_.deadline) return {std::move(res), std::nullopt};
        return {std::nullopt, wait_request{std::move(targets), *bs_.deadline}};
    }

    std::optional<response> check_enterprise_and_dc() const {
        if (!q_.get("ns").empty() || !std::string_view(req_["X-Consul-Namespace"]).empty())
            return text(http::status::bad_request,
                        "Invalid query parameter: \"ns\" - Namespaces are a Consul Enterprise feature");
        if (!q_.get("partition").empty() || !std::string_view(req_["X-Consul-Partition"]).empty())
            return text(http::status::bad_request,
                        "Invalid query parameter: \"partition\" - Partitions are a Consul Enterprise feature");
        std::string dc = q_.get("dc");
        if (!dc.empty() && dc != sm_.config().datacenter) return text(http::status::internal_server_error, "No path to datacenter");
        return std::nullopt;
    }

    api_outcome dispatch();
    api_outcome kv();
    api_outcome kv_get(std::string const& key);
    api_outcome kv_put(std::string const& key);
    api_outcome kv_delete(std::string const& key);
    api_outcome txn();
    api_outcome session_create();
    api_outcome session_destroy(std::string const& id);
    api_outcome session_renew(std::string const& id);
    api_outcome session_list(api_endpoint which, std::string const& arg);
    api_outcome agent_self();
    api_outcome agent_metrics_answer();
    api_outcome agent_checks();
    api_outcome check_register();
    api_outcome check_mark(std::string const& id, std::string_view status);
    api_outcome check_update(std::string const& id);
    api_outcome check_deregister(std::string const& id);
    api_outcome catalog_register(bool deregister);
    api_outcome catalog_nodes();
    api_outcome health_node(std::string const& node);
    api_outcome status(std::string_view rest);
    api_outcome tenure_history();
    api_outcome tenure_sessions();
    api_outcome ui(std::string_view rest);
    // 400 for a parameter not in `known` or given twice: tenure's own
    // endpoints are strict where Consul's ignore what they do not know.
    std::optional<response> check_params(std::initializer_list<std::string_view> known) const;

    static api_outcome done(response r) { return {std::move(r), std::nullopt}; }
    static response not_found() { return text(http::status::not_found, "404 page not found\n"); }

    state_machine& sm_;
    request const& req_;
    route const& route_;
    time_point now_;
    blocking_state& bs_;
    agent_metrics const* metrics_;
    api_limits const* limits_;  // null: no limits (tests of the API alone)
    http_api::view_options views_;
    query q_;
};

api_outcome handler::run() {
    if (auto bad = check_enterprise_and_dc()) return done(std::move(*bad));
    return dispatch();
}

api_outcome handler::dispatch() {
    std::string const rest(route_.rest);
    switch (route_.endpoint) {
    case api_endpoint::kv: return kv();
    case api_endpoint::txn: return txn();
    case api_endpoint::session_create: return session_create();
    case api_endpoint::session_destroy: return session_destroy(rest);
    case api_endpoint::session_renew: return session_renew(rest);
    case api_endpoint::session_info:
    case api_endpoint::session_list:
    case api_endpoint::session_node: return session_list(route_.endpoint, rest);
    case api_endpoint::agent_self: return agent_self();
    case api_endpoint::agent_metrics: return agent_metrics_answer();
    case api_endpoint::agent_checks: return agent_checks();
    case api_endpoint::agent_check_register: return check_register();
    case api_endpoint::agent_check_pass: return check_mark(rest, check_passing);
    case api_endpoint::agent_check_warn: return check_mark(rest, check_warning);
    case api_endpoint::agent_check_fail: return check_mark(rest, check_critical);
    case api_endpoint::agent_check_update: return check_update(rest);
    case api_endpoint::agent_check_deregister: return check_deregister(rest);
    case api_endpoint::catalog_register: return catalog_register(false);
    case api_endpoint::catalog_deregister: return catalog_register(true);
    case api_endpoint::catalog_nodes: return catalog_nodes();
    case api_endpoint::health_node: return health_node(rest);
    case api_endpoint::status: return status(route_.rest);
    case api_endpoint::tenure_history: return tenure_history();
    case api_endpoint::tenure_sessions: return tenure_sessions();
    case api_endpoint::ui_root:
    case api_endpoint::ui: return ui(route_.rest);
    case api_endpoint::acl:  // answered by the ACL store, when there is one
    case api_endpoint::not_found: break;
    }
    return done(not_found());
}

// ---- KV -----------------------------------------------------------------------------

api_outcome handler::kv() {
    if (auto r = check_method({http::verb::get, http::verb::put, http::verb::delete_})) return done(std::move(*r));
    std::string const key(route_.rest);
    switch (req_.method()) {
    case http::verb::get: return kv_get(key);
    case http::verb::put: return kv_put(key);
    default: return kv_delete(key);
    }
}

api_outcome handler::kv_get(std::string const& key) {
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));

    if (q_.has("keys")) {
        std::string sep = q_.has("separator") ? q_.get("separator") : q_.get("seperator");
        auto keys = sm_.kv_keys(key, sep);
        std::uint64_t index = sm_.kv_prefix_index(key);
        bool missing = keys.empty() && !key.empty();
        response res = missing ? make_response(http::status::not_found, "", "") : [&] {
            json::array a;
            for (auto& k : keys) a.emplace_back(k);
            return json_response(a);
        }();
        return block_or_answer(bp, index, missing, {{watch_target::kind::prefix, key}}, std::move(res));
    }
    if (q_.has("recurse")) {
        auto entries = sm_.kv_list(key);
        std::uint64_t index = sm_.kv_prefix_index(key);
        response res = entries.empty() ? make_response(http::status::not_found, "", "") : [&] {
            json::array a;
            for (auto const* e : entries) a.emplace_back(render_kv(*e));
            return json_response(a);
        }();
        return block_or_answer(bp, index, entries.empty(), {{watch_target::kind::prefix, key}}, std::move(res));
    }
    if (key.empty()) return done(text(http::status::bad_request, "Missing key name"));

    auto const* e = sm_.kv_get(key);
    std::uint64_t index = sm_.kv_key_index(key);
    response res;
    if (!e) {
        res = make_response(http::status::not_found, "", "");
    } else if (q_.has("raw")) {
        res = make_response(http::status::ok, e->value.value_or(""), "text/plain");
        res.set("X-Content-Type-Options", "nosniff");
        res.set("Content-Security-Policy", "sandbox");
    } else {
        // The JSON lives only until it is serialized: no heap for it.
        unsigned char scratch[2048];
        json::monotonic_resource mr(scratch, sizeof scratch);
        json::array a(&mr);
        a.emplace_back(render_kv(*e, &mr));
        res = json_response(a);
    }
    return block_or_answer(bp, index, e == nullptr, {{watch_target::kind::key, key}}, std::move(res));
}

api_outcome handler::kv_put(std::string const& key) {
    if (key.empty()) return done(text(http::status::bad_request, "Missing key name"));
    int modes = q_.has("cas") + q_.has("acquire") + q_.has("release");
    if (modes > 1) return done(text(http::status::bad_request, "Conflicting flags: " + q_.encoded() + "\n"));

    std::uint64_t flags = 0;
    if (q_.has("flags")) {
        auto v = parse_u64(q_.get("flags"));
        if (!v) return done(text(http::status::internal_server_error, strconv_error(q_.get("flags"))));
        flags = *v;
    }
    std::optional<std::uint64_t> cas;
    if (q_.has("cas")) {
        cas = parse_u64(q_.get("cas"));
        if (!cas) return done(text(http::status::internal_server_error, strconv_error(q_.get("cas"))));
    }
    std::size_t const max_value = sm_.config().kv_max_value_size;
    if (req_.body().size() > max_value) {
        return done(text(http::status::payload_too_large,
                         "Request body(" + std::to_string(req_.body().size()) + " bytes) too large, max size: " +
                             std::to_string(max_value) +
                             " bytes. See "
                             "https://developer.hashicorp.com/docs/agent/config/config-files#kv_max_value_size."));
    }
    std::optional<std::string> value;
    if (!req_.body().empty()) value = req_.body();

    auto boolean = [](bool b) { return done(make_response(http::status::ok, b ? "true" : "false", app_json)); };
    auto state_result = [&](result<bool> r) {
        if (auto const* err = std::get_if<state_error>(&r))
            return done(text(http::status::internal_server_error, "raft apply failed: " + err->message));
        return boolean(std::get<bool>(r));
    };
    if (cas) return boolean(sm_.kv_cas(key, std::move(value), flags, *cas));
    if (q_.has("acquire")) return state_result(sm_.kv_acquire(key, std::move(value), flags, q_.get("acquire"), now_));
    if (q_.has("release")) return state_result(sm_.kv_release(key, std::move(value), flags, q_.get("release"), now_));
    sm_.kv_set(key, std::move(value), flags);
    return boolean(true);
}

api_outcome handler::kv_delete(std::string const& key) {
    if (q_.has("recurse") && q_.has("cas"))
        return done(text(http::status::bad_request, "Conflicting flags: " + q_.encoded() + "\n"));
    auto boolean = [](bool b) { return done(make_response(http::status::ok, b ? "true" : "false", app_json)); };
    if (q_.has("recurse")) {
        sm_.kv_delete_tree(key, now_);
        return boolean(true);
    }
    if (key.empty()) return done(text(http::status::bad_request, "Missing key name"));
    if (q_.has("cas")) {
        auto cas = parse_u64(q_.get("cas"));
        if (!cas) return done(text(http::status::internal_server_error, strconv_error(q_.get("cas"))));
        return boolean(sm_.kv_delete_cas(key, *cas, now_));
    }
    sm_.kv_delete(key, now_);
    return boolean(true);
}

// ---- txn ----------------------------------------------------------------------------

api_outcome handler::txn() {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    std::size_t const max_value = sm_.config().kv_max_value_size;
    if (req_.body().size() > max_value)
        return done(text(http::status::payload_too_large,
                         "Request body too large, max size: " + std::to_string(max_value) + " bytes"));

    // The request's JSON and the answer's live only in this call: no heap
    // for them unless they outgrow the scratch.
    unsigned char scratch[8192];
    json::monotonic_resource mr(scratch, sizeof scratch);
    std::vector<txn_kv_op> ops;
    try {
        json::value v = parse_json(req_.body(), &mr);
        if (!v.is_array()) throw decode_error{"json: cannot unmarshal " + json_kind(v) + " into Go value of type api.TxnOps"};
        auto const& arr = v.as_array();
        if (arr.size() > max_txn_ops)
            return done(text(http::status::payload_too_large, "Transaction contains too many operations (" +
                                                                  std::to_string(arr.size()) + " > " +
                                                                  std::to_string(max_txn_ops) + ")"));
        for (auto const& item : arr) {
            auto const& o = as_object(item, "api.TxnOp");
            auto const* kvv = member(o, "KV");
            if (!kvv || kvv->is_null())
                throw decode_error{"tenure agent supports only KV operations in transactions"};
            auto const& kv = as_object(*kvv, "api.KVTxnOp");
            txn_kv_op op;
            op.verb = get_string(kv, "Verb").value_or("");
            op.key = get_string(kv, "Key").value_or("");
            if (auto s = get_string(kv, "Value")) {
                auto decoded = base64_decode(*s);
                if (!decoded) throw decode_error{"failed to decode value: illegal base64 data"};
                if (decoded->size() > max_value)
                    return done(text(http::status::payload_too_large,
                                     "Value for key \"" + op.key + "\" is too large (" +
                                         std::to_string(decoded->size()) + " > " + std::to_string(max_value) +
                                         " bytes)"));
                op.value = std::move(*decoded);
            }
            op.flags = get_u64(kv, "Flags").value_or(0);
            op.index = get_u64(kv, "Index").value_or(0);
            op.session = get_string(kv, "Session").value_or("");
            ops.push_back(std::move(op));
        }
    } catch (decode_error const& e) {
        return done(text(http::status::bad_request, "Failed to parse body: " + e.message));
    }
    // The key limit needs the decoded operations: checked here, before anything changes.
    if (limits_)
        if (auto refused = check_txn_limits(*limits_, sm_, ops)) return done(std::move(*refused));

    bool writes = std::any_of(ops.begin(), ops.end(), [](auto const& op) { return !is_read_verb(op.verb); });
    txn_outcome out = sm_.txn(ops, now_);
    json::object body(&mr);
    http::status st = http::status::ok;
    if (out.errors.empty()) {
        json::array results(&mr);
        for (auto const& e : out.results) {
            json::object kv(&mr);
            kv["KV"] = render_kv(e, &mr);
            results.emplace_back(std::move(kv));
        }
        body["Results"] = std::move(results);
        body["Errors"] = nullptr;
    } else {
        json::array errors(&mr);
        for (auto const& e : out.errors) {
            json::object err(&mr);
            err["OpIndex"] = e.op_index;
            err["What"] = e.what;
            errors.emplace_back(std::move(err));
        }
        body["Results"] = nullptr;
        body["Errors"] = std::move(errors);
        st = http::status::conflict;
    }
    response res = make_response(st, json::serialize(body), app_json);
    if (!writes) {
        res.set("X-Consul-KnownLeader", "true");
        res.set("X-Consul-LastContact", "0");
    }
    return done(std::move(res));
}

// ---- sessions -----------------------------------------------------------------------

namespace {

// LockDelay: a duration string or a number of nanoseconds; below 1000 it
// means seconds (structs.go lockDelayMinThreshold).
std::int64_t decode_lock_delay(json::value const& ld) {
    std::int64_t ns = 0;
    if (ld.is_string()) {
        auto d = parse_go_duration(ld.as_string());
        if (!d.value) throw decode_error{d.error};
        ns = d.value->count();
    } else if (ld.is_int64()) {
        ns = ld.as_int64();
    } else if (ld.is_number()) {
        // A double (or a uint64 past int64) must fit a Go duration;
        // casting one that does not is undefined (found by fuzz_agent_http).
        double const d = ld.to_number<double>();
        if (!(d >= -9.2e18 && d <= 9.2e18)) throw decode_error{"LockDelay out of range for time.Duration"};
        ns = static_cast<std::int64_t>(d);
    } else {
        type_error(ld, "LockDelay", "time.Duration");
    }
    if (ns < 0) throw decode_error{"LockDelay must not be negative"};
    if (ns < 1000) ns *= 1'000'000'000;
    return ns;
}

// The body of PUT /v1/session/create (structs.Session); throws decode_error.
session_create_request decode_session_create(std::string_view body) {
    session_create_request sr;
    json::value v = parse_json(body);
    auto const& o = as_object(v, "structs.Session");
    sr.name = get_string(o, "Name");
    sr.node = get_string(o, "Node");
    sr.behavior = get_string(o, "Behavior");
    sr.ttl = get_string(o, "TTL");
    sr.checks = get_string_array(o, "Checks");
    sr.node_checks = get_string_array(o, "NodeChecks");
    if (auto const* sc = member(o, "ServiceChecks"); sc && !sc->is_null()) {
        if (!sc->is_array()) type_error(*sc, "ServiceChecks", "[]structs.ServiceCheck");
        std::vector<service_check_ref> refs;
        for (auto const& e : sc->as_array()) {
            auto const& so = as_object(e, "structs.ServiceCheck");
            refs.push_back({get_string(so, "ID").value_or(""), get_string(so, "Namespace").value_or("")});
        }
        sr.service_checks = std::move(refs);
    }
    if (auto const* ld = member(o, "LockDelay"); ld && !ld->is_null()) sr.lock_delay_ns = decode_lock_delay(*ld);
    return sr;
}

}  // namespace

api_outcome handler::session_create() {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    session_create_request sr;
    if (!req_.body().empty()) {
        try {
            sr = decode_session_create(req_.body());
        } catch (decode_error const& e) {
            return done(text(http::status::bad_request, "Request decode failed: " + e.message));
        } catch (std::exception const& e) {
            return done(text(http::status::bad_request, std::string("Request decode failed: ") + e.what()));
        }
    }
    auto r = sm_.session_create(sr, now_);
    if (auto const* err = std::get_if<state_error>(&r))
        return done(text(http::status::internal_server_error, err->message));
    return done(json_response(json::object{{"ID", std::get<std::string>(r)}}));
}

api_outcome handler::session_destroy(std::string const& id) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    if (id.empty()) return done(text(http::status::bad_request, "Missing session"));
    sm_.session_destroy(id, now_);
    return done(make_response(http::status::ok, "true", app_json));
}

api_outcome handler::session_renew(std::string const& id) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    if (id.empty()) return done(text(http::status::bad_request, "Missing session"));
    auto s = sm_.session_renew(id, now_);
    if (!s) return done(text(http::status::not_found, "Session id '" + id + "' not found"));
    return done(json_response(json::array{render_session(*s)}));
}

// info/<id>, list and node/<node>: blocking lists of sessions.
api_outcome handler::session_list(api_endpoint which, std::string const& arg) {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    if (which == api_endpoint::session_info && arg.empty())
        return done(text(http::status::bad_request, "Missing session"));
    if (which == api_endpoint::session_node && arg.empty())
        return done(text(http::status::bad_request, "Missing node name"));
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));
    std::vector<session_entry const*> list;
    if (which == api_endpoint::session_info) {
        if (auto const* s = sm_.session_get(arg)) list.push_back(s);
    } else if (which == api_endpoint::session_node) {
        list = sm_.session_list_node(arg);
    } else {
        list = sm_.session_list();
    }
    json::array a;
    for (auto const* s : list) a.emplace_back(render_session(*s));
    return block_or_answer(bp, sm_.sessions_index(), false, {{watch_target::kind::sessions, {}}}, json_response(a));
}

// ---- agent ----------------------------------------------------------------------------

api_outcome handler::agent_self() {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    auto const& cfg = sm_.config();
    auto const* self = sm_.node_get(cfg.node_name);
    json::object config{{"Datacenter", cfg.datacenter},
                        {"PrimaryDatacenter", cfg.datacenter},
                        {"NodeName", cfg.node_name},
                        {"NodeID", self ? self->id : std::string{}},
                        {"Server", true},
                        {"Revision", "tenure"},
                        {"Version", consul_version}};
    json::object member_obj{{"Name", cfg.node_name},
                            {"Addr", cfg.address},
                            {"Port", 8301},
                            {"Tags", json::object{{"dc", cfg.datacenter}, {"role", "consul"}}},
                            {"Status", 1}};
    return done(json_response(json::object{{"Config", std::move(config)},
                                           {"Member", std::move(member_obj)},
                                           {"Meta", json::object{}},
                                           {"Stats", json::object{}}}));
}

api_outcome handler::agent_metrics_answer() {
    if (!metrics_) return done(not_found());  // metrics.hpp
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    if (q_.get("format") == "prometheus")
        return done(make_response(http::status::ok, metrics_->prometheus(sm_), "text/plain; version=0.0.4; charset=utf-8"));
    return done(make_response(http::status::ok, metrics_->consul_json(sm_), app_json));
}

api_outcome handler::agent_checks() {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    json::object o;
    for (auto const* c : sm_.agent_checks()) o[c->check_id] = render_check(*c);
    return done(json_response(o));
}

namespace {

// The body of PUT /v1/agent/check/register (structs.CheckDefinition); throws decode_error.
health_check decode_check_definition(std::string_view body) {
    health_check c;
    json::value v = parse_json(body.empty() ? std::string_view("{}") : body);
    auto const& o = as_object(v, "structs.CheckDefinition");
    c.name = get_string(o, "Name").value_or("");
    c.check_id = get_string(o, "CheckID").value_or(get_string(o, "ID").value_or(""));
    c.notes = get_string(o, "Notes").value_or("");
    c.status = get_string(o, "Status").value_or("");
    c.service_id = get_string(o, "ServiceID").value_or("");
    if (auto ttl = get_string(o, "TTL")) {
        auto d = parse_go_duration(*ttl);
        if (!d.value) throw decode_error{d.error};
        c.ttl = *d.value;
    }
    return c;
}

response unknown_check(std::string const& id) {
    return text(http::status::not_found,
                "Unknown check ID \"" + id + "\". Ensure that the check ID is passed, not the check name.");
}

}  // namespace

api_outcome handler::check_register() {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    health_check c;
    try {
        c = decode_check_definition(req_.body());
    } catch (decode_error const& e) {
        return done(text(http::status::bad_request, "Request decode failed: " + e.message));
    }
    if (c.name.empty()) return done(text(http::status::bad_request, "Missing check name"));
    if (!c.status.empty() && c.status != check_passing && c.status != check_warning && c.status != check_critical)
        return done(text(http::status::bad_request, "Bad check status"));
    if (!c.service_id.empty())
        return done(text(http::status::bad_request, "ServiceID \"" + c.service_id + "\" does not exist"));
    if (c.ttl.count() <= 0)
        return done(text(http::status::bad_request, "Must provide a TTL: the tenure agent runs TTL checks only"));
    c.type = "ttl";
    sm_.agent_check_register(std::move(c), now_);
    return done(make_response(http::status::ok, "", ""));
}

// check/pass/<id>, check/warn/<id>, check/fail/<id>.
api_outcome handler::check_mark(std::string const& id, std::string_view status) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    if (!sm_.agent_check_update(id, status, q_.get("note"), now_)) return done(unknown_check(id));
    return done(make_response(http::status::ok, "", ""));
}

api_outcome handler::check_update(std::string const& id) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    std::string status, output;
    try {
        json::value v = parse_json(req_.body());
        auto const& o = as_object(v, "agent.checkUpdate");
        status = get_string(o, "Status").value_or("");
        output = get_string(o, "Output").value_or("");
    } catch (decode_error const& e) {
        return done(text(http::status::bad_request, "Request decode failed: " + e.message));
    }
    if (status != check_passing && status != check_warning && status != check_critical)
        return done(text(http::status::bad_request, "Invalid check status: '" + status + "'"));
    if (!sm_.agent_check_update(id, status, std::move(output), now_)) return done(unknown_check(id));
    return done(make_response(http::status::ok, "", ""));
}

api_outcome handler::check_deregister(std::string const& id) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    if (!sm_.agent_check_deregister(id, now_)) return done(unknown_check(id));
    return done(make_response(http::status::ok, "", ""));
}

// ---- catalog, health, status --------------------------------------------------------------

namespace {
health_check decode_check(json::object const& o) {
    health_check c;
    c.node = get_string(o, "Node").value_or("");
    c.check_id = get_string(o, "CheckID").value_or("");
    c.name = get_string(o, "Name").value_or("");
    c.status = get_string(o, "Status").value_or("");
    c.notes = get_string(o, "Notes").value_or("");
    c.output = get_string(o, "Output").value_or("");
    c.service_id = get_string(o, "ServiceID").value_or("");
    c.service_name = get_string(o, "ServiceName").value_or("");
    return c;
}

std::map<std::string, std::string> decode_string_map(json::object const& o, std::string_view name) {
    std::map<std::string, std::string> out;
    auto const* v = member(o, name);
    if (!v || v->is_null()) return out;
    if (!v->is_object()) type_error(*v, name, "map[string]string");
    for (auto const& kv : v->as_object()) {
        if (!kv.value().is_string()) type_error(kv.value(), name, "string");
        out.emplace(std::string(kv.key()), std::string(kv.value().as_string()));
    }
    return out;
}
}  // namespace

api_outcome handler::catalog_register(bool deregister) {
    if (auto r = check_method({http::verb::put})) return done(std::move(*r));
    node_entry node;
    std::vector<health_check> checks;
    std::optional<std::string> check_id;
    try {
        json::value v = parse_json(req_.body());
        auto const& o = as_object(v, "structs.RegisterRequest");
        node.node = get_string(o, "Node").value_or("");
        node.id = get_string(o, "ID").value_or("");
        node.address = get_string(o, "Address").value_or("");
        node.datacenter = get_string(o, "Datacenter").value_or("");
        node.tagged_addresses = decode_string_map(o, "TaggedAddresses");
        node.meta = decode_string_map(o, "NodeMeta");
        check_id = get_string(o, "CheckID");
        if (auto const* c = member(o, "Check"); c && !c->is_null())
            checks.push_back(decode_check(as_object(*c, "structs.HealthCheck")));
        if (auto const* cs = member(o, "Checks"); cs && !cs->is_null()) {
            if (!cs->is_array()) type_error(*cs, "Checks", "structs.HealthChecks");
            for (auto const& c : cs->as_array()) checks.push_back(decode_check(as_object(c, "structs.HealthCheck")));
        }
    } catch (decode_error const& e) {
        return done(text(http::status::bad_request, "Request decode failed: " + e.message));
    }
    if (node.node.empty()) return done(text(http::status::bad_request, "Must provide node"));
    if (!node.datacenter.empty() && node.datacenter != sm_.config().datacenter)
        return done(text(http::status::internal_server_error, "No path to datacenter"));
    if (deregister) {
        if (check_id && check_id->empty()) check_id.reset();
        sm_.catalog_deregister(node.node, check_id, now_);
        return done(make_response(http::status::ok, "true", app_json));
    }
    if (node.address.empty()) return done(text(http::status::bad_request, "Must provide address"));
    for (auto const& c : checks) {
        if (!c.status.empty() && c.status != check_passing && c.status != check_warning &&
            c.status != check_critical && c.status != check_maintenance)
            return done(text(http::status::bad_request, "Invalid check status: '" + c.status + "'"));
        if (!c.node.empty() && c.node != node.node)
            return done(text(http::status::internal_server_error,
                             "Node '" + c.node + "' for check '" + c.check_id + "' does not match node of registration"));
    }
    node.datacenter = sm_.config().datacenter;
    sm_.catalog_register(std::move(node), std::move(checks), now_);
    return done(make_response(http::status::ok, "true", app_json));
}

api_outcome handler::catalog_nodes() {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));
    json::array a;
    for (auto const* n : sm_.node_list()) a.emplace_back(render_node(*n));
    return block_or_answer(bp, sm_.nodes_index(), false, {{watch_target::kind::nodes, {}}}, json_response(a));
}

api_outcome handler::health_node(std::string const& node) {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    if (node.empty()) return done(text(http::status::bad_request, "Missing node name"));
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));
    json::array a;
    for (auto const* c : sm_.node_checks(node)) a.emplace_back(render_check(*c));
    return block_or_answer(bp, sm_.checks_index(), false, {{watch_target::kind::checks, {}}}, json_response(a));
}

api_outcome handler::status(std::string_view rest) {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    std::string self = sm_.config().address + ":8300";
    if (rest == "leader") return done(json_response(json::value(self)));
    if (rest == "peers") return done(json_response(json::array{json::value(self)}));
    return done(text(http::status::not_found, "404 page not found\n"));
}

// ---- tenure's own endpoints (views.hpp) and the UI -----------------------------------

// The parameters every read may carry (ACL token, consistency modes).
constexpr std::string_view common_params[] = {"token", "dc", "stale", "consistent", "cached"};

std::optional<response> handler::check_params(std::initializer_list<std::string_view> known) const {
    std::vector<std::string> seen;
    for (auto const p : q_.url.params()) {  // decoded: each `p` owns its strings
        std::string const& k = p.key;
        bool const ok = std::find(known.begin(), known.end(), k) != known.end() ||
                        std::find(std::begin(common_params), std::end(common_params), k) != std::end(common_params);
        if (!ok) return text(http::status::bad_request, "Invalid query parameter: \"" + k + "\"");
        if (std::find(seen.begin(), seen.end(), k) != seen.end())
            return text(http::status::bad_request, "Query parameter \"" + k + "\" given more than once");
        seen.push_back(k);
    }
    return std::nullopt;
}

api_outcome handler::tenure_history() {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    if (auto bad = check_params({"key", "prefix", "terms", "index", "wait"})) return done(std::move(*bad));
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));
    history_query hq;
    if (q_.has("key") && q_.has("prefix"))
        return done(text(http::status::bad_request, "Cannot specify both ?key and ?prefix"));
    if (q_.has("key")) {
        hq.key = q_.get("key");
        if (hq.key->empty()) return done(text(http::status::bad_request, "Missing key: ?key= wants a key name"));
    }
    hq.prefix = q_.get("prefix");
    if (q_.has("terms")) {
        std::size_t const cap = std::max<std::size_t>(sm_.history().capacity(), 1);
        auto const n = parse_u64(q_.get("terms"));
        if (!n || *n == 0 || *n > cap)
            return done(text(http::status::bad_request, "Invalid terms: \"" + q_.get("terms") + "\" (want 1 to " +
                                                            std::to_string(cap) + ")"));
        hq.terms = static_cast<std::size_t>(*n);
    }
    // Every change of a key's holder is a write to the key, so the KV
    // indexes and watches of Consul's own reads cover the history.
    auto res = json_response(render_history(sm_, hq, views_.wall, now_));
    if (hq.key)
        return block_or_answer(bp, sm_.kv_key_index(*hq.key), sm_.kv_get(*hq.key) == nullptr,
                               {{watch_target::kind::key, *hq.key}}, std::move(res));
    return block_or_answer(bp, sm_.kv_prefix_index(hq.prefix), false, {{watch_target::kind::prefix, hq.prefix}},
                           std::move(res));
}

api_outcome handler::tenure_sessions() {
    if (auto r = check_method({http::verb::get})) return done(std::move(*r));
    if (auto bad = check_params({"index", "wait"})) return done(std::move(*bad));
    block_params bp;
    if (auto bad = parse_block(bp)) return done(std::move(*bad));
    return block_or_answer(bp, sessions_view_index(sm_), false,
                           {{watch_target::kind::sessions, {}},
                            {watch_target::kind::checks, {}},
                            {watch_target::kind::renewals, {}}},
                           json_response(render_sessions_view(sm_, views_.wall, now_)));
}

// The page at /ui/ (agent_options::ui): three files built into the binary.
api_outcome handler::ui(std::string_view rest) {
    if (!views_.ui) return done(not_found());
    if (auto r = check_method({http::verb::get, http::verb::head})) return done(std::move(*r));
    if (route_.endpoint == api_endpoint::ui_root) {
        response res = make_response(http::status::moved_permanently, "", "");
        res.set(http::field::location, "/ui/");
        return done(std::move(res));
    }
    auto const* asset = find_ui_asset(rest.empty() ? "index.html" : rest);
    if (!asset) return done(not_found());
    response res = make_response(http::status::ok, std::string(asset->body), asset->content_type);
    // The page loads nothing from elsewhere, and nothing may frame it.
    res.set("Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'");
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Referrer-Policy", "no-referrer");
    res.set(http::field::cache_control, "no-cache");
    return done(std::move(res));
}

}  // namespace

api_outcome http_api::handle(request const& req, time_point now, blocking_state& bs) {
    try {
        // ACLs first (an unauthorised caller learns nothing about limits),
        // then limits; both refuse before anything changes.
        // The request is routed once (router.hpp), for the ACL check and the
        // endpoint alike.
        auto parsed = boost::urls::parse_origin_form(req.target());
        if (!parsed) return {text(http::status::bad_request, "Invalid request target"), std::nullopt};
        std::string const path = parsed->path();
        route const r = route_request(req.method(), path, parsed->params());
        acl_filter filter;
        if (acl_)
            if (auto refused = acl_->authorize(req, r, sm_, filter)) return {std::move(*refused), std::nullopt};
        if (auto refused = check_limits(limits_, sm_, req, r, parsed->params()))
            return {std::move(*refused), std::nullopt};
        api_outcome out = handler(sm_, req, *parsed, r, now, bs, metrics_, &limits_, &views_).run();
        if (out.res) acl_store::apply(filter, *out.res);
        return out;
    } catch (std::exception const& e) {
        // Defensive: a decoding corner not caught above must not take the agent down.
        return {text(http::status::bad_request, std::string("Bad request: ") + e.what()), std::nullopt};
    }
}

}  // namespace tenure::detail::agent
