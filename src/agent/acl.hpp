// ACLs of the embedded agent, socket-free: tokens, rules and the checks the
// HTTP API makes before (authorize) and after (filter) each request.
//
// A subset of Consul's ACL system (docs/agent.md, "ACLs"):
//   - rules on four resources, each by exact name or by prefix:
//     key / key_prefix (KV), session / session_prefix (by node name),
//     node / node_prefix, agent / agent_prefix (by node name), plus "acl"
//     (read / write) for the /v1/acl endpoints; policies read, write, deny;
//   - an exact rule beats every prefix rule, the longest prefix wins, and a
//     name that no rule matches gets the default policy (allow or deny);
//   - a management token (the bootstrap token, or one marked Management) may
//     do anything;
//   - a request without a token acts as the anonymous token (its rules come
//     from the ACL file, else the default policy applies);
//   - an unknown token is answered 403 "ACL not found"; a denied action 403
//     "Permission denied: token with AccessorID '...' lacks permission
//     'key:write' on \"k\"" (Consul's acl.PermissionDeniedError text).
// Everything here runs on the agent's one thread.
#pragma once

#include "agent/state.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/json/fwd.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::detail::agent {

enum class acl_access { deny, read, write };
enum class acl_resource { key, session, node, agent, acl };

std::string_view to_string(acl_access a) noexcept;
std::string_view to_string(acl_resource r) noexcept;

// A bad ACL file, rule set or flag value; what() says which and why.
struct acl_config_error : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};

// The rules of one policy or token: per resource, exact names and prefixes.
struct acl_rules {
    struct table {
        std::map<std::string, acl_access, std::less<>> exact;
        std::map<std::string, acl_access, std::less<>> prefix;
        bool empty() const noexcept { return exact.empty() && prefix.empty(); }
    };
    table key, session, node, agent;
    std::optional<acl_access> acl;

    // Consul's JSON rule syntax, as an object or a string holding one:
    //   {"key_prefix": {"app/": {"policy": "write"}}, "session_prefix": {"": {"policy": "write"}},
    //    "node": {"web1": {"policy": "read"}}, "acl": "read"}
    // `"app/": "write"` is accepted as shorthand for `{"policy": "write"}`.
    // Throws acl_config_error naming the offending field.
    static acl_rules from_json(boost::json::value const& v);
    // Adds `other`'s rules; on the same name deny beats write beats read
    // (Consul's policy merge).
    void merge(acl_rules const& other);
    // Back to Consul's JSON form (for GET /v1/acl/policy and tokens).
    boost::json::object to_json() const;
};

inline constexpr std::string_view anonymous_accessor_id = "00000000-0000-0000-0000-000000000002";
inline constexpr std::string_view anonymous_secret_id = "anonymous";
inline constexpr std::string_view management_policy_id = "00000000-0000-0000-0000-000000000001";
inline constexpr std::string_view management_policy_name = "global-management";

struct acl_policy {
    std::string id;
    std::string name;
    std::string description;
    acl_rules rules;
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

struct acl_token {
    std::string accessor_id;
    std::string secret_id;
    std::string description;
    bool management = false;
    std::vector<std::string> policy_ids;  // linked policies (resolved on each use)
    acl_rules rules;                      // the token's own rules (tenure extension)
    std::uint64_t create_index = 0;
    std::uint64_t modify_index = 0;
};

struct acl_options {
    bool enabled = false;
    // What a name no rule matches gets: write (allow) or deny.
    acl_access default_policy = acl_access::deny;
    // Secret of a management token; empty: none (then only the ACL file's
    // tokens exist). Must not be "anonymous".
    std::string bootstrap_token;
    // The ACL file's contents (JSON, see docs/agent.md); empty: none.
    std::string file_json;
};

// A resolved token: answers "may this token do that".
class acl_authorizer {
public:
    acl_authorizer(acl_token const& token, acl_rules rules, acl_access default_policy)
        : accessor_id_(token.accessor_id), management_(token.management), rules_(std::move(rules)),
          default_(default_policy) {}

    bool allowed(acl_resource r, std::string_view name, acl_access want) const;
    // Consul's KeyWritePrefix: write on the prefix and no rule under it that
    // grants less (for DELETE ?recurse and delete-tree).
    bool key_write_prefix(std::string_view prefix) const;
    // Consul's PermissionDeniedError text for a refused check.
    std::string denied(acl_resource r, acl_access want, std::string_view name) const;

    std::string const& accessor_id() const noexcept { return accessor_id_; }
    bool management() const noexcept { return management_; }

private:
    acl_access level(acl_resource r, std::string_view name) const;

    std::string accessor_id_;
    bool management_;
    acl_rules rules_;
    acl_access default_;
};

using request = boost::beast::http::request<boost::beast::http::string_body>;
using response = boost::beast::http::response<boost::beast::http::string_body>;

// What to remove from a response the request may only partly read.
struct acl_filter {
    enum class kind {
        none, kv_entries, kv_keys, sessions, nodes, checks_array, checks_object, txn_results,
        tenure_history,   // {"Keys": [{"Key": ...}]}
        tenure_sessions,  // {"Sessions": [{"Node": ..., "Held": [keys]}], "Checks": [{"Node": ...}]}
    };
    kind what = kind::none;
    std::shared_ptr<acl_authorizer const> authz;
};

struct route;            // router.hpp
struct acl_requirement;  // router.hpp

class acl_store {
public:
    // Throws acl_config_error for a bad file or bootstrap token.
    explicit acl_store(acl_options opts);

    bool enabled() const noexcept { return opts_.enabled; }
    acl_access default_policy() const noexcept { return opts_.default_policy; }

    // The secret a request carries: ?token=, else X-Consul-Token, else
    // `Authorization: Bearer` (Consul's order). Empty: none (anonymous).
    static std::string request_token(request const& req);

    // The token for a secret (empty: anonymous); nullptr when unknown.
    acl_token const* find_secret(std::string_view secret) const;
    std::shared_ptr<acl_authorizer const> authorizer_for(acl_token const& t) const;

    // Before the API handles `req` (routed as `r`, router.hpp): a refusal
    // (403), or an answer to a /v1/acl/ endpoint, or nothing (go on; `filter`
    // then says what to strip from the response). With ACLs disabled only
    // /v1/acl/ is answered (401).
    std::optional<response> authorize(request const& req, route const& r, state_machine& sm, acl_filter& filter);
    // After the API answered: drops what the token may not read.
    static void apply(acl_filter const& filter, response& res);

    std::size_t token_count() const noexcept { return tokens_.size(); }

private:
    std::optional<response> acl_endpoint(request const& req, std::string_view rest, acl_token const* caller);
    std::optional<response> check_operator(acl_authorizer const& authz) const;
    // The /v1/acl endpoints' pieces (acl_endpoint dispatches to them).
    response answer(request const& req, boost::json::value const& v) const;
    std::vector<acl_policy const*> policies_of(acl_token const& t) const;
    acl_token decode_token(boost::json::object const& o) const;
    response token_create(request const& req);
    response token_by_id(request const& req, std::string_view id, acl_token const* caller,
                         acl_authorizer const& authz);
    response policy_create(request const& req);
    // The ACL file's entries (the constructor reads the file).
    void load_file_policy(boost::json::value const& v, std::string const& where);
    void load_file_token(boost::json::value const& v, std::string const& where);
    acl_rules effective_rules(acl_token const& t) const;
    acl_policy const* find_policy(std::string_view id_or_name) const;

    acl_options opts_;
    std::vector<std::unique_ptr<acl_token>> tokens_;
    std::vector<std::unique_ptr<acl_policy>> policies_;
    std::uint64_t index_ = 0;  // the ACL tables' own index
};

// `target` with the value of a ?token= parameter replaced by <hidden>, for logs.
std::string redact_token(std::string_view target);

}  // namespace tenure::detail::agent
