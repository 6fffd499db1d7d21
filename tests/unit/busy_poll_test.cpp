// tenure::run_with_busy_poll: the same contract as io_context::run().
#include <boost/test/unit_test.hpp>

#include <tenure/busy_poll.hpp>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {

// Three handlers at once, a timer (which makes the loop go past the budget
// and sleep) and a handler posted by the timer's: five in all.
std::size_t run_script(asio::io_context& ctx, std::vector<int>& order, std::chrono::nanoseconds spin) {
    asio::steady_timer timer{ctx, 5ms};
    for (int i = 0; i < 3; ++i) asio::post(ctx, [&order, i] { order.push_back(i); });
    timer.async_wait([&](boost::system::error_code ec) {
        order.push_back(ec ? -1 : 3);
        asio::post(ctx, [&order] { order.push_back(4); });
    });
    return tenure::run_with_busy_poll(ctx, spin);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(busy_poll)

BOOST_AUTO_TEST_CASE(runs_every_handler_and_returns_when_work_runs_out) {
    // A budget shorter than the timer (the loop sleeps for it), one longer
    // (it spins until the timer fires), and none (plain run()).
    for (auto spin : {std::chrono::nanoseconds{100us}, std::chrono::nanoseconds{50ms}, std::chrono::nanoseconds{0}}) {
        asio::io_context ctx{1};
        std::vector<int> order;
        std::size_t const n = run_script(ctx, order, spin);
        BOOST_TEST(n == 5u);
        BOOST_TEST(order == (std::vector<int>{0, 1, 2, 3, 4}), "spin " << spin.count() << " ns");
        BOOST_TEST(ctx.stopped());
    }
}

BOOST_AUTO_TEST_CASE(stop_returns_without_waiting_for_pending_work) {
    asio::io_context ctx{1};
    bool fired = false;
    asio::steady_timer far{ctx, 1h};
    far.async_wait([&](boost::system::error_code ec) { fired = !ec; });
    asio::steady_timer near{ctx, 1ms};
    near.async_wait([&](boost::system::error_code) { ctx.stop(); });
    BOOST_TEST(tenure::run_with_busy_poll(ctx, 10ms) == 1u);
    BOOST_TEST(!fired);
    BOOST_TEST(ctx.stopped());
    // Restarted, it goes on with the work left, like run(): cancel the far timer.
    ctx.restart();
    far.cancel();
    BOOST_TEST(tenure::run_with_busy_poll(ctx, 10ms) == 1u);
    BOOST_TEST(!fired);
}

BOOST_AUTO_TEST_CASE(a_handler_exception_propagates_and_the_loop_resumes) {
    asio::io_context ctx{1};
    std::vector<int> order;
    asio::post(ctx, [&] { order.push_back(1); });
    asio::post(ctx, [] { throw std::runtime_error("boom"); });
    asio::post(ctx, [&] { order.push_back(2); });
    BOOST_CHECK_THROW(tenure::run_with_busy_poll(ctx, 1ms), std::runtime_error);
    BOOST_TEST(order == (std::vector<int>{1}));
    BOOST_TEST(tenure::run_with_busy_poll(ctx, 1ms) == 1u);
    BOOST_TEST(order == (std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_CASE(work_from_another_thread_wakes_it_whether_spinning_or_asleep) {
    // The other thread posts twice: once at once (the loop is likely still
    // spinning) and once after the loop has had time to give up and sleep.
    // Each post must run; the second releases the work guard.
    asio::io_context ctx{1};
    std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard{ctx.get_executor()};
    std::vector<int> ran;
    std::thread poster([&] {
        asio::post(ctx, [&] { ran.push_back(1); });
        std::this_thread::sleep_for(20ms);  // outlasts the 1 ms budget: the loop is asleep
        asio::post(ctx, [&] {
            ran.push_back(2);
            guard.reset();
        });
    });
    std::size_t const n = tenure::run_with_busy_poll(ctx, 1ms);
    poster.join();
    BOOST_TEST(n == 2u);
    BOOST_TEST(ran == (std::vector<int>{1, 2}));
}

BOOST_AUTO_TEST_SUITE_END()
