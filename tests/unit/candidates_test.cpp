// The candidate registry beside a Consul lock key (consul/candidates.hpp):
// the marker naming the best waiting candidate, and how a read ranks entries.
#include <boost/test/unit_test.hpp>

#include "consul/candidates.hpp"

#include <string>
#include <vector>

namespace td = tenure::detail;

namespace {

tenure::consul::kv_pair entry(std::string const& key, std::string const& session, std::string const& holder,
                              int priority, std::uint64_t created) {
    tenure::consul::kv_pair p;
    p.key = td::candidate_key(key, session);
    p.flags = td::candidate_flag_value;
    p.session = holder;
    p.create_index = created;
    p.modify_index = created;
    p.value = td::encode_candidate(session + "-name", "v", priority, 1);
    return p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(candidates)

BOOST_AUTO_TEST_CASE(marker_names_a_priority_and_a_session) {
    auto const m = td::decode_priority_marker(td::encode_priority_marker(5, "9a1e-sid"));
    BOOST_REQUIRE(m);
    BOOST_TEST(m->priority == 5);
    BOOST_TEST(m->first == "9a1e-sid");
    auto const negative = td::decode_priority_marker(td::encode_priority_marker(-3, "s"));
    BOOST_REQUIRE(negative);
    BOOST_TEST(negative->priority == -3);
}

BOOST_AUTO_TEST_CASE(a_marker_of_the_earlier_format_is_a_priority_alone) {
    auto const m = td::decode_priority_marker(std::string("7"));
    BOOST_REQUIRE(m);
    BOOST_TEST(m->priority == 7);
    BOOST_TEST(m->first.empty());
}

BOOST_AUTO_TEST_CASE(a_damaged_marker_is_no_marker) {
    for (std::string bad : {"", "x", "5x", "5 ", "5 a b", "5 a/b", " 5 a", "99999999999 a"})
        BOOST_TEST(!td::decode_priority_marker(bad), "'" << bad << "' decodes");
    BOOST_TEST(!td::decode_priority_marker(std::nullopt));
}

BOOST_AUTO_TEST_CASE(a_registrant_takes_the_marker_only_when_it_ranks_before_the_one_named) {
    BOOST_TEST(td::takes_marker(std::nullopt, 0));                      // nobody named
    BOOST_TEST(td::takes_marker(td::priority_marker{1, "a"}, 2));       // a higher priority
    BOOST_TEST(!td::takes_marker(td::priority_marker{1, "a"}, 1));      // equals: the first stays
    BOOST_TEST(!td::takes_marker(td::priority_marker{1, "a"}, 0));      // a lower one
    BOOST_TEST(td::takes_marker(td::priority_marker{1, ""}, 1));        // the earlier format names nobody
    BOOST_TEST(!td::takes_marker(td::priority_marker{3, ""}, 1));
}

BOOST_AUTO_TEST_CASE(a_read_ranks_by_priority_then_by_how_long_each_waited) {
    std::string const key = "jobs/report";
    std::vector<tenure::consul::kv_pair> pairs{
        entry(key, "late-equal", "late-equal", 1, 30),
        entry(key, "low", "low", 0, 5),
        entry(key, "early-equal", "early-equal", 1, 20),
        entry(key, "high", "high", 4, 40),
        entry(key, "gone", "", 9, 1),  // its session ended: prunable, never ranked
    };
    tenure::consul::kv_pair marker;
    marker.key = td::priority_marker_key(key);
    marker.value = td::encode_priority_marker(4, "high");
    pairs.push_back(marker);
    auto const v = td::parse_registry(key, pairs, 50);
    std::vector<std::string> order;
    for (auto const& c : v.live) order.push_back(c.session);
    std::vector<std::string> const want{"high", "early-equal", "late-equal", "low"};
    BOOST_TEST(order == want, boost::test_tools::per_element());
    BOOST_REQUIRE(v.stale.size() == 1u);
    BOOST_TEST(v.stale.front().key == td::candidate_key(key, "gone"));
    BOOST_REQUIRE(v.marker);
    BOOST_TEST(td::ranks_before(v.live[1], v.live[2]));
    BOOST_TEST(!td::ranks_before(v.live[2], v.live[1]));
}

// A read of the key's whole tree (a release's read-back) sorts every name
// to its place, and leaves out what only looks like the registry.
BOOST_AUTO_TEST_CASE(a_read_sorts_each_name_of_the_tree) {
    std::string const key = "jobs/report";
    auto plain = [](std::string k, std::uint64_t flags, std::uint64_t index) {
        tenure::consul::kv_pair p;
        p.key = std::move(k);
        p.flags = flags;
        p.modify_index = index;
        return p;
    };
    std::vector<tenure::consul::kv_pair> pairs{
        plain(key, tenure::consul::lock_flag_value, 11),
        plain(td::registry_seen_key(key), 0, 12),
        plain(td::transfer_request_key(key), td::transfer_flag_value, 13),
        plain(td::priority_marker_key(key), 0, 14),
        entry(key, "waiter", "waiter", 2, 15),
        plain(key + "2", tenure::consul::lock_flag_value, 16),                        // another key
        plain(key + "2.candidates/x", td::candidate_flag_value, 17),                 // its registry
        plain(td::candidate_key(key, "a/b"), td::candidate_flag_value, 18),          // not a session's name
        plain(td::candidate_key(key, ".other"), td::candidate_flag_value, 19),       // not a session's name
    };
    auto const v = td::parse_registry(key, pairs, 50);
    BOOST_TEST(v.index == 50u);
    BOOST_REQUIRE(v.lock);
    BOOST_TEST(v.lock->modify_index == 11u);
    BOOST_REQUIRE(v.seen);
    BOOST_TEST(v.seen->modify_index == 12u);
    BOOST_REQUIRE(v.request);
    BOOST_TEST(v.request->modify_index == 13u);
    BOOST_REQUIRE(v.marker);
    BOOST_TEST(v.marker->modify_index == 14u);
    BOOST_REQUIRE(v.live.size() == 1u);
    BOOST_TEST(v.live.front().session == "waiter");
    BOOST_TEST(v.live.front().priority == 2);
    BOOST_TEST(v.stale.empty());

    // A `.transfer` key without the request's flags is no request.
    pairs[2].flags = 0;
    BOOST_TEST(!td::parse_registry(key, pairs, 50).request);
}

BOOST_AUTO_TEST_SUITE_END()
