// The session's liveness rules and the lock-delay retry timing, driven by a
// hand-advanced clock (no sockets, no sleeping).
#include "core/session_fsm.hpp"

#include <boost/test/unit_test.hpp>

using namespace std::chrono_literals;
using tenure::detail::acquire_backoff;
using tenure::detail::session_fsm;
using tenure::detail::session_state;
using time_point = session_fsm::time_point;

namespace {
time_point const t0{std::chrono::seconds{1000}};
}

BOOST_AUTO_TEST_SUITE(session_fsm_suite)

BOOST_AUTO_TEST_CASE(renews_every_half_ttl_while_healthy) {
    session_fsm f(10s, t0);
    BOOST_TEST((f.state() == session_state::healthy));
    BOOST_TEST((f.next_renew() == t0 + 5s));
    BOOST_TEST((f.local_deadline() == t0 + 10s));
    // A renewal sent at t0+5s, answered 30 ms later.
    f.renew_succeeded(t0 + 5s, t0 + 5s + 30ms);
    BOOST_TEST((f.local_deadline() == t0 + 15s));  // from the SEND time, not the answer
    BOOST_TEST((f.next_renew() == t0 + 10s));
    f.renew_succeeded(t0 + 10s, t0 + 10s + 1ms);
    BOOST_TEST((f.next_renew() == t0 + 15s));
    BOOST_TEST((f.local_deadline() == t0 + 20s));
}

BOOST_AUTO_TEST_CASE(failed_renewals_enter_jeopardy_and_retry_every_second) {
    session_fsm f(10s, t0);
    f.renew_failed(t0 + 5s);
    BOOST_TEST((f.state() == session_state::jeopardy));
    BOOST_TEST((f.next_renew() == t0 + 6s));  // min(1s, ttl/4)
    f.renew_failed(t0 + 6s);
    BOOST_TEST((f.next_renew() == t0 + 7s));
    f.renew_failed(t0 + 9s + 500ms);
    BOOST_TEST((f.next_renew() == t0 + 10s));  // capped by the local deadline
    BOOST_TEST((f.state() == session_state::jeopardy));
    // A success in jeopardy brings it back to healthy.
    f.renew_succeeded(t0 + 9s + 600ms, t0 + 9s + 700ms);
    BOOST_TEST((f.state() == session_state::healthy));
    BOOST_TEST((f.local_deadline() == t0 + 19s + 600ms));
}

// Found by the simulation (tests/sim, seed 77): with TTL 2 s a renewal sent
// at TTL/2 that times out at its cap (TTL/4 later) used to schedule the retry
// a retry interval after the failure, exactly on the local deadline: no retry.
BOOST_AUTO_TEST_CASE(a_timed_out_renewal_is_retried_before_the_deadline) {
    session_fsm f(2s, t0);
    BOOST_TEST((f.next_renew() == t0 + 1s));
    f.renew_failed(t0 + 1s, t0 + 1s + 500ms);  // sent at 1 s, timed out at 1.5 s
    BOOST_TEST((f.state() == session_state::jeopardy));
    BOOST_TEST((f.next_renew() == t0 + 1s + 500ms));  // at once: the interval since the send has passed
    BOOST_TEST((f.next_renew() < f.local_deadline()));
    f.renew_succeeded(t0 + 1s + 500ms, t0 + 1s + 501ms);  // the retry gets through
    BOOST_TEST((f.state() == session_state::healthy));
    BOOST_TEST((f.local_deadline() == t0 + 3s + 500ms));
    // A quick failure still waits out the interval from its send.
    f.renew_failed(t0 + 2s + 500ms, t0 + 2s + 510ms);
    BOOST_TEST((f.next_renew() == t0 + 3s));
}

BOOST_AUTO_TEST_CASE(short_ttls_retry_four_times_per_ttl) {
    session_fsm f(200ms, t0);
    BOOST_TEST((f.retry_interval() == 50ms));
    f.renew_failed(t0 + 100ms);
    BOOST_TEST((f.next_renew() == t0 + 150ms));
}

BOOST_AUTO_TEST_CASE(local_deadline_fires_even_without_any_answer) {
    session_fsm f(10s, t0);
    BOOST_TEST(!f.check_deadline(t0 + 10s - 1ns));
    BOOST_TEST((f.state() == session_state::healthy));
    BOOST_TEST(f.check_deadline(t0 + 10s));
    BOOST_TEST((f.state() == session_state::lost));
    BOOST_TEST((f.lost_reason() == tenure::error::lease_expired_locally));
    BOOST_TEST(!f.check_deadline(t0 + 11s));  // fires once
}

BOOST_AUTO_TEST_CASE(a_failure_past_the_deadline_is_a_loss) {
    session_fsm f(10s, t0);
    f.renew_failed(t0 + 10s);
    BOOST_TEST((f.state() == session_state::lost));
    BOOST_TEST((f.lost_reason() == tenure::error::lease_expired_locally));
}

BOOST_AUTO_TEST_CASE(an_answer_after_the_deadline_does_not_revive) {
    session_fsm f(10s, t0);
    // The renewal was sent at t0+5s but its answer comes after the deadline
    // computed from t0: the send-time rule would put the deadline at t0+15s,
    // which is still ahead, so it is accepted...
    f.renew_succeeded(t0 + 5s, t0 + 9s);
    BOOST_TEST((f.state() == session_state::healthy));
    // ...but an answer whose own send time + TTL has passed is a loss.
    session_fsm g(10s, t0);
    g.renew_succeeded(t0 - 1s, t0 + 10s);
    BOOST_TEST((g.state() == session_state::lost));
    // And once lost it stays lost.
    g.renew_succeeded(t0 + 10s, t0 + 10s);
    BOOST_TEST((g.state() == session_state::lost));
}

BOOST_AUTO_TEST_CASE(a_late_answer_never_moves_the_deadline_back) {
    session_fsm f(10s, t0);
    f.renew_succeeded(t0 + 5s, t0 + 5s);
    f.renew_succeeded(t0 + 2s, t0 + 6s);  // an older request answered late
    BOOST_TEST((f.local_deadline() == t0 + 15s));
}

BOOST_AUTO_TEST_CASE(not_found_means_invalidated) {
    session_fsm f(10s, t0);
    f.invalidated();
    BOOST_TEST((f.state() == session_state::lost));
    BOOST_TEST((f.lost_reason() == tenure::error::session_invalidated));
}

BOOST_AUTO_TEST_CASE(no_ttl_means_no_renewals_and_no_deadline) {
    session_fsm f(0s, t0);
    BOOST_TEST((f.next_renew() == time_point::max()));
    BOOST_TEST((f.local_deadline() == time_point::max()));
    BOOST_TEST(!f.check_deadline(t0 + 24h));
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(acquire_backoff_suite)

BOOST_AUTO_TEST_CASE(retries_when_the_holders_lock_delay_ends) {
    acquire_backoff b;
    b.freed(t0, 15s);
    // Refused right away: come back exactly when the delay ends.
    BOOST_TEST((b.refused(t0 + 3ms, 1s) == t0 + 15s));
    // Refused at the end (server clock a little behind): short backoff, growing.
    BOOST_TEST((b.refused(t0 + 15s, 1s) == t0 + 15s + 2ms));
    BOOST_TEST((b.refused(t0 + 15s + 2ms, 1s) == t0 + 15s + 6ms));
    BOOST_TEST((b.refused(t0 + 15s + 6ms, 1s) == t0 + 15s + 14ms));
}

BOOST_AUTO_TEST_CASE(backoff_is_capped_and_never_polls_every_five_seconds) {
    acquire_backoff b;
    b.freed(t0, 0s);
    time_point now = t0;
    for (int i = 0; i < 20; ++i) {
        time_point next = b.refused(now, 1s);
        BOOST_TEST((next - now <= 250ms));
        now = next;
    }
}

BOOST_AUTO_TEST_CASE(lock_delay_is_clamped_to_sixty_seconds) {
    acquire_backoff b;
    b.freed(t0, 120s);
    BOOST_TEST((b.refused(t0, 1s) == t0 + 60s));
}

BOOST_AUTO_TEST_CASE(without_an_observed_release_the_fallback_delay_is_used) {
    acquire_backoff b;
    BOOST_TEST((b.refused(t0, 2s) == t0 + 2s));
}

BOOST_AUTO_TEST_CASE(retries_spread_after_the_lock_delay_never_before_it) {
    // A hundred followers with different seeds: all retry at or after the end
    // of the 100 ms lock-delay, within the 2 ms spread, and not all at once.
    time_point first = time_point::max(), last = time_point::min();
    for (std::uint64_t seed = 1; seed <= 100; ++seed) {
        acquire_backoff b;
        b.spread_retries(2ms, seed * 7919);
        b.freed(t0, 100ms);
        auto const at = b.refused(t0 + 1ms, 1s);
        BOOST_TEST((at >= t0 + 100ms));
        BOOST_TEST((at <= t0 + 102ms));
        first = std::min(first, at);
        last = std::max(last, at);
    }
    BOOST_TEST((last - first > 1ms));
    BOOST_TEST((first - (t0 + 100ms) < 200us));  // someone goes almost at once
}

BOOST_AUTO_TEST_CASE(the_spread_is_at_most_a_tenth_of_the_lock_delay) {
    for (std::uint64_t seed = 1; seed <= 50; ++seed) {
        acquire_backoff b;
        b.spread_retries(2ms, seed);
        b.freed(t0, 5ms);
        auto const at = b.refused(t0, 1s);
        BOOST_TEST((at >= t0 + 5ms && at <= t0 + 5500us));
        acquire_backoff c;
        c.spread_retries(2ms, seed);
        c.freed(t0, 0ms);  // no lock-delay: no spread
        BOOST_TEST((c.refused(t0, 1s) == t0 + 2ms));  // the ordinary short backoff
    }
}

BOOST_AUTO_TEST_CASE(the_one_that_goes_first_tries_a_little_before_the_end_then_often) {
    // Seen free late by the wake-up's lag: the server's delay ends up to 1 ms
    // before our estimate. Tries from 1 ms before it, every 200 us, until
    // 200 us past it; then the ordinary backoff.
    acquire_backoff b;
    b.lead_retries(1ms);
    b.freed(t0, 100ms);
    BOOST_TEST((b.refused(t0 + 1ms, 1s) == t0 + 99ms));
    time_point now = t0 + 99ms;
    for (int i = 0; i < 6; ++i) {
        time_point const next = b.refused(now, 1s);
        BOOST_TEST((next == now + 200us));
        now = next;
    }
    BOOST_TEST((now == t0 + 100ms + 200us));
    BOOST_TEST((b.refused(now, 1s) == now + 2ms));
    // A later freeing starts the early tries again; a new holder forgets them.
    b.freed(now, 100ms);
    BOOST_TEST((b.refused(now, 1s) == now + 99ms));
    b.held();
    b.freed(t0, 0ms);
    BOOST_TEST((b.refused(t0, 1s) == t0 + 2ms));
}

BOOST_AUTO_TEST_CASE(the_early_tries_are_at_most_a_tenth_of_the_lock_delay) {
    acquire_backoff b;
    b.lead_retries(1ms);
    b.freed(t0, 5ms);
    BOOST_TEST((b.refused(t0, 1s) == t0 + 4500us));
    BOOST_TEST((b.refused(t0 + 4500us, 1s) == t0 + 4700us));
    BOOST_TEST((b.refused(t0 + 4700us, 1s) == t0 + 4900us));
    BOOST_TEST((b.refused(t0 + 4900us, 1s) == t0 + 5100us));
    BOOST_TEST((b.refused(t0 + 5100us, 1s) == t0 + 5100us + 2ms));  // past the end: the ordinary backoff
}

BOOST_AUTO_TEST_CASE(a_new_holder_resets_the_estimate) {
    acquire_backoff b;
    b.freed(t0, 15s);
    b.held();
    BOOST_TEST(!b.expected_end().has_value());
    b.freed(t0 + 20s, 1s);
    BOOST_TEST((b.refused(t0 + 20s, 15s) == t0 + 21s));
}

BOOST_AUTO_TEST_SUITE_END()
