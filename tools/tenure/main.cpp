// The `tenure` command line.
//
//   tenure agent [flags]                   run the embedded Consul-compatible agent
//   tenure lock [flags] <prefix> <child...>  run a command holding a lock (lock.cpp)
//   tenure leader [flags] <key>            print the holder of a lock key (leader.cpp)
//   tenure help [command]                  usage
//   tenure --version
//
// Flags follow Consul's (Go's) style: `-flag value`, `-flag=value` and
// `--flag` are all accepted. Subcommands are rows of `commands` below.
#include "agent_flags.hpp"
#include "cli.hpp"

#include <tenure/agent.hpp>
#include <tenure/busy_poll.hpp>
#include "net/duration.hpp"
#include "agent/log.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/program_options.hpp>
#include <boost/system/system_error.hpp>

#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <csignal>
#include <cstdio>
#include <exception>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace po = boost::program_options;

constexpr std::string_view tenure_version = "0.1.0";

// Bad command line: the message, then the command's usage, on stderr; exit 1.
using tenure::cli::usage_error;

struct command {
    std::string_view name;
    std::string_view arguments;  // after `tenure <name>`
    std::string_view synopsis;
    int (*run)(std::vector<std::string> args);  // the arguments after the command name
    void (*help)(std::ostream&);
};

int run_agent(std::vector<std::string> args);
void agent_help(std::ostream& os);

constexpr command commands[] = {
    {"agent", "[options]", "Runs the embedded Consul-compatible agent", run_agent, agent_help},
    {"leader", "[-watch] [options] <key>", "Prints the holder of a lock key (Consul or etcd), or each change",
     tenure::cli::run_leader, tenure::cli::leader_help},
    {"transfer", "[-to NAME] [options] <prefix>", "Asks the holder of <prefix>/.lock to hand it to a waiting candidate",
     tenure::cli::run_transfer, tenure::cli::transfer_help},
    {"lock", "[options] <prefix> <child...>", "Executes a command holding a lock (Consul or etcd), like consul lock",
     tenure::cli::run_lock, tenure::cli::lock_help},
};

command const* find_command(std::string_view name) {
    for (auto const& c : commands)
        if (c.name == name) return &c;
    return nullptr;
}

void print_usage(std::ostream& os) {
    os << "Usage: tenure [--version] [--help] <command> [<args>]\n\n"
          "Available commands are:\n";
    for (auto const& c : commands) os << "    " << std::left << std::setw(10) << c.name << c.synopsis << '\n';
    os << "\nUsage of each command:\n";
    for (auto const& c : commands) os << "    tenure " << c.name << ' ' << c.arguments << '\n';
    os << "\nOptions:\n"
          "    --help, -h     This text; with a command (tenure help <command>) that command's\n"
          "    --version      Prints the version\n"
          "\nRun \"tenure help <command>\" or \"tenure <command> -help\" for the command's flags and\n"
          "their defaults. lock and leader talk to Consul (-http-addr, CONSUL_HTTP_ADDR) or to\n"
          "etcd (-etcd-endpoints, ETCDCTL_ENDPOINTS).\n";
}

// Go's flag package takes `-flag` and `--flag` alike; Program_options wants
// `--` for long names. Rewrite a single leading dash on multi-letter flags
// (`-http-addr`, `-node=x`), leaving `-h`, values such as `-5s`, and
// everything after `--` alone.
std::vector<std::string> normalize_flags(std::vector<std::string> args) {
    for (auto& a : args) {
        if (a == "--") break;
        if (a.size() > 2 && a[0] == '-' && a[1] != '-' && std::isalpha(static_cast<unsigned char>(a[1])) &&
            a[2] != '=')
            a.insert(0, 1, '-');
    }
    return args;
}

po::variables_map parse_flags(std::vector<std::string> args, po::options_description const& desc) {
    namespace style = po::command_line_style;
    po::positional_options_description none;  // no positional arguments
    po::variables_map vm;
    try {
        auto parsed = po::command_line_parser(normalize_flags(std::move(args)))
                          .options(desc)
                          .positional(none)
                          .style(style::allow_long | style::long_allow_adjacent | style::long_allow_next |
                                 style::allow_short | style::allow_dash_for_short | style::short_allow_next)
                          .run();
        po::store(parsed, vm);
        po::notify(vm);
    } catch (po::too_many_positional_options_error const&) {
        throw usage_error("unexpected argument; this command takes only flags");
    } catch (po::error const& e) {
        std::string m = e.what();
        // Program_options names flags "--flag"; the documented spelling is "-flag".
        for (std::size_t p = m.find("'--"); p != std::string::npos; p = m.find("'--", p + 1)) m.erase(p + 1, 1);
        throw usage_error(m);
    }
    return vm;
}

std::string default_node_name() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) == 0 && buf[0] != '\0') return buf;
    return "tenure";
}

// Lifts the soft RLIMIT_NOFILE to the hard limit: every connection and every
// parked blocking query holds a descriptor.
void raise_fd_limit(tenure::detail::logger const& log, std::size_t max_connections) {
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        log.warn("agent", "getrlimit(RLIMIT_NOFILE) failed");
        return;
    }
    rlim_t const before = rl.rlim_cur;
    if (rl.rlim_cur < rl.rlim_max) {
        rlimit want = rl;
        want.rlim_cur = rl.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &want) == 0) {
            rl.rlim_cur = want.rlim_cur;
        } else if (rl.rlim_max == RLIM_INFINITY) {
            // Linux refuses "infinity" above fs.nr_open; take a large finite value.
            want.rlim_cur = 1 << 20;
            if (::setrlimit(RLIMIT_NOFILE, &want) == 0) rl.rlim_cur = want.rlim_cur;
        }
        if (rl.rlim_cur == before)
            log.warn("agent", "could not raise the open-file limit (RLIMIT_NOFILE) from " + std::to_string(before));
        else
            log.debug("agent", "raised the open-file limit (RLIMIT_NOFILE) from " + std::to_string(before) + " to " +
                                   std::to_string(rl.rlim_cur));
    }
    if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max_connections + 64)
        log.warn("agent", "open-file limit " + std::to_string(rl.rlim_cur) + " is below -max-connections " +
                              std::to_string(max_connections) + "; connections beyond it will be refused");
}

char const* signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "interrupt";
    case SIGTERM: return "terminated";
    default: return "signal";
    }
}

// ---- tenure agent -----------------------------------------------------------

void agent_help(std::ostream& os) {
    os << "Usage: tenure agent [options]\n\n"
          "  Runs an in-process coordination service that speaks Consul's HTTP API\n"
          "  (sessions, KV with locks and lock-delay, blocking queries, checks).\n"
          "  Once listening it prints one line to stdout:\n"
          "    tenure agent listening on http://ADDRESS:PORT (or unix:///PATH)\n"
          "  SIGINT or SIGTERM stops it (exit 0).\n\n"
          "Options:\n\n"
          "  -http-addr=<host:port | unix:///path>\n"
          "     Address the HTTP API listens on; port 0 picks a free port.\n"
          "     unix:///path listens on a Unix domain socket instead (a socket\n"
          "     file left there is replaced; the agent removes it when it stops).\n"
          "     Default: 127.0.0.1:8500\n\n"
          "  -unix-socket-mode=<octal>\n"
          "     Permission bits of the unix:// socket file, e.g. 0660 (Consul's\n"
          "     unix_sockets.mode): who may connect. Default: from the umask\n\n"
          "  -node=<name>\n"
          "     Name of this node. Default: the machine's hostname.\n\n"
          "  -datacenter=<name>\n"
          "     Datacenter of this agent. Default: dc1\n\n"
          "  -session-ttl-min=<duration>\n"
          "     Shortest session TTL accepted, as a Go duration (10s, 100ms).\n"
          "     Default: 10s\n\n"
          "  -busy-poll=<duration>\n"
          "     After each burst of work, keep polling the sockets this long (at\n"
          "     most 1s, e.g. 50us) before sleeping in the kernel. Cuts the wake-up\n"
          "     cost of every request on VMs whose idle vCPUs halt at once, at the\n"
          "     price of a busy core while requests keep coming. Default: 0 (off)\n\n"
          "  -max-connections=<n>\n"
          "     Open HTTP connections beyond this are closed at once. Default: 16384\n\n"
          "  -data-dir=<path>\n"
          "     Keep KV entries, sessions, checks and indexes in a write-ahead log\n"
          "     with snapshots in this directory (created if missing); every write\n"
          "     is on disk before it is acknowledged, and a restart recovers it.\n"
          "     One agent per directory. Default: none (state is in memory only)\n\n"
          "  -log-level=<level>\n"
          "     trace, debug, info, warn or error (or off). Logs go to stderr.\n"
          "     Default: info\n\n"
          "  -log-json\n"
          "     Write each log line as one JSON object (@timestamp, @level,\n"
          "     @module, @message), as Consul's -log-json does.\n\n"
          "  -ui\n"
          "     Serve a live web view at /ui/: every lock with its holder and\n"
          "     fencing token, lock-delay countdowns, sessions and checks, and each\n"
          "     key's timeline of terms. Prints a second line with its URL:\n"
          "       tenure agent UI at http://ADDRESS:PORT/ui/\n"
          "     With ACLs on, the page asks for a token. Default: off\n\n"
          "  -history-capacity=<n>\n"
          "     Lock terms remembered across all keys for the UI's timelines and\n"
          "     /v1/tenure/history; the oldest go first. 0 keeps none. Default: 4096\n";
    tenure::cli::agent_security_help(os);
}

int run_agent(std::vector<std::string> args) {
    po::options_description desc;
    desc.add_options()                                                        //
        ("help,h", "")                                                        //
        ("http-addr", po::value<std::string>()->default_value("127.0.0.1:8500"), "")  //
        ("unix-socket-mode", po::value<std::string>(), "")                    //
        ("node", po::value<std::string>(), "")                                //
        ("datacenter", po::value<std::string>()->default_value("dc1"), "")   //
        ("session-ttl-min", po::value<std::string>()->default_value("10s"), "")  //
        ("busy-poll", po::value<std::string>()->default_value("0"), "")          //
        ("max-connections", po::value<std::string>()->default_value("16384"), "")  //
        ("data-dir", po::value<std::string>(), "")                            //
        ("log-json", po::bool_switch(), "")                                   //
        ("ui", po::bool_switch(), "")                                         //
        ("history-capacity", po::value<std::string>()->default_value("4096"), "")  //
        ("log-level", po::value<std::string>()->default_value("info"), "");
    tenure::cli::add_agent_security_flags(desc);
    po::variables_map const vm = parse_flags(std::move(args), desc);
    if (vm.count("help")) {
        agent_help(std::cout);
        return 0;
    }

    tenure::agent_options opts;
    opts.http_addr = vm["http-addr"].as<std::string>();
    if (vm.count("unix-socket-mode")) {
        auto const& text = vm["unix-socket-mode"].as<std::string>();
        unsigned mode = 0;
        auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mode, 8);
        if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || mode > 07777)
            throw usage_error("invalid value for -unix-socket-mode: \"" + text + "\" (octal permission bits, e.g. 0660)");
        if (!opts.http_addr.starts_with("unix://")) throw usage_error("-unix-socket-mode needs a unix:// -http-addr");
        opts.unix_socket_mode = mode;
    }
    opts.node_name = vm.count("node") ? vm["node"].as<std::string>() : default_node_name();
    if (opts.node_name.empty()) throw usage_error("-node must not be empty");
    opts.datacenter = vm["datacenter"].as<std::string>();
    if (opts.datacenter.empty()) throw usage_error("-datacenter must not be empty");

    {
        auto const& text = vm["session-ttl-min"].as<std::string>();
        auto const d = tenure::detail::parse_go_duration(text);
        if (!d.value) throw usage_error("invalid value for -session-ttl-min: " + d.error);
        if (d.value->count() < 0)
            throw usage_error("invalid value for -session-ttl-min: \"" + text + "\" must not be negative");
        opts.session_ttl_min = *d.value;
    }
    std::chrono::nanoseconds busy_poll{0};
    {
        auto const& text = vm["busy-poll"].as<std::string>();
        auto const d = tenure::detail::parse_go_duration(text);
        if (!d.value) throw usage_error("invalid value for -busy-poll: " + d.error);
        if (d.value->count() < 0 || *d.value > std::chrono::seconds{1})
            throw usage_error("invalid value for -busy-poll: \"" + text + "\" (want 0 to 1s, e.g. 50us)");
        busy_poll = *d.value;
    }
    {
        auto const& text = vm["max-connections"].as<std::string>();
        unsigned long long n = 0;
        auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || n == 0 ||
            n > std::numeric_limits<std::size_t>::max())
            throw usage_error("invalid value for -max-connections: \"" + text + "\" (want a positive integer)");
        opts.max_connections = static_cast<std::size_t>(n);
    }
    {
        auto const& text = vm["log-level"].as<std::string>();
        auto const level = tenure::parse_log_level(text);
        if (!level) throw usage_error("invalid value for -log-level: \"" + text + "\" (trace, debug, info, warn, error)");
        opts.level = *level;
    }
    if (vm.count("data-dir")) {
        opts.data_dir = vm["data-dir"].as<std::string>();
        if (opts.data_dir.empty()) throw usage_error("-data-dir must not be empty");
    }
    opts.log_stream = &std::clog;
    opts.log_json = vm["log-json"].as<bool>();
    opts.ui = vm["ui"].as<bool>();
    {
        auto const& text = vm["history-capacity"].as<std::string>();
        unsigned long long n = 0;
        auto const [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
        if (text.empty() || ec != std::errc{} || end != text.data() + text.size() || n > 10'000'000)
            throw usage_error("invalid value for -history-capacity: \"" + text + "\" (want 0 to 10000000)");
        opts.history_capacity = static_cast<std::size_t>(n);
    }
    tenure::cli::apply_agent_security_flags(vm, opts);
    tenure::detail::logger const log{opts.level, opts.log_stream,
                                     opts.log_json ? tenure::log_format::json : tenure::log_format::text};

    std::signal(SIGPIPE, SIG_IGN);
    raise_fd_limit(log, opts.max_connections);

    asio::io_context ioc{1};
    // Installed before the address is printed, so a signal sent as soon as the
    // line is read is handled.
    asio::signal_set signals{ioc, SIGINT, SIGTERM};

    std::optional<tenure::agent> agent;
    try {
        agent.emplace(ioc.get_executor(), opts);
    } catch (boost::system::system_error const& e) {
        if (e.code() == asio::error::invalid_argument) throw usage_error(e.what());
        std::cerr << "tenure agent: " << e.what() << '\n';
        return 1;
    }

    signals.async_wait([&](boost::system::error_code const& ec, int sig) {
        if (ec) return;
        log.info("agent", std::string("caught signal: ") + signal_name(sig) + "; shutting down");
        agent->stop();
    });

    agent->start();
    std::cout << "tenure agent listening on " << agent->http_address() << std::endl;
    if (auto const https = agent->https_address(); !https.empty())
        std::cout << "tenure agent listening on " << https << std::endl;
    if (opts.ui && agent->http_address().starts_with("http"))
        std::cout << "tenure agent UI at " << agent->http_address() << "/ui/" << std::endl;

    tenure::run_with_busy_poll(ioc, busy_poll);
    log.info("agent", "shutdown complete");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    // tenure lock's supervisor of its command: internal, so not in `commands`.
    if (argc > 1 && std::string_view(argv[1]) == "__supervise") return tenure::cli::run_lock_supervisor(argc, argv);
    std::vector<std::string> args(argv + (argc > 0 ? 1 : 0), argv + argc);
    if (args.empty()) {
        std::cerr << "tenure: a command is required\n\n";
        print_usage(std::cerr);
        return 1;
    }
    std::string_view const first = args.front();
    if (first == "--help" || first == "-help" || first == "-h" || first == "help") {
        if (args.size() > 1) {
            if (auto const* c = find_command(args[1])) {
                c->help(std::cout);
                return 0;
            }
            std::cerr << "tenure: unknown command \"" << args[1] << "\"; the commands are listed below\n\n";
            print_usage(std::cerr);
            return 1;
        }
        print_usage(std::cout);
        return 0;
    }
    if (first == "--version" || first == "-version" || first == "-v" || first == "version") {
        std::cout << "tenure " << tenure_version << '\n';
        return 0;
    }

    command const* cmd = find_command(first);
    if (!cmd) {
        std::cerr << "tenure: unknown command \"" << first << "\"; the commands are listed below\n\n";
        print_usage(std::cerr);
        return 1;
    }
    try {
        return cmd->run(std::vector<std::string>(args.begin() + 1, args.end()));
    } catch (usage_error const& e) {
        // What was wrong first, then the usage to fix it with.
        std::cerr << "tenure " << cmd->name << ": " << e.what() << "\n\n";
        cmd->help(std::cerr);
        return 1;
    } catch (std::exception const& e) {
        std::cerr << "tenure " << cmd->name << ": " << e.what() << '\n';
        return 1;
    }
}
