// ACLs of the embedded agent (include/tenure/detail/agent/acl.hpp).
//
// The checks sit in front of the socket-free API: authorize() carries out the
// ACL requirement the router (router.hpp) gave the request and refuses what
// the token may not do; apply() strips from list answers what it may not
// read, as Consul's ACL filters do. Keeping them here leaves the endpoints alone.
#include "agent/acl.hpp"
#include "agent/reply.hpp"
#include "agent/router.hpp"
#include "net/strings.hpp"

#include <boost/beast/http/field.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <algorithm>
#include <array>
#include <cstdio>

namespace tenure::detail::agent {

namespace json = boost::json;
namespace http = boost::beast::http;

std::string_view to_string(acl_access a) noexcept {
    switch (a) {
    case acl_access::deny: return "deny";
    case acl_access::read: return "read";
    case acl_access::write: return "write";
    }
    return "deny";
}

std::string_view to_string(acl_resource r) noexcept {
    switch (r) {
    case acl_resource::key: return "key";
    case acl_resource::session: return "session";
    case acl_resource::node: return "node";
    case acl_resource::agent: return "agent";
    case acl_resource::acl: return "acl";
    }
    return "unknown";
}

namespace {

std::optional<std::string> string_member(json::object const& o, std::string_view name) {
    auto const* v = member(o, name);
    if (!v || !v->is_string()) return std::nullopt;
    return std::string(v->as_string());
}

// Go's %q for the names in denial messages.
std::string quoted(std::string_view s) {
    std::string out = "\"";
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += static_cast<char>(c);
        }
    }
    return out + "\"";
}

// 128 random bits from OpenSSL's CSPRNG, formatted as a UUID: secrets must not
// come from the state machine's (seedable, predictable) generator.
std::string random_uuid() {
    std::array<unsigned char, 16> b{};
    if (RAND_bytes(b.data(), static_cast<int>(b.size())) != 1) throw std::runtime_error("RAND_bytes failed");
    b[6] = static_cast<unsigned char>((b[6] & 0x0f) | 0x40);
    b[8] = static_cast<unsigned char>((b[8] & 0x3f) | 0x80);
    char out[37];
    std::snprintf(out, sizeof out, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
                  b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    return out;
}

// Deny beats write beats read (Consul's takesPrecedenceOver).
acl_access stronger(acl_access a, acl_access b) {
    if (a == acl_access::deny || b == acl_access::deny) return acl_access::deny;
    if (a == acl_access::write || b == acl_access::write) return acl_access::write;
    return acl_access::read;
}

acl_access parse_access(json::value const& v, std::string const& where) {
    json::value const* p = &v;
    if (v.is_object()) {
        p = member(v.as_object(), "policy");
        if (!p) throw acl_config_error(where + ": missing \"policy\"");
        if (v.as_object().size() != 1)
            throw acl_config_error(where + ": only \"policy\" is supported (no \"intentions\" or \"Intentions\")");
    }
    if (!p->is_string()) throw acl_config_error(where + ": the policy must be a string (read, write or deny)");
    std::string_view s = p->as_string();
    if (s == "read") return acl_access::read;
    if (s == "write") return acl_access::write;
    if (s == "deny") return acl_access::deny;
    throw acl_config_error(where + ": unknown policy \"" + std::string(s) + "\" (read, write or deny)");
}

json::value parse_json_text(std::string_view s, std::string const& what) {
    boost::system::error_code ec;
    json::value v = json::parse(s, ec);
    if (ec) throw acl_config_error(what + ": not valid JSON (" + ec.message() + ")");
    return v;
}

}  // namespace

// ---- rules ------------------------------------------------------------------------

acl_rules acl_rules::from_json(json::value const& in) {
    json::value parsed;
    json::value const* v = &in;
    if (in.is_string()) {
        // Consul's Rules field is a string (HCL or JSON); tenure reads the JSON form.
        if (in.as_string().empty()) return {};
        parsed = parse_json_text(in.as_string(), "rules (tenure reads Consul's JSON rule syntax, not HCL)");
        v = &parsed;
    }
    if (v->is_null()) return {};
    if (!v->is_object()) throw acl_config_error("rules must be a JSON object");
    acl_rules out;
    for (auto const& kv : v->as_object()) {
        std::string const kind(kv.key());
        if (kind == "acl") {
            out.acl = parse_access(kv.value(), "rules: acl");
            continue;
        }
        table* t = nullptr;
        bool prefix = false;
        for (auto [name, tab] : {std::pair{"key", &out.key}, std::pair{"session", &out.session},
                                 std::pair{"node", &out.node}, std::pair{"agent", &out.agent}}) {
            if (kind == name) t = tab;
            if (kind == std::string(name) + "_prefix") t = tab, prefix = true;
        }
        if (!t)
            throw acl_config_error("rules: unsupported rule \"" + kind +
                                   "\" (tenure's agent knows key, key_prefix, session, session_prefix, node, "
                                   "node_prefix, agent, agent_prefix and acl)");
        if (!kv.value().is_object())
            throw acl_config_error("rules: \"" + kind + "\" must map names to policies");
        auto& target = prefix ? t->prefix : t->exact;
        for (auto const& rule : kv.value().as_object()) {
            std::string name(rule.key());
            auto a = parse_access(rule.value(), "rules: " + kind + " " + quoted(name));
            auto [it, fresh] = target.emplace(name, a);
            if (!fresh) it->second = stronger(it->second, a);
        }
    }
    return out;
}

void acl_rules::merge(acl_rules const& other) {
    auto merge_map = [](auto& into, auto const& from) {
        for (auto const& [name, a] : from) {
            auto [it, fresh] = into.emplace(name, a);
            if (!fresh) it->second = stronger(it->second, a);
        }
    };
    for (auto [into, from] : {std::pair{&key, &other.key}, std::pair{&session, &other.session},
                              std::pair{&node, &other.node}, std::pair{&agent, &other.agent}}) {
        merge_map(into->exact, from->exact);
        merge_map(into->prefix, from->prefix);
    }
    if (other.acl) acl = acl ? stronger(*acl, *other.acl) : *other.acl;
}

json::object acl_rules::to_json() const {
    json::object o;
    auto put = [&](std::string const& kind, auto const& m) {
        if (m.empty()) return;
        json::object rules;
        for (auto const& [name, a] : m) rules[name] = json::object{{"policy", to_string(a)}};
        o[kind] = std::move(rules);
    };
    for (auto [name, t] : {std::pair{"key", &key}, std::pair{"session", &session}, std::pair{"node", &node},
                           std::pair{"agent", &agent}}) {
        put(name, t->exact);
        put(std::string(name) + "_prefix", t->prefix);
    }
    if (acl) o["acl"] = to_string(*acl);
    return o;
}

// ---- authorizer -------------------------------------------------------------------

acl_access acl_authorizer::level(acl_resource r, std::string_view name) const {
    if (management_) return acl_access::write;
    acl_rules::table const* t = nullptr;
    switch (r) {
    case acl_resource::key: t = &rules_.key; break;
    case acl_resource::session: t = &rules_.session; break;
    case acl_resource::node: t = &rules_.node; break;
    case acl_resource::agent: t = &rules_.agent; break;
    case acl_resource::acl:
        // The default policy never grants ACL management (Consul's allow-all
        // authorizer denies acl:read and acl:write too).
        return rules_.acl.value_or(acl_access::deny);
    }
    if (auto it = t->exact.find(name); it != t->exact.end()) return it->second;
    std::optional<acl_access> best;
    std::size_t best_len = 0;
    for (auto const& [prefix, a] : t->prefix) {
        if (!name.starts_with(prefix)) continue;
        if (!best || prefix.size() >= best_len) {
            best = a;
            best_len = prefix.size();
        }
    }
    return best.value_or(default_);
}

bool acl_authorizer::allowed(acl_resource r, std::string_view name, acl_access want) const {
    acl_access const have = level(r, name);
    if (want == acl_access::read) return have == acl_access::read || have == acl_access::write;
    if (want == acl_access::write) return have == acl_access::write;
    return false;
}

bool acl_authorizer::key_write_prefix(std::string_view prefix) const {
    if (management_) return true;
    // The rule governing the prefix itself (prefix rules only: an exact rule
    // names one key, not a tree)...
    std::optional<acl_access> base;
    std::size_t base_len = 0;
    for (auto const& [p, a] : rules_.key.prefix) {
        if (prefix.starts_with(p) && (!base || p.size() >= base_len)) {
            base = a;
            base_len = p.size();
        }
    }
    if (base.value_or(default_) != acl_access::write) return false;
    // ...and no rule under it may grant less.
    for (auto const* m : {&rules_.key.exact, &rules_.key.prefix}) {
        for (auto it = m->lower_bound(prefix); it != m->end() && std::string_view(it->first).starts_with(prefix); ++it)
            if (it->second != acl_access::write) return false;
    }
    return true;
}

std::string acl_authorizer::denied(acl_resource r, acl_access want, std::string_view name) const {
    std::string m = "Permission denied: token with AccessorID '" + accessor_id_ + "' lacks permission '";
    m += to_string(r);
    m += ':';
    m += to_string(want);
    m += '\'';
    if (!name.empty()) m += " on " + quoted(name);
    return m;
}

// ---- store ------------------------------------------------------------------------

namespace {

json::array const* array_member(json::object const& o, std::string_view name, std::string const& where) {
    auto const* v = member(o, name);
    if (!v || v->is_null()) return nullptr;
    if (!v->is_array()) throw acl_config_error(where + ": \"" + std::string(name) + "\" must be an array");
    return &v->as_array();
}

void check_fields(json::object const& o, std::initializer_list<std::string_view> known, std::string const& where) {
    for (auto const& kv : o) {
        bool ok = std::any_of(known.begin(), known.end(), [&](std::string_view k) { return iequals(kv.key(), k); });
        if (!ok) throw acl_config_error(where + ": unknown field \"" + std::string(kv.key()) + "\"");
    }
}

std::string string_field(json::object const& o, std::string_view name, std::string const& where) {
    auto const* v = member(o, name);
    if (!v || v->is_null()) return {};
    if (!v->is_string()) throw acl_config_error(where + ": \"" + std::string(name) + "\" must be a string");
    return std::string(v->as_string());
}

}  // namespace

acl_store::acl_store(acl_options opts) : opts_(std::move(opts)) {
    if (opts_.default_policy == acl_access::read)
        throw acl_config_error("the default ACL policy is allow or deny");
    if (opts_.bootstrap_token == anonymous_secret_id)
        throw acl_config_error("the bootstrap token must not be \"anonymous\"");

    auto anonymous = std::make_unique<acl_token>();
    anonymous->accessor_id = anonymous_accessor_id;
    anonymous->secret_id = anonymous_secret_id;
    anonymous->description = "Anonymous Token";
    anonymous->create_index = anonymous->modify_index = ++index_;
    tokens_.push_back(std::move(anonymous));

    if (!opts_.bootstrap_token.empty()) {
        auto t = std::make_unique<acl_token>();
        t->accessor_id = random_uuid();
        t->secret_id = opts_.bootstrap_token;
        t->description = "Bootstrap Token (Global Management)";
        t->management = true;
        t->create_index = t->modify_index = ++index_;
        tokens_.push_back(std::move(t));
    }

    if (opts_.file_json.empty()) return;
    json::value root = parse_json_text(opts_.file_json, "ACL file");
    if (!root.is_object()) throw acl_config_error("ACL file: the top level must be an object");
    auto const& top = root.as_object();
    check_fields(top, {"policies", "tokens"}, "ACL file");

    if (auto const* ps = array_member(top, "policies", "ACL file")) {
        std::size_t i = 0;
        for (auto const& pv : *ps) load_file_policy(pv, "ACL file: policies[" + std::to_string(i++) + "]");
    }
    if (auto const* ts = array_member(top, "tokens", "ACL file")) {
        std::size_t i = 0;
        for (auto const& tv : *ts) load_file_token(tv, "ACL file: tokens[" + std::to_string(i++) + "]");
    }
}

void acl_store::load_file_policy(json::value const& pv, std::string const& where) {
    if (!pv.is_object()) throw acl_config_error(where + " must be an object");
    auto const& po = pv.as_object();
    check_fields(po, {"ID", "Name", "Description", "Rules"}, where);
    auto p = std::make_unique<acl_policy>();
    p->id = string_field(po, "ID", where);
    if (p->id.empty()) p->id = random_uuid();
    p->name = string_field(po, "Name", where);
    if (p->name.empty()) throw acl_config_error(where + ": missing \"Name\"");
    p->description = string_field(po, "Description", where);
    try {
        if (auto const* r = member(po, "Rules")) p->rules = acl_rules::from_json(*r);
    } catch (acl_config_error const& e) {
        throw acl_config_error(where + ": " + e.what());
    }
    if (find_policy(p->name) || find_policy(p->id))
        throw acl_config_error(where + ": duplicate policy \"" + p->name + "\"");
    p->create_index = p->modify_index = ++index_;
    policies_.push_back(std::move(p));
}

void acl_store::load_file_token(json::value const& tv, std::string const& where) {
    if (!tv.is_object()) throw acl_config_error(where + " must be an object");
    auto const& to = tv.as_object();
    check_fields(to, {"AccessorID", "SecretID", "Description", "Policies", "Rules", "Management"}, where);
    acl_token t;
    t.accessor_id = string_field(to, "AccessorID", where);
    t.secret_id = string_field(to, "SecretID", where);
    t.description = string_field(to, "Description", where);
    if (auto const* m = member(to, "Management"); m && !m->is_null()) {
        if (!m->is_bool()) throw acl_config_error(where + ": \"Management\" must be true or false");
        t.management = m->as_bool();
    }
    try {
        if (auto const* r = member(to, "Rules")) t.rules = acl_rules::from_json(*r);
    } catch (acl_config_error const& e) {
        throw acl_config_error(where + ": " + e.what());
    }
    if (auto const* links = array_member(to, "Policies", where)) {
        for (auto const& l : *links) {
            std::string ref;
            if (l.is_string()) ref = std::string(l.as_string());
            else if (l.is_object()) {
                ref = string_field(l.as_object(), "ID", where);
                if (ref.empty()) ref = string_field(l.as_object(), "Name", where);
            }
            auto const* p = find_policy(ref);
            if (!p) throw acl_config_error(where + ": no policy named \"" + ref + "\"");
            t.policy_ids.push_back(p->id);
        }
    }
    bool const is_anonymous = t.secret_id == anonymous_secret_id || t.accessor_id == anonymous_accessor_id;
    if (is_anonymous) {
        // The anonymous token's rules: what requests without a token may do.
        if (t.management) throw acl_config_error(where + ": the anonymous token cannot be a management token");
        auto& anon = *tokens_.front();
        anon.rules = std::move(t.rules);
        anon.policy_ids = std::move(t.policy_ids);
        if (!t.description.empty()) anon.description = std::move(t.description);
        return;
    }
    if (t.secret_id.empty()) throw acl_config_error(where + ": missing \"SecretID\"");
    if (t.accessor_id.empty()) t.accessor_id = random_uuid();
    for (auto const& other : tokens_) {
        if (other->secret_id == t.secret_id) throw acl_config_error(where + ": duplicate SecretID");
        if (other->accessor_id == t.accessor_id)
            throw acl_config_error(where + ": duplicate AccessorID \"" + t.accessor_id + "\"");
    }
    t.create_index = t.modify_index = ++index_;
    tokens_.push_back(std::make_unique<acl_token>(std::move(t)));
}

std::string acl_store::request_token(request const& req) {
    if (auto parsed = boost::urls::parse_origin_form(req.target())) {
        auto params = parsed->params();
        if (auto it = params.find("token"); it != params.end() && !(*it).value.empty()) return std::string((*it).value);
    }
    if (auto it = req.find("X-Consul-Token"); it != req.end() && !it->value().empty()) return std::string(it->value());
    if (auto it = req.find(http::field::authorization); it != req.end()) {
        std::string_view v = it->value();
        if (v.size() > 7 && iequals(v.substr(0, 7), "Bearer ")) {
            v.remove_prefix(7);
            while (!v.empty() && v.front() == ' ') v.remove_prefix(1);
            return std::string(v);
        }
    }
    return {};
}

acl_token const* acl_store::find_secret(std::string_view secret) const {
    if (secret.empty()) return tokens_.front().get();  // anonymous
    // Compare with every token in constant time per byte, so response timing
    // does not tell how much of a guessed secret matched.
    acl_token const* found = nullptr;
    for (auto const& t : tokens_) {
        if (t->secret_id.size() == secret.size() && CRYPTO_memcmp(t->secret_id.data(), secret.data(), secret.size()) == 0)
            found = t.get();
    }
    return found;
}

acl_policy const* acl_store::find_policy(std::string_view id_or_name) const {
    for (auto const& p : policies_)
        if (p->id == id_or_name || p->name == id_or_name) return p.get();
    return nullptr;
}

acl_rules acl_store::effective_rules(acl_token const& t) const {
    acl_rules r = t.rules;
    for (auto const& id : t.policy_ids)
        if (auto const* p = find_policy(id)) r.merge(p->rules);
    return r;
}

std::shared_ptr<acl_authorizer const> acl_store::authorizer_for(acl_token const& t) const {
    return std::make_shared<acl_authorizer const>(t, effective_rules(t), opts_.default_policy);
}

// ---- authorize: route and check -----------------------------------------------------

namespace {

std::optional<json::value> parse_body(request const& req) {
    if (req.body().empty()) return std::nullopt;
    boost::system::error_code ec;
    json::value v = json::parse(req.body(), ec);
    if (ec) return std::nullopt;
    return v;
}

}  // namespace

namespace {

// `want` on (r, name), or Consul's 403.
std::optional<response> need(acl_authorizer const& authz, acl_resource r, acl_access want, std::string_view name) {
    if (authz.allowed(r, name, want)) return std::nullopt;
    return text(http::status::forbidden, authz.denied(r, want, name));
}

// The name a resource check is about; nullopt: nothing to check (the API
// answers the request itself: 400 for a bad body, true or 404 for an
// unknown session).
std::optional<std::string> requirement_name(acl_requirement::name_from from, request const& req, std::string_view rest,
                                            state_machine& sm) {
    using name_from = acl_requirement::name_from;
    switch (from) {
    case name_from::none: return std::string{};
    case name_from::path: return std::string(rest);
    case name_from::self: return sm.config().node_name;
    case name_from::body_node_or_self: {
        std::string node = sm.config().node_name;
        if (auto body = parse_body(req); body && body->is_object())
            if (auto n = string_member(body->as_object(), "Node")) node = *n;
        return node;
    }
    case name_from::body_node: {
        auto body = parse_body(req);
        if (!body || !body->is_object()) return std::nullopt;
        auto node = string_member(body->as_object(), "Node");
        if (!node || node->empty()) return std::nullopt;
        return node;
    }
    case name_from::session_node:
        if (auto const* s = sm.session_get(rest)) return s->node;
        return std::nullopt;
    }
    return std::nullopt;
}

std::optional<response> check_resource(acl_requirement const& need_, request const& req, std::string_view rest,
                                       state_machine& sm, acl_authorizer const& authz) {
    auto name = requirement_name(need_.name, req, rest, sm);
    if (!name) return std::nullopt;
    if (need_.whole_prefix) {
        if (authz.key_write_prefix(*name)) return std::nullopt;
        return text(http::status::forbidden, authz.denied(need_.resource, need_.access, *name));
    }
    return need(authz, need_.resource, need_.access, *name);
}

// Every KV operation of a PUT /v1/txn, as Consul's Txn.preCheck does: 409
// with one error per refused operation.
std::optional<response> check_txn(request const& req, acl_authorizer const& authz) {
    auto body = parse_body(req);
    if (!body || !body->is_array()) return std::nullopt;  // the API answers
    json::array errors;
    std::size_t i = 0;
    for (auto const& item : body->as_array()) {
        std::size_t const op_index = i++;
        if (!item.is_object()) continue;
        auto const* kv = member(item.as_object(), "KV");
        if (!kv || !kv->is_object()) continue;
        std::string const verb = string_member(kv->as_object(), "Verb").value_or("");
        std::string const key = string_member(kv->as_object(), "Key").value_or("");
        bool ok = false;
        acl_access want = acl_access::write;
        if (is_read_verb(verb)) {
            want = acl_access::read;
            ok = authz.allowed(acl_resource::key, key, want);
        } else if (verb == "delete-tree") {
            ok = authz.key_write_prefix(key);
        } else {
            ok = authz.allowed(acl_resource::key, key, want);
        }
        if (!ok)
            errors.emplace_back(
                json::object{{"OpIndex", op_index}, {"What", authz.denied(acl_resource::key, want, key)}});
    }
    if (errors.empty()) return std::nullopt;
    return json_answer(http::status::conflict, json::object{{"Results", nullptr}, {"Errors", std::move(errors)}});
}

}  // namespace

// Anything the route table knows no rule for (unknown paths, endpoints added
// later) needs a management token unless the default policy allows everything.
std::optional<response> acl_store::check_operator(acl_authorizer const& authz) const {
    if (authz.management() || opts_.default_policy == acl_access::write) return std::nullopt;
    return text(http::status::forbidden, "Permission denied: token with AccessorID '" + authz.accessor_id() +
                                             "' lacks permission 'operator:write'");
}

std::optional<response> acl_store::authorize(request const& req, route const& r, state_machine& sm,
                                             acl_filter& filter) {
    using check = acl_requirement::check;
    auto const& need_ = r.acl;
    if (!opts_.enabled) {
        if (need_.what == check::acl_api) return text(http::status::unauthorized, "ACL support disabled");
        return std::nullopt;
    }
    if (need_.what == check::exempt) return std::nullopt;  // Consul checks no ACL there

    acl_token const* token = find_secret(request_token(req));
    if (!token) return text(http::status::forbidden, "ACL not found");
    if (need_.what == check::acl_api) return acl_endpoint(req, r.rest, token);

    auto authz = authorizer_for(*token);
    filter.authz = authz;
    filter.what = need_.filter;
    switch (need_.what) {
    case check::exempt:
    case check::acl_api:
    case check::none:
    case check::list: return std::nullopt;
    case check::resource: return check_resource(need_, req, r.rest, sm, *authz);
    case check::txn: return check_txn(req, *authz);
    case check::operator_write: break;
    }
    return check_operator(*authz);
}

// ---- apply: filter list answers ------------------------------------------------------

void acl_store::apply(acl_filter const& f, response& res) {
    if (f.what == acl_filter::kind::none || !f.authz || f.authz->management()) return;
    if (res.result() != http::status::ok) return;
    boost::system::error_code ec;
    json::value v = json::parse(res.body(), ec);
    if (ec) return;
    auto const& a = *f.authz;
    auto readable = [&](acl_resource r, json::value const& entry, std::string_view field) {
        if (!entry.is_object()) return false;
        auto const* name = entry.as_object().if_contains(field);
        return name && name->is_string() && a.allowed(r, name->as_string(), acl_access::read);
    };
    std::size_t removed = 0;
    auto keep_if = [&](json::array& arr, auto pred) {
        auto const before = arr.size();
        auto it = std::remove_if(arr.begin(), arr.end(), [&](json::value const& e) { return !pred(e); });
        arr.erase(it, arr.end());
        removed += before - arr.size();
    };
    bool empty_is_404 = false;
    switch (f.what) {
    case acl_filter::kind::kv_entries:
        if (!v.is_array()) return;
        keep_if(v.as_array(), [&](json::value const& e) { return readable(acl_resource::key, e, "Key"); });
        empty_is_404 = true;
        break;
    case acl_filter::kind::kv_keys:
        if (!v.is_array()) return;
        keep_if(v.as_array(), [&](json::value const& e) {
            return e.is_string() && a.allowed(acl_resource::key, e.as_string(), acl_access::read);
        });
        empty_is_404 = true;
        break;
    case acl_filter::kind::sessions:
        if (!v.is_array()) return;
        keep_if(v.as_array(), [&](json::value const& e) { return readable(acl_resource::session, e, "Node"); });
        break;
    case acl_filter::kind::nodes:
    case acl_filter::kind::checks_array:
        if (!v.is_array()) return;
        keep_if(v.as_array(), [&](json::value const& e) { return readable(acl_resource::node, e, "Node"); });
        break;
    case acl_filter::kind::checks_object: {
        if (!v.is_object()) return;
        auto& o = v.as_object();
        for (auto it = o.begin(); it != o.end();) {
            if (readable(acl_resource::node, it->value(), "Node")) {
                ++it;
            } else {
                it = o.erase(it);
                ++removed;
            }
        }
        break;
    }
    case acl_filter::kind::txn_results: {
        if (!v.is_object()) return;
        auto* results = v.as_object().if_contains("Results");
        if (!results || !results->is_array()) return;
        keep_if(results->as_array(), [&](json::value const& e) {
            auto const* kv = e.is_object() ? e.as_object().if_contains("KV") : nullptr;
            return kv && readable(acl_resource::key, *kv, "Key");
        });
        break;
    }
    case acl_filter::kind::tenure_history: {
        if (!v.is_object()) return;
        if (auto* keys = v.as_object().if_contains("Keys"); keys && keys->is_array())
            keep_if(keys->as_array(), [&](json::value const& e) { return readable(acl_resource::key, e, "Key"); });
        break;
    }
    case acl_filter::kind::tenure_sessions: {
        if (!v.is_object()) return;
        auto& o = v.as_object();
        if (auto* sessions = o.if_contains("Sessions"); sessions && sessions->is_array()) {
            keep_if(sessions->as_array(), [&](json::value const& e) { return readable(acl_resource::session, e, "Node"); });
            for (auto& s : sessions->as_array()) {
                auto* held = s.is_object() ? s.as_object().if_contains("Held") : nullptr;
                if (held && held->is_array())
                    keep_if(held->as_array(), [&](json::value const& k) {
                        return k.is_string() && a.allowed(acl_resource::key, k.as_string(), acl_access::read);
                    });
            }
        }
        if (auto* checks = o.if_contains("Checks"); checks && checks->is_array())
            keep_if(checks->as_array(), [&](json::value const& e) { return readable(acl_resource::node, e, "Node"); });
        break;
    }
    case acl_filter::kind::none: return;
    }
    if (removed == 0) return;
    res.set("X-Consul-Results-Filtered-By-ACLs", "true");
    if (empty_is_404 && v.as_array().empty()) {
        res.result(http::status::not_found);  // as when nothing matched
        res.erase(http::field::content_type);
        res.body().clear();
        return;
    }
    res.body() = json::serialize(v);
}

// ---- /v1/acl/ endpoints ----------------------------------------------------------------

namespace {

json::object render_token(acl_token const& t, std::vector<acl_policy const*> const& policies, bool show_secret) {
    json::array links;
    if (t.management)
        links.emplace_back(json::object{{"ID", management_policy_id}, {"Name", management_policy_name}});
    for (auto const* p : policies) links.emplace_back(json::object{{"ID", p->id}, {"Name", p->name}});
    json::object o;
    o["AccessorID"] = t.accessor_id;
    o["SecretID"] = show_secret ? t.secret_id : std::string("<hidden>");
    o["Description"] = t.description;
    o["Policies"] = std::move(links);
    auto rules = t.rules.to_json();
    if (!rules.empty()) o["Rules"] = std::move(rules);  // tenure extension: the token's own rules
    o["Local"] = true;
    o["CreateIndex"] = t.create_index;
    o["ModifyIndex"] = t.modify_index;
    return o;
}

json::object render_policy(acl_policy const& p) {
    return json::object{{"ID", p.id},
                        {"Name", p.name},
                        {"Description", p.description},
                        {"Rules", json::serialize(p.rules.to_json())},
                        {"CreateIndex", p.create_index},
                        {"ModifyIndex", p.modify_index}};
}

}  // namespace

namespace {

std::optional<response> acl_denied_unless(acl_authorizer const& authz, acl_access a) {
    if (authz.allowed(acl_resource::acl, "", a)) return std::nullopt;
    return text(http::status::forbidden, authz.denied(acl_resource::acl, a, ""));
}

response method_not_allowed(request const& req, std::string_view allow) {
    response r = text(http::status::method_not_allowed, "method " + std::string(req.method_string()) + " not allowed");
    r.set(http::field::allow, allow);
    return r;
}

response bad_request(std::string m) { return text(http::status::bad_request, std::move(m)); }

// The method check, then the ACL check, every /v1/acl endpoint starts with.
std::optional<response> acl_prologue(request const& req, acl_authorizer const& authz, http::verb method,
                                     std::string_view allow, acl_access want) {
    if (req.method() != method) return method_not_allowed(req, allow);
    return acl_denied_unless(authz, want);
}

}  // namespace

response acl_store::answer(request const& req, json::value const& v) const {
    response r = json_answer(http::status::ok, v);
    if (req.method() == http::verb::get) r.set("X-Consul-Index", std::to_string(index_));
    return r;
}

std::vector<acl_policy const*> acl_store::policies_of(acl_token const& t) const {
    std::vector<acl_policy const*> out;
    for (auto const& id : t.policy_ids)
        if (auto const* p = find_policy(id)) out.push_back(p);
    return out;
}

// The body of PUT /v1/acl/token; throws acl_config_error with the 400's text.
acl_token acl_store::decode_token(json::object const& o) const {
    std::string const where = "Request decode failed";
    check_fields(o, {"AccessorID", "SecretID", "Description", "Policies", "Rules", "Management", "Local"}, where);
    acl_token t;
    t.accessor_id = string_field(o, "AccessorID", where);
    t.secret_id = string_field(o, "SecretID", where);
    t.description = string_field(o, "Description", where);
    if (auto const* m = member(o, "Management"); m && m->is_bool()) t.management = m->as_bool();
    if (auto const* r = member(o, "Rules")) t.rules = acl_rules::from_json(*r);
    if (auto const* links = array_member(o, "Policies", where)) {
        for (auto const& l : *links) {
            std::string id, name;
            if (l.is_object()) {
                id = string_field(l.as_object(), "ID", where);
                name = string_field(l.as_object(), "Name", where);
            }
            auto const* p = find_policy(!id.empty() ? id : name);
            if (!p)
                throw acl_config_error("No such ACL policy with " + (!id.empty() ? "ID \"" + id : "name \"" + name) +
                                       "\"");
            t.policy_ids.push_back(p->id);
        }
    }
    return t;
}

response acl_store::token_create(request const& req) {
    auto body = parse_body(req);
    if (!body || !body->is_object()) return bad_request("Request decode failed: the body must be a JSON object");
    acl_token t;
    try {
        t = decode_token(body->as_object());
    } catch (acl_config_error const& e) {
        return bad_request(e.what());
    }
    if (t.secret_id == anonymous_secret_id || t.accessor_id == anonymous_accessor_id)
        return bad_request("Cannot create a token with the anonymous token's IDs");
    if (t.accessor_id.empty()) t.accessor_id = random_uuid();
    if (t.secret_id.empty()) t.secret_id = random_uuid();
    for (auto const& other : tokens_) {
        if (other->accessor_id == t.accessor_id) return bad_request("Invalid Token: AccessorID is already in use");
        if (other->secret_id == t.secret_id) return bad_request("Invalid Token: SecretID is already in use");
    }
    t.create_index = t.modify_index = ++index_;
    tokens_.push_back(std::make_unique<acl_token>(std::move(t)));
    auto const& created = *tokens_.back();
    return answer(req, render_token(created, policies_of(created), true));
}

// GET and DELETE /v1/acl/token/<accessor ID>.
response acl_store::token_by_id(request const& req, std::string_view id, acl_token const* caller,
                                acl_authorizer const& authz) {
    auto it = std::find_if(tokens_.begin(), tokens_.end(), [&](auto const& t) { return t->accessor_id == id; });
    if (req.method() == http::verb::get) {
        if (auto r = acl_denied_unless(authz, acl_access::read)) return std::move(*r);
        if (it == tokens_.end()) return text(http::status::forbidden, "ACL not found");
        bool const show = authz.allowed(acl_resource::acl, "", acl_access::write);
        return answer(req, render_token(**it, policies_of(**it), show));
    }
    if (req.method() == http::verb::delete_) {
        if (auto r = acl_denied_unless(authz, acl_access::write)) return std::move(*r);
        if (it == tokens_.end()) return answer(req, json::value(true));
        if ((*it)->accessor_id == anonymous_accessor_id)
            return bad_request("Delete of the anonymous token is not allowed");
        if (it->get() == caller) return bad_request("Deletion of the request's authorization token is not permitted");
        tokens_.erase(it);
        ++index_;
        return answer(req, json::value(true));
    }
    return method_not_allowed(req, "OPTIONS,GET,DELETE");
}

response acl_store::policy_create(request const& req) {
    auto body = parse_body(req);
    if (!body || !body->is_object()) return bad_request("Request decode failed: the body must be a JSON object");
    acl_policy pol;
    try {
        auto const& o = body->as_object();
        std::string const where = "Request decode failed";
        check_fields(o, {"ID", "Name", "Description", "Rules", "Datacenters"}, where);
        pol.name = string_field(o, "Name", where);
        pol.description = string_field(o, "Description", where);
        if (auto const* r = member(o, "Rules")) pol.rules = acl_rules::from_json(*r);
    } catch (acl_config_error const& e) {
        return bad_request(e.what());
    }
    if (pol.name.empty()) return bad_request("Invalid Policy: no Name is set");
    if (find_policy(pol.name))
        return bad_request("Invalid Policy: A Policy with Name \"" + pol.name + "\" already exists");
    pol.id = random_uuid();
    pol.create_index = pol.modify_index = ++index_;
    policies_.push_back(std::make_unique<acl_policy>(std::move(pol)));
    return answer(req, render_policy(*policies_.back()));
}

std::optional<response> acl_store::acl_endpoint(request const& req, std::string_view rest, acl_token const* caller) {
    auto authz = authorizer_for(*caller);
    auto const get = http::verb::get;
    auto const put = http::verb::put;
    if (rest == "token/self") {
        if (req.method() != get) return method_not_allowed(req, "OPTIONS,GET");
        if (request_token(req).empty()) return text(http::status::forbidden, "ACL not found");
        return answer(req, render_token(*caller, policies_of(*caller), true));
    }
    if (rest == "token") {
        if (auto r = acl_prologue(req, *authz, put, "OPTIONS,PUT", acl_access::write)) return r;
        return token_create(req);
    }
    if (rest.starts_with("token/")) return token_by_id(req, rest.substr(6), caller, *authz);
    if (rest == "tokens") {
        if (auto r = acl_prologue(req, *authz, get, "OPTIONS,GET", acl_access::read)) return r;
        json::array a;
        for (auto const& t : tokens_) a.emplace_back(render_token(*t, policies_of(*t), false));
        return answer(req, a);
    }
    if (rest == "policy") {
        if (auto r = acl_prologue(req, *authz, put, "OPTIONS,PUT", acl_access::write)) return r;
        return policy_create(req);
    }
    if (rest.starts_with("policy/")) {
        if (auto r = acl_prologue(req, *authz, get, "OPTIONS,GET", acl_access::read)) return r;
        std::string_view ref = rest.substr(7);
        if (ref.starts_with("name/")) ref.remove_prefix(5);
        auto const* pol = find_policy(ref);
        if (!pol) return text(http::status::forbidden, "ACL not found");
        return answer(req, render_policy(*pol));
    }
    if (rest == "policies") {
        if (auto r = acl_prologue(req, *authz, get, "OPTIONS,GET", acl_access::read)) return r;
        json::array a;
        for (auto const& pol : policies_) a.emplace_back(render_policy(*pol));
        return answer(req, a);
    }
    return text(http::status::not_found, "404 page not found\n");
}

std::string redact_token(std::string_view target) {
    auto const q = target.find('?');
    if (q == target.npos) return std::string(target);
    std::string out(target.substr(0, q + 1));
    std::string_view rest = target.substr(q + 1);
    bool first = true;
    while (true) {
        auto const amp = rest.find('&');
        std::string_view param = rest.substr(0, amp);
        if (!first) out += '&';
        first = false;
        if (param.starts_with("token=")) out += "token=<hidden>";
        else out += param;
        if (amp == rest.npos) break;
        rest.remove_prefix(amp + 1);
    }
    return out;
}

}  // namespace tenure::detail::agent
