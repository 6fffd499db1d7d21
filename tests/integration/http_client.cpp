#include "http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include <algorithm>
#include <array>
#include <cctype>

namespace tenure::itest {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

bool iequals(std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
               return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
}

}  // namespace

std::optional<std::string> http_response::header(std::string_view name) const {
    for (auto const& [k, v] : headers)
        if (iequals(k, name)) return v;
    return std::nullopt;
}

struct http_client::impl {
    std::string host;
    std::uint16_t port;
    asio::io_context ioc;
    std::optional<tcp::socket> socket;
    beast::flat_buffer buffer;
    bool reused = false;  // the open connection already carried a request

    impl(std::string h, std::uint16_t p) : host(std::move(h)), port(p) {}

    // Runs the io_context until `done` or the deadline; false on timeout.
    bool run_until(bool const& done, steady::time_point deadline) {
        while (!done) {
            if (ioc.stopped()) ioc.restart();
            if (ioc.run_one_until(deadline) == 0 && !done) {
                if (steady::now() >= deadline) return false;
            }
        }
        return true;
    }

    // Cancels whatever is outstanding and lets the handlers run.
    void abort_connection() {
        if (socket) {
            error_code ignored;
            socket->close(ignored);
        }
        ioc.restart();
        ioc.run();
        socket.reset();
        buffer.clear();
        reused = false;
    }

    void connect(steady::time_point deadline) {
        socket.emplace(ioc);
        buffer.clear();
        reused = false;
        error_code ec;
        bool done = false;
        tcp::endpoint ep(asio::ip::make_address(host), port);
        socket->async_connect(ep, [&](error_code e) {
            ec = e;
            done = true;
        });
        if (!run_until(done, deadline)) {
            abort_connection();
            throw http_error("connect to " + host + ":" + std::to_string(port) + " timed out");
        }
        if (ec) {
            socket.reset();
            throw http_error("connect to " + host + ":" + std::to_string(port) + ": " + ec.message());
        }
        socket->set_option(tcp::no_delay(true));
    }
};

http_client::http_client(std::string host, std::uint16_t port) : impl_(std::make_unique<impl>(std::move(host), port)) {}

http_client::~http_client() {
    if (impl_->socket) {
        error_code ignored;
        impl_->socket->shutdown(tcp::socket::shutdown_both, ignored);
        impl_->socket->close(ignored);
    }
}

std::uint16_t http_client::port() const noexcept { return impl_->port; }

http_response http_client::request(std::string_view method, std::string_view target, std::string body,
                                   request_options const& opts) {
    auto& d = *impl_;
    auto const deadline = steady::now() + opts.timeout;

    http::request<http::string_body> req;
    req.method_string(method);
    req.target(target);
    req.version(11);
    req.set(http::field::host, d.host + ":" + std::to_string(d.port));
    req.set(http::field::user_agent, "tenure-integration-tests");
    for (auto const& [k, v] : opts.headers) req.set(k, v);
    req.body() = std::move(body);
    if (!req.body().empty() || method == "PUT" || method == "POST") req.prepare_payload();

    for (int attempt = 0;; ++attempt) {
        if (!d.socket) d.connect(deadline);
        bool const was_reused = d.reused;
        d.reused = true;

        http::response_parser<http::string_body> parser;
        parser.body_limit(64 * 1024 * 1024);

        // The write and the read run concurrently: a server may answer (413)
        // and close before it has read the whole body.
        bool write_done = false, read_done = false;
        error_code write_ec, read_ec;
        std::size_t read_bytes_before = d.buffer.size();
        http::async_write(*d.socket, req, [&](error_code ec, std::size_t) {
            write_ec = ec;
            write_done = true;
            if (!ec && opts.on_written) opts.on_written();
        });
        http::async_read(*d.socket, d.buffer, parser, [&](error_code ec, std::size_t) {
            read_ec = ec;
            read_done = true;
        });
        if (!d.run_until(read_done, deadline)) {
            d.abort_connection();
            throw http_error(std::string(method) + " " + std::string(target) + ": no response within " +
                             std::to_string(opts.timeout.count()) + " ms");
        }
        if (!write_done) {
            // Answered early: the rest of the body cannot be sent on this connection.
            http::response<http::string_body> early = parser.release();
            d.abort_connection();
            if (read_ec) throw http_error(std::string(method) + " " + std::string(target) + ": " + read_ec.message());
            http_response out;
            out.status = early.result_int();
            for (auto const& f : early) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
            out.body = std::move(early.body());
            return out;
        }
        if (read_ec) {
            bool const nothing_received = !parser.got_some() && read_bytes_before == 0;
            d.abort_connection();
            // A kept-alive connection the server closed while idle: retry once on a new one.
            if (was_reused && nothing_received && attempt == 0 &&
                (read_ec == http::error::end_of_stream || read_ec == asio::error::connection_reset ||
                 read_ec == asio::error::eof || write_ec)) {
                continue;
            }
            throw http_error(std::string(method) + " " + std::string(target) + ": " + read_ec.message());
        }
        http::response<http::string_body> res = parser.release();
        if (!res.keep_alive()) d.abort_connection();
        http_response out;
        out.status = res.result_int();
        for (auto const& f : res) out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
        out.body = std::move(res.body());
        return out;
    }
}

raw_exchange http_client::send_raw(std::string_view bytes, std::chrono::milliseconds timeout) {
    auto const deadline = steady::now() + timeout;
    asio::io_context ioc;
    tcp::socket sock(ioc);
    error_code ec;
    bool done = false;
    auto run = [&](steady::time_point until) {
        while (!done) {
            if (ioc.stopped()) ioc.restart();
            if (ioc.run_one_until(until) == 0 && !done && steady::now() >= until) return false;
        }
        return true;
    };
    sock.async_connect(tcp::endpoint(asio::ip::make_address(impl_->host), impl_->port), [&](error_code e) {
        ec = e;
        done = true;
    });
    if (!run(deadline) || ec) throw http_error("send_raw: connect failed");

    raw_exchange out;
    std::string data(bytes);
    bool write_done = false;
    asio::async_write(sock, asio::buffer(data), [&](error_code, std::size_t) { write_done = true; });
    std::array<char, 4096> chunk;
    done = false;
    std::function<void()> read_more = [&] {
        sock.async_read_some(asio::buffer(chunk), [&](error_code e, std::size_t n) {
            out.received.append(chunk.data(), n);
            if (e) {
                out.closed_by_peer = e != asio::error::operation_aborted;
                done = true;
                return;
            }
            read_more();
        });
    };
    read_more();
    run(deadline);
    error_code ignored;
    sock.close(ignored);
    ioc.restart();
    ioc.run();
    (void)write_done;
    return out;
}

background_request::background_request(std::uint16_t port, std::string method, std::string target, std::string body,
                                       std::chrono::milliseconds timeout)
    : written_future_(written_.get_future()), result_future_(result_.get_future()) {
    thread_ = std::thread([this, port, method = std::move(method), target = std::move(target),
                           body = std::move(body), timeout]() mutable {
        bool written = false;
        try {
            http_client client("127.0.0.1", port);
            request_options opts;
            opts.timeout = timeout;
            opts.on_written = [&] {
                written_at_ = steady::now();
                written = true;
                written_.set_value();
            };
            http_response res = client.request(method, target, std::move(body), opts);
            returned_at_ = steady::now();
            result_.set_value(std::move(res));
        } catch (...) {
            returned_at_ = steady::now();
            if (!written) written_.set_exception(std::current_exception());
            result_.set_exception(std::current_exception());
        }
    });
}

background_request::~background_request() {
    if (thread_.joinable()) thread_.join();
}

void background_request::wait_written(std::chrono::milliseconds timeout) {
    if (written_future_.wait_for(timeout) != std::future_status::ready)
        throw http_error("background request not written within " + std::to_string(timeout.count()) + " ms");
    written_future_.get();
}

http_response background_request::get() {
    http_response res = result_future_.get();
    if (thread_.joinable()) thread_.join();
    return res;
}

}  // namespace tenure::itest
