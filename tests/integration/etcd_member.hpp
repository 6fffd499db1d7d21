// One real etcd member and a tenure::etcd::client on a single-threaded
// io_context (or, for the suites that opt in, on a strand of an io_context
// that TENURE_TEST_THREADS threads run): the base of the one-member fixtures
// of the etcd test files.
#pragma once

#include "etcd_process.hpp"
#include "run_on.hpp"

#include <tenure/etcd/client.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/test/unit_test.hpp>

#include <memory>

namespace tenure::itest {

struct etcd_member {
    // Selects the constructor of the suites that follow TENURE_TEST_THREADS.
    struct on_test_threads {};

    boost::asio::io_context ioc;
    // What the client was made on, and what the test's own objects are made on.
    boost::asio::any_io_executor ex;
    etcd_process server;
    std::unique_ptr<tenure::etcd::client> client;

    // One thread: ioc says so (concurrency hint 1), the client is on its executor.
    etcd_member() : ioc{1}, ex{ioc.get_executor()} { connect(); }
    // For the suites that pass `ex` to run_on / run_scenario: a strand and a
    // hint of N with TENURE_TEST_THREADS=N > 1, as above otherwise (run_on.hpp).
    explicit etcd_member(on_test_threads) : ioc{test_threads()}, ex{test_executor(ioc)} { connect(); }
    ~etcd_member() {
        client.reset();
        if (!server.running()) BOOST_TEST_MESSAGE("etcd log:\n" << server.log());
    }
    etcd_member(etcd_member const&) = delete;
    etcd_member& operator=(etcd_member const&) = delete;

private:
    void connect() {
        tenure::etcd::client_config cfg;
        cfg.endpoints = {server.client_url()};
        client = std::make_unique<tenure::etcd::client>(ex, std::move(cfg));
    }
};

}  // namespace tenure::itest
