// A small synchronous HTTP/1.1 client for the integration tests.
//
// Each client owns one keep-alive connection and a private io_context; a call
// runs that io_context until the response is complete or the timeout expires,
// so the caller sees a plain blocking function. Beast stays inside
// http_client.cpp. A client is not thread-safe: a test that needs a request in
// flight while it does something else gives that request its own client on a
// std::thread (see background_request).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace tenure::itest {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

struct http_response {
    unsigned status = 0;
    std::vector<std::pair<std::string, std::string>> headers;  // in wire order
    std::string body;

    // Case-insensitive lookup of the first header with that name.
    std::optional<std::string> header(std::string_view name) const;
    bool has_header(std::string_view name) const { return header(name).has_value(); }
};

// A transport failure or a timeout (never an HTTP status).
class http_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct request_options {
    std::chrono::milliseconds timeout = 15s;  // for the whole exchange
    std::vector<std::pair<std::string, std::string>> headers;
    // Called (on the calling thread) once the request has been written to the socket.
    std::function<void()> on_written;
};

struct raw_exchange {
    std::string received;       // everything the peer sent back
    bool closed_by_peer = false;  // EOF or reset seen before the timeout
};

class http_client {
public:
    http_client(std::string host, std::uint16_t port);
    ~http_client();
    http_client(http_client const&) = delete;
    http_client& operator=(http_client const&) = delete;

    // Sends one request on the kept-alive connection (reconnecting when the
    // server closed it). Throws http_error on a transport error or timeout.
    http_response request(std::string_view method, std::string_view target, std::string body = {},
                          request_options const& opts = {});

    http_response get(std::string_view target, request_options const& opts = {}) {
        return request("GET", target, {}, opts);
    }
    http_response put(std::string_view target, std::string body = {}, request_options const& opts = {}) {
        return request("PUT", target, std::move(body), opts);
    }
    http_response del(std::string_view target, request_options const& opts = {}) {
        return request("DELETE", target, {}, opts);
    }

    // Writes `bytes` as-is on a fresh connection, then reads until the peer
    // closes or `timeout` passes.
    raw_exchange send_raw(std::string_view bytes, std::chrono::milliseconds timeout);

    std::uint16_t port() const noexcept;

private:
    struct impl;
    std::unique_ptr<impl> impl_;
};

// One request running on its own thread and connection: the way a test keeps
// a blocking query parked while it writes from the foreground.
class background_request {
public:
    background_request(std::uint16_t port, std::string method, std::string target, std::string body = {},
                       std::chrono::milliseconds timeout = 30s);
    ~background_request();
    background_request(background_request const&) = delete;
    background_request& operator=(background_request const&) = delete;

    // Blocks until the request has been written to the socket (the server
    // may not have parsed it yet). Throws what the request threw if it failed
    // before that.
    void wait_written(std::chrono::milliseconds timeout = 10s);
    // Blocks until the response arrives; rethrows a transport error.
    http_response get();

    steady::time_point written_at() const noexcept { return written_at_; }
    steady::time_point returned_at() const noexcept { return returned_at_; }

private:
    std::promise<void> written_;
    std::future<void> written_future_;
    std::promise<http_response> result_;
    std::future<http_response> result_future_;
    steady::time_point written_at_{};
    steady::time_point returned_at_{};
    std::thread thread_;
};

}  // namespace tenure::itest
