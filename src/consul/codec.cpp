// Consul's JSON wire format, both ways (see codec.hpp).
#include "consul/codec.hpp"

#include "net/duration.hpp"
#include "net/wire.hpp"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/serialize.hpp>

#include <cstdint>

namespace tenure::consul::detail {

namespace json = boost::json;
namespace http = boost::beast::http;

std::string_view trim(std::string_view s) {
    auto const ws = [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

namespace {

std::string b64_decode(std::string_view in) {
    auto out = tenure::detail::base64_decode(in);
    if (!out) throw decode_failure{"Value is not base64 (length " + std::to_string(in.size()) + ")"};
    return std::move(*out);
}

}  // namespace

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
    auto const& list = as_array(v, "KV list");
    out.reserve(list.size());
    for (auto const& e : list) out.push_back(decode_kv(e));
    return out;
}

std::vector<kv_pair> decode_kv_list(json::value const& v, kv_list_skip const& skip) {
    if (!skip) return decode_kv_list(v);
    std::vector<kv_pair> out;
    if (v.is_null()) return out;
    for (auto const& e : as_array(v, "KV list")) {
        auto const& o = as_object(e, "KV entry");
        auto const* key = o.if_contains("Key");
        auto const* k = key ? key->if_string() : nullptr;
        if (k && skip(std::string_view(k->data(), k->size()), get_u64(o, "ModifyIndex"))) continue;
        out.push_back(decode_kv(e));
    }
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

txn_result decode_txn_result(std::string_view body, bool committed) {
    txn_result out;
    out.committed = committed;
    unsigned char scratch[4096];  // the parse lives only in this call: no heap for it
    json::monotonic_resource mr(scratch, sizeof scratch);
    auto const v = parse_json(body, &mr);
    auto const& o = as_object(v, "txn answer");
    if (out.committed) {
        if (auto const* res = o.if_contains("Results"); res && !res->is_null()) {
            auto const& results = as_array(*res, "Results");
            out.results.reserve(results.size());
            for (auto const& e : results) {
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
}

}  // namespace tenure::consul::detail
