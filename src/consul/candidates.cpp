// The candidate registry beside a Consul lock key, and the transfer
// transaction (see candidates.hpp and docs/guide/priorities-and-transfer.md).
#include "consul/candidates.hpp"
#include "consul/lock.hpp"

#include <tenure/detail/random.hpp>

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/json/monotonic_resource.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <boost/json/value.hpp>

#include <algorithm>
#include <charconv>

namespace tenure::detail {

namespace json = boost::json;
using boost::system::system_error;

std::string encode_candidate(std::string const& name, std::string const& value, int priority, std::uint64_t nonce) {
    json::object o;
    o["Name"] = name;
    o["Value"] = value;
    o["Priority"] = priority;
    o["Nonce"] = nonce;
    return json::serialize(o);
}

std::string encode_transfer_request(std::string const& to) {
    json::object o;
    o["To"] = to;
    return json::serialize(o);
}

std::string decode_transfer_request(std::optional<std::string> const& value) {
    if (!value) return {};
    boost::system::error_code ec;
    auto v = json::parse(*value, ec);
    if (ec || !v.is_object()) return {};
    auto const* to = v.as_object().if_contains("To");
    return to && to->is_string() ? std::string(to->as_string()) : std::string{};
}

std::optional<priority_marker> decode_priority_marker(std::optional<std::string> const& value) {
    if (!value || value->empty()) return std::nullopt;
    priority_marker m;
    char const* const end = value->data() + value->size();
    auto const [rest, ec] = std::from_chars(value->data(), end, m.priority);
    if (ec != std::errc{}) return std::nullopt;
    if (rest == end) return m;
    if (*rest != ' ') return std::nullopt;
    m.first.assign(rest + 1, end);
    if (m.first.empty() || m.first.find_first_of(" /") != std::string::npos) return std::nullopt;
    return m;
}

std::string encode_priority_marker(int priority, std::string const& session) {
    return std::to_string(priority) + " " + session;
}

bool takes_marker(std::optional<priority_marker> const& known, int priority) {
    // Equals keep the one named: it registered first.
    return !known || priority > known->priority || (priority == known->priority && known->first.empty());
}

std::optional<candidate_info> candidate_from_entry(consul::kv_pair const& p, std::string_view session) {
    candidate_info c;
    c.session = session;
    c.since = p.create_index;
    if (!p.value) return c;
    // The parsed document lives only here: no heap for a small one (a
    // release reads its named candidate's entry on every handover).
    unsigned char scratch[1024];
    json::monotonic_resource mr(scratch, sizeof scratch);
    boost::system::error_code ec;
    auto v = json::parse(*p.value, ec, &mr);
    if (ec || !v.is_object()) return c;
    auto const& o = v.as_object();
    if (auto const* n = o.if_contains("Name"); n && n->is_string()) c.name = n->as_string();
    if (auto const* n = o.if_contains("Value"); n && n->is_string()) c.value = n->as_string();
    if (auto const* n = o.if_contains("Priority"); n && n->is_int64()) c.priority = static_cast<int>(n->as_int64());
    return c;
}

registry_view parse_registry(std::string const& key, std::vector<consul::kv_pair> const& pairs, std::uint64_t index) {
    registry_view v;
    v.index = index;
    // Classified by the names after the key, without building them: a
    // release parses the registry on every handover.
    for (auto const& p : pairs) {
        std::string_view const k = p.key;
        if (!k.starts_with(key)) continue;
        auto const rest = k.substr(key.size());
        if (rest.empty()) {
            v.lock = p;
        } else if (rest == transfer_suffix) {
            if (p.flags == transfer_flag_value) v.request = p;
        } else if (rest.starts_with(registry_dir)) {
            auto const sid = rest.substr(registry_dir.size());
            if (sid == marker_name) {
                v.marker = p;
            } else if (sid == seen_name) {
                v.seen = p;
            } else if (p.flags == candidate_flag_value) {
                if (sid.empty() || sid.front() == '.' || sid.find('/') != std::string_view::npos) continue;
                // Live while its own session holds it: a session that ended left
                // it unlocked (behaviour release) or took it along (delete).
                if (p.session != sid) {
                    v.stale.push_back(p);
                    continue;
                }
                if (auto c = candidate_from_entry(p, sid)) v.live.push_back(std::move(*c));
            }
        }
    }
    std::stable_sort(v.live.begin(), v.live.end(), ranks_before);
    return v;
}

asio::awaitable<registry_view> read_registry(consul::client& c, std::string const& key, bool with_key,
                                             std::uint64_t index, std::chrono::nanoseconds wait) {
    // Named: g++ 12 destroys a ?: temporary twice across a co_await.
    std::string prefix = key;
    if (!with_key) prefix = candidates_prefix(key);
    auto r = co_await coro(c).kv_list(std::move(prefix), consistent_read(index, wait));
    co_return parse_registry(key, r.value, r.meta.index);
}

asio::awaitable<void> prune_stale(consul::client& c, std::vector<consul::kv_pair> const& stale) {
    for (auto const& p : stale) {
        try {
            co_await coro(c).kv_delete(p.key, p.modify_index);
        } catch (system_error const& e) {
            if (is_abort(e)) throw;
        }
    }
}

asio::awaitable<std::optional<std::uint64_t>> waits_as_candidate(consul::client& c, std::string const& key,
                                                                 std::string const& session, std::uint64_t index,
                                                                 std::chrono::nanoseconds wait) {
    // Named: g++ 12 mishandles temporaries inside a co_await expression.
    std::string entry = candidate_key(key, session);
    auto r = co_await coro(c).kv_get(std::move(entry), consistent_read(index, wait));
    if (r.value && r.value->session == session && r.value->flags == candidate_flag_value) co_return r.meta.index;
    co_return std::nullopt;
}

void append_naming_ops(std::vector<consul::txn_op>& ops, std::string const& key, std::uint64_t at,
                       candidate_info const& next, bool locked) {
    std::string value = encode_priority_marker(next.priority, next.session);
    if (!locked) {
        consul::txn_op& cas = ops.emplace_back();
        cas.verb = "cas";  // index 0: only while there is none
        cas.key = priority_marker_key(key);
        cas.value = std::move(value);
        cas.index = at;
        return;
    }
    // A lock held by the one named before cannot be moved by `lock`: the
    // marker is replaced (compare-and-delete, or checked absent) and locked
    // afresh for `next`, in one transaction.
    consul::txn_op& was = ops.emplace_back();
    was.key = priority_marker_key(key);
    if (at != 0) {
        was.verb = "delete-cas";
        was.index = at;
    } else {
        was.verb = "check-not-exists";
    }
    consul::txn_op& lock = ops.emplace_back();
    lock.verb = "lock";
    lock.key = priority_marker_key(key);
    lock.value = std::move(value);
    lock.session = next.session;
}

bool refused_for_lock_delay(consul::txn_result const& r) {
    return !r.committed && !r.errors.empty() && std::all_of(r.errors.begin(), r.errors.end(), [](consul::txn_error const& e) {
        return e.what.find("lock delay") != std::string::npos;
    });
}

consul::txn_op named_in_marker(std::string const& key, std::string const& session) {
    consul::txn_op guard;
    guard.verb = "check-session";
    guard.key = priority_marker_key(key);
    guard.session = session;
    return guard;
}

asio::awaitable<std::optional<consul::kv_pair>> name_next_best(consul::client& c, std::string const& key,
                                                               std::string const& self, registry_view const& reg,
                                                               bool always) {
    auto const& marker = reg.marker;
    auto const known = marker ? decode_priority_marker(marker->value) : std::nullopt;
    auto const best = best_other_than(reg.live, self);
    if (!always && !(known && (known->first == self || known->first.empty()))) {
        if (known && best && known->first == best->session && marker->session == best->session)
            co_return marker;
        co_return std::nullopt;
    }
    std::uint64_t const at = marker ? marker->modify_index : 0;
    if (!best) {
        std::string mk = priority_marker_key(key);  // named: see read_registry
        if (at != 0) co_await coro(c).kv_delete(std::move(mk), at);
        co_return std::nullopt;
    }
    if (known && known->first == best->session && known->priority == best->priority && marker->session == best->session)
        co_return marker;
    for (bool locked : {true, false}) {
        std::vector<consul::txn_op> ops;
        append_naming_ops(ops, key, at, *best, locked);
        auto r = co_await coro(c).txn(std::move(ops));
        if (r.committed) {
            // The marker's answer is the last: the lock (or the cas) that wrote
            // it. A write's answer leaves the value out (as Consul's does).
            if (r.results.empty() || r.results.back().key != priority_marker_key(key)) co_return std::nullopt;
            auto written = std::move(r.results.back());
            written.value = encode_priority_marker(best->priority, best->session);
            co_return written;
        }
        if (!refused_for_lock_delay(r)) co_return std::nullopt;  // the marker moved: a better one stays
    }
    co_return std::nullopt;
}

std::optional<candidate_info> find_candidate(std::vector<candidate_info> const& live, std::string const& target,
                                             std::string const& self) {
    for (auto const& c : live)
        if (c.session == target && c.session != self) return c;
    for (auto const& c : live)  // best first: the best of that name
        if (c.name == target && c.session != self) return c;
    return std::nullopt;
}

namespace {

// The transaction of transfer_txn, and what its answer means. A plain class:
// the coroutine's frame then holds only this (a frame past 1 KiB takes
// malloc's slow path, paid once per handover).
class handover {
public:
    handover(std::string const& key, std::string const& holder, std::string const& holder_value,
             candidate_info const& target, std::optional<consul::kv_pair> const& marker,
             std::vector<candidate_info> const* live, consul::txn_op const* guard)
        : key_(key), holder_(holder), holder_value_(holder_value), target_(target), marker_(marker), live_(live),
          guard_(guard), entry_(candidate_key(key, target.session)),
          named_(marker ? decode_priority_marker(marker->value) : std::nullopt) {
        // With the registry as read: who to name next in this transaction.
        if (live) {
            auto const it = std::find_if(live->begin(), live->end(), [&](candidate_info const& ci) {
                return ci.session != holder && ci.session != target.session;
            });
            if (it != live->end()) next_ = *it;
        }
    }

    bool names_next() const noexcept { return next_.has_value(); }

    // `lock_marker`: name the next best with the marker locked by its session.
    std::vector<consul::txn_op> ops(bool lock_marker) const {
        std::uint64_t const marker_at = marker_ ? marker_->modify_index : 0;
        std::vector<consul::txn_op> ops;
        ops.reserve(11);
        if (guard_) ops.push_back(*guard_);
        consul::txn_op& waits = ops.emplace_back();
        waits.verb = "check-session";
        waits.key = entry_;
        waits.session = target_.session;
        consul::txn_op& unlock = ops.emplace_back();
        unlock.verb = "unlock";
        unlock.key = key_;
        unlock.value = holder_value_;
        unlock.flags = consul::lock_flag_value;
        unlock.session = holder_;
        consul::txn_op& lock = ops.emplace_back();
        lock.verb = "lock";
        lock.key = key_;
        lock.value = target_.value;
        lock.flags = consul::lock_flag_value;
        lock.session = target_.session;
        // The target waits no more: its entry goes with the wait it ends.
        consul::txn_op& gone = ops.emplace_back();
        gone.verb = "delete";
        gone.key = entry_;
        if (next_) {
            bool const as_is = named_ && named_->first == next_->session && named_->priority == next_->priority &&
                               (!lock_marker || marker_->session == next_->session);
            if (!as_is) append_naming_ops(ops, key_, marker_at, *next_, lock_marker);
        } else if (marker_ && (live_ || (named_ && named_->first == target_.session))) {
            consul::txn_op& op = ops.emplace_back();
            op.verb = "delete-cas";
            op.key = marker_->key;
            op.index = marker_at;
        }
        consul::txn_op& seen = ops.emplace_back();
        seen.verb = "set";
        seen.key = registry_seen_key(key_);
        seen.value = std::to_string(random_seed());
        if (next_) {
            // The one named next still waits: the registry may have been
            // read long ago (a holder's note, handover_note), and a marker
            // naming a candidate that left would cost the next freeing a read.
            consul::txn_op& still = ops.emplace_back();
            still.verb = "check-session";
            still.key = candidate_key(key_, next_->session);
            still.session = next_->session;
        }
        if (!live_) {
            // Read back, for the caller to name the next best from.
            consul::txn_op& tree = ops.emplace_back();
            tree.verb = "get-tree";
            tree.key = candidates_prefix(key_);
        }
        return ops;
    }

    transfer_outcome outcome(consul::txn_result r) const {
        transfer_outcome out;
        if (r.committed) {
            // The key's and the target's entry's answers go: the key to `held`
            // (moved, not copied), and the check-session answer shows the
            // entry as it was before the delete: not part of what the
            // registry is now.
            std::size_t kept = 0;
            for (auto& p : r.results) {
                if (p.key == key_ || p.key == entry_) {
                    if (p.key == key_ && p.session == target_.session) out.held = std::move(p);
                    continue;
                }
                if (&r.results[kept] != &p) r.results[kept] = std::move(p);
                ++kept;
            }
            r.results.erase(r.results.begin() + static_cast<std::ptrdiff_t>(kept), r.results.end());
            if (!live_) out.after = std::make_unique<registry_view>(parse_registry(key_, r.results, 0));
            return out;
        }
        std::size_t const unlock_at = guard_ ? 2 : 1;  // the op whose refusal means `holder` lost the key
        for (auto const& e : r.errors) {
            if (e.op_index == unlock_at) out.holder_lost = true;
            if (e.op_index == unlock_at - 1) out.target_gone = true;
        }
        return out;
    }

private:
    std::string const& key_;
    std::string const& holder_;
    std::string const& holder_value_;
    candidate_info const& target_;
    std::optional<consul::kv_pair> const& marker_;
    std::vector<candidate_info> const* live_;
    consul::txn_op const* guard_;
    std::string entry_;
    std::optional<priority_marker> named_;
    std::optional<candidate_info> next_;
};

}  // namespace

asio::awaitable<transfer_outcome> transfer_txn(consul::client& c, std::string const& key, std::string const& holder,
                                               std::string const& holder_value, candidate_info const& target,
                                               std::optional<consul::kv_pair> const& marker,
                                               std::vector<candidate_info> const* live,
                                               consul::txn_op const* guard) {
    handover const h(key, holder, holder_value, target, marker, live, guard);
    auto r = co_await coro(c).txn(h.ops(true));
    if (h.names_next() && refused_for_lock_delay(r)) {
        // The marker's lock is in its lock-delay (the session it was locked
        // by was invalidated): the handover goes through with a plain
        // compare-and-set of the marker.
        r = co_await coro(c).txn(h.ops(false));
    }
    co_return h.outcome(std::move(r));
}

bool needs_naming(registry_view const& after) { return after.marker || !after.live.empty(); }

}  // namespace tenure::detail
