// tenure::session — a Consul session kept alive by a renewal coroutine on the
// client's executor.
//
// Renewal every TTL/2; after an error a retry at least every second until a
// full TTL has passed since the send time of the last acknowledged renewal
// (the local deadline). States healthy -> jeopardy (renewals failing, deadline
// not reached) -> lost. A 404 on renew means the server invalidated the
// session. Every leadership_scope taken with the session is lost with it.
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/etcd/client.hpp>
#include <tenure/detail/async_bridge.hpp>
#include <tenure/detail/session_fsm.hpp>

#include <boost/asio/deferred.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace tenure {

using session_state = detail::session_state;

struct session_options {
    std::string name = "tenure session";
    std::chrono::nanoseconds ttl = std::chrono::seconds{15};
    // Applied by the server to every key the session holds when it is
    // invalidated (not on a clean release). 0 disables it.
    std::chrono::nanoseconds lock_delay = std::chrono::seconds{15};
    consul::session_behavior behavior = consul::session_behavior::release;
    // nullopt: the server's default node checks (serfHealth).
    std::optional<std::vector<std::string>> node_checks;
    // Application health: when set, the session registers a TTL check with
    // this TTL, binds it to the session and heartbeats it with each renewal,
    // so the session dies if the process stops heartbeating.
    std::optional<std::chrono::nanoseconds> health_check_ttl;
    // Asked before each heartbeat of that check; false reports the check
    // critical, which invalidates the session (and so ends leadership).
    std::function<bool()> health_probe;
};

namespace detail {
struct session_impl;
}

class session {
public:
    using executor_type = boost::asio::any_io_executor;
    using clock = std::chrono::steady_clock;

    // An empty session; assign one from create().
    session() = default;
    session(session&&) noexcept = default;
    session& operator=(session&&) noexcept;
    // Closes the session in the background (release held keys, then destroy)
    // if it was not closed explicitly.
    ~session();

    // Creates the session on the server and starts its renewal coroutine.
    // With an application health check (health_check_ttl) the check is
    // registered first and bound to the session.
    // Completion signature: void(error_code, session).
    // Cancellation: terminal. The client must outlive the session.
    template <class CompletionToken = boost::asio::deferred_t>
    static auto create(consul::client& client, session_options options, CompletionToken&& token = {}) {
        return detail::async_run(client.get_executor(), create_impl(client, std::move(options)),
                                 std::forward<CompletionToken>(token));
    }

    // The same on etcd: the session is a lease of TTL seconds (rounded up,
    // at least 1; etcd may raise it to its minimum) kept alive with one
    // keepalive every TTL/3, revoked by close(). id() is the lease ID in
    // lowercase hex (etcd's election key suffix). lock_delay is not applied
    // on etcd yet; behavior, node_checks and health_check_ttl are Consul-only.
    // Completion signature: void(error_code, session).
    template <class CompletionToken = boost::asio::deferred_t>
    static auto create(etcd::client& client, session_options options, CompletionToken&& token = {}) {
        return detail::async_run(client.get_executor(), create_impl(client, std::move(options)),
                                 std::forward<CompletionToken>(token));
    }

    bool valid() const noexcept { return impl_ != nullptr; }
    std::string const& id() const;
    session_options const& options() const;
    executor_type get_executor() const;

    session_state state() const;
    // Why the session was lost (meaningful once state() == lost).
    boost::system::error_code lost_reason() const;
    // Send time of the last acknowledged renewal + TTL.
    clock::time_point local_deadline() const;
    // Called on every state change (healthy <-> jeopardy, lost), on the executor.
    void on_state_change(std::function<void(session_state)> callback);

    // Completes when the session is lost, with the reason.
    // Completion signature: void(error_code reason). Cancellation: terminal,
    // partial and total (nothing is changed by waiting).
    template <class CompletionToken = boost::asio::deferred_t>
    auto wait_lost(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), wait_lost_impl(), std::forward<CompletionToken>(token));
    }

    // Releases every key held through this session, then destroys it on the
    // server (release first, so a clean shutdown imposes no lock-delay).
    // Completion signature: void(error_code). Cancellation: terminal; the
    // session may then remain on the server until its TTL lapses.
    template <class CompletionToken = boost::asio::deferred_t>
    auto close(CompletionToken&& token = {}) {
        return detail::async_run(get_executor(), close_impl(), std::forward<CompletionToken>(token));
    }

    std::shared_ptr<detail::session_impl> const& impl() const noexcept { return impl_; }

private:
    explicit session(std::shared_ptr<detail::session_impl> impl) : impl_(std::move(impl)) {}
    static boost::asio::awaitable<session> create_impl(consul::client& client, session_options options);
    static boost::asio::awaitable<session> create_impl(etcd::client& client, session_options options);
    boost::asio::awaitable<void> wait_lost_impl();
    boost::asio::awaitable<void> close_impl();

    std::shared_ptr<detail::session_impl> impl_;
};

}  // namespace tenure
