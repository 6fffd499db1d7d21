#include "world.hpp"

#include "agent/agent_access.hpp"
#include "core/event.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <optional>

namespace tenure::sim {

namespace wsim = tenure::detail::sim;

void trace::add(std::string line) {
    if (!enabled) return;
    char at[32];
    std::snprintf(at, sizeof at, "%10.6f ", std::chrono::duration<double>(world::now()).count());
    std::printf("%s%s\n", at, line.c_str());
    std::fflush(stdout);
}

nanoseconds world::now() noexcept { return nanoseconds{wsim::world().now_ns}; }

world::world(std::uint64_t seed, trace& l) : log(l), rng_(seed) {
    auto& w = wsim::world();
    w = wsim::world_state{};
    w.context = &io_;
    w.seed = seed * 0x9e3779b97f4a7c15ull + 1;  // the library's random_seed() sequence
}

world::~world() {
    agent_.reset();
    io_.restart();
    io_.poll();  // let the agent's and clients' last handlers unwind
    crashed_.clear();
    if (!data_dir_.empty()) {
        std::error_code ec;
        std::filesystem::remove_all(data_dir_, ec);
    }
    auto& w = wsim::world();
    w.context = nullptr;
    w.current = nullptr;
}

process& world::add_process(std::string name, double max_drift) {
    auto p = std::make_unique<process>();
    auto const ppm = static_cast<std::int64_t>(max_drift * 1e6);
    p->drift_ppm = ppm ? std::uniform_int_distribution<std::int64_t>(-ppm, ppm)(rng_) : 0;
    // Clocks of different machines do not agree on an origin either.
    p->offset_ns = std::uniform_int_distribution<std::int64_t>(0, 1'000'000'000'000)(rng_);
    processes_.push_back(std::move(p));
    names_.push_back(std::move(name));
    return *processes_.back();
}

asio::any_io_executor world::executor(process& p) { return process_executor(io_.get_executor(), &p); }

std::string const& world::name(process const& p) const {
    for (std::size_t i = 0; i < processes_.size(); ++i)
        if (processes_[i].get() == &p) return names_[i];
    static std::string const none = "?";
    return none;
}

void world::start_agent(agent_options options, bool durable) {
    agent_options_ = std::move(options);
    if (durable) {
        // tmpfs when there is one: a schedule's fdatasyncs cost microseconds.
        std::filesystem::path base = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                                         : std::filesystem::temp_directory_path();
        std::string tmpl = (base / "tenure-sim-XXXXXX").string();
        if (!::mkdtemp(tmpl.data())) throw std::runtime_error("cannot create a data directory in " + base.string());
        data_dir_ = tmpl;
        agent_options_.data_dir = data_dir_;
    }
    launch_agent();
}

void world::launch_agent() {
    agent_process_ = &add_process(incarnation_ ? "agent#" + std::to_string(incarnation_ + 1) : "agent", 0);
    agent_process_->drift_ppm = 0;  // the reference the others drift against
    // Constructed and started as the agent's process, so its timers are its.
    process_executor::run_as(agent_process_, [&] {
        agent_ = std::make_unique<tenure::agent>(executor(*agent_process_), agent_options_);
        // Count (and trace) what the agent does to sessions and acquires.
        auto& sm = detail::agent_access::state(*agent_);
        sm.on_invalidate = [this, next = std::move(sm.on_invalidate)](auto const& session, auto cause) {
            ++invalidations;
            log.add("agent invalidates " + session.name + " (" + session.id.substr(0, 8) + ")");
            if (next) next(session, cause);
        };
        sm.on_lock_delay_reject = [this, next = std::move(sm.on_lock_delay_reject)](std::string_view key) {
            ++lock_delay_refusals;
            log.add("agent refuses " + std::string(key) + ": lock-delay");
            if (next) next(key);
        };
        agent_->start();
    });
}

void world::at(nanoseconds when, std::function<void()> f) {
    auto t = std::make_shared<detail::timer>(io_.get_executor(), detail::clock::time_point{when});
    t->async_wait([t, f = std::move(f)](boost::system::error_code ec) {
        if (!ec) f();
    });
}

void world::pause(process& p, nanoseconds length) {
    if (p.stopped) return;
    p.stopped = true;
    log.add(name(p) + " paused for " + std::to_string(length.count() / 1000) + " us");
    at(now() + length, [this, &p] {
        log.add(name(p) + " resumed");
        process_executor::resume(io_, &p);
    });
}

bool world::run_until(nanoseconds stop_at) {
    bool reached = false;
    at(stop_at, [&] {
        reached = true;
        io_.stop();
    });
    io_.restart();
    io_.run();
    return !reached;
}

// ---- the fault injector ------------------------------------------------------

namespace {

using consul::detail::http_response;
using consul::detail::transport;
namespace http = boost::beast::http;

asio::awaitable<void> sleep_for(nanoseconds d) {
    co_await detail::sleep_until(detail::clock::now() + d);
}

}  // namespace

// Between one client and the agent: delays, drops, duplicates, resets and
// error statuses; a black hole while the client is partitioned. The request
// itself runs on the agent's process (its clock, its pauses).
class faulty_transport final : public transport {
public:
    faulty_transport(world& w, int id, std::string token) : world_(w), id_(id), token_(std::move(token)) {
        world_.transports_.push_back(this);
    }
    ~faulty_transport() override {
        std::erase(world_.transports_, this);
        if (inner_) inner_->close();
    }

    // The agent died: its connections reset. What was in flight fails at
    // once, as a TCP reset tells a client; what was parked on the agent goes
    // with its process (the agent's handlers are dropped).
    void agent_crashed() {
        if (inner_) inner_->close();
        inner_.reset();
        for (auto& w : in_flight_) {
            auto x = w.lock();
            if (!x || x->answered.is_set()) continue;
            x->error = std::make_exception_ptr(consul::api_error(asio::error::connection_reset, 0, x->what));
            x->answered.set();
        }
        in_flight_.clear();
    }

    asio::awaitable<http_response> send(http::verb method, std::string target, std::string body,
                                        detail::clock::time_point deadline) override {
        auto const what = std::string(http::to_string(method)) + " " + target;
        bool timed_out = false;
        try {
            auto op = deliver(method, std::move(target), std::move(body), deadline);
            auto answer = co_await detail::with_deadline(std::move(op), deadline);
            co_return answer;
        } catch (consul::api_error const&) {
            throw;
        } catch (boost::system::system_error const& e) {
            if (e.code() != asio::error::timed_out) throw;
            timed_out = true;
        }
        // As the HTTP transport says it: an api_error without a status.
        if (timed_out) throw consul::api_error(asio::error::timed_out, 0, what);
        throw consul::api_error(asio::error::operation_aborted, 0, what);  // unreachable
    }
    void close() override {
        if (inner_) inner_->close();
    }

private:
    struct exchange {
        exchange(asio::any_io_executor ex, std::string w) : answered(std::move(ex)), what(std::move(w)) {}
        detail::event answered;
        std::string what;
        std::optional<http_response> answer;
        std::exception_ptr error;
    };

    // The connection to the agent that runs now (a new one after a restart).
    std::shared_ptr<transport> inner() {
        if (!world_.agent_up()) return nullptr;
        if (!inner_ || inner_incarnation_ != world_.incarnation_) {
            if (inner_) inner_->close();
            inner_ = detail::make_inprocess_transport(world_.executor(world_.agent_process()), world_.agent(), token_);
            inner_incarnation_ = world_.incarnation_;
        }
        return inner_;
    }

    enum class fate { deliver, drop_request, drop_answer, duplicate, reset, status_429, status_5xx };

    fate draw() {
        auto& w = world_;
        ++w.requests;
        if (!w.faults_on) return fate::deliver;
        if (static_cast<std::size_t>(id_) < w.partitioned.size() && w.partitioned[id_]) return fate::drop_request;
        auto const& r = w.rates;
        double x = w.uniform();
        std::pair<double, fate> const table[] = {{r.drop_request, fate::drop_request}, {r.drop_answer, fate::drop_answer},
                                                 {r.duplicate, fate::duplicate},       {r.reset, fate::reset},
                                                 {r.status_429, fate::status_429},     {r.status_5xx, fate::status_5xx}};
        for (auto [p, f] : table) {
            if (x < p) {
                ++w.faults;
                return f;
            }
            x -= p;
        }
        return fate::deliver;
    }

    nanoseconds delay() {
        if (!world_.faults_on || world_.uniform() >= world_.rates.delay) return nanoseconds::zero();
        return world_.uniform(nanoseconds::zero(), world_.rates.max_delay);
    }

    // The request on the agent's process, with the deadline the client gave
    // it as a time left (the two clocks differ). As over a network, a client
    // that gives up (its deadline, a cancellation) does not stop the server
    // from handling the request: the agent's side runs on, detached, and
    // hands its answer back through an event the client awaits.
    asio::awaitable<http_response> on_agent(http::verb method, std::string target, std::string body,
                                            nanoseconds left) {
        auto const what = std::string(http::to_string(method)) + " " + target;
        auto x = std::make_shared<exchange>(co_await asio::this_coro::executor, what);
        auto inner = this->inner();
        if (!inner) throw consul::api_error(asio::error::connection_refused, 0, what);
        std::erase_if(in_flight_, [](auto const& w) { return w.expired(); });
        in_flight_.push_back(x);
        // (Named, not temporaries of a co_await expression: g++ 12 destroys those twice.)
        auto request = [inner, method, target = std::move(target), body = std::move(body),
                        left]() mutable -> asio::awaitable<http_response> {
            co_return co_await inner->send(method, std::move(target), std::move(body), detail::clock::now() + left);
        };
        asio::co_spawn(world_.executor(world_.agent_process()), std::move(request),
                       [x](std::exception_ptr e, http_response r) {
                           if (e) x->error = e;
                           else x->answer = std::move(r);
                           x->answered.set();
                       });
        co_await x->answered.wait();
        if (x->error) std::rethrow_exception(x->error);
        co_return std::move(*x->answer);
    }

    asio::awaitable<http_response> deliver(http::verb method, std::string target, std::string body,
                                           detail::clock::time_point deadline) {
        auto const f = draw();
        auto const what = std::string(http::to_string(method)) + " " + target;
        switch (f) {
        case fate::drop_request:
            world_.log.add("client " + std::to_string(id_) + ": " + what + " lost on the way");
            co_await detail::sleep_until(detail::clock::time_point::max());  // until the deadline
            break;
        case fate::reset:
            world_.log.add("client " + std::to_string(id_) + ": " + what + " connection reset");
            throw consul::api_error(asio::error::connection_reset, 0, what);
        case fate::status_429: {
            http_response r;
            r.status = 429;
            r.body = "Your IP is issuing too many concurrent connections, please rate limit your calls\n";
            co_return r;
        }
        case fate::status_5xx: {
            http_response r;
            r.status = world_.uniform() < 0.5 ? 500 : 503;
            r.body = "rpc error making call: No cluster leader";
            co_return r;
        }
        default: break;
        }
        if (auto d = delay(); d > nanoseconds::zero()) co_await sleep_for(d);
        auto const left = deadline - detail::clock::now();
        if (!world_.agent_up()) {
            world_.log.add("client " + std::to_string(id_) + ": " + what + " connection refused");
            throw consul::api_error(asio::error::connection_refused, 0, what);
        }
        if (f == fate::duplicate) {
            // The copy is applied too; its answer goes nowhere.
            auto copy = [inner = inner(), method, target, body, left]() -> asio::awaitable<void> {
                try {
                    auto ignored = co_await inner->send(method, target, body, detail::clock::now() + left);
                    (void)ignored;
                } catch (std::exception const&) {
                }
            };
            asio::co_spawn(world_.executor(world_.agent_process()), std::move(copy), asio::detached);
        }
        auto sent = on_agent(method, target, std::move(body), left);
        auto answer = co_await std::move(sent);
        if (f == fate::drop_answer) {
            world_.log.add("client " + std::to_string(id_) + ": " + what + " applied, answer lost");
            co_await detail::sleep_until(detail::clock::time_point::max());
        }
        if (auto d = delay(); d > nanoseconds::zero()) co_await sleep_for(d);
        co_return answer;
    }

    world& world_;
    int id_;
    std::string token_;
    std::shared_ptr<transport> inner_;
    int inner_incarnation_ = 0;
    std::vector<std::weak_ptr<exchange>> in_flight_;
};

std::unique_ptr<consul::client> world::make_client(process& p, int id, consul::client_config config) {
    consul::transport_factory factory = [this, id](asio::any_io_executor, consul::client_config const& c) {
        return std::shared_ptr<transport>(std::make_shared<faulty_transport>(*this, id, c.token));
    };
    std::unique_ptr<consul::client> c;
    process_executor::run_as(&p, [&] { c = std::make_unique<consul::client>(executor(p), factory, config); });
    return c;
}

void world::crash_agent() {
    if (!agent_) return;
    log.add("agent crashes");
    // Not as its process: a paused process is killed too.
    detail::agent_access::crash(*agent_);
    agent_process_->dead = true;
    crashed_.push_back(std::move(agent_));
    for (auto* t : transports_) t->agent_crashed();
}

void world::restart_agent() {
    if (agent_) return;
    ++incarnation_;
    launch_agent();
    auto const& r = agent_options_.data_dir;
    log.add("agent restarts from " + std::string(r.empty() ? "nothing" : "its data directory"));
}

}  // namespace tenure::sim
