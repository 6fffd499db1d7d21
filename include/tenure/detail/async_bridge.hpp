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
#include <boost/system/system_error.hpp>

#include <exception>
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

template <class T, class Executor, class CompletionToken>
auto async_run(Executor ex, boost::asio::awaitable<T> op, CompletionToken&& token) {
    using sig = typename bridge_signature<T>::type;
    return boost::asio::async_initiate<CompletionToken, sig>(
        [ex](auto handler, boost::asio::awaitable<T> op) mutable {
            auto slot = boost::asio::get_associated_cancellation_slot(handler);
            auto hex = boost::asio::get_associated_executor(handler, ex);
            if constexpr (std::is_void_v<T>) {
                boost::asio::co_spawn(
                    ex, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        slot, [h = std::move(handler), hex](std::exception_ptr e) mutable {
                            auto ec = to_error_code(e);
                            boost::asio::dispatch(hex, [h = std::move(h), ec]() mutable { std::move(h)(ec); });
                        }));
            } else {
                boost::asio::co_spawn(
                    ex, std::move(op),
                    boost::asio::bind_cancellation_slot(
                        slot, [h = std::move(handler), hex](std::exception_ptr e, T value) mutable {
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
