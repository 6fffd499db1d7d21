#include "primitives.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/this_coro.hpp>

#include <cstdio>
#include <random>

namespace tenure {

namespace asio = boost::asio;

namespace detail {

asio::awaitable<void> event::wait() {
    while (!set_) {
        auto [ec] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
        auto cs = co_await asio::this_coro::cancellation_state;
        if (!set_ && cs.cancelled() != asio::cancellation_type::none)
            throw boost::system::system_error(asio::error::operation_aborted);
    }
}

void session_impl::start() {
    asio::co_spawn(client.get_executor(), [self = shared_from_this()]() { return self->renew_loop(); },
                   asio::detached);
}

void session_impl::notify(session_state s) {
    for (auto const& cb : callbacks)
        if (cb) cb(s);
}

void session_impl::mark_lost(boost::system::error_code why) {
    if (lost_event.is_set()) return;
    if (fsm.state() != session_state::lost) fsm.lose(error::leadership_lost);
    lost_reason = why;
    lost_event.set();
    wake.cancel();
    // Every scope of this session loses with it.
    auto held = std::move(scopes);
    for (auto& w : held)
        if (auto s = w.lock()) s->lose(why);
    notify(session_state::lost);
}

asio::awaitable<void> session_impl::heartbeat() {
    if (check_id.empty()) co_return;
    bool healthy = !options.health_probe || options.health_probe();
    try {
        if (healthy) co_await client.check_pass(check_id, "tenure: session renewed");
        else co_await client.check_fail(check_id, "tenure: application health probe failed");
    } catch (boost::system::system_error const&) {
        // A missed heartbeat shows up as the check (and so the session) expiring.
    }
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

        auto const before = fsm.state();
        auto const sent = now;
        auto const attempt_deadline =
            std::min(fsm.local_deadline(), sent + std::max<clock::duration>(fsm.ttl() / 4, fsm.retry_interval()));
        try {
            auto renewed = co_await with_deadline(client.session_renew(id), attempt_deadline);
            if (closing) break;
            if (!renewed) {
                fsm.invalidated();
                mark_lost(make_error_code(error::session_invalidated));
                break;
            }
            fsm.renew_succeeded(sent, clock::now());
            co_await heartbeat();
        } catch (boost::system::system_error const&) {
            if (closing) break;
            fsm.renew_failed(clock::now());
        }
        if (fsm.state() == session_state::lost) {
            mark_lost(make_error_code(fsm.lost_reason()));
            break;
        }
        if (fsm.state() != before) notify(fsm.state());
    }
}

asio::awaitable<void> session_impl::close() {
    auto self = shared_from_this();
    if (closing) co_return;
    closing = true;
    wake.cancel();
    // Release every held key first: a clean handover with no lock-delay.
    auto held = scopes;
    for (auto& w : held) {
        auto s = w.lock();
        if (!s || !s->begin_release()) continue;
        try {
            co_await s->send_release();
        } catch (boost::system::system_error const&) {
            // Destroying the session below frees the key anyway (with lock-delay).
        }
    }
    boost::system::error_code first_error;
    if (!lost_event.is_set()) {
        try {
            co_await client.session_destroy(id);
        } catch (boost::system::system_error const& e) {
            first_error = e.code();
        }
    }
    if (!check_id.empty()) {
        try {
            co_await client.check_deregister(check_id);
        } catch (boost::system::system_error const&) {
        }
    }
    if (!lost_event.is_set()) {
        fsm.lose(error::leadership_lost);
        lost_reason = make_error_code(error::leadership_lost);
        lost_event.set();
        notify(session_state::lost);
    }
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

session::~session() {
    if (!impl_ || impl_->closing) return;
    auto impl = impl_;
    asio::co_spawn(impl->client.get_executor(), [impl]() { return impl->close(); }, asio::detached);
}

namespace {
// A unique check ID per session: two sessions of one process must not share a check.
std::string unique_check_id(std::string const& name) {
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
    return "tenure-health:" + name + ":" + buf;
}
}  // namespace

asio::awaitable<session> session::create_impl(consul::client& client, session_options options) {
    if (options.ttl.count() < 0) throw boost::system::system_error(make_error_code(std::errc::invalid_argument));
    consul::session_request req;
    req.name = options.name;
    req.ttl = options.ttl;
    req.lock_delay = options.lock_delay;
    req.behavior = options.behavior;
    req.node_checks = options.node_checks;

    std::string check_id;
    if (options.health_check_ttl) {
        // Register the application's TTL check passing, then bind it.
        check_id = unique_check_id(options.name);
        consul::check_registration reg;
        reg.id = check_id;
        reg.name = "tenure session health: " + options.name;
        reg.ttl = *options.health_check_ttl;
        reg.status = "passing";
        co_await client.check_register(reg);
        std::vector<std::string> checks = options.node_checks.value_or(std::vector<std::string>{"serfHealth"});
        checks.push_back(check_id);
        req.node_checks = std::move(checks);
    }

    auto const sent = clock::now();
    std::string id = co_await client.session_create(req);
    auto impl = std::make_shared<detail::session_impl>(client, std::move(options), std::move(id), sent);
    impl->check_id = std::move(check_id);
    impl->start();
    co_return session(std::move(impl));
}

std::string const& session::id() const { return impl_->id; }
session_options const& session::options() const { return impl_->options; }
consul::client& session::client() const { return impl_->client; }
session::executor_type session::get_executor() const { return impl_->client.get_executor(); }
session_state session::state() const { return impl_->fsm.state(); }
boost::system::error_code session::lost_reason() const { return impl_->lost_reason; }
session::clock::time_point session::local_deadline() const { return impl_->fsm.local_deadline(); }

void session::on_state_change(std::function<void(session_state)> callback) {
    impl_->callbacks.push_back(std::move(callback));
}

asio::awaitable<void> session::wait_lost_impl() {
    auto impl = impl_;
    co_await impl->lost_event.wait();
    throw boost::system::system_error(impl->lost_reason);
}

asio::awaitable<void> session::close_impl() {
    auto impl = impl_;
    co_await impl->close();
}

}  // namespace tenure
