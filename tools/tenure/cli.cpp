#include "cli.hpp"

#include "net/duration.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <ostream>

namespace tenure::cli {

namespace {

// strconv.ParseBool.
std::optional<bool> parse_bool(std::string_view s) {
    if (s == "1" || s == "t" || s == "T" || s == "true" || s == "TRUE" || s == "True") return true;
    if (s == "0" || s == "f" || s == "F" || s == "false" || s == "FALSE" || s == "False") return false;
    return std::nullopt;
}

}  // namespace

void flag_set::add_bool(std::string name, bool& target) {
    std::string n = name;
    flags_[std::move(name)] = {true, [&target, n](std::string const& v) {
                                   auto b = parse_bool(v);
                                   if (!b) throw usage_error("invalid boolean value \"" + v + "\" for -" + n);
                                   target = *b;
                               }};
}

void flag_set::add_string(std::string name, std::string& target) {
    flags_[std::move(name)] = {false, [&target](std::string const& v) { target = v; }};
}

void flag_set::add_int(std::string name, int& target) {
    std::string n = name;
    flags_[std::move(name)] = {false, [&target, n](std::string const& v) {
                                   int x = 0;
                                   auto const [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
                                   if (v.empty() || ec != std::errc{} || end != v.data() + v.size())
                                       throw usage_error("invalid value \"" + v + "\" for -" + n + ": want an integer");
                                   target = x;
                               }};
}

void flag_set::add_duration(std::string name, std::chrono::nanoseconds& target) {
    std::string n = name;
    flags_[std::move(name)] = {false, [&target, n](std::string const& v) {
                                   auto const d = detail::parse_go_duration(v);
                                   if (!d.value) throw usage_error("invalid value \"" + v + "\" for -" + n + ": " + d.error);
                                   target = *d.value;
                               }};
}

std::vector<std::string> flag_set::parse(std::vector<std::string> const& args) {
    std::size_t i = 0;
    for (; i < args.size(); ++i) {
        std::string_view a = args[i];
        if (a.size() < 2 || a[0] != '-') break;  // the first non-flag ("-" alone is one too)
        if (a == "--") {
            ++i;
            break;
        }
        std::string_view body = a.substr(a[1] == '-' ? 2 : 1);
        if (body.empty() || body[0] == '-' || body[0] == '=') throw usage_error("bad flag syntax: " + std::string(a));
        std::string_view name = body;
        std::optional<std::string> value;
        if (auto eq = body.find('='); eq != std::string_view::npos) {
            name = body.substr(0, eq);
            value = std::string(body.substr(eq + 1));
        }
        if (name == "h" || name == "help") {
            help_ = true;
            continue;
        }
        auto it = flags_.find(name);
        if (it == flags_.end()) throw usage_error("flag provided but not defined: -" + std::string(name));
        if (!value) {
            if (it->second.is_bool) {
                value = "true";
            } else {
                if (i + 1 >= args.size()) throw usage_error("flag needs an argument: -" + std::string(name));
                value = args[++i];
            }
        }
        it->second.set(*value);
        set_.emplace_back(name);
    }
    return std::vector<std::string>(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
}

bool flag_set::was_set(std::string_view name) const {
    return std::find(set_.begin(), set_.end(), name) != set_.end();
}

void http_flags::add_to(flag_set& flags) {
    flags.add_string("http-addr", address);
    flags.add_string("token", token);
    flags.add_string("datacenter", datacenter);
    flags.add_string("ca-file", ca_file);
    flags.add_string("client-cert", client_cert);
    flags.add_string("client-key", client_key);
    flags.add_string("tls-server-name", tls_server_name);
}

consul::client_config http_flags::config() const {
    consul::client_config c;
    c.address = address;
    c.token = token;
    c.datacenter = datacenter;
    c.ca_file = ca_file;
    c.cert_file = client_cert;
    c.key_file = client_key;
    c.tls_server_name = tls_server_name;
    return c;
}

void http_flags::help(std::ostream& os) {
    os << "HTTP API Options:\n\n"
          "  -http-addr=<address>\n"
          "     The address of the Consul agent or `tenure agent`, with an optional\n"
          "     scheme (http://127.0.0.1:8500), or unix:///path for a Unix domain\n"
          "     socket. Default: CONSUL_HTTP_ADDR, else http://127.0.0.1:8500.\n\n"
          "  -token=<value>\n"
          "     ACL token sent as X-Consul-Token. Default: CONSUL_HTTP_TOKEN.\n\n"
          "  -datacenter=<name>\n"
          "     Datacenter to query. Default: the agent's own.\n\n"
          "  -ca-file=<path>\n"
          "     PEM CAs that verify an https:// agent. Default: CONSUL_CACERT, else\n"
          "     the system's CAs.\n\n"
          "  -client-cert=<path>, -client-key=<path>\n"
          "     Client certificate and key, for agents that verify incoming\n"
          "     connections. Default: CONSUL_CLIENT_CERT, CONSUL_CLIENT_KEY.\n\n"
          "  -tls-server-name=<name>\n"
          "     Name the agent's certificate must carry (and SNI). Default:\n"
          "     CONSUL_TLS_SERVER_NAME, else the address's host.\n";
}

void etcd_flags::add_to(flag_set& flags) { flags.add_string("etcd-endpoints", endpoints); }

bool etcd_flags::selected(flag_set const& flags) const {
    auto env_set = [](char const* name) {
        char const* v = std::getenv(name);
        return v && *v;
    };
    bool const flag = flags.was_set("etcd-endpoints");
    if (flag && flags.was_set("http-addr"))
        throw usage_error("-http-addr (Consul) and -etcd-endpoints (etcd) exclude each other; give one of them");
    bool const etcd = flag || (env_set("ETCDCTL_ENDPOINTS") && !flags.was_set("http-addr") && !env_set("CONSUL_HTTP_ADDR"));
    if (!etcd) return false;
    if (flag && endpoints.find_first_not_of(", ") == std::string::npos)
        throw usage_error("-etcd-endpoints needs at least one URL (got \"" + endpoints +
                          "\"), e.g. -etcd-endpoints http://127.0.0.1:2379");
    for (char const* consul_only : {"token", "datacenter"})
        if (flags.was_set(consul_only))
            throw usage_error(std::string("-") + consul_only + " is a Consul option; it cannot be used with etcd (" +
                              (flag ? "-etcd-endpoints" : "ETCDCTL_ENDPOINTS") + ")");
    return true;
}

etcd::client_config etcd_flags::config() const {
    etcd::client_config c;
    std::string_view rest = endpoints;
    while (!rest.empty()) {
        auto comma = rest.find(',');
        auto item = rest.substr(0, comma);
        while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
        while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
        if (!item.empty()) c.endpoints.emplace_back(item);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return c;  // no endpoints: the client reads ETCDCTL_ENDPOINTS
}

void etcd_flags::help(std::ostream& os) {
    os << "etcd Options:\n\n"
          "  -etcd-endpoints=<URL[,URL...]>\n"
          "     Use etcd (v3, its JSON gateway) instead of Consul: comma-separated\n"
          "     client URLs (http://127.0.0.1:2379). Requests fail over between them.\n"
          "     Without it, ETCDCTL_ENDPOINTS selects etcd when neither -http-addr nor\n"
          "     CONSUL_HTTP_ADDR is set. Excludes -http-addr, -token and -datacenter.\n"
          "     Default: none (Consul)\n";
}

std::string quote(std::string_view value) {
    std::string out;
    out.reserve(value.size() + 2);
    out += '"';
    for (unsigned char c : value) {
        switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
            if (c < 0x20 || c >= 0x7f) {
                char buf[5];
                std::snprintf(buf, sizeof buf, "\\x%02x", c);
                out += buf;
            } else {
                out += static_cast<char>(c);
            }
        }
    }
    out += '"';
    return out;
}

std::string describe(std::exception const& e) { return e.what(); }

}  // namespace tenure::cli
