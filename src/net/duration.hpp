// Go-compatible duration strings ("15s", "1m30s", "1.5h", "500ms").
//
// Consul parses TTLs, LockDelays and blocking-query waits with Go's
// time.ParseDuration and prints durations with time.Duration.String(); the
// agent's error bodies and the client's query strings must match both.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace tenure::detail {

struct duration_parse_result {
    std::optional<std::chrono::nanoseconds> value;
    std::string error;  // Go's message, e.g. `time: missing unit in duration "15"`
};

// Parses like Go's time.ParseDuration: optional sign, then one or more
// decimal numbers each followed by a unit (ns, us, µs, μs, ms, s, m, h);
// a bare "0" is allowed. Overflow is an error.
duration_parse_result parse_go_duration(std::string_view text);

// Formats like Go's time.Duration.String(): "10s", "24h0m0s", "1.5s", "500ms", "0s".
std::string format_go_duration(std::chrono::nanoseconds d);

}  // namespace tenure::detail
