// Bridges an asio::awaitable implementation to Asio's universal
// completion-token model: `async_run(ex, op, token)` launches `op` with
// co_spawn and completes the token with `void(error_code)` or
// `void(error_code, T)` (awaited with use_awaitable on the object's own
// executor, an operation that takes every cancellation type runs in the
// awaiting coroutine instead: see rethrowing). A system_error thrown by the
// coroutine becomes the error_code; with use_awaitable (the default token) the exception itself
// is rethrown instead, so a server_error keeps the server's words; with_diagnostics(diag, token) keeps them on the
// error-code path (tenure/diagnostics.hpp). The token's cancellation slot
// reaches the coroutine (see cancel_on).
#pragma once

#include <tenure/diagnostics.hpp>
#include <tenure/error.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/system_executor.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/system/system_error.hpp>

#include <exception>
#include <memory>
#include <type_traits>
#include <utility>

namespace tenure::detail {

inline boost::system::error_code to_error_code(std::exception_ptr e) noexcept {
    if (!e) return {};
    try {
        std::rethrow_exception(e);
    } catch (boost::system::system_error const& se) {
        return se.code();
    } catch (...) {
        return make_error_code(error::unexpected_response);
    }
}

template <class T>
struct bridge_signature {
    using type = void(boost::system::error_code, T);
};
template <>
struct bridge_signature<void> {
    using type = void(boost::system::error_code);
};
template <class T>
struct rethrow_signature {
    using type = void(std::exception_ptr, T);
};
template <>
struct rethrow_signature<void> {
    using type = void(std::exception_ptr);
};

// Which cancellation types an operation accepts (as its @async_cancellation
// paragraph says): terminal only, or terminal, partial and total, for
// operations that stop without leaving anything behind (a parked wait).
enum class cancel_on { terminal, any };

// Between the handler's cancellation slot and the coroutine: co_spawn lets
// terminal through only. The forwarder passes the accepted types on as
// terminal (for a wait the three mean the same), and remembers a request so
// that a coroutine that has not started yet does not start.
//
// A request made before the coroutine's first step is not passed on to
// co_spawn at all: Asio 1.81's co_spawn_entry_point, resumed with its
// cancellation state already cancelled, throws operation_aborted from its
// `co_await f()` (caught) and again from the `co_await post(...)` after it,
// outside its try block, which ends in std::terminate. Once the coroutine
// runs, it has been resumed through a handler before the entry point awaits
// anything again, and the post is skipped.
struct cancel_forwarder {
    boost::asio::cancellation_signal signal;
    bool requested = false;
    bool started = false;  // the coroutine's first step ran: requests go on to co_spawn
};

template <class T>
boost::asio::awaitable<T> unless_cancelled(std::shared_ptr<cancel_forwarder> f, boost::asio::awaitable<T> op) {
    f->started = true;
    if (f->requested) throw boost::system::system_error(boost::asio::error::operation_aborted);
    co_return co_await std::move(op);
}

template <class Token>
struct is_with_diagnostics : std::false_type {};
template <class Token>
struct is_with_diagnostics<with_diagnostics_t<Token>> : std::true_type {};

// What the handler of a failed operation is told: the exception itself when
// it is a system_error (server_error included), else unexpected_response.
inline std::exception_ptr as_system_error(std::exception_ptr e) {
    if (!e) return e;
    try {
        std::rethrow_exception(e);
    } catch (boost::system::system_error const&) {
        return e;
    } catch (...) {
        return std::make_exception_ptr(boost::system::system_error(make_error_code(error::unexpected_response)));
    }
}

inline void fill(diagnostics* diag, std::exception_ptr e) {
    if (!diag) return;
    diag->clear();
    if (!e) return;
    try {
        std::rethrow_exception(e);
    } catch (server_error const& se) {
        diag->assign(se.http_status(), se.server_message(), se.what());
    } catch (std::exception const& other) {
        diag->assign(0, {}, other.what());
    } catch (...) {
    }
}

// `ex` is the object's executor; a null one (an empty object) runs the
// coroutine on the handler's associated executor instead, so the operation
// still completes through the handler (the coroutine reports the empty
// object); a handler with none gets Asio's default, the system executor.
// Rethrow: complete with void(exception_ptr[, T]) (see rethrows_v).
template <class T, bool Rethrow, class Executor, class CompletionToken>
auto run_bridged(Executor const& ex, boost::asio::awaitable<T> op, CompletionToken&& token, cancel_on types,
                 diagnostics* diag) {
    using sig = std::conditional_t<Rethrow, typename rethrow_signature<T>::type, typename bridge_signature<T>::type>;
    return boost::asio::async_initiate<CompletionToken, sig>(
        [ex = boost::asio::any_io_executor(ex), types, diag](auto handler, boost::asio::awaitable<T> op) mutable {
            auto slot = boost::asio::get_associated_cancellation_slot(handler);
            boost::asio::any_io_executor hex = boost::asio::get_associated_executor(handler, ex);
            if (hex == nullptr) hex = boost::asio::system_executor();
            boost::asio::any_io_executor run_on = ex != nullptr ? ex : hex;
            std::shared_ptr<cancel_forwarder> fwd;
            boost::asio::cancellation_slot spawn_slot;
            if (slot.is_connected()) {
                fwd = std::make_shared<cancel_forwarder>();
                spawn_slot = fwd->signal.slot();
                auto const accepted = types == cancel_on::any ? boost::asio::cancellation_type::all
                                                              : boost::asio::cancellation_type::terminal;
                slot.assign([f = fwd.get(), accepted](boost::asio::cancellation_type t) {
                    if ((t & accepted) == boost::asio::cancellation_type::none) return;
                    f->requested = true;
                    if (f->started) f->signal.emit(boost::asio::cancellation_type::terminal);
                });
                op = unless_cancelled(fwd, std::move(op));
            }
            // The forwarder goes with the handler; the slot lets go of it first.
            auto finish = [slot, fwd, diag](std::exception_ptr e) mutable {
                if (fwd) slot.clear();
                fill(diag, e);
                if constexpr (Rethrow) return as_system_error(e);
                else return to_error_code(e);
            };
            if constexpr (std::is_void_v<T>) {
                boost::asio::co_spawn(
                    run_on, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        spawn_slot, [h = std::move(handler), hex, finish](std::exception_ptr e) mutable {
                            auto r = finish(e);
                            boost::asio::dispatch(hex, [h = std::move(h), r]() mutable { std::move(h)(r); });
                        }));
            } else {
                boost::asio::co_spawn(
                    run_on, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        spawn_slot, [h = std::move(handler), hex, finish](std::exception_ptr e, T value) mutable {
                            auto r = finish(e);
                            boost::asio::dispatch(hex, [h = std::move(h), r, v = std::move(value)]() mutable {
                                std::move(h)(r, std::move(v));
                            });
                        }));
            }
        },
        token, std::move(op));
}

// use_awaitable (every operation's default token): the failure's own
// exception is rethrown in the awaiting coroutine - a server_error keeps the
// server's words - where Asio would throw a system_error of its bare code.
// (Completing with void(exception_ptr, T) straight into use_awaitable does
// not compile with Boost 1.81's awaitable handler; awaiting it as a tuple
// does.)
//
// Awaited on the object's own executor, an operation that takes every
// cancellation type runs in the awaiting coroutine itself: the caller's
// cancellation reaches it as it would through the bridge (which passes every
// type on), and it costs no co_spawn - no coroutine thread of its own, no
// trip through the scheduler when it ends. Elsewhere (another executor, or an
// operation that takes terminal cancellation only, which the bridge filters)
// it is bridged.
template <class T>
boost::asio::awaitable<T> rethrowing(boost::asio::any_io_executor ex, boost::asio::awaitable<T> op, cancel_on types) {
    // (A statement of its own: g++ 12 mishandles temporaries in an
    // expression around co_await.)
    boost::asio::any_io_executor const caller = co_await boost::asio::this_coro::executor;
    if (types == cancel_on::any && ex != nullptr && ex == caller) {
        try {
            if constexpr (std::is_void_v<T>) {
                co_await std::move(op);
                co_return;
            } else {
                co_return co_await std::move(op);
            }
        } catch (boost::system::system_error const&) {
            throw;
        } catch (...) {
            throw boost::system::system_error(make_error_code(error::unexpected_response));
        }
    }
    auto tok = boost::asio::as_tuple(boost::asio::use_awaitable);
    if constexpr (std::is_void_v<T>) {
        auto [e] = co_await run_bridged<T, true>(ex, std::move(op), tok, types, nullptr);
        if (e) std::rethrow_exception(e);
    } else {
        auto [e, value] = co_await run_bridged<T, true>(ex, std::move(op), tok, types, nullptr);
        if (e) std::rethrow_exception(e);
        co_return std::move(value);
    }
}

template <class T, class Executor, class CompletionToken>
auto async_run(Executor const& ex, boost::asio::awaitable<T> op, CompletionToken&& token,
               cancel_on types = cancel_on::terminal) {
    using token_t = std::decay_t<CompletionToken>;
    if constexpr (is_with_diagnostics<token_t>::value) {
        return run_bridged<T, false>(ex, std::move(op), std::forward<CompletionToken>(token).token, types, token.diag);
    } else if constexpr (std::is_same_v<token_t, boost::asio::use_awaitable_t<>>) {
        return rethrowing<T>(boost::asio::any_io_executor(ex), std::move(op), types);
    } else {
        return run_bridged<T, false>(ex, std::move(op), std::forward<CompletionToken>(token), types, nullptr);
    }
}

}  // namespace tenure::detail
