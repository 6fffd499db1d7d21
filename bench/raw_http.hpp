// The raw-HTTP floor of the benches: one HTTP/1.1 keep-alive connection to the
// agent written with Beast directly (no tenure code on the client side). A
// request is formatted once as bytes and written as is; the answer is read
// with Beast's parser. Used by throughput (one blocking round trip, the
// floor under a cycle) and failover (the raw handover, failover_floor.cpp).
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>

namespace bench::raw {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// "VERB TARGET HTTP/1.1" with a Host header and, for a body, Content-Length:
// the bytes of a keep-alive request.
inline std::string request(std::string_view verb, std::string_view target, std::string_view body = {}) {
    std::string r;
    r.reserve(verb.size() + target.size() + body.size() + 64);
    r.append(verb).append(" ").append(target).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    if (!body.empty() || verb == "PUT") r.append("Content-Length: ").append(std::to_string(body.size())).append("\r\n");
    r.append("\r\n").append(body);
    return r;
}

using response = http::response<http::string_body>;

// One keep-alive connection over `Socket` (TCP or a Unix socket).
template <class Socket>
class connection {
public:
    explicit connection(Socket s) : sock_(std::move(s)) {}

    Socket& socket() { return sock_; }

    // Blocking: writes the request's bytes, reads the whole answer.
    response const& round_trip(std::string_view req) {
        asio::write(sock_, asio::buffer(req.data(), req.size()));
        res_ = {};
        http::read(sock_, buf_, res_);
        return res_;
    }

    // The same from a coroutine; errors (a cancelled socket) come back as the code.
    asio::awaitable<std::tuple<boost::system::error_code, response const*>> async_round_trip(std::string_view req) {
        constexpr auto tok = asio::as_tuple(asio::use_awaitable);
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(req.data(), req.size()), tok);
        (void)n;
        if (ec) co_return std::tuple{ec, nullptr};
        res_ = {};
        auto [ec2, m] = co_await http::async_read(sock_, buf_, res_, tok);
        (void)m;
        co_return std::tuple{ec2, ec2 ? nullptr : &res_};
    }

private:
    Socket sock_;
    beast::flat_buffer buf_;
    response res_;
};

// The X-Consul-Index of an answer (0 without one).
inline std::uint64_t consul_index(response const& r) {
    auto const h = r["X-Consul-Index"];
    std::uint64_t v = 0;
    std::from_chars(h.data(), h.data() + h.size(), v);
    return v;
}

// The value of the first string member `"name"` of a small JSON body
// (an array of one KV entry, a session's create answer); empty without one.
inline std::string json_string(std::string_view body, std::string_view name) {
    std::string quoted = "\"";
    quoted.append(name).append("\"");
    auto at = body.find(quoted);
    if (at == std::string_view::npos) return {};
    auto colon = body.find(':', at + quoted.size());
    if (colon == std::string_view::npos) return {};
    auto open = body.find('"', colon + 1);
    if (open == std::string_view::npos) return {};
    auto close = body.find('"', open + 1);
    if (close == std::string_view::npos) return {};
    // A member that is not a string (null, a number) sits before the next quote: skip it.
    if (body.find_first_not_of(" \t\r\n", colon + 1) != open) return {};
    return std::string(body.substr(open + 1, close - open - 1));
}

// The loopback TCP port of an agent URL "http://127.0.0.1:PORT".
inline unsigned short port_of(std::string const& url) {
    return static_cast<unsigned short>(std::stoi(url.substr(url.rfind(':') + 1)));
}

}  // namespace bench::raw
