// tenure::semaphore on etcd: N holders under a prefix, with the key scheme
// of etcd's election (election.hpp), so etcd tools can read it.
//
//   contender = key `<prefix>/<lease id in lowercase hex>` (a trailing '/' of
//               the prefix is dropped), on the session's lease, value = the
//               semaphore's value; made by the campaign txn (create_revision
//               == 0, else the own key is reused).
//   holders   = the first `limit` keys under `<prefix>/` by create revision.
//               Every key there takes a place in that order.
//   waiter    = a contender behind them. It reads, in one txn, its own key and
//               the `limit` keys just ahead of it (its window), then watches
//               the prefix (DELETE events only) until one of the window's
//               keys or its own key is deleted, and reads again. Keys created
//               later sort behind it, so its rank never grows: while every
//               key of the window exists it has at least `limit` keys ahead
//               and cannot be admitted. A delete makes at most `limit`
//               waiters read again (those whose window held the key); with
//               limit 1 this is the election's predecessor watch.
//   permit    = the own key while its rank is below `limit`: admitted once,
//               it stays admitted as long as the key exists (ranks only
//               shrink). The monitor watches the key as the election's scope
//               does; release deletes it; losing the lease deletes it.
//   token     = the own key's create revision. A contender becomes
//               admissible only once every older one is admitted or gone, so
//               tokens grow along the queue (two admitted at about the same
//               time may learn it in either order).
//
// g++ 12: every argument with a non-trivial destructor is named before the
// co_await that passes it (see election.cpp).
#include "etcd/election.hpp"

#include <boost/asio/this_coro.hpp>

#include <algorithm>
#include <chrono>
#include <set>

namespace tenure::detail {

using namespace std::chrono_literals;
using boost::system::system_error;

namespace {

// "<prefix>/": the range the contender keys live in.
std::string slot_range(std::string prefix) {
    while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
    return prefix + "/";
}

// One consistent snapshot (a read-only txn): the own key, and the keys just
// ahead of it (create revision below `my_rev`), nearest first, at most `limit`.
struct slot_view {
    std::int64_t revision = 0;
    std::optional<etcd::key_value> own;
    std::vector<std::string> window;
};

asio::awaitable<slot_view> read_slot_view(etcd::client& c, std::string own_key, std::string range,
                                          std::int64_t my_rev, int limit) {
    etcd::range_op own_op;
    own_op.key = own_key;
    etcd::range_op ahead;
    ahead.key = range;
    ahead.range_end = etcd::prefix_end(range);
    ahead.options.limit = limit;
    ahead.options.keys_only = true;
    ahead.options.order = etcd::sort_order::descend;
    ahead.options.target = etcd::sort_target::create;
    ahead.options.max_create_revision = my_rev - 1;
    std::vector<etcd::compare> no_compares;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(own_op));
    ops.emplace_back(std::move(ahead));
    std::vector<etcd::request_op> no_ops;
    auto r = co_await coro(c).txn(no_compares, ops, no_ops);
    if (r.responses.size() != 2) throw system_error(make_error_code(error::unexpected_response));
    slot_view v;
    v.revision = r.header.revision;
    auto const* a = std::get_if<etcd::range_response>(&r.responses[0]);
    auto const* b = std::get_if<etcd::range_response>(&r.responses[1]);
    if (!a || !b) throw system_error(make_error_code(error::unexpected_response));
    if (!a->kvs.empty()) v.own = a->kvs.front();
    for (auto const& kv : b->kvs) v.window.push_back(kv.key);
    co_return v;
}

// Completes at the first DELETE of one of `keys` under `range`, at or after
// revision `from`: one watch on the prefix, whatever the number of keys.
asio::awaitable<void> wait_any_deleted(etcd::client& c, std::string range, std::set<std::string> keys,
                                       std::int64_t from) {
    etcd::watch_options wo;
    wo.start_revision = from;
    wo.no_put = true;
    std::string end = etcd::prefix_end(range);
    auto w = co_await coro(c).watch(range, end, wo);
    for (;;) {
        auto r = co_await watch_next(w);
        for (auto const& ev : r.events)
            if (ev.type == etcd::event_type::del && keys.contains(ev.kv.key)) co_return;
    }
}

// Is `key` the key of a permit (or lock) this session still holds? Then it
// must not be withdrawn.
bool key_in_use(session_impl& s, std::string const& key) {
    for (auto const& w : s.scopes)
        if (auto sc = w.lock(); sc && sc->key == key && sc->status == scope_status::held) return true;
    return false;
}

// Deletes our contender key: the one of create revision `rev`, or when the
// campaign txn's answer never came (rev 0), the key if it is on our lease.
asio::awaitable<void> withdraw_contender(etcd::client& c, std::string key, std::int64_t rev, std::int64_t lease) {
    std::vector<etcd::compare> cmps;
    if (rev != 0) cmps.push_back(etcd::compare::create_revision(key, etcd::compare_result::equal, rev));
    else cmps.push_back(etcd::compare::lease(key, etcd::compare_result::equal, lease));
    etcd::delete_op del;
    del.key = key;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(del));
    std::vector<etcd::request_op> no_ops;
    co_await coro(c).txn(cmps, ops, no_ops);
}

}  // namespace

// A held slot: the election scope's monitor (the own key watched for its
// delete or takeover), its own check and release.
struct etcd_permit_scope final : etcd_election_scope {
    etcd_permit_scope(std::shared_ptr<session_impl> s, std::string k, std::string v, etcd::client& c,
                      std::string range, std::int64_t lease, int limit)
        : etcd_election_scope(std::move(s), std::move(k), std::move(v), c, std::move(range), lease), limit(limit) {}

    int limit;

    // A consistent read: the own key, still ours, with fewer than `limit`
    // keys ahead of it.
    asio::awaitable<boost::system::error_code> check_held() override {
        auto self = shared_from_this();
        std::string own_key = key;
        auto const rev = static_cast<std::int64_t>(token);
        auto v = co_await read_slot_view(client, own_key, prefix, rev, limit);
        if (!v.own || v.own->create_revision != rev) co_return co_await etcd_why_gone(client, lease);
        if (v.own->lease != lease) co_return make_error_code(error::released_by_other);
        if (v.window.size() >= static_cast<std::size_t>(limit)) co_return make_error_code(error::released_by_other);
        co_return boost::system::error_code{};
    }

    // Deletes the own key if it is still this permit's (no lock-delay
    // bookkeeping: a semaphore's waiters apply none).
    asio::awaitable<void> send_release() override {
        auto self = shared_from_this();
        std::string own_key = key;
        co_await etcd_resign(client, own_key, static_cast<std::int64_t>(token));
    }
};

namespace {

// The acquisition loop: make the contender key, then rank it and wait on its
// window until admitted. `my_rev` is the contender key's create revision once
// made (the caller withdraws it when no permit comes of it).
asio::awaitable<std::shared_ptr<scope_state>> slot_campaign(std::shared_ptr<etcd_session> self, std::string range,
                                                            std::string own_key, int limit, std::string value,
                                                            bool once, std::int64_t& my_rev) {
    etcd::client& client = self->client;
    std::int64_t const lease = self->lease;
    clock::duration retry = 20ms;
    for (;;) {
        std::optional<boost::system::error_code> fatal;
        bool transient = false;
        try {
            if (my_rev == 0) {
                my_rev = co_await put_candidate(client, own_key, value, lease);
                if (my_rev == 0) continue;  // the key went or changed meanwhile: make it again
            }
            auto v = co_await read_slot_view(client, own_key, range, my_rev, limit);
            if (!v.own || v.own->create_revision != my_rev) {
                fatal = co_await etcd_why_gone(client, lease);
            } else if (v.own->lease != lease) {
                fatal = make_error_code(error::released_by_other);
            } else if (v.window.size() < static_cast<std::size_t>(limit)) {
                auto st = std::make_shared<etcd_permit_scope>(self, own_key, value, client, range, lease, limit);
                st->token = static_cast<std::uint64_t>(my_rev);
                st->watch_from = v.revision + 1;
                co_return st;
            } else if (once) {
                co_return nullptr;
            } else {
                std::set<std::string> watched(v.window.begin(), v.window.end());
                watched.insert(own_key);
                co_await wait_any_deleted(client, range, std::move(watched), v.revision + 1);
                retry = 20ms;
                // Either way: rank again (a key ahead went, or ours did).
            }
        } catch (system_error const& e) {
            if (is_abort(e)) throw;
            if (e.code() == make_error_code(error::lock_conflict)) throw;
            if (etcd_lease_not_found(e)) fatal = make_error_code(error::session_invalidated);
            else transient = true;
        }
        if (fatal) {
            if (*fatal == make_error_code(error::session_invalidated)) self->lease_gone();
            throw system_error(*fatal);
        }
        if (transient) co_await pause_and_grow(retry);
    }
}

}  // namespace

asio::awaitable<std::shared_ptr<scope_state>> etcd_session::acquire_slot(std::string prefix, int limit,
                                                                         std::string value, bool once) {
    auto self = std::static_pointer_cast<etcd_session>(shared_from_this());
    std::string const range = slot_range(std::move(prefix));
    std::string const own_key = range + id;
    std::int64_t my_rev = 0;
    std::shared_ptr<scope_state> permit;
    bool aborted = false;
    try {
        permit = co_await slot_campaign(self, range, own_key, limit, std::move(value), once, my_rev);
    } catch (system_error const& e) {
        // Only a cancelled acquisition leaves a contender key of ours behind:
        // the other failures are a key that is gone or not ours.
        if (!is_abort(e)) throw;
        aborted = true;
    }
    if (!permit && !key_in_use(*this, own_key)) {
        // Not admitted (full, or cancelled): take the contender key away again.
        co_await asio::this_coro::reset_cancellation_state();
        try {
            auto withdraw = withdraw_contender(client, own_key, my_rev, lease);
            co_await with_deadline(std::move(withdraw), clock::now() + 2s);
        } catch (system_error const&) {
            // It goes with the lease anyway.
        }
    }
    if (aborted) throw system_error(asio::error::operation_aborted);
    if (permit) adopt(permit);
    co_return permit;
}

asio::awaitable<claim_holders> etcd_session::read_slots(std::string prefix, int limit) {
    auto self = shared_from_this();
    std::string const range = slot_range(std::move(prefix));
    std::string end = etcd::prefix_end(range);
    std::string key = range;
    etcd::range_options opts;
    opts.order = etcd::sort_order::ascend;
    opts.target = etcd::sort_target::create;
    auto r = co_await coro(client).range(key, end, opts);
    claim_holders held;
    held.limit = limit;
    held.index = static_cast<std::uint64_t>(std::max<std::int64_t>(r.header.revision, 0));
    for (auto const& kv : r.kvs) {
        if (held.holders.size() < static_cast<std::size_t>(limit))
            held.holders.push_back(leader_info{kv.value, etcd_lease_hex(kv.lease),
                                               static_cast<std::uint64_t>(kv.create_revision),
                                               static_cast<std::uint64_t>(kv.mod_revision)});
        held.contenders.push_back(etcd_lease_hex(kv.lease));
    }
    std::sort(held.holders.begin(), held.holders.end(),
              [](leader_info const& a, leader_info const& b) { return a.session < b.session; });
    std::sort(held.contenders.begin(), held.contenders.end());
    co_return held;
}

}  // namespace tenure::detail
