/// @file
/// tenure::diagnostics — the server's own words about a failure, on both
/// paths an Asio operation can fail by.
///
/// An error_code says what kind of failure it was (`error::http_status`,
/// `error::lease_not_found`...), not what the server said. tenure keeps that:
///
/// - **Exception path.** With the default token, `use_awaitable`, a failing
///   operation rethrows the exception it failed with: a tenure::server_error (the clients' `api_error`) whose what()
///   carries the HTTP status and the server's message.
///
///       try { auto s = co_await tenure::session::create(client, opts); }
///       catch (tenure::server_error const& e) { log(e.http_status(), e.server_message()); }
///
/// - **Error-code path** (callbacks, `as_tuple`, `redirect_error`,
///   `use_future`): wrap the token, and the operation fills a diagnostics
///   object before its handler runs (and clears it on success):
///
///       tenure::diagnostics diag;
///       auto [ec, s] = co_await tenure::session::create(
///           client, opts, tenure::with_diagnostics(diag, asio::as_tuple(asio::use_awaitable)));
///       if (ec) log(ec.message(), diag.http_status(), diag.server_message());
///
/// A token adapter, rather than a `diagnostics&` parameter on every
/// operation (Boost.MySQL's way), because every operation of the primitives
/// completes through one bridge: the adapter works for all of them, and for
/// the clients' operations, without doubling their overloads.
#pragma once

#include <boost/system/system_error.hpp>

#include <string>
#include <type_traits>
#include <utility>

namespace tenure {

/// A failure the server reported, or a request that failed on its way: the
/// base of tenure::consul::api_error and tenure::etcd::api_error.
class server_error : public boost::system::system_error {
public:
    server_error(boost::system::error_code ec, std::string const& what, unsigned http_status,
                 std::string server_message)
        : boost::system::system_error(ec, what), status_(http_status), message_(std::move(server_message)) {}
    /// 0 when the failure was not an HTTP answer (connect, timeout, parse).
    unsigned http_status() const noexcept { return status_; }
    /// The server's message for an error status (may contain user input);
    /// when http_status() is 0, what failed ("GET /v1/kv/a on 127.0.0.1:8500: ...").
    std::string const& server_message() const noexcept { return message_; }

private:
    unsigned status_;
    std::string message_;
};

/// What the server said about the last failure of an operation run with
/// with_diagnostics(); empty after a success, or when the failure was not
/// the server's (a cancellation, an empty object).
class diagnostics {
public:
    unsigned http_status() const noexcept { return status_; }
    std::string const& server_message() const noexcept { return message_; }
    /// The failure's full text (what() of the exception), or empty.
    std::string const& what() const noexcept { return what_; }
    bool empty() const noexcept { return what_.empty(); }
    void clear() noexcept {
        status_ = 0;
        message_.clear();
        what_.clear();
    }
    void assign(unsigned status, std::string message, std::string what) {
        status_ = status;
        message_ = std::move(message);
        what_ = std::move(what);
    }

private:
    unsigned status_ = 0;
    std::string message_;
    std::string what_;
};

/// A completion token that fills `diag` when the operation fails; see the
/// file comment. `token` is the token the operation completes through.
template <class Token>
struct with_diagnostics_t {
    diagnostics* diag;
    Token token;
};

/// Wraps `inner` (any completion token); not an operation itself.
template <class Token>
with_diagnostics_t<std::decay_t<Token>> with_diagnostics(diagnostics& diag, Token&& inner) {
    return {&diag, std::forward<Token>(inner)};
}

}  // namespace tenure
