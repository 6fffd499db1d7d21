// Internal: what tenure::consul::client needs from a way of talking to Consul.
//
// One request in, one response out. Two implementations:
//   http_transport       - HTTP/1.1 over Beast with a keep-alive pool
//   inprocess_transport  - tenure::agent's HTTP API called directly (no sockets;
//                          src/agent/inprocess_transport.cpp, in the agent library)
// Both run on the client's executor and honour per-operation (terminal)
// cancellation of the awaiting coroutine and close().
#pragma once

#include <tenure/detail/clock.hpp>
#include <tenure/consul/client.hpp>

#include "net/http_answer.hpp"

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/verb.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace tenure::consul::detail {

namespace http = boost::beast::http;
using clock = tenure::detail::clock;

// Its headers: the X-Consul-* fields (at least: the HTTP transport keeps no others).
using http_response = tenure::detail::http_answer;

class transport {
public:
    virtual ~transport() = default;

    // Sends one request. `target` is the origin-form ("/v1/kv/a?index=3"). The
    // transport adds Host, X-Consul-Token (when set) and Content-Length.
    // Throws api_error with http_status 0 on a transport failure, with
    // boost::asio::error::timed_out past `deadline`, and with
    // boost::asio::error::operation_aborted when the awaiting coroutine is
    // cancelled or close() is called. Never throws for an HTTP status.
    virtual boost::asio::awaitable<http_response> send(http::verb method, std::string target, std::string body,
                                                       clock::time_point deadline) = 0;

    // Closes idle connections and aborts every request in flight. The
    // transport stays usable.
    virtual void close() = 0;

    // Idle keep-alive connections (0 for transports without any); for tests.
    virtual std::size_t idle_connections() const noexcept { return 0; }
    // Connections open now, idle or in flight (0 for transports without any).
    virtual std::size_t open_connections() const noexcept { return 0; }
};

struct http_transport_options {
    std::string host;  // name or address literal (IPv6 without brackets)
    std::uint16_t port = 8500;
    std::string host_header;  // "host:port" as sent in Host
    // unix:// addresses: the socket's path (host and port unused).
    std::string unix_path;
    std::string token;
    std::size_t max_idle_connections = 16;
    // Connections open at once (idle + in flight); 0: no limit. At the limit a
    // request waits (within its deadline) for a connection to come free.
    std::size_t max_connections = 0;
    // https://: the client's TLS context (make_client_tls_context), and the
    // name the server's certificate must carry (and SNI); empty: host.
    std::shared_ptr<boost::asio::ssl::context> tls;
    std::string tls_server_name;
};

// A TLS client context from the client_config's ca_file, cert_file and
// key_file: TLS 1.2 or later, the server verified against ca_file (else the
// system's CAs). Throws boost::system::system_error naming the file.
std::shared_ptr<boost::asio::ssl::context> make_client_tls_context(client_config const& config);

std::shared_ptr<transport> make_http_transport(boost::asio::any_io_executor ex, http_transport_options opts);

// The failure every transport reports for an interrupted request.
[[noreturn]] void throw_aborted(std::string what);

}  // namespace tenure::consul::detail
