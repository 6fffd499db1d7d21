// One schedule of the simulation: the shipped library's coroutines - session,
// election, leadership_scope::run, campaign, semaphore, leader_observer -
// for N clients on K keys against the real agent (in-process connection),
// in virtual time, with the faults world.hpp injects. See simulation.hpp.
#include "simulation.hpp"
#include "world.hpp"

#include <tenure/election.hpp>
#include <tenure/fence.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#include "agent/agent_access.hpp"
#include "core/backend.hpp"
#include "core/event.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <map>
#include <set>
#include <sstream>

namespace tenure::sim {

namespace {

using boost::system::system_error;

double secs(nanoseconds d) { return std::chrono::duration<double>(d).count(); }

std::string fmt(char const* f, auto... args) {
    char buf[512];
    std::snprintf(buf, sizeof buf, f, args...);
    return buf;
}

// What the clients do on the keys, checked as it happens.
class checker {
public:
    checker(world& w, sim_stats& stats, bool long_pauses) : w_(w), stats_(stats), long_pauses_(long_pauses) {}

    std::string violation;
    nanoseconds healed_at = nanoseconds::max();
    std::set<std::string> led_since_heal;

    void fail(std::string what) {
        if (violation.empty()) violation = fmt("t=%.6f s: ", secs(world::now())) + what;
        w_.log.add("VIOLATION " + what);
    }

    // Work under run() begins on `key` (an election, or a permit of a
    // semaphore of `limit`).
    void begin(int client, std::string const& key, std::uint64_t token, std::size_t limit) {
        auto& holders = active_[key];
        std::string holder;  // as the agent shows it, for the trace
        if (w_.agent_up() && w_.log.enabled)
            if (auto const* e = detail::agent_access::state(w_.agent()).kv_get(key); e && !e->session.empty())
                holder = " (agent: " + e->session.substr(0, 8) + ")";
        w_.log.add(fmt("client %d: work begins on %s, token %llu%s", client, key.c_str(),
                       static_cast<unsigned long long>(token), holder.c_str()));
        ++stats_.terms;
        if (holders.size() >= limit) {
            std::string others;
            for (auto const& [c, since] : holders) others += fmt(" client %d (since %.6f s)", c, secs(since));
            if (long_pauses_) ++stats_.overlapping_work;
            else fail(fmt("client %d began work on %s while %zu already worked:%s", client, key.c_str(),
                          holders.size(), others.c_str()));
        }
        holders[client] = world::now();
        if (limit == 1) {
            // Fencing tokens of successive terms strictly increase.
            if (token <= gate_.highest(key) && gate_.highest(key) != 0)
                fail(fmt("client %d's token %llu on %s is not above the last term's %llu", client,
                         static_cast<unsigned long long>(token), key.c_str(),
                         static_cast<unsigned long long>(gate_.highest(key))));
            check_agent_holder(key);
        }
        if (world::now() >= healed_at) led_since_heal.insert(key);
    }

    void end(int client, std::string const& key) {
        active_[key].erase(client);
        w_.log.add(fmt("client %d: work ends on %s", client, key.c_str()));
    }

    // One unit of work, stamped with the term's token, to the fenced resource.
    void work(int client, std::string const& key, std::uint64_t token, bool past_deadline) {
        ++stats_.work;
        if (past_deadline) ++stats_.late_work;
        if (gate_.admit(key, token)) ++stats_.fence_admitted;
        else {
            ++stats_.fence_refused;
            w_.log.add(fmt("client %d: fence refused token %llu on %s", client, static_cast<unsigned long long>(token),
                           key.c_str()));
        }
    }

    // The agent holds `key` for exactly one live session.
    void check_agent_holder(std::string const& key) {
        if (!w_.agent_up()) return;  // crashed: it shows nothing
        auto& sm = detail::agent_access::state(w_.agent());
        auto const* e = sm.kv_get(key);
        if (!e || e->session.empty()) return;  // already released again (a clean, fast handover)
        if (!sm.session_get(e->session)) fail("the agent shows " + key + " held by a session it does not know");
    }

    std::size_t working(std::string const& key) const {
        auto it = active_.find(key);
        return it == active_.end() ? 0 : it->second.size();
    }
    bool anyone_working() const {
        for (auto const& [k, h] : active_)
            if (!h.empty()) return true;
        return false;
    }

private:
    world& w_;
    sim_stats& stats_;
    bool long_pauses_;
    std::map<std::string, std::map<int, nanoseconds>> active_;
    tenure::fence gate_;
};

struct setup {
    nanoseconds ttl;
    nanoseconds lock_delay;
    nanoseconds heal;     // faults stop
    nanoseconds settle;   // liveness bound after the heal
    int clients = 3;
    int keys = 1;
    bool semaphore = false;
    bool planted_bug = false;
};

// The body every leader runs under its scope: a unit of work every TTL/4 of
// its own clock, until cancelled.
asio::awaitable<void> work(checker& ck, session const* s, int client, std::string key, std::uint64_t token,
                           std::size_t limit, nanoseconds every) {
    ck.begin(client, key, token, limit);
    struct ended {
        checker& ck;
        int client;
        std::string const& key;
        ~ended() { ck.end(client, key); }
    } guard{ck, client, key};
    for (;;) {
        ck.work(client, key, token, s && detail::clock::now() > s->local_deadline());
        co_await detail::sleep_until(detail::clock::now() + every);
    }
}

session_options session_opts(setup const& st, int client) {
    session_options o;
    o.name = "client-" + std::to_string(client);
    o.ttl = st.ttl;
    o.lock_delay = st.lock_delay;
    return o;
}

void plant(setup const& st, session& s) {
    if (st.planted_bug && s.valid()) detail::session_access::impl(s)->fsm.ignore_local_deadline_for_testing();
}

// A session for a loop's next round: created again 100 ms after a failure.
asio::awaitable<session> open_session(consul::client& c, setup const& st, int client) {
    for (;;) {
        session s;
        try {
            auto const so = session_opts(st, client);  // named: g++ 12 destroys co_await temporaries twice
            s = co_await session::create(c, so);
        } catch (system_error const& e) {
            if (detail::is_abort(e)) throw;
        }
        if (s.valid()) {
            plant(st, s);
            co_return s;
        }
        co_await detail::sleep_until(detail::clock::now() + 100ms);
    }
}

// An election used directly: session, acquire, run, release, again.
asio::awaitable<void> elect_loop(checker& ck, consul::client& c, setup st, int client, std::string key) {
    for (;;) {
        session s = co_await open_session(c, st, client);
        election e(s, key, "client-" + std::to_string(client));
        bool stop = false;
        while (!stop && s.state() != session_state::lost) {
            leadership_scope scope;
            try {
                scope = co_await e.acquire();
            } catch (system_error const& ex) {
                if (detail::is_abort(ex)) stop = true;
            }
            if (stop) break;
            if (!scope.held()) {
                co_await detail::sleep_until(detail::clock::now() + 100ms);
                continue;
            }
            bool finished = false;
            try {
                auto job = work(ck, &s, client, key, scope.token(), 1, st.ttl / 4);
                finished = co_await scope.run(std::move(job));
            } catch (system_error const& ex) {
                if (detail::is_abort(ex)) stop = true;
            }
            (void)finished;
            co_await scope.release(asio::as_tuple(asio::use_awaitable));
        }
        co_await asio::this_coro::reset_cancellation_state();
        co_await s.close(asio::as_tuple(asio::use_awaitable));
        if (stop) throw system_error(asio::error::operation_aborted);
    }
}

// The campaign loop, as shipped.
asio::awaitable<void> campaign_loop(checker& ck, consul::client& c, setup st, int client, std::string key) {
    campaign_options o;
    o.session = session_opts(st, client);
    o.key = key;
    o.value = "client-" + std::to_string(client);
    o.retry_backoff = 100ms;
    std::function<asio::awaitable<void>(leadership_scope&)> body = [&ck, st, client](leadership_scope& scope) {
        return work(ck, nullptr, client, scope.key(), scope.token(), 1, st.ttl / 4);
    };
    co_await campaign(c, o, body);
}

// A semaphore of two permits on "sem".
asio::awaitable<void> semaphore_loop(checker& ck, consul::client& c, setup st, int client) {
    for (;;) {
        session s = co_await open_session(c, st, client);
        semaphore sem(s, "sem", 2, "client-" + std::to_string(client));
        bool stop = false;
        while (!stop && s.state() != session_state::lost) {
            leadership_scope permit;
            try {
                permit = co_await sem.acquire();
            } catch (system_error const& ex) {
                if (detail::is_abort(ex)) stop = true;
            }
            if (stop) break;
            if (!permit.held()) {
                co_await detail::sleep_until(detail::clock::now() + 100ms);
                continue;
            }
            try {
                // Hold the permit for a while, then give it back.
                auto held_for = st.ttl * 2;
                auto body = [&]() -> asio::awaitable<void> {
                    auto job = work(ck, &s, client, "sem", permit.token(), 2, st.ttl / 4);
                    auto give_back = detail::sleep_until(detail::clock::now() + held_for);
                    co_await detail::race(std::move(job), std::move(give_back));
                };
                auto held = body();
                co_await permit.run(std::move(held));
            } catch (system_error const& ex) {
                if (detail::is_abort(ex)) stop = true;
            }
            co_await permit.release(asio::as_tuple(asio::use_awaitable));
        }
        co_await asio::this_coro::reset_cancellation_state();
        co_await s.close(asio::as_tuple(asio::use_awaitable));
        if (stop) throw system_error(asio::error::operation_aborted);
    }
}

// A follower's view: holders' tokens never go back.
asio::awaitable<void> observe(checker& ck, consul::client& c, std::string key) {
    leader_observer observer(c, key);
    std::uint64_t last = 0;
    for (;;) {
        auto [ec, who] = co_await observer.next(asio::as_tuple(asio::use_awaitable));
        if (ec == asio::error::operation_aborted) co_return;
        if (ec) {
            co_await detail::sleep_until(detail::clock::now() + 100ms);
            continue;
        }
        if (who && who->lock_index < last)
            ck.fail(fmt("the observer of %s saw token %llu after %llu", key.c_str(),
                        static_cast<unsigned long long>(who->lock_index), static_cast<unsigned long long>(last)));
        if (who) last = who->lock_index;
    }
}

}  // namespace

sim_result run_schedule(std::uint64_t seed, sim_options const& options) {
    sim_result result;
    trace log;
    log.enabled = options.verbose;
    {
        world w(seed, log);
        setup st;
        st.ttl = w.uniform() < 0.5 ? nanoseconds{1s} : nanoseconds{2s};
        st.lock_delay = st.ttl;
        st.clients = 2 + static_cast<int>(w.rng()() % 3);
        st.keys = 1 + static_cast<int>(w.rng()() % 2);
        st.semaphore = !options.planted_bug && w.uniform() < 0.3;
        st.planted_bug = options.planted_bug;
        st.heal = 6 * st.ttl + w.uniform(0s, 4 * st.ttl);
        // Liveness bound after the heal: the old holder's session lapses (2 x
        // TTL), lock-delay, and a follower whose blocking query's answer was
        // lost just before the heal waits out that query's deadline (a 30 s
        // wait + wait/16 + the 1 s margin set below), plus a few backoffs.
        st.settle = 2 * st.ttl + st.lock_delay + 33s + 3s;

        // An agent crash and restart from its data directory, in 15 % of
        // schedules. Drawn from a stream of its own, so that the other
        // schedules' parameters do not depend on it.
        std::mt19937_64 crash_rng(seed ^ 0xa5a5'5a5a'c3c3'3c3cull);
        bool const agent_crash = std::uniform_real_distribution<double>(0, 1)(crash_rng) < 0.15;

        agent_options ao;
        ao.session_ttl_min = 100ms;
        ao.level = log_level::off;
        ao.log_stream = nullptr;
        w.start_agent(ao, agent_crash);
        checker ck(w, result.stats, options.long_pauses);
        ck.healed_at = st.heal;
        w.partitioned.assign(static_cast<std::size_t>(st.clients), false);

        consul::client_config cc;
        cc.request_timeout = 1s;
        cc.blocking_margin = 1s;
        std::vector<process*> procs;
        std::vector<std::unique_ptr<consul::client>> clients;
        for (int i = 0; i < st.clients; ++i) {
            procs.push_back(&w.add_process("client-" + std::to_string(i), options.max_drift));
            clients.push_back(w.make_client(*procs.back(), i, cc));
        }

        // Roles: elections (used directly, or through campaign) on job/0..K-1,
        // perhaps a semaphore of two on "sem", and an observer of job/0.
        std::vector<std::unique_ptr<asio::cancellation_signal>> stops;
        std::vector<int> done(static_cast<std::size_t>(st.clients) + 1, 0);
        std::ostringstream roles;
        auto spawn = [&](int i, process& p, asio::awaitable<void> loop, std::string role) {
            roles << " " << i << ":" << role;
            stops.push_back(std::make_unique<asio::cancellation_signal>());
            asio::co_spawn(w.executor(p), std::move(loop),
                           asio::bind_cancellation_slot(stops.back()->slot(), [&, i, role](std::exception_ptr e) {
                               done[static_cast<std::size_t>(i)] = 1;
                               if (!e) return;
                               try {
                                   std::rethrow_exception(e);
                               } catch (system_error const& ex) {
                                   if (!detail::is_abort(ex)) ck.fail("client " + std::to_string(i) + "'s " + role +
                                                                     " loop failed: " + ex.what());
                               } catch (std::exception const& ex) {
                                   ck.fail("client " + std::to_string(i) + "'s " + role + " loop failed: " + ex.what());
                               }
                           }));
        };
        std::set<std::string> contested;  // keys with at least one candidate
        for (int i = 0; i < st.clients; ++i) {
            std::string key = "job/" + std::to_string(i % st.keys);
            if (!(st.semaphore && i == st.clients - 1)) contested.insert(key);
            auto& c = *clients[static_cast<std::size_t>(i)];
            if (st.semaphore && i == st.clients - 1) spawn(i, *procs[i], semaphore_loop(ck, c, st, i), "semaphore");
            else if (st.planted_bug || w.uniform() < 0.5) spawn(i, *procs[i], elect_loop(ck, c, st, i, key), "election " + key);
            else spawn(i, *procs[i], campaign_loop(ck, c, st, i, key), "campaign " + key);
        }
        spawn(st.clients, *procs[0], observe(ck, *clients[0], "job/0"), "observer");

        // Faults until the heal: partitions, stop-the-world pauses (within the
        // safety margin TTL + lock-delay, unless long_pauses), an agent pause.
        std::ostringstream faults;
        auto const margin = st.ttl + st.lock_delay;
        for (int i = 0; i < st.clients; ++i) {
            if (w.uniform() < 0.5) {
                auto start = w.uniform(500ms, st.heal - 500ms);
                auto len = w.uniform(st.ttl / 5, 3 * st.ttl);
                auto end = std::min(start + len, st.heal);
                faults << fmt(" partition(%d %.3f-%.3f)", i, secs(start), secs(end));
                w.at(start, [&w, i] { w.partitioned[static_cast<std::size_t>(i)] = true; w.log.add("client " + std::to_string(i) + " partitioned"); });
                w.at(end, [&w, i] { w.partitioned[static_cast<std::size_t>(i)] = false; w.log.add("client " + std::to_string(i) + " healed"); });
            }
            if (w.uniform() < 0.4) {
                auto start = w.uniform(500ms, st.heal - 500ms);
                auto len = options.long_pauses ? w.uniform(margin, 3 * margin) : w.uniform(10ms, margin * 8 / 10);
                faults << fmt(" pause(%d %.3f+%.3f)", i, secs(start), secs(len));
                w.at(start, [&w, &p = *procs[static_cast<std::size_t>(i)], len] { w.pause(p, len); });
            }
        }
        if (w.uniform() < 0.2) {
            auto start = w.uniform(500ms, st.heal - 500ms);
            auto len = w.uniform(100ms, 2 * st.ttl);
            faults << fmt(" agent-pause(%.3f+%.3f)", secs(start), secs(len));
            w.at(start, [&w, len] { w.pause(w.agent_process(), len); });
        }
        if (agent_crash) {
            auto pick = [&](nanoseconds lo, nanoseconds hi) {
                return nanoseconds{std::uniform_int_distribution<std::int64_t>(lo.count(), hi.count())(crash_rng)};
            };
            auto const down = pick(10ms, st.ttl);
            auto const start = pick(500ms, st.heal - 500ms - down);
            faults << fmt(" agent-crash(%.3f+%.3f)", secs(start), secs(down));
            w.at(start, [&w] { w.crash_agent(); });
            w.at(start + down, [&w] { w.restart_agent(); });
        }
        w.at(st.heal, [&] {
            w.faults_on = false;
            std::fill(w.partitioned.begin(), w.partitioned.end(), false);
            for (auto* p : procs)
                if (p->stopped) process_executor::resume(w.io(), p);
            if (w.agent_process().stopped) process_executor::resume(w.io(), &w.agent_process());
            for (int k = 0; k < st.keys; ++k)
                if (ck.working("job/" + std::to_string(k)) > 0) ck.led_since_heal.insert("job/" + std::to_string(k));
            w.log.add("faults stop");
        });
        result.summary = fmt("ttl=%.0fs lock-delay=%.0fs clients=%d keys=%d heal=%.3fs roles:", secs(st.ttl),
                             secs(st.lock_delay), st.clients, st.keys, secs(st.heal)) +
                         roles.str() + " faults:" + (faults.str().empty() ? std::string(" none") : faults.str());
        w.log.add("schedule: " + result.summary);

        // Run to the end of the liveness bound.
        w.run_until(st.heal + st.settle);
        for (auto const& key : contested) {
            if (!ck.led_since_heal.count(key))
                ck.fail(fmt("nobody led %s within %.1f s of the faults stopping", key.c_str(), secs(st.settle)));
        }

        // Shut down: every loop is cancelled (as its process) and must hand
        // over cleanly, leaving the agent with no session and no held key.
        for (std::size_t i = 0; i < stops.size(); ++i) {
            process* p = procs[std::min(i, procs.size() - 1)];
            if (i == stops.size() - 1) p = procs[0];  // the observer
            process_executor::run_as(p, [sig = stops[i].get()] { sig->emit(asio::cancellation_type::terminal); });
        }
        w.run_until(world::now() + 4 * st.ttl + 5s);
        for (std::size_t i = 0; i < done.size(); ++i)
            if (!done[i]) ck.fail(fmt("loop %zu did not end after its cancellation", i));
        if (ck.anyone_working()) ck.fail("work still runs after every loop ended");
        auto& sm = detail::agent_access::state(w.agent());
        if (auto left = sm.session_list(); !left.empty())
            ck.fail(fmt("%zu session(s) left on the agent after a clean shutdown, e.g. %s", left.size(),
                        left.front()->name.c_str()));
        for (auto const* e : sm.kv_list(""))
            if (!e->session.empty()) ck.fail("key " + e->key + " still held after a clean shutdown");

        // Nothing of the library may be left in the io_context.
        for (std::size_t i = 0; i < clients.size(); ++i)
            process_executor::run_as(procs[i], [&] { clients[i].reset(); });
        process_executor::run_as(&w.agent_process(), [&] { w.agent().stop(); });
        w.io().restart();
        w.io().run();
        if (detail::sim::world().stalled) ck.fail("work was left waiting in the io_context after everything closed");

        result.stats.events = w.requests;
        result.stats.invalidations = w.invalidations;
        result.stats.agent_restarts = static_cast<std::uint64_t>(w.agent_restarts());
        result.stats.lock_delay_refusals = w.lock_delay_refusals;
        result.stats.virtual_seconds = secs(world::now());
        result.ok = ck.violation.empty();
        result.violation = ck.violation;
    }
    return result;
}

}  // namespace tenure::sim
