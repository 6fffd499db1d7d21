/// @file
/// tenure::launch — any tenure coroutine operation as an Asio asynchronous
/// operation with a completion token.
///
/// The primitives (session, election, leadership_scope, semaphore) already take
/// completion tokens. The client's operations are coroutines
/// (asio::awaitable<T>) that throw api_error with the HTTP status and the
/// server's message; launch() runs one with any token and completes with
/// void(error_code, T) (void(error_code) for awaitable<void>):
///
///     tenure::launch(client.get_executor(), client.kv_get("k"),
///                    [](boost::system::error_code ec, auto result) { ... });
///     auto f = tenure::launch(ex, client.session_list(), asio::use_future);
///
/// Cancellation: the token's cancellation slot reaches the operation
/// (terminal); the client closes the connection of a cancelled request.
#pragma once

#include <tenure/detail/async_bridge.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace tenure {

/// Runs `op` (a client operation or any coroutine) as an Asio asynchronous
/// operation on `ex`.
///
/// @async_completion{void(boost::system::error_code, T) (void(boost::system::error_code) for awaitable<void>)}
/// @async_cancellation
/// Terminal: the token's cancellation slot reaches the coroutine; a cancelled
/// client request closes its connection and completes with
/// `operation_aborted`.
/// @async_errors
/// The code of the `boost::system::system_error` the coroutine throws (for the
/// clients, the `api_error`'s code); `error::unexpected_response` for any other
/// exception.
/// @async_lifetimes
/// What `op` operates on (the client) must outlive the operation.
template <class T, class CompletionToken = boost::asio::use_awaitable_t<>>
auto launch(boost::asio::any_io_executor ex, boost::asio::awaitable<T> op, CompletionToken&& token = {}) {
    return detail::async_run(std::move(ex), std::move(op), std::forward<CompletionToken>(token));
}

}  // namespace tenure
