// Consul's session and lock algorithm behind tenure's session and election:
// PUT /v1/session/renew, KV ?acquire= / ?release= with the Go api's lock flag
// value, consistent blocking queries for followers and the leader's monitor.
#include "lock.hpp"

#include <boost/asio/this_coro.hpp>

#include <cstdio>
#include <random>

namespace tenure::detail {

using namespace std::chrono_literals;
using boost::system::system_error;

namespace {

// A unique check ID per session: two sessions of one process must not share a check.
std::string unique_check_id(std::string const& name) {
    static std::mt19937_64 rng{std::random_device{}()};
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng()));
    return "tenure-health:" + name + ":" + buf;
}
}  // namespace

consul::read_options consistent_read(std::uint64_t index, std::chrono::nanoseconds wait) {
    consul::read_options ro;
    ro.mode = consul::consistency::consistent;
    if (index != 0) {
        ro.index = index;
        ro.wait = wait;
    }
    return ro;
}

asio::awaitable<void> consul_lock_scope::send_release() {
    auto self = shared_from_this();
    co_await client.kv_release(key, session->id, value, consul::lock_flag_value);
}

asio::awaitable<boost::system::error_code> consul_lock_scope::check_held() {
    auto self = shared_from_this();
    auto r = co_await client.kv_get(key, consistent_read());
    if (!r.value) co_return make_error_code(error::key_deleted);
    if (r.value->session != session->id) co_return make_error_code(error::released_by_other);
    co_return boost::system::error_code{};
}

// Watches the key with consistent blocking queries; loss when the key is gone
// or held by another session. Errors are retried: the session's local
// deadline, not the monitor, decides when an unreachable server means loss.
asio::awaitable<void> consul_lock_scope::monitor() {
    auto self = shared_from_this();
    std::uint64_t index = modify_index;
    clock::duration retry = 20ms;
    while (status == scope_status::held) {
        std::optional<consul::read_result<std::optional<consul::kv_pair>>> r;
        try {
            r = co_await client.kv_get(key, consistent_read(index));
            retry = 20ms;
        } catch (system_error const& e) {
            if (status != scope_status::held || is_abort(e)) co_return;
        }
        if (status != scope_status::held) co_return;
        if (!r) {
            co_await pause_and_grow(retry);  // throws operation_aborted when the monitor is stopped
            continue;
        }
        auto const& pair = r->value;
        if (!pair) {
            lose(make_error_code(error::key_deleted));
            co_return;
        }
        if (pair->session != session->id) {
            auto why = make_error_code(error::released_by_other);
            if (pair->session.empty()) {
                // Freed without our release: was our session invalidated?
                bool gone = false;
                try {
                    auto info = co_await client.session_info_get(session->id);
                    gone = !info.value.has_value();
                } catch (system_error const&) {
                }
                if (gone) why = make_error_code(error::session_invalidated);
            }
            lose(why);
            co_return;
        }
        index = consul::next_wait_index(index, r->meta.index);
    }
}

// The candidate loop (api.Lock's algorithm, minus its 5 s poll): block while
// someone holds the key, race when it clears, and on a refusal of a free key
// (lock-delay) retry when the previous holder's LockDelay ends.
asio::awaitable<std::shared_ptr<scope_state>> consul_session::acquire(std::string key, std::string value, bool once) {
    auto self = std::static_pointer_cast<consul_session>(shared_from_this());
    std::uint64_t index = 0;
    acquire_backoff backoff;
    std::string last_holder;
    clock::duration holder_delay = options.lock_delay;
    clock::duration error_retry = 20ms;

    for (;;) {
        std::optional<consul::read_result<std::optional<consul::kv_pair>>> r;
        bool transient = false;
        try {
            r = co_await client.kv_get(key, consistent_read(index));
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
            transient = true;
        }
        if (transient) {
            co_await pause_and_grow(error_retry);
            index = 0;
            continue;
        }
        error_retry = 20ms;
        auto const& pair = r->value;
        if (pair && pair->flags != consul::lock_flag_value) throw system_error(make_error_code(error::lock_conflict));

        if (pair && !pair->session.empty() && pair->session != id) {
            // Held by another candidate: learn its LockDelay once, then block.
            if (pair->session != last_holder) {
                last_holder = pair->session;
                holder_delay = options.lock_delay;
                try {
                    auto info = co_await client.session_info_get(last_holder);
                    if (info.value) holder_delay = info.value->lock_delay;
                } catch (system_error const& ex) {
                    if (is_abort(ex)) throw;
                }
            }
            backoff.held();
            if (once) co_return nullptr;
            index = consul::next_wait_index(index, r->meta.index);
            continue;
        }
        if (!last_holder.empty()) {
            // We saw it held and now free: a lock-delay may have started now.
            backoff.freed(clock::now(), holder_delay);
            last_holder.clear();
        }

        bool ok = false;
        try {
            ok = co_await client.kv_acquire(key, id, value, consul::lock_flag_value);
        } catch (system_error const& ex) {
            if (is_abort(ex)) throw;
            transient = true;
        }
        if (transient) {
            co_await pause_and_grow(error_retry);
            index = 0;
            continue;
        }
        if (ok) {
            // Read back the LockIndex: the fencing token of this term.
            auto held = co_await client.kv_get(key, consistent_read());
            if (!held.value || held.value->session != id) {
                index = 0;  // taken away at once (force release): campaign again
                continue;
            }
            auto st = std::make_shared<consul_lock_scope>(self, key, value, client);
            st->token = held.value->lock_index;
            st->modify_index = held.value->modify_index;
            adopt(st);
            co_return st;
        }
        if (once) co_return nullptr;

        // Refused. Held again (we lost the race) or a lock-delay on a free key?
        auto again = co_await client.kv_get(key, consistent_read());
        if (again.value && !again.value->session.empty()) {
            index = 0;  // the next pass sees the holder and blocks on it
            continue;
        }
        co_await sleep_until(backoff.refused(clock::now(), options.lock_delay));
        index = 0;
    }
}

asio::awaitable<std::shared_ptr<session_impl>> create_consul_session(consul::client& client, session_options options) {
    if (options.ttl.count() < 0) throw system_error(make_error_code(std::errc::invalid_argument));
    consul::session_request req;
    req.name = options.name;
    req.ttl = options.ttl;
    req.lock_delay = options.lock_delay;
    req.behavior = options.behavior;
    req.node_checks = options.node_checks;

    std::string check_id;
    if (options.health_check_ttl) {
        // Register the application's TTL check passing, then bind it.
        check_id = unique_check_id(options.name);
        consul::check_registration reg;
        reg.id = check_id;
        reg.name = "tenure session health: " + options.name;
        reg.ttl = *options.health_check_ttl;
        reg.status = "passing";
        co_await client.check_register(reg);
        std::vector<std::string> checks = options.node_checks.value_or(std::vector<std::string>{"serfHealth"});
        checks.push_back(check_id);
        req.node_checks = std::move(checks);
    }

    auto const sent = clock::now();
    std::string id = co_await client.session_create(req);
    auto impl = std::make_shared<consul_session>(client, std::move(options), std::move(id), sent);
    impl->check_id = std::move(check_id);
    impl->start();
    co_return impl;
}

}  // namespace tenure::detail
