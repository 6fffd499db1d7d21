// HTTPS for the embedded agent: the server's TLS context built from the
// agent's options. Internal to src/agent/; the stream is tenure::detail::net_stream.
#pragma once

#include <tenure/agent.hpp>
#include "net/net_stream.hpp"

#include <boost/asio/ssl/context.hpp>

#include <memory>

namespace tenure::detail::agent {

using agent_stream = tenure::detail::net_stream;

// The HTTPS listener's TLS context: TLS 1.2 or later, the certificate chain
// and key of cert_file / key_file, and with verify_incoming a client
// certificate signed by a CA of ca_file. Throws std::invalid_argument naming
// the file and OpenSSL's reason.
std::unique_ptr<boost::asio::ssl::context> make_server_tls_context(tenure::agent_options const& o);

}  // namespace tenure::detail::agent
