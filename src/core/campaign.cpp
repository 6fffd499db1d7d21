// The campaign loop, on any backend: a session factory is all it needs.
#include "core/campaign.hpp"
#include "core/event.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/this_coro.hpp>

namespace tenure::detail {

namespace asio = boost::asio;

asio::awaitable<void> campaign_loop(session_factory create_session, campaign_options options,
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
                    s = co_await create_session(options.session);
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
            co_await scope.run(body(scope));
            // A release that fails (a timeout, a partition) is not an error of
            // the loop: the key may still be held by this session, so the
            // session ends (the server frees the key with it, at worst when
            // its TTL runs out) and the loop campaigns with a new one.
            bool release_failed = false;
            try {
                co_await scope.release();
            } catch (system_error const& ex) {
                if (detail::is_abort(ex)) throw;
                release_failed = true;
            }
            scope = leadership_scope{};
            if (release_failed) {
                try {
                    co_await s.close();
                } catch (system_error const& ex) {
                    if (detail::is_abort(ex)) throw;
                }
                s = session{};
            }
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

}  // namespace tenure::detail
