// The agent's one request router: (method, path, query) -> the endpoint that
// serves the request and the ACL requirement it has to meet. The HTTP API
// (http_api.cpp) dispatches on `endpoint`; the ACL store (acl.cpp) checks
// `acl`; neither looks at the path again. The table is in router.cpp.
#pragma once

#include "agent/acl.hpp"

#include <boost/beast/http/verb.hpp>
#include <boost/url/params_view.hpp>

#include <string_view>

namespace tenure::detail::agent {

enum class api_endpoint {
    not_found,  // 404 page not found
    kv,         // /v1/kv, /v1/kv/<key>
    txn,
    session_create,
    session_destroy,  // rest: the session ID (empty: 400)
    session_renew,
    session_info,
    session_list,
    session_node,  // rest: the node name
    agent_self,
    agent_metrics,
    agent_checks,
    agent_check_register,
    agent_check_pass,  // rest: the check ID
    agent_check_warn,
    agent_check_fail,
    agent_check_update,
    agent_check_deregister,
    catalog_register,
    catalog_deregister,
    catalog_nodes,
    health_node,  // rest: the node name
    status,       // rest: leader, peers or anything else (GET only)
    acl,          // /v1/acl/...: answered by the ACL store; rest: after /v1/acl/
    tenure_history,   // /v1/tenure/history (views.hpp)
    tenure_sessions,  // /v1/tenure/sessions
    ui_root,          // /ui: redirects to /ui/
    ui,               // /ui/<file>: the page's files (rest: the file name)
};

// What the ACL check of a request is, resolved from its route, method and
// query (acl_store::authorize carries it out).
struct acl_requirement {
    enum class check {
        exempt,          // no token looked at (Consul checks no ACL on /v1/status)
        none,            // a known token, nothing more (the API refuses the request anyway)
        resource,        // `access` on `resource`, named as `name` says
        list,            // nothing up front; the answer is filtered (`filter`)
        txn,             // each KV operation's key, as Consul's Txn.preCheck
        acl_api,         // the /v1/acl endpoints: the store answers them
        operator_write,  // anything else: a management token, or default allow
    };
    enum class name_from {
        none,
        path,               // the route's rest (a KV key)
        body_node,          // the JSON body's "Node" (none: no check, the API answers 400)
        body_node_or_self,  // the JSON body's "Node", else this agent's node
        session_node,       // the node of the session the rest names (unknown: no check)
        self,               // this agent's node
    };
    check what = check::operator_write;
    acl_resource resource = acl_resource::key;
    acl_access access = acl_access::write;
    name_from name = name_from::none;
    bool whole_prefix = false;  // write on every key under the name (Consul's KeyWritePrefix)
    acl_filter::kind filter = acl_filter::kind::none;
};

struct route {
    api_endpoint endpoint = api_endpoint::not_found;
    std::string_view rest;  // the path after the matched prefix; views the routed path
    acl_requirement acl;
};

// Routes a request once. `path` is the decoded path of the target (it must
// outlive the route); `params` its query.
route route_request(boost::beast::http::verb method, std::string_view path, boost::urls::params_view params);

}  // namespace tenure::detail::agent
