// failover's raw-API floor (issue 23): the same handover as a tenure row,
// against the same `tenure agent` child, written with Beast directly
// (raw_http.hpp), one HTTP/1.1 keep-alive connection and one session per raw
// participant, nothing of tenure on the client side.
//
// K raw participants contend for a key of their own. Each one loops: GET the
// key (a blocking GET ?index=N once it has an index); while a session holds
// it, park again on the answer's X-Consul-Index; once it is free, send one
// PUT ?acquire=<its session> (for destroy with LockDelay D: first sleep D from
// the moment the GET returned, the lock-delay it knows); `true` makes it the
// leader, `false` sends it back to its parked GET. Each round the bench lets
// the followers park (the tenure http row's hold: 10 + 0.5 K ms), then sends
// the leader's PUT /v1/kv/<k>?release=<sid> (clean) or PUT
// /v1/session/destroy/<sid> (destroy-0, destroy) on the leader's connection.
// latency: that request sent -> the next leader's acquire answered `true`;
// acquisition: latency - D (the floor's overshoot past the lock-delay; the
// raw floor does not observe the invalidation apart). A destroyed leader
// makes a new session and contends again, as tenure's candidates do.
#include "failover.hpp"
#include "failover_run.hpp"
#include "raw_http.hpp"

#include <cstdio>
#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace failover_bench {

namespace {

using tcp = asio::ip::tcp;
using conn_t = raw::connection<tcp::socket>;

struct participant {
    participant(asio::any_io_executor ex, int i) : id(i), name("raw-" + std::to_string(i)), resume(ex) {}
    int id;
    std::string name;
    std::string sid;
    std::string acquire_req;  // formatted once per session
    std::unique_ptr<conn_t> conn;
    bool new_session = true;
    bool may_campaign = true;
    int early_acquires = 0;  // acquires answered false while the key was free (inside the lock-delay)
    asio::steady_timer resume;
};

class floor_run {
public:
    floor_run(config const& cfg, scenario_def const& sc, std::string const& url, int k)
        : cfg_(cfg), sc_(sc), url_(url), k_(k) {}

    asio::awaitable<result_set> go() {
        auto ex = co_await asio::this_coro::executor;
        wake_.emplace(ex);
        auto const d = sc_.delay ? cfg_.lock_delay : std::chrono::milliseconds(0);
        delay_ = d;
        result_set out = new_result_set("raw", sc_.name, k_, static_cast<double>(d.count()),
                                        static_cast<double>(cfg_.ttl.count()));
        key_ = "bench/failover-raw/" + sc_.name + "/" + std::to_string(k_) + "/" +
               std::to_string(steady::now().time_since_epoch().count());
        for (int i = 0; i < k_; ++i) {
            parts_.push_back(std::make_unique<participant>(ex, i));
            parts_.back()->conn = co_await connect(ex);
        }
        for (auto& p : parts_)
            asio::co_spawn(ex, campaign(*p), [this](std::exception_ptr e) {
                ++finished_;
                if (e && failure_.empty()) failure_ = "raw participant failed: " + message_of(e);
                wake_->cancel();
            });
        int const n = cfg_.handovers;
        try {
            participant* leader = co_await next_winner(steady::now() + 10s + 20ms * k_);
            for (int i = 0; i < n; ++i) {
                print_progress(6, "raw", sc_.name, k_, i, n);
                leader = co_await handover(*leader, out.samples);
            }
            print_progress(6, "raw", sc_.name, k_, n, n);
            std::fprintf(stderr, "\n");
        } catch (std::exception const& e) {
            print_stopped("raw", sc_.name, k_, out.samples.size(), e.what());
        }
        int early = 0;
        for (auto& p : parts_) early += p->early_acquires;
        if (early) std::fprintf(stderr, "  raw %s K=%d: %d acquires refused inside the lock-delay\n", sc_.name.c_str(), k_, early);
        co_await stop(ex);
        out.load = loadavg();
        co_return out;
    }

private:
    asio::awaitable<std::unique_ptr<conn_t>> connect(asio::any_io_executor ex) {
        tcp::socket s(ex);
        tcp::endpoint const at(asio::ip::make_address("127.0.0.1"), raw::port_of(url_));
        co_await s.async_connect(at, asio::use_awaitable);
        s.set_option(tcp::no_delay(true));
        co_return std::make_unique<conn_t>(std::move(s));
    }

    // One request on `c`; throws on a transport error or an answer other than 200.
    static asio::awaitable<raw::response const*> call(conn_t& c, std::string const& req) {
        auto [ec, res] = co_await c.async_round_trip(req);
        if (ec) throw boost::system::system_error(ec);
        if (res->result_int() != 200 && res->result_int() != 404)
            throw std::runtime_error("agent answered " + std::to_string(res->result_int()) + ": " + res->body());
        co_return res;
    }

    asio::awaitable<void> make_session(participant& p) {
        std::string body = "{\"Name\":\"" + p.name + "\",\"LockDelay\":\"" + std::to_string(delay_.count()) +
                           "ms\",\"Behavior\":\"release\"}";
        std::string const req = raw::request("PUT", "/v1/session/create", body);
        auto const* res = co_await call(*p.conn, req);
        p.sid = raw::json_string(res->body(), "ID");
        if (p.sid.empty()) throw std::runtime_error("session create answered " + res->body());
        p.acquire_req = raw::request("PUT", "/v1/kv/" + key_ + "?acquire=" + p.sid, p.name);
    }

    // One participant: a session, then park / acquire until it leads; parked
    // while it leads, until the bench ends its term and resumes it.
    asio::awaitable<void> campaign(participant& p) {
        while (!stopping_) {
            if (p.new_session) {
                p.new_session = false;
                co_await make_session(p);
            }
            std::uint64_t index = 0;
            bool led = false;
            while (!led && !stopping_) {
                std::string target = "/v1/kv/" + key_;
                if (index) target += "?index=" + std::to_string(index) + "&wait=60s";
                std::string const get = raw::request("GET", target);
                auto [ec, res] = co_await p.conn->async_round_trip(get);
                if (stopping_ || ec) co_return;
                auto const got = steady::now();
                index = raw::consul_index(*res);
                if (res->result_int() == 200 && !raw::json_string(res->body(), "Session").empty()) continue;
                // Free: after an invalidation with LockDelay D, the acquire waits D from the moment it was seen.
                if (delay_.count() > 0 && !sc_.releases()) {
                    asio::steady_timer t(p.conn->socket().get_executor(), got + delay_);
                    co_await t.async_wait(tuple_awaitable);
                }
                for (;;) {
                    auto const* a = co_await call(*p.conn, p.acquire_req);
                    if (a->body().starts_with("true")) {
                        led = true;
                        winners_.emplace_back(&p, steady::now());
                        wake_->cancel();
                        break;
                    }
                    if (delay_.count() == 0 || sc_.releases()) break;  // someone else was first
                    // Refused: another's lock, or still inside the lock-delay: look (no index) and retry if free.
                    std::string const look = raw::request("GET", "/v1/kv/" + key_);
                    auto const* l = co_await call(*p.conn, look);
                    index = raw::consul_index(*l);
                    if (l->result_int() == 200 && !raw::json_string(l->body(), "Session").empty()) break;
                    ++p.early_acquires;
                    asio::steady_timer t(p.conn->socket().get_executor(), 100us);
                    co_await t.async_wait(tuple_awaitable);
                }
            }
            p.may_campaign = false;
            while (!p.may_campaign && !stopping_) {
                p.resume.expires_at(steady::time_point::max());
                co_await p.resume.async_wait(tuple_awaitable);
            }
        }
    }

    asio::awaitable<participant*> next_winner(steady::time_point deadline) {
        co_await wait_until(*wake_, [&] { return !winners_.empty() || !failure_.empty(); }, deadline);
        if (!failure_.empty()) throw std::runtime_error(failure_);
        if (winners_.empty()) throw std::runtime_error("no new raw leader within the round timeout");
        auto w = winners_.front();
        winners_.pop_front();
        elected_at_ = w.second;
        co_return w.first;
    }

    asio::awaitable<participant*> handover(participant& leader, std::vector<sample>& samples) {
        // The followers park (the tenure http rows' hold).
        double const hold = cfg_.hold_ms ? *cfg_.hold_ms : 10.0 + 0.5 * k_;
        co_await sleep_for(std::chrono::microseconds(static_cast<long>(hold * 1000)));
        bool const release = sc_.releases();
        std::string const req = release ? raw::request("PUT", "/v1/kv/" + key_ + "?release=" + leader.sid)
                                        : raw::request("PUT", "/v1/session/destroy/" + leader.sid);
        auto const t0 = steady::now();
        co_await call(*leader.conn, req);
        participant* next = co_await next_winner(steady::now() + 2 * cfg_.ttl + cfg_.lock_delay + 10s);
        sample s;
        s.lock_delay = static_cast<double>(delay_.count());
        s.latency = ms(elected_at_ - t0);
        s.acquisition = s.latency - s.lock_delay;
        samples.push_back(s);
        if (!release) leader.new_session = true;
        leader.may_campaign = true;
        leader.resume.cancel();
        co_return next;
    }

    asio::awaitable<void> stop(asio::any_io_executor ex) {
        stopping_ = true;
        for (auto& p : parts_) {
            boost::system::error_code ec;
            p->conn->socket().cancel(ec);
            p->resume.cancel();
        }
        int const n = k_;
        co_await wait_until(*wake_, [&] { return finished_ == n; }, steady::now() + 5s);
        if (finished_ != n) std::fprintf(stderr, "  warning: %d raw participants did not stop\n", n - finished_);
        // The sessions go with a connection of its own (the cancelled ones may be mid-answer).
        try {
            auto admin = co_await connect(ex);
            for (auto& p : parts_) {
                if (p->sid.empty()) continue;
                std::string const destroy = raw::request("PUT", "/v1/session/destroy/" + p->sid);
                co_await call(*admin, destroy);
            }
        } catch (std::exception const& e) {
            std::fprintf(stderr, "  warning: raw sessions not destroyed: %s\n", e.what());
        }
    }

    config const& cfg_;
    scenario_def const& sc_;
    std::string url_;
    int k_;
    std::chrono::milliseconds delay_{0};
    std::string key_;
    std::optional<asio::steady_timer> wake_;
    std::vector<std::unique_ptr<participant>> parts_;
    std::deque<std::pair<participant*, steady::time_point>> winners_;
    steady::time_point elected_at_{};
    bool stopping_ = false;
    int finished_ = 0;
    std::string failure_;
};

}  // namespace

bool has_raw_floor(scenario_def const& sc) {
    // handoff's floor is clean's: the raw release and one acquire by a parked
    // follower is the least a handover can be with Consul's lock API.
    return sc.name == "clean" || sc.name == "handoff" || sc.name == "destroy-0" || sc.name == "destroy";
}

asio::awaitable<result_set> run_raw_floor(config const& cfg, scenario_def const& sc, std::string const& url, int k) {
    floor_run r(cfg, sc, url, k);
    co_return co_await r.go();
}

// tenure (the http row) against its raw floor (the raw row after it), per
// scenario and K: p50 and p99 of the latency and their ratios; with a
// lock-delay, also of the overshoot (latency - D).
void print_floor_ratios(std::vector<result_set> const& rows) {
    bool header = false;
    for (std::size_t i = 0; i < rows.size(); ++i) {
        auto const& f = rows[i];
        if (f.backend != "raw") continue;
        result_set const* t = nullptr;
        for (std::size_t j = i; j-- > 0;)
            if (rows[j].backend == "http" && rows[j].scenario == f.scenario && rows[j].candidates == f.candidates) {
                t = &rows[j];
                break;
            }
        if (!t) continue;
        if (!header) {
            std::printf("\ntenure (http) against the raw-API floor of the same run and agent (raw: Beast, one "
                        "keep-alive connection per participant):\n");
            std::printf("%-10s %4s %5s | %9s %9s | %9s %9s | %7s %7s | %6s | %10s %10s %10s %10s | %7s %7s\n",
                        "scenario", "K", "n", "raw p50", "raw p99", "ten p50", "ten p99", "x p50", "x p99", "D ms",
                        "raw ov50", "raw ov99", "ten ov50", "ten ov99", "ov x50", "ov x99");
            header = true;
        }
        auto lat = [](result_set const& r) { return column(r.samples, [](sample const& s) { return s.latency; }); };
        auto ov = [](result_set const& r) {
            return column(r.samples, [](sample const& s) { return s.latency - s.lock_delay; });
        };
        auto const fl = lat(f), tl = lat(*t);
        std::printf("%-10s %4d %5zu | %9.3f %9.3f | %9.3f %9.3f | %7.2f %7.2f | %6.0f", f.scenario.c_str(),
                    f.candidates, f.samples.size(), pct(fl, 50), pct(fl, 99), pct(tl, 50), pct(tl, 99),
                    pct(tl, 50) / pct(fl, 50), pct(tl, 99) / pct(fl, 99), f.lock_delay_ms);
        if (f.lock_delay_ms > 0) {
            auto const fo = ov(f), to = ov(*t);
            std::printf(" | %10.3f %10.3f %10.3f %10.3f | %7.2f %7.2f\n", pct(fo, 50), pct(fo, 99), pct(to, 50),
                        pct(to, 99), pct(to, 50) / pct(fo, 50), pct(to, 99) / pct(fo, 99));
        } else {
            std::printf(" | %10s %10s %10s %10s | %7s %7s\n", "-", "-", "-", "-", "-", "-");
        }
    }
    if (header)
        std::printf("x: tenure / raw; ov: the overshoot past the lock-delay D (latency - D), for the rows with D > 0.\n");
    std::fflush(stdout);
}

}  // namespace failover_bench
