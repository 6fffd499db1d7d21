// tenure::fence: a monotonic gate per lock key.
#include <boost/test/unit_test.hpp>

#include <tenure/fence.hpp>

BOOST_AUTO_TEST_SUITE(fence)

BOOST_AUTO_TEST_CASE(admits_the_first_token_of_a_key) {
    tenure::fence f;
    BOOST_TEST(f.highest("k") == 0u);
    BOOST_TEST(f.admit("k", 5));
    BOOST_TEST(f.highest("k") == 5u);
}

BOOST_AUTO_TEST_CASE(admits_equal_and_higher_rejects_lower) {
    tenure::fence f;
    BOOST_TEST(f.admit("k", 5));
    BOOST_TEST(f.admit("k", 5));  // the same term writes again
    BOOST_TEST(f.admit("k", 7));  // a newer term
    BOOST_TEST(f.highest("k") == 7u);
    BOOST_TEST(!f.admit("k", 6));  // a stale leader
    BOOST_TEST(!f.admit("k", 5));
    BOOST_TEST(f.highest("k") == 7u);  // a refusal changes nothing
    BOOST_TEST(f.admit("k", 7));
    BOOST_TEST(!f.would_admit("k", 1));
    BOOST_TEST(f.would_admit("k", 8));
    BOOST_TEST(f.highest("k") == 7u);  // would_admit records nothing
}

BOOST_AUTO_TEST_CASE(keys_are_independent) {
    tenure::fence f;
    BOOST_TEST(f.admit("a", 10));
    BOOST_TEST(f.admit("b", 2));  // lower than a's, but another key
    BOOST_TEST(!f.admit("a", 2));
    BOOST_TEST(f.admit("b", 3));
    BOOST_TEST(f.highest("a") == 10u);
    BOOST_TEST(f.highest("b") == 3u);
    BOOST_TEST(f.highest("c") == 0u);
}

BOOST_AUTO_TEST_CASE(admits_fencing_tokens) {
    tenure::fence f;
    tenure::fencing_token const t1{"service/job/leader", 3};
    tenure::fencing_token const t2{"service/job/leader", 4};
    tenure::fencing_token const other{"service/other/leader", 1};
    BOOST_TEST(f.admit(t2));
    BOOST_TEST(!f.admit(t1));
    BOOST_TEST(f.admit(other));
    BOOST_TEST(f.admit(t2));
    f.clear();
    BOOST_TEST(f.admit(t1));
}

BOOST_AUTO_TEST_SUITE_END()
