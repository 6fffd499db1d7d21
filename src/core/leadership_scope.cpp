// The backend-agnostic half of a held key: loss, release, and leadership_scope.
#include "core/backend.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/this_coro.hpp>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

// ---- scope_state ---------------------------------------------------------------

void scope_state::emit(leadership_event_kind kind, boost::system::error_code why) const noexcept {
    auto const& handler = session->options.on_event;
    if (!handler) return;
    leadership_event e;
    e.kind = kind;
    e.session_id = session->id;
    e.key = key;
    e.token = token;
    e.reason = why;
    emit_event(handler, std::move(e));
}

void scope_state::lose(boost::system::error_code why) {
    if (status != scope_status::held) return;
    status = scope_status::lost;
    reason = why;
    emit(leadership_event_kind::lost, why);
    lost_event.set();
    monitor_cancel.emit(asio::cancellation_type::terminal);
    on_end();
}

asio::awaitable<std::uint64_t> scope_state::transfer(std::string, boost::system::error_code) {
    throw boost::system::system_error(make_error_code(error::operation_not_supported));
    co_return 0;
}

bool scope_state::begin_release() {
    // A scope lost to its own lease may still hold the key on the server:
    // releasing it lets the next leader in without waiting for lock-delay.
    // So may a scope whose release failed or was cancelled before it went
    // through: it is sent again (a release that reaches the server twice
    // changes nothing the second time).
    bool send = status == scope_status::held ||
                (status == scope_status::lost && reason == make_error_code(error::lease_expired_locally)) ||
                (status == scope_status::released && release_failed);
    if (status == scope_status::held) {
        status = scope_status::released;
        emit(leadership_event_kind::released);
        lost_event.set();
        if (!monitor_outlives_release()) monitor_cancel.emit(asio::cancellation_type::terminal);
        on_end();
    }
    return send;
}

asio::awaitable<void> scope_state::release_remote() {
    auto self = shared_from_this();
    release_failed = false;  // one at a time: a release in flight is not sent again
    try {
        co_await send_release();
    } catch (...) {
        release_failed = true;
        monitor_cancel.emit(asio::cancellation_type::terminal);
        throw;
    }
}

void scope_state::start_monitor() {
    session->spawn_owned([self = shared_from_this()]() { return self->monitor(); }, monitor_cancel.slot());
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
    // Release in the background (a destructor cannot await), owned by the
    // session: its close() waits for it.
    auto s = state_;
    s->session->spawn_owned([s]() -> asio::awaitable<void> {
        try {
            co_await s->release_remote();
        } catch (boost::system::system_error const&) {
        }
    });
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
    return state_ ? state_->session->executor : boost::asio::any_io_executor{};
}

asio::awaitable<bool> leadership_scope::run_impl(std::shared_ptr<detail::scope_state> s, asio::awaitable<void> work) {
    if (!s) throw boost::system::system_error(make_error_code(error::not_held));
    if (s->status != detail::scope_status::held) co_return false;
    // The work finishing first is a normal end; the loss event first cancels
    // the work and waits for it to finish.
    co_return co_await detail::race(std::move(work), s->lost_event);
}

asio::awaitable<void> leadership_scope::wait_lost_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s) throw boost::system::system_error(make_error_code(error::not_held));
    co_await s->lost_event.wait();
    if (s->status == detail::scope_status::lost) throw boost::system::system_error(s->reason);
    throw boost::system::system_error(make_error_code(error::not_held));
}

asio::awaitable<void> leadership_scope::release_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s || !s->begin_release()) co_return;
    co_await s->release_remote();
}

asio::awaitable<std::uint64_t> leadership_scope::transfer_impl(std::shared_ptr<detail::scope_state> s,
                                                              std::string candidate) {
    if (!s || s->status != detail::scope_status::held) throw boost::system::system_error(make_error_code(error::not_held));
    if (candidate.empty()) throw boost::system::system_error(make_error_code(error::no_such_candidate));
    co_return co_await s->transfer(std::move(candidate), make_error_code(error::transferred));
}

asio::awaitable<bool> leadership_scope::confirm_impl(std::shared_ptr<detail::scope_state> s) {
    if (!s || s->status != detail::scope_status::held) co_return false;
    auto why = co_await s->check_held();
    if (s->status != detail::scope_status::held) co_return false;
    if (why) {
        s->lose(why);
        co_return false;
    }
    co_return true;
}

}  // namespace tenure
