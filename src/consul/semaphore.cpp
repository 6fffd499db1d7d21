// Consul's semaphore protocol (api/semaphore.go), byte for byte: contender
// keys `prefix/<session>` held with the semaphore flag value, the
// coordination key `prefix/.lock` written only by CAS with Go's compact JSON,
// dead holders pruned by whoever writes next. Behind tenure::semaphore.
#include "consul/lock.hpp"
#include "consul/semaphore_codec.hpp"
#include "net/go_path.hpp"
#include "net/strings.hpp"

#include <boost/asio/this_coro.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <set>
#include <stdexcept>

namespace tenure {

namespace asio = boost::asio;
using boost::system::system_error;

namespace detail {

using namespace std::chrono_literals;

// ---- Go encodings -------------------------------------------------------------------

namespace {

std::pair<long, std::size_t> decode_rune(std::string_view s) {
    auto const b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    unsigned char const c0 = b(0);
    if (c0 < 0x80) return {c0, 1};
    auto cont = [&](std::size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
        return k < s.size() && b(k) >= lo && b(k) <= hi;
    };
    if (c0 >= 0xC2 && c0 <= 0xDF) {
        if (!cont(1)) return {-1, 1};
        return {((c0 & 0x1F) << 6) | (b(1) & 0x3F), 2};
    }
    if (c0 >= 0xE0 && c0 <= 0xEF) {
        unsigned char lo = c0 == 0xE0 ? 0xA0 : 0x80, hi = c0 == 0xED ? 0x9F : 0xBF;
        if (!cont(1, lo, hi) || !cont(2)) return {-1, 1};
        return {((c0 & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F), 3};
    }
    if (c0 >= 0xF0 && c0 <= 0xF4) {
        unsigned char lo = c0 == 0xF0 ? 0x90 : 0x80, hi = c0 == 0xF4 ? 0x8F : 0xBF;
        if (!cont(1, lo, hi) || !cont(2) || !cont(3)) return {-1, 1};
        return {(static_cast<long>(c0 & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F),
                4};
    }
    return {-1, 1};
}

}  // namespace

std::string go_json_quote(std::string_view s) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() + 2);
    out += '"';
    std::size_t i = 0;
    while (i < s.size()) {
        auto const c = static_cast<unsigned char>(s[i]);
        if (c < 0x80) {
            ++i;
            if (c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&') {
                out += static_cast<char>(c);
                continue;
            }
            switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            default:  // control characters and the HTML-sensitive <, >, &
                out += "\\u00";
                out += hex[c >> 4];
                out += hex[c & 0xF];
            }
            continue;
        }
        auto const [rune, width] = decode_rune(s.substr(i));
        if (rune < 0) {
            out += "\\ufffd";
        } else if (rune == 0x2028 || rune == 0x2029) {
            out += "\\u202";
            out += hex[rune & 0xF];
        } else {
            out.append(s.substr(i, width));
        }
        i += width;
    }
    out += '"';
    return out;
}

std::string encode_semaphore_lock(semaphore_lock const& l) {
    std::string out = "{\"Limit\":" + std::to_string(l.limit) + ",\"Holders\":{";
    bool first = true;
    for (auto const& [sid, held] : l.holders) {
        if (!first) out += ',';
        first = false;
        out += go_json_quote(sid);
        out += held ? ":true" : ":false";
    }
    out += "}}";
    return out;
}

std::optional<semaphore_lock> decode_semaphore_lock(std::string_view text) {
    namespace json = boost::json;
    boost::system::error_code ec;
    json::value v = json::parse(text, ec);
    if (ec) return std::nullopt;
    semaphore_lock out;
    if (v.is_null()) return out;
    auto const* o = v.if_object();
    if (!o) return std::nullopt;
    for (auto const& m : *o) {
        json::value const& x = m.value();
        if (iequals(m.key(), "Limit")) {
            if (x.is_null()) continue;
            if (!x.is_int64()) return std::nullopt;  // Go's int: no fraction, no exponent, no overflow
            out.limit = x.get_int64();
        } else if (iequals(m.key(), "Holders")) {
            if (x.is_null()) {
                out.holders.clear();
                continue;
            }
            auto const* h = x.if_object();
            if (!h) return std::nullopt;
            for (auto const& e : *h) {
                if (e.value().is_null()) out.holders[std::string(e.key())] = false;
                else if (e.value().is_bool()) out.holders[std::string(e.key())] = e.value().get_bool();
                else return std::nullopt;
            }
        }
    }
    return out;
}

// ---- the permit ---------------------------------------------------------------------

namespace {

consul::kv_pair const* find_key(std::vector<consul::kv_pair> const& pairs, std::string const& key) {
    for (auto const& p : pairs)
        if (p.key == key) return &p;
    return nullptr;
}

// pruneDeadHolders: a holder is alive while its session holds some key
// listed under the prefix.
void prune(semaphore_lock& l, std::vector<consul::kv_pair> const& pairs) {
    std::set<std::string, std::less<>> alive;
    for (auto const& p : pairs)
        if (!p.session.empty()) alive.insert(p.session);
    std::erase_if(l.holders, [&](auto const& h) { return !alive.contains(h.first); });
}

// decodeLock: a missing `.lock` (or one without a value) is empty, with our limit.
std::optional<semaphore_lock> lock_of(consul::kv_pair const* pair, int limit) {
    if (!pair || !pair->value) return semaphore_lock{limit, {}};
    return decode_semaphore_lock(*pair->value);
}

}  // namespace

struct consul_permit_scope final : scope_state {
    consul_permit_scope(std::shared_ptr<session_impl> s, std::string contender, std::string v, consul::client& c,
                        std::string p, std::string lk, int lim)
        : scope_state(std::move(s), std::move(contender), std::move(v)), client(c), prefix(std::move(p)),
          lock_key(std::move(lk)), limit(lim) {}

    consul::client& client;
    std::string prefix;    // listed with ?recurse, as given
    std::string lock_key;  // prefix/.lock
    int limit;

    // {} while this session is still a live holder according to `pairs`
    // (a listing of the prefix), else why not.
    asio::awaitable<boost::system::error_code> judge(std::vector<consul::kv_pair> const& pairs) {
        auto const* mine = find_key(pairs, key);
        if (!mine || mine->session != session->id) {
            auto why = make_error_code(mine ? error::released_by_other : error::key_deleted);
            if (!mine || mine->session.empty()) {
                // Deleted (behavior delete) or freed (behavior release) without
                // us: was our session invalidated?
                bool gone = false;
                try {
                    auto info = co_await coro(client).session_info_get(session->id);
                    gone = !info.value.has_value();
                } catch (system_error const&) {
                }
                if (gone) why = make_error_code(error::session_invalidated);
            }
            co_return why;
        }
        auto const* lp = find_key(pairs, lock_key);
        if (lp && lp->flags != consul::semaphore_flag_value) co_return make_error_code(error::released_by_other);
        auto lock = lock_of(lp, limit);
        if (!lock) co_return make_error_code(error::released_by_other);
        prune(*lock, pairs);
        if (!lock->holders.contains(session->id)) co_return make_error_code(error::released_by_other);
        co_return boost::system::error_code{};
    }

    // Consistent blocking queries on the prefix; loss when we are no longer a
    // live holder. Errors are retried: the session's local deadline decides
    // when an unreachable server means loss.
    asio::awaitable<void> monitor() override {
        auto self = shared_from_this();
        std::uint64_t index = token;
        clock::duration retry = 20ms;
        while (status == scope_status::held) {
            std::optional<consul::read_result<std::vector<consul::kv_pair>>> r;
            try {
                r = co_await coro(client).kv_list(prefix, consistent_read(index));
                retry = 20ms;
            } catch (system_error const& e) {
                if (status != scope_status::held || is_abort(e)) co_return;
            }
            if (status != scope_status::held) co_return;
            if (!r) {
                co_await pause_and_grow(retry);  // throws operation_aborted when the monitor is stopped
                continue;
            }
            auto why = co_await judge(r->value);
            if (status != scope_status::held) co_return;
            if (why) {
                lose(why);
                co_return;
            }
            index = consul::next_wait_index(index, r->meta.index);
        }
    }

    asio::awaitable<boost::system::error_code> check_held() override {
        auto self = shared_from_this();
        auto r = co_await coro(client).kv_list(prefix, consistent_read());
        co_return co_await judge(r.value);
    }

    // The guard is the contender key (see fenced_write.hpp).
    asio::awaitable<bool> fenced_write(std::vector<write_op> writes) override {
        return consul_fenced_write(client, *this, std::move(writes));
    }

    // Semaphore.Release: remove ourselves from `.lock` by CAS (re-read on a
    // lost race), then delete the contender key.
    asio::awaitable<void> send_release() override {
        auto self = shared_from_this();
        for (;;) {
            auto r = co_await coro(client).kv_get(lock_key);
            // Never overwrite a `.lock` that is not (or no longer) a semaphore's.
            if (!r.value || r.value->flags != consul::semaphore_flag_value) break;
            auto lock = lock_of(&*r.value, limit);
            if (!lock || lock->holders.erase(session->id) == 0) break;
            std::optional<std::string> body = encode_semaphore_lock(*lock);
            consul::put_options po;
            po.flags = consul::semaphore_flag_value;
            po.cas = r.value->modify_index;
            if (co_await coro(client).kv_put(lock_key, body, po)) break;
        }
        co_await coro(client).kv_delete(key);
    }
};

namespace {

// Is `contender` the key of a permit this session still holds?
bool contender_in_use(session_impl& s, std::string const& contender) {
    for (auto const& w : s.scopes)
        if (auto sc = w.lock(); sc && sc->key == contender && sc->status == scope_status::held) return true;
    return false;
}

// The acquisition loop (Semaphore.Acquire, minus its fixed waits): make the
// contender entry, then read the prefix (blocking on the last index while
// the semaphore is full), prune dead holders and CAS ourselves into `.lock`.
asio::awaitable<std::shared_ptr<scope_state>> permit_campaign(std::shared_ptr<consul_session> self,
                                                              std::string prefix, std::string contender,
                                                              std::string lock_key, int limit, std::string value,
                                                              bool once) {
    consul::client& client = self->client;
    std::string const& id = self->id;
    std::optional<std::string> const body_value = value;
    clock::duration error_retry = 20ms;
    std::uint64_t index = 0;
    bool need_contender = true;

    for (;;) {
        bool transient = false;
        if (need_contender) {
            bool made = false;
            try {
                made = co_await coro(client).kv_acquire(contender, id, body_value, consul::semaphore_flag_value);
            } catch (system_error const& ex) {
                if (is_abort(ex)) throw;
                transient = true;
            }
            if (transient) {
                co_await pause_and_grow(error_retry);
                continue;
            }
            // Our own key, held by someone else: not a semaphore we can use.
            if (!made) throw system_error(make_error_code(error::lock_conflict), "failed to make contender entry");
            need_contender = false;
            index = 0;
        }

        std::optional<consul::read_result<std::vector<consul::kv_pair>>> r;
        try {
            r = co_await coro(client).kv_list(prefix, consistent_read(index));
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
        auto const& pairs = r->value;
        auto const* lp = find_key(pairs, lock_key);
        if (lp && lp->flags != consul::semaphore_flag_value) throw system_error(make_error_code(error::lock_conflict));
        auto lock = lock_of(lp, limit);
        if (!lock) throw system_error(make_error_code(error::unexpected_response), "lock decoding failed: " + lock_key);
        if (lock->limit != limit)
            throw system_error(make_error_code(error::semaphore_limit_conflict),
                               "lock: " + std::to_string(lock->limit) + ", local: " + std::to_string(limit));
        auto const* mine = find_key(pairs, contender);
        if (!mine || mine->session != id) {
            need_contender = true;  // our contender entry went away meanwhile: make it again
            continue;
        }
        prune(*lock, pairs);
        std::uint64_t const lock_index = lp ? lp->modify_index : 0;

        std::uint64_t token = 0;
        if (lock->holders.contains(id)) {
            // Already a live holder (a CAS whose answer was lost, or a second
            // permit of this session): that slot is ours.
            token = lock_index;
        } else {
            if (lock->holders.size() >= static_cast<std::size_t>(limit)) {
                if (once) co_return nullptr;
                index = consul::next_wait_index(index, r->meta.index);
                continue;
            }
            lock->holders[id] = true;
            std::optional<std::string> body = encode_semaphore_lock(*lock);
            consul::put_options po;
            po.flags = consul::semaphore_flag_value;
            po.cas = lock_index;  // 0: create only if absent
            bool set = false;
            try {
                set = co_await coro(client).kv_put(lock_key, body, po);
            } catch (system_error const& ex) {
                if (is_abort(ex)) throw;
                transient = true;
            }
            if (transient) {
                co_await pause_and_grow(error_retry);
                index = 0;
                continue;
            }
            if (!set) {  // another contender wrote first: look again
                index = 0;
                continue;
            }
            // Admitted. Read `.lock` back for the ModifyIndex of our write.
            std::optional<consul::read_result<std::optional<consul::kv_pair>>> back;
            while (!back) {
                try {
                    back = co_await coro(client).kv_get(lock_key, consistent_read());
                } catch (system_error const& ex) {
                    if (is_abort(ex)) throw;
                }
                if (!back) co_await pause_and_grow(error_retry);
            }
            if (back->value && back->value->flags == consul::semaphore_flag_value) {
                auto now = lock_of(&*back->value, limit);
                if (now && now->holders.contains(id)) token = back->value->modify_index;
            }
            if (token == 0) {  // removed at once (forced out): campaign again
                index = 0;
                continue;
            }
        }
        auto st = std::make_shared<consul_permit_scope>(self, contender, value, client, prefix, lock_key, limit);
        st->token = token;
        self->adopt(st);
        co_return st;
    }
}

}  // namespace

asio::awaitable<std::shared_ptr<scope_state>> consul_session::acquire_permit(std::string prefix, int limit,
                                                                             std::string value, bool once) {
    auto self = std::static_pointer_cast<consul_session>(shared_from_this());
    std::string contender = go_path_join(prefix, id);
    std::string lock_key = go_path_join(prefix, semaphore_key);
    std::shared_ptr<scope_state> permit;
    std::exception_ptr failure;
    try {
        permit = co_await permit_campaign(self, prefix, contender, lock_key, limit, value, once);
    } catch (...) {
        failure = std::current_exception();
    }
    if (!permit) {
        // Not admitted (full, an error, cancelled): take our contender entry
        // away again so it does not linger, unless a permit of ours uses it.
        co_await asio::this_coro::reset_cancellation_state();
        if (!contender_in_use(*this, contender)) {
            try {
                co_await with_deadline(coro(client).kv_delete(contender), clock::now() + std::chrono::seconds{2});
            } catch (system_error const&) {
                // Pruned anyway once the session ends.
            }
        }
    }
    if (failure) std::rethrow_exception(failure);
    co_return permit;
}

asio::awaitable<claim_holders> consul_session::read_slots(std::string prefix, int limit) {
    auto self = shared_from_this();
    std::string lock_key = go_path_join(prefix, semaphore_key);
    auto r = co_await coro(client).kv_list(prefix, consistent_read());
    auto const* lp = find_key(r.value, lock_key);
    if (lp && lp->flags != consul::semaphore_flag_value) throw system_error(make_error_code(error::lock_conflict));
    auto lock = lock_of(lp, limit);
    if (!lock) throw system_error(make_error_code(error::unexpected_response), "lock decoding failed: " + lock_key);
    prune(*lock, r.value);
    claim_holders st;
    st.limit = static_cast<int>(lock->limit);
    for (auto const& [sid, held] : lock->holders) {
        leader_info holder;
        holder.session = sid;
        st.holders.push_back(std::move(holder));
    }
    for (auto const& p : r.value)
        if (!p.session.empty() && p.key == go_path_join(prefix, p.session)) st.contenders.push_back(p.session);
    std::sort(st.contenders.begin(), st.contenders.end());
    st.index = lp ? lp->modify_index : 0;
    co_return st;
}

}  // namespace detail

}  // namespace tenure
