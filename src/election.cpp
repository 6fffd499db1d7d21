#include "primitives.hpp"
#include "etcd/election.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

using namespace std::chrono_literals;

constexpr auto follower_wait = std::chrono::seconds{30};

// ---- scope_state ---------------------------------------------------------------

void scope_state::lose(boost::system::error_code why) {
    if (status != scope_status::held) return;
    status = scope_status::lost;
    reason = why;
    leadership_event e;
    e.kind = leadership_event_kind::lost;
    e.session_id = session->id;
    e.key = key;
    e.token = token;
    e.reason = why;
    emit_event(session->options.on_event, std::move(e));
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
        leadership_event e;
        e.kind = leadership_event_kind::released;
        e.session_id = session->id;
        e.key = key;
        e.token = token;
        emit_event(session->options.on_event, std::move(e));
        lost_event.set();
        if (!monitor_outlives_release()) monitor_cancel.emit(asio::cancellation_type::terminal);
    }
    return send;
}

asio::awaitable<void> scope_state::release_remote() {
    auto self = shared_from_this();
    try {
        co_await send_release();
    } catch (...) {
        monitor_cancel.emit(asio::cancellation_type::terminal);
        throw;
    }
}

void scope_state::start_monitor() {
    asio::co_spawn(session->executor, [self = shared_from_this()]() { return self->monitor(); },
                   asio::bind_cancellation_slot(monitor_cancel.slot(), asio::detached));
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
        s->session->executor,
        [s]() -> asio::awaitable<void> {
            try {
                co_await s->release_remote();
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
    return state_->session->executor;
}

asio::awaitable<bool> leadership_scope::run_impl(std::shared_ptr<detail::scope_state> s, asio::awaitable<void> work) {
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

// ---- election ----------------------------------------------------------------------

election::election(session& s, std::string key, std::string value)
    : election(s, std::move(key), std::move(value), election_options{}) {}

election::election(session& s, std::string key, std::string value, election_options options)
    : session_(&s), key_(std::move(key)), value_(std::move(value)), options_(std::move(options)) {
    if (!s.valid()) throw std::invalid_argument("tenure::election needs a created session");
    if (key_.empty()) throw std::invalid_argument("tenure::election needs a key");
    if (!options_.shared_watch.empty() && !key_.starts_with(options_.shared_watch))
        throw std::invalid_argument("tenure::election: shared_watch \"" + options_.shared_watch +
                                    "\" is not a prefix of the key \"" + key_ + "\"");
}

asio::awaitable<leadership_scope> election::acquire_impl(bool once) {
    auto sess = session_->impl();
    if (sess->lost_event.is_set()) throw boost::system::system_error(sess->lost_reason);
    // A candidate whose session dies while it waits stops with that reason.
    auto r = co_await detail::race(sess->acquire_shared(key_, value_, once, options_),
                                   sess->lost_event);
    if (!r) throw boost::system::system_error(sess->lost_reason);
    if (!*r) co_return leadership_scope{};  // one attempt, not acquired
    co_return detail::scope_access::make(std::move(*r));
}

asio::awaitable<std::optional<leader_info>> election::leader_impl() {
    auto sess = session_->impl();
    co_return co_await sess->read_leader(key_);
}

// ---- leader_observer ------------------------------------------------------------------

leader_observer::leader_observer(consul::client& client, std::string key)
    : client_(&client), executor_(client.get_executor()), key_(std::move(key)) {}

asio::awaitable<std::optional<leader_info>> leader_observer::next_impl() {
    if (etcd_) co_return co_await detail::etcd_observer_next(*etcd_, first_, last_);
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
        std::optional<leader_info> info;
        if (r.value && !r.value->session.empty())
            info = leader_info{r.value->value.value_or(""), r.value->session, r.value->lock_index, r.value->modify_index};
        if (first_ || !same(info, last_)) {
            first_ = false;
            last_ = info;
            co_return info;
        }
    }
}

// ---- campaign -------------------------------------------------------------------------

namespace {

// The campaign loop of either backend.
template <class Client>
asio::awaitable<void> campaign_loop(Client& client, campaign_options options,
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

}  // namespace

asio::awaitable<void> campaign_impl(consul::client& client, campaign_options options,
                                    std::function<asio::awaitable<void>(leadership_scope&)> body) {
    return campaign_loop(client, std::move(options), std::move(body));
}

asio::awaitable<void> campaign_impl(etcd::client& client, campaign_options options,
                                    std::function<asio::awaitable<void>(leadership_scope&)> body) {
    return campaign_loop(client, std::move(options), std::move(body));
}

}  // namespace tenure
