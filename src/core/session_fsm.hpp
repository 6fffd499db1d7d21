// The session's liveness rules, socket-free (time is passed in).
//
// Renew every TTL/2. After a failed renewal retry at least every second (and
// at least four times per TTL) until a full TTL has passed since the send time
// of the last acknowledged renewal: that instant is the local deadline. The
// server invalidates no earlier than its receive time of that renewal + 2xTTL,
// so a holder that stops at the local deadline stops at least one TTL before
// anyone else can be handed the key.
#pragma once

#include <tenure/detail/clock.hpp>
#include <tenure/error.hpp>
#include <tenure/session.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>

namespace tenure::detail {

using tenure::session_state;

class session_fsm {
public:
    using clock = tenure::detail::clock;
    using time_point = clock::time_point;
    using duration = std::chrono::nanoseconds;

    // `acked_sent_at`: send time of the create request, the first acknowledgement.
    session_fsm(duration ttl, time_point acked_sent_at) : ttl_(ttl), last_ack_sent_(acked_sent_at) {
        next_renew_ = acked_sent_at + ttl_ / 2;
    }

    duration ttl() const noexcept { return ttl_; }
    // Renew every TTL/divisor (2 by default; etcd's clients use 3). Call
    // before the first renewal.
    void set_renew_divisor(int divisor) noexcept {
        divisor_ = std::max(divisor, 1);
        next_renew_ = last_ack_sent_ + ttl_ / divisor_;
    }
    bool has_ttl() const noexcept { return ttl_.count() > 0; }
    session_state state() const noexcept { return state_; }
    error lost_reason() const noexcept { return reason_; }

    // When the holder must consider itself expired (time_point::max() without a TTL).
    time_point local_deadline() const noexcept {
        return has_ttl() && !ignore_local_deadline_ ? last_ack_sent_ + ttl_ : time_point::max();
    }

    // TEST ONLY: the planted bug of the deterministic simulation (tests/sim):
    // the session never expires locally, so a partitioned or paused holder
    // keeps believing it leads. Nothing in the library calls this.
    void ignore_local_deadline_for_testing() noexcept { ignore_local_deadline_ = true; }
    time_point next_renew() const noexcept { return has_ttl() ? next_renew_ : time_point::max(); }
    // The instant the driver must wake: the next renewal or the deadline.
    time_point next_wakeup() const noexcept { return std::min(next_renew(), local_deadline()); }
    time_point last_ack_sent() const noexcept { return last_ack_sent_; }

    // Interval between retries while in jeopardy.
    duration retry_interval() const noexcept {
        return std::min<duration>(std::chrono::seconds{1}, std::max<duration>(ttl_ / 4, std::chrono::milliseconds{1}));
    }

    void renew_succeeded(time_point sent_at, time_point now) {
        if (state_ == session_state::lost) return;
        // A late answer must never move the deadline backwards.
        last_ack_sent_ = std::max(last_ack_sent_, sent_at);
        state_ = session_state::healthy;
        next_renew_ = std::max(now, last_ack_sent_ + ttl_ / divisor_);
        if (now >= local_deadline()) lose(error::lease_expired_locally);
    }

    void renew_failed(time_point now) { renew_failed(now, now); }

    // A renewal sent at `sent_at` failed at `now`: the next try comes one
    // retry interval after that send, or at once when the attempt itself took
    // longer (a timed-out attempt must not push the retry onto the deadline:
    // with TTL <= 4 s a timeout at TTL/4 would otherwise leave no retry).
    void renew_failed(time_point sent_at, time_point now) {
        if (state_ == session_state::lost) return;
        if (now >= local_deadline()) {
            lose(error::lease_expired_locally);
            return;
        }
        state_ = session_state::jeopardy;
        next_renew_ = std::min(std::max(now, sent_at + retry_interval()), local_deadline());
    }

    // The server answered 404: the session is gone.
    void invalidated() { lose(error::session_invalidated); }

    // Checks the local deadline; true when this call made the session lost.
    bool check_deadline(time_point now) {
        if (state_ == session_state::lost || !has_ttl() || now < local_deadline()) return false;
        lose(error::lease_expired_locally);
        return true;
    }

    void lose(error why) {
        if (state_ == session_state::lost) return;
        state_ = session_state::lost;
        reason_ = why;
    }

private:
    duration ttl_;
    int divisor_ = 2;
    bool ignore_local_deadline_ = false;  // test-only, see ignore_local_deadline_for_testing()
    time_point last_ack_sent_;
    time_point next_renew_;
    session_state state_ = session_state::healthy;
    error reason_ = error::leadership_lost;
};

// When a candidate should retry an acquire that was refused on a free key
// (lock-delay). The delay was started by the server when the previous holder
// was invalidated, which is no later than when we saw the key become free, so
// retrying at seen_free + holder's LockDelay is never early by more than the
// notification latency; after that a short exponential backoff covers clock
// and estimate error without falling back to Consul's fixed 5 s poll.
class acquire_backoff {
public:
    using clock = tenure::detail::clock;
    using time_point = clock::time_point;
    using duration = std::chrono::nanoseconds;

    explicit acquire_backoff(duration min_backoff = std::chrono::milliseconds{2},
                             duration max_backoff = std::chrono::milliseconds{250})
        : min_(min_backoff), max_(max_backoff) {}

    // Spreads the retries of many followers over up to `max_spread` (at most
    // a tenth of the lock-delay) after its end, drawn from `seed`: when a
    // hundred candidates retry at the same instant, the winner's answer
    // queues behind the losers' requests. Off (0) by default.
    void spread_retries(duration max_spread, std::uint64_t seed) {
        spread_ = max_spread;
        rng_.seed(static_cast<std::uint_fast32_t>(seed ^ (seed >> 32)));
    }

    // For the one candidate that goes first (the marker names it): start
    // trying up to `max_lead` (at most a tenth of the lock-delay) before the
    // estimated end, then every `step` until a little past it. The server
    // started the delay when it invalidated the holder, earlier than we saw
    // the key free by the wake-up's lag (our answer is one of every parked
    // watcher's, then queued behind the others' in our process), so the end
    // estimated from our sighting is late by that lag. A refused early try
    // costs one small transaction. Off (0) by default.
    void lead_retries(duration max_lead, duration step = std::chrono::microseconds{200}) {
        lead_ = max_lead;
        lead_step_ = step;
    }

    // The key was seen going from held to free at `now`; `lock_delay` is the
    // previous holder's LockDelay (clamped to 60 s as the server does).
    void freed(time_point now, duration lock_delay) {
        lock_delay = std::clamp<duration>(lock_delay, duration{0}, std::chrono::seconds{60});
        auto const lead = std::min<duration>(lead_, lock_delay / 10);
        expected_end_ = now + lock_delay - lead + spread_sample(lock_delay);
        lead_tries_ = lead > duration{0} && lead_step_ > duration{0} ? static_cast<int>(lead / lead_step_) + 1 : 0;
        attempts_ = 0;
    }

    // Someone holds the key again: forget the estimate.
    void held() {
        expected_end_.reset();
        attempts_ = 0;
        lead_tries_ = 0;
    }

    // An acquire on a free key answered false at `now`: when to try again.
    time_point refused(time_point now, duration fallback_delay) {
        if (!expected_end_) expected_end_ = now + std::clamp<duration>(fallback_delay, duration{0}, std::chrono::seconds{60});
        if (now < *expected_end_) {
            attempts_ = 0;
            return *expected_end_;
        }
        if (lead_tries_ > 0) {
            --lead_tries_;
            return now + lead_step_;
        }
        duration wait = min_;
        for (int i = 0; i < attempts_ && wait < max_; ++i) wait *= 2;
        ++attempts_;
        return now + std::min(wait, max_);
    }

    std::optional<time_point> expected_end() const noexcept { return expected_end_; }

private:
    duration spread_sample(duration lock_delay) {
        auto const limit = std::min<duration>(spread_, lock_delay / 10);
        if (limit <= duration{0}) return duration{0};
        std::uniform_int_distribution<duration::rep> d(0, limit.count());
        return duration{d(rng_)};
    }

    duration min_, max_;
    std::optional<time_point> expected_end_;
    int attempts_ = 0;
    duration spread_{0};
    duration lead_{0};
    duration lead_step_{0};
    int lead_tries_ = 0;  // early tries left, `lead_step_` apart
    std::minstd_rand rng_;
};

}  // namespace tenure::detail
