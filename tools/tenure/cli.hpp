// Shared pieces of the `tenure` subcommands: Go-style flag parsing (the way
// `consul lock` parses its command line), the Consul HTTP flags, and the
// entry points of the subcommands in lock.cpp and leader.cpp.
#pragma once

#include <tenure/consul/client.hpp>
#include <tenure/etcd/client.hpp>

#include <chrono>
#include <functional>
#include <iosfwd>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tenure::cli {

// Bad command line: main() prints the message, then the command's usage, on
// stderr, and exits 1.
struct usage_error : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A flag set with the rules of Go's flag package, which `consul lock` uses:
// `-flag` and `--flag` alike; `-flag=value` or `-flag value`; boolean flags
// take no separate value (`-shell=false`); parsing stops at the first argument
// that is not a flag (or `-` alone), and after `--`, so a child command's own
// flags are left alone. `-h`, `-help` and `--help` request the usage.
class flag_set {
public:
    void add_bool(std::string name, bool& target);
    void add_string(std::string name, std::string& target);
    void add_int(std::string name, int& target);
    // A Go duration ("15s", "1m30s", "500ms"; a bare "0").
    void add_duration(std::string name, std::chrono::nanoseconds& target);

    // Parses `args`; returns the arguments after the flags. Throws
    // usage_error for an unknown flag or a bad value.
    std::vector<std::string> parse(std::vector<std::string> const& args);

    bool help_requested() const noexcept { return help_; }
    bool was_set(std::string_view name) const;

private:
    struct flag {
        bool is_bool = false;
        std::function<void(std::string const& value)> set;  // throws usage_error
    };
    std::map<std::string, flag, std::less<>> flags_;
    std::vector<std::string> set_;
    bool help_ = false;
};

// -http-addr, -token and -datacenter, as consul's commands take them; empty
// address and token fall back to CONSUL_HTTP_ADDR and CONSUL_HTTP_TOKEN (the
// client does that).
struct http_flags {
    std::string address;
    std::string token;
    std::string datacenter;
    // TLS for https:// addresses (Consul's flag names).
    std::string ca_file;
    std::string client_cert;
    std::string client_key;
    std::string tls_server_name;

    void add_to(flag_set& flags);
    consul::client_config config() const;
    // The usage lines of these flags.
    static void help(std::ostream& os);
};

// -etcd-endpoints: etcd (its v3 JSON gateway) instead of Consul. The backend
// is etcd when -etcd-endpoints is given, or when ETCDCTL_ENDPOINTS is set and
// neither -http-addr nor CONSUL_HTTP_ADDR is (explicit flags first; among
// environment variables Consul's wins, as before etcd support).
struct etcd_flags {
    std::string endpoints;  // "URL[,URL...]"

    void add_to(flag_set& flags);
    // Whether the command runs on etcd; throws usage_error for flags that
    // contradict each other (-http-addr with -etcd-endpoints, -token or
    // -datacenter on etcd, an empty -etcd-endpoints).
    bool selected(flag_set const& flags) const;
    etcd::client_config config() const;
    // The usage lines of this flag.
    static void help(std::ostream& os);
};

// A value quoted like Go's %q on ASCII: `"`, `\` and control characters
// escaped; bytes outside printable ASCII as \xNN. One line, easy to parse.
std::string quote(std::string_view value);

// What an exception says (an api_error's message includes the HTTP status and
// the server's text).
std::string describe(std::exception const& e);

// Subcommands (lock.cpp, leader.cpp).
int run_lock(std::vector<std::string> args);
void lock_help(std::ostream& os);
// `tenure __supervise ...`: the supervisor `tenure lock` starts its command
// with (lock.cpp). Internal, not listed in the help.
int run_lock_supervisor(int argc, char** argv);
int run_leader(std::vector<std::string> args);
void leader_help(std::ostream& os);
// transfer.cpp
int run_transfer(std::vector<std::string> args);
void transfer_help(std::ostream& os);

}  // namespace tenure::cli
