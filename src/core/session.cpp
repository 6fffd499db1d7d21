// The backend-agnostic session: renewal loop, loss propagation, close.
#include "core/backend.hpp"
#include <tenure/detail/clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

asio::awaitable<void> event::wait() {
    auto st = state_;
    if (st->set) co_return;
    tenure::detail::timer timer(ex_, clock::time_point::max());
    auto it = st->waiters.insert(st->waiters.end(), &timer);
    struct unlink {
        std::shared_ptr<state> const& st;
        std::list<tenure::detail::timer*>::iterator it;
        ~unlink() { st->waiters.erase(it); }
    } guard{st, it};
    while (!st->set) {
        auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
        auto cs = co_await asio::this_coro::cancellation_state;
        if (!st->set && cs.cancelled() != asio::cancellation_type::none)
            throw boost::system::system_error(asio::error::operation_aborted);
        timer.expires_at(clock::time_point::max());
    }
}

asio::awaitable<void> sleep_until(clock::time_point t) {
    tenure::detail::timer timer(co_await asio::this_coro::executor, t);
    co_await timer.async_wait(asio::use_awaitable);
}

asio::awaitable<void> pause_and_grow(clock::duration& delay) {
    co_await sleep_until(clock::now() + delay);
    delay = std::min<clock::duration>(delay * 2, std::chrono::seconds{1});
}

void session_impl::start() {
    spawn_owned([self = shared_from_this()]() { return self->renew_loop(); });
}

// A request on `slot` reaches the task through a post, never while the task
// runs. Asio 1.81's co_spawn_entry_point, when the coroutine it runs ends
// without ever having been suspended with its cancellation state already
// cancelled, throws operation_aborted from the `co_await post(...)` after
// its try block: out of the thread, out of io_context::run(). An owned task
// can cancel itself in just that way: a monitor that finds its key lost
// calls lose(), which emits the slot the monitor runs under, and ends.
void session_impl::spawn_owned(std::function<asio::awaitable<void>()> work, asio::cancellation_slot slot) {
    ++background;
    auto finished = [self = shared_from_this()] {
        if (--self->background == 0) self->background_idle.cancel();
    };
    if (!slot.is_connected()) {
        asio::co_spawn(executor, std::move(work), [finished](std::exception_ptr) { finished(); });
        return;
    }
    // The relay outlives the task (its completion handler holds it): the
    // co_spawn's own cancellation handler lives in the relay's slot.
    auto relay = std::make_shared<asio::cancellation_signal>();
    slot.assign([relay, ex = executor](asio::cancellation_type t) { asio::post(ex, [relay, t] { relay->emit(t); }); });
    asio::co_spawn(executor, std::move(work),
                   asio::bind_cancellation_slot(relay->slot(), [finished, relay](std::exception_ptr) { finished(); }));
}

asio::awaitable<std::vector<candidate_info>> session_impl::read_candidates(std::string) {
    throw boost::system::system_error(make_error_code(error::operation_not_supported));
    co_return std::vector<candidate_info>{};
}

asio::awaitable<void> session_impl::background_finished() {
    while (background > 0) {
        background_idle.expires_at(clock::time_point::max());
        co_await background_idle.async_wait(asio::as_tuple(asio::use_awaitable));
    }
}

void session_impl::adopt(std::shared_ptr<scope_state> const& s) {
    // A key taken on a session that is lost already - or whose local deadline
    // passed while this process was not running (a pause), before the renewal
    // loop could notice - may be someone else's by now: the scope is lost at
    // once, and run() starts no work under it.
    if (!lost_event.is_set() && fsm.check_deadline(clock::now()))
        mark_lost(make_error_code(error::lease_expired_locally));
    if (lost_event.is_set()) {
        s->lose(lost_reason);
        return;
    }
    // Forget ended scopes now and then (amortised O(1)): a session that takes
    // and releases keys for weeks must not keep every past scope's memory
    // (a weak_ptr keeps a make_shared block allocated).
    if (scopes.size() >= scopes_pruned_at * 2 + 16) {
        std::erase_if(scopes, [](std::weak_ptr<scope_state> const& w) { return w.expired(); });
        scopes_pruned_at = scopes.size();
    }
    scopes.push_back(s);
    if (s->monitor_delay > clock::duration::zero()) defer_monitor(s);
    else s->start_monitor();
    s->emit(leadership_event_kind::acquired);
}

void session_impl::defer_monitor(std::shared_ptr<scope_state> const& s) {
    auto const now = clock::now();
    // Due after its delay; one expiry also starts those that are due within
    // the next quarter of theirs (one wake-up for several).
    deferred_monitor d{s, now + s->monitor_delay, now + s->monitor_delay - s->monitor_delay / 4};
    // Ended terms wait in the queue until the timer passes them; with a long
    // delay and many short terms, drop them now and then (amortised O(1)).
    if (deferred_monitors.size() >= deferred_pruned_at * 2 + 16) {
        std::erase_if(deferred_monitors, [](deferred_monitor const& m) {
            auto live = m.scope.lock();
            return !live || live->status != scope_status::held;
        });
        deferred_pruned_at = deferred_monitors.size();
    }
    auto at = deferred_monitors.end();  // usually every delay is the same and this appends
    while (at != deferred_monitors.begin() && std::prev(at)->due > d.due) --at;
    deferred_monitors.insert(at, std::move(d));
    arm_monitor_timer();
}

// A closed or lost session starts no more monitors, and its timer must not
// keep the io_context running until the last delay would have ended.
void session_impl::stop_deferred_monitors() {
    deferred_monitors.clear();
    monitor_timer.cancel();
    monitor_timer_armed = false;
}

void session_impl::start_due_monitors() {
    // Ended terms leave the queue whatever their due time, so the timer is
    // armed only for a scope still held: under a stream of short terms it
    // fires about once per delay, not once per term.
    auto const now = clock::now();
    while (!deferred_monitors.empty()) {
        auto s = deferred_monitors.front().scope.lock();
        if (s && s->status == scope_status::held) {
            if (deferred_monitors.front().start_from > now) break;
            s->start_monitor();
        }
        deferred_monitors.pop_front();
    }
    arm_monitor_timer();
}

void session_impl::arm_monitor_timer() {
    if (deferred_monitors.empty()) return;
    auto const due = deferred_monitors.front().due;
    // Armed for a later moment than the new front: move it earlier.
    if (monitor_timer_armed && monitor_timer.expiry() <= due) return;
    monitor_timer_armed = true;
    monitor_timer.expires_at(due);
    monitor_timer.async_wait([w = weak_from_this()](boost::system::error_code ec) {
        auto self = w.lock();
        if (!self || ec == asio::error::operation_aborted) return;  // gone, re-armed or stopped
        self->monitor_timer_armed = false;
        self->start_due_monitors();
    });
}

void session_impl::mark_lost(boost::system::error_code why) {
    if (lost_event.is_set()) return;
    if (fsm.state() != session_state::lost) fsm.lose(error::leadership_lost);
    lost_reason = why;
    lost_event.set();
    wake.cancel();
    stop_deferred_monitors();
    // Every scope of this session loses with it.
    auto held = std::move(scopes);
    for (auto& w : held)
        if (auto s = w.lock()) s->lose(why);
    leadership_event e;
    e.kind = leadership_event_kind::lost;
    e.session_id = id;
    e.reason = why;
    emit_event(options.on_event, std::move(e));
}

// The renewal loop: wakes for the next renewal or the local deadline,
// whichever comes first. Each attempt is capped by the local deadline, so a
// hung request (a partition) cannot keep a lease alive past it.
asio::awaitable<void> session_impl::renew_loop() {
    auto self = shared_from_this();
    if (!fsm.has_ttl()) co_return;
    while (!closing && !lost_event.is_set()) {
        wake.expires_at(fsm.next_wakeup());
        auto [wec] = co_await wake.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)wec;
        if (closing || lost_event.is_set()) break;
        auto now = clock::now();
        if (fsm.check_deadline(now)) {
            mark_lost(make_error_code(error::lease_expired_locally));
            break;
        }
        if (now < fsm.next_renew()) continue;

        auto const sent = now;
        auto const attempt_deadline =
            std::min(fsm.local_deadline(), sent + std::max<clock::duration>(fsm.ttl() / 4, fsm.retry_interval()));
        try {
            bool renewed = co_await with_deadline(renew_once(), attempt_deadline);
            if (closing) break;
            if (!renewed) {
                fsm.invalidated();
                mark_lost(make_error_code(error::session_invalidated));
                break;
            }
            auto const acked = clock::now();
            fsm.renew_succeeded(sent, acked);
            leadership_event e;
            e.kind = leadership_event_kind::renewed;
            e.session_id = id;
            e.round_trip = acked - sent;
            e.margin = fsm.local_deadline() - acked;
            e.at = acked;
            emit_event(options.on_event, std::move(e));
            co_await after_renewal();
        } catch (boost::system::system_error const& err) {
            if (closing) break;
            auto const failed_at = clock::now();
            fsm.renew_failed(sent, failed_at);
            if (fsm.state() == session_state::jeopardy) {
                leadership_event e;
                e.kind = leadership_event_kind::jeopardy;
                e.session_id = id;
                e.margin = fsm.local_deadline() - failed_at;
                e.reason = err.code();
                e.at = failed_at;
                emit_event(options.on_event, std::move(e));
            }
        }
        if (fsm.state() == session_state::lost) {
            mark_lost(make_error_code(fsm.lost_reason()));
            break;
        }
    }
}

asio::awaitable<void> session_impl::close() {
    auto self = shared_from_this();
    if (closing) co_return;
    closing = true;
    wake.cancel();
    stop_deferred_monitors();
    // Release every held key first: a clean handover with no lock-delay.
    auto held = scopes;
    for (auto& w : held) {
        auto s = w.lock();
        if (!s || !s->begin_release()) continue;
        try {
            co_await s->release_remote();
        } catch (boost::system::system_error const&) {
            // Destroying the session below frees the key anyway (with lock-delay).
        }
    }
    boost::system::error_code first_error;
    if (!lost_event.is_set()) {
        try {
            co_await destroy_remote();
        } catch (boost::system::system_error const& e) {
            first_error = e.code();
        }
    }
    try {
        co_await cleanup();
    } catch (boost::system::system_error const&) {
    }
    if (!lost_event.is_set()) {
        fsm.lose(error::leadership_lost);
        lost_reason = make_error_code(error::leadership_lost);
        lost_event.set();
    }
    // The renewal loop ends at its next wake-up (a renewal in flight is
    // bounded by its deadline) and background releases with their request.
    // A monitor left to see its release through (monitor_outlives_release)
    // normally ends with it; if that answer was lost it would wait out its
    // blocking query's deadline, so the closed session stops them all now.
    wake.cancel();
    for (auto& w : scopes)
        if (auto s = w.lock()) s->monitor_cancel.emit(asio::cancellation_type::terminal);
    co_await background_finished();
    if (first_error) throw boost::system::system_error(first_error);
}

}  // namespace detail

// ---- session --------------------------------------------------------------------

session& session::operator=(session&& other) noexcept {
    if (this != &other) {
        session old(std::move(*this));
        impl_ = std::move(other.impl_);
    }
    return *this;
}

// Owner of this close: the io_context, whose run() returns once it (and
// the background work it waits for) has finished.
session::~session() {
    if (!impl_ || impl_->closing) return;
    auto impl = impl_;
    asio::co_spawn(impl->executor, [impl]() { return impl->close(); }, asio::detached);
}

namespace {
std::string const no_id;
session_options const no_options;
}  // namespace

// An empty session (default-constructed, moved from) answers as a lost one.
std::string const& session::id() const { return impl_ ? impl_->id : no_id; }
session_options const& session::options() const { return impl_ ? impl_->options : no_options; }
session::executor_type session::get_executor() const { return impl_ ? impl_->executor : executor_type{}; }
session_state session::state() const { return impl_ ? impl_->fsm.state() : session_state::lost; }
boost::system::error_code session::lost_reason() const {
    return impl_ ? impl_->lost_reason : make_error_code(error::no_session);
}
session::clock::time_point session::local_deadline() const {
    return impl_ ? impl_->fsm.local_deadline() : clock::time_point{};
}

asio::awaitable<void> session::wait_lost_impl() {
    auto impl = impl_;
    if (!impl) throw boost::system::system_error(make_error_code(error::no_session));
    co_await impl->lost_event.wait();
    throw boost::system::system_error(impl->lost_reason);
}

asio::awaitable<void> session::close_impl() {
    auto impl = impl_;
    if (!impl) co_return;  // nothing to close
    co_await impl->close();
}

}  // namespace tenure
