// Bridges an asio::awaitable implementation to Asio's universal
// completion-token model: `async_run(ex, op, token)` launches `op` with
// co_spawn and completes the token with `void(error_code)` or
// `void(error_code, T)`. A system_error thrown by the coroutine becomes the
// error_code; the token's cancellation slot is connected to the coroutine, so
// per-operation cancellation reaches every operation it awaits.
#pragma once

#include <tenure/error.hpp>

#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/associated_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/error.hpp>
#include <boost/asio/system_executor.hpp>
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

// Which cancellation types an operation accepts (as its @async_cancellation
// paragraph says): terminal only, or terminal, partial and total, for
// operations that stop without leaving anything behind (a parked wait).
enum class cancel_on { terminal, any };

// Between the handler's cancellation slot and the coroutine: co_spawn lets
// terminal through only, and drops a request made before the coroutine first
// runs. The forwarder passes the accepted types on as terminal (for a wait
// the three mean the same), and remembers a request so that a coroutine
// that has not started yet does not start.
struct cancel_forwarder {
    boost::asio::cancellation_signal signal;
    bool requested = false;
};

template <class T>
boost::asio::awaitable<T> unless_cancelled(std::shared_ptr<cancel_forwarder> f, boost::asio::awaitable<T> op) {
    if (f->requested) throw boost::system::system_error(boost::asio::error::operation_aborted);
    co_return co_await std::move(op);
}

// `ex` is the object's executor; a null one (an empty object) runs the
// coroutine on the handler's associated executor instead, so the operation
// still completes through the handler (the coroutine reports the empty
// object); a handler with none gets Asio's default, the system executor.
template <class T, class Executor, class CompletionToken>
auto async_run(Executor const& ex, boost::asio::awaitable<T> op, CompletionToken&& token,
               cancel_on types = cancel_on::terminal) {
    using sig = typename bridge_signature<T>::type;
    return boost::asio::async_initiate<CompletionToken, sig>(
        [ex = boost::asio::any_io_executor(ex), types](auto handler, boost::asio::awaitable<T> op) mutable {
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
                    f->signal.emit(boost::asio::cancellation_type::terminal);
                });
                op = unless_cancelled(fwd, std::move(op));
            }
            // The forwarder goes with the handler; the slot lets go of it first.
            auto finish = [slot, fwd]() mutable {
                if (fwd) slot.clear();
            };
            if constexpr (std::is_void_v<T>) {
                boost::asio::co_spawn(
                    run_on, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        spawn_slot, [h = std::move(handler), hex, finish](std::exception_ptr e) mutable {
                            finish();
                            auto ec = to_error_code(e);
                            boost::asio::dispatch(hex, [h = std::move(h), ec]() mutable { std::move(h)(ec); });
                        }));
            } else {
                boost::asio::co_spawn(
                    run_on, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        spawn_slot, [h = std::move(handler), hex, finish](std::exception_ptr e, T value) mutable {
                            finish();
                            auto ec = to_error_code(e);
                            boost::asio::dispatch(hex, [h = std::move(h), ec, v = std::move(value)]() mutable {
                                std::move(h)(ec, std::move(v));
                            });
                        }));
            }
        },
        token, std::move(op));
}

}  // namespace tenure::detail
