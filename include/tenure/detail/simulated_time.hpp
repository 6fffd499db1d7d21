// Internal: virtual time for the simulation build of tenure
// (TENURE_SIMULATED_TIME; see tenure/detail/clock.hpp and tests/sim). It is
// installed with the other headers but included only by that build.
//
// One world clock, in nanoseconds from 0, that moves only when the
// io_context has nothing ready: Asio then asks the timers' wait traits how
// long to block until the earliest timer, and world_wait_traits jumps the
// world clock there instead (answering 0). That question is asked only
// before the reactor would block when timerfd is off, hence the #error.
//
// The world holds simulated processes (clients, the agent). Each has its own
// clock, offset and running slightly fast or slow (drift), and may be
// stopped (a stop-the-world pause): a process's handlers run through its
// process_executor, which says whose code is running (process_clock::now()
// answers with that process's clock) and holds them back while it is
// stopped. A process_timer takes and gives time points of its process's
// clock and waits on the world's.
#pragma once

#if !defined(BOOST_ASIO_DISABLE_EPOLL)
#error "TENURE_SIMULATED_TIME needs BOOST_ASIO_DISABLE_EPOLL: the virtual clock jumps when the select reactor would block"
#endif

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/basic_waitable_timer.hpp>
#include <boost/asio/execution.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <type_traits>
#include <utility>
#include <cstdlib>

namespace tenure::detail::sim {

struct process;

struct world_state {
    std::int64_t now_ns = 0;
    process* current = nullptr;                  // whose handler runs now (nullptr: the world's own code)
    boost::asio::io_context* context = nullptr;  // stopped when no timer can ever fire again
    bool stalled = false;                        // set then
    std::uint64_t seed = 0x853c49e6748fea9bull;  // the next random seed is drawn from it (random.hpp)
};

inline world_state& world() {
    static world_state w;
    return w;
}

// A simulated process's clock: local = offset + world * (1 + drift_ppm / 1e6).
struct process {
    std::int64_t offset_ns = 0;
    std::int64_t drift_ppm = 0;
    bool stopped = false;  // a stop-the-world pause: handlers wait in `held`
    bool dead = false;     // crashed: handlers are dropped

    struct task {
        virtual ~task() = default;
        virtual void run() = 0;
    };
    std::deque<std::unique_ptr<task>> held;

    std::int64_t local_at(std::int64_t w) const noexcept {
        return offset_ns + w + static_cast<std::int64_t>(static_cast<__int128>(w) * drift_ppm / 1'000'000);
    }
    // The first world time at which this clock reads `local` or later.
    std::int64_t world_at(std::int64_t local) const noexcept {
        auto w = static_cast<std::int64_t>(static_cast<__int128>(local - offset_ns) * 1'000'000 /
                                           (1'000'000 + drift_ppm));
        while (local_at(w) < local) ++w;
        while (w > 0 && local_at(w - 1) >= local) --w;
        return w;
    }
};

// The world's clock: what the io_context's timer queue compares with.
struct world_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<world_clock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept { return time_point{duration{world().now_ns}}; }
};

struct world_wait_traits {
    static world_clock::duration to_wait_duration(world_clock::duration const& d) {
        if (d <= world_clock::duration::zero()) return world_clock::duration::zero();
        auto& w = world();
        if (d > std::chrono::hours{24 * 365}) {
            // Only never-expiring timers are left: nothing can happen any more.
            w.stalled = true;
            if (w.context) w.context->stop();
            return world_clock::duration::zero();
        }
        w.now_ns += d.count();
        return world_clock::duration::zero();
    }
    static world_clock::duration to_wait_duration(world_clock::time_point const& t) {
        return to_wait_duration(t - world_clock::now());
    }
};

// Time as the running process sees it.
struct process_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<process_clock>;
    static constexpr bool is_steady = true;
    static time_point now() noexcept {
        auto const& w = world();
        return time_point{duration{w.current ? w.current->local_at(w.now_ns) : w.now_ns}};
    }
    static world_clock::time_point to_world(time_point t) noexcept {
        if (t == time_point::max()) return world_clock::time_point::max();
        if (t == time_point::min()) return world_clock::time_point::min();
        auto const* p = world().current;
        auto const n = t.time_since_epoch().count();
        return world_clock::time_point{duration{p ? p->world_at(n) : n}};
    }
    static time_point from_world(world_clock::time_point t) noexcept {
        if (t == world_clock::time_point::max()) return time_point::max();
        if (t == world_clock::time_point::min()) return time_point::min();
        auto const* p = world().current;
        auto const n = t.time_since_epoch().count();
        return time_point{duration{p ? p->local_at(n) : n}};
    }
};

// Calendar time for log lines: 2026-01-01T00:00:00Z plus the process's clock.
struct wall_clock {
    using rep = std::int64_t;
    using period = std::nano;
    using duration = std::chrono::nanoseconds;
    using time_point = std::chrono::time_point<std::chrono::system_clock, duration>;
    static constexpr bool is_steady = false;
    static time_point now() noexcept {
        return time_point{std::chrono::seconds{1'767'225'600} + process_clock::now().time_since_epoch()};
    }
    static std::time_t to_time_t(time_point t) noexcept {
        return std::chrono::system_clock::to_time_t(std::chrono::time_point_cast<std::chrono::system_clock::duration>(t));
    }
};

// A timer with the interface of asio::steady_timer in the process's time.
class process_timer : public boost::asio::basic_waitable_timer<world_clock, world_wait_traits> {
    using base = boost::asio::basic_waitable_timer<world_clock, world_wait_traits>;

public:
    using clock_type = process_clock;
    using duration = process_clock::duration;
    using time_point = process_clock::time_point;
    using executor_type = base::executor_type;

    explicit process_timer(executor_type const& ex) : base(ex) {}
    process_timer(executor_type const& ex, time_point t) : base(ex, process_clock::to_world(t)) {}
    process_timer(executor_type const& ex, duration d) : base(ex, process_clock::to_world(process_clock::now() + d)) {}
    template <class Context, class = std::enable_if_t<std::is_convertible_v<Context&, boost::asio::execution_context&>>>
    explicit process_timer(Context& ctx) : base(ctx) {}
    template <class Context, class = std::enable_if_t<std::is_convertible_v<Context&, boost::asio::execution_context&>>>
    process_timer(Context& ctx, time_point t) : base(ctx, process_clock::to_world(t)) {}
    template <class Context, class = std::enable_if_t<std::is_convertible_v<Context&, boost::asio::execution_context&>>>
    process_timer(Context& ctx, duration d) : base(ctx, process_clock::to_world(process_clock::now() + d)) {}

    std::size_t expires_at(time_point t) { return base::expires_at(process_clock::to_world(t)); }
    std::size_t expires_after(duration d) { return expires_at(process_clock::now() + d); }
    time_point expiry() const { return process_clock::from_world(base::expiry()); }
};

// The executor of a simulated process: runs its handlers through the world's
// io_context, as that process (process_clock, stop-the-world, crash).
class process_executor {
public:
    process_executor(boost::asio::io_context::executor_type inner, process* p) noexcept
        : inner_(std::move(inner)), process_(p) {}

    boost::asio::io_context& query(boost::asio::execution::context_t) const noexcept {
        return boost::asio::query(inner_, boost::asio::execution::context);
    }
    boost::asio::execution::blocking_t query(boost::asio::execution::blocking_t) const noexcept {
        return possibly_ ? boost::asio::execution::blocking_t(boost::asio::execution::blocking.possibly)
                         : boost::asio::execution::blocking_t(boost::asio::execution::blocking.never);
    }
    process_executor require(boost::asio::execution::blocking_t::never_t) const noexcept {
        auto e = *this;
        e.possibly_ = false;
        return e;
    }
    // dispatch(): inline when this process's handler is the one running (as a
    // strand does; Asio's co_spawn relies on it to emit a cancellation before
    // its handler goes away).
    process_executor require(boost::asio::execution::blocking_t::possibly_t) const noexcept {
        auto e = *this;
        e.possibly_ = true;
        return e;
    }

    template <class F>
    void execute(F&& f) const {
        auto& w = world();
        if (possibly_ && w.current == process_ && !process_->stopped && !process_->dead &&
            inner_.running_in_this_thread()) {
            std::decay_t<F> fn(std::forward<F>(f));
            fn();
            return;
        }
        boost::asio::post(inner_, [p = process_, f = std::decay_t<F>(std::forward<F>(f))]() mutable {
            run_as(p, std::move(f));
        });
    }

    process* owner() const noexcept { return process_; }

    friend bool operator==(process_executor const& a, process_executor const& b) noexcept {
        return a.inner_ == b.inner_ && a.process_ == b.process_ && a.possibly_ == b.possibly_;
    }
    friend bool operator!=(process_executor const& a, process_executor const& b) noexcept { return !(a == b); }

    // Runs f as process p (or holds it while p is stopped, drops it once p crashed).
    template <class F>
    static void run_as(process* p, F f) {
        if (p->dead) return;
        if (p->stopped) {
            struct held_task final : process::task {
                explicit held_task(F fn) : f(std::move(fn)) {}
                void run() override { f(); }
                F f;
            };
            p->held.push_back(std::make_unique<held_task>(std::move(f)));
            return;
        }
        auto& w = world();
        struct restore {
            world_state& w;
            process* previous;
            ~restore() { w.current = previous; }
        } guard{w, w.current};
        w.current = p;
        f();
    }

    // Ends a stop-the-world pause: the held handlers run, in order, as p.
    static void resume(boost::asio::io_context& io, process* p) {
        p->stopped = false;
        auto held = std::move(p->held);
        for (auto& t : held)
            boost::asio::post(io, [p, t = std::shared_ptr<process::task>(std::move(t))] {
                run_as(p, [&t] { t->run(); });
            });
    }

private:
    boost::asio::io_context::executor_type inner_;
    process* process_;
    bool possibly_ = true;  // as io_context::executor_type: dispatch runs inline, post() requires never
};

}  // namespace tenure::detail::sim
