#include "primitives.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

namespace {

using namespace std::chrono_literals;
using boost::system::system_error;

constexpr auto follower_wait = 30s;  // blocking-query wait of followers and monitors

bool is_abort(system_error const& e) { return e.code() == asio::error::operation_aborted; }

asio::awaitable<void> sleep_until(clock::time_point t) {
    asio::steady_timer timer(co_await asio::this_coro::executor, t);
    co_await timer.async_wait(asio::use_awaitable);
}

// Sleeps `delay`, then doubles it (at most 1 s): the pause before retrying
// after a transient error. `delay` lives in the caller's frame.
asio::awaitable<void> pause_and_grow(clock::duration& delay) {
    co_await sleep_until(clock::now() + delay);
    delay = std::min<clock::duration>(delay * 2, 1s);
}

std::optional<leader_info> to_leader(std::optional<consul::kv_pair> const& p) {
    if (!p || p->session.empty()) return std::nullopt;
    return leader_info{p->value.value_or(""), p->session, p->lock_index, p->modify_index};
}

}  // namespace

// ---- scope_state ---------------------------------------------------------------

void scope_state::lose(boost::system::error_code why) {
    if (status != scope_status::held) return;
    status = scope_status::lost;
    reason = why;
    lost_event.set();
    monitor_cancel.emit(asio::cancellation_type::terminal);
}

bool scope_state::begin_release() {
    // A scope lost to its own lease may still hold the key on the server:
    // releasing it lets the next leader in without waiting for lock-delay.
    bool send = status == scope_status::held ||
                (status == scope_status::lost && reason == make_error_code(error::lease_expired_locally));
    if (status == scope_status::held) {
        status = scope_status::released;
        lost_event.set();
        monitor_cancel.emit(asio::cancellation_type::terminal);
    }
    return send;
}

asio::awaitable<void> scope_state::send_release() {
    auto self = shared_from_this();
    co_await session->client.kv_release(key, session->id, value, consul::lock_flag_value);
}

void scope_state::start_monitor() {
    asio::co_spawn(session->client.get_executor(), [self = shared_from_this()]() { return self->monitor(); },
                   asio::bind_cancellation_slot(monitor_cancel.slot(), asio::detached));
}

// Watches the key with consistent blocking queries; loss when the key is gone
// or held by another session. Errors are retried: the session's local
// deadline, not the monitor, decides when an unreachable server means loss.
asio::awaitable<void> scope_state::monitor() {
    auto self = shared_from_this();
    auto& client = session->client;
    std::uint64_t index = modify_index;
    clock::duration retry = 20ms;
    while (status == scope_status::held) {
        std::optional<consul::read_result<std::optional<consul::kv_pair>>> r;
        try {
            consul::read_options ro;
            ro.index = index;
            ro.wait = follower_wait;
            ro.mode = consul::consistency::consistent;
            r = co_await client.kv_get(key, ro);
            retry = 20ms;
        } catch (system_error const& e) {
            if (status != scope_status::held || is_abort(e)) co_return;
        }
        if (status != scope_status::held) co_return;
        if (!r) {
            co_await pause_and_grow(retry);  // throws operation_aborted when the monitor is stopped
            continue;
        }
        auto const& pair = r->value;
        if (!pair) {
            lose(make_error_code(error::key_deleted));
            co_return;
        }
        if (pair->session != session->id) {
            auto why = make_error_code(error::released_by_other);
            if (pair->session.empty()) {
                // Freed without our release: was our session invalidated?
                bool gone = false;
                try {
                    auto info = co_await client.session_info_get(session->id);
                    gone = !info.value.has_value();
                } catch (system_error const&) {
                }
                if (gone) why = make_error_code(error::session_invalidated);
            }
            lose(why);
            co_return;
        }
        index = consul::next_wait_index(index, r->meta.index);
    }
}

// The candidate loop (api.Lock's algorithm, minus its 5 s poll): block while
// someone holds the key, race when it clears, and on a refusal of a free key
// (lock-delay) retry when the previous holder's LockDelay ends.
asio::awaitable<leadership_scope> acquire_loop(std::shared_ptr<session_impl> sess, std::string const& key,
                                               std::string const& value, bool once) {
    auto& client = sess->client;
    std::uint64_t index = 0;
    acquire_backoff backoff;
    std::string last_holder;
    clock::duration holder_delay = sess->options.lock_delay;
    clock::duration error_retry = 20ms;

    for (;;) {
        std::optional<consul::read_result<std::optional<consul::kv_pair>>> r;
        bool transient = false;
        try {
            consul::read_options ro;
            ro.index = index;
            ro.wait = follower_wait;
            ro.mode = consul::consistency::consistent;
            r = co_await client.kv_get(key, ro);
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
            transient = true;
        }
        if (transient) {
            co_await pause_and_grow(error_retry);
            index = 0;
            continue;
        }
        error_retry = 20ms;
        auto const& pair = r->value;
        if (pair && pair->flags != consul::lock_flag_value) throw system_error(make_error_code(error::lock_conflict));

        if (pair && !pair->session.empty() && pair->session != sess->id) {
            // Held by another candidate: learn its LockDelay once, then block.
            if (pair->session != last_holder) {
                last_holder = pair->session;
                holder_delay = sess->options.lock_delay;
                try {
                    auto info = co_await client.session_info_get(last_holder);
                    if (info.value) holder_delay = info.value->lock_delay;
                } catch (system_error const& ex) {
                    if (is_abort(ex)) throw;
                }
            }
            backoff.held();
            if (once) co_return leadership_scope{};
            index = consul::next_wait_index(index, r->meta.index);
            continue;
        }
        if (!last_holder.empty()) {
            // We saw it held and now free: a lock-delay may have started now.
            backoff.freed(clock::now(), holder_delay);
            last_holder.clear();
        }

        bool ok = false;
        try {
            ok = co_await client.kv_acquire(key, sess->id, value, consul::lock_flag_value);
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
            transient = true;
        }
        if (transient) {
            co_await pause_and_grow(error_retry);
            index = 0;
            continue;
        }
        if (ok) {
            // Read back the LockIndex: the fencing token of this term.
            consul::read_options ro;
            ro.mode = consul::consistency::consistent;
            auto held = co_await client.kv_get(key, ro);
            if (!held.value || held.value->session != sess->id) {
                index = 0;  // taken away at once (force release): campaign again
                continue;
            }
            auto st = std::make_shared<scope_state>(sess, key, value);
            st->token = held.value->lock_index;
            st->modify_index = held.value->modify_index;
            sess->scopes.push_back(st);
            st->start_monitor();
            co_return scope_access::make(std::move(st));
        }
        if (once) co_return leadership_scope{};

        // Refused. Held again (we lost the race) or a lock-delay on a free key?
        consul::read_options ro;
        ro.mode = consul::consistency::consistent;
        auto again = co_await client.kv_get(key, ro);
        if (again.value && !again.value->session.empty()) {
            index = 0;  // the next pass sees the holder and blocks on it
            continue;
        }
        co_await sleep_until(backoff.refused(clock::now(), sess->options.lock_delay));
        index = 0;
    }
}

}  // namespace detail

// ---- leadership_scope ------------------------------------------------------------

leadership_scope& leadership_scope::operator=(leadership_scope&& other) noexcept {
    if (this != &other) {
        leadership_scope old(std::move(*this));
        state_ = std::move(other.state_);
    }
    return *this;
}

leadership_scope::~leadership_scope() {
    if (!state_ || !state_->begin_release()) return;
    // Release in the background: a destructor cannot await.
    auto s = state_;
    asio::co_spawn(
        s->session->client.get_executor(),
        [s]() -> asio::awaitable<void> {
            try {
                co_await s->send_release();
            } catch (boost::system::system_error const&) {
            }
        },
        asio::detached);
}

bool leadership_scope::held() const noexcept { return state_ && state_->status == detail::scope_status::held; }
bool leadership_scope::lost() const noexcept { return state_ && state_->status == detail::scope_status::lost; }
boost::system::error_code leadership_scope::loss_reason() const noexcept {
    return state_ ? state_->reason : boost::system::error_code{};
}
std::uint64_t leadership_scope::token() const noexcept { return state_ ? state_->token : 0; }
fencing_token leadership_scope::fencing() const { return state_ ? fencing_token{state_->key, state_->token} : fencing_token{}; }

namespace {
std::string const empty_string;
}
std::string const& leadership_scope::key() const noexcept { return state_ ? state_->key : empty_string; }
std::string const& leadership_scope::session_id() const noexcept { return state_ ? state_->session->id : empty_string; }
std::string const& leadership_scope::value() const noexcept { return state_ ? state_->value : empty_string; }

boost::asio::any_io_executor leadership_scope::get_executor() const {
    if (!state_) throw boost::system::system_error(make_error_code(error::not_held));
    return state_->session->client.get_executor();
}

asio::awaitable<bool> leadership_scope::run_impl(std::shared_ptr<detail::scope_state> s, asio::awaitable<void> work) {
    if (s->status != detail::scope_status::held) co_return false;
    // The work finishing first is a normal end; the loss event first cancels
    // the work and waits for it to finish.
    co_return co_await detail::race(std::move(work), s->lost_event.wait());
}

asio::awaitable<void> leadership_scope::wait_lost_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s) throw boost::system::system_error(make_error_code(error::not_held));
    co_await s->lost_event.wait();
    if (s->status == detail::scope_status::lost) throw boost::system::system_error(s->reason);
    throw boost::system::system_error(make_error_code(error::not_held));
}

asio::awaitable<void> leadership_scope::release_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s || !s->begin_release()) co_return;
    co_await s->send_release();
}

asio::awaitable<bool> leadership_scope::confirm_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s || s->status != detail::scope_status::held) co_return false;
    consul::read_options ro;
    ro.mode = consul::consistency::consistent;
    auto r = co_await s->session->client.kv_get(s->key, ro);
    if (s->status != detail::scope_status::held) co_return false;
    if (!r.value) {
        s->lose(make_error_code(error::key_deleted));
        co_return false;
    }
    if (r.value->session != s->session->id) {
        s->lose(make_error_code(error::released_by_other));
        co_return false;
    }
    co_return true;
}

// ---- election ----------------------------------------------------------------------

election::election(session& s, std::string key, std::string value)
    : session_(&s), key_(std::move(key)), value_(std::move(value)) {
    if (!s.valid()) throw std::invalid_argument("tenure::election needs a created session");
    if (key_.empty()) throw std::invalid_argument("tenure::election needs a key");
}

asio::awaitable<leadership_scope> election::acquire_impl(bool once) {
    auto sess = session_->impl();
    if (sess->lost_event.is_set()) throw boost::system::system_error(sess->lost_reason);
    // A candidate whose session dies while it waits stops with that reason.
    auto r = co_await detail::race(detail::acquire_loop(sess, key_, value_, once), sess->lost_event.wait());
    if (!r) throw boost::system::system_error(sess->lost_reason);
    co_return std::move(*r);
}

asio::awaitable<std::optional<leader_info>> election::leader_impl() {
    auto r = co_await session_->client().kv_get(key_);
    co_return detail::to_leader(r.value);
}

// ---- leader_observer ------------------------------------------------------------------

leader_observer::leader_observer(consul::client& client, std::string key) : client_(&client), key_(std::move(key)) {}

asio::awaitable<std::optional<leader_info>> leader_observer::next_impl() {
    auto same = [](std::optional<leader_info> const& a, std::optional<leader_info> const& b) {
        if (a.has_value() != b.has_value()) return false;
        return !a || (a->session == b->session && a->lock_index == b->lock_index && a->value == b->value);
    };
    for (;;) {
        consul::read_options ro;
        if (!first_) {
            ro.index = index_;
            ro.wait = detail::follower_wait;
        }
        auto r = co_await client_->kv_get(key_, ro);
        index_ = consul::next_wait_index(index_, r.meta.index);
        auto info = detail::to_leader(r.value);
        if (first_ || !same(info, last_)) {
            first_ = false;
            last_ = info;
            co_return info;
        }
    }
}

// ---- campaign -------------------------------------------------------------------------

asio::awaitable<void> campaign_impl(consul::client& client, campaign_options options,
                                    std::function<asio::awaitable<void>(leadership_scope&)> body) {
    using boost::system::system_error;
    session s;
    leadership_scope scope;
    bool cancelled = false;
    try {
        for (;;) {
            if (!s.valid() || s.state() == session_state::lost) {
                bool failed = false;
                try {
                    s = co_await session::create(client, options.session);
                } catch (system_error const& e) {
                    if (detail::is_abort(e)) throw;
                    failed = true;
                }
                if (failed) {
                    co_await detail::sleep_until(detail::clock::now() + options.retry_backoff);
                    continue;
                }
            }
            election e(s, options.key, options.value);
            bool failed = false;
            try {
                scope = co_await e.acquire();
            } catch (system_error const& ex) {
                if (detail::is_abort(ex) || ex.code() == make_error_code(error::lock_conflict)) throw;
                failed = true;
            }
            if (failed) {
                co_await detail::sleep_until(detail::clock::now() + options.retry_backoff);
                continue;
            }
            if (options.on_elected) options.on_elected(scope);
            bool finished = co_await scope.run(body(scope));
            if (!finished && options.on_lost) options.on_lost(scope.loss_reason());
            co_await scope.release();
            scope = leadership_scope{};
            co_await detail::sleep_until(detail::clock::now() + options.retry_backoff);
        }
    } catch (system_error const& e) {
        if (!detail::is_abort(e)) throw;
        cancelled = true;
    }
    // Cancelled: hand over cleanly (release, then destroy the session).
    co_await asio::this_coro::reset_cancellation_state();
    if (cancelled) {
        try {
            co_await scope.release();
            if (s.valid()) co_await s.close();
        } catch (system_error const&) {
        }
        throw system_error(asio::error::operation_aborted);
    }
}

}  // namespace tenure
