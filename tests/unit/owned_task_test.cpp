// A session's owned background tasks (session_impl::spawn_owned) and the
// slot that stops them: a request reaches a task only through a post, so a
// task that cancels itself - a monitor that finds its key lost calls lose(),
// which emits the slot the monitor runs under - and ends without suspending
// does not trip Asio 1.81's co_spawn_entry_point into throwing out of
// io_context::run(). No sockets: a session with no backend behind it.
#include "core/backend.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/test/unit_test.hpp>

#include <memory>
#include <stdexcept>

namespace asio = boost::asio;

namespace {

// Only spawn_owned is exercised: the remote operations are never called.
struct no_backend final : tenure::detail::session_impl {
    explicit no_backend(asio::any_io_executor ex)
        : session_impl(std::move(ex), tenure::session_options{}, "s", tenure::detail::clock::now()) {}
    asio::awaitable<bool> renew_once() override { throw std::logic_error("not used"); }
    asio::awaitable<void> destroy_remote() override { throw std::logic_error("not used"); }
    asio::awaitable<std::shared_ptr<tenure::detail::scope_state>> acquire(tenure::detail::claim) override {
        throw std::logic_error("not used");
    }
    asio::awaitable<tenure::detail::claim_holders> read(tenure::detail::claim_kind, std::string, int) override {
        throw std::logic_error("not used");
    }
};

// An io_context, a session on it, and the slot its task runs under.
struct owned_task_fixture {
    asio::io_context io;
    std::shared_ptr<no_backend> s = std::make_shared<no_backend>(io.get_executor());
    asio::cancellation_signal stop;
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(owned_tasks, owned_task_fixture)

BOOST_AUTO_TEST_CASE(a_task_that_cancels_itself_and_ends_at_once_stays_inside_run) {
    bool ran = false;
    s->spawn_owned(
        [&]() -> asio::awaitable<void> {
            ran = true;
            stop.emit(asio::cancellation_type::terminal);  // as lose() does from a monitor
            co_return;
        },
        stop.slot());
    BOOST_CHECK_NO_THROW(io.run());
    BOOST_TEST(ran);
    BOOST_TEST(s->background == 0);
}

BOOST_AUTO_TEST_CASE(a_request_stops_a_suspended_task) {
    bool aborted = false;
    s->spawn_owned(
        [&]() -> asio::awaitable<void> {
            asio::steady_timer forever(io, asio::steady_timer::time_point::max());
            try {
                co_await forever.async_wait(asio::use_awaitable);
            } catch (boost::system::system_error const& e) {
                aborted = e.code() == asio::error::operation_aborted;
            }
        },
        stop.slot());
    io.poll();  // the task waits
    BOOST_TEST(s->background == 1);
    stop.emit(asio::cancellation_type::terminal);
    BOOST_CHECK_NO_THROW(io.run());
    BOOST_TEST(aborted);
    BOOST_TEST(s->background == 0);
}

BOOST_AUTO_TEST_SUITE_END()
