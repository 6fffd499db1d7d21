// The shared blocking query of a KV prefix (see watch_hub.hpp).
#include "consul/watch_hub.hpp"
#include <tenure/detail/clock.hpp>

#include "consul/client_access.hpp"

// g++ 12 false positive on Asio's coroutine frame allocator (fixed in g++ 13).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>

namespace tenure::detail {

namespace asio = boost::asio;
using namespace std::chrono_literals;

namespace {
// How long the shared query may park on the server. Long: it is one query
// for the whole prefix.
constexpr auto hub_wait = std::chrono::minutes{5};
}  // namespace

kv_watch_hub::kv_watch_hub(consul::client& client, std::string prefix) : client_(client), prefix_(std::move(prefix)) {}

kv_watch_hub::~kv_watch_hub() {
    if (stop_) stop_->emit(asio::cancellation_type::terminal);
}

std::shared_ptr<kv_watch_hub> kv_watch_hub::get(consul::client& client, std::string const& prefix) {
    auto& hubs = client_access::watch_hubs(client);
    if (auto it = hubs.find(prefix); it != hubs.end()) {
        if (auto h = it->second.lock()) return std::static_pointer_cast<kv_watch_hub>(h);
    }
    // Forget hubs nobody uses any more before adding one.
    std::erase_if(hubs, [](auto const& e) { return e.second.expired(); });
    auto h = std::make_shared<kv_watch_hub>(client, prefix);
    hubs[prefix] = h;
    return h;
}

std::optional<kv_watch_hub::key_state> kv_watch_hub::current(std::string const& key) const {
    auto const found = peek(key);
    if (!found) return std::nullopt;
    key_state s;
    s.index = index_;
    if (*found) s.pair = **found;
    return s;
}

std::optional<consul::kv_pair const*> kv_watch_hub::peek(std::string_view key) const {
    if (!have_snapshot_) return std::nullopt;
    auto it = keys_.find(key);
    return it != keys_.end() ? &it->second.pair : nullptr;
}

bool kv_watch_hub::answers(std::string_view key, std::uint64_t min_index,
                           std::optional<known_state> const& known) const {
    if (!have_snapshot_ || index_ < min_index) return false;
    if (!known) return true;
    auto it = keys_.find(key);
    bool const exists = it != keys_.end();
    if (exists != known->exists) return true;
    return exists && it->second.pair.modify_index != known->modify_index;
}

std::optional<kv_watch_hub::key_state> kv_watch_hub::answer_now(std::string const& key, std::uint64_t min_index,
                                                                std::optional<known_state> const& known) const {
    if (!answers(key, min_index, known)) return std::nullopt;
    return current(key);
}

void kv_watch_hub::deliver(waiter& w) {
    ++deliveries_;
    w.answer = current(w.key);
    if (w.wake) w.wake->cancel();
    // Posted: a snapshot being applied walks the lists the watch's owner
    // would change.
    else if (w.notify) asio::post(client_.get_executor(), w.notify);
}

void kv_watch_hub::add_waiter(waiter& w) {
    w.at = waiting_.emplace(w.key, &w);
    ++waiter_count_;
    if (w.wake) ++awaiting_;
    if (w.min_index > 0 && (!have_snapshot_ || w.min_index > index_))
        w.pending = short_of_index_.emplace(w.min_index, &w);
}

void kv_watch_hub::remove_waiter(waiter& w) {
    if (w.pending) short_of_index_.erase(*w.pending);
    waiting_.erase(w.at);
    --waiter_count_;
    if (w.wake) --awaiting_;
}

kv_watch_hub::watch_id kv_watch_hub::watch(std::string key, std::uint64_t min_index, std::optional<known_state> known,
                                           std::function<void()> notify) {
    watch_id id;
    id.w_.reset(new waiter{std::move(key), min_index, known, std::nullopt, nullptr, std::move(notify), std::nullopt, {}});
    add_waiter(*id.w_);
    if (answers(id.w_->key, min_index, known)) deliver(*id.w_);
    else ensure_running();
    return id;
}

std::optional<kv_watch_hub::key_state> kv_watch_hub::end_watch(watch_id id) {
    auto answer = std::move(id.w_->answer);
    remove_waiter(*id.w_);
    return answer;
}

asio::awaitable<std::optional<kv_watch_hub::key_state>> kv_watch_hub::changed(std::string key,
                                                                               std::uint64_t min_index,
                                                                               std::optional<known_state> known) {
    auto self = shared_from_this();
    // (A plain function: its locals stay out of this coroutine's frame.)
    if (auto s = answer_now(key, min_index, known)) co_return std::move(*s);
    tenure::detail::timer timer(co_await asio::this_coro::executor, tenure::detail::clock::time_point::max());
    // Registered from this frame; unregistered however the coroutine ends
    // (answered, cancelled, destroyed).
    struct registration {
        kv_watch_hub* hub;
        waiter w;
        ~registration() { hub->remove_waiter(w); }
    } reg{this, waiter{std::move(key), min_index, known, std::nullopt, &timer, {}, std::nullopt, {}}};
    add_waiter(reg.w);
    ensure_running();
    while (!reg.w.answer) {
        co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
        if (reg.w.answer) break;
        if ((co_await asio::this_coro::cancellation_state).cancelled() != asio::cancellation_type::none)
            co_return std::nullopt;
        timer.expires_at(tenure::detail::clock::time_point::max());
    }
    co_return std::move(reg.w.answer);
}

void kv_watch_hub::ensure_running() {
    if (running_) return;
    running_ = true;
    stop_ = std::make_shared<asio::cancellation_signal>();
    // Owner: the hub, i.e. the elections sharing it. The loop holds the hub
    // weakly; the hub's destructor (when the last election lets go of it)
    // cancels it through stop_, and its blocking read ends with that.
    asio::co_spawn(client_.get_executor(), run(weak_from_this(), stop_),
                   asio::bind_cancellation_slot(stop_->slot(), asio::detached));
}

bool kv_watch_hub::holds(std::string_view key, std::uint64_t modify_index, std::uint64_t stamp) {
    auto it = keys_.find(key);
    if (it == keys_.end() || it->second.pair.modify_index != modify_index) return false;
    it->second.seen = stamp;
    return true;
}

void kv_watch_hub::apply(std::vector<consul::kv_pair> pairs, std::uint64_t index, std::uint64_t stamp) {
    bool const first = !have_snapshot_;
    ++snapshots_;
    // Keys whose state moved since the last snapshot: written (or new), and
    // gone. A waiter on any other key is answered as before, unless its
    // min_index is reached now.
    std::vector<std::string const*> written;  // into keys_: its nodes stay put
    std::vector<std::string> gone;
    for (auto& p : pairs) {
        auto [it, added] = keys_.try_emplace(p.key);
        auto& e = it->second;
        if (added || e.pair.modify_index != p.modify_index) {
            if (!first) written.push_back(&it->first);
            e.pair = std::move(p);
        }
        e.seen = stamp;
    }
    // Every key of the answer is stamped now, left out by holds() or applied
    // above: the rest are gone.
    for (auto it = keys_.begin(); it != keys_.end();) {
        if (it->second.seen == stamp) {
            ++it;
            continue;
        }
        auto next = std::next(it);
        gone.push_back(std::move(keys_.extract(it).key()));
        it = next;
    }
    index_ = index;
    have_snapshot_ = true;

    if (first) {
        for (auto& [key, w] : waiting_)
            if (!w->answer && answers(w->key, w->min_index, w->known)) deliver(*w);
    } else {
        for (auto const* key : written) visit(*key);
        for (auto const& key : gone) visit(key);
    }
    // Waiters that registered short of their min_index were never looked at
    // against a late enough snapshot: this one may be it.
    while (!short_of_index_.empty() && short_of_index_.begin()->first <= index_) {
        waiter& w = *short_of_index_.begin()->second;
        short_of_index_.erase(short_of_index_.begin());
        w.pending.reset();
        if (!w.answer && answers(w.key, w.min_index, w.known)) deliver(w);
    }
}

void kv_watch_hub::visit(std::string_view key) {
    auto [from, to] = waiting_.equal_range(key);
    for (auto it = from; it != to; ++it) {
        waiter& w = *it->second;
        if (!w.answer && answers(w.key, w.min_index, w.known)) deliver(w);
    }
}

// Nobody waits, or the query ended: the snapshot goes stale without a live
// query, and the next one starts from scratch.
void kv_watch_hub::forget_snapshot() {
    running_ = false;
    have_snapshot_ = false;
    keys_.clear();
    query_index_ = 0;
}

// The shared query. Runs while anyone waits; a failed read is retried with a
// growing pause (the waiters' sessions, not the hub, decide what an
// unreachable server means). It touches the hub only between awaits, after
// checking that it still exists.
asio::awaitable<void> kv_watch_hub::run(std::weak_ptr<kv_watch_hub> weak,
                                        std::shared_ptr<asio::cancellation_signal> stop) {
    (void)stop;  // kept alive while the query may still use its slot
    auto retry = std::chrono::milliseconds{20};
    int quiet = 0;  // snapshots in a row that answered nobody, with only watches waiting
    for (;;) {
        consul::client* client = nullptr;
        std::string prefix;
        consul::read_options ro;
        std::uint64_t stamp = 0;
        consul::detail::kv_list_skip skip;
        {
            auto hub = weak.lock();
            if (!hub) co_return;
            if (hub->waiter_count_ == 0) {
                hub->forget_snapshot();
                co_return;
            }
            client = &hub->client_;
            prefix = hub->prefix_;
            ro.mode = consul::consistency::consistent;
            if (hub->query_index_ != 0) {
                ro.index = hub->query_index_;
                ro.wait = hub_wait;
            }
            // Each read has its own stamp, so that a read that failed halfway
            // through decoding leaves no stamp a later one could mistake for its own.
            stamp = ++hub->reads_;
            // Most of a big prefix is as the last snapshot had it: those
            // entries are recognised by key and ModifyIndex and not decoded.
            // The hub is locked once, at the first entry (the answer is
            // decoded in one go, after the read), not once per entry.
            if (hub->have_snapshot_)
                skip = [weak, stamp, locked = std::shared_ptr<kv_watch_hub>()](std::string_view key,
                                                                               std::uint64_t modify_index) mutable {
                    if (!locked) locked = weak.lock();
                    return locked && locked->holds(key, modify_index, stamp);
                };
        }
        std::optional<consul::read_result<std::vector<consul::kv_pair>>> r;
        auto received = tenure::detail::clock::now();
        try {
            r = co_await coro(*client).kv_list(prefix, ro, std::move(skip), &received);
        } catch (boost::system::system_error const& e) {
            if (e.code() == asio::error::operation_aborted) {
                // The hub was dropped, or the client closed.
                if (auto hub = weak.lock()) hub->forget_snapshot();
                co_return;
            }
        }
        auto hub = weak.lock();
        if (!hub) co_return;
        if (!r) {
            hub->query_index_ = 0;
            hub.reset();
            tenure::detail::timer pause(co_await asio::this_coro::executor, retry);
            co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
            retry = std::min<std::chrono::milliseconds>(retry * 2, std::chrono::seconds{1});
            continue;
        }
        retry = std::chrono::milliseconds{20};
        hub->query_index_ = consul::next_wait_index(hub->query_index_, r->meta.index);
        auto const told = hub->deliveries_;
        hub->apply(std::move(r->value), r->meta.index, stamp);
        bool const idle = hub->deliveries_ == told && hub->awaiting_ == 0;
        quiet = idle ? std::min(quiet + 1, 6) : 0;
        // A big prefix that changes all the time (10 000 elections taking
        // their keys) would otherwise be fetched and parsed back to back, on
        // the thread the elections share. Pausing for twice the work the last
        // snapshot took keeps the hub under about a third of the thread; for a
        // small prefix the pause is microseconds. The work counted is the
        // parse, the decode and the apply, from the answer's arrival.
        // While only leaders' monitors wait (watches: nobody waits to take a
        // key) and a snapshot told none of them anything (leaders taking
        // their keys), each such snapshot in a row doubles the pause, up to
        // the same 100 ms. A candidate waiting for a key keeps the pause at
        // twice the work: its wait is a failover's latency.
        auto const cost = tenure::detail::clock::now() - received;
        if (cost > std::chrono::microseconds{200}) {
            hub.reset();
            auto const wait = std::min<tenure::detail::clock::duration>(2 * cost * (1 << quiet), 100ms);
            tenure::detail::timer pause(co_await asio::this_coro::executor, wait);
            co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
        }
    }
}

}  // namespace tenure::detail
