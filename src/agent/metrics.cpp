// The agent's metrics and their two renderings (see metrics.hpp).
#include "agent/metrics.hpp"
#include "agent/persist.hpp"

#include <tenure/detail/clock.hpp>

#include <boost/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <ctime>

namespace tenure::detail::agent {

namespace {

constexpr char const* causes[] = {"ttl", "destroy", "check", "node"};

std::string_view cause_label(invalidation_cause c) {
    switch (c) {
    case invalidation_cause::ttl_expired: return "ttl";
    case invalidation_cause::destroyed: return "destroy";
    case invalidation_cause::check_critical:
    case invalidation_cause::check_deregistered: return "check";
    case invalidation_cause::node_deregistered: return "node";
    }
    return "check";
}

// Known methods only: a garbage method must not mint a new time series.
std::string_view method_label(std::string_view m) {
    for (std::string_view k : {"GET", "PUT", "POST", "DELETE", "HEAD", "OPTIONS", "PATCH"})
        if (m == k) return k;
    return "OTHER";
}

// Shortest text that reads back as the same double; Prometheus spellings for the specials.
std::string number(double v) {
    if (std::isnan(v)) return "NaN";
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
    return std::string(buf, end);
}

// Bucket bounds in plain decimals ("0.0001", not "1e-04"): what people grep for.
std::string bound(double v) {
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed);
    return std::string(buf, end);
}

std::string escape_label(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

struct prom_writer {
    std::string out;
    void family(std::string_view name, std::string_view type, std::string_view help) {
        out += "# HELP ";
        out += name;
        out += ' ';
        out += help;
        out += "\n# TYPE ";
        out += name;
        out += ' ';
        out += type;
        out += '\n';
    }
    void sample(std::string_view name, std::string_view labels, double v) {
        out += name;
        if (!labels.empty()) {
            out += '{';
            out += labels;
            out += '}';
        }
        out += ' ';
        out += number(v);
        out += '\n';
    }
    void gauge(std::string_view name, std::string_view help, double v) {
        family(name, "gauge", help);
        sample(name, {}, v);
    }
    void hist(std::string_view name, std::string_view labels, agent_metrics::histogram const& h,
              std::vector<double> const& bounds) {
        std::uint64_t cum = 0;
        std::string prefix = labels.empty() ? std::string{} : std::string(labels) + ",";
        for (std::size_t i = 0; i < bounds.size(); ++i) {
            cum += i < h.counts.size() ? h.counts[i] : 0;
            sample(std::string(name) + "_bucket", prefix + "le=\"" + bound(bounds[i]) + "\"", static_cast<double>(cum));
        }
        sample(std::string(name) + "_bucket", prefix + "le=\"+Inf\"", static_cast<double>(h.count));
        sample(std::string(name) + "_sum", labels, h.sum);
        sample(std::string(name) + "_count", labels, static_cast<double>(h.count));
    }
};

}  // namespace

void agent_metrics::histogram::observe(double v, std::vector<double> const& bounds) {
    if (counts.size() != bounds.size() + 1) counts.assign(bounds.size() + 1, 0);
    std::size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    ++count;
    sum += v;
}

std::vector<double> const& agent_metrics::latency_bounds() {
    static std::vector<double> const b = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                          0.025,  0.05,    0.1,    0.25,  0.5,    1,     2.5};
    return b;
}

void agent_metrics::attach(state_machine& sm) {
    for (auto const* c : causes) invalidations_.emplace(c, 0);
    auto prev_inv = std::move(sm.on_invalidate);
    sm.on_invalidate = [this, prev_inv](session_entry const& s, invalidation_cause cause) {
        ++invalidations_[std::string(cause_label(cause))];
        if (prev_inv) prev_inv(s, cause);
    };
    auto prev_rej = std::move(sm.on_lock_delay_reject);
    sm.on_lock_delay_reject = [this, prev_rej](std::string_view key) {
        ++lock_delay_rejections_;
        if (prev_rej) prev_rej(key);
    };
}

std::string_view agent_metrics::endpoint_class(std::string_view target) {
    std::string_view path = target.substr(0, target.find('?'));
    if (!path.starts_with("/v1/")) return "other";
    path.remove_prefix(4);
    std::string_view first = path.substr(0, path.find('/'));
    for (std::string_view k : {"kv", "txn", "session", "agent", "catalog", "health", "status"})
        if (first == k) return k;
    return "other";
}

bool agent_metrics::is_blocking(std::string_view target) {
    auto q = target.find('?');
    if (q == std::string_view::npos) return false;
    std::string_view query = target.substr(q + 1);
    while (!query.empty()) {
        std::string_view part = query.substr(0, query.find('&'));
        query.remove_prefix(std::min(query.size(), part.size() + 1));
        if (part.starts_with("index=")) {
            part.remove_prefix(6);
            return !part.empty() && part.find_first_not_of('0') != std::string_view::npos;
        }
    }
    return false;
}

void agent_metrics::observe_request(std::string_view method, std::string_view target, unsigned status,
                                    std::chrono::nanoseconds latency) {
    std::string_view ep = endpoint_class(target);
    ++requests_[{std::string(method_label(method)), std::string(ep), status}];
    if (is_blocking(target)) return;
    auto it = latency_.find(ep);
    if (it == latency_.end()) it = latency_.emplace(std::string(ep), histogram{}).first;
    it->second.observe(std::chrono::duration<double>(latency).count(), latency_bounds());
}

void agent_metrics::observe_commit(std::chrono::nanoseconds duration, std::size_t bytes) {
    wal_ = true;
    ++wal_commits_;
    wal_bytes_ += bytes;
    wal_latency_.observe(std::chrono::duration<double>(duration).count(), latency_bounds());
}

std::uint64_t agent_metrics::invalidations(std::string_view cause) const {
    auto it = invalidations_.find(cause);
    return it == invalidations_.end() ? 0 : it->second;
}

std::uint64_t agent_metrics::requests(std::string_view method, std::string_view endpoint, unsigned code) const {
    auto it = requests_.find({std::string(method), std::string(endpoint), code});
    return it == requests_.end() ? 0 : it->second;
}

std::string agent_metrics::prometheus(state_machine const& sm) const {
    prom_writer w;
    w.gauge("tenure_sessions", "Sessions.", static_cast<double>(state_access::session_count(sm)));
    w.gauge("tenure_kv_keys", "KV entries.", static_cast<double>(state_access::kv_count(sm)));
    w.gauge("tenure_kv_tombstones", "KV tombstones (deleted keys remembered for blocking queries).",
            static_cast<double>(state_access::tombstone_count(sm)));
    w.gauge("tenure_locks_held", "KV entries held by a session.", static_cast<double>(state_access::held_lock_count(sm)));
    w.gauge("tenure_blocking_queries", "Blocking queries in flight.", static_cast<double>(sm.watcher_count()));
    w.gauge("tenure_raft_index", "The last index handed out by a write.", static_cast<double>(sm.raft_index()));

    w.family("tenure_session_invalidations_total", "counter", "Sessions invalidated, by cause.");
    for (auto const* c : causes)
        w.sample("tenure_session_invalidations_total", std::string("cause=\"") + c + "\"",
                 static_cast<double>(invalidations(c)));
    w.family("tenure_lock_delay_rejections_total", "counter", "Acquires refused because of lock-delay.");
    w.sample("tenure_lock_delay_rejections_total", {}, static_cast<double>(lock_delay_rejections_));

    w.family("tenure_http_requests_total", "counter", "HTTP requests answered, by method, endpoint and status code.");
    for (auto const& [k, n] : requests_) {
        auto const& [method, ep, code] = k;
        w.sample("tenure_http_requests_total",
                 "method=\"" + escape_label(method) + "\",endpoint=\"" + escape_label(ep) + "\",code=\"" +
                     std::to_string(code) + "\"",
                 static_cast<double>(n));
    }
    w.family("tenure_http_request_duration_seconds", "histogram",
             "Time from request header to response written, blocking queries excluded.");
    for (auto const& [ep, h] : latency_)
        w.hist("tenure_http_request_duration_seconds", "endpoint=\"" + escape_label(ep) + "\"", h, latency_bounds());

    if (wal_) {
        w.family("tenure_wal_commits_total", "counter", "Write-ahead log commits (one fdatasync each).");
        w.sample("tenure_wal_commits_total", {}, static_cast<double>(wal_commits_));
        w.family("tenure_wal_bytes_total", "counter", "Bytes appended to the write-ahead log.");
        w.sample("tenure_wal_bytes_total", {}, static_cast<double>(wal_bytes_));
        w.family("tenure_wal_commit_duration_seconds", "histogram", "Write plus fdatasync time of a log commit.");
        w.hist("tenure_wal_commit_duration_seconds", {}, wal_latency_, latency_bounds());
    }
    return std::move(w.out);
}

std::string agent_metrics::consul_json(state_machine const& sm) const {
    namespace json = boost::json;
    auto gauge = [](std::string name, double v, json::object labels = {}) {
        return json::object{{"Name", std::move(name)}, {"Value", v}, {"Labels", std::move(labels)}};
    };
    auto counter = [](std::string name, double n, json::object labels = {}) {
        return json::object{{"Name", std::move(name)}, {"Count", n},  {"Rate", 0.0},  {"Sum", n},
                            {"Min", n > 0 ? 1.0 : 0.0}, {"Max", n > 0 ? 1.0 : 0.0}, {"Mean", n > 0 ? 1.0 : 0.0},
                            {"Stddev", 0.0}, {"Labels", std::move(labels)}};
    };
    json::array gauges, counters, samples;
    gauges.push_back(gauge("tenure.session.count", static_cast<double>(state_access::session_count(sm))));
    gauges.push_back(gauge("tenure.kvs.keys", static_cast<double>(state_access::kv_count(sm))));
    gauges.push_back(gauge("tenure.kvs.tombstones", static_cast<double>(state_access::tombstone_count(sm))));
    gauges.push_back(gauge("tenure.kvs.locks_held", static_cast<double>(state_access::held_lock_count(sm))));
    gauges.push_back(gauge("tenure.http.blocking_queries", static_cast<double>(sm.watcher_count())));
    gauges.push_back(gauge("tenure.raft.index", static_cast<double>(sm.raft_index())));
    for (auto const* c : causes)
        counters.push_back(counter("tenure.session.invalidations", static_cast<double>(invalidations(c)),
                                   json::object{{"cause", c}}));
    counters.push_back(counter("tenure.kvs.lock_delay_rejections", static_cast<double>(lock_delay_rejections_)));
    for (auto const& [k, n] : requests_) {
        auto const& [method, ep, code] = k;
        counters.push_back(counter("tenure.http.requests", static_cast<double>(n),
                                   json::object{{"method", method}, {"endpoint", ep}, {"code", std::to_string(code)}}));
    }
    auto sample = [](std::string name, histogram const& h, json::object labels) {
        double mean = h.count ? h.sum / static_cast<double>(h.count) : 0.0;
        return json::object{{"Name", std::move(name)}, {"Count", h.count}, {"Rate", 0.0},   {"Sum", h.sum},
                            {"Mean", mean},            {"Stddev", 0.0},     {"Labels", std::move(labels)}};
    };
    for (auto const& [ep, h] : latency_)
        samples.push_back(sample("tenure.http.request_duration_seconds", h, json::object{{"endpoint", ep}}));
    if (wal_) {
        counters.push_back(counter("tenure.wal.commits", static_cast<double>(wal_commits_)));
        counters.push_back(counter("tenure.wal.bytes", static_cast<double>(wal_bytes_)));
        samples.push_back(sample("tenure.wal.commit_duration_seconds", wal_latency_, {}));
    }
    // Consul's timestamp: "2026-11-29 21:40:00 +0000 UTC".
    std::time_t t = tenure::detail::wall_clock::to_time_t(tenure::detail::wall_clock::now());
    std::tm tm{};
    gmtime_r(&t, &tm);
    char ts[64];
    std::strftime(ts, sizeof ts, "%Y-%m-%d %H:%M:%S +0000 UTC", &tm);
    return json::serialize(json::object{{"Timestamp", ts},
                                        {"Gauges", std::move(gauges)},
                                        {"Points", json::array{}},
                                        {"Counters", std::move(counters)},
                                        {"Samples", std::move(samples)}});
}

}  // namespace tenure::detail::agent
