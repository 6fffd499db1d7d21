// The embedded agent's server TLS context (src/agent/tls.hpp).
#include "agent/tls.hpp"

#include <openssl/ssl.h>

#include <stdexcept>
#include <string>

namespace tenure::detail::agent {

namespace ssl = boost::asio::ssl;

std::unique_ptr<ssl::context> make_server_tls_context(tenure::agent_options const& o) {
    if (o.cert_file.empty() || o.key_file.empty())
        throw std::invalid_argument("HTTPS needs a certificate and its key (-cert-file and -key-file)");
    if (o.verify_incoming && o.ca_file.empty())
        throw std::invalid_argument("-verify-incoming needs -ca-file (the CAs that sign client certificates)");

    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    // TLS 1.2 and 1.3 only (Consul's default minimum is TLS 1.2).
    ctx->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                     ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1 | ssl::context::single_dh_use);
    boost::system::error_code ec;
    auto fail = [&](std::string const& what, std::string const& file) {
        throw std::invalid_argument("cannot load " + what + " \"" + file + "\": " + ec.message());
    };
    ctx->use_certificate_chain_file(o.cert_file, ec);
    if (ec) fail("-cert-file", o.cert_file);
    ctx->use_private_key_file(o.key_file, ssl::context::pem, ec);
    if (ec) fail("-key-file", o.key_file);
    if (SSL_CTX_check_private_key(ctx->native_handle()) != 1)
        throw std::invalid_argument("-key-file \"" + o.key_file + "\" does not match -cert-file \"" + o.cert_file + "\"");
    if (!o.ca_file.empty()) {
        ctx->load_verify_file(o.ca_file, ec);
        if (ec) fail("-ca-file", o.ca_file);
    }
    // No session tickets: nothing to resume on one machine, and no bytes
    // arriving after the handshake on a connection that the client keeps idle.
    SSL_CTX_set_num_tickets(ctx->native_handle(), 0);
    if (o.verify_incoming) {
        ctx->set_verify_mode(ssl::verify_peer | ssl::verify_fail_if_no_peer_cert);
        // Client CA names in the CertificateRequest help clients pick a certificate.
        if (STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(o.ca_file.c_str()))
            SSL_CTX_set_client_CA_list(ctx->native_handle(), names);
    } else {
        ctx->set_verify_mode(ssl::verify_none);
    }
    return ctx;
}

}  // namespace tenure::detail::agent
