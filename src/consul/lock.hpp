// Consul's session and lock scope (internal): shared by the election
// (src/consul/lock.cpp) and the semaphore.
#pragma once

#include "core/backend.hpp"
#include "consul/candidates.hpp"
#include "consul/client_access.hpp"
#include "consul/watch_hub.hpp"
#include <tenure/detail/clock.hpp>

#include <boost/asio/any_io_executor.hpp>

#include <optional>
#include <unordered_map>
#include <utility>

namespace tenure::detail {

// Consistent read options; with an index, a blocking query of `wait`.
consul::read_options consistent_read(std::uint64_t index = 0,
                                     std::chrono::nanoseconds wait = std::chrono::seconds{30});

struct consul_session;

// fenced_put.cpp: `writes` in one /v1/txn whose op 0 is a check-session of
// `key` for `session`. Throws not_held when that guard fails (or `key` or
// `session` is empty); other refusals come back as the result.
asio::awaitable<consul::txn_result> consul_guarded_txn(consul::client& c, std::string key, std::string session,
                                                       std::vector<consul::txn_op> writes);
// scope_state::fenced_write of a Consul scope (its key, its session).
asio::awaitable<bool> consul_fenced_write(consul::client& c, scope_state const& s, std::vector<write_op> writes);

// The candidates a holder of a key would hand it to (best first, the holder
// not among them), and the marker naming the first, as the holder last saw
// them. The release hands the key over in one transaction with no registry
// read, guarded by `.seen` as the holder saw it (every registration and
// removal moves it, so the first of `live` is still the best), as the hub's
// snapshot handover is. It names the next of `live` in the same
// transaction, so the new holder finds the marker right.
struct handover_note {
    std::vector<candidate_info> live;
    consul::kv_pair marker;
    std::uint64_t seen_index = 0;  // `.seen`'s ModifyIndex (0: absent)
};

struct consul_lock_scope final : scope_state {
    consul_lock_scope(std::shared_ptr<session_impl> s, std::string k, std::string v, consul::client& c,
                      std::shared_ptr<kv_watch_hub> h = nullptr)
        : scope_state(std::move(s), std::move(k), std::move(v)), client(c), hub(std::move(h)) {}

    consul::client& client;
    std::shared_ptr<kv_watch_hub> hub;  // the prefix's shared query, or null: own blocking queries
    std::uint64_t modify_index = 0;

    bool quick_retake = false;  // release with a transaction that reports the key's ModifyIndex
    bool watching = false;      // the monitor has started (see session_impl::defer_monitor)

    // Transfer and priority (election_options, copied: the election may go
    // before its scope).
    int priority = 0;
    bool handoff_on_release = true;
    bool yield_to_higher = false;
    clock::duration yield_settle{};
    bool accept_transfer_requests = false;
    // A transfer in flight (or done): the monitor reports the key taken by
    // this session as transfer_reason, not released_by_other.
    std::string transfer_target;
    boost::system::error_code transfer_reason;
    asio::cancellation_signal watch_cancel;  // the candidates watcher (yield, requests)

    asio::awaitable<std::uint64_t> transfer(std::string target, boost::system::error_code reason) override;
    void on_end() noexcept override { watch_cancel.emit(asio::cancellation_type::terminal); }
    // yield_to_higher and accept_transfer_requests: one blocking query on
    // `<key>` (recursive) while held.
    asio::awaitable<void> watch_candidates();

    // The release wakes the monitor's own blocking query; a hub waiter, or a
    // monitor still in its delay, costs nothing to cancel.
    bool monitor_outlives_release() const noexcept override { return !hub && watching; }

    // With a hub, a held key is watched by a registration in it (no
    // coroutine); monitor() starts when the hub sees the key change.
    void start_monitor() override;
    asio::awaitable<void> monitor() override { return watch_key(std::nullopt); }
    asio::awaitable<void> send_release() override;
    asio::awaitable<boost::system::error_code> check_held() override;
    asio::awaitable<bool> fenced_write(std::vector<write_op> writes) override {
        return consul_fenced_write(client, *this, std::move(writes));
    }

    ~consul_lock_scope() override { stop_hub_watch(); }

private:
    // The monitor's loop, from `first` (the hub's answer to the watch) if given.
    asio::awaitable<void> watch_key(std::optional<kv_watch_hub::key_state> first);
    void on_hub_answer();
    void stop_hub_watch() noexcept;
    std::optional<kv_watch_hub::watch_id> hub_watch;  // while the hub watches the key for the monitor
    asio::awaitable<void> send_release_once();
    // The ways of releasing send_release_once tries, in order. True: done
    // (released, handed over, or the key was no longer ours).
    asio::awaitable<bool> release_if_nobody_waits(std::uint64_t seen_index);
    std::vector<consul::txn_op> guarded_unlock_ops(std::uint64_t seen_index) const;
    consul::txn_op seen_guard(std::uint64_t seen_index) const;
    consul::txn_op unlock_op() const;
    // The handover the hub's snapshot shows (the marker's candidate, still
    // waiting), guarded by `.seen` as that snapshot has it: no registry read.
    // False when the snapshot shows none, or it was refused.
    asio::awaitable<bool> hand_over_from_snapshot();
    // A handover to `target`, guarded by `guard` when planned without a
    // read, the marker as it was seen (for its compare-and-set or delete).
    struct planned_handover {
        candidate_info target;
        std::optional<consul::kv_pair> marker;
        std::optional<consul::txn_op> guard;
        std::vector<candidate_info> live;  // empty: the handover reads the registry back to name the next
    };
    std::optional<planned_handover> handover_in_snapshot() const;
    // From consul_session::handover_notes: guarded by `.seen`'s index.
    planned_handover handover_from_note(handover_note n) const;
    // False when refused (the caller reads the registry), true when handed
    // over or the key was no longer ours.
    asio::awaitable<bool> hand_over(planned_handover h);
    asio::awaitable<bool> hand_over_from_registry();
    asio::awaitable<void> unlock_noting_index();
    // After a handover from the snapshot went through: name the next best
    // from what its transaction read back (in the background, owned by the
    // session).
    void name_after_handover(registry_view after);
};

struct consul_session final : session_impl {
    consul_session(consul::client& c, session_options o, std::string id, clock::time_point sent)
        : session_impl(c.get_executor(), std::move(o), std::move(id), sent), client(c) {}

    consul::client& client;
    std::string check_id;  // application health check, if any
    // LockDelay of the sessions seen holding keys (a session's LockDelay never
    // changes): 10 000 followers of one holder ask once, not 10 000 times.
    std::unordered_map<std::string, clock::duration> holder_delays;
    // A lookup in flight, shared by the followers that ask meanwhile (all of
    // 10 000 that start at once would otherwise ask before the first answer).
    struct delay_lookup {
        explicit delay_lookup(boost::asio::any_io_executor const& ex) : done(ex, clock::time_point::max()) {}
        tenure::detail::timer done;  // cancelled when `delay` is in
        std::optional<clock::duration> delay;
    };
    std::unordered_map<std::string, std::shared_ptr<delay_lookup>> delay_lookups;
    // Where this session's last clean release left each key (its
    // ModifyIndex): with election_options::quick_retake the next acquire of
    // the key tries a check-index + lock transaction at once instead of
    // reading the key first.
    std::unordered_map<std::string, std::uint64_t> released_at;

    // Keys whose candidate registry this session last saw empty, at the
    // ModifyIndex of `<key>.candidates/.seen` (0: absent): its next release
    // of the key is a check-index + unlock transaction, no registry read.
    std::unordered_map<std::string, std::uint64_t> registry_empty_at;

    // Keys this session holds (or last held) with a candidate waiting: the
    // best one and the marker naming it, as this session last saw them (its
    // lock transaction's read-back and naming, or a read after a handover to
    // it). See handover_note.
    std::unordered_map<std::string, handover_note> handover_notes;

    void note_registry_empty(std::string const& key, std::uint64_t seen_index) {
        handover_notes.erase(key);
        note(registry_empty_at, key, seen_index);
    }
    // `live`: the registry's live candidates, best first; noted when the
    // marker names the best of them other than this session.
    void note_handover(std::string const& key, std::vector<candidate_info> const& live, consul::kv_pair marker,
                       std::optional<consul::kv_pair> const& seen);
    std::optional<handover_note> take_handover_note(std::string const& key) {
        auto const it = handover_notes.find(key);
        if (it == handover_notes.end()) return std::nullopt;
        std::optional<handover_note> n{std::move(it->second)};
        handover_notes.erase(it);
        return n;
    }
    void note_released(std::string const& key, std::uint64_t modify_index) { note(released_at, key, modify_index); }

    // Takes the note of `key` (nullopt: none). Its entry stays, marked taken,
    // so that the next note of the key (a lone candidate's every term) reuses
    // the entry instead of allocating another. Both maps are capped at 4096
    // keys, taken or not.
    static std::optional<std::uint64_t> take_note(std::unordered_map<std::string, std::uint64_t>& notes,
                                                  std::string const& key) {
        auto const it = notes.find(key);
        if (it == notes.end() || it->second == taken) return std::nullopt;
        return std::exchange(it->second, taken);
    }

    static constexpr std::uint64_t taken = ~std::uint64_t{0};  // an index no key reaches
    static void note(std::unordered_map<std::string, std::uint64_t>& notes, std::string const& key,
                     std::uint64_t index) {
        if (notes.size() >= 4096 && !notes.contains(key)) notes.clear();
        notes.insert_or_assign(key, index);
    }

    asio::awaitable<bool> renew_once() override {
        auto renewed = co_await coro(client).session_renew(id);
        co_return renewed.has_value();
    }

    asio::awaitable<void> after_renewal() override {
        if (check_id.empty()) co_return;
        bool healthy = !options.health_probe || options.health_probe();
        try {
            if (healthy) co_await coro(client).check_pass(check_id, "tenure: session renewed");
            else co_await coro(client).check_fail(check_id, "tenure: application health probe failed");
        } catch (boost::system::system_error const&) {
            // A missed heartbeat shows up as the check (and so the session) expiring.
        }
    }

    asio::awaitable<void> destroy_remote() override { co_await coro(client).session_destroy(id); }

    asio::awaitable<void> cleanup() override {
        if (!check_id.empty()) co_await coro(client).check_deregister(check_id);
    }

    // A key: Consul's Lock protocol (lock.cpp); a slot: its Semaphore
    // protocol (semaphore.cpp).
    asio::awaitable<std::shared_ptr<scope_state>> acquire(claim c) override;
    asio::awaitable<claim_holders> read(claim_kind kind, std::string key, int limit) override;
    asio::awaitable<std::vector<candidate_info>> read_candidates(std::string key) override;

    asio::awaitable<std::optional<leader_info>> read_leader(std::string key);
    asio::awaitable<std::shared_ptr<scope_state>> acquire_key(std::string key, std::string value, bool once,
                                                              election_options const& options);
    asio::awaitable<std::shared_ptr<scope_state>> acquire_with(std::string key, std::string value, bool once,
                                                               std::shared_ptr<kv_watch_hub> hub,
                                                               election_options const& options);
    // The scope of a key this session took (lock.cpp).
    std::shared_ptr<scope_state> won(std::string const& key, std::string const& value,
                                     std::shared_ptr<kv_watch_hub> const& hub, election_options const& options,
                                     consul::kv_pair const& held);
    asio::awaitable<std::shared_ptr<scope_state>> acquire_permit(std::string prefix, int limit, std::string value,
                                                                 bool once);
    asio::awaitable<claim_holders> read_slots(std::string prefix, int limit);
    asio::awaitable<clock::duration> holder_lock_delay(std::string const& holder);
};

// Consul's session and lock algorithm (lock.cpp).
asio::awaitable<std::shared_ptr<session_impl>> create_consul_session(consul::client& client, session_options options);


}  // namespace tenure::detail
