#include "agent/views.hpp"

#include <boost/json/array.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <map>
#include <string_view>

namespace tenure::detail::agent {

namespace json = boost::json;

namespace {

json::value ms_or_null(std::optional<time_point> t, wall_anchor const& wall) {
    if (!t) return nullptr;
    return wall.to_unix_ms(*t);
}

json::object render_term(lock_term const& t, wall_anchor const& wall) {
    json::object o;
    o["LockIndex"] = t.lock_index;
    o["Session"] = t.session;
    o["Name"] = t.name;
    o["Node"] = t.node;
    o["AcquireIndex"] = t.acquire_index;
    o["Acquired"] = wall.to_unix_ms(t.acquired);
    o["Ended"] = ms_or_null(t.ended, wall);
    if (t.ended) o["End"] = std::string(t.end);
    else o["End"] = nullptr;
    o["LockDelayUntil"] = ms_or_null(t.lock_delay_until, wall);
    return o;
}

}  // namespace

json::object render_history(state_machine const& sm, history_query const& q, wall_anchor const& wall,
                            time_point now) {
    auto const match = [&](std::string_view key) { return q.key ? key == *q.key : key.starts_with(q.prefix); };
    auto groups = sm.history().by_key(match);

    // Every key with terms in the ring, and every key held now (a holder that
    // took it before the agent started, or whose term fell out of the ring).
    std::map<std::string_view, std::vector<lock_term const*> const*> keys;
    for (auto const& [key, terms] : groups) keys.emplace(key, &terms);
    std::vector<kv_entry const*> held;
    if (q.key) {
        if (auto const* e = sm.kv_get(*q.key); e && !e->session.empty()) held.push_back(e);
    } else {
        held = sm.held_keys(q.prefix);
    }
    for (auto const* e : held) keys.emplace(e->key, nullptr);

    json::array out;
    for (auto const& [key, terms] : keys) {
        json::object k;
        k["Key"] = key;
        auto const* e = sm.kv_get(key);
        std::string session = e ? e->session : std::string{};
        auto const* s = session.empty() ? nullptr : sm.session_get(session);
        k["Session"] = session;
        k["SessionName"] = s ? s->name : std::string{};
        k["Node"] = s ? s->node : std::string{};
        k["LockIndex"] = e ? e->lock_index : std::uint64_t{0};
        k["LockDelayUntil"] = ms_or_null(sm.lock_delay_until(key, now), wall);
        json::array list;
        if (terms) {
            std::size_t first = 0;
            if (q.terms != 0 && terms->size() > q.terms) first = terms->size() - q.terms;
            for (std::size_t i = first; i < terms->size(); ++i) list.emplace_back(render_term(*(*terms)[i], wall));
        }
        k["Terms"] = std::move(list);
        out.emplace_back(std::move(k));
    }
    json::object o;
    o["Now"] = wall.to_unix_ms(now);
    o["Capacity"] = sm.history().capacity();
    o["Recorded"] = sm.history().recorded();
    o["Keys"] = std::move(out);
    return o;
}

namespace {

json::object render_check_status(std::string_view node, std::string_view id, health_check const* c) {
    json::object o;
    o["Node"] = node;
    o["CheckID"] = id;
    o["Name"] = c ? c->name : std::string{};
    o["Status"] = c ? c->status : std::string("missing");
    o["Output"] = c ? c->output : std::string{};
    return o;
}

}  // namespace

json::object render_sessions_view(state_machine const& sm, wall_anchor const& wall, time_point now) {
    json::array sessions;
    for (auto const* s : sm.session_list()) {
        json::object o;
        o["ID"] = s->id;
        o["Name"] = s->name;
        o["Node"] = s->node;
        o["Behavior"] = s->behavior == session_behavior::release ? "release" : "delete";
        o["TTL"] = s->ttl;
        o["LockDelay"] = std::min<std::int64_t>(s->lock_delay_ns, max_lock_delay.count()) / 1'000'000;
        auto const renewed = sm.session_renewed(s->id);
        o["LastRenewed"] = ms_or_null(renewed, wall);
        if (renewed) o["ExpiresAt"] = wall.to_unix_ms(*renewed + s->ttl_duration * session_ttl_multiplier);
        else o["ExpiresAt"] = nullptr;
        json::array held;
        for (auto const& k : sm.keys_held_by(s->id)) held.emplace_back(k);
        o["Held"] = std::move(held);
        json::array checks;
        for (auto const& id : s->node_checks) checks.emplace_back(render_check_status(s->node, id, sm.check_get(s->node, id)));
        for (auto const& id : s->checks) checks.emplace_back(render_check_status(s->node, id, sm.check_get(s->node, id)));
        for (auto const& sc : s->service_checks)
            checks.emplace_back(render_check_status(s->node, sc.id, sm.check_get(s->node, sc.id)));
        o["Checks"] = std::move(checks);
        sessions.emplace_back(std::move(o));
    }
    json::array checks;
    for (auto const* n : sm.node_list()) {
        for (auto const* c : sm.node_checks(n->node)) {
            json::object o = render_check_status(c->node, c->check_id, c);
            o["ServiceName"] = c->service_name;
            o["Type"] = c->type;
            checks.emplace_back(std::move(o));
        }
    }
    json::object o;
    o["Now"] = wall.to_unix_ms(now);
    o["Sessions"] = std::move(sessions);
    o["Checks"] = std::move(checks);
    return o;
}

std::uint64_t sessions_view_index(state_machine const& sm) {
    return sm.sessions_index() + sm.checks_index() + sm.renewals();
}

}  // namespace tenure::detail::agent
