// etcd::api_error's constructor lives in src/etcd/client.cpp with the whole
// asynchronous client (Asio, Beast, OpenSSL streams), which the codec fuzzer
// does not need. This stand-in builds the same object with a plain what():
// the codec only constructs and throws it.
#include <tenure/etcd/client.hpp>

namespace tenure::etcd {

api_error::api_error(boost::system::error_code ec, unsigned http_status, int grpc_code, std::string server_message,
                     std::int64_t compact_revision)
    : tenure::server_error(boost::system::error_code(ec.value(), ec.category()), server_message, http_status,
                           server_message),
      grpc_code_(grpc_code),
      compact_revision_(compact_revision) {}

}  // namespace tenure::etcd
