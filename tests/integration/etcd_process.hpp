// Runs real etcd members (Debian's /usr/bin/etcd, 3.4) as child processes
// for the integration tests, on loopback ports only.
//
// etcd_process starts one member with a fresh temporary data directory on
// free 127.0.0.1 ports (new ones if a port was taken before etcd bound it)
// and, unless told otherwise, waits until GET /health
// answers {"health":"true"} (a bounded polling loop). The destructor SIGKILLs
// it, reaps it and removes the data directory; PR_SET_PDEATHSIG kills it if
// the test binary dies first. etcd's log (stderr) goes to an unlinked
// temporary file that failures print.
//
// etcd_cluster starts three (or n) members as one new cluster (unique
// token, --initial-cluster-state new), waits for all of them, and can find
// the raft leader (/v3/maintenance/status: leader id == member id) and kill
// members.
//
// The binary: $ETCD_BINARY, else /usr/bin/etcd, else `etcd` on PATH.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace tenure::itest {

// A loopback port that was free a moment ago (bound to 127.0.0.1:0, closed).
std::uint16_t free_loopback_port();
// `n` distinct such ports (all held open until every one is chosen).
std::vector<std::uint16_t> free_loopback_ports(std::size_t n);

struct etcd_options {
    std::string binary;  // empty: see above
    std::string name = "itest";
    std::uint16_t client_port = 0;  // 0: a free port
    std::uint16_t peer_port = 0;    // 0: a free port
    // "--initial-cluster" value; empty: this member alone.
    std::string initial_cluster;
    std::string cluster_token;  // empty: unique per process
    // Short raft timings so that a leader is re-elected quickly after a kill
    // (the minimum lease TTL becomes 1 s).
    int heartbeat_ms = 50;
    int election_ms = 500;
    bool wait_ready = true;
    std::chrono::milliseconds startup_timeout{20'000};
    std::vector<std::string> extra_args;
};

struct etcd_member_status {
    std::uint64_t member_id = 0;
    std::uint64_t leader = 0;  // 0: no leader known
};

class etcd_process {
public:
    explicit etcd_process(etcd_options opts = {});
    ~etcd_process();
    etcd_process(etcd_process const&) = delete;
    etcd_process& operator=(etcd_process const&) = delete;

    std::string const& name() const noexcept { return name_; }
    pid_t pid() const noexcept { return pid_; }
    std::uint16_t client_port() const noexcept { return client_port_; }
    std::uint16_t peer_port() const noexcept { return peer_port_; }
    std::string client_url() const;  // http://127.0.0.1:PORT
    std::string const& data_dir() const noexcept { return data_dir_; }

    // Polls GET /health until it answers {"health":"true"}; throws (with the
    // log) when the process exits or the timeout passes.
    void wait_ready(std::chrono::milliseconds timeout);

    // Sends `sig` and waits for the exit. The raw wait status, or nullopt
    // when it did not exit within `timeout`.
    std::optional<int> stop(int sig, std::chrono::milliseconds timeout);
    // SIGKILL and reap.
    void kill();
    // True while the process has not exited (reaps it if it has).
    bool running();

    // POST /v3/maintenance/status; nullopt when the member does not answer.
    std::optional<etcd_member_status> status(std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));

    // etcd's stderr so far.
    std::string log() const;

private:
    void start(etcd_options opts);
    std::optional<int> wait_exit(std::chrono::milliseconds timeout);
    void cleanup() noexcept;

    std::string name_;
    pid_t pid_ = -1;
    int pidfd_ = -1;
    int log_fd_ = -1;
    std::uint16_t client_port_ = 0;
    std::uint16_t peer_port_ = 0;
    std::string data_dir_;
    std::optional<int> status_;
};

class etcd_cluster {
public:
    explicit etcd_cluster(std::size_t members = 3, std::chrono::milliseconds startup_timeout = std::chrono::milliseconds(30'000));
    ~etcd_cluster();
    etcd_cluster(etcd_cluster const&) = delete;
    etcd_cluster& operator=(etcd_cluster const&) = delete;

    std::size_t size() const noexcept { return members_.size(); }
    etcd_process& member(std::size_t i) { return *members_.at(i); }
    std::vector<std::string> client_urls() const;

    // The index of the raft leader: polls the running members until one
    // reports a leader that is itself a running member. Throws after `timeout`.
    std::size_t leader_index(std::chrono::milliseconds timeout = std::chrono::milliseconds(15'000));
    // SIGKILLs member i.
    void kill(std::size_t i) { members_.at(i)->kill(); }

    // Every member's log, for failure messages.
    std::string logs() const;

private:
    void start(std::size_t n, std::chrono::milliseconds startup_timeout);

    std::vector<std::unique_ptr<etcd_process>> members_;
};

}  // namespace tenure::itest
