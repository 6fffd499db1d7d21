// HTTP/1.1 transport of tenure::consul::client: one keep-alive pool
// (net/http_pool.hpp) to the agent over TCP, TLS or a Unix domain socket.
// This file renders Consul's requests and turns the pool's failures into
// api_error.
#include "consul/transport.hpp"

#include "net/http_pool.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/error.hpp>
#include <boost/beast/core/error.hpp>

#include <algorithm>
#include <utility>

namespace tenure::consul::detail {

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;

constexpr std::string_view user_agent = "tenure/0.1";

tenure::detail::http_pool_options pool_options(http_transport_options const& o) {
    tenure::detail::http_pool_options p;
    p.destination = {o.host, o.port, o.host_header, o.unix_path, o.tls, o.tls_server_name};
    p.max_idle = std::max<std::size_t>(o.max_idle_connections, 1);
    p.max_connections = o.max_connections;
    p.kept_fields_prefix = "X-Consul-";  // what the client reads (decode_meta)
    return p;
}

[[noreturn]] void throw_failure(tenure::detail::net_failure const& f) {
    if (f.code == asio::error::operation_aborted) throw_aborted(f.what);
    throw api_error(f.code, 0, f.what);
}

class http_transport final : public transport {
public:
    http_transport(asio::any_io_executor ex, http_transport_options opts)
        : opts_(std::move(opts)), pool_(std::move(ex), pool_options(opts_), throw_failure) {}

    // No coroutine of its own: the pool's exchange is the operation, and
    // owns the rendered request. (The client, which owns this transport, is
    // kept alive by the operation awaiting this one.)
    asio::awaitable<http_response> send(http::verb method, std::string target, std::string body,
                                        clock::time_point deadline) override {
        return pool_.exchange(render_request(method, target, body), deadline);
    }

    void close() override { pool_.close(); }

    std::size_t idle_connections() const noexcept override { return pool_.idle_connections(); }
    std::size_t open_connections() const noexcept override { return pool_.open_connections(); }

private:
    // The request as it goes on the wire, in one buffer: writing one
    // contiguous buffer costs far less than Beast's serializer walking a
    // concatenation of the start line, each field and the body.
    std::string render_request(http::verb method, std::string_view target, std::string_view body) const {
        std::string_view const verb = http::to_string(method);
        std::string_view const type = target.starts_with("/v1/kv/") ? "application/octet-stream" : "application/json";
        std::string w;
        w.reserve(verb.size() + target.size() + opts_.host_header.size() + opts_.token.size() + body.size() + 128);
        w.append(verb).append(" ").append(target).append(" HTTP/1.1\r\nHost: ").append(opts_.host_header);
        w.append("\r\nUser-Agent: ").append(user_agent);
        if (!opts_.token.empty()) w.append("\r\nX-Consul-Token: ").append(opts_.token);
        if (!body.empty()) w.append("\r\nContent-Type: ").append(type);
        // As Beast's prepare_payload: a length with a body, and 0 for the
        // methods that expect one.
        if (!body.empty() || method == http::verb::put || method == http::verb::post || method == http::verb::options)
            w.append("\r\nContent-Length: ").append(std::to_string(body.size()));
        w.append("\r\n\r\n").append(body);
        return w;
    }

    http_transport_options opts_;
    tenure::detail::http_pool pool_;
};

}  // namespace

std::shared_ptr<asio::ssl::context> make_client_tls_context(client_config const& config) {
    namespace ssl = asio::ssl;
    auto ctx = std::make_shared<ssl::context>(ssl::context::tls_client);
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    ctx->set_verify_mode(ssl::verify_peer);
    beast::error_code ec;
    auto fail = [&](char const* field, std::string const& file) {
        throw boost::system::system_error(ec, std::string("Consul TLS: cannot load ") + field + " \"" + file + "\"");
    };
    if (!config.ca_file.empty()) {
        ctx->load_verify_file(config.ca_file, ec);
        if (ec) fail("ca_file", config.ca_file);
    } else {
        ctx->set_default_verify_paths(ec);
        if (ec) fail("the system's CAs", "");
    }
    if (config.cert_file.empty() != config.key_file.empty())
        throw boost::system::system_error(make_error_code(boost::system::errc::invalid_argument),
                                          "Consul TLS: a client certificate needs both cert_file and key_file");
    if (!config.cert_file.empty()) {
        ctx->use_certificate_chain_file(config.cert_file, ec);
        if (ec) fail("cert_file", config.cert_file);
        ctx->use_private_key_file(config.key_file, ssl::context::pem, ec);
        if (ec) fail("key_file", config.key_file);
    }
    return ctx;
}

std::shared_ptr<transport> make_http_transport(asio::any_io_executor ex, http_transport_options opts) {
    return std::make_shared<http_transport>(std::move(ex), std::move(opts));
}

}  // namespace tenure::consul::detail
