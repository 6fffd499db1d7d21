// Internal: a byte stream - TCP or a Unix domain socket, plain or under TLS -
// behind one type, so that the agent's connections and the client's pools
// read and write any of them with the same code. The socket is Asio's
// generic stream socket (a TCP or a local socket converts to it), wrapped in
// Beast's basic_stream for its timeouts; Beast's HTTP algorithms take the
// whole as any stream, and expires_after / expires_at apply in every case.
#pragma once

#include <tenure/detail/clock.hpp>

#include <boost/asio/async_result.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/basic_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include <sys/socket.h>

#include <optional>
#include <utility>

namespace tenure::detail {

class net_stream {
public:
    using protocol = boost::asio::generic::stream_protocol;
    using socket_type = protocol::socket;
    using byte_stream = boost::beast::basic_stream<protocol>;
    using executor_type = byte_stream::executor_type;

    // `tls`: the context, or nullptr for plain bytes. The context must outlive the stream.
    net_stream(socket_type s, boost::asio::ssl::context* tls) {
        if (tls) tls_.emplace(std::move(s), *tls);
        else plain_.emplace(std::move(s));
    }
    net_stream(boost::asio::any_io_executor const& ex, boost::asio::ssl::context* tls) {
        if (tls) tls_.emplace(ex, *tls);
        else plain_.emplace(ex);
    }

    bool is_tls() const noexcept { return tls_.has_value(); }
    byte_stream& lowest() noexcept { return tls_ ? tls_->next_layer() : *plain_; }
    socket_type& socket() noexcept { return lowest().socket(); }
    // The OpenSSL handle (only when is_tls()).
    SSL* native_handle() noexcept { return tls_->native_handle(); }
    executor_type get_executor() noexcept { return lowest().get_executor(); }
    template <class Duration>
    void expires_after(Duration d) {
        lowest().expires_after(d);
    }
    // A deadline of detail::clock, Beast's timers being steady_clock's (the
    // same clock, except in the simulation build, which has no sockets).
    void expires_at(clock::time_point t) { lowest().expires_after(t - clock::now()); }
    void expires_never() { lowest().expires_never(); }
    void close() { lowest().close(); }

    // Sends what the socket takes at once, without waiting, of two buffers
    // gathered in one sendmsg (an answer's head and body): the bytes sent (0
    // under TLS, or when it takes none). A small message on a socket with
    // room goes out whole in this one syscall, with no write operation and
    // no completion through the executor. An error is left for the
    // asynchronous write of the rest, which meets it again.
    std::size_t send_now(boost::asio::const_buffer a, boost::asio::const_buffer b) noexcept {
        if (tls_ || !socket().is_open()) return 0;
        iovec parts[2] = {{const_cast<void*>(a.data()), a.size()}, {const_cast<void*>(b.data()), b.size()}};
        msghdr m{};
        m.msg_iov = parts;
        m.msg_iovlen = 2;
        auto const n = ::sendmsg(socket().native_handle(), &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        return n > 0 ? static_cast<std::size_t>(n) : 0;
    }

    // The TLS handshake; only when is_tls().
    template <class Token>
    auto async_handshake(boost::asio::ssl::stream_base::handshake_type type, Token&& token) {
        return tls_->async_handshake(type, std::forward<Token>(token));
    }
    template <class VerifyCallback>
    void set_verify_callback(VerifyCallback cb) {
        tls_->set_verify_callback(std::move(cb));
    }

    template <class MutableBuffers, class Token>
    auto async_read_some(MutableBuffers const& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
            [this](auto handler, MutableBuffers const& b) {
                if (tls_) tls_->async_read_some(b, std::move(handler));
                else plain_->async_read_some(b, std::move(handler));
            },
            token, buffers);
    }

    template <class ConstBuffers, class Token>
    auto async_write_some(ConstBuffers const& buffers, Token&& token) {
        return boost::asio::async_initiate<Token, void(boost::beast::error_code, std::size_t)>(
            [this](auto handler, ConstBuffers const& b) {
                if (tls_) tls_->async_write_some(b, std::move(handler));
                else plain_->async_write_some(b, std::move(handler));
            },
            token, buffers);
    }

private:
    std::optional<byte_stream> plain_;
    std::optional<boost::beast::ssl_stream<byte_stream>> tls_;
};

}  // namespace tenure::detail
