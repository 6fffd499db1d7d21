// Socket-free tests of the agent's one request router (src/agent/router.hpp):
// each request is routed once, to the endpoint that serves it and the ACL
// requirement Consul would check for it.
#include "agent/router.hpp"

#include <boost/test/unit_test.hpp>
#include <boost/url/parse.hpp>

#include <string>

namespace ag = tenure::detail::agent;
namespace http = boost::beast::http;
using check = ag::acl_requirement::check;
using name_from = ag::acl_requirement::name_from;

namespace {

// Routes "path?query" as the API does: the path, then the query's params.
struct routed {
    std::string target;
    ag::route r;
    routed(http::verb m, std::string t) : target(std::move(t)) {
        auto u = boost::urls::parse_origin_form(target);
        BOOST_REQUIRE(u.has_value());
        r = ag::route_request(m, u->encoded_path(), u->params());
    }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(agent_router)

BOOST_AUTO_TEST_CASE(kv_reads_need_key_read_on_the_key_and_lists_are_filtered) {
    routed get{http::verb::get, "/v1/kv/svc/leader"};
    BOOST_TEST((get.r.endpoint == ag::api_endpoint::kv));
    BOOST_TEST(get.r.rest == "svc/leader");
    BOOST_TEST((get.r.acl.what == check::resource));
    BOOST_TEST((get.r.acl.resource == ag::acl_resource::key));
    BOOST_TEST((get.r.acl.access == ag::acl_access::read));
    BOOST_TEST((get.r.acl.name == name_from::path));

    routed keys{http::verb::get, "/v1/kv/svc/?keys"};
    BOOST_TEST((keys.r.acl.what == check::list));
    BOOST_TEST((keys.r.acl.filter == ag::acl_filter::kind::kv_keys));
    routed recurse{http::verb::get, "/v1/kv/svc/?recurse"};
    BOOST_TEST((recurse.r.acl.filter == ag::acl_filter::kind::kv_entries));
}

BOOST_AUTO_TEST_CASE(kv_writes_need_key_write_and_a_recursive_delete_the_whole_prefix) {
    routed put{http::verb::put, "/v1/kv/job?acquire=abc"};
    BOOST_TEST((put.r.acl.access == ag::acl_access::write));
    BOOST_TEST(!put.r.acl.whole_prefix);
    routed del{http::verb::delete_, "/v1/kv/job/?recurse"};
    BOOST_TEST((del.r.acl.access == ag::acl_access::write));
    BOOST_TEST(del.r.acl.whole_prefix);
}

BOOST_AUTO_TEST_CASE(sessions_route_to_their_endpoint_with_the_id_as_rest) {
    routed create{http::verb::put, "/v1/session/create"};
    BOOST_TEST((create.r.endpoint == ag::api_endpoint::session_create));
    BOOST_TEST((create.r.acl.resource == ag::acl_resource::session));
    BOOST_TEST((create.r.acl.name == name_from::body_node_or_self));
    routed destroy{http::verb::put, "/v1/session/destroy/1234"};
    BOOST_TEST((destroy.r.endpoint == ag::api_endpoint::session_destroy));
    BOOST_TEST(destroy.r.rest == "1234");
    BOOST_TEST((destroy.r.acl.name == name_from::session_node));
    routed list{http::verb::get, "/v1/session/list"};
    BOOST_TEST((list.r.acl.filter == ag::acl_filter::kind::sessions));
    // A GET of a write endpoint is a known token's 405, checked as a list.
    routed create_get{http::verb::get, "/v1/session/create"};
    BOOST_TEST((create_get.r.acl.what == check::none));
}

BOOST_AUTO_TEST_CASE(status_is_exempt_acl_is_the_stores_and_the_unknown_needs_operator) {
    BOOST_TEST((routed{http::verb::get, "/v1/status/leader"}.r.acl.what == check::exempt));
    BOOST_TEST((routed{http::verb::put, "/v1/acl/token"}.r.endpoint == ag::api_endpoint::acl));
    BOOST_TEST((routed{http::verb::put, "/v1/acl/token"}.r.acl.what == check::acl_api));
    routed unknown{http::verb::get, "/v1/operator/raft"};
    BOOST_TEST((unknown.r.endpoint == ag::api_endpoint::not_found));
    BOOST_TEST((unknown.r.acl.what == check::operator_write));
    BOOST_TEST((routed{http::verb::get, "/v1/catalog/services"}.r.acl.what == check::operator_write));
}

BOOST_AUTO_TEST_CASE(agent_checks_write_this_node_and_txn_is_checked_per_operation) {
    routed pass{http::verb::put, "/v1/agent/check/pass/web"};
    BOOST_TEST((pass.r.endpoint == ag::api_endpoint::agent_check_pass));
    BOOST_TEST(pass.r.rest == "web");
    BOOST_TEST((pass.r.acl.resource == ag::acl_resource::node));
    BOOST_TEST((pass.r.acl.name == name_from::self));
    routed txn{http::verb::put, "/v1/txn"};
    BOOST_TEST((txn.r.acl.what == check::txn));
    BOOST_TEST((txn.r.acl.filter == ag::acl_filter::kind::txn_results));
}

BOOST_AUTO_TEST_SUITE_END()
