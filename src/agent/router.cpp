// The agent's route table (router.hpp): every path the HTTP API serves, with
// the ACL rule it falls under, in one place.
#include "agent/router.hpp"

namespace tenure::detail::agent {

namespace {

namespace http = boost::beast::http;
using check = acl_requirement::check;
using name_from = acl_requirement::name_from;

// How an entry's ACL requirement depends on the method and the query.
enum class acl_rule {
    exempt,           // no ACL at all
    kv,               // key:read to read (?keys, ?recurse: filtered), key:write to write,
                      // DELETE ?recurse: write on the whole prefix
    txn,              // PUT: each operation's key; the answer is filtered
    session_create,   // PUT: session:write on the body's node, else this agent's
    session_write,    // session:write on the named session's node
    sessions_list,    // filtered by node
    agent_checks,     // filtered by node
    node_self_write,  // node:write on this agent's node (its checks)
    agent_self,       // agent:read to read, agent:write to write, on this agent's node
    node_of_body,     // node:write on the body's node
    nodes_list,       // filtered
    checks_list,      // filtered by node
    acl_api,          // /v1/acl: the store's own endpoints
    tenure_history,   // filtered by key
    tenure_sessions,  // sessions filtered by node, checks by node, held keys by key
    operator_write,   // anything else
};

struct route_entry {
    std::string_view pattern;  // exact, or a prefix when it ends in '/'
    api_endpoint endpoint;
    acl_rule rule;
};

// First match wins: each prefix comes after the paths it contains.
constexpr route_entry routes[] = {
    {"/v1/kv", api_endpoint::kv, acl_rule::kv},
    {"/v1/kv/", api_endpoint::kv, acl_rule::kv},
    {"/v1/txn", api_endpoint::txn, acl_rule::txn},

    {"/v1/session/create", api_endpoint::session_create, acl_rule::session_create},
    {"/v1/session/destroy/", api_endpoint::session_destroy, acl_rule::session_write},
    {"/v1/session/destroy", api_endpoint::session_destroy, acl_rule::sessions_list},  // no ID: 400
    {"/v1/session/renew/", api_endpoint::session_renew, acl_rule::session_write},
    {"/v1/session/renew", api_endpoint::session_renew, acl_rule::sessions_list},  // no ID: 400
    {"/v1/session/info/", api_endpoint::session_info, acl_rule::sessions_list},
    {"/v1/session/info", api_endpoint::session_info, acl_rule::sessions_list},
    {"/v1/session/list", api_endpoint::session_list, acl_rule::sessions_list},
    {"/v1/session/node/", api_endpoint::session_node, acl_rule::sessions_list},
    {"/v1/session/node", api_endpoint::session_node, acl_rule::sessions_list},
    {"/v1/session/", api_endpoint::not_found, acl_rule::sessions_list},

    {"/v1/agent/self", api_endpoint::agent_self, acl_rule::agent_self},
    {"/v1/agent/metrics", api_endpoint::agent_metrics, acl_rule::agent_self},
    {"/v1/agent/checks", api_endpoint::agent_checks, acl_rule::agent_checks},
    {"/v1/agent/check/register", api_endpoint::agent_check_register, acl_rule::node_self_write},
    {"/v1/agent/check/pass/", api_endpoint::agent_check_pass, acl_rule::node_self_write},
    {"/v1/agent/check/warn/", api_endpoint::agent_check_warn, acl_rule::node_self_write},
    {"/v1/agent/check/fail/", api_endpoint::agent_check_fail, acl_rule::node_self_write},
    {"/v1/agent/check/update/", api_endpoint::agent_check_update, acl_rule::node_self_write},
    {"/v1/agent/check/deregister/", api_endpoint::agent_check_deregister, acl_rule::node_self_write},
    {"/v1/agent/check/", api_endpoint::not_found, acl_rule::node_self_write},
    {"/v1/agent/", api_endpoint::not_found, acl_rule::agent_self},

    {"/v1/catalog/register", api_endpoint::catalog_register, acl_rule::node_of_body},
    {"/v1/catalog/deregister", api_endpoint::catalog_deregister, acl_rule::node_of_body},
    {"/v1/catalog/nodes", api_endpoint::catalog_nodes, acl_rule::nodes_list},
    {"/v1/catalog/", api_endpoint::not_found, acl_rule::operator_write},
    {"/v1/health/node/", api_endpoint::health_node, acl_rule::checks_list},
    {"/v1/health/", api_endpoint::not_found, acl_rule::operator_write},
    {"/v1/status/", api_endpoint::status, acl_rule::exempt},

    {"/v1/acl", api_endpoint::acl, acl_rule::acl_api},
    {"/v1/acl/", api_endpoint::acl, acl_rule::acl_api},
    {"/v1/tenure/history", api_endpoint::tenure_history, acl_rule::tenure_history},
    {"/v1/tenure/sessions", api_endpoint::tenure_sessions, acl_rule::tenure_sessions},
    {"/v1/tenure/", api_endpoint::not_found, acl_rule::operator_write},
    // The page's files hold no data: no token, as Consul's /ui/. What the
    // page shows comes from the endpoints above, with the caller's token.
    {"/ui", api_endpoint::ui_root, acl_rule::exempt},
    {"/ui/", api_endpoint::ui, acl_rule::exempt},

    {"", api_endpoint::not_found, acl_rule::operator_write},  // matches everything left
};

bool is_reading(http::verb m) { return m == http::verb::get || m == http::verb::head || m == http::verb::options; }

acl_requirement on(acl_resource r, acl_access a, name_from n) {
    acl_requirement need;
    need.what = check::resource;
    need.resource = r;
    need.access = a;
    need.name = n;
    return need;
}

acl_requirement just(check c, acl_filter::kind f = acl_filter::kind::none) {
    acl_requirement need;
    need.what = c;
    need.filter = f;
    return need;
}

acl_requirement kv_requirement(http::verb method, boost::urls::params_view params) {
    if (is_reading(method)) {
        if (params.contains("keys")) return just(check::list, acl_filter::kind::kv_keys);
        if (params.contains("recurse")) return just(check::list, acl_filter::kind::kv_entries);
        return on(acl_resource::key, acl_access::read, name_from::path);
    }
    auto need = on(acl_resource::key, acl_access::write, name_from::path);
    need.whole_prefix = method == http::verb::delete_ && params.contains("recurse");
    return need;
}

acl_requirement resolve(acl_rule rule, http::verb method, boost::urls::params_view params) {
    bool const put = method == http::verb::put;
    switch (rule) {
    case acl_rule::exempt: return just(check::exempt);
    case acl_rule::kv: return kv_requirement(method, params);
    case acl_rule::txn: return just(put ? check::txn : check::none, acl_filter::kind::txn_results);
    case acl_rule::session_create:
        if (!put) return just(check::none);
        return on(acl_resource::session, acl_access::write, name_from::body_node_or_self);
    case acl_rule::session_write: return on(acl_resource::session, acl_access::write, name_from::session_node);
    case acl_rule::sessions_list: return just(check::list, acl_filter::kind::sessions);
    case acl_rule::agent_checks: return just(check::list, acl_filter::kind::checks_object);
    case acl_rule::node_self_write: return on(acl_resource::node, acl_access::write, name_from::self);
    case acl_rule::agent_self:
        return on(acl_resource::agent, is_reading(method) ? acl_access::read : acl_access::write, name_from::self);
    case acl_rule::node_of_body: return on(acl_resource::node, acl_access::write, name_from::body_node);
    case acl_rule::nodes_list: return just(check::list, acl_filter::kind::nodes);
    case acl_rule::checks_list: return just(check::list, acl_filter::kind::checks_array);
    case acl_rule::acl_api: return just(check::acl_api);
    case acl_rule::tenure_history: return just(check::list, acl_filter::kind::tenure_history);
    case acl_rule::tenure_sessions: return just(check::list, acl_filter::kind::tenure_sessions);
    case acl_rule::operator_write: break;
    }
    return just(check::operator_write);
}

bool is_prefix(std::string_view pattern) { return pattern.empty() || pattern.back() == '/'; }

bool matches(std::string_view pattern, std::string_view path) {
    return is_prefix(pattern) ? path.starts_with(pattern) : path == pattern;
}

}  // namespace

route route_request(http::verb method, std::string_view path, boost::urls::params_view params) {
    for (auto const& e : routes) {
        if (!matches(e.pattern, path)) continue;
        route r;
        r.endpoint = e.endpoint;
        r.rest = path.substr(is_prefix(e.pattern) ? e.pattern.size() : path.size());
        r.acl = resolve(e.rule, method, params);
        return r;
    }
    return {};  // unreachable: the last entry matches every path
}

}  // namespace tenure::detail::agent
