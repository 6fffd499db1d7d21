// What a run of the failover bench does the same way on every backend
// (failover.cpp: Consul; failover_etcd.cpp: etcd and `etcdctl elect`): the
// slot each new leader lands in, the tenure candidates that live in the bench
// process, the kill scenario's child process, turning one handover's moments
// into a sample, and the progress lines on stderr.
#pragma once

#include "failover.hpp"

#include <tenure/election.hpp>
#include <tenure/semaphore.hpp>

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace failover_bench {

// Where the elections land for the controller to take: the leaders elected
// since the last take and when each acquire() resolved (or etcdctl printed
// its key). Each handover should elect exactly one leader: an election that
// arrives while one is pending is only counted, except that the first
// `burst` may arrive together (a semaphore admits its `limit` holders at once).
template <class Leader>
class winner_slot {
public:
    void set_burst(std::size_t burst) { burst_ = burst; }

    // Called the moment `w` leads; wakes the controller.
    void elected(Leader w, steady::time_point t, asio::steady_timer& wake) {
        std::size_t const room = taken_ < burst_ ? burst_ - taken_ : 1;
        if (pending_.size() < room) pending_.emplace_back(std::move(w), t);
        else ++double_wins_;
        wake.cancel();
    }

    // Waits (on `wake`) for a leader until the deadline or until failure()
    // names a failure, then takes the leader; throws if there is none.
    template <class Failure>
    asio::awaitable<Leader> take(asio::steady_timer& wake, Failure failure, steady::time_point deadline) {
        co_await wait_until(wake, [&] { return !pending_.empty() || !failure().empty(); }, deadline);
        if (auto f = failure(); !f.empty()) throw std::runtime_error(f);
        if (pending_.empty()) throw std::runtime_error("no new leader within the round timeout");
        Leader w = std::move(pending_.front().first);
        at_ = pending_.front().second;
        pending_.pop_front();
        ++taken_;
        co_return w;
    }

    // When the leader taken last was elected (read it right after take()).
    steady::time_point elected_at() const { return at_; }

    void warn_double_wins() const {
        if (double_wins_) std::fprintf(stderr, "  warning: %d elections arrived while one was pending\n", double_wins_);
    }

private:
    std::deque<std::pair<Leader, steady::time_point>> pending_;
    std::size_t burst_ = 1;
    std::size_t taken_ = 0;
    steady::time_point at_{};
    int double_wins_ = 0;
};

// One tenure candidate in the bench process: its own client and session.
template <class Client>
struct tenure_candidate {
    tenure_candidate(asio::any_io_executor ex, int i) : id(i), name("bench-" + std::to_string(i)), resume(ex) {}
    int id;
    std::string name;
    std::unique_ptr<Client> cl;
    tenure::session s;
    std::optional<tenure::election> e;
    std::optional<tenure::semaphore> sem;  // semaphore scenarios: instead of e
    tenure::leadership_scope scope;
    bool new_session = false;  // set by the controller when the session (lease) is gone or the key was taken
    bool may_campaign = true;
    asio::steady_timer resume;
    asio::cancellation_signal stop;
};

// The tenure candidates of one run that live in the bench process. Each
// campaigns in its own coroutine (election.acquire(), or semaphore.acquire()
// when the run has permits) and, once elected, waits until the controller
// resumes it: a term (a permit) ends only when the bench ends it.
template <class Candidate>
class candidate_set {
public:
    // Last touches to the options of a candidate's new session (the probe
    // scenario's health_probe).
    using prepare_fn = std::function<void(Candidate&, tenure::session_options&)>;

    // `wake` is the controller's timer: cancelled whenever something changes.
    explicit candidate_set(asio::steady_timer& wake) : wake_(wake) {}

    // Starts n candidates, each with a client from make_client() and sessions
    // made from `so`, campaigning for `key` (permits > 0: for one of the
    // permits of the semaphore on the prefix `key`).
    template <class MakeClient>
    void start(asio::any_io_executor ex, int n, MakeClient make_client, std::string key, tenure::session_options so,
               int permits, prepare_fn prepare = {}) {
        key_ = std::move(key);
        so_ = std::move(so);
        permits_ = permits;
        winners_.set_burst(static_cast<std::size_t>(std::max(1, permits)));
        prepare_ = std::move(prepare);
        for (int i = 0; i < n; ++i) {
            all_.push_back(std::make_unique<Candidate>(ex, i));
            all_.back()->cl = make_client();
        }
        for (auto& c : all_) {
            asio::co_spawn(ex, campaign(*c), asio::bind_cancellation_slot(c->stop.slot(), [this](std::exception_ptr e) {
                               ++finished_;
                               if (e) failure_ = "candidate failed: " + message_of(e);
                               wake_.cancel();
                           }));
        }
    }

    int size() const { return static_cast<int>(all_.size()); }
    Candidate& at(int i) { return *all_.at(static_cast<std::size_t>(i)); }
    // The election options of candidate `id` (prio-clean: its priority); unset: the defaults.
    std::function<tenure::election_options(int id)> options_of;
    // Why a candidate stopped on its own; empty while they all run.
    std::string const& failure() const { return failure_; }

    // The next leader among them (see winner_slot::take).
    template <class Failure>
    asio::awaitable<Candidate*> next_winner(steady::time_point deadline, Failure failure) {
        return winners_.take(wake_, std::move(failure), deadline);
    }
    steady::time_point elected_at() const { return winners_.elected_at(); }
    void warn_double_wins() const { winners_.warn_double_wins(); }

    // Lets a leader (whose term the bench ended) campaign again.
    void resume(Candidate& c) {
        c.may_campaign = true;
        c.resume.cancel();
    }

    // Every candidate releases and closes its session; waits up to 15 s for them.
    asio::awaitable<void> stop() {
        stopping_ = true;
        for (auto& c : all_) {
            c->stop.emit(asio::cancellation_type::terminal);
            c->resume.cancel();
        }
        int const n = size();
        co_await wait_until(wake_, [&] { return finished_ == n; }, steady::now() + 15s);
        if (finished_ != n) std::fprintf(stderr, "  warning: %d candidates did not stop\n", n - finished_);
        co_await sleep_for(20ms);  // background closes of replaced sessions
    }

    void close_clients() {
        for (auto& c : all_) c->cl->close();
    }

private:
    // One candidate: a session (a new one when the controller says so or the
    // old one is lost), acquire(), then parked until resumed.
    asio::awaitable<void> campaign(Candidate& c) {
        try {
            while (!stopping_) {
                if (c.new_session || !c.s.valid() || c.s.state() == tenure::session_state::lost) {
                    c.new_session = false;
                    tenure::session_options so = so_;
                    so.name = c.name;
                    if (prepare_) prepare_(c, so);
                    c.e.reset();
                    c.sem.reset();
                    c.s = tenure::session{};  // the old one closes (etcd: revokes its lease) in the background
                    c.s = co_await tenure::session::create(*c.cl, so);
                    if (permits_) c.sem.emplace(c.s, key_, permits_, c.name);
                    else if (options_of) c.e.emplace(c.s, key_, c.name, options_of(c.id));
                    else c.e.emplace(c.s, key_, c.name);
                }
                // (Not one co_await of a conditional expression: g++ 12 evaluates the wrong arm.)
                std::tuple<boost::system::error_code, tenure::leadership_scope> got;
                if (c.sem) got = co_await c.sem->acquire(tuple_awaitable);
                else got = co_await c.e->acquire(tuple_awaitable);
                auto& [ec, scope] = got;
                auto const t = steady::now();
                if (stopping_ || ec == asio::error::operation_aborted) break;
                if (ec) {
                    c.new_session = true;  // our session (lease, key) was lost while waiting
                    continue;
                }
                c.scope = std::move(scope);
                c.may_campaign = false;
                winners_.elected(&c, t, wake_);
                while (!c.may_campaign && !stopping_) {
                    c.resume.expires_at(steady::time_point::max());
                    co_await c.resume.async_wait(tuple_awaitable);
                }
            }
        } catch (boost::system::system_error const& e) {
            if (e.code() != asio::error::operation_aborted) throw;
        }
        // Stopped: release and close before the client goes away.
        co_await asio::this_coro::reset_cancellation_state();
        if (c.scope.held()) co_await c.scope.release(tuple_awaitable);
        if (c.s.valid() && c.s.state() != tenure::session_state::lost) co_await c.s.close(tuple_awaitable);
    }

    asio::steady_timer& wake_;
    std::string key_;
    tenure::session_options so_;
    int permits_ = 0;
    prepare_fn prepare_;
    std::vector<std::unique_ptr<Candidate>> all_;
    winner_slot<Candidate*> winners_;
    bool stopping_ = false;
    int finished_ = 0;
    std::string failure_;
};

// The kill scenario's leader: this binary in --candidate mode (run_candidate),
// its stdout read line by line.
struct child_proc {
    std::unique_ptr<asio::readable_pipe> out;
    std::unique_ptr<bp::process> proc;
    std::string buf;
};

inline asio::awaitable<std::string> read_child_line(child_proc& ch) {
    auto [ec, n] = co_await asio::async_read_until(*ch.out, asio::dynamic_buffer(ch.buf), '\n', tuple_awaitable);
    if (ec) throw std::runtime_error("the --candidate child exited: " + ec.message());
    std::string line = ch.buf.substr(0, n - 1);
    ch.buf.erase(0, n);
    co_return line;
}

// The child's next line, which must start with `prefix`: the rest of it.
inline asio::awaitable<std::string> expect_child_line(child_proc& ch, std::string_view prefix) {
    std::string line = co_await read_child_line(ch);
    if (!line.starts_with(prefix)) throw std::runtime_error("child said: " + line);
    co_return line.substr(prefix.size());
}

// Starts `self_exe args` as the child and returns its session (lease) once it
// has one: what its "READY <session>" line names.
inline asio::awaitable<std::string> start_child(std::optional<child_proc>& child, std::string const& self_exe,
                                                std::vector<std::string> const& args) {
    auto ex = co_await asio::this_coro::executor;
    child.emplace();
    child->out = std::make_unique<asio::readable_pipe>(ex);
    child->proc = std::make_unique<bp::process>(ex, self_exe, args, bp::process_stdio{{}, *child->out, {}},
                                                die_with_parent{});
    co_return co_await expect_child_line(*child, "READY ");
}

// At the end of a run: a child still running is SIGKILLed and reaped.
inline asio::awaitable<void> kill_child(std::optional<child_proc>& child) {
    if (child && child->proc->running()) {
        ::kill(child->proc->id(), SIGKILL);
        co_await child->proc->async_wait(tuple_awaitable);
    }
}

// The last step of a handover: a candidate leader (or permit holder)
// campaigns again (with a new session unless it released cleanly: its
// session or lease is gone); the killed child is reaped.
template <class Candidate>
asio::awaitable<void> retire_leader(candidate_set<Candidate>& cands, Candidate& leader, scenario_def const& sc,
                                    std::optional<child_proc>& child) {
    if (sc.leader == leader_kind::candidate) {
        leader.scope = tenure::leadership_scope{};
        if (!sc.releases()) leader.new_session = true;
        cands.resume(leader);
    } else if (child) {
        co_await child->proc->async_wait(tuple_awaitable);
        child.reset();
    }
}

// The run's progress line on stderr ("\r": each update rewrites it).
// `name_width`: the backend column's width (6 for http/inproc, 7 for etcd/etcdctl).
inline void print_progress(int name_width, std::string const& backend, std::string const& scenario, int k, int done,
                           int n) {
    std::fprintf(stderr, "\r  %-*s %-10s K=%-3d %4d/%d handovers", name_width, backend.c_str(), scenario.c_str(), k,
                 done, n);
}

inline void print_stopped(std::string const& backend, std::string const& scenario, int k, std::size_t done,
                          char const* why) {
    std::fprintf(stderr, "\n  %s %s K=%d stopped after %zu handovers: %s\n", backend.c_str(), scenario.c_str(), k,
                 done, why);
}

// A run's handovers: its first leaders (an election's leader; a semaphore's
// `permits` holders), then `n` rounds, each ending the term of the oldest
// one (the holder admitted first is released first): handover(leader, i,
// samples) appends the round's sample and returns the next leader. Progress
// on stderr; a failure ends the run early with a message.
template <class Candidate, class NextWinner, class Handover>
asio::awaitable<void> run_handovers(scenario_def const& sc, std::string const& backend, int name_width, int k, int n,
                                    steady::duration first_timeout, NextWinner next_winner, Handover handover,
                                    std::vector<sample>& samples) {
    try {
        std::deque<Candidate*> leaders;
        for (int j = 0; j < std::max(1, sc.permits); ++j)
            leaders.push_back(co_await next_winner(steady::now() + first_timeout));
        for (int i = 0; i < n; ++i) {
            print_progress(name_width, backend, sc.name, k, i, n);
            Candidate* oldest = leaders.front();
            leaders.pop_front();
            leaders.push_back(co_await handover(oldest, i, samples));
        }
        print_progress(name_width, backend, sc.name, k, n, n);
        std::fprintf(stderr, "\n");
    } catch (std::exception const& e) {
        print_stopped(backend, sc.name, k, samples.size(), e.what());
    }
}

// A handover's latency and its parts from its moments: t0 the end of the term,
// t1 the invalidation (or the key freed or deleted) if it was seen, t3 the next
// acquire() resolved, t_renew the ttl scenario's last renewal. In ttl the term
// counts as ended at the invalidation (t1); returns when it counts as ended.
// s.lock_delay must be set.
inline steady::time_point set_timings(sample& s, bool ttl, steady::time_point t0,
                                      std::optional<steady::time_point> const& t1, steady::time_point t3,
                                      steady::time_point t_renew) {
    if (ttl && t1) t0 = *t1;
    s.latency = ms(t3 - t0);
    if (t1) {
        s.detection = ms(*t1 - t0);
        s.acquisition = ms(t3 - *t1) - s.lock_delay;
    }
    if (ttl) {
        if (t1) s.renew_to_inval = ms(*t1 - t_renew);
        s.from_renewal = ms(t3 - t_renew);
    }
    return t0;
}

}  // namespace failover_bench
