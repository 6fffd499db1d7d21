// `tenure agent` flags for ACLs, TLS and limits against abuse.
#include "agent_flags.hpp"

#include "cli.hpp"

#include <boost/program_options.hpp>

#include <charconv>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <string>

namespace tenure::cli {

namespace po = boost::program_options;

namespace {

std::size_t parse_count(po::variables_map const& vm, char const* flag) {
    auto const& text = vm[flag].as<std::string>();
    unsigned long long n = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() ||
        n > std::numeric_limits<std::size_t>::max())
        throw usage_error("invalid value for -" + std::string(flag) + ": \"" + text +
                          "\" (want a non-negative integer; 0 means no limit)");
    return static_cast<std::size_t>(n);
}

double parse_rate(po::variables_map const& vm, char const* flag) {
    auto const& text = vm[flag].as<std::string>();
    double v = 0;
    auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || !(v >= 0) ||
        v > 1e12)
        throw usage_error("invalid value for -" + std::string(flag) + ": \"" + text +
                          "\" (want a non-negative number; 0 means no limit)");
    return v;
}

std::string optional_string(po::variables_map const& vm, char const* flag) {
    if (!vm.count(flag)) return {};
    auto const& v = vm[flag].as<std::string>();
    if (v.empty()) throw usage_error("-" + std::string(flag) + " must not be empty");
    return v;
}

// A secret from a file: its first line, surrounding whitespace removed.
std::string read_secret_file(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw usage_error("cannot read -acl-bootstrap-token-file \"" + path + "\"");
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
    auto const first = s.find_first_not_of(" \t\r");
    auto const last = s.find_last_not_of(" \t\r");
    if (first == std::string::npos) throw usage_error("-acl-bootstrap-token-file \"" + path + "\" is empty");
    return s.substr(first, last - first + 1);
}

}  // namespace

void add_agent_security_flags(po::options_description& desc) {
    desc.add_options()                                                              //
        ("acl-enabled", po::bool_switch(), "")                                      //
        ("acl-default-policy", po::value<std::string>()->default_value("deny"), "")  //
        ("acl-bootstrap-token", po::value<std::string>(), "")                       //
        ("acl-bootstrap-token-file", po::value<std::string>(), "")                  //
        ("acl-file", po::value<std::string>(), "")                                  //
        ("max-sessions-per-node", po::value<std::string>()->default_value("10000"), "")  //
        ("max-kv-keys", po::value<std::string>()->default_value("1000000"), "")     //
        ("kv-max-value-size", po::value<std::string>()->default_value("524288"), "")  //
        ("max-blocking-queries", po::value<std::string>()->default_value("16384"), "")  //
        ("http-rate-per-conn", po::value<std::string>()->default_value("200000"), "")  //
        ("http-burst-per-conn", po::value<std::string>()->default_value("200000"), "")  //
        ("max-header-bytes", po::value<std::string>()->default_value("65536"), "")  //
        ("https-addr", po::value<std::string>(), "")                                //
        ("cert-file", po::value<std::string>(), "")                                 //
        ("key-file", po::value<std::string>(), "")                                  //
        ("ca-file", po::value<std::string>(), "")                                   //
        ("verify-incoming", po::bool_switch(), "");
}

void apply_agent_security_flags(po::variables_map const& vm, tenure::agent_options& opts) {
    // ---- ACLs ----
    opts.acl_enabled = vm["acl-enabled"].as<bool>();
    auto const& policy = vm["acl-default-policy"].as<std::string>();
    if (policy != "allow" && policy != "deny")
        throw usage_error("invalid value for -acl-default-policy: \"" + policy + "\" (allow or deny)");
    opts.acl_default_allow = policy == "allow";
    if (vm.count("acl-bootstrap-token") && vm.count("acl-bootstrap-token-file"))
        throw usage_error("give -acl-bootstrap-token or -acl-bootstrap-token-file, not both");
    opts.acl_bootstrap_token = optional_string(vm, "acl-bootstrap-token");
    if (auto const file = optional_string(vm, "acl-bootstrap-token-file"); !file.empty())
        opts.acl_bootstrap_token = read_secret_file(file);
    opts.acl_file = optional_string(vm, "acl-file");
    bool const acl_flags = !opts.acl_bootstrap_token.empty() || !opts.acl_file.empty() || !vm["acl-default-policy"].defaulted();
    if (acl_flags && !opts.acl_enabled)
        throw usage_error("-acl-bootstrap-token, -acl-bootstrap-token-file, -acl-file and -acl-default-policy need -acl-enabled");

    // ---- limits ----
    opts.max_sessions_per_node = parse_count(vm, "max-sessions-per-node");
    opts.max_kv_keys = parse_count(vm, "max-kv-keys");
    opts.kv_max_value_size = parse_count(vm, "kv-max-value-size");
    if (opts.kv_max_value_size == 0) throw usage_error("-kv-max-value-size must be positive");
    opts.max_blocking_queries = parse_count(vm, "max-blocking-queries");
    opts.http_rate_per_conn = parse_rate(vm, "http-rate-per-conn");
    opts.http_burst_per_conn = parse_rate(vm, "http-burst-per-conn");
    if (opts.http_rate_per_conn > 0 && opts.http_burst_per_conn < 1)
        throw usage_error("-http-burst-per-conn must be at least 1 when -http-rate-per-conn is set");
    opts.max_header_bytes = parse_count(vm, "max-header-bytes");
    if (opts.max_header_bytes < 1024) throw usage_error("-max-header-bytes must be at least 1024");

    // ---- TLS ----
    opts.https_addr = optional_string(vm, "https-addr");
    opts.cert_file = optional_string(vm, "cert-file");
    opts.key_file = optional_string(vm, "key-file");
    opts.ca_file = optional_string(vm, "ca-file");
    opts.verify_incoming = vm["verify-incoming"].as<bool>();
    bool const tls_flags = !opts.cert_file.empty() || !opts.key_file.empty() || !opts.ca_file.empty() || opts.verify_incoming;
    if (tls_flags && opts.https_addr.empty())
        throw usage_error("-cert-file, -key-file, -ca-file and -verify-incoming need -https-addr");
    if (!opts.https_addr.empty() && (opts.cert_file.empty() || opts.key_file.empty()))
        throw usage_error("-https-addr needs -cert-file and -key-file");
    if (opts.verify_incoming && opts.ca_file.empty()) throw usage_error("-verify-incoming needs -ca-file");
}

void agent_security_help(std::ostream& os) {
    os << "\nHTTPS (see docs/agent.md, \"TLS\"):\n\n"
          "  -https-addr=<host:port>\n"
          "     Also serve the API over HTTPS here; port 0 picks a free port. The\n"
          "     address is printed as a second line: tenure agent listening on https://...\n\n"
          "  -cert-file=<path>, -key-file=<path>\n"
          "     PEM certificate chain and private key of the HTTPS listener.\n\n"
          "  -ca-file=<path>\n"
          "     PEM CAs that sign client certificates.\n\n"
          "  -verify-incoming\n"
          "     Require a client certificate signed by a CA of -ca-file.\n"
          "\nACLs (see docs/agent.md, \"ACLs\"):\n\n"
          "  -acl-enabled\n"
          "     Check every request against its token (X-Consul-Token,\n"
          "     Authorization: Bearer, or ?token=). Default: off\n\n"
          "  -acl-default-policy=<allow|deny>\n"
          "     What a token may do where no rule matches. Default: deny\n\n"
          "  -acl-bootstrap-token=<secret>, -acl-bootstrap-token-file=<path>\n"
          "     Secret of the management token (may do anything). The file form\n"
          "     keeps the secret out of the process list.\n\n"
          "  -acl-file=<path>\n"
          "     JSON file of policies and tokens with key, session, node and agent\n"
          "     rules (exact or prefix; read, write or deny).\n"
          "\nLimits against abuse (0 means no limit):\n\n"
          "  -max-sessions-per-node=<n>   Sessions one node may hold. Default: 10000\n"
          "  -max-kv-keys=<n>             Live KV keys. Default: 1000000\n"
          "  -kv-max-value-size=<bytes>   Largest KV value (413 beyond). Default: 524288\n"
          "  -max-blocking-queries=<n>    Blocking queries parked at once (429 beyond).\n"
          "                               Default: 16384\n"
          "  -http-rate-per-conn=<r>      Requests per second per connection (429\n"
          "                               beyond). Default: 200000\n"
          "  -http-burst-per-conn=<n>     Burst of that token bucket. Default: 200000\n"
          "  -max-header-bytes=<bytes>    Largest request header (431 beyond).\n"
          "                               Default: 65536\n";
}

}  // namespace tenure::cli
