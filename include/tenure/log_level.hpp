/// @file
/// tenure::log_level and tenure::log_format - how much the embedded agent and
/// the `tenure` tool log, and in which line format.
#pragma once

#include <optional>
#include <string_view>

namespace tenure {
enum class log_level { trace, debug, info, warn, error, off };

constexpr std::string_view to_string(log_level l) noexcept {
    switch (l) {
    case log_level::trace: return "trace";
    case log_level::debug: return "debug";
    case log_level::info: return "info";
    case log_level::warn: return "warn";
    case log_level::error: return "error";
    case log_level::off: return "off";
    }
    return "unknown";
}

// "trace", "debug", "info", "warn" (or "warning"), "error", "off"; case-insensitive.
constexpr std::optional<log_level> parse_log_level(std::string_view s) noexcept {
    auto eq = [s](std::string_view name) {
        if (s.size() != name.size()) return false;
        for (std::size_t i = 0; i < s.size(); ++i) {
            char c = s[i];
            if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
            if (c != name[i]) return false;
        }
        return true;
    };
    if (eq("trace")) return log_level::trace;
    if (eq("debug")) return log_level::debug;
    if (eq("info")) return log_level::info;
    if (eq("warn") || eq("warning")) return log_level::warn;
    if (eq("error") || eq("err")) return log_level::error;
    if (eq("off")) return log_level::off;
    return std::nullopt;
}

// text: hclog's line format above. json: one object per line, hclog's JSON
// keys: {"@timestamp":"...","@level":"info","@module":"agent","@message":"..."}.
enum class log_format { text, json };

}  // namespace tenure
