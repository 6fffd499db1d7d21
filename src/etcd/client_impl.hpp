// Internal: tenure::etcd::client's state, shared by client.cpp and watch.cpp.
#pragma once

#include <tenure/etcd/client.hpp>

#include "etcd/transport.hpp"

#include <memory>

namespace tenure::etcd {

struct client::impl {
    boost::asio::any_io_executor ex;
    client_config config;
    std::shared_ptr<detail::transport> transport;
};

}  // namespace tenure::etcd
