// etcd's lease-as-session and election key scheme behind tenure's session,
// election and leadership_scope (see election.hpp).
//
// g++ 12: every argument with a non-trivial destructor is named before the
// co_await that passes it (no braced temporaries, no std::string temporaries
// inside a co_await expression).
#include "etcd/election.hpp"
#include <tenure/detail/clock.hpp>

#include "core/campaign.hpp"

#include <tenure/session.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/this_coro.hpp>

#include <cstdio>
#include <stdexcept>

namespace tenure::detail {

using namespace std::chrono_literals;
using boost::system::system_error;

std::string etcd_lease_hex(std::int64_t lease) {
    char buf[20];
    std::snprintf(buf, sizeof buf, "%llx", static_cast<unsigned long long>(lease));
    return buf;
}

bool etcd_lease_not_found(system_error const& e) { return e.code() == make_error_code(error::lease_not_found); }

// Why our key is gone: the lease died with it, or someone deleted it.
asio::awaitable<boost::system::error_code> etcd_why_gone(etcd::client& c, std::int64_t lease) {
    try {
        auto ttl = co_await coro(c).lease_time_to_live(lease);
        if (ttl < 0) co_return make_error_code(error::session_invalidated);
    } catch (system_error const& e) {
        if (is_abort(e)) throw;
        if (etcd_lease_not_found(e)) co_return make_error_code(error::session_invalidated);
    }
    co_return make_error_code(error::key_deleted);
}

// Deletes `key` if it still has create_revision `rev` (etcd's Resign).
asio::awaitable<void> etcd_resign(etcd::client& c, std::string key, std::int64_t rev) {
    std::vector<etcd::compare> cmps;
    cmps.push_back(etcd::compare::create_revision(key, etcd::compare_result::equal, rev));
    etcd::delete_op del;
    del.key = key;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(del));
    std::vector<etcd::request_op> no_ops;
    co_await coro(c).txn(cmps, ops, no_ops);
}

namespace {

// One consistent snapshot (a read-only txn) of what a candidate needs: its
// own key and its predecessor (the key under the prefix with the largest
// create_revision below `my_rev`), or with my_rev == 0 the lowest key (the
// leader).
struct election_view {
    std::int64_t revision = 0;
    std::optional<etcd::key_value> own;
    std::optional<etcd::key_value> other;  // predecessor, or the leader when my_rev == 0
};

asio::awaitable<election_view> read_view(etcd::client& c, std::string own_key, std::string prefix,
                                         std::int64_t my_rev) {
    std::string end = etcd::prefix_end(prefix);
    etcd::range_options other_opts;
    other_opts.limit = 1;
    other_opts.target = etcd::sort_target::create;
    if (my_rev > 0) {
        other_opts.order = etcd::sort_order::descend;
        other_opts.max_create_revision = my_rev - 1;
    } else {
        other_opts.order = etcd::sort_order::ascend;
    }
    etcd::range_op own_op;
    own_op.key = own_key;
    etcd::range_op other_op;
    other_op.key = prefix;
    other_op.range_end = end;
    other_op.options = other_opts;
    std::vector<etcd::compare> no_compares;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(own_op));
    ops.emplace_back(std::move(other_op));
    std::vector<etcd::request_op> no_ops;
    auto r = co_await coro(c).txn(no_compares, ops, no_ops);
    election_view v;
    v.revision = r.header.revision;
    if (r.responses.size() == 2) {
        if (auto* a = std::get_if<etcd::range_response>(&r.responses[0]); a && !a->kvs.empty())
            v.own = a->kvs.front();
        if (auto* b = std::get_if<etcd::range_response>(&r.responses[1]); b && !b->kvs.empty())
            v.other = b->kvs.front();
    } else {
        throw system_error(make_error_code(error::unexpected_response));
    }
    co_return v;
}

// Completes at the first DELETE of `key` at or after revision `from`.
asio::awaitable<void> wait_deleted(etcd::client& c, std::string key, std::int64_t from) {
    etcd::watch_options wo;
    wo.start_revision = from;
    wo.no_put = true;
    std::string no_end;
    auto w = co_await coro(c).watch(key, no_end, wo);
    for (;;) {
        auto r = co_await watch_next(w);
        for (auto const& ev : r.events)
            if (ev.type == etcd::event_type::del && ev.kv.key == key) co_return;
    }
}

// Whether `lease` still exists. A key deleted by a lease revoke or expiry
// goes in the same etcd transaction that removes the lease, so a watcher
// that sees the DELETE and then finds the lease alive knows the key was
// deleted on its own (a resign).
asio::awaitable<bool> lease_alive(etcd::client& c, std::int64_t lease) {
    try {
        co_return co_await coro(c).lease_time_to_live(lease) >= 0;
    } catch (system_error const& e) {
        if (etcd_lease_not_found(e)) co_return false;
        throw;
    }
}

// etcd's Resign, also answering whether a candidate waits behind the key
// (one txn: delete, then a keys-only range of the later create revisions).
asio::awaitable<bool> resign_seeing_successor(etcd::client& c, std::string key, std::string prefix, std::int64_t rev) {
    std::vector<etcd::compare> cmps;
    cmps.push_back(etcd::compare::create_revision(key, etcd::compare_result::equal, rev));
    etcd::delete_op del;
    del.key = key;
    etcd::range_op next;
    next.key = prefix;
    next.range_end = etcd::prefix_end(prefix);
    next.options.limit = 1;
    next.options.keys_only = true;
    next.options.min_create_revision = rev + 1;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(del));
    ops.emplace_back(std::move(next));
    std::vector<etcd::request_op> no_ops;
    auto r = co_await coro(c).txn(cmps, ops, no_ops);
    if (!r.succeeded || r.responses.size() < 2) co_return false;
    auto const* rr = std::get_if<etcd::range_response>(&r.responses[1]);
    co_return rr && !rr->kvs.empty();
}

}  // namespace

// ---- session -----------------------------------------------------------------------

void etcd_session::lease_gone() {
    if (closing || lost_event.is_set()) return;
    fsm.invalidated();
    mark_lost(make_error_code(error::session_invalidated));
}

asio::awaitable<bool> etcd_session::renew_once() {
    auto self = shared_from_this();
    try {
        auto ttl = co_await coro(client).lease_keepalive(lease);
        co_return ttl > 0;
    } catch (system_error const& e) {
        if (etcd_lease_not_found(e)) co_return false;
        throw;
    }
}

asio::awaitable<void> etcd_session::destroy_remote() {
    auto self = shared_from_this();
    // Revoking first would delete a key a background release is about to
    // delete, and the next candidate would take that for an expiry.
    auto const give_up = clock::now() + 2 * client.config().request_timeout;
    while (resigning > 0 && clock::now() < give_up) {
        resign_done.expires_at(give_up);
        auto [ec] = co_await resign_done.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
    }
    // A successor that applies a lock-delay tells a resign from an expiry by
    // asking, when it sees our key go, whether our lease still exists: give
    // it that moment before the lease goes (etcd cannot say afterwards).
    auto const grace = std::min<clock::duration>(options.ttl / 3, 500ms);
    if (handed_over_at != clock::time_point{} && clock::now() < handed_over_at + grace) {
        tenure::detail::timer t(executor, handed_over_at + grace);
        auto [ec] = co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
    }
    try {
        co_await coro(client).lease_revoke(lease);
    } catch (system_error const& e) {
        if (!etcd_lease_not_found(e)) throw;
    }
}

asio::awaitable<std::optional<leader_info>> etcd_session::read_leader(std::string name) {
    auto self = shared_from_this();
    std::string prefix = name + "/";
    std::string end = etcd::prefix_end(prefix);
    etcd::range_options opts;
    opts.limit = 1;
    opts.order = etcd::sort_order::ascend;
    opts.target = etcd::sort_target::create;
    auto r = co_await coro(client).range(prefix, end, opts);
    if (r.kvs.empty()) co_return std::nullopt;
    auto const& kv = r.kvs.front();
    co_return leader_info{kv.value, etcd_lease_hex(kv.lease), static_cast<std::uint64_t>(kv.create_revision),
                          static_cast<std::uint64_t>(kv.mod_revision)};
}

// One put of `key` bound to `lease`, as a txn's operations.
std::vector<etcd::request_op> put_with_lease(std::string const& key, std::string const& value, std::int64_t lease) {
    etcd::put_op put;
    put.key = key;
    put.value = value;
    put.options.lease = lease;
    std::vector<etcd::request_op> ops;
    ops.emplace_back(std::move(put));
    return ops;
}

// etcd's Campaign txn: create `own_key` with our lease, else read it back
// (and proclaim a new value with the same lease). Its create revision, or 0
// when the key changed under us (campaign again). lock_conflict when another
// lease holds the key.
asio::awaitable<std::int64_t> put_candidate(etcd::client& client, std::string const& own_key, std::string const& value,
                                            std::int64_t lease) {
    std::vector<etcd::compare> cmps;
    cmps.push_back(etcd::compare::create_revision(own_key, etcd::compare_result::equal, 0));
    auto then_ops = put_with_lease(own_key, value, lease);
    etcd::range_op get;
    get.key = own_key;
    std::vector<etcd::request_op> else_ops;
    else_ops.emplace_back(std::move(get));
    auto t = co_await coro(client).txn(cmps, then_ops, else_ops);
    if (t.succeeded) co_return t.header.revision;
    etcd::key_value const* kv = nullptr;
    if (!t.responses.empty())
        if (auto* rr = std::get_if<etcd::range_response>(&t.responses[0]); rr && !rr->kvs.empty()) kv = &rr->kvs.front();
    if (!kv) co_return 0;  // deleted between compare and range
    if (kv->lease != lease) throw system_error(make_error_code(error::lock_conflict));
    std::int64_t const rev = kv->create_revision;
    if (kv->value != value) {
        std::vector<etcd::compare> same;
        same.push_back(etcd::compare::create_revision(own_key, etcd::compare_result::equal, rev));
        std::vector<etcd::request_op> no_ops;
        auto p = co_await coro(client).txn(same, put_with_lease(own_key, value, lease), no_ops);
        if (!p.succeeded) co_return 0;
    }
    co_return rev;
}

// etcd's Campaign, with the own key watched while waiting (no phantom
// leadership) and transient errors retried within the lease.
asio::awaitable<std::shared_ptr<scope_state>> etcd_session::acquire(claim c) {
    if (c.kind == claim_kind::slot) co_return co_await acquire_slot(std::move(c.key), c.limit, std::move(c.value), c.once);
    co_return co_await campaign(std::move(c.key), std::move(c.value), c.once);
}

asio::awaitable<claim_holders> etcd_session::read(claim_kind kind, std::string key, int limit) {
    if (kind == claim_kind::slot) co_return co_await read_slots(std::move(key), limit);
    claim_holders held;
    if (auto leader = co_await read_leader(std::move(key))) held.holders.push_back(std::move(*leader));
    co_return held;
}

asio::awaitable<std::shared_ptr<scope_state>> etcd_session::campaign(std::string name, std::string value, bool once) {
    auto self = std::static_pointer_cast<etcd_session>(shared_from_this());
    std::string const prefix = name + "/";
    std::string const own_key = prefix + id;
    std::int64_t my_rev = 0;
    clock::duration retry = 20ms;
    bool aborted = false;
    std::shared_ptr<etcd_election_scope> won;
    // Lock-delay emulation (etcd has none): the predecessor this candidate
    // waits on, and the end of the quiet period once it went with its lease.
    auto const delay = options.lock_delay_on_etcd ? std::max<clock::duration>(options.lock_delay, 0ns)
                                                  : clock::duration::zero();
    std::optional<etcd::key_value> pred;
    clock::time_point quiet_until{};

    try {
        for (;;) {
            std::optional<boost::system::error_code> fatal;
            bool transient = false;
            try {
                if (my_rev == 0) {
                    my_rev = co_await put_candidate(client, own_key, value, lease);
                    if (my_rev == 0) continue;  // the key changed under us: campaign again
                }

                // Wait for the predecessor, while watching our own key.
                auto v = co_await read_view(client, own_key, prefix, my_rev);
                if (!v.own || v.own->create_revision != my_rev) {
                    fatal = co_await etcd_why_gone(client, lease);
                } else if (v.own->lease != lease) {
                    fatal = make_error_code(error::released_by_other);
                } else if (pred && (!v.other || v.other->key != pred->key ||
                                    v.other->create_revision != pred->create_revision)) {
                    // The predecessor we waited on is gone: resigned (its
                    // lease lives on: no wait) or with its lease (expired or
                    // revoked: the quiet period starts now, when we saw it).
                    bool clean = true;
                    if (delay > clock::duration::zero() && pred->lease != 0)
                        clean = co_await lease_alive(client, pred->lease);
                    quiet_until = clean ? clock::time_point{} : clock::now() + delay;
                    pred.reset();
                    continue;  // read again: that check took a round trip
                } else if (!v.other && clock::now() < quiet_until) {
                    // First in line after a lease ended: wait out the
                    // lock-delay, still watching our own key (its loss, or
                    // the session's, ends the campaign with an error).
                    std::string own = own_key;
                    auto own_gone = wait_deleted(client, own, v.revision + 1);
                    auto quiet = sleep_until(quiet_until);
                    co_await race(std::move(own_gone), std::move(quiet));
                } else if (!v.other) {
                    auto st = std::make_shared<etcd_election_scope>(self, own_key, value, client, prefix, lease);
                    st->token = static_cast<std::uint64_t>(my_rev);
                    st->watch_from = v.revision + 1;
                    won = std::move(st);
                    break;
                } else if (once) {
                    co_await etcd_resign(client, own_key, my_rev);
                    co_return nullptr;
                } else {
                    if (delay > clock::duration::zero()) pred = v.other;  // tracked for the lock-delay only
                    std::string pred_key = v.other->key;
                    std::int64_t const from = v.revision + 1;
                    auto pred_gone = wait_deleted(client, pred_key, from);
                    auto own_gone = wait_deleted(client, own_key, from);
                    co_await race(std::move(pred_gone), std::move(own_gone));
                    retry = 20ms;
                    // Either way: re-read (the predecessor went, or our key did).
                }
            } catch (system_error const& e) {
                if (is_abort(e)) throw;
                if (e.code() == make_error_code(error::lock_conflict)) throw;
                if (etcd_lease_not_found(e)) fatal = make_error_code(error::session_invalidated);
                else transient = true;
            }
            if (fatal) {
                if (*fatal == make_error_code(error::session_invalidated)) lease_gone();
                throw system_error(*fatal);
            }
            if (transient) co_await pause_and_grow(retry);
        }
    } catch (system_error const& e) {
        if (!is_abort(e) || my_rev == 0) throw;
        aborted = true;
    }
    if (aborted) {
        // A cancelled campaign withdraws its candidacy (as etcd's Campaign does).
        co_await asio::this_coro::reset_cancellation_state();
        try {
            auto withdraw = etcd_resign(client, own_key, my_rev);
            co_await with_deadline(std::move(withdraw), clock::now() + 2s);
        } catch (system_error const&) {
        }
        throw system_error(asio::error::operation_aborted);
    }
    adopt(won);
    co_return won;
}

asio::awaitable<std::shared_ptr<session_impl>> create_etcd_session(etcd::client& client, session_options options) {
    if (options.ttl.count() <= 0) throw system_error(make_error_code(std::errc::invalid_argument));
    auto const ns = options.ttl.count();
    std::int64_t secs = (ns + 999'999'999) / 1'000'000'000;
    if (secs < 1) secs = 1;
    auto const sent = clock::now();
    auto granted = co_await coro(client).lease_grant(secs);
    auto impl = std::make_shared<etcd_session>(client, std::move(options), granted.id, sent);
    impl->start();
    co_return impl;
}

// ---- scope -------------------------------------------------------------------------

asio::awaitable<void> etcd_election_scope::send_release() {
    auto self = shared_from_this();
    auto sess = std::static_pointer_cast<etcd_session>(session);
    std::string own_key = key;
    ++sess->resigning;
    struct done_guard {
        etcd_session& s;
        ~done_guard() {
            if (--s.resigning == 0) s.resign_done.cancel();
        }
    } guard{*sess};
    std::string pfx = prefix;
    if (co_await resign_seeing_successor(client, own_key, pfx, static_cast<std::int64_t>(token)))
        sess->handed_over_at = clock::now();
}

asio::awaitable<boost::system::error_code> etcd_election_scope::check_held() {
    auto self = shared_from_this();
    std::string own_key = key;
    auto v = co_await read_view(client, own_key, prefix, 0);
    if (!v.own || v.own->create_revision != static_cast<std::int64_t>(token)) co_return co_await etcd_why_gone(client, lease);
    if (v.own->lease != lease) co_return make_error_code(error::released_by_other);
    if (!v.other || v.other->key != own_key) co_return make_error_code(error::released_by_other);
    co_return boost::system::error_code{};
}

// The guard of concurrency.Mutex's IsOwner, plus the lease: our key, with
// the token's create revision, on our lease. (A key that is still ours is
// still the leader, or still admitted: keys created later sort behind it.)
asio::awaitable<bool> etcd_election_scope::fenced_write(std::vector<write_op> writes) {
    auto self = shared_from_this();
    std::vector<etcd::compare> guard;
    guard.push_back(etcd::compare::create_revision(key, etcd::compare_result::equal, static_cast<std::int64_t>(token)));
    guard.push_back(etcd::compare::lease(key, etcd::compare_result::equal, lease));
    std::vector<etcd::request_op> ops;
    ops.reserve(writes.size());
    for (auto& w : writes) {
        if (w.op == write_op::kind::put) {
            etcd::put_op put;
            put.key = std::move(w.key);
            put.value = std::move(w.value);
            ops.emplace_back(std::move(put));
        } else {
            etcd::delete_op del;
            del.key = std::move(w.key);
            ops.emplace_back(std::move(del));
        }
    }
    std::vector<etcd::request_op> no_ops;
    auto r = co_await coro(client).txn(std::move(guard), std::move(ops), std::move(no_ops));
    co_return r.succeeded;
}

// Watches the own key: loss when it is deleted (key_deleted, or
// session_invalidated when the lease went with it) or re-created / taken
// over by another lease. Transient errors are retried: the session's local
// deadline decides when an unreachable etcd means loss.
asio::awaitable<void> etcd_election_scope::monitor() {
    auto self = shared_from_this();
    auto sess = std::static_pointer_cast<etcd_session>(session);
    std::string const own_key = key;
    std::int64_t from = watch_from;
    clock::duration retry = 20ms;
    while (status == scope_status::held) {
        std::optional<boost::system::error_code> why;
        bool reread = false;
        try {
            etcd::watch_options wo;
            wo.start_revision = from;
            std::string no_end;
            auto w = co_await coro(client).watch(own_key, no_end, wo);
            retry = 20ms;
            while (!why) {
                auto r = co_await watch_next(w);
                for (auto const& ev : r.events) {
                    from = ev.kv.mod_revision + 1;
                    if (ev.type == etcd::event_type::del) {
                        why = co_await etcd_why_gone(client, lease);
                        break;
                    }
                    if (ev.kv.create_revision != static_cast<std::int64_t>(token) || ev.kv.lease != lease) {
                        why = make_error_code(error::released_by_other);
                        break;
                    }
                }
            }
        } catch (system_error const& e) {
            if (status != scope_status::held || is_abort(e)) co_return;
            reread = true;
        }
        if (status != scope_status::held) co_return;
        if (why) {
            if (*why == make_error_code(error::session_invalidated)) sess->lease_gone();
            lose(*why);
            co_return;
        }
        if (reread) {
            // The watch failed (compaction, a member going away): check the
            // key directly, then watch again from that read.
            co_await pause_and_grow(retry);  // throws operation_aborted when the monitor is stopped
            try {
                std::string end;
                etcd::range_options ro;
                auto r = co_await coro(client).range(own_key, end, ro);
                if (status != scope_status::held) co_return;
                if (r.kvs.empty() || r.kvs.front().create_revision != static_cast<std::int64_t>(token)) {
                    auto g = co_await etcd_why_gone(client, lease);
                    if (status != scope_status::held) co_return;
                    if (g == make_error_code(error::session_invalidated)) sess->lease_gone();
                    lose(g);
                    co_return;
                }
                from = r.header.revision + 1;
            } catch (system_error const& e) {
                if (is_abort(e)) co_return;
            }
        }
    }
}

// ---- leader observer ---------------------------------------------------------------

namespace {

leader_info to_leader_info(etcd::key_value const& kv) {
    return leader_info{kv.value, etcd_lease_hex(kv.lease), static_cast<std::uint64_t>(kv.create_revision),
                       static_cast<std::uint64_t>(kv.mod_revision)};
}

bool same_leader(std::optional<leader_info> const& a, std::optional<leader_info> const& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a || (a->session == b->session && a->lock_index == b->lock_index && a->value == b->value);
}

// The leader (oldest create revision under the prefix) and the read's revision.
asio::awaitable<std::optional<leader_info>> read_oldest(etcd_observer& o, std::int64_t& revision) {
    std::string key = o.prefix;
    std::string end = etcd::prefix_end(o.prefix);
    etcd::range_options opts;
    opts.limit = 1;
    opts.order = etcd::sort_order::ascend;
    opts.target = etcd::sort_target::create;
    auto r = co_await coro(o.client).range(key, end, opts);
    revision = r.header.revision;
    if (r.kvs.empty()) {
        o.leader_key.clear();
        co_return std::nullopt;
    }
    o.leader_key = r.kvs.front().key;
    co_return to_leader_info(r.kvs.front());
}

}  // namespace

asio::awaitable<std::optional<leader_info>> etcd_observer::next() {
    etcd_observer& o = *this;
    for (;;) {
        try {
            if (!o.watch || !o.watch->is_open()) {
                // (Re)start: read, then watch from right after that read
                // (opened by the next call, so a one-shot read needs no watch).
                o.watch.reset();
                if (o.watch_from == 0) {
                    std::int64_t rev = 0;
                    auto info = co_await read_oldest(o, rev);
                    o.watch_from = rev + 1;
                    if (first || !same_leader(info, last)) {
                        first = false;
                        last = info;
                        co_return info;
                    }
                }
                etcd::watch_options wo;
                wo.start_revision = o.watch_from;
                std::string key = o.prefix;
                std::string end = etcd::prefix_end(o.prefix);
                auto w = co_await coro(o.client).watch(key, end, wo);
                o.watch.emplace(std::move(w));
                o.watch_from = 0;  // a broken watch is followed by a new read
            }
            auto r = co_await watch_next(*o.watch);
            // Only a change of the leader's own key, or any key while there
            // is none, can change the answer.
            bool reread = false;
            for (auto const& ev : r.events)
                if (o.leader_key.empty() || ev.kv.key == o.leader_key) reread = true;
            if (!reread) continue;
            std::int64_t rev = 0;
            auto info = co_await read_oldest(o, rev);
            if (!same_leader(info, last)) {
                last = info;
                co_return info;
            }
        } catch (system_error const& e) {
            o.watch.reset();
            o.watch_from = 0;
            if (is_abort(e)) throw;
            // History we were watching from was compacted: read again.
            if (e.code() == make_error_code(error::etcd_compacted)) continue;
            throw;
        }
    }
}

}  // namespace tenure::detail

namespace tenure {

leader_observer::leader_observer(etcd::client& client, std::string key) : executor_(client.get_executor()) {
    if (key.empty()) throw std::invalid_argument("tenure::leader_observer needs an election name");
    backend_ = std::make_shared<detail::etcd_observer>(client, std::move(key));
}

boost::asio::awaitable<session> session::create_impl(etcd::client& client, session_options options) {
    co_return session(co_await detail::create_etcd_session(client, std::move(options)));
}

boost::asio::awaitable<void> detail::campaign_op(etcd::client& client, campaign_options options,
                                    std::function<boost::asio::awaitable<void>(leadership_scope&)> body) {
    auto create = [&client](session_options const& o) { return session::create(client, o, boost::asio::use_awaitable); };
    return detail::campaign_loop(create, std::move(options), std::move(body));
}

}  // namespace tenure
