// The etcd v3 gateway's JSON, both ways (see codec.hpp).
#include "etcd/codec.hpp"

#include "net/wire.hpp"

#include <boost/json/serialize.hpp>
#include <boost/json/parse.hpp>

#include <charconv>
#include <limits>
#include <utility>

namespace tenure::etcd::detail {

namespace {

std::string b64(std::string_view bytes) { return tenure::detail::base64_encode(bytes); }

std::string i64s(std::int64_t v) { return std::to_string(v); }

char const* sort_order_name(sort_order o) {
    switch (o) {
    case sort_order::none: return "NONE";
    case sort_order::ascend: return "ASCEND";
    case sort_order::descend: return "DESCEND";
    }
    return "NONE";
}

char const* sort_target_name(sort_target t) {
    switch (t) {
    case sort_target::key: return "KEY";
    case sort_target::version: return "VERSION";
    case sort_target::create: return "CREATE";
    case sort_target::mod: return "MOD";
    case sort_target::value: return "VALUE";
    }
    return "KEY";
}

char const* compare_target_name(compare_target t) {
    switch (t) {
    case compare_target::version: return "VERSION";
    case compare_target::create: return "CREATE";
    case compare_target::mod: return "MOD";
    case compare_target::value: return "VALUE";
    case compare_target::lease: return "LEASE";
    }
    return "VERSION";
}

char const* compare_result_name(compare_result r) {
    switch (r) {
    case compare_result::equal: return "EQUAL";
    case compare_result::greater: return "GREATER";
    case compare_result::less: return "LESS";
    case compare_result::not_equal: return "NOT_EQUAL";
    }
    return "EQUAL";
}

json::object request_op_json(request_op const& op) {
    json::object o;
    if (auto const* p = std::get_if<put_op>(&op))
        o["request_put"] = put_request_json(p->key, p->value, p->options);
    else if (auto const* r = std::get_if<range_op>(&op))
        o["request_range"] = range_request_json(r->key, r->range_end, r->options);
    else if (auto const* d = std::get_if<delete_op>(&op))
        o["request_delete_range"] = delete_request_json(d->key, d->range_end, d->prev_kv);
    return o;
}

json::array request_ops_json(std::vector<request_op> const& ops) {
    json::array a;
    a.reserve(ops.size());
    for (auto const& op : ops) a.emplace_back(request_op_json(op));
    return a;
}

std::vector<key_value> decode_kvs(json::object const& o, std::string_view name) {
    std::vector<key_value> out;
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return out;
    auto const& a = as_array(*v, name);
    out.reserve(a.size());
    for (auto const& e : a) out.push_back(decode_kv(e));
    return out;
}

event decode_event(json::value const& v) {
    auto const& o = as_object(v, "watch event");
    event e;
    if (auto const* t = o.if_contains("type"); t && !t->is_null()) {
        if (auto const* s = t->if_string()) {
            if (*s == "DELETE") e.type = event_type::del;
            else if (*s == "PUT") e.type = event_type::put;
            else throw decode_failure{"unknown event type \"" + std::string(*s) + "\""};
        } else if (auto const* i = t->if_int64()) {
            if (*i == 1) e.type = event_type::del;
            else if (*i != 0) throw decode_failure{"unknown event type " + std::to_string(*i)};
        } else {
            throw decode_failure{"event type is neither a name nor a number"};
        }
    }
    if (auto const* kv = o.if_contains("kv"); kv && !kv->is_null()) e.kv = decode_kv(*kv);
    if (auto const* pkv = o.if_contains("prev_kv"); pkv && !pkv->is_null()) e.prev_kv = decode_kv(*pkv);
    return e;
}

}  // namespace

// ---- scalars ----------------------------------------------------------------------------

std::optional<std::int64_t> parse_i64(std::string_view s) noexcept {
    if (s.empty() || s.front() == '+') return std::nullopt;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || p != s.data() + s.size()) return std::nullopt;
    return v;
}

std::int64_t get_i64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* s = v->if_string()) {
        if (auto n = parse_i64(*s)) return *n;
        throw decode_failure{std::string(name) + " is not an int64: \"" + std::string(*s) + "\""};
    }
    if (auto const* i = v->if_int64()) return *i;
    if (auto const* u = v->if_uint64(); u && *u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return static_cast<std::int64_t>(*u);
    throw decode_failure{std::string(name) + " is not an int64"};
}

std::uint64_t get_u64(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return 0;
    if (auto const* s = v->if_string()) {
        if (auto n = tenure::detail::parse_u64(*s)) return *n;
        throw decode_failure{std::string(name) + " is not a uint64: \"" + std::string(*s) + "\""};
    }
    if (auto const* u = v->if_uint64()) return *u;
    if (auto const* i = v->if_int64(); i && *i >= 0) return static_cast<std::uint64_t>(*i);
    throw decode_failure{std::string(name) + " is not a uint64"};
}

std::string get_bytes(json::object const& o, std::string_view name) {
    auto const* v = o.if_contains(name);
    if (!v || v->is_null()) return {};
    auto const* s = v->if_string();
    if (!s) throw decode_failure{std::string(name) + " is not a (base64) string"};
    auto out = tenure::detail::base64_decode(*s);
    if (!out) throw decode_failure{std::string(name) + " is not padded standard base64"};
    return std::move(*out);
}

// ---- errors -----------------------------------------------------------------------------

boost::system::error_code map_grpc_error(int grpc_code, std::string_view message) {
    if (message.find("requested lease not found") != std::string_view::npos) return tenure::error::lease_not_found;
    if (message.find("required revision has been compacted") != std::string_view::npos)
        return tenure::error::etcd_compacted;
    if (grpc_code == 14) return tenure::error::etcd_unavailable;  // Unavailable
    return tenure::error::etcd_error;
}

std::optional<api_error> stream_error(json::value const& v, unsigned http_status) {
    auto const* o = v.if_object();
    if (!o) return std::nullopt;
    auto const* e = o->if_contains("error");
    if (!e) return std::nullopt;
    if (auto const* eo = e->if_object()) {
        // {"error":{"grpc_code":14,"http_code":503,"message":"...","http_status":"..."}}
        int code = 0;
        unsigned http = http_status;
        std::string msg;
        try {
            code = static_cast<int>(get_i64(*eo, "grpc_code"));
            if (http == 0) http = static_cast<unsigned>(get_u64(*eo, "http_code"));
            msg = get_string(*eo, "message");
        } catch (decode_failure const&) {
            return std::nullopt;
        }
        auto const ec = map_grpc_error(code, msg);  // before msg is moved from
        return api_error(ec, http, code, std::move(msg));
    }
    return std::nullopt;
}

api_error error_from_answer(unsigned http_status, std::string_view body) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (!ec) {
        if (auto e = stream_error(v, http_status)) return std::move(*e);
        if (auto const* o = v.if_object(); o && o->contains("code")) {
            // {"error":"<msg>","message":"<msg>","code":N} (3.4) or {"code":N,"message":..,"details":[]} (3.5+)
            try {
                int const code = static_cast<int>(get_i64(*o, "code"));
                std::string msg = get_string(*o, "message");
                if (msg.empty()) {
                    if (auto const* es = o->if_contains("error"); es && es->is_string()) msg = std::string(es->get_string());
                }
                auto const mapped = map_grpc_error(code, msg);  // before msg is moved from
                return api_error(mapped, http_status, code, std::move(msg));
            } catch (decode_failure const&) {
            }
        }
    }
    std::string_view text = body;
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
    if (text.size() > 512) text = text.substr(0, 512);
    return api_error(tenure::error::http_status, http_status, 0, std::string(text));
}

// ---- encoders ---------------------------------------------------------------------------

std::string encode_lease_grant(std::int64_t ttl, std::int64_t id) {
    json::object o;
    o["TTL"] = i64s(ttl);
    if (id != 0) o["ID"] = i64s(id);
    return json::serialize(o);
}

std::string encode_lease_id(std::int64_t id) {
    json::object o;
    o["ID"] = i64s(id);
    return json::serialize(o);
}

json::object range_request_json(std::string_view key, std::string_view range_end, range_options const& r) {
    json::object o;
    o["key"] = b64(key);
    if (!range_end.empty()) o["range_end"] = b64(range_end);
    if (r.limit != 0) o["limit"] = i64s(r.limit);
    if (r.revision != 0) o["revision"] = i64s(r.revision);
    if (r.order != sort_order::none) o["sort_order"] = sort_order_name(r.order);
    if (r.target != sort_target::key) o["sort_target"] = sort_target_name(r.target);
    if (r.serializable) o["serializable"] = true;
    if (r.keys_only) o["keys_only"] = true;
    if (r.count_only) o["count_only"] = true;
    if (r.min_mod_revision != 0) o["min_mod_revision"] = i64s(r.min_mod_revision);
    if (r.max_mod_revision != 0) o["max_mod_revision"] = i64s(r.max_mod_revision);
    if (r.min_create_revision != 0) o["min_create_revision"] = i64s(r.min_create_revision);
    if (r.max_create_revision != 0) o["max_create_revision"] = i64s(r.max_create_revision);
    return o;
}

json::object put_request_json(std::string_view key, std::string_view value, put_options const& p) {
    json::object o;
    o["key"] = b64(key);
    o["value"] = b64(value);
    if (p.lease != 0) o["lease"] = i64s(p.lease);
    if (p.prev_kv) o["prev_kv"] = true;
    if (p.ignore_value) o["ignore_value"] = true;
    if (p.ignore_lease) o["ignore_lease"] = true;
    return o;
}

json::object delete_request_json(std::string_view key, std::string_view range_end, bool prev_kv) {
    json::object o;
    o["key"] = b64(key);
    if (!range_end.empty()) o["range_end"] = b64(range_end);
    if (prev_kv) o["prev_kv"] = true;
    return o;
}

json::object compare_json(compare const& c) {
    json::object o;
    o["key"] = b64(c.key);
    o["target"] = compare_target_name(c.target);
    o["result"] = compare_result_name(c.result);
    switch (c.target) {
    case compare_target::version: o["version"] = i64s(c.number); break;
    case compare_target::create: o["create_revision"] = i64s(c.number); break;
    case compare_target::mod: o["mod_revision"] = i64s(c.number); break;
    case compare_target::value: o["value"] = b64(c.value); break;
    case compare_target::lease: o["lease"] = i64s(c.number); break;
    }
    if (!c.range_end.empty()) o["range_end"] = b64(c.range_end);
    return o;
}

std::string encode_txn(std::vector<compare> const& cmp, std::vector<request_op> const& success,
                       std::vector<request_op> const& failure) {
    json::object o;
    json::array c;
    c.reserve(cmp.size());
    for (auto const& e : cmp) c.emplace_back(compare_json(e));
    o["compare"] = std::move(c);
    o["success"] = request_ops_json(success);
    o["failure"] = request_ops_json(failure);
    return json::serialize(o);
}

std::string encode_watch_create(std::string_view key, std::string_view range_end, watch_options const& w) {
    json::object c;
    c["key"] = b64(key);
    if (!range_end.empty()) c["range_end"] = b64(range_end);
    if (w.start_revision != 0) c["start_revision"] = i64s(w.start_revision);
    if (w.progress_notify) c["progress_notify"] = true;
    if (w.prev_kv) c["prev_kv"] = true;
    if (w.no_put || w.no_delete) {
        json::array f;
        if (w.no_put) f.emplace_back("NOPUT");
        if (w.no_delete) f.emplace_back("NODELETE");
        c["filters"] = std::move(f);
    }
    json::object o;
    o["create_request"] = std::move(c);
    return json::serialize(o);
}

std::string encode_compaction(std::int64_t revision, bool physical) {
    json::object o;
    o["revision"] = i64s(revision);
    if (physical) o["physical"] = true;
    return json::serialize(o);
}

// ---- decoders ---------------------------------------------------------------------------

json::value parse_json(std::string_view body) {
    boost::system::error_code ec;
    json::value v = json::parse(body, ec);
    if (ec) throw decode_failure{"invalid JSON: " + ec.message()};
    return v;
}

response_header decode_header(json::object const& o) {
    response_header h;
    auto const* v = o.if_contains("header");
    if (!v || v->is_null()) return h;
    auto const& ho = as_object(*v, "header");
    h.cluster_id = get_u64(ho, "cluster_id");
    h.member_id = get_u64(ho, "member_id");
    h.revision = get_i64(ho, "revision");
    h.raft_term = get_u64(ho, "raft_term");
    return h;
}

key_value decode_kv(json::value const& v) {
    auto const& o = as_object(v, "key-value");
    key_value kv;
    kv.key = get_bytes(o, "key");
    kv.value = get_bytes(o, "value");
    kv.create_revision = get_i64(o, "create_revision");
    kv.mod_revision = get_i64(o, "mod_revision");
    kv.version = get_i64(o, "version");
    kv.lease = get_i64(o, "lease");
    return kv;
}

lease_grant_response decode_lease_grant(json::value const& v) {
    auto const& o = as_object(v, "lease grant answer");
    // LeaseGrantResponse has an `error` string of its own.
    if (auto msg = get_string(o, "error"); !msg.empty()) throw api_error(map_grpc_error(0, msg), 200, 0, msg);
    lease_grant_response r;
    r.header = decode_header(o);
    r.id = get_i64(o, "ID");
    r.ttl = get_i64(o, "TTL");
    if (r.id == 0) throw decode_failure{"no lease ID"};
    return r;
}

std::int64_t decode_keepalive(std::string_view body) {
    ndjson_decoder d;
    d.feed(body);
    if (!d.has_value()) throw decode_failure{"empty keep-alive answer"};
    json::value const v = d.pop();
    if (auto e = stream_error(v)) throw std::move(*e);
    auto const& o = as_object(v, "keep-alive answer");
    auto const* r = o.if_contains("result");
    if (!r) throw decode_failure{"no result in the keep-alive answer"};
    // TTL omitted: 0, the lease is unknown.
    return get_i64(as_object(*r, "keep-alive result"), "TTL");
}

std::int64_t decode_time_to_live(json::value const& v) {
    return get_i64(as_object(v, "lease time-to-live answer"), "TTL");
}

range_response decode_range(json::object const& o) {
    range_response r;
    r.header = decode_header(o);
    r.kvs = decode_kvs(o, "kvs");
    r.more = get_bool(o, "more");
    r.count = get_i64(o, "count");
    return r;
}

put_response decode_put(json::object const& o) {
    put_response r;
    r.header = decode_header(o);
    if (auto const* p = o.if_contains("prev_kv"); p && !p->is_null()) r.prev_kv = decode_kv(*p);
    return r;
}

delete_response decode_delete(json::object const& o) {
    delete_response r;
    r.header = decode_header(o);
    r.deleted = get_i64(o, "deleted");
    r.prev_kvs = decode_kvs(o, "prev_kvs");
    return r;
}

txn_response decode_txn(json::value const& v) {
    auto const& o = as_object(v, "txn answer");
    txn_response r;
    r.header = decode_header(o);
    r.succeeded = get_bool(o, "succeeded");
    if (auto const* rs = o.if_contains("responses"); rs && !rs->is_null()) {
        for (auto const& e : as_array(*rs, "responses")) {
            auto const& eo = as_object(e, "txn response");
            if (auto const* p = eo.if_contains("response_put"))
                r.responses.emplace_back(decode_put(as_object(*p, "response_put")));
            else if (auto const* g = eo.if_contains("response_range"))
                r.responses.emplace_back(decode_range(as_object(*g, "response_range")));
            else if (auto const* d = eo.if_contains("response_delete_range"))
                r.responses.emplace_back(decode_delete(as_object(*d, "response_delete_range")));
            else
                throw decode_failure{"unsupported txn response (nested txn?)"};
        }
    }
    return r;
}

member_status decode_status(json::value const& v) {
    auto const& o = as_object(v, "status answer");
    member_status s;
    s.header = decode_header(o);
    s.version = get_string(o, "version");
    s.leader = get_u64(o, "leader");
    s.db_size = get_i64(o, "dbSize");
    s.raft_index = get_u64(o, "raftIndex");
    s.raft_term = get_u64(o, "raftTerm");
    return s;
}

watch_message decode_watch_message(json::value const& v) {
    if (auto e = stream_error(v)) throw std::move(*e);
    auto const& top = as_object(v, "watch message");
    auto const* rv = top.if_contains("result");
    if (!rv) throw decode_failure{"watch message without result"};
    auto const& o = as_object(*rv, "watch result");
    watch_message m;
    m.header = decode_header(o);
    m.watch_id = get_i64(o, "watch_id");
    m.created = get_bool(o, "created");
    m.canceled = get_bool(o, "canceled");
    m.compact_revision = get_i64(o, "compact_revision");
    m.cancel_reason = get_string(o, "cancel_reason");
    if (auto const* ev = o.if_contains("events"); ev && !ev->is_null()) {
        auto const& a = as_array(*ev, "events");
        m.events.reserve(a.size());
        for (auto const& e : a) m.events.push_back(decode_event(e));
    }
    return m;
}

// ---- ndjson_decoder -----------------------------------------------------------------------

void ndjson_decoder::feed(std::string_view bytes) {
    if (failed_) throw decode_failure{"the stream already held invalid JSON"};
    while (!bytes.empty()) {
        if (!started_) {
            // Whitespace between values (the gateway's '\n', or none at all).
            std::size_t i = 0;
            while (i < bytes.size() &&
                   (bytes[i] == ' ' || bytes[i] == '\n' || bytes[i] == '\r' || bytes[i] == '\t'))
                ++i;
            bytes.remove_prefix(i);
            if (bytes.empty()) return;
            started_ = true;
        }
        boost::system::error_code ec;
        std::size_t const n = parser_.write_some(bytes.data(), bytes.size(), ec);
        if (ec) {
            failed_ = true;
            throw decode_failure{"invalid JSON in the stream: " + ec.message()};
        }
        bytes.remove_prefix(n);
        if (parser_.done()) {
            values_.push_back(parser_.release());
            parser_.reset();
            started_ = false;
        } else if (n == 0) {
            failed_ = true;  // cannot happen with a healthy parser; never spin
            throw decode_failure{"JSON stream parser made no progress"};
        }
    }
}

json::value ndjson_decoder::pop() {
    json::value v = std::move(values_.front());
    values_.pop_front();
    return v;
}

}  // namespace tenure::etcd::detail
