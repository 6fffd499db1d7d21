// Runs a test's coroutine body to completion on an io_context.
//
// One thread by default. TENURE_TEST_THREADS=N (N > 1) runs the tests that
// opt in (those that pass run_on / run_scenario / run_for the executor they
// got from test_executor) on N threads calling the io_context, as a user
// following the library's threading rule would: every object of one client
// (the client, its sessions, elections, scopes, semaphores, observers,
// campaigns) and everything the test's coroutines share (timers, fault
// proxies, spawned coroutines) is made on one strand, and the body runs on
// that strand. scripts/tsan.sh runs the converted suites like that under
// ThreadSanitizer. Unset, empty or 1: exactly the single-threaded run.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/strand.hpp>
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <functional>
#include <latch>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace tenure::itest {

// TENURE_TEST_THREADS, read once: how many threads run a converted test's
// io_context (1 when unset or empty).
inline int test_threads() {
    static int const n = [] {
        char const* v = std::getenv("TENURE_TEST_THREADS");
        if (!v || !*v) return 1;
        std::string const text = v;
        std::size_t used = 0;
        int parsed = 0;
        try {
            parsed = std::stoi(text, &used);
        } catch (std::exception const&) {
            used = 0;
        }
        if (used == 0 || used != text.size() || parsed < 1 || parsed > 64)
            throw std::invalid_argument("TENURE_TEST_THREADS: not a thread count from 1 to 64: " + text);
        return parsed;
    }();
    return n;
}

// The executor a test makes its objects on: a new strand of `io` when the
// tests run on several threads, io's own executor otherwise. Call it once per
// io_context and keep the result (each call makes another strand); pass it to
// run_on / run_scenario so that the body runs on it too.
inline boost::asio::any_io_executor test_executor(boost::asio::io_context& io) {
    if (test_threads() > 1) return boost::asio::make_strand(io);
    return io.get_executor();
}

namespace detail {

// io.run_for(d) on `threads` threads (the caller is one of them), joined
// before it returns. None starts running before all exist, so a body sees
// every thread of the run from its first step. An exception escaping a
// handler stops the io_context and is rethrown here, as it would escape
// io.run_for() on one thread.
inline void run_for_on(boost::asio::io_context& io, int threads, std::chrono::steady_clock::duration d) {
    if (threads <= 1) {
        io.run_for(d);
        return;
    }
    std::mutex m;
    std::exception_ptr escaped;
    std::latch all_started(threads);
    auto runner = [&] {
        all_started.arrive_and_wait();
        try {
            io.run_for(d);
        } catch (...) {
            {
                std::lock_guard lock(m);
                if (!escaped) escaped = std::current_exception();
            }
            io.stop();
        }
    };
    std::vector<std::thread> others;
    others.reserve(static_cast<std::size_t>(threads - 1));
    for (int i = 1; i < threads; ++i) others.emplace_back(runner);
    runner();
    for (auto& t : others) t.join();
    if (escaped) std::rethrow_exception(escaped);
}

inline void run_on(boost::asio::io_context& io, boost::asio::any_io_executor const& ex, int threads,
                   std::function<boost::asio::awaitable<void>()> body, std::chrono::steady_clock::duration limit) {
    // Both are written by the completion handler (on `ex`) and read after
    // every thread has returned from run_for (joined).
    bool done = false;
    std::exception_ptr error;
    boost::asio::co_spawn(ex, body(), [&](std::exception_ptr e) {
        done = true;
        error = e;
        io.stop();
    });
    run_for_on(io, threads, limit);
    BOOST_REQUIRE_MESSAGE(done, "the test body did not finish in time");
    if (error) std::rethrow_exception(error);
}

}  // namespace detail

// Bounded by `limit`, so a bug fails the test instead of hanging it; the
// body's exception is rethrown here. One thread.
inline void run_on(boost::asio::io_context& io, std::function<boost::asio::awaitable<void>()> body,
                   std::chrono::steady_clock::duration limit = std::chrono::seconds{30}) {
    detail::run_on(io, io.get_executor(), 1, std::move(body), limit);
}

// The same, with the body on `ex` (test_executor(io)) and io run by
// test_threads() threads.
inline void run_on(boost::asio::io_context& io, boost::asio::any_io_executor const& ex,
                   std::function<boost::asio::awaitable<void>()> body,
                   std::chrono::steady_clock::duration limit = std::chrono::seconds{30}) {
    detail::run_on(io, ex, test_threads(), std::move(body), limit);
}

// io.run_for(d) on test_threads() threads (for the tests that use
// test_executor; the caller's thread when there is one).
inline void run_for(boost::asio::io_context& io, std::chrono::steady_clock::duration d) {
    detail::run_for_on(io, test_threads(), d);
}

// run_on from a fresh start, then 300 ms more for the background releases and
// closes the body left behind (a scope's destructor, a session's close).
inline void run_scenario(boost::asio::io_context& io, std::function<boost::asio::awaitable<void>()> const& body,
                         std::chrono::steady_clock::duration limit = std::chrono::seconds{60}) {
    io.restart();
    run_on(io, body, limit);
    io.restart();
    io.run_for(std::chrono::milliseconds{300});
}

// The same, with the body on `ex` and every run on test_threads() threads.
inline void run_scenario(boost::asio::io_context& io, boost::asio::any_io_executor const& ex,
                         std::function<boost::asio::awaitable<void>()> const& body,
                         std::chrono::steady_clock::duration limit = std::chrono::seconds{60}) {
    io.restart();
    run_on(io, ex, body, limit);
    io.restart();
    run_for(io, std::chrono::milliseconds{300});
}

}  // namespace tenure::itest
