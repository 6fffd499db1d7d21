// A tiny line logger shared by the embedded agent and the `tenure` tool.
//
// Lines look like Consul's (hclog) output:
//   2026-11-29T21:40:00.123Z [INFO] agent: message
// One write (and one flush) per line, so lines from one thread never tear.
#pragma once

#include <tenure/detail/clock.hpp>
#include <tenure/log_level.hpp>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace tenure {

namespace detail {

class logger {
public:
    logger() = default;
    logger(log_level level, std::ostream* os, log_format format = log_format::text) noexcept
        : level_(level), os_(os), format_(format) {}

    log_level level() const noexcept { return level_; }
    bool enabled(log_level l) const noexcept {
        return os_ != nullptr && l != log_level::off && level_ != log_level::off && l >= level_;
    }

    // Writes one line if `l` is enabled. `name` is the subsystem ("agent", "agent.http").
    void write(log_level l, std::string_view name, std::string_view message) const {
        if (!enabled(l)) return;
        if (format_ == log_format::json) {
            std::string line = "{\"@timestamp\":\"" + timestamp() + "\",\"@level\":\"";
            line += to_string(l);
            line += "\",\"@module\":";
            append_json_string(line, name);
            line += ",\"@message\":";
            append_json_string(line, message);
            line += "}\n";
            os_->write(line.data(), static_cast<std::streamsize>(line.size()));
            os_->flush();
            return;
        }
        std::string line = timestamp();
        line += ' ';
        line += tag(l);
        line += ' ';
        line += name;
        line += ": ";
        line += message;
        line += '\n';
        os_->write(line.data(), static_cast<std::streamsize>(line.size()));
        os_->flush();
    }

    void trace(std::string_view name, std::string_view m) const { write(log_level::trace, name, m); }
    void debug(std::string_view name, std::string_view m) const { write(log_level::debug, name, m); }
    void info(std::string_view name, std::string_view m) const { write(log_level::info, name, m); }
    void warn(std::string_view name, std::string_view m) const { write(log_level::warn, name, m); }
    void error(std::string_view name, std::string_view m) const { write(log_level::error, name, m); }

private:
    static void append_json_string(std::string& out, std::string_view s) {
        out += '"';
        for (char c : s) {
            auto const u = static_cast<unsigned char>(c);
            if (c == '"' || c == '\\') {
                out += '\\';
                out += c;
            } else if (c == '\n') {
                out += "\\n";
            } else if (c == '\t') {
                out += "\\t";
            } else if (u < 0x20) {
                char buf[8];
                std::snprintf(buf, sizeof buf, "\\u%04x", u);
                out += buf;
            } else {
                out += c;  // UTF-8 passes through
            }
        }
        out += '"';
    }

    static std::string_view tag(log_level l) noexcept {
        switch (l) {
        case log_level::trace: return "[TRACE]";
        case log_level::debug: return "[DEBUG]";
        case log_level::info: return "[INFO]";
        case log_level::warn: return "[WARN]";
        case log_level::error: return "[ERROR]";
        case log_level::off: break;
        }
        return "[?]";
    }

    // UTC, millisecond precision: 2026-11-29T21:40:00.123Z
    static std::string timestamp() {
        using namespace std::chrono;
        using wall = tenure::detail::wall_clock;
        auto const now = wall::now();
        auto const ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
        std::time_t const t = wall::to_time_t(now);
        std::tm tm{};
        gmtime_r(&t, &tm);
        char buf[96];
        std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                      tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms < 0 ? ms + 1000 : ms));
        return buf;
    }

    log_level level_ = log_level::info;
    std::ostream* os_ = nullptr;
    log_format format_ = log_format::text;
};

}  // namespace detail
}  // namespace tenure
