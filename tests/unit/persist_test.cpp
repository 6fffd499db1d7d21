// The agent's write-ahead log and snapshots (include/tenure/detail/agent/persist.hpp):
// record framing (torn tail, bad CRC, empty log), the delta codec, and
// recovery of a state machine from snapshot + log in a temporary directory.
#include <boost/test/unit_test.hpp>

#include "agent/persist.hpp"
#include "agent/state.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

namespace agent = tenure::detail::agent;
namespace fs = std::filesystem;
using namespace std::chrono_literals;
using agent::time_point;

namespace {

// A fresh directory under the system temp dir, removed afterwards.
struct temp_dir {
    fs::path path;
    temp_dir() {
        std::string tmpl = (fs::temp_directory_path() / "tenure-persist-XXXXXX").string();
        char* p = ::mkdtemp(tmpl.data());
        BOOST_REQUIRE(p != nullptr);
        path = p;
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    std::string str() const { return path.string(); }
};

agent::agent_config config() {
    agent::agent_config c;
    c.node_name = "n1";
    c.seed = 7;
    c.session_ttl_min = 1s;
    return c;
}

std::string ok(agent::result<std::string> r) {
    BOOST_REQUIRE(std::holds_alternative<std::string>(r));
    return std::get<std::string>(r);
}

std::string session(agent::state_machine& sm, time_point now, std::string ttl = "10s") {
    agent::session_create_request req;
    req.ttl = std::move(ttl);
    req.lock_delay_ns = 0;
    return ok(sm.session_create(req, now));
}

// The state as a comparable string: a snapshot without its segment number.
std::string image(agent::state_machine const& sm) {
    auto b = agent::state_access::snapshot(sm);
    b.segment = 0;
    return agent::encode_batch(b);
}

std::vector<fs::path> segments(temp_dir const& d) {
    std::vector<fs::path> out;
    for (auto const& e : fs::directory_iterator(d.path))
        if (e.path().filename().string().starts_with("wal-")) out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

std::string framed(std::vector<std::string> const& payloads) {
    std::string out;
    for (auto const& p : payloads) agent::append_record(out, p);
    return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(persist_codec)

BOOST_AUTO_TEST_CASE(empty_log_is_clean) {
    auto r = agent::scan_records("");
    BOOST_TEST(r.payloads.empty());
    BOOST_TEST(r.good_bytes == 0u);
    BOOST_TEST(r.problem.empty());
}

BOOST_AUTO_TEST_CASE(records_round_trip_including_empty_payload) {
    std::string data = framed({"alpha", "", std::string(100000, 'x')});
    auto r = agent::scan_records(data);
    BOOST_TEST(r.problem.empty());
    BOOST_REQUIRE_EQUAL(r.payloads.size(), 3u);
    BOOST_TEST(r.payloads[0] == "alpha");
    BOOST_TEST(r.payloads[1] == "");
    BOOST_TEST(r.payloads[2].size() == 100000u);
    BOOST_TEST(r.good_bytes == data.size());
}

BOOST_AUTO_TEST_CASE(torn_tail_is_cut_at_every_length) {
    std::string const good = framed({"first", "second"});
    std::string const all = good + framed({"third record"});
    // Every truncation inside the third record keeps exactly the first two.
    for (std::size_t cut = good.size() + 1; cut < all.size(); ++cut) {
        auto r = agent::scan_records(std::string_view(all).substr(0, cut));
        BOOST_TEST_REQUIRE(r.payloads.size() == 2u, "cut at " << cut);
        BOOST_TEST(r.good_bytes == good.size());
        BOOST_TEST(!r.problem.empty());
    }
}

BOOST_AUTO_TEST_CASE(bad_crc_stops_at_the_last_good_record) {
    std::string const good = framed({"first"});
    std::string data = good + framed({"second", "third"});
    data[good.size() + agent::record_header_size + 2] ^= 0x20;  // flip a bit in "second"
    auto r = agent::scan_records(data);
    BOOST_REQUIRE_EQUAL(r.payloads.size(), 1u);
    BOOST_TEST(r.good_bytes == good.size());
    BOOST_TEST(r.problem == "CRC mismatch");
}

BOOST_AUTO_TEST_CASE(implausible_length_is_a_problem_not_an_allocation) {
    std::string data = framed({"ok"});
    data += std::string("\xff\xff\xff\xff\0\0\0\0", 8);
    auto r = agent::scan_records(data);
    BOOST_TEST(r.payloads.size() == 1u);
    BOOST_TEST(r.problem.find("implausible") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(batch_round_trips_and_rejects_garbage) {
    agent::state_machine sm(config(), time_point{});
    sm.kv_set("a", std::string("1\0two", 5), 42);
    sm.kv_set("b", std::nullopt, 0);
    sm.kv_delete("b", {});
    std::string sid = session(sm, time_point{});
    auto acq = sm.kv_acquire("lock", std::string("me"), 3304740253564472344ull, sid, time_point{});
    BOOST_TEST(std::get<bool>(acq));
    auto snap = agent::state_access::snapshot(sm);
    std::string bytes = agent::encode_batch(snap);
    auto back = agent::decode_batch(bytes);
    BOOST_TEST(agent::encode_batch(back) == bytes);
    BOOST_TEST((back.indexes == snap.indexes));
    BOOST_TEST(back.kvs.size() == 2u);
    BOOST_TEST(back.tombstones.size() == 1u);
    BOOST_REQUIRE(back.kvs[0].second.has_value());
    BOOST_TEST(*back.kvs[0].second->value == std::string("1\0two", 5));
    BOOST_TEST(back.kvs[0].second->flags == 42u);

    for (std::size_t cut = 0; cut < bytes.size(); cut += 7)
        BOOST_CHECK_THROW(agent::decode_batch(std::string_view(bytes).substr(0, cut)), agent::persist_error);
    BOOST_CHECK_THROW(agent::decode_batch(bytes + "x"), agent::persist_error);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(persist_store)

BOOST_AUTO_TEST_CASE(fresh_directory_then_snapshot_and_log_replay) {
    temp_dir dir;
    time_point t0{};
    std::string before;
    std::string sid;
    {
        agent::state_machine sm(config(), t0);
        agent::durable_store store({dir.str()}, sm, t0);
        BOOST_TEST(!store.recovery().had_snapshot);
        BOOST_TEST(fs::exists(dir.path / "snapshot"));
        BOOST_TEST(!store.pending());

        sm.kv_set("k/1", std::string("v1"), 0);
        sid = session(sm, t0);
        BOOST_TEST(std::get<bool>(sm.kv_acquire("k/lock", std::string("held"), 0, sid, t0)));
        BOOST_TEST(store.pending());
        store.commit();
        BOOST_TEST(!store.pending());
        store.snapshot_now();  // state so far in the snapshot ...
        sm.kv_set("k/2", std::string("v2"), 7);  // ... and more in the new segment
        sm.kv_delete("k/1", {});
        BOOST_TEST(sm.kv_cas("k/2", std::string("v2b"), 8, sm.kv_get("k/2")->modify_index));
        std::string other = session(sm, t0);
        sm.session_destroy(other, t0);
        store.commit();
        before = image(sm);
        BOOST_TEST(sm.raft_index() > 0u);
    }  // the store commits nothing more; the lock is released
    agent::state_machine sm(config(), t0 + 1h);
    agent::durable_store store({dir.str()}, sm, t0 + 1h);
    BOOST_TEST(store.recovery().had_snapshot);
    BOOST_TEST(store.recovery().records_replayed == 1u);
    BOOST_TEST(store.recovery().bytes_dropped == 0u);
    BOOST_TEST(image(sm) == before);
    BOOST_TEST(!sm.kv_get("k/1"));
    BOOST_REQUIRE(sm.kv_get("k/2"));
    BOOST_TEST(*sm.kv_get("k/2")->value == "v2b");
    BOOST_TEST(sm.kv_get("k/lock")->session == sid);
    // The session got a fresh TTL x 2 from the restart, not from its creation.
    BOOST_REQUIRE(sm.next_deadline().has_value());
    BOOST_TEST((*sm.next_deadline() == t0 + 1h + 20s));
    sm.advance(t0 + 1h + 19s);
    BOOST_TEST(sm.session_get(sid) != nullptr);
    sm.advance(t0 + 1h + 20s);
    BOOST_TEST(sm.session_get(sid) == nullptr);
    BOOST_TEST(sm.kv_get("k/lock")->session.empty());
    // The invalidation by TTL is itself logged.
    BOOST_TEST(store.pending());
}

BOOST_AUTO_TEST_CASE(truncated_log_tail_is_recovered) {
    temp_dir dir;
    time_point t0{};
    std::string after_two;
    {
        agent::state_machine sm(config(), t0);
        agent::durable_store store({dir.str()}, sm, t0);
        sm.kv_set("one", std::string("1"), 0);
        store.commit();
        sm.kv_set("two", std::string("2"), 0);
        store.commit();
        after_two = image(sm);
        sm.kv_set("three", std::string("3"), 0);
        store.commit();
    }
    auto segs = segments(dir);
    BOOST_REQUIRE_EQUAL(segs.size(), 1u);
    fs::resize_file(segs[0], fs::file_size(segs[0]) - 3);  // tear the last record

    agent::state_machine sm(config(), t0);
    agent::durable_store store({dir.str()}, sm, t0);
    BOOST_TEST(store.recovery().records_replayed == 2u);
    BOOST_TEST(store.recovery().bytes_dropped > 0u);
    BOOST_TEST(image(sm) == after_two);
    BOOST_TEST(!sm.kv_get("three"));
    // Writing goes on after the cut.
    sm.kv_set("four", std::string("4"), 0);
    store.commit();
}

BOOST_AUTO_TEST_CASE(corrupt_record_in_the_tail_is_cut) {
    temp_dir dir;
    time_point t0{};
    std::string after_one;
    {
        agent::state_machine sm(config(), t0);
        agent::durable_store store({dir.str()}, sm, t0);
        sm.kv_set("one", std::string("1"), 0);
        store.commit();
        after_one = image(sm);
        sm.kv_set("two", std::string("2"), 0);
        store.commit();
    }
    auto seg = segments(dir).at(0);
    std::fstream f(seg, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-2, std::ios::end);
    f.put('#');
    f.close();
    agent::state_machine sm(config(), t0);
    agent::durable_store store({dir.str()}, sm, t0);
    BOOST_TEST(store.recovery().records_replayed == 1u);
    BOOST_TEST(image(sm) == after_one);
}

BOOST_AUTO_TEST_CASE(periodic_snapshot_truncates_the_log) {
    temp_dir dir;
    time_point t0{};
    std::string before;
    {
        agent::state_machine sm(config(), t0);
        agent::persist_options o{dir.str()};
        o.snapshot_after_records = 5;
        agent::durable_store store(o, sm, t0);
        for (int i = 0; i < 23; ++i) {
            sm.kv_set("key/" + std::to_string(i), std::to_string(i), 0);
            store.commit();
        }
        before = image(sm);
        // 23 commits, a snapshot every 5: 3 records in the live segment, one segment on disk.
        BOOST_TEST(segments(dir).size() == 1u);
    }
    agent::state_machine sm(config(), t0);
    agent::durable_store store({dir.str()}, sm, t0);
    BOOST_TEST(store.recovery().records_replayed == 3u);
    BOOST_TEST(image(sm) == before);
}

BOOST_AUTO_TEST_CASE(second_store_on_the_same_directory_is_refused) {
    temp_dir dir;
    agent::state_machine sm1(config(), time_point{});
    agent::durable_store first({dir.str()}, sm1, time_point{});
    agent::state_machine sm2(config(), time_point{});
    try {
        agent::durable_store second({dir.str()}, sm2, time_point{});
        BOOST_FAIL("second store opened a locked directory");
    } catch (boost::system::system_error const& e) {
        BOOST_TEST(std::string(e.what()).find("in use by another agent") != std::string::npos);
    }
}

BOOST_AUTO_TEST_CASE(renewals_cost_no_record_and_rename_keeps_the_own_node) {
    temp_dir dir;
    time_point t0{};
    std::string sid;
    {
        agent::state_machine sm(config(), t0);
        agent::durable_store store({dir.str()}, sm, t0);
        sid = session(sm, t0);
        store.commit();
        BOOST_TEST(sm.session_renew(sid, t0 + 1s).has_value());
        BOOST_TEST(!store.pending());
    }
    auto c = config();
    c.node_name = "n2";
    agent::state_machine sm(c, t0);
    agent::durable_store store({dir.str()}, sm, t0);
    BOOST_TEST(sm.node_get("n1") != nullptr);
    BOOST_TEST(sm.node_get("n2") != nullptr);
    BOOST_TEST(sm.check_get("n2", "serfHealth") != nullptr);
    BOOST_TEST(sm.session_get(sid) != nullptr);
}

BOOST_AUTO_TEST_CASE(group_commit_shares_one_sync_per_event_loop_turn) {
    temp_dir dir;
    boost::asio::io_context ioc{1};
    agent::state_machine sm(config(), time_point{});
    agent::durable_store store({dir.str()}, sm, time_point{});
    int commits = 0;
    store.on_commit = [&](std::chrono::nanoseconds, std::size_t) { ++commits; };
    auto gc = std::make_shared<agent::group_commit>(ioc.get_executor(), store);
    int acknowledged = 0;
    // Five writers whose writes land in the same turn, as five requests read in one epoll round.
    for (int i = 0; i < 5; ++i) {
        boost::asio::co_spawn(
            ioc,
            [&, i]() -> boost::asio::awaitable<void> {
                sm.kv_set("g/" + std::to_string(i), std::string("v"), 0);
                bool ok = co_await gc->wait_durable();
                BOOST_TEST(ok);
                BOOST_TEST(!store.pending());  // on disk before the acknowledgement
                ++acknowledged;
            },
            boost::asio::detached);
    }
    ioc.run();
    BOOST_TEST(acknowledged == 5);
    BOOST_TEST(commits == 1);
    // A reader with nothing pending does not wait for a sync.
    ioc.restart();
    boost::asio::co_spawn(
        ioc, [&]() -> boost::asio::awaitable<void> { BOOST_TEST(co_await gc->wait_durable()); }, boost::asio::detached);
    ioc.run();
    BOOST_TEST(commits == 1);
}

BOOST_AUTO_TEST_SUITE_END()
