// In-process transport of tenure::consul::client: requests are handed to the
// embedded agent's HTTP API (socket-free) on the same executor.
//
// A blocking query that has to wait registers a watch on the state machine;
// the watch callback only cancels a timer (it must not re-enter the state
// machine), and the request is evaluated again with the same blocking_state
// once the timer completes: woken, the query's deadline, the request's
// deadline, cancellation, or close().
#include "consul/transport.hpp"

#include "agent/agent_access.hpp"
#include "agent/http_api.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/cancellation_state.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <exception>
#include <list>
#include <utility>

namespace tenure::consul::detail {

namespace {

namespace asio = boost::asio;
namespace ag = tenure::detail::agent;

constexpr auto tuple_awaitable = asio::as_tuple(asio::use_awaitable);

class inprocess_transport final : public transport, public std::enable_shared_from_this<inprocess_transport> {
public:
    inprocess_transport(asio::any_io_executor ex, tenure::agent& agent, std::string token)
        : ex_(std::move(ex)), agent_(agent), token_(std::move(token)) {}

    ~inprocess_transport() override { close(); }

    asio::awaitable<http_response> send(http::verb method, std::string target, std::string body,
                                        clock::time_point deadline) override;

    void close() override {
        for (parked* p : parked_) {
            p->aborted = true;
            p->timer.cancel();
        }
    }

private:
    struct parked {
        explicit parked(asio::any_io_executor const& ex) : timer(ex) {}
        tenure::detail::timer timer;
        bool woken = false;
        bool aborted = false;
    };

    class parked_guard {
    public:
        parked_guard(inprocess_transport& t, parked& p) : t_(t), it_(t.parked_.insert(t.parked_.end(), &p)) {}
        ~parked_guard() { t_.parked_.erase(it_); }
        parked_guard(parked_guard const&) = delete;
        parked_guard& operator=(parked_guard const&) = delete;

    private:
        inprocess_transport& t_;
        std::list<parked*>::iterator it_;
    };

    // One evaluation; a thrown exception becomes a 500 as the HTTP server does.
    ag::api_outcome handle(ag::request const& req, ag::blocking_state& bs) {
        ag::api_outcome out;
        try {
            ag::http_api api(tenure::detail::agent_access::state(agent_));
            api.set_views(tenure::detail::agent_access::views(agent_));
            out = api.handle(req, ag::clock::now(), bs);
        } catch (std::exception const& e) {
            out = {};
            out.res = internal_error(std::string("internal error: ") + e.what());
        }
        tenure::detail::agent_access::timers_changed(agent_);
        if (!out.res && !out.wait) out.res = internal_error("internal error: no response");
        return out;
    }

    static ag::response internal_error(std::string text) {
        ag::response res{http::status::internal_server_error, 11};
        res.set(http::field::content_type, "text/plain; charset=utf-8");
        res.body() = std::move(text);
        return res;
    }

    static http_response convert(ag::response&& res) {
        http_response out;
        out.status = res.result_int();
        out.body = std::move(res.body());
        out.headers = std::move(static_cast<http::fields&>(res));
        return out;
    }

    asio::any_io_executor ex_;
    tenure::agent& agent_;
    std::string token_;
    std::list<parked*> parked_;
};

asio::awaitable<http_response> inprocess_transport::send(http::verb method, std::string target, std::string body,
                                                         clock::time_point deadline) {
    auto const keep = shared_from_this();
    std::string const what = std::string(http::to_string(method)) + " " + target + " (in-process)";

    ag::request req{method, target, 11};
    req.set(http::field::host, "tenure-inprocess");
    if (!token_.empty()) req.set("X-Consul-Token", token_);
    req.body() = std::move(body);
    req.prepare_payload();

    // Complete through the executor as network I/O would: callers' loops stay
    // fair to the other coroutines and never recurse.
    co_await asio::post(ex_, asio::use_awaitable);

    ag::blocking_state bs;
    for (;;) {
        if (agent_.stopped())
            throw api_error(make_error_code(tenure::error::agent_stopped), 0, what);
        ag::api_outcome out = handle(req, bs);
        if (out.res) {
            // As over HTTP: nothing is answered that is not on disk yet.
            if (tenure::detail::agent_access::pending_writes(agent_) &&
                !co_await tenure::detail::agent_access::wait_durable(agent_))
                co_return convert(internal_error("write-ahead log failed; agent stopping"));
            co_return convert(std::move(*out.res));
        }

        parked p{ex_};
        parked_guard guard{*this, p};
        bool const request_deadline_first = deadline < out.wait->deadline;
        p.timer.expires_at(std::min(out.wait->deadline, deadline));
        {
            // Fired synchronously from inside a state-machine write: flag and
            // cancel the timer only. Dropped before `p`.
            auto reg = tenure::detail::agent_access::state(agent_).watch(std::move(out.wait->targets), [&p] {
                p.woken = true;
                p.timer.cancel();
            });
            auto [ec] = co_await p.timer.async_wait(tuple_awaitable);
            (void)ec;
        }
        auto const cs = co_await asio::this_coro::cancellation_state;
        if (p.aborted || cs.cancelled() != asio::cancellation_type::none) throw_aborted(what);
        if (!p.woken && request_deadline_first && clock::now() >= deadline)
            throw api_error(asio::error::timed_out, 0, what);
        // Woken or the query's deadline: evaluate again (the deadline answers with the current data).
    }
}

}  // namespace

}  // namespace tenure::consul::detail

std::shared_ptr<tenure::consul::detail::transport> tenure::detail::make_inprocess_transport(
    boost::asio::any_io_executor ex, tenure::agent& agent, std::string token) {
    return std::make_shared<consul::detail::inprocess_transport>(std::move(ex), agent, std::move(token));
}
