// One real etcd member and a tenure::etcd::client on a single-threaded
// io_context: the base of the one-member fixtures of the etcd test files.
#pragma once

#include "etcd_process.hpp"

#include <tenure/etcd/client.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/test/unit_test.hpp>

#include <memory>

namespace tenure::itest {

struct etcd_member {
    boost::asio::io_context ioc{1};
    etcd_process server;
    std::unique_ptr<tenure::etcd::client> client;

    etcd_member() {
        tenure::etcd::client_config cfg;
        cfg.endpoints = {server.client_url()};
        client = std::make_unique<tenure::etcd::client>(ioc.get_executor(), std::move(cfg));
    }
    ~etcd_member() {
        client.reset();
        if (!server.running()) BOOST_TEST_MESSAGE("etcd log:\n" << server.log());
    }
    etcd_member(etcd_member const&) = delete;
    etcd_member& operator=(etcd_member const&) = delete;
};

}  // namespace tenure::itest
