// The agent's metrics: counters fed by the state machine's hooks and the HTTP
// server, gauges read from the state machine when rendered. Socket-free.
//
// Served by /v1/agent/metrics as Consul's JSON (Gauges / Counters / Samples)
// and with ?format=prometheus as Prometheus text exposition format 0.0.4:
//   tenure_sessions, tenure_kv_keys, tenure_kv_tombstones, tenure_locks_held,
//   tenure_blocking_queries, tenure_raft_index                            gauges
//   tenure_session_invalidations_total{cause="ttl|destroy|check|node"}   counter
//   tenure_lock_delay_rejections_total                                    counter
//   tenure_http_requests_total{method,endpoint,code}                      counter
//   tenure_http_request_duration_seconds{endpoint}                        histogram (blocking queries excluded)
//   tenure_wal_commits_total, tenure_wal_bytes_total,
//   tenure_wal_commit_duration_seconds                                    with -data-dir
#pragma once

#include "agent/state.hpp"

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

namespace tenure::detail::agent {

class agent_metrics {
public:
    struct histogram {
        std::vector<std::uint64_t> counts;  // per bucket (not cumulative); last = above every bound
        std::uint64_t count = 0;
        double sum = 0;
        void observe(double v, std::vector<double> const& bounds);
    };

    // Upper bounds (seconds) of the latency histograms.
    static std::vector<double> const& latency_bounds();

    // Counts invalidations and lock-delay rejections. Wraps the callbacks
    // already set (call after setting them); the metrics must outlive `sm`'s
    // use of them.
    void attach(state_machine& sm);

    void observe_request(std::string_view method, std::string_view target, unsigned status,
                         std::chrono::nanoseconds latency);
    void observe_commit(std::chrono::nanoseconds duration, std::size_t bytes);

    std::string prometheus(state_machine const& sm) const;
    std::string consul_json(state_machine const& sm) const;

    // "kv", "txn", "session", "agent", "catalog", "health", "status", "other".
    static std::string_view endpoint_class(std::string_view target);
    // A blocking query (?index= other than 0): its latency is its wait.
    static bool is_blocking(std::string_view target);

    std::uint64_t invalidations(std::string_view cause) const;  // "ttl", "destroy", "check", "node"
    std::uint64_t lock_delay_rejections() const noexcept { return lock_delay_rejections_; }
    std::uint64_t requests(std::string_view method, std::string_view endpoint, unsigned code) const;

private:
    std::map<std::string, std::uint64_t, std::less<>> invalidations_;
    std::uint64_t lock_delay_rejections_ = 0;
    std::map<std::tuple<std::string, std::string, unsigned>, std::uint64_t> requests_;
    std::map<std::string, histogram, std::less<>> latency_;
    bool wal_ = false;
    std::uint64_t wal_commits_ = 0;
    std::uint64_t wal_bytes_ = 0;
    histogram wal_latency_;
};

}  // namespace tenure::detail::agent
