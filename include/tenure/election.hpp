// tenure::election — leader election on one Consul key, compatible with the Go
// api.Lock and `consul lock` (same flag value, same key rules).
//
//     tenure::leadership_scope lead = co_await election.acquire();
//     auto why = co_await lead.run(run_report(lead.token()));
//
// Followers block on the key with consistent blocking queries and race when
// its Session clears; they never poll. An acquire refused on a free key (a
// lock-delay is running) is retried when the previous holder's LockDelay ends,
// then with a short backoff.
#pragma once

#include <tenure/leadership_scope.hpp>
#include <tenure/session.hpp>

#include <functional>
#include <optional>

namespace tenure {

struct leader_info {
    std::string value;
    std::string session;
    std::uint64_t lock_index = 0;
    std::uint64_t modify_index = 0;
};

class election {
public:
    // `value` is what this candidate writes into the key when it leads (its
    // identity, an address...). The session must outlive the election.
    election(session& s, std::string key, std::string value = {});

    std::string const& key() const noexcept { return key_; }

    // Waits until this candidate holds the key.
    // Completion signature: void(error_code, leadership_scope).
    // Errors: error::lock_conflict (the key is used with other flags), the
    // session's loss reason if it is lost meanwhile, transport errors that
    // persist beyond the session's lease.
    // Cancellation: terminal, partial and total while waiting (nothing has
    // been written); a key taken just before the cancellation is released.
    template <class CompletionToken = boost::asio::deferred_t>
    auto acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(false), std::forward<CompletionToken>(token));
    }

    // One attempt: an empty scope when the key is held by someone else or a
    // lock-delay is running. Completion signature: void(error_code, leadership_scope).
    template <class CompletionToken = boost::asio::deferred_t>
    auto try_acquire(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), acquire_impl(true), std::forward<CompletionToken>(token));
    }

    // The current holder, or nullopt when nobody holds the key.
    // Completion signature: void(error_code, std::optional<leader_info>).
    template <class CompletionToken = boost::asio::deferred_t>
    auto leader(CompletionToken&& token = {}) {
        return detail::async_run(session_->get_executor(), leader_impl(), std::forward<CompletionToken>(token));
    }

private:
    boost::asio::awaitable<leadership_scope> acquire_impl(bool once);
    boost::asio::awaitable<std::optional<leader_info>> leader_impl();

    session* session_;
    std::string key_;
    std::string value_;
};

// A stream of leader changes on a key, for followers, dashboards and the
// `tenure leader -watch` command. The first next() answers at once with the
// current holder; each later one completes when the holder changes.
class leader_observer {
public:
    leader_observer(consul::client& client, std::string key);

    // Completion signature: void(error_code, std::optional<leader_info>).
    // Cancellation: terminal, partial and total.
    template <class CompletionToken = boost::asio::deferred_t>
    auto next(CompletionToken&& token = {}) {
        return detail::async_run(client_->get_executor(), next_impl(), std::forward<CompletionToken>(token));
    }

private:
    boost::asio::awaitable<std::optional<leader_info>> next_impl();

    consul::client* client_;
    std::string key_;
    std::uint64_t index_ = 0;
    bool first_ = true;
    std::optional<leader_info> last_;
};

struct campaign_options {
    session_options session;
    std::string key;
    std::string value;
    // Pause after a loss or an error before campaigning again.
    std::chrono::nanoseconds retry_backoff = std::chrono::milliseconds{100};
    // Called with each new scope before the body runs, and on each loss (for logs).
    std::function<void(leadership_scope const&)> on_elected;
    std::function<void(boost::system::error_code)> on_lost;
};

// The campaign loop: create a session, acquire, run `body` under the scope,
// release, campaign again after a loss (with a new session if the old one was
// lost) until cancelled; on cancellation it releases the key and closes the
// session cleanly, so the next leader takes over without lock-delay.
// Completion signature: void(error_code) — operation_aborted when cancelled.
// Cancellation: terminal.
boost::asio::awaitable<void> campaign_impl(consul::client& client, campaign_options options,
                                           std::function<boost::asio::awaitable<void>(leadership_scope&)> body);

template <class CompletionToken = boost::asio::deferred_t>
auto campaign(consul::client& client, campaign_options options,
              std::function<boost::asio::awaitable<void>(leadership_scope&)> body, CompletionToken&& token = {}) {
    return detail::async_run(client.get_executor(), campaign_impl(client, std::move(options), std::move(body)),
                             std::forward<CompletionToken>(token));
}

}  // namespace tenure
