// Shared by the agent fuzz targets: a small agent state (one session, a few
// keys, one held lock) and the HTTP API over it, rebuilt for every input so
// runs are independent; the literal SESSION in an input becomes the real
// session ID, so the fuzzer reaches the paths that need a live session.
#pragma once

#include "agent/http_api.hpp"
#include "agent/state.hpp"

#include <boost/beast/http/write.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <variant>

namespace fuzz {

namespace agent = tenure::detail::agent;
using namespace std::chrono_literals;

struct agent_fixture {
    agent::time_point now = agent::time_point{} + std::chrono::hours{1};
    agent::state_machine sm{config(), now};
    agent::http_api api{sm};
    std::string session;

    static agent::agent_config config() {
        agent::agent_config c;
        c.seed = 7;  // deterministic IDs and jitter
        return c;
    }

    agent_fixture() {
        agent::session_create_request r;
        r.name = "fuzz";
        r.ttl = "15s";
        session = std::get<std::string>(sm.session_create(r, now));
        sm.kv_set("a", std::string("1"), 0);
        sm.kv_set("a/b", std::string("2"), 42);
        (void)sm.kv_acquire("locked", std::string("leader"), 0x2ddccbc058a50c18ull, session, now);
    }

    std::string with_session(std::string s) const {
        for (auto pos = s.find("SESSION"); pos != std::string::npos; pos = s.find("SESSION", pos + session.size()))
            s.replace(pos, 7, session);
        return s;
    }

    // Handles `req` as the server would: a parked blocking query is answered
    // at its deadline (or earlier when a write wakes it; nothing writes here).
    void serve(agent::request const& req) {
        agent::blocking_state bs;
        auto t = now;
        for (int round = 0; round < 3; ++round) {
            auto out = api.handle(req, t, bs);
            if (out.res) {
                std::ostringstream os;
                os << *out.res;  // the response must serialize
                break;
            }
            if (!out.wait) break;
            t = out.wait->deadline;
        }
        // Time passes: sessions and lock-delays expire on the state the request left.
        sm.advance(t + std::chrono::hours{1});
    }
};

}  // namespace fuzz
