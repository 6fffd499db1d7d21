// Write-ahead log, snapshots and recovery of the agent's state (see persist.hpp).
#include "agent/persist.hpp"
#include <tenure/detail/clock.hpp>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/crc.hpp>
#include <boost/system/system_error.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace tenure::detail::agent {

namespace fs = std::filesystem;

// ---- framing --------------------------------------------------------------------

std::uint32_t crc32(std::string_view data) {
    boost::crc_32_type crc;
    crc.process_bytes(data.data(), data.size());
    return crc.checksum();
}

namespace {

void put_u32(std::string& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
void put_u64(std::string& out, std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out += static_cast<char>((v >> (8 * i)) & 0xff);
}
std::uint32_t get_u32(char const* p) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    return v;
}

}  // namespace

void append_record(std::string& out, std::string_view payload) {
    if (payload.size() > max_record_size) throw persist_error("record too large");
    put_u32(out, static_cast<std::uint32_t>(payload.size()));
    put_u32(out, crc32(payload));
    out.append(payload);
}

scan_result scan_records(std::string_view data) {
    scan_result r;
    std::size_t pos = 0;
    while (pos < data.size()) {
        std::size_t const left = data.size() - pos;
        if (left < record_header_size) {
            r.problem = "incomplete record header (" + std::to_string(left) + " bytes)";
            break;
        }
        std::uint32_t const len = get_u32(data.data() + pos);
        std::uint32_t const crc = get_u32(data.data() + pos + 4);
        if (len > max_record_size) {
            r.problem = "implausible record length " + std::to_string(len);
            break;
        }
        if (len > left - record_header_size) {
            r.problem = "incomplete record (" + std::to_string(left - record_header_size) + " of " +
                        std::to_string(len) + " bytes)";
            break;
        }
        std::string_view const payload = data.substr(pos + record_header_size, len);
        if (crc32(payload) != crc) {
            r.problem = "CRC mismatch";
            break;
        }
        r.payloads.push_back(payload);
        pos += record_header_size + len;
        r.good_bytes = pos;
    }
    return r;
}

// ---- batch codec ----------------------------------------------------------------
// Fixed-width little-endian integers, u32-length-prefixed strings, u8 tags.

namespace {

constexpr std::uint8_t batch_version = 1;

struct writer {
    std::string out;
    void u8(std::uint8_t v) { out += static_cast<char>(v); }
    void u64(std::uint64_t v) { put_u64(out, v); }
    void i64(std::int64_t v) { put_u64(out, static_cast<std::uint64_t>(v)); }
    void str(std::string_view s) {
        put_u32(out, static_cast<std::uint32_t>(s.size()));
        out.append(s);
    }
    void opt_str(std::optional<std::string> const& s) {
        u8(s ? 1 : 0);
        if (s) str(*s);
    }
    void strs(std::vector<std::string> const& v) {
        put_u32(out, static_cast<std::uint32_t>(v.size()));
        for (auto const& s : v) str(s);
    }
    void map(std::map<std::string, std::string> const& m) {
        put_u32(out, static_cast<std::uint32_t>(m.size()));
        for (auto const& [k, v] : m) {
            str(k);
            str(v);
        }
    }
    void count(std::size_t n) { put_u32(out, static_cast<std::uint32_t>(n)); }
};

struct reader {
    std::string_view in;
    std::size_t pos = 0;
    void need(std::size_t n) const {
        if (in.size() - pos < n) throw persist_error("truncated batch");
    }
    std::uint8_t u8() {
        need(1);
        return static_cast<std::uint8_t>(in[pos++]);
    }
    std::uint32_t u32() {
        need(4);
        auto v = get_u32(in.data() + pos);
        pos += 4;
        return v;
    }
    std::uint64_t u64() {
        std::uint64_t lo = u32();
        std::uint64_t hi = u32();
        return lo | (hi << 32);
    }
    std::int64_t i64() { return static_cast<std::int64_t>(u64()); }
    bool flag() {
        auto v = u8();
        if (v > 1) throw persist_error("bad flag byte");
        return v == 1;
    }
    std::string str() {
        std::uint32_t n = u32();
        need(n);
        std::string s(in.substr(pos, n));
        pos += n;
        return s;
    }
    std::optional<std::string> opt_str() {
        if (!flag()) return std::nullopt;
        return str();
    }
    std::size_t count() {
        std::uint32_t n = u32();
        if (n > in.size() - pos) throw persist_error("implausible element count");  // every element takes >= 1 byte
        return n;
    }
    std::vector<std::string> strs() {
        std::vector<std::string> v(count());
        for (auto& s : v) s = str();
        return v;
    }
    std::map<std::string, std::string> map() {
        std::map<std::string, std::string> m;
        for (std::size_t n = count(); n > 0; --n) {
            std::string k = str();
            m[std::move(k)] = str();
        }
        return m;
    }
};

void write_kv(writer& w, kv_entry const& e) {
    w.str(e.key);
    w.opt_str(e.value);
    w.u64(e.flags);
    w.u64(e.lock_index);
    w.u64(e.create_index);
    w.u64(e.modify_index);
    w.str(e.session);
}
kv_entry read_kv(reader& r) {
    kv_entry e;
    e.key = r.str();
    e.value = r.opt_str();
    e.flags = r.u64();
    e.lock_index = r.u64();
    e.create_index = r.u64();
    e.modify_index = r.u64();
    e.session = r.str();
    return e;
}

void write_session(writer& w, session_entry const& s) {
    w.str(s.id);
    w.str(s.name);
    w.str(s.node);
    w.i64(s.lock_delay_ns);
    w.u8(s.behavior == session_behavior::release ? 0 : 1);
    w.str(s.ttl);
    w.i64(s.ttl_duration.count());
    w.strs(s.node_checks);
    w.count(s.service_checks.size());
    for (auto const& c : s.service_checks) {
        w.str(c.id);
        w.str(c.ns);
    }
    w.strs(s.checks);
    w.u64(s.create_index);
    w.u64(s.modify_index);
}
session_entry read_session(reader& r) {
    session_entry s;
    s.id = r.str();
    s.name = r.str();
    s.node = r.str();
    s.lock_delay_ns = r.i64();
    s.behavior = r.flag() ? session_behavior::delete_keys : session_behavior::release;
    s.ttl = r.str();
    s.ttl_duration = nanoseconds{r.i64()};
    s.node_checks = r.strs();
    s.service_checks.resize(r.count());
    for (auto& c : s.service_checks) {
        c.id = r.str();
        c.ns = r.str();
    }
    s.checks = r.strs();
    s.create_index = r.u64();
    s.modify_index = r.u64();
    return s;
}

void write_check(writer& w, health_check const& c) {
    w.str(c.node);
    w.str(c.check_id);
    w.str(c.name);
    w.str(c.status);
    w.str(c.notes);
    w.str(c.output);
    w.str(c.service_id);
    w.str(c.service_name);
    w.str(c.type);
    w.i64(c.ttl.count());
    w.u8(c.agent_local ? 1 : 0);
    w.u64(c.create_index);
    w.u64(c.modify_index);
}
health_check read_check(reader& r) {
    health_check c;
    c.node = r.str();
    c.check_id = r.str();
    c.name = r.str();
    c.status = r.str();
    c.notes = r.str();
    c.output = r.str();
    c.service_id = r.str();
    c.service_name = r.str();
    c.type = r.str();
    c.ttl = nanoseconds{r.i64()};
    c.agent_local = r.flag();
    c.create_index = r.u64();
    c.modify_index = r.u64();
    return c;
}

void write_node(writer& w, node_entry const& n) {
    w.str(n.id);
    w.str(n.node);
    w.str(n.address);
    w.str(n.datacenter);
    w.map(n.tagged_addresses);
    w.map(n.meta);
    w.u64(n.create_index);
    w.u64(n.modify_index);
}
node_entry read_node(reader& r) {
    node_entry n;
    n.id = r.str();
    n.node = r.str();
    n.address = r.str();
    n.datacenter = r.str();
    n.tagged_addresses = r.map();
    n.meta = r.map();
    n.create_index = r.u64();
    n.modify_index = r.u64();
    return n;
}

template <class K, class V, class Write>
void write_table(writer& w, std::vector<std::pair<K, std::optional<V>>> const& rows, Write write_value) {
    w.count(rows.size());
    for (auto const& [k, v] : rows) {
        if constexpr (std::is_same_v<K, std::string>) w.str(k);
        else {
            w.str(k.first);
            w.str(k.second);
        }
        w.u8(v ? 1 : 0);
        if (v) write_value(w, *v);
    }
}

template <class K, class V, class Read>
void read_table(reader& r, std::vector<std::pair<K, std::optional<V>>>& rows, Read read_value) {
    for (std::size_t n = r.count(); n > 0; --n) {
        K k;
        if constexpr (std::is_same_v<K, std::string>) k = r.str();
        else {
            k.first = r.str();
            k.second = r.str();
        }
        std::optional<V> v;
        if (r.flag()) v = read_value(r);
        rows.emplace_back(std::move(k), std::move(v));
    }
}

}  // namespace

std::string encode_batch(delta_batch const& b) {
    writer w;
    w.u8(batch_version);
    w.u8(b.full ? 1 : 0);
    w.u64(b.segment);
    auto const& i = b.indexes;
    for (auto v : {i.raft, i.kvs, i.tombstones, i.sessions, i.checks, i.nodes}) w.u64(v);
    write_table(w, b.kvs, write_kv);
    write_table(w, b.tombstones, [](writer& w, std::uint64_t idx) { w.u64(idx); });
    write_table(w, b.sessions, write_session);
    write_table(w, b.checks, write_check);
    write_table(w, b.nodes, write_node);
    return std::move(w.out);
}

delta_batch decode_batch(std::string_view payload) {
    reader r{payload};
    if (r.u8() != batch_version) throw persist_error("unknown record version");
    delta_batch b;
    b.full = r.flag();
    b.segment = r.u64();
    auto& i = b.indexes;
    for (auto* v : {&i.raft, &i.kvs, &i.tombstones, &i.sessions, &i.checks, &i.nodes}) *v = r.u64();
    read_table(r, b.kvs, read_kv);
    read_table(r, b.tombstones, [](reader& r) { return r.u64(); });
    read_table(r, b.sessions, read_session);
    read_table(r, b.checks, read_check);
    read_table(r, b.nodes, read_node);
    if (r.pos != payload.size()) throw persist_error("trailing bytes in batch");
    return b;
}

// ---- state access ----------------------------------------------------------------

index_set state_access::indexes(state_machine const& sm) {
    return {sm.index_, sm.kvs_index_, sm.tombstones_index_, sm.sessions_index_, sm.checks_index_, sm.nodes_index_};
}

delta_batch state_access::take_delta(state_machine& sm) {
    delta_batch b;
    b.indexes = indexes(sm);
    change_set ch = std::exchange(sm.changes_, {});
    for (auto const& k : ch.keys) {
        auto it = sm.kvs_.find(k);
        b.kvs.emplace_back(k, it == sm.kvs_.end() ? std::nullopt : std::optional<kv_entry>(it->second));
        auto t = sm.tombstones_.find(k);
        b.tombstones.emplace_back(k, t == sm.tombstones_.end() ? std::nullopt
                                                                : std::optional<std::uint64_t>(t->second.index));
    }
    for (auto const& id : ch.sessions) {
        auto it = sm.sessions_.find(id);
        b.sessions.emplace_back(id, it == sm.sessions_.end() ? std::nullopt
                                                             : std::optional<session_entry>(it->second));
    }
    for (auto const& nc : ch.checks) {
        auto const* c = sm.check_get(nc.first, nc.second);
        b.checks.emplace_back(nc, c ? std::optional<health_check>(*c) : std::nullopt);
    }
    for (auto const& n : ch.nodes) {
        auto it = sm.nodes_.find(n);
        b.nodes.emplace_back(n, it == sm.nodes_.end() ? std::nullopt : std::optional<node_entry>(it->second));
    }
    return b;
}

delta_batch state_access::snapshot(state_machine const& sm) {
    delta_batch b;
    b.full = true;
    b.indexes = indexes(sm);
    for (auto const& [k, e] : sm.kvs_) b.kvs.emplace_back(k, e);
    for (auto const& [k, t] : sm.tombstones_) b.tombstones.emplace_back(k, t.index);
    for (auto const& [id, s] : sm.sessions_) b.sessions.emplace_back(id, s);
    for (auto const& [node, checks] : sm.checks_)
        for (auto const& [id, c] : checks) b.checks.emplace_back(std::pair{node, id}, c);
    for (auto const& [n, e] : sm.nodes_) b.nodes.emplace_back(n, e);
    return b;
}

void state_access::apply(state_machine& sm, delta_batch const& b, time_point now) {
    if (b.full) {
        sm.kvs_.clear();
        sm.tombstones_.clear();
        sm.lock_delays_.clear();
        sm.delay_timers_.clear();
        sm.sessions_.clear();
        sm.keys_by_session_.clear();
        sm.session_timers_.clear();
        sm.session_deadline_.clear();
        sm.checks_.clear();
        sm.check_timers_.clear();
        sm.nodes_.clear();
    }
    auto unhold = [&](std::string const& session, std::string const& key) {
        auto k = sm.keys_by_session_.find(session);
        if (k == sm.keys_by_session_.end()) return;
        k->second.erase(key);
        if (k->second.empty()) sm.keys_by_session_.erase(k);
    };
    for (auto const& [key, e] : b.kvs) {
        if (auto it = sm.kvs_.find(key); it != sm.kvs_.end()) {
            if (!it->second.session.empty()) unhold(it->second.session, key);
            sm.kvs_.erase(it);
        }
        if (!e) continue;
        if (!e->session.empty()) sm.keys_by_session_[e->session].insert(key);
        sm.kvs_.emplace(key, *e);
    }
    for (auto const& [key, idx] : b.tombstones) {
        if (idx) sm.tombstones_[key] = state_machine::tombstone{*idx};
        else sm.tombstones_.erase(key);
    }
    for (auto const& [id, s] : b.sessions) {
        if (auto d = sm.session_deadline_.find(id); d != sm.session_deadline_.end()) {
            sm.session_timers_.erase({d->second, id});
            sm.session_deadline_.erase(d);
        }
        if (!s) {
            sm.sessions_.erase(id);
            continue;
        }
        auto& stored = sm.sessions_[id] = *s;
        sm.reset_session_timer(stored, now);  // a fresh TTL x 2 from the restart
    }
    for (auto const& [nc, c] : b.checks) {
        auto& node_map = sm.checks_[nc.first];
        if (auto it = node_map.find(nc.second); it != node_map.end()) {
            if (it->second.ttl_deadline) sm.check_timers_.erase({*it->second.ttl_deadline, nc.first, nc.second});
            node_map.erase(it);
        }
        if (c) {
            auto& stored = node_map[nc.second] = *c;
            stored.ttl_deadline.reset();
            sm.reset_check_timer(stored, now);
        }
        if (node_map.empty()) sm.checks_.erase(nc.first);
    }
    for (auto const& [name, n] : b.nodes) {
        if (n) sm.nodes_[name] = *n;
        else sm.nodes_.erase(name);
    }
    auto const& i = b.indexes;
    sm.index_ = i.raft;
    sm.kvs_index_ = i.kvs;
    sm.tombstones_index_ = i.tombstones;
    sm.sessions_index_ = i.sessions;
    sm.checks_index_ = i.checks;
    sm.nodes_index_ = i.nodes;
}

std::size_t state_access::kv_count(state_machine const& sm) { return sm.kvs_.size(); }
std::size_t state_access::tombstone_count(state_machine const& sm) { return sm.tombstones_.size(); }
std::size_t state_access::session_count(state_machine const& sm) { return sm.sessions_.size(); }
std::size_t state_access::held_lock_count(state_machine const& sm) {
    std::size_t n = 0;
    for (auto const& [s, keys] : sm.keys_by_session_) n += keys.size();
    return n;
}

// ---- files -----------------------------------------------------------------------

namespace {

// system_error whose what() is "what: reason", without Boost's "[system:N]" suffix.
class io_error : public boost::system::system_error {
public:
    io_error(int err, std::string message, bool add_reason)
        : system_error(boost::system::error_code(err, boost::system::system_category()), message),
          message_(add_reason ? message + ": " + code().message() : std::move(message)) {}
    char const* what() const noexcept override { return message_.c_str(); }

private:
    std::string message_;
};

[[noreturn]] void throw_errno(int err, std::string const& what, bool add_reason = true) {
    throw io_error(err, what, add_reason);
}

std::string segment_name(std::uint64_t n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "wal-%020llu.log", static_cast<unsigned long long>(n));
    return buf;
}

std::optional<std::uint64_t> parse_segment_name(std::string const& name) {
    if (name.size() != 28 || !name.starts_with("wal-") || !name.ends_with(".log")) return std::nullopt;
    std::uint64_t n = 0;
    auto [end, ec] = std::from_chars(name.data() + 4, name.data() + 24, n);
    if (ec != std::errc{} || end != name.data() + 24) return std::nullopt;
    return n;
}

// -1 with errno on failure.
int write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

std::string read_file(std::string const& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw_errno(errno, "cannot open " + path);
    std::string out;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            ::close(fd);
            throw_errno(e, "cannot read " + path);
        }
        if (n == 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return out;
}

}  // namespace

durable_store::durable_store(persist_options opts, state_machine& sm, time_point now, logger const* log)
    : opts_(std::move(opts)), sm_(sm), log_(log) {
    try {
        std::error_code ec;
        fs::create_directories(opts_.dir, ec);
        if (ec) throw_errno(ec.value(), "cannot create data directory " + opts_.dir);
        dir_fd_ = ::open(opts_.dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd_ < 0) throw_errno(errno, "cannot open data directory " + opts_.dir);
        std::string const lock_path = opts_.dir + "/LOCK";
        lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lock_fd_ < 0) throw_errno(errno, "cannot open " + lock_path);
        if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK)
                throw_errno(e, "data directory " + opts_.dir + " is in use by another agent (" + lock_path +
                                   " is locked)",
                            false);
            throw_errno(e, "cannot lock " + lock_path);
        }
        recover(now);
    } catch (...) {
        if (log_fd_ >= 0) ::close(log_fd_);
        if (lock_fd_ >= 0) ::close(lock_fd_);
        if (dir_fd_ >= 0) ::close(dir_fd_);
        throw;
    }
}

durable_store::~durable_store() {
    if (!failed_ && log_fd_ >= 0) {
        try {
            commit();
        } catch (std::exception const& e) {
            if (log_) log_->error("agent.wal", std::string("final commit failed: ") + e.what());
        }
    }
    sm_.track_changes(false);
    if (log_fd_ >= 0) ::close(log_fd_);
    if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the flock
    if (dir_fd_ >= 0) ::close(dir_fd_);
}

void durable_store::abandon() noexcept {
    failed_ = true;
    sm_.track_changes(false);
    for (int* fd : {&log_fd_, &lock_fd_, &dir_fd_}) {
        if (*fd >= 0) ::close(*fd);
        *fd = -1;
    }
}

void durable_store::recover(time_point now) {
    std::string const snap_path = opts_.dir + "/snapshot";
    std::uint64_t first_segment = 1;
    fs::remove(opts_.dir + "/snapshot.tmp");  // a snapshot that never got renamed
    if (fs::exists(snap_path)) {
        std::string data = read_file(snap_path);
        if (!data.starts_with(snapshot_magic)) throw persist_error(snap_path + " is not a tenure snapshot");
        std::string_view body = std::string_view(data).substr(snapshot_magic.size());
        auto scan = scan_records(body);
        // The snapshot was fsynced before its rename: damage here is not a torn write.
        if (!scan.problem.empty() || scan.payloads.size() != 1)
            throw persist_error(snap_path + " is corrupt" + (scan.problem.empty() ? "" : ": " + scan.problem));
        auto b = decode_batch(scan.payloads.front());
        if (!b.full) throw persist_error(snap_path + " is not a full snapshot");
        state_access::apply(sm_, b, now);
        first_segment = b.segment;
        recovery_.had_snapshot = true;
    }

    std::vector<std::uint64_t> segments;
    for (auto const& entry : fs::directory_iterator(opts_.dir)) {
        auto n = parse_segment_name(entry.path().filename().string());
        if (!n) continue;
        if (*n < first_segment) fs::remove(entry.path());  // covered by the snapshot
        else segments.push_back(*n);
    }
    std::sort(segments.begin(), segments.end());
    for (std::size_t i = 0; i < segments.size(); ++i) {
        std::string const path = opts_.dir + "/" + segment_name(segments[i]);
        bool const last = i + 1 == segments.size();
        std::string data = read_file(path);
        std::string_view body;
        if (data.size() < wal_magic.size() && std::string_view(wal_magic).starts_with(data)) {
            body = {};  // torn while being created
        } else if (!data.starts_with(wal_magic)) {
            throw persist_error(path + " is not a tenure log");
        } else {
            body = std::string_view(data).substr(wal_magic.size());
        }
        auto scan = scan_records(body);
        std::size_t applied = 0;
        std::string problem = scan.problem;
        std::size_t good = scan.good_bytes;
        for (auto payload : scan.payloads) {
            delta_batch b;
            try {
                b = decode_batch(payload);
            } catch (persist_error const& e) {
                problem = std::string("undecodable record: ") + e.what();
                good = static_cast<std::size_t>(payload.data() - body.data()) - record_header_size;
                break;
            }
            state_access::apply(sm_, b, now);
            ++applied;
        }
        recovery_.records_replayed += applied;
        if (!problem.empty()) {
            if (!last) throw persist_error(path + " is corrupt (" + problem + ") and is not the last segment");
            recovery_.bytes_dropped += body.size() - good;
            if (log_)
                log_->warn("agent.wal", "torn or corrupt log tail in " + path + " at offset " +
                                            std::to_string(wal_magic.size() + good) + ": " + problem + "; dropped " +
                                            std::to_string(body.size() - good) + " bytes after " +
                                            std::to_string(applied) + " good records");
        }
    }

    // The agent's own node (a renamed agent, or a fresh directory).
    if (!sm_.node_get(sm_.config().node_name)) {
        node_entry self;
        self.node = sm_.config().node_name;
        self.address = sm_.config().address;
        self.datacenter = sm_.config().datacenter;
        health_check serf;
        serf.check_id = std::string(serf_check_id);
        serf.name = "Serf Health Status";
        serf.status = std::string(check_passing);
        serf.output = "Agent alive and reachable";
        auto r = sm_.catalog_register(std::move(self), {std::move(serf)}, now);
        (void)r;
    }
    recovery_.raft_index = sm_.raft_index();

    // Start clean: everything recovered goes into a fresh snapshot, then a new segment.
    segment_ = segments.empty() ? first_segment : segments.back();
    write_snapshot();
    for (auto n : segments) fs::remove(opts_.dir + "/" + segment_name(n));
    sm_.changes() = {};
    sm_.track_changes(true);
    committed_raft_ = sm_.raft_index();
    if (log_ && log_->enabled(log_level::info))
        log_->info("agent.wal", "recovered state from " + opts_.dir + ": snapshot=" +
                                    (recovery_.had_snapshot ? "yes" : "no") +
                                    " records=" + std::to_string(recovery_.records_replayed) +
                                    " raft_index=" + std::to_string(recovery_.raft_index) +
                                    " sessions=" + std::to_string(state_access::session_count(sm_)) +
                                    " keys=" + std::to_string(state_access::kv_count(sm_)));
}

void durable_store::fail(int err, std::string const& what) {
    failed_ = true;
    throw_errno(err, what);
}

void durable_store::open_segment(std::uint64_t n) {
    std::string const path = opts_.dir + "/" + segment_name(n);
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) fail(errno, "cannot create " + path);
    if (write_all(fd, wal_magic) != 0 || ::fdatasync(fd) != 0 || ::fsync(dir_fd_) != 0) {
        int e = errno;
        ::close(fd);
        fail(e, "cannot initialise " + path);
    }
    if (log_fd_ >= 0) ::close(log_fd_);
    log_fd_ = fd;
    segment_ = n;
    segment_bytes_ = wal_magic.size();
    segment_records_ = 0;
}

// snapshot.tmp, fsync, rename, fsync the directory; then the next segment.
void durable_store::write_snapshot() {
    std::uint64_t const next = segment_ + 1;
    delta_batch b = state_access::snapshot(sm_);
    b.segment = next;
    std::string data(snapshot_magic);
    append_record(data, encode_batch(b));

    std::string const tmp = opts_.dir + "/snapshot.tmp";
    std::string const final_path = opts_.dir + "/snapshot";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail(errno, "cannot create " + tmp);
    if (write_all(fd, data) != 0 || ::fsync(fd) != 0) {
        int e = errno;
        ::close(fd);
        fail(e, "cannot write " + tmp);
    }
    ::close(fd);
    if (::rename(tmp.c_str(), final_path.c_str()) != 0) fail(errno, "cannot rename " + tmp);
    if (::fsync(dir_fd_) != 0) fail(errno, "cannot sync " + opts_.dir);
    std::uint64_t const old = segment_;
    bool const had_log = log_fd_ >= 0;
    open_segment(next);
    if (had_log) fs::remove(opts_.dir + "/" + segment_name(old));
    if (log_ && log_->enabled(log_level::debug))
        log_->debug("agent.wal", "snapshot written: raft_index=" + std::to_string(b.indexes.raft) +
                                     " bytes=" + std::to_string(data.size()) + " segment=" + std::to_string(next));
}

bool durable_store::pending() const { return !sm_.changes().empty() || sm_.raft_index() != committed_raft_; }

void durable_store::commit() {
    if (failed_) throw_errno(EIO, "the write-ahead log in " + opts_.dir + " failed earlier");
    if (!pending()) return;
    auto const start = clock::now();
    std::string rec;
    append_record(rec, encode_batch(state_access::take_delta(sm_)));
    if (write_all(log_fd_, rec) != 0) {
        int e = errno;
        // Cut the partial record off so that later records stay reachable; the store is failed either way.
        if (::ftruncate(log_fd_, static_cast<off_t>(segment_bytes_)) != 0) {
        }
        fail(e, "cannot append to the write-ahead log in " + opts_.dir);
    }
    if (::fdatasync(log_fd_) != 0) fail(errno, "cannot fdatasync the write-ahead log in " + opts_.dir);
    segment_bytes_ += rec.size();
    ++segment_records_;
    committed_raft_ = sm_.raft_index();
    if (on_commit) on_commit(std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - start), rec.size());
    if (segment_bytes_ >= opts_.snapshot_after_bytes || segment_records_ >= opts_.snapshot_after_records)
        write_snapshot();
}

void durable_store::snapshot_now() {
    commit();
    write_snapshot();
}

// ---- group commit ----------------------------------------------------------------

group_commit::group_commit(boost::asio::any_io_executor ex, durable_store& store)
    : ex_(ex), store_(store), done_(ex, tenure::detail::timer::time_point::max()) {}

bool group_commit::flush() {
    if (failed_) return false;
    try {
        store_.commit();
    } catch (std::exception const& e) {
        failed_ = true;
        ++committed_gen_;
        done_.cancel();
        if (on_failure) on_failure(e.what());
        return false;
    }
    ++committed_gen_;
    done_.cancel();
    return true;
}

void group_commit::abandon() {
    failed_ = true;
    ++committed_gen_;
    done_.cancel();
}

void group_commit::schedule() {
    if (posted_ || failed_ || !store_.pending()) return;
    posted_ = true;
    // Runs after the handlers already queued in this turn: their writes share the fdatasync.
    boost::asio::post(ex_, [w = weak_from_this()] {
        auto self = w.lock();
        if (!self) return;
        self->posted_ = false;
        self->flush();
    });
}

boost::asio::awaitable<bool> group_commit::wait_durable() {
    if (failed_) co_return false;
    if (!store_.pending()) co_return true;
    auto keep = shared_from_this();
    std::uint64_t const target = committed_gen_ + 1;
    schedule();
    while (committed_gen_ < target && !failed_) {
        auto [ec] = co_await done_.async_wait(boost::asio::as_tuple(boost::asio::use_awaitable));
        (void)ec;
    }
    co_return !failed_;
}

}  // namespace tenure::detail::agent
