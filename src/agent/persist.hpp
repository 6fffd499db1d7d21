// Durability of the embedded agent: a write-ahead log of state deltas with
// periodic snapshots, in one data directory.
//
// What is logged: state deltas, not operations. The state machine records
// which KV keys, sessions, checks and nodes a write touched (change_set); at
// commit the log stores the *current* value (or absence) of each, plus every
// table index. Replay therefore needs no clock, no random numbers and no
// re-validation, is idempotent, and a failed txn that was rolled back logs
// (harmlessly) the value it restored. Session renewals change no logged
// state and cost no fsync.
//
// On disk, in DIR:
//   LOCK                   flock()ed by the running agent; a second one refuses to start
//   snapshot               magic, one record: the whole state and the first segment to replay
//   wal-<20 digits>.log    magic, then records; only segments >= the snapshot's are live
// A record is: u32 payload length, u32 CRC-32 of the payload (both little
// endian), payload. Recovery loads the snapshot, replays the live segment and
// cuts a torn or corrupt tail off at the last good record (logged as a
// warning). After a restart every session gets a fresh TTL x 2 from the
// restart time and TTL checks a fresh TTL; lock-delays are not persisted.
//
// A snapshot is written at startup and whenever the live segment passes
// snapshot_after_bytes or snapshot_after_records: snapshot.tmp, fsync,
// rename, fsync the directory, then a new segment; the old one is removed.
//
// Everything is synchronous and runs on the agent's thread (no threads in the
// library); group_commit batches the writes of one event-loop turn into one
// fdatasync.
#pragma once

#include "agent/state.hpp"
#include "agent/log.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tenure::detail::agent {

// ---- record framing ---------------------------------------------------------

inline constexpr std::size_t record_header_size = 8;
inline constexpr std::uint32_t max_record_size = 1u << 30;
inline constexpr std::string_view wal_magic = "TNRWAL1\n";
inline constexpr std::string_view snapshot_magic = "TNRSNP1\n";

// Malformed log or snapshot content.
struct persist_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

std::uint32_t crc32(std::string_view data);
// Appends one framed record (header + payload) to `out`.
void append_record(std::string& out, std::string_view payload);

struct scan_result {
    std::vector<std::string_view> payloads;  // views into the scanned buffer, in order
    std::size_t good_bytes = 0;              // offset just past the last good record
    std::string problem;                     // why scanning stopped before the end; "" = clean
};
// Splits `data` (without the magic) into records, stopping at the first
// incomplete record, implausible length or CRC mismatch.
scan_result scan_records(std::string_view data);

// ---- state deltas -------------------------------------------------------------

struct index_set {
    std::uint64_t raft = 0, kvs = 0, tombstones = 0, sessions = 0, checks = 0, nodes = 0;
    bool operator==(index_set const&) const = default;
};

// The value of every entry a batch of writes touched; nullopt: erased.
struct delta_batch {
    bool full = false;          // a snapshot: replaces the whole state
    std::uint64_t segment = 0;  // snapshots: the first log segment to replay after it
    index_set indexes;
    std::vector<std::pair<std::string, std::optional<kv_entry>>> kvs;
    std::vector<std::pair<std::string, std::optional<std::uint64_t>>> tombstones;
    std::vector<std::pair<std::string, std::optional<session_entry>>> sessions;
    std::vector<std::pair<std::pair<std::string, std::string>, std::optional<health_check>>> checks;
    std::vector<std::pair<std::string, std::optional<node_entry>>> nodes;
};

std::string encode_batch(delta_batch const& b);
delta_batch decode_batch(std::string_view payload);  // throws persist_error

// The state machine's private side, for persistence and metrics.
struct state_access {
    // The current value of everything in sm.changes(), which is cleared.
    static delta_batch take_delta(state_machine& sm);
    static delta_batch snapshot(state_machine const& sm);
    // Applies a batch (a full one replaces everything). Sessions get a fresh
    // TTL x 2 and TTL checks a fresh TTL from `now`; no watcher is woken.
    static void apply(state_machine& sm, delta_batch const& b, time_point now);
    static index_set indexes(state_machine const& sm);

    static std::size_t kv_count(state_machine const& sm);
    static std::size_t tombstone_count(state_machine const& sm);
    static std::size_t session_count(state_machine const& sm);
    static std::size_t held_lock_count(state_machine const& sm);
};

// ---- the data directory -------------------------------------------------------

struct persist_options {
    std::string dir;
    std::uint64_t snapshot_after_bytes = 64ull << 20;
    std::size_t snapshot_after_records = 100000;
};

struct recovery_info {
    bool had_snapshot = false;
    std::size_t records_replayed = 0;
    std::uint64_t bytes_dropped = 0;  // torn or corrupt tail cut off
    std::uint64_t raft_index = 0;     // after recovery
};

class durable_store {
public:
    // Creates DIR if needed, takes its lock (throws boost::system::system_error
    // when another agent holds it), loads the snapshot and replays the log
    // into `sm`, then writes a fresh snapshot and turns change tracking on.
    // Throws persist_error for a corrupt snapshot or a corrupt log that is
    // not the tail.
    durable_store(persist_options opts, state_machine& sm, time_point now, logger const* log = nullptr);
    durable_store(durable_store const&) = delete;
    durable_store& operator=(durable_store const&) = delete;
    // Commits what is pending (best effort) and releases the lock.
    ~durable_store();

    // True when the state machine holds changes not yet on disk.
    bool pending() const;
    // Appends one record with every pending change and fdatasync()s it; takes
    // a snapshot when the segment is due. Throws boost::system::system_error
    // on an I/O error, after which the store is failed and every commit throws.
    void commit();
    // Writes a snapshot now and starts a new segment.
    void snapshot_now();
    // As a crash would leave it: closes the files without committing what is
    // pending and releases the lock, so that another agent can recover the
    // directory. The store is failed afterwards (tests and the simulation).
    void abandon() noexcept;
    bool failed() const noexcept { return failed_; }

    recovery_info const& recovery() const noexcept { return recovery_; }
    std::string const& dir() const noexcept { return opts_.dir; }

    // Called after each commit: the time spent in write + fdatasync and the bytes written.
    std::function<void(std::chrono::nanoseconds, std::size_t)> on_commit;

private:
    void recover(time_point now);
    void open_segment(std::uint64_t n);
    void write_snapshot();
    [[noreturn]] void fail(int err, std::string const& what);

    persist_options opts_;
    state_machine& sm_;
    logger const* log_;
    int dir_fd_ = -1;
    int lock_fd_ = -1;
    int log_fd_ = -1;
    std::uint64_t segment_ = 0;
    std::uint64_t segment_bytes_ = 0;
    std::size_t segment_records_ = 0;
    std::uint64_t committed_raft_ = 0;
    bool failed_ = false;
    recovery_info recovery_;
};

// Group commit: responses wait for the one fdatasync that follows the event
// loop turn in which they changed (or read) state.
class group_commit : public std::enable_shared_from_this<group_commit> {
public:
    group_commit(boost::asio::any_io_executor ex, durable_store& store);

    // Completes once every state change made so far is on disk; false when
    // the log failed (on_failure has been called).
    boost::asio::awaitable<bool> wait_durable();
    // Posts a commit if changes are pending (after timer-driven changes).
    void schedule();
    // Commits now, synchronously (stop()). false on failure.
    bool flush();
    // A crash (durable_store::abandon()): the waiters wake with false and
    // nothing commits any more; on_failure is not called.
    void abandon();
    bool failed() const noexcept { return failed_; }

    std::function<void(std::string const& error)> on_failure;

private:
    boost::asio::any_io_executor ex_;
    durable_store& store_;
    tenure::detail::timer done_;  // never expires: cancelled after each commit
    std::uint64_t committed_gen_ = 0;
    bool posted_ = false;
    bool failed_ = false;
};

}  // namespace tenure::detail::agent
