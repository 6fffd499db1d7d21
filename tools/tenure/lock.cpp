// `tenure lock [options] <prefix> <child...>`: run a command while holding a
// lock, flag-compatible with `consul lock`.
//
// One io_context runs everything: the session's renewals, the lock's monitor,
// the child process (Boost.Process v2, waited on through a pidfd), signals.
// The child runs in its own process group so that the whole tree it starts
// can be stopped: on a loss of the lock, on shutdown, and before the
// session's local deadline when renewals stop being acknowledged (SIGTERM to
// the group, SIGKILL after -kill-grace). This process is a child subreaper,
// so the orphans of that tree are reparented to it and reaped here; it knows
// when the group is empty without polling.
//
// The group must also die when this process dies without running any code
// (kill -9, the OOM killer): the command is started by a supervisor, `tenure
// __supervise` (below), which SIGKILLs the group when this process is gone.
#include "cli.hpp"

#include "consul/client_access.hpp"
#include "core/race.hpp"
#include <tenure/consul/client.hpp>
#include "net/duration.hpp"
#include <tenure/election.hpp>
#include <tenure/leadership_scope.hpp>
#include <tenure/semaphore.hpp>
#include <tenure/session.hpp>

#define BOOST_PROCESS_V2_HEADER_ONLY 1
#define BOOST_PROCESS_USE_STD_FS 1  // std::filesystem: no Boost.Filesystem to link
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/parallel_group.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
// Boost 1.81's Process v2 (with BOOST_PROCESS_USE_STD_FS) uses
// boost::optional and boost::remove_pointer without including them.
#include <boost/optional.hpp>
#include <boost/type_traits/remove_pointer.hpp>
#include <boost/process/v2.hpp>

#include <fcntl.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <csignal>
#include <cstring>
#include <iostream>
#include <memory>
#include <optional>
#include <utility>
#include <sstream>
#include <string>
#include <vector>

extern char** environ;

namespace tenure::cli {

namespace {

namespace asio = boost::asio;
namespace bp = boost::process::v2;
using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using boost::system::error_code;
using boost::system::system_error;
using tenure::detail::format_go_duration;

// ---- options -------------------------------------------------------------------

struct lock_config {
    int limit = 1;
    std::string name;
    bool pass_stdin = false;
    bool shell = true;
    std::chrono::nanoseconds timeout{0};
    int monitor_retry = 3;
    bool verbose = false;
    bool child_exit_code = false;
    http_flags http;
    etcd_flags etcd;
    bool on_etcd = false;
    std::chrono::nanoseconds session_ttl = 15s;
    std::chrono::nanoseconds lock_delay = 15s;
    bool lock_delay_set = false;  // on etcd the lock-delay applies only when given
    std::chrono::nanoseconds kill_grace = 5s;
    int priority = 0;
    bool yield = false;
    std::chrono::nanoseconds yield_settle = 5s;

    std::string prefix;
    std::vector<std::string> child_args;
    // Consul: the key <prefix>/.lock. etcd: the election name <prefix> (keys
    // <prefix>/<lease hex>, as `etcdctl lock` and `etcdctl elect` use). With
    // -n > 1 the semaphore's prefix is cfg.prefix on both.
    std::string key() const {
        if (on_etcd) return prefix;
        return prefix.empty() ? std::string(".lock") : prefix + "/.lock";
    }
};

std::string join(std::vector<std::string> const& v, char sep = ' ') {
    std::string out;
    for (auto const& s : v) {
        if (!out.empty()) out += sep;
        out += s;
    }
    return out;
}

// path.Join(prefix, ".lock") drops a trailing '/' of the prefix too.
std::string clean_prefix(std::string p) {
    while (!p.empty() && p.front() == '/') p.erase(0, 1);
    while (!p.empty() && p.back() == '/') p.pop_back();
    return p;
}

char const* signal_name(int sig) {
    switch (sig) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    case SIGKILL: return "SIGKILL";
    case SIGQUIT: return "SIGQUIT";
    case SIGPIPE: return "SIGPIPE";
    case SIGABRT: return "SIGABRT";
    case SIGSEGV: return "SIGSEGV";
    default: return nullptr;
    }
}

std::string describe_signal(int sig) {
    if (auto n = signal_name(sig)) return n;
    return "signal " + std::to_string(sig);
}

std::string describe_status(int raw) {
    if (WIFEXITED(raw)) return "exited with status " + std::to_string(WEXITSTATUS(raw));
    if (WIFSIGNALED(raw)) return "killed by " + describe_signal(WTERMSIG(raw));
    return "ended with wait status " + std::to_string(raw);
}

std::string seconds(std::chrono::nanoseconds d) { return format_go_duration(d); }

// ---- small awaitable tools ---------------------------------------------------

// A level-triggered event: a timer that never expires, cancelled to wake
// every waiter.
class event {
public:
    explicit event(asio::any_io_executor ex) : timer_(ex, steady::time_point::max()) {}
    void set() {
        set_ = true;
        timer_.cancel();
    }
    bool is_set() const noexcept { return set_; }
    asio::awaitable<void> wait() {
        while (!set_) {
            auto [ec] = co_await timer_.async_wait(asio::as_tuple(asio::use_awaitable));
            (void)ec;
            auto cs = co_await asio::this_coro::cancellation_state;
            if (!set_ && cs.cancelled() != asio::cancellation_type::none)
                throw system_error(asio::error::operation_aborted);
        }
    }

private:
    asio::steady_timer timer_;
    bool set_ = false;
};

asio::awaitable<void> sleep_until(steady::time_point t) {
    asio::steady_timer timer(co_await asio::this_coro::executor, t);
    co_await timer.async_wait(asio::use_awaitable);
}

asio::awaitable<void> never() {
    asio::steady_timer timer(co_await asio::this_coro::executor, steady::time_point::max());
    co_await timer.async_wait(asio::use_awaitable);
}

// ---- the supervisor (`tenure __supervise`) -----------------------------------------
//
// The direct child of `tenure lock` is not the command but `tenure` itself,
// re-executed (/proc/self/exe) as
//
//   tenure __supervise <lifeline fd> <report fd> <tenure lock's pid> <take terminal 0|1> <program> <args...>
//
// It starts the command in a process group of its own (pgid = the command's
// pid) and makes that group die with `tenure lock`, however `tenure lock`
// dies (kill -9, the OOM killer), without `tenure lock` running any code at
// its death: the supervisor holds the read end of the lifeline, a pipe whose
// only write end is `tenure lock`'s. The kernel closes that end when
// `tenure lock` exits; at EOF the supervisor SIGKILLs the whole group at once
// (the kill grace was tenure lock's to give: a dead holder cannot vouch for
// its lease). The parent-death signal is a second trigger, not the only one:
// it reaches only a direct child, and fires when the forking thread exits.
//
// On the report pipe the supervisor tells `tenure lock`, one line each:
//   pid <command pid>     the command runs (tenure lock signals its group directly)
//   exit <wait status>    the command ended; tenure lock stops what it left in
//                         its group, then closes the lifeline (so leftovers
//                         of a finished command are guarded too, until gone)
//   error <errno>         the command could not be executed
// SIGINT, SIGTERM and SIGHUP sent to the supervisor are forwarded to the
// group. When the lifeline closes, the supervisor SIGKILLs the group (empty
// by then on the normal path) and exits with the command's status,
// re-raising the signal that ended it.
//
// The supervisor lives in a process group of its own too: signals from the
// terminal and to `tenure lock`'s job (`kill -9 %1`) reach `tenure lock`
// only, never the supervisor, so the command gets them once, from `tenure
// lock`, and a job-wide kill -9 still leaves the supervisor to clean up.

constexpr char const* supervise_subcommand = "__supervise";
constexpr int parent_death_signal = SIGUSR1;

// The signals the supervisor takes through its signalfd: blocked from before
// its exec (tenure lock's fork sets the mask) so that none is missed.
sigset_t supervisor_signals() {
    sigset_t set;
    ::sigemptyset(&set);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, parent_death_signal}) ::sigaddset(&set, sig);
    return set;
}

struct supervisor_options {
    int lifeline = -1;  // read end
    int report = -1;    // write end
    pid_t parent = -1;  // tenure lock
    bool take_terminal = false;
    char** command = nullptr;  // the program's path, its arguments, nullptr
};

std::optional<supervisor_options> parse_supervisor_args(int argc, char** argv) {
    if (argc < 7) return std::nullopt;
    long long v[4] = {};
    for (int i = 0; i < 4; ++i) {
        char const* s = argv[2 + i];
        auto const [end, ec] = std::from_chars(s, s + std::strlen(s), v[i]);
        if (ec != std::errc{} || *end != '\0' || v[i] < 0) return std::nullopt;
    }
    return supervisor_options{static_cast<int>(v[0]), static_cast<int>(v[1]), static_cast<pid_t>(v[2]), v[3] != 0,
                              argv + 6};
}

// One line to tenure lock. Shorter than PIPE_BUF, so written whole; EPIPE
// (tenure lock gone; SIGPIPE is ignored) is not ours to handle here.
void report(int fd, char const* kind, long long value) {
    std::string const line = std::string(kind) + ' ' + std::to_string(value) + '\n';
    (void)!::write(fd, line.data(), line.size());
}

// In the command's process, before exec: a process group of its own, default
// signal dispositions and mask, and the terminal's foreground when stdin is
// passed from an interactive terminal.
void enter_command_process(supervisor_options const& o) {
    ::setpgid(0, 0);
    struct sigaction dfl{};
    dfl.sa_handler = SIG_DFL;
    ::sigemptyset(&dfl.sa_mask);
    for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGTTOU, SIGTTIN, SIGTSTP, parent_death_signal})
        ::sigaction(sig, &dfl, nullptr);
    if (o.take_terminal) {
        struct sigaction ign{};
        ign.sa_handler = SIG_IGN;
        ::sigemptyset(&ign.sa_mask);
        ::sigaction(SIGTTOU, &ign, nullptr);
        ::tcsetpgrp(STDIN_FILENO, ::getpid());
        ::sigaction(SIGTTOU, &dfl, nullptr);
    }
    sigset_t none;
    ::sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Forks and executes the command. Its pid, or -1 with `err` set when it
// could not be executed (the exec's errno, through a close-on-exec pipe).
pid_t start_command(supervisor_options const& o, int& err) {
    int exec_error[2];
    if (::pipe2(exec_error, O_CLOEXEC) != 0) {
        err = errno;
        return -1;
    }
    pid_t const pid = ::fork();
    if (pid == 0) {
        ::close(exec_error[0]);
        enter_command_process(o);
        ::execv(o.command[0], o.command);
        int const e = errno;
        (void)!::write(exec_error[1], &e, sizeof e);
        ::_exit(127);
    }
    if (pid < 0) err = errno;
    ::close(exec_error[1]);
    int e = 0;
    // EOF: the exec succeeded. Our signals are blocked, so no EINTR.
    ssize_t const n = pid > 0 ? ::read(exec_error[0], &e, sizeof e) : 0;
    ::close(exec_error[0]);
    if (pid < 0) return -1;
    ::setpgid(pid, pid);  // as the child does: whichever runs first, the group exists before we report it
    if (n > 0) {
        ::waitpid(pid, nullptr, 0);
        err = e;
        return -1;
    }
    return pid;
}

// Ends the supervisor with the command's wait status: its exit code, or its
// signal re-raised with the default disposition (no core file of ours).
[[noreturn]] void exit_like(int status) {
    if (WIFSIGNALED(status)) {
        int const sig = WTERMSIG(status);
        ::prctl(PR_SET_DUMPABLE, 0);
        ::signal(sig, SIG_DFL);
        sigset_t only;
        ::sigemptyset(&only);
        ::sigaddset(&only, sig);
        ::sigprocmask(SIG_UNBLOCK, &only, nullptr);
        ::raise(sig);
        ::_exit(128 + sig);  // not reached for a terminating signal
    }
    ::_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

// Waits for the command's end and forwards signals until the lifeline closes
// (or tenure lock is otherwise known dead); then SIGKILL to the group.
[[noreturn]] void watch_command(supervisor_options const& o, int signals, pid_t pid) {
    std::optional<int> status;
    for (;;) {
        pollfd fds[2] = {{o.lifeline, POLLIN, 0}, {signals, POLLIN, 0}};
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) break;  // cannot watch: fail safe
        if (fds[0].revents != 0) break;  // tenure lock never writes: this is EOF (or an error)
        signalfd_siginfo si{};
        while (::read(signals, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
            int const sig = static_cast<int>(si.ssi_signo);
            int st = 0;
            if (sig == SIGCHLD) {
                if (!status && ::waitpid(pid, &st, WNOHANG) == pid) {
                    status = st;
                    report(o.report, "exit", st);
                }
            } else if (sig != parent_death_signal) {
                ::kill(-pid, sig);
            }
        }
        if (::getppid() != o.parent) break;  // the parent-death signal (or any wake-up after it)
    }
    ::kill(-pid, SIGKILL);
    if (!status) {
        int st = 0;
        ::waitpid(pid, &st, 0);  // SIGKILLed: does not take long
        status = st;
    }
    exit_like(*status);
}

// Boost.Process initializer for the supervisor: the command's environment
// (the supervisor passes it on), and in the child (between fork and exec,
// async-signal-safe calls only) a process group of its own, the parent-death
// signal (it survives exec) checked against a parent that died already, the
// supervisor's signals blocked, and no descriptor but stdio and the two pipe
// ends kept across exec.
struct supervisor_setup {
    char const* const* env;
    int lifeline;  // read end
    int report;    // write end
    pid_t parent;

    template <class Launcher>
    error_code on_setup(Launcher& launcher, bp::filesystem::path const&, char const* const*&) {
        launcher.env = env;
        launcher.fd_whitelist.push_back(lifeline);
        launcher.fd_whitelist.push_back(report);
        return {};
    }

    template <class Launcher>
    error_code on_exec_setup(Launcher&, bp::filesystem::path const&, char const* const*&) {
        auto const failed = [] { return error_code(errno, boost::system::system_category()); };
        if (::setpgid(0, 0) != 0) return failed();
        if (::prctl(PR_SET_PDEATHSIG, parent_death_signal) != 0) return failed();
        if (::getppid() != parent) return error_code(ESRCH, boost::system::system_category());
        // Boost 1.81 closes only the descriptors above the highest one it
        // keeps (its close_all compares each kept one with itself), which
        // would pass our agent connections on to the command: everything is
        // closed at exec, but the two pipe ends. (Boost's exec-error pipe is
        // close-on-exec already.)
        ::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC);
        if (::fcntl(lifeline, F_SETFD, 0) != 0 || ::fcntl(report, F_SETFD, 0) != 0) return failed();
        sigset_t set = supervisor_signals();
        ::sigprocmask(SIG_SETMASK, &set, nullptr);
        return {};
    }
};

// ---- the child -------------------------------------------------------------------

// The parent's environment with `extra` ("NAME=value") added or replaced.
std::vector<std::string> child_environment(std::vector<std::string> const& extra) {
    std::vector<std::string> env;
    for (char** e = environ; e && *e; ++e) {
        std::string_view entry = *e;
        auto name = entry.substr(0, entry.find('='));
        bool replaced = std::any_of(extra.begin(), extra.end(), [&](std::string const& x) {
            return std::string_view(x).substr(0, x.find('=')) == name;
        });
        if (!replaced) env.emplace_back(entry);
    }
    env.insert(env.end(), extra.begin(), extra.end());
    return env;
}

// What to execute: `$SHELL -c "<args joined>"` (or /bin/sh), or the arguments
// themselves with the program looked up in PATH.
struct command_line {
    bp::filesystem::path program;
    std::vector<std::string> args;  // without argv[0]
    std::string display;
};

std::optional<bp::filesystem::path> find_program(std::string const& name) {
    if (name.empty()) return std::nullopt;
    if (name.find('/') != std::string::npos) {
        if (::access(name.c_str(), X_OK) == 0) return bp::filesystem::path(name);
        return std::nullopt;
    }
    auto p = bp::environment::find_executable(name);
    if (p.empty()) return std::nullopt;
    return p;
}

// ---- the command -------------------------------------------------------------------

enum class phase { setup, child, cleanup };

class lock_command {
public:
    explicit lock_command(lock_config cfg, asio::any_io_executor ex)
        : cfg_(std::move(cfg)), shutdown_(ex), abort_cleanup_(ex), signals_(ex, SIGINT, SIGTERM, SIGHUP),
          sigchld_(ex, SIGCHLD), kill_timer_(ex, steady::time_point::max()),
          drain_wake_(ex, steady::time_point::max()),
          watchdog_wake_(std::make_shared<asio::steady_timer>(ex, steady::time_point::max())) {}
    ~lock_command() { let_go_of_supervisor(); }
    lock_command(lock_command const&) = delete;
    lock_command& operator=(lock_command const&) = delete;

    // Resolves the program before anything touches the agent.
    void prepare();
    // Exactly one of the clients is given.
    asio::awaitable<int> run(consul::client* client, etcd::client* etcd_client);
    asio::awaitable<void> signal_loop();
    // Stops waiting for signals (the io_context can then run out of work).
    void finish() {
        signals_.cancel();
        sigchld_.cancel();
    }

private:
    void info(std::string const& line) const {
        if (cfg_.verbose) std::cerr << "tenure lock: " << line << std::endl;
    }
    void error(std::string const& line) const { std::cerr << "tenure lock: " << line << std::endl; }
    void print_timing() const;

    asio::awaitable<int> run_with_session(session& s);
    asio::awaitable<std::optional<leadership_scope>> acquire(session& s, bool& failed);
    asio::awaitable<void> acquisition_stop();
    asio::awaitable<int> cleanup(session& s, leadership_scope* scope, int code);

    struct child_result {
        bool started = false;
        int status = 0;  // raw wait status when started
    };
    asio::awaitable<child_result> supervise(session& s, leadership_scope& scope);
    std::optional<bp::process> start_supervisor(asio::any_io_executor ex, std::vector<std::string> const& env,
                                                bool take_terminal);
    struct report_line {
        std::string kind;
        long long value = 0;
    };
    asio::awaitable<std::optional<report_line>> next_report();
    asio::awaitable<bool> await_command_start(bp::process& supervisor);
    void forward_signal(int sig);
    asio::awaitable<int> await_supervisor_exit(bp::process& supervisor);
    void let_go_of_supervisor();
    asio::awaitable<int> wait_child_and_group(bp::process& supervisor);
    asio::awaitable<void> drain_group();
    asio::awaitable<void> helpers(session& s, leadership_scope& scope);
    asio::awaitable<void> watch_loss(leadership_scope& scope);
    asio::awaitable<void> watch_deadline(session& s);
    asio::awaitable<void> killer();
    asio::awaitable<void> reaper();

    // Starts stopping the child's process group: SIGTERM (unless the signal
    // that caused it was forwarded instead), SIGKILL after the kill grace or
    // at `kill_by`, whichever is first.
    void begin_termination(std::string const& why, bool send_sigterm, bool lock_gone,
                           steady::time_point kill_by = steady::time_point::max());
    void signal_group(int sig, bool quiet = false);
    void kill_group_now(std::string const& why);
    bool group_alive() const;
    void reap_adopted();
    void restore_terminal();

    lock_config cfg_;
    command_line command_;
    phase phase_ = phase::setup;
    event shutdown_;       // SIGINT/SIGTERM/SIGHUP before the child runs
    event abort_cleanup_;  // a signal while releasing
    asio::signal_set signals_;
    asio::signal_set sigchld_;

    // The running child: the supervisor (our child, which Boost.Process reaps)
    // and the command's process group (pgid = the command's pid).
    pid_t supervisor_pid_ = -1;
    bool supervisor_reaped_ = false;
    int supervisor_status_ = 0;  // raw wait status once reaped
    int lifeline_ = -1;          // the only write end of the supervisor's lifeline
    std::optional<asio::posix::stream_descriptor> report_;  // the supervisor's reports
    std::string report_buf_;
    pid_t pgid_ = -1;
    std::optional<int> pending_signal_;  // caught while pgid_ was not known yet
    bool took_terminal_ = false;

    // Termination of the child's process group.
    bool terminating_ = false;
    bool sigterm_sent_ = false;
    bool killed_ = false;
    bool stopped_for_lock_ = false;  // loss, jeopardy or shutdown: exit 0 whatever the child says
    steady::time_point kill_at_ = steady::time_point::max();
    asio::steady_timer kill_timer_;
    asio::steady_timer drain_wake_;
    std::shared_ptr<asio::steady_timer> watchdog_wake_;
};

void lock_command::prepare() {
    if (cfg_.shell) {
        char const* sh = std::getenv("SHELL");
        std::string shell = sh && *sh ? sh : "/bin/sh";
        auto p = find_program(shell);
        if (!p) throw std::runtime_error("Error executing handler: shell \"" + shell + "\" not found or not executable");
        command_.program = *p;
        command_.args = {"-c", join(cfg_.child_args)};
        command_.display = shell + " -c " + quote(command_.args[1]);
    } else {
        auto p = find_program(cfg_.child_args.front());
        if (!p)
            throw std::runtime_error("Error executing handler: exec: " + quote(cfg_.child_args.front()) +
                                     ": executable file not found in $PATH");
        command_.program = *p;
        command_.args.assign(cfg_.child_args.begin() + 1, cfg_.child_args.end());
        command_.display = join(cfg_.child_args);
    }
}

void lock_command::print_timing() const {
    auto const ttl = cfg_.session_ttl;
    auto const grace = cfg_.kill_grace;
    bool const on_etcd = cfg_.on_etcd;
    // On etcd the lock-delay is the waiting candidate's own, and only when given.
    auto const effective_delay = on_etcd && !cfg_.lock_delay_set ? std::chrono::nanoseconds{0} : cfg_.lock_delay;
    auto const delay = on_etcd ? std::max<std::chrono::nanoseconds>(effective_delay, 0s)
                            : std::min<std::chrono::nanoseconds>(std::max<std::chrono::nanoseconds>(cfg_.lock_delay, 0s), 60s);
    info("timing: session TTL " + seconds(ttl) + ", lock-delay " + seconds(effective_delay) + ", kill grace " +
         seconds(grace));
    if (on_etcd)
        info("timing: etcd lease of TTL rounded up to whole seconds; keepalive every " + seconds(ttl / 3) +
             " (TTL/3); after a failed keepalive, a retry at least every " +
             seconds(std::min<std::chrono::nanoseconds>(1s, std::max<std::chrono::nanoseconds>(ttl / 4, 1ms))));
    else
        info("timing: renewal every " + seconds(ttl / 2) + " (TTL/2); after a failed renewal, a retry at least every " +
             seconds(std::min<std::chrono::nanoseconds>(1s, std::max<std::chrono::nanoseconds>(ttl / 4, 1ms))));
    info("timing: local deadline = send time of the last acknowledged renewal + TTL (" + seconds(ttl) +
         "); the lock counts as lost there, whether or not the agent is reachable");
    if (grace < ttl / 2) {
        info("timing: the child is stopped by that deadline: once a renewal is overdue and less than the kill grace is "
             "left (" + seconds(ttl - grace) + " after the last acknowledged renewal), its process group gets SIGTERM, "
             "then SIGKILL " + seconds(grace) + " later, at the deadline");
    } else {
        info("timing: kill grace " + seconds(grace) + " is not below TTL/2 (" + seconds(ttl / 2) +
             "): the child's process group gets SIGTERM as soon as a renewal fails, and SIGKILL " + seconds(grace) +
             " later, which can be after the local deadline; use -kill-grace < TTL/2 to have SIGKILL land by it");
    }
    if (on_etcd) {
        info("timing: etcd expires the lease no earlier than TTL after the last keepalive it received, and this "
             "process stops at its local deadline, which comes first; a waiting candidate started with -lock-delay "
             "then waits that long before it leads");
        info("timing: worst-case gap after a crash of this process: TTL (rounded up to seconds) + lock-delay = " +
             seconds(std::chrono::ceil<std::chrono::seconds>(ttl) + delay) +
             " before another holder can take the lock (the lock-delay of the next candidate, if it set one)");
    } else {
        info("timing: margin the old holder has to stop: TTL = " + seconds(ttl) +
             " (it stops at its local deadline; the server invalidates a session no earlier than 2 x TTL = " +
             seconds(2 * ttl) + " after the last renewal it received, then applies the lock-delay)");
        info("timing: worst-case gap after a crash of this process: 2 x TTL + lock-delay = " +
             seconds(2 * ttl + delay) + " before another holder can take the lock");
    }
    info("-monitor-retry " + std::to_string(cfg_.monitor_retry) +
         " is accepted for compatibility: tenure retries transient errors until the session's local deadline");
}

void lock_command::forward_signal(int sig) {
    info("caught " + describe_signal(sig) + "; forwarding it to the child's process group " + std::to_string(pgid_));
    signal_group(sig, true);
    if (sig == SIGTERM) sigterm_sent_ = true;
    if (sig != SIGHUP) begin_termination("shutdown (" + describe_signal(sig) + ")", false, true);
}

asio::awaitable<void> lock_command::signal_loop() {
    for (;;) {
        auto [ec, sig] = co_await signals_.async_wait(asio::as_tuple(asio::use_awaitable));
        if (ec) co_return;
        switch (phase_) {
        case phase::setup:
            info("caught " + describe_signal(sig) + "; shutting down");
            shutdown_.set();
            break;
        case phase::child:
            // Before the supervisor has told the command's pid, the command
            // may run already (and say so): the signal is forwarded as soon
            // as its group is known (supervise()).
            if (pgid_ <= 0) {
                if (!pending_signal_) pending_signal_ = sig;
            } else {
                forward_signal(sig);
            }
            break;
        case phase::cleanup:
            error("caught " + describe_signal(sig) + " while releasing the lock; giving up");
            abort_cleanup_.set();
            break;
        }
    }
}

asio::awaitable<int> lock_command::run(consul::client* consul_client, etcd::client* etcd_client) {
    if (etcd_client) {
        info("etcd endpoints " + join(etcd_client->config().endpoints, ','));
    } else {
        // consul lock asks the agent for its node name before anything else.
        consul::client& client = *consul_client;
        std::optional<consul::agent_info> self;
        std::string failure;
        try {
            auto op = tenure::detail::coro(client).agent_self();
            auto stop = shutdown_.wait();
            self = co_await tenure::detail::race(std::move(op), std::move(stop));
        } catch (std::exception const& e) {
            failure = describe(e);
        }
        if (!failure.empty()) {
            error("Error querying Consul agent: " + failure);
            co_return 1;
        }
        if (!self) {
            error("Shutdown triggered before the lock could be set up");
            co_return 1;
        }
        info("agent node " + quote(self->node_name) + ", datacenter " + quote(self->datacenter));
    }

    if (cfg_.limit > 1) {
        info("Setting up semaphore (limit " + std::to_string(cfg_.limit) + ") at prefix: " + cfg_.prefix +
             (etcd_client ? " (keys " + cfg_.prefix + "/<lease id in hex>; the oldest " +
                                std::to_string(cfg_.limit) + " hold)"
                          : std::string()));
    } else if (etcd_client) {
        info("Setting up lock at election name: " + cfg_.key() + " (keys " + cfg_.key() + "/<lease id in hex>)");
    } else {
        info("Setting up lock at path: " + cfg_.key());
    }
    print_timing();

    tenure::session_options so;
    so.name = cfg_.name;
    so.ttl = cfg_.session_ttl;
    so.lock_delay = cfg_.lock_delay;
    so.lock_delay_on_etcd = cfg_.lock_delay_set;
    // A semaphore's contender key goes with its session, as in consul lock.
    if (cfg_.limit > 1) so.behavior = consul::session_behavior::delete_keys;
    // Renewals, jeopardy and loss wake the deadline watchdog to look again.
    so.on_event = [wake = std::weak_ptr<asio::steady_timer>(watchdog_wake_)](tenure::leadership_event const& e) {
        using kind = tenure::leadership_event_kind;
        if (e.kind != kind::renewed && e.kind != kind::jeopardy && e.kind != kind::lost) return;
        if (auto t = wake.lock()) t->cancel();
    };
    std::optional<session> s;
    {
        std::string failure;
        try {
            auto op = etcd_client ? session::create(*etcd_client, so, asio::use_awaitable)
                                  : session::create(*consul_client, so, asio::use_awaitable);
            auto stop = shutdown_.wait();
            s = co_await tenure::detail::race(std::move(op), std::move(stop));
        } catch (std::exception const& e) {
            failure = describe(e);
        }
        if (!failure.empty()) {
            error("Lock setup failed: " + failure);
            co_return 1;
        }
        if (!s) {
            error("Shutdown triggered or timeout during lock acquisition");
            co_return 1;
        }
    }
    info("session " + s->id() + " created (name " + quote(cfg_.name) + ")");
    co_return co_await run_with_session(*s);
}

// Completes when acquisition must stop: a signal, or -timeout.
asio::awaitable<void> lock_command::acquisition_stop() {
    if (cfg_.timeout.count() > 0) {
        auto deadline = steady::now() + std::chrono::duration_cast<steady::duration>(cfg_.timeout);
        auto a = shutdown_.wait();
        auto b = sleep_until(deadline);
        co_await tenure::detail::race(std::move(a), std::move(b));
    } else {
        co_await shutdown_.wait();
    }
}

asio::awaitable<std::optional<leadership_scope>> lock_command::acquire(session& s, bool& failed) {
    failed = false;
    std::string failure;
    std::optional<leadership_scope> scope;
    try {
        if (cfg_.limit == 1) {
            // Honours `tenure transfer` requests; -priority and -yield (Consul).
            election_options eo;
            eo.priority = cfg_.priority;
            eo.yield_to_higher = cfg_.yield;
            eo.yield_settle = cfg_.yield_settle;
            eo.accept_transfer_requests = !cfg_.on_etcd;
            election e(s, cfg_.key(), {}, eo);
            auto op = e.acquire(asio::use_awaitable);
            auto stop = acquisition_stop();
            scope = co_await tenure::detail::race(std::move(op), std::move(stop));
        } else {
            semaphore sem(s, cfg_.prefix, cfg_.limit);
            auto op = sem.acquire(asio::use_awaitable);
            auto stop = acquisition_stop();
            scope = co_await tenure::detail::race(std::move(op), std::move(stop));
        }
    } catch (std::exception const& e) {
        failure = describe(e);
    }
    if (!failure.empty()) {
        error("Lock acquisition failed: " + failure);
        failed = true;
    }
    co_return scope;
}

asio::awaitable<int> lock_command::run_with_session(session& s) {
    info("Attempting lock acquisition");
    bool failed = false;
    std::optional<leadership_scope> scope = co_await acquire(s, failed);
    if (failed || !scope || shutdown_.is_set()) {
        if (!failed) error("Shutdown triggered or timeout during lock acquisition");
        co_return co_await cleanup(s, scope ? &*scope : nullptr, 1);
    }
    leadership_scope& held = *scope;
    info("acquired " + held.key() + " with fencing token " + std::to_string(held.token()) + " (session " +
         held.session_id() + ")");

    child_result const child = co_await supervise(s, held);
    int code = 0;
    if (child.started && !stopped_for_lock_) {
        bool const ok = WIFEXITED(child.status) && WEXITSTATUS(child.status) == 0;
        if (!ok && cfg_.child_exit_code) code = 2;
    } else if (!child.started && cfg_.child_exit_code) {
        code = 2;  // as consul lock: a child that could not start counts as a failed child
    }
    co_return co_await cleanup(s, &held, code);
}

// Releases the lock, then destroys the session (release first: the next
// holder gets the key without lock-delay).
asio::awaitable<int> lock_command::cleanup(session& s, leadership_scope* scope, int code) {
    phase_ = phase::cleanup;
    std::string failure;
    bool aborted = false;
    bool const was_held = scope && scope->held();
    if (scope) {
        try {
            auto op = scope->release(asio::use_awaitable);
            auto stop = abort_cleanup_.wait();
            aborted = !co_await tenure::detail::race(std::move(op), std::move(stop));
        } catch (std::exception const& e) {
            failure = describe(e);
        }
    }
    if (!failure.empty()) {
        error("Lock release failed: " + failure);
        code = 1;
    } else if (aborted) {
        error("Lock release interrupted");
        code = 1;
    } else if (was_held) {
        info("released " + scope->key());
    }
    failure.clear();
    if (!aborted) {
        bool const was_lost = s.state() == session_state::lost;
        try {
            auto op = s.close(asio::use_awaitable);
            auto stop = abort_cleanup_.wait();
            aborted = !co_await tenure::detail::race(std::move(op), std::move(stop));
        } catch (std::exception const& e) {
            failure = describe(e);
        }
        if (!failure.empty()) {
            error("Session destroy failed: " + failure);
            code = 1;
        } else if (aborted) {
            error("Session destroy interrupted");
            code = 1;
        } else {
            info("session " + s.id() + (was_lost ? " closed (it was already lost)" : " destroyed"));
        }
    }
    co_return code;
}

// ---- supervision -------------------------------------------------------------------

void lock_command::signal_group(int sig, bool quiet) {
    if (pgid_ <= 0) return;
    if (!quiet) info(describe_signal(sig) + " to the child's process group " + std::to_string(pgid_));
    ::kill(-pgid_, sig);
}

// SIGKILL to the group at once, and nothing gentler after it.
void lock_command::kill_group_now(std::string const& why) {
    error(why + "; SIGKILL to the child's process group " + std::to_string(pgid_));
    terminating_ = true;
    sigterm_sent_ = true;
    killed_ = true;
    signal_group(SIGKILL, true);
}

bool lock_command::group_alive() const {
    if (pgid_ <= 0) return false;
    return ::kill(-pgid_, 0) == 0 || errno == EPERM;
}

// Reaps the exited processes this subreaper adopted, never the supervisor
// (Boost.Process reaps that one).
void lock_command::reap_adopted() {
    for (;;) {
        siginfo_t si{};
        if (::waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0) return;
        if (si.si_pid == 0) return;
        if (si.si_pid == supervisor_pid_ && !supervisor_reaped_) return;
        ::waitpid(si.si_pid, nullptr, WNOHANG);
    }
}

void lock_command::begin_termination(std::string const& why, bool send_sigterm, bool lock_gone,
                                     steady::time_point kill_by) {
    if (lock_gone) stopped_for_lock_ = true;
    if (!terminating_) {
        terminating_ = true;
        auto const now = steady::now();
        kill_at_ = std::min(now + std::chrono::duration_cast<steady::duration>(cfg_.kill_grace), kill_by);
        info("stopping the child (" + why + "): SIGKILL to its process group in " + seconds(kill_at_ - now) +
             " unless it is gone by then");
        kill_timer_.expires_at(kill_at_);  // wakes the killer
    }
    if (send_sigterm && !sigterm_sent_) {
        sigterm_sent_ = true;
        signal_group(SIGTERM);
    }
}

asio::awaitable<void> lock_command::killer() {
    for (;;) {
        auto [ec] = co_await kill_timer_.async_wait(asio::as_tuple(asio::use_awaitable));
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) co_return;
        if (ec) continue;  // re-armed
        if (!terminating_ || killed_) continue;
        killed_ = true;
        if (group_alive()) {
            info("the child's process group is still alive after the kill grace of " + seconds(cfg_.kill_grace));
            signal_group(SIGKILL);
        }
        drain_wake_.cancel();
        kill_timer_.expires_at(steady::time_point::max());
    }
}

asio::awaitable<void> lock_command::reaper() {
    for (;;) {
        auto [ec, sig] = co_await sigchld_.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)sig;
        if (ec) co_return;
        reap_adopted();
        drain_wake_.cancel();
    }
}

asio::awaitable<void> lock_command::watch_loss(leadership_scope& scope) {
    auto [ec] = co_await scope.wait_lost(asio::as_tuple(asio::use_awaitable));
    auto cs = co_await asio::this_coro::cancellation_state;
    if (cs.cancelled() != asio::cancellation_type::none) co_return;
    if (ec && ec != make_error_code(error::not_held) && ec != asio::error::operation_aborted) {
        error("lock lost: " + ec.message());
        begin_termination("lock lost: " + ec.message(), true, true);
    }
    co_await never();
}

// Stops the child before the session's local deadline when renewals are not
// being acknowledged: once a renewal is overdue (the session is in jeopardy,
// or the deadline has not moved by the time less than the kill grace is left)
// and less than the kill grace is left, so that SIGKILL lands by the deadline.
asio::awaitable<void> lock_command::watch_deadline(session& s) {
    auto const ttl = std::chrono::duration_cast<steady::duration>(cfg_.session_ttl);
    auto const grace = std::chrono::duration_cast<steady::duration>(cfg_.kill_grace);
    while (!terminating_) {
        if (s.state() == session_state::lost) break;  // watch_loss handles it
        auto const deadline = s.local_deadline();
        if (deadline == steady::time_point::max()) break;
        auto const now = steady::now();
        steady::time_point trigger = steady::time_point::max();
        if (grace < ttl / 2) trigger = deadline - grace;  // the renewal due at deadline - TTL/2 is overdue by then
        if (s.state() == session_state::jeopardy && deadline - now < grace) trigger = now;
        if (now >= trigger) {
            auto const left = std::chrono::duration_cast<std::chrono::nanoseconds>(std::max(deadline - now, {}));
            error("lease in jeopardy: no renewal acknowledged, " + seconds(left) +
                  " left before the local deadline; stopping the child");
            begin_termination("lease in jeopardy", true, true, std::max(deadline, now));
            break;
        }
        watchdog_wake_->expires_at(trigger);
        auto [ec] = co_await watchdog_wake_->async_wait(asio::as_tuple(asio::use_awaitable));
        (void)ec;
        auto cs = co_await asio::this_coro::cancellation_state;
        if (cs.cancelled() != asio::cancellation_type::none) co_return;
    }
    co_await never();
}

asio::awaitable<void> lock_command::helpers(session& s, leadership_scope& scope) {
    auto ex = co_await asio::this_coro::executor;
    co_await asio::experimental::make_parallel_group(asio::co_spawn(ex, watch_loss(scope), asio::deferred),
                                                     asio::co_spawn(ex, watch_deadline(s), asio::deferred),
                                                     asio::co_spawn(ex, killer(), asio::deferred),
                                                     asio::co_spawn(ex, reaper(), asio::deferred))
        .async_wait(asio::experimental::wait_for_all(), asio::deferred);
}

// Awaits the command's end (the supervisor's report of it, or the
// supervisor's death), then the end of everything left in its process group
// (terminated like the child: SIGTERM, SIGKILL after the grace), then lets
// the supervisor go.
asio::awaitable<int> lock_command::wait_child_and_group(bp::process& supervisor) {
    std::optional<int> status;
    while (auto line = co_await next_report())
        if (line->kind == "exit") {
            status = static_cast<int>(line->value);
            break;
        }
    if (!status) {
        // The supervisor died before the command: the group has no guard any
        // more. Nothing of it may outlive this process, so no grace either.
        status = co_await await_supervisor_exit(supervisor);
        kill_group_now("the supervisor (pid " + std::to_string(supervisor_pid_) + ") " + describe_status(*status) +
                       " while the child ran");
    }
    info("child " + describe_status(*status));
    restore_terminal();
    co_await drain_group();
    pgid_ = -1;
    let_go_of_supervisor();
    co_await await_supervisor_exit(supervisor);
    co_return *status;
}

asio::awaitable<void> lock_command::drain_group() {
    reap_adopted();
    if (group_alive()) {
        begin_termination("the child exited and left processes in its process group", true, false);
        steady::time_point give_up = steady::time_point::max();
        while (group_alive()) {
            auto const now = steady::now();
            // Just after the SIGKILL is due; kill_at_ may be "never" (max).
            steady::time_point wake = kill_at_ < steady::time_point::max() - 100ms ? kill_at_ + 100ms : kill_at_;
            if (killed_) {
                // Members that are not our children cannot be reaped here;
                // look again shortly, for a bounded time.
                if (give_up == steady::time_point::max()) give_up = now + 2s;
                if (now >= give_up) {
                    error("processes remain in group " + std::to_string(pgid_) + " after SIGKILL; not waiting for them");
                    break;
                }
                wake = now + 50ms;
            }
            drain_wake_.expires_at(wake);
            auto [wec] = co_await drain_wake_.async_wait(asio::as_tuple(asio::use_awaitable));
            (void)wec;
            reap_adopted();
        }
    }
    if (terminating_) info("the child's process group is gone");
}

void lock_command::restore_terminal() {
    if (!took_terminal_) return;
    took_terminal_ = false;
    struct sigaction ign{}, old{};
    ign.sa_handler = SIG_IGN;
    ::sigemptyset(&ign.sa_mask);
    ::sigaction(SIGTTOU, &ign, &old);
    ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    ::sigaction(SIGTTOU, &old, nullptr);
}

// Starts `tenure __supervise <lifeline> <report> <our pid> <take terminal>
// <program> <args...>` with the command's environment, and keeps the
// lifeline's write end (close-on-exec: nothing else we start inherits it)
// and the report pipe's read end.
std::optional<bp::process> lock_command::start_supervisor(asio::any_io_executor ex,
                                                         std::vector<std::string> const& env, bool take_terminal) {
    std::vector<char const*> envp;
    for (auto const& e : env) envp.push_back(e.c_str());
    envp.push_back(nullptr);
    int lifeline[2] = {-1, -1}, report[2] = {-1, -1};
    std::string failure;
    if (::pipe2(lifeline, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0)
        failure = std::string("pipe: ") + std::strerror(errno);

    std::vector<std::string> args = {supervise_subcommand,       std::to_string(lifeline[0]),
                                     std::to_string(report[1]),  std::to_string(::getpid()),
                                     take_terminal ? "1" : "0", command_.program.string()};
    args.insert(args.end(), command_.args.begin(), command_.args.end());
    std::vector<char const*> argv = {"tenure"};
    for (auto const& a : args) argv.push_back(a.c_str());
    argv.push_back(nullptr);

    supervisor_setup setup{envp.data(), lifeline[0], report[1], ::getpid()};
    std::optional<bp::process> proc;
    if (failure.empty()) {
        try {
            if (cfg_.pass_stdin)
                proc.emplace(ex, "/proc/self/exe", argv.data(), bp::process_stdio{{}, {}, {}}, setup);
            else
                proc.emplace(ex, "/proc/self/exe", argv.data(), bp::process_stdio{nullptr, {}, {}}, setup);
        } catch (std::exception const& e) {
            failure = describe(e);
        }
    }
    for (int fd : {lifeline[0], report[1]})
        if (fd >= 0) ::close(fd);
    if (!proc) {
        for (int fd : {lifeline[1], report[0]})
            if (fd >= 0) ::close(fd);
        error("Error starting handler: " + failure);
        return std::nullopt;
    }
    lifeline_ = lifeline[1];
    report_.emplace(ex, report[0]);
    supervisor_pid_ = proc->id();
    return proc;
}

// The supervisor's next line ("pid 123"); nullopt once it closed its end.
asio::awaitable<std::optional<lock_command::report_line>> lock_command::next_report() {
    auto [ec, n] = co_await asio::async_read_until(*report_, asio::dynamic_buffer(report_buf_), '\n',
                                                   asio::as_tuple(asio::use_awaitable));
    if (ec) co_return std::nullopt;
    std::string const line = report_buf_.substr(0, n - 1);
    report_buf_.erase(0, n);
    report_line r;
    auto const space = line.find(' ');
    r.kind = line.substr(0, space);
    if (space != std::string::npos) std::from_chars(line.data() + space + 1, line.data() + line.size(), r.value);
    co_return r;
}

// The supervisor's first report: the command runs (its pid is the group's
// id), or why it could not be started.
asio::awaitable<bool> lock_command::await_command_start(bp::process& supervisor) {
    auto const first = co_await next_report();
    if (first && first->kind == "pid" && first->value > 0) {
        pgid_ = static_cast<pid_t>(first->value);
        co_return true;
    }
    restore_terminal();
    let_go_of_supervisor();
    int const status = co_await await_supervisor_exit(supervisor);
    std::string why = "its supervisor " + describe_status(status);
    if (first && first->kind == "error")
        why = "exec " + quote(command_.program.string()) + ": " + std::strerror(static_cast<int>(first->value));
    error("Error starting handler: " + why);
    co_return false;
}

asio::awaitable<int> lock_command::await_supervisor_exit(bp::process& supervisor) {
    if (!supervisor_reaped_) {
        auto [ec, code] = co_await supervisor.async_wait(asio::as_tuple(asio::use_awaitable));
        (void)code;
        supervisor_reaped_ = true;
        supervisor_status_ = ec ? 0 : supervisor.native_exit_code();
        if (ec) error("waiting for the supervisor failed: " + ec.message());
    }
    co_return supervisor_status_;
}

// Closing the lifeline makes the supervisor SIGKILL the group (gone by now
// on the normal path) and exit.
void lock_command::let_go_of_supervisor() {
    if (lifeline_ >= 0) ::close(lifeline_);
    lifeline_ = -1;
}

asio::awaitable<lock_command::child_result> lock_command::supervise(session& s, leadership_scope& scope) {
    child_result result;
    std::vector<std::string> const env = child_environment({
        "CONSUL_LOCK_HELD=true",
        "TENURE_LOCK_KEY=" + scope.key(),
        "TENURE_SESSION=" + s.id(),
        "TENURE_FENCING_TOKEN=" + std::to_string(scope.token()),
    });
    bool const take_terminal =
        cfg_.pass_stdin && ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();

    phase_ = phase::child;
    if (cfg_.verbose && cfg_.pass_stdin) info("Stdin passed to handler process");
    info("Starting handler: " + command_.display);
    std::optional<bp::process> supervisor = start_supervisor(co_await asio::this_coro::executor, env, take_terminal);
    if (!supervisor) co_return result;
    took_terminal_ = take_terminal;  // the command takes it before its exec
    if (!co_await await_command_start(*supervisor)) {
        if (pending_signal_) shutdown_.set();
        co_return result;
    }
    result.started = true;
    info("child pid " + std::to_string(pgid_) + " in its own process group, started by the supervisor (pid " +
         std::to_string(supervisor_pid_) + ")");

    // A signal that arrived before the child existed, or before its pid was known.
    if (shutdown_.is_set()) begin_termination("shutdown", true, true);
    else if (pending_signal_) forward_signal(*std::exchange(pending_signal_, std::nullopt));

    auto main = wait_child_and_group(*supervisor);
    auto rest = helpers(s, scope);
    std::optional<int> status = co_await tenure::detail::race(std::move(main), std::move(rest));
    result.status = status.value_or(0);
    phase_ = phase::cleanup;
    co_return result;
}

// ---- flags ---------------------------------------------------------------------------

lock_config parse_lock_flags(std::vector<std::string> const& args, bool& help) {
    lock_config cfg;
    flag_set flags;
    flags.add_int("n", cfg.limit);
    flags.add_string("name", cfg.name);
    flags.add_bool("pass-stdin", cfg.pass_stdin);
    flags.add_bool("shell", cfg.shell);
    flags.add_duration("timeout", cfg.timeout);
    flags.add_duration("try", cfg.timeout);  // deprecated alias, as in consul
    flags.add_int("monitor-retry", cfg.monitor_retry);
    flags.add_bool("verbose", cfg.verbose);
    flags.add_bool("child-exit-code", cfg.child_exit_code);
    flags.add_duration("session-ttl", cfg.session_ttl);
    flags.add_duration("lock-delay", cfg.lock_delay);
    flags.add_duration("kill-grace", cfg.kill_grace);
    flags.add_int("priority", cfg.priority);
    flags.add_bool("yield", cfg.yield);
    flags.add_duration("yield-settle", cfg.yield_settle);
    cfg.http.add_to(flags);
    cfg.etcd.add_to(flags);
    auto rest = flags.parse(args);
    help = flags.help_requested();
    if (help) return cfg;

    auto const d = [](std::chrono::nanoseconds v) { return format_go_duration(v); };
    if (cfg.limit <= 0) throw usage_error("-n must be >= 1 (got " + std::to_string(cfg.limit) + ")");
    if (rest.empty()) throw usage_error("a key prefix and a child command must be specified (got neither)");
    if (rest.size() < 2)
        throw usage_error("a child command must be specified after the prefix " + quote(rest.front()));
    if (cfg.timeout.count() < 0) throw usage_error("-timeout must be >= 0 (got " + d(cfg.timeout) + "); 0 waits forever");
    if (cfg.monitor_retry < 0)
        throw usage_error("-monitor-retry must be >= 0 (got " + std::to_string(cfg.monitor_retry) + ")");
    if (cfg.session_ttl.count() <= 0) throw usage_error("-session-ttl must be > 0 (got " + d(cfg.session_ttl) + ")");
    if (cfg.lock_delay.count() < 0)
        throw usage_error("-lock-delay must be >= 0 (got " + d(cfg.lock_delay) + "); 0 disables it");
    if (cfg.kill_grace.count() < 0) throw usage_error("-kill-grace must be >= 0 (got " + d(cfg.kill_grace) + ")");
    if (cfg.yield_settle.count() < 0) throw usage_error("-yield-settle must be >= 0 (got " + d(cfg.yield_settle) + ")");
    cfg.on_etcd = cfg.etcd.selected(flags);
    cfg.lock_delay_set = flags.was_set("lock-delay");

    std::string prefix = rest.front();
    while (!prefix.empty() && prefix.front() == '/') prefix.erase(0, 1);
    cfg.prefix = clean_prefix(prefix);
    if (cfg.on_etcd && cfg.prefix.empty())
        throw usage_error(std::string("with etcd the prefix names the ") + (cfg.limit > 1 ? "semaphore" : "election") +
                          " and must not be empty (got " + quote(rest.front()) + ")");
    cfg.child_args.assign(rest.begin() + 1, rest.end());
    if (cfg.name.empty()) cfg.name = "Consul lock for '" + join(cfg.child_args) + "' at '" + prefix + "'";
    return cfg;
}

}  // namespace

void lock_help(std::ostream& os) {
    os << "Usage: tenure lock [options] <prefix> <child...>\n\n"
          "  Acquires a lock (with -n > 1, a slot of a semaphore) under <prefix> and\n"
          "  runs <child...> while it holds it. Flag-compatible with `consul lock`, and\n"
          "  the same key layout: for -n 1 the key <prefix>/.lock (a leading '/' of\n"
          "  the prefix is dropped) taken with Consul's lock flag value, so `consul\n"
          "  lock` and Go's api.Lock share it. `tenure leader <prefix>/.lock` shows the\n"
          "  holder.\n\n"
          "  The child runs in its own process group. Its environment adds\n"
          "  CONSUL_LOCK_HELD=true, TENURE_LOCK_KEY=<key>, TENURE_SESSION=<session id>\n"
          "  and TENURE_FENCING_TOKEN=<fencing token>: the key's LockIndex at\n"
          "  acquisition (with -n > 1: the contender key, and the index of the write\n"
          "  that admitted this holder). Its stdin is /dev/null unless -pass-stdin.\n\n"
          "  The child's process group dies with tenure lock, however tenure lock dies\n"
          "  (kill -9, the OOM killer): the child is started by a small supervisor,\n"
          "  tenure itself, which SIGKILLs the whole group at once when tenure lock is\n"
          "  gone, so no child outlives the lock (consul lock leaves it running).\n"
          "  Processes that leave the group (setsid, setpgid) are out of its reach:\n"
          "  run tenure lock in a cgroup of its own (systemd-run --scope) for those.\n\n"
          "  When the lock is lost (released or taken by another session, key deleted,\n"
          "  session invalidated, lease expired locally) the child's whole process\n"
          "  group gets SIGTERM, then SIGKILL after -kill-grace. The child is also\n"
          "  stopped before the session's local deadline (send time of the last\n"
          "  acknowledged renewal + TTL), not after the server notices: once a renewal\n"
          "  is overdue and less than -kill-grace is left, termination starts, so\n"
          "  SIGKILL lands by the deadline (with -kill-grace < TTL/2; otherwise as soon\n"
          "  as a renewal fails). -verbose prints these times.\n\n"
          "  SIGINT, SIGTERM and SIGHUP are forwarded to the child's process group;\n"
          "  after SIGINT or SIGTERM the group gets SIGKILL if it is still there after\n"
          "  -kill-grace. When the child exits, whatever it left in its process group\n"
          "  is stopped the same way; then the lock is released and the session\n"
          "  destroyed. Unlike consul lock, the key is left in place (free), so its\n"
          "  LockIndex, the fencing token, keeps growing across holders.\n\n"
          "  On etcd (-etcd-endpoints, or ETCDCTL_ENDPOINTS; see below) the prefix\n"
          "  names an etcd election: the session is a lease, the candidate key is\n"
          "  <prefix>/<lease id in hex> (etcd's own scheme, shared with `etcdctl lock\n"
          "  <prefix>` and `etcdctl elect <prefix>`), the oldest key holds the lock, and\n"
          "  the fencing token is its create revision. The child gets the same\n"
          "  variables (TENURE_LOCK_KEY is the candidate key, TENURE_SESSION the lease\n"
          "  id in hex); everything else above applies, and `tenure leader\n"
          "  -etcd-endpoints ... <prefix>` shows the holder. With -n N > 1 on etcd the\n"
          "  keys are the same, <prefix>/<lease id in hex>, and the N oldest hold a\n"
          "  slot each (no .lock key; every contender must use the same -n); the\n"
          "  fencing token is the own key's create revision, and -lock-delay does\n"
          "  not apply.\n\n"
          "  Exit status: 0 when the child ran, also when it was stopped because the\n"
          "  lock was lost; 2 with -child-exit-code when the child exited non-zero (or\n"
          "  could not be started; a child whose supervisor was killed counts as killed\n"
          "  by SIGKILL); 1 for bad usage, an unreachable agent, setup and\n"
          "  acquisition errors, -timeout expiry or a signal during acquisition\n"
          "  (\"Shutdown triggered or timeout during lock acquisition\"), and a failed\n"
          "  release.\n\n"
          "Command Options:\n\n"
          "  -n=<int>\n"
          "     Limit on the number of concurrent holders. Above 1 the lock becomes a\n"
          "     semaphore (Consul's layout: <prefix>/<session> and <prefix>/.lock; on\n"
          "     etcd <prefix>/<lease id in hex>, the N oldest holding).\n"
          "     Default: 1\n\n"
          "  -name=<string>\n"
          "     Name of the lock's session. Default: \"Consul lock for '<child>' at\n"
          "     '<prefix>'\".\n\n"
          "  -pass-stdin\n"
          "     Pass stdin to the child. Default: false\n\n"
          "  -shell\n"
          "     Run the child with a shell: $SHELL -c \"<child args joined by spaces>\",\n"
          "     or /bin/sh. -shell=false runs the arguments themselves (the program is\n"
          "     looked up in PATH). Default: true\n\n"
          "  -timeout=<duration>\n"
          "     Longest wait to acquire the lock, as a Go duration (\"1s\", \"3h\"); 0\n"
          "     waits forever. Exit 1 when it expires. -try is a deprecated alias.\n"
          "     Default: 0\n\n"
          "  -monitor-retry=<int>\n"
          "     Accepted for compatibility and ignored: tenure retries transient errors\n"
          "     (a 500, a dropped connection) for as long as the session's lease can\n"
          "     still be proven, i.e. until its local deadline. Default: 3\n\n"
          "  -verbose\n"
          "     Print the timing the lock runs under (renewal period, local deadline,\n"
          "     kill grace, worst-case gap after a crash, margin) and each step of the\n"
          "     lifecycle on stderr. Default: false\n\n"
          "  -child-exit-code\n"
          "     Exit 2 when the child exited non-zero. Default: false\n\n"
          "  -session-ttl=<duration>\n"
          "     TTL of the lock's session; renewed every TTL/2 (etcd: a lease of TTL\n"
          "     rounded up to whole seconds, kept alive every TTL/3). Default: 15s\n\n"
          "  -priority=<int>\n"
          "     This candidate's priority (Consul): when the lock frees, the waiting\n"
          "     candidate with the highest priority gets it (among equals, the one that\n"
          "     waited longest). Waiting candidates are listed by `tenure leader\n"
          "     -candidates <prefix>/.lock`. Default: 0\n\n"
          "  -yield\n"
          "     While holding, hand the lock over to a waiting candidate of higher\n"
          "     priority once it has waited -yield-settle; the child is stopped as on a\n"
          "     lock loss. Default: false\n\n"
          "  -yield-settle=<duration>\n"
          "     How long a higher-priority candidate must wait, without a break, before\n"
          "     -yield hands over. Default: 5s\n\n"
          "  Switchover: `tenure transfer [-to NAME] <prefix>` asks the holder to hand\n"
          "  the lock to the candidate whose session is named NAME (-name), or to the\n"
          "  best one; tenure lock honours it and stops its child as on a lock loss.\n\n"
          "  -lock-delay=<duration>\n"
          "     Lock-delay of the session: after an invalidation (not a clean release)\n"
          "     nobody can take the key for this long. 0 disables it. On etcd, which\n"
          "     has no lock-delay, this process applies it while waiting: when the\n"
          "     holder before it lost its lease (not a clean release) it leads only\n"
          "     this long after; there it applies only when the flag is given.\n"
          "     Default: 15s (Consul); none on etcd\n\n"
          "  -kill-grace=<duration>\n"
          "     Time between SIGTERM and SIGKILL to the child's process group.\n"
          "     Default: 5s\n\n";
    http_flags::help(os);
    os << '\n';
    etcd_flags::help(os);
}

int run_lock_supervisor(int argc, char** argv) {
    auto const o = parse_supervisor_args(argc, argv);
    if (!o) {
        std::cerr << "tenure " << supervise_subcommand << ": internal to tenure lock, not a command\n";
        return 1;
    }
    ::prctl(PR_SET_NAME, "tenure");  // not "exe", from /proc/self/exe, in ps and top
    // The command inherits neither pipe end.
    ::fcntl(o->lifeline, F_SETFD, FD_CLOEXEC);
    ::fcntl(o->report, F_SETFD, FD_CLOEXEC);
    // A report to a dead tenure lock must not end us before we kill the group;
    // in a background group of the terminal, our stderr stays writable.
    std::signal(SIGPIPE, SIG_IGN);
    std::signal(SIGTTOU, SIG_IGN);
    sigset_t const set = supervisor_signals();  // blocked since before our exec
    int const signals = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (signals < 0) {
        std::cerr << "tenure lock: supervisor: signalfd: " << std::strerror(errno) << '\n';
        return 1;
    }
    if (::getppid() != o->parent) return 1;  // tenure lock is gone already: start nothing
    int err = 0;
    pid_t const pid = start_command(*o, err);
    if (pid < 0) {
        report(o->report, "error", err);
        return 127;
    }
    report(o->report, "pid", pid);
    watch_command(*o, signals, pid);
}

int run_lock(std::vector<std::string> args) {
    bool help = false;
    lock_config cfg = parse_lock_flags(args, help);
    if (help) {
        lock_help(std::cout);
        return 0;
    }
    // A write to a closed stderr must not kill us while the child runs.
    std::signal(SIGPIPE, SIG_IGN);
    // Orphans of the child's tree are reparented here, so we can reap them and
    // know when its process group is gone.
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);

    asio::io_context io{1};
    consul::client_config const cmd_http_config = cfg.http.config();
    etcd::client_config const cmd_etcd_config = cfg.etcd.config();
    bool const on_etcd = cfg.on_etcd;
    lock_command cmd(std::move(cfg), io.get_executor());
    try {
        cmd.prepare();
    } catch (std::exception const& e) {
        std::cerr << "tenure lock: " << e.what() << '\n';
        return 1;
    }

    std::optional<consul::client> client;
    std::optional<etcd::client> etcd_client;
    try {
        if (on_etcd) etcd_client.emplace(io.get_executor(), cmd_etcd_config);
        else client.emplace(io.get_executor(), cmd_http_config);
    } catch (std::exception const& e) {
        std::cerr << "tenure lock: Error connecting to " << (on_etcd ? "etcd" : "Consul agent") << ": " << describe(e)
                  << '\n';
        return 1;
    }

    int rc = 1;
    asio::co_spawn(io, cmd.signal_loop(), asio::detached);
    asio::co_spawn(io, cmd.run(client ? &*client : nullptr, etcd_client ? &*etcd_client : nullptr),
                   [&](std::exception_ptr e, int code) {
        rc = code;
        if (e) {
            try {
                std::rethrow_exception(e);
            } catch (std::exception const& ex) {
                std::cerr << "tenure lock: " << ex.what() << '\n';
            }
            rc = 1;
        }
        // Let what the library still has in flight (a monitor's last
        // blocking query) wind down: close the client's connections.
        cmd.finish();
        if (client) client->close();
        if (etcd_client) etcd_client->close();
    });
    io.run();
    return rc;
}

}  // namespace tenure::cli
