// A leader-only HTTP service: every instance serves HTTP on one io_context,
// only the leader accepts writes, followers answer with the leader's address.
//
//   leader_http_service --consul URL --listen 127.0.0.1:PORT
//       one instance (run several against one agent; kill the leader and
//       watch another take over)
//   leader_http_service --demo
//       three instances and an embedded agent in this process: writes go to
//       the leader, followers redirect, the leader steps down, a follower
//       takes over live; exits 0 when every step behaved
//
// Endpoints: GET /leader -> the leader's address; PUT /data -> stored with
// the fencing token by the leader, 307 + Location to the leader elsewhere;
// GET /data -> the last value and its token.
#include <tenure/agent.hpp>
#include <tenure/consul/client.hpp>
#include <tenure/election.hpp>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

class service {
public:
    service(asio::any_io_executor ex, tenure::consul::client& consul, tcp::endpoint listen)
        : consul_(consul), acceptor_(ex, listen) {
        address_ = "http://127.0.0.1:" + std::to_string(acceptor_.local_endpoint().port());
    }

    std::string const& address() const { return address_; }
    bool leading() const { return scope_ != nullptr && scope_->held(); }

    // Serve HTTP and campaign, until cancelled.
    void start() {
        asio::co_spawn(acceptor_.get_executor(), accept_loop(), asio::detached);
        tenure::campaign_options options;
        options.session.name = "leader_http_service " + address_;
        options.session.ttl = 2s;
        options.session.lock_delay = 1s;
        options.key = "service/leader-http/leader";
        options.value = address_;  // followers send writers here
        std::function<asio::awaitable<void>(tenure::leadership_scope&)> body =
            [this](tenure::leadership_scope& scope) { return lead(scope); };
        tenure::campaign(consul_, options, body, asio::bind_cancellation_slot(stop_.slot(), [](auto) {}));
        asio::co_spawn(acceptor_.get_executor(), watch_leader(), asio::bind_cancellation_slot(watch_stop_.slot(), asio::detached));
    }

    // Steps down cleanly: release the key, destroy the session.
    void stop() {
        stop_.emit(asio::cancellation_type::terminal);
        watch_stop_.emit(asio::cancellation_type::terminal);
        boost::system::error_code ec;
        acceptor_.close(ec);
    }

private:
    // Leading = holding the scope; writes are accepted only meanwhile.
    asio::awaitable<void> lead(tenure::leadership_scope& scope) {
        scope_ = &scope;
        std::cerr << address_ << ": leading with fencing token " << scope.token() << "\n";
        struct reset {
            service* s;
            ~reset() { s->scope_ = nullptr; }
        } r{this};
        co_await scope.wait_lost(asio::as_tuple(asio::use_awaitable));
        std::cerr << address_ << ": leadership ended: "
                  << (scope.lost() ? scope.loss_reason().message() : std::string("released")) << "\n";
    }

    // Followers learn the leader's address from the key's value.
    asio::awaitable<void> watch_leader() {
        tenure::leader_observer observer(consul_, "service/leader-http/leader");
        for (;;) {
            auto leader = co_await observer.next();
            leader_address_ = leader ? leader->value : std::string{};
        }
    }

    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, socket] = co_await acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;
            asio::co_spawn(acceptor_.get_executor(), serve(std::move(socket)), asio::detached);
        }
    }

    asio::awaitable<void> serve(tcp::socket socket) {
        beast::tcp_stream stream(std::move(socket));
        beast::flat_buffer buffer;
        for (;;) {
            http::request<http::string_body> req;
            auto [ec, n] = co_await http::async_read(stream, buffer, req, asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;
            http::response<http::string_body> res{http::status::ok, req.version()};
            res.keep_alive(req.keep_alive());
            handle(req, res);
            res.prepare_payload();
            auto [wec, wn] = co_await http::async_write(stream, res, asio::as_tuple(asio::use_awaitable));
            if (wec || !res.keep_alive()) co_return;
        }
    }

    void handle(http::request<http::string_body> const& req, http::response<http::string_body>& res) {
        if (req.target() == "/leader") {
            res.body() = leading() ? address_ : leader_address_;
            return;
        }
        if (req.target() != "/data") {
            res.result(http::status::not_found);
            return;
        }
        if (req.method() == http::verb::get) {
            res.body() = data_ + " (token " + std::to_string(data_token_) + ")";
            return;
        }
        if (!leading()) {
            // Not the leader: send the writer to it (or say there is none yet).
            if (leader_address_.empty()) {
                res.result(http::status::service_unavailable);
                res.body() = "no leader";
            } else {
                res.result(http::status::temporary_redirect);
                res.set(http::field::location, leader_address_ + "/data");
                res.body() = "leader is " + leader_address_;
            }
            return;
        }
        data_ = req.body();
        data_token_ = scope_->token();  // a downstream store would fence on it
        res.body() = "stored by " + address_ + " with token " + std::to_string(data_token_);
    }

    tenure::consul::client& consul_;
    tcp::acceptor acceptor_;
    std::string address_;
    std::string leader_address_;
    tenure::leadership_scope* scope_ = nullptr;
    std::string data_;
    std::uint64_t data_token_ = 0;
    asio::cancellation_signal stop_, watch_stop_;
};

// A tiny client for the demo.
asio::awaitable<http::response<http::string_body>> request(std::string const& address, http::verb verb,
                                                           std::string target, std::string body = {}) {
    auto ex = co_await asio::this_coro::executor;
    auto port = static_cast<unsigned short>(std::stoi(address.substr(address.rfind(':') + 1)));
    beast::tcp_stream stream(ex);
    tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), port);
    co_await stream.async_connect(ep, asio::use_awaitable);
    http::request<http::string_body> req{verb, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.body() = std::move(body);
    req.prepare_payload();
    co_await http::async_write(stream, req, asio::use_awaitable);
    beast::flat_buffer buffer;
    http::response<http::string_body> res;
    co_await http::async_read(stream, buffer, res, asio::use_awaitable);
    co_return res;
}

asio::awaitable<void> sleep_for(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(asio::use_awaitable);
}

int run_demo() {
    asio::io_context io;
    tenure::agent_options ao;
    ao.session_ttl_min = 1s;
    ao.log_stream = nullptr;
    tenure::agent agent(io.get_executor(), ao);
    agent.start();
    std::vector<std::unique_ptr<tenure::consul::client>> clients;
    std::vector<std::unique_ptr<service>> nodes;
    for (int i = 0; i < 3; ++i) {
        clients.push_back(std::make_unique<tenure::consul::client>(io.get_executor(), agent.in_process()));
        tcp::endpoint listen(asio::ip::make_address("127.0.0.1"), 0);
        nodes.push_back(std::make_unique<service>(io.get_executor(), *clients.back(), listen));
        nodes.back()->start();
    }
    int failures = 0;
    auto check = [&](bool ok, std::string const& what) {
        std::cout << (ok ? "  ok   " : "  FAIL ") << what << "\n";
        if (!ok) ++failures;
    };
    asio::co_spawn(
        io,
        [&]() -> asio::awaitable<void> {
            auto leader_index = [&]() -> int {
                for (int i = 0; i < 3; ++i)
                    if (nodes[i]->leading()) return i;
                return -1;
            };
            auto wait_for_leader = [&](int not_this) -> asio::awaitable<int> {
                for (int tries = 0; tries < 1000; ++tries) {
                    int l = leader_index();
                    if (l >= 0 && l != not_this) co_return l;
                    co_await sleep_for(10ms);
                }
                co_return -1;
            };
            int first = co_await wait_for_leader(-1);
            check(first >= 0, "one instance leads");
            if (first < 0) co_return;
            int follower = (first + 1) % 3;
            co_await sleep_for(50ms);  // let followers learn the leader's address
            std::cout << "PUT /data on the leader " << nodes[first]->address() << "\n";
            auto r1 = co_await request(nodes[first]->address(), http::verb::put, "/data", "v1");
            std::cout << "  " << r1.result_int() << " " << r1.body() << "\n";
            check(r1.result() == http::status::ok, "the leader accepts the write");
            std::cout << "PUT /data on a follower " << nodes[follower]->address() << "\n";
            auto r2 = co_await request(nodes[follower]->address(), http::verb::put, "/data", "v2");
            std::cout << "  " << r2.result_int() << " " << r2.body() << "\n";
            check(r2.result() == http::status::temporary_redirect &&
                      std::string(r2[http::field::location]) == nodes[first]->address() + "/data",
                  "the follower redirects to the leader");
            std::cout << "the leader steps down (clean release)\n";
            nodes[first]->stop();
            int second = co_await wait_for_leader(first);
            check(second >= 0 && second != first, "another instance took over");
            if (second < 0) co_return;
            co_await sleep_for(50ms);
            auto r3 = co_await request(nodes[second]->address(), http::verb::put, "/data", "v3");
            std::cout << "  " << r3.result_int() << " " << r3.body() << "\n";
            check(r3.result() == http::status::ok, "the new leader accepts writes");
            int other = 3 - first - second;
            auto r4 = co_await request(nodes[other]->address(), http::verb::put, "/data", "v4");
            check(r4.result() == http::status::temporary_redirect &&
                      std::string(r4[http::field::location]) == nodes[second]->address() + "/data",
                  "the remaining follower now redirects to the new leader");
        },
        [&](std::exception_ptr e) {
            if (e) {
                try {
                    std::rethrow_exception(e);
                } catch (std::exception const& x) {
                    std::cout << "demo error: " << x.what() << "\n";
                }
                ++failures;
            }
            for (auto& n : nodes) n->stop();
            asio::co_spawn(io, sleep_for(100ms), [&](std::exception_ptr) {
                agent.stop();
                io.stop();
            });
        });
    io.run_for(60s);
    std::cout << (failures == 0 ? "PASS" : "FAIL") << "\n";
    return failures == 0 ? 0 : 1;
}

int run_instance(std::string consul_url, std::string listen) {
    asio::io_context io;
    tenure::consul::client_config config;
    config.address = consul_url;
    tenure::consul::client consul(io.get_executor(), config);
    auto colon = listen.rfind(':');
    tcp::endpoint ep(asio::ip::make_address(listen.substr(0, colon)),
                     static_cast<unsigned short>(std::stoi(listen.substr(colon + 1))));
    service s(io.get_executor(), consul, ep);
    s.start();
    std::cout << "serving on " << s.address() << std::endl;
    asio::signal_set signals(io, SIGINT, SIGTERM);
    signals.async_wait([&](auto, int) {
        s.stop();  // releases the key: a follower takes over at once
        asio::co_spawn(io, sleep_for(200ms), [&](std::exception_ptr) { io.stop(); });
    });
    io.run();
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() == 1 && args[0] == "--demo") return run_demo();
    std::string consul, listen = "127.0.0.1:0";
    for (std::size_t i = 0; i + 1 < args.size(); i += 2) {
        if (args[i] == "--consul") consul = args[i + 1];
        else if (args[i] == "--listen") listen = args[i + 1];
    }
    if (consul.empty()) {
        std::cerr << "usage: leader_http_service --demo | --consul URL [--listen HOST:PORT]\n";
        return 2;
    }
    return run_instance(consul, listen);
}
