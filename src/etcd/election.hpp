// etcd's lease-as-session and election (internal): the key scheme of etcd's
// client/v3/concurrency Election, so that tenure candidates and
// `etcdctl elect` candidates share one election.
//
//   session   = one lease (lease_grant), renewed by one keepalive POST every
//               TTL/3, revoked on close.
//   candidate = key `<name>/<lease id in lowercase hex>`, created by a txn on
//               create_revision == 0 with the lease attached (else read back:
//               re-campaign with the same lease, proclaiming the new value).
//   leader    = the key under `<name>/` with the lowest create_revision; each
//               candidate waits for the DELETE of its predecessor only (the
//               largest create_revision below its own) while also watching
//               its own key, so a campaign whose key or lease dies ends with
//               an error instead of "leading" (etcd#19597).
//   token     = the own key's create_revision.
#pragma once

#include "core/backend.hpp"
#include <tenure/detail/clock.hpp>
#include "etcd/client_access.hpp"

#include <tenure/etcd/client.hpp>

namespace tenure::detail {

// "%x" of a lease ID, as etcd's Go client formats it.
std::string etcd_lease_hex(std::int64_t lease);

// ---- key helpers shared by the election and the semaphore (semaphore.cpp;
// put_candidate below too) ----

bool etcd_lease_not_found(boost::system::system_error const& e);
// Why our key is gone: session_invalidated when `lease` went with it, else
// key_deleted.
asio::awaitable<boost::system::error_code> etcd_why_gone(etcd::client& c, std::int64_t lease);
// Deletes `key` if it still has create revision `rev` (etcd's Resign).
asio::awaitable<void> etcd_resign(etcd::client& c, std::string key, std::int64_t rev);

struct etcd_session;

// A held election key; etcd_permit_scope (semaphore.cpp) is a held slot.
struct etcd_election_scope : scope_state {
    etcd_election_scope(std::shared_ptr<session_impl> s, std::string k, std::string v, etcd::client& c,
                        std::string prefix, std::int64_t lease)
        : scope_state(std::move(s), std::move(k), std::move(v)), client(c), prefix(std::move(prefix)),
          lease(lease) {}

    etcd::client& client;
    std::string prefix;        // "<name>/"
    std::int64_t lease = 0;    // our lease
    std::int64_t watch_from = 0;  // the monitor's first revision

    asio::awaitable<void> monitor() override;
    asio::awaitable<void> send_release() override;
    asio::awaitable<boost::system::error_code> check_held() override;
    asio::awaitable<bool> fenced_write(std::vector<write_op> writes) override;
};

struct etcd_session final : session_impl {
    etcd_session(etcd::client& c, session_options o, std::int64_t lease, clock::time_point sent)
        : session_impl(c.get_executor(), std::move(o), etcd_lease_hex(lease), sent), client(c), lease(lease) {
        fsm.set_renew_divisor(3);
    }

    etcd::client& client;
    std::int64_t lease;
    // Resigns still in flight (a scope released in the background): the
    // lease is revoked only after them, so a handover stays clean.
    int resigning = 0;
    tenure::detail::timer resign_done{client.get_executor(), clock::time_point::max()};
    // When a resign last left the election to a waiting candidate: close()
    // revokes the lease only a moment after it (see destroy_remote).
    clock::time_point handed_over_at{};

    asio::awaitable<bool> renew_once() override;
    asio::awaitable<void> destroy_remote() override;
    // A key: etcd's election (concurrency.Election). Slots: the semaphore
    // of semaphore.cpp (its key layout is documented on tenure::semaphore).
    asio::awaitable<std::shared_ptr<scope_state>> acquire(claim c) override;
    asio::awaitable<claim_holders> read(claim_kind kind, std::string key, int limit) override;

    asio::awaitable<std::shared_ptr<scope_state>> campaign(std::string name, std::string value, bool once);
    asio::awaitable<std::optional<leader_info>> read_leader(std::string name);
    // semaphore.cpp: one of `limit` slots under `prefix`, and who holds them.
    asio::awaitable<std::shared_ptr<scope_state>> acquire_slot(std::string prefix, int limit, std::string value,
                                                               bool once);
    asio::awaitable<claim_holders> read_slots(std::string prefix, int limit);

    // Called when etcd says our lease is gone: the session is lost now.
    void lease_gone();
};

asio::awaitable<std::shared_ptr<session_impl>> create_etcd_session(etcd::client& client, session_options options);

// etcd's Campaign txn: create `own_key` with `lease`, else read it back (and
// proclaim a new value with the same lease). Its create revision; 0 when the
// key changed under us (try again). lock_conflict when another lease holds it.
asio::awaitable<std::int64_t> put_candidate(etcd::client& client, std::string const& own_key, std::string const& value,
                                            std::int64_t lease);

// leader_observer's state on etcd: one watch on `<name>/`, kept open between
// next() calls, re-read after a compaction.
struct etcd_observer final : observer_backend {
    etcd_observer(etcd::client& c, std::string name) : client(c), prefix(std::move(name) + "/") {}
    asio::awaitable<std::optional<leader_info>> next() override;

    etcd::client& client;
    std::string prefix;
    std::optional<etcd::watch_stream> watch;
    std::string leader_key;  // the key of the leader last read ("" when none)
    std::int64_t watch_from = 0;  // where the next watch starts (0: read first)
    bool first = true;            // the next answer is the first: at once
    std::optional<leader_info> last;  // the holder last answered
};

}  // namespace tenure::detail
