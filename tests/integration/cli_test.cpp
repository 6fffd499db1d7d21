// `tenure lock` and `tenure leader`: the real `tenure` binary against a real
// `tenure agent` (one per test case, -session-ttl-min 100ms), over HTTP.
//
// The test drives the command line the way a user does: it starts the
// processes, reads their stdout line by line, writes to the stdin of a child
// that holds the lock to let it finish, and awaits exits (pidfd). Nothing
// sleeps for a fixed time except where absence is asserted (a second holder
// that must not run).
#include "agent_process.hpp"
#include "etcd_process.hpp"
#include "http_client.hpp"
#include "process_io.hpp"

#include <tenure/etcd/client.hpp>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/use_future.hpp>

#include <boost/json.hpp>
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <functional>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef TENURE_BINARY
#error "TENURE_BINARY must name the tenure executable"
#endif

namespace json = boost::json;
using namespace tenure::itest;
using namespace std::chrono_literals;

namespace {

// A `tenure` process: stdout through a pipe (read line by line), stderr into
// an unlinked temporary file, stdin a pipe (or /dev/null). The destructor
// stops it (SIGTERM, then SIGKILL) if it still runs.
class tenure_process {
public:
    explicit tenure_process(std::vector<std::string> args, bool stdin_pipe = false) {
        args.insert(args.begin(), TENURE_BINARY);
        char tmpl[] = "/tmp/tenure-itest-cli-XXXXXX";
        err_fd_ = ::mkostemp(tmpl, O_CLOEXEC);
        if (err_fd_ < 0) throw std::runtime_error("mkostemp failed");
        ::unlink(tmpl);
        int out[2], in[2] = {-1, -1};
        if (::pipe2(out, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
        if (stdin_pipe && ::pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
        std::vector<char*> argv;
        for (auto& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        pid_t const parent = ::getpid();
        pid_ = ::fork();
        if (pid_ < 0) throw std::runtime_error("fork failed");
        if (pid_ == 0) {
            ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a crashed test must not leave locks behind
            if (::getppid() != parent) ::_exit(127);
            ::dup2(out[1], STDOUT_FILENO);
            ::dup2(err_fd_, STDERR_FILENO);
            if (stdin_pipe) {
                ::dup2(in[0], STDIN_FILENO);
            } else {
                int devnull = ::open("/dev/null", O_RDONLY);
                if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
            }
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        ::close(out[1]);
        out_fd_ = out[0];
        if (stdin_pipe) {
            ::close(in[0]);
            in_fd_ = in[1];
        }
        pidfd_ = open_pidfd(pid_);
    }

    ~tenure_process() {
        if (!status_) {
            ::kill(pid_, SIGTERM);
            if (wait(10s) < 0) {
                ::kill(pid_, SIGKILL);
                wait(5s);
            }
        }
        close_stdin();
        ::close(out_fd_);
        ::close(err_fd_);
        if (pidfd_ >= 0) ::close(pidfd_);
    }
    tenure_process(tenure_process const&) = delete;
    tenure_process& operator=(tenure_process const&) = delete;

    pid_t pid() const noexcept { return pid_; }

    // The next stdout line (without '\n'), or nullopt at EOF or timeout.
    std::optional<std::string> read_line(std::chrono::milliseconds timeout = 10s) {
        auto const deadline = steady::now() + timeout;
        for (;;) {
            if (auto nl = buf_.find('\n'); nl != std::string::npos) {
                std::string line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                return line;
            }
            if (eof_) return std::nullopt;
            pollfd p{out_fd_, POLLIN, 0};
            int r = ::poll(&p, 1, remaining_ms(deadline));
            if (r < 0 && errno == EINTR) continue;
            if (r == 0) return std::nullopt;
            char chunk[4096];
            ssize_t n = ::read(out_fd_, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                eof_ = true;
                continue;
            }
            buf_.append(chunk, static_cast<std::size_t>(n));
        }
    }

    // Reads stdout lines until one starts with `prefix`; returns it.
    std::string expect_line(std::string const& prefix, std::chrono::milliseconds timeout = 10s) {
        auto const deadline = steady::now() + timeout;
        for (;;) {
            auto line = read_line(std::chrono::milliseconds(remaining_ms(deadline)));
            if (!line)
                throw std::runtime_error("no stdout line starting with '" + prefix + "'; stderr:\n" + err());
            if (line->rfind(prefix, 0) == 0) return *line;
        }
    }

    // Everything left on stdout until EOF (the process and its children are gone).
    std::string rest_of_stdout(std::chrono::milliseconds timeout = 10s) {
        std::string all;
        while (auto line = read_line(timeout)) all += *line + "\n";
        all += buf_;
        buf_.clear();
        return all;
    }

    void write_stdin(std::string const& s) {
        if (in_fd_ >= 0) (void)!::write(in_fd_, s.data(), s.size());
    }
    void close_stdin() {
        if (in_fd_ >= 0) ::close(in_fd_);
        in_fd_ = -1;
    }
    void signal(int sig) { ::kill(pid_, sig); }

    // The exit status (WEXITSTATUS, or 128 + signal), or -1 on timeout.
    int wait(std::chrono::milliseconds timeout = 20s) {
        if (status_) return *status_;
        auto const deadline = steady::now() + timeout;
        for (;;) {
            int st = 0;
            pid_t r = ::waitpid(pid_, &st, WNOHANG);
            if (r == pid_) {
                status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
                return *status_;
            }
            if (r < 0 && errno != EINTR) return -1;
            if (steady::now() >= deadline) return -1;
            pollfd p{pidfd_, POLLIN, 0};
            ::poll(&p, 1, std::min(remaining_ms(deadline), pidfd_ >= 0 ? 60'000 : 2));
        }
    }

    std::string err() const { return read_all(err_fd_); }

private:
    pid_t pid_ = -1;
    int out_fd_ = -1, in_fd_ = -1, err_fd_ = -1, pidfd_ = -1;
    std::string buf_;
    bool eof_ = false;
    std::optional<int> status_;
};

// True while `pid` exists and is not a zombie.
bool process_alive(pid_t pid) {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string s;
    if (!std::getline(stat, s)) return false;
    auto close = s.rfind(')');
    return close == std::string::npos || close + 2 >= s.size() || s[close + 2] != 'Z';
}

// "key=value" fields of a line.
std::map<std::string, std::string> fields(std::string const& line) {
    std::map<std::string, std::string> out;
    std::istringstream in(line);
    std::string word;
    while (in >> word)
        if (auto eq = word.find('='); eq != std::string::npos) out[word.substr(0, eq)] = word.substr(eq + 1);
    return out;
}

struct cli_fixture {
    agent_process agent{[] {
        agent_options o;
        o.session_ttl_min = "100ms";
        return o;
    }()};
    http_client http{"127.0.0.1", agent.port()};

    std::string addr() const { return "127.0.0.1:" + std::to_string(agent.port()); }

    // `tenure lock` with short timings, so that everything happens well
    // under a second; `extra` flags go before the prefix.
    std::vector<std::string> lock_args(std::string const& prefix, std::string const& script,
                                       std::vector<std::string> extra = {}) const {
        std::vector<std::string> a = {"lock", "-http-addr", addr(), "-session-ttl", "1s", "-lock-delay", "200ms",
                                      "-kill-grace", "2s"};
        a.insert(a.end(), extra.begin(), extra.end());
        a.push_back(prefix);
        a.push_back(script);
        return a;
    }

    // The lock key's JSON object, or nullptr when it does not exist.
    json::value key(std::string const& k) {
        auto r = http.get("/v1/kv/" + k);
        if (r.status == 404) return nullptr;
        BOOST_REQUIRE_EQUAL(r.status, 200u);
        return json::parse(r.body).as_array().at(0);
    }
    std::string holder(std::string const& k) {
        auto v = key(k);
        if (v.is_null()) return {};
        auto const* s = v.as_object().if_contains("Session");
        return s && s->is_string() ? std::string(s->as_string()) : std::string();
    }
};

std::string join_status(tenure_process& p, int rc) {
    return "exit " + std::to_string(rc) + "; stderr:\n" + p.err();
}

// A line for BOOST_TEST (which cannot print an optional).
std::string text(std::optional<std::string> const& line) { return line.value_or("<no line>"); }

// ---- a tenure lock killed with SIGKILL -------------------------------------------------

// A fresh directory for the files the children write; removed at the end.
struct scratch_dir {
    std::string path;
    scratch_dir() {
        char tmpl[] = "/tmp/tenure-itest-kill9-XXXXXX";
        if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        path = tmpl;
    }
    ~scratch_dir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    scratch_dir(scratch_dir const&) = delete;
    scratch_dir& operator=(scratch_dir const&) = delete;
    std::string file(std::string const& name) const { return path + "/" + name; }
};

// The pids a child wrote to `path` ("<pid> <pid> ..."), once the file exists
// (children write it under another name and rename it, so it is whole);
// empty on timeout. Polled: the file's appearance is the event.
std::vector<pid_t> await_pids(std::string const& path, std::chrono::milliseconds timeout = 15s) {
    auto const deadline = steady::now() + timeout;
    while (!std::filesystem::exists(path)) {
        if (steady::now() >= deadline) return {};
        ::usleep(1000);
    }
    std::ifstream in(path);
    std::vector<pid_t> pids;
    for (pid_t pid = 0; in >> pid;) pids.push_back(pid);
    return pids;
}

// Polls (every ~0.2 ms) until none of `pids` is alive; how long after
// `since` that was, or nullopt after `timeout`.
std::optional<steady::duration> await_gone(std::vector<pid_t> const& pids, steady::time_point since,
                                           std::chrono::milliseconds timeout = 5s) {
    auto const deadline = steady::now() + timeout;
    for (;;) {
        bool const any = std::any_of(pids.begin(), pids.end(), process_alive);
        auto const now = steady::now();
        if (!any) return now - since;
        if (now >= deadline) return std::nullopt;
        ::usleep(200);
    }
}

// How long SIGKILL of `tenure lock` to its child's group gone may take.
constexpr double kill9_bound_ms = 1000.0;

double to_ms(steady::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// "median X ms, max Y ms over N" of the times.
std::string summary(std::vector<double> ms) {
    if (ms.empty()) return "no samples";
    std::sort(ms.begin(), ms.end());
    double const median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
    std::ostringstream out;
    out << std::fixed << std::setprecision(2) << "median " << median << " ms, min " << ms.front() << " ms, max "
        << ms.back() << " ms over " << ms.size();
    return out.str();
}

// A child that starts a background grandchild, then writes "<child pid>
// <grandchild pid> <supervisor pid>" to `pids` (the supervisor is the
// child's parent), and runs until it is killed.
std::string child_with_grandchild(std::string const& pids) {
    return "sleep 300 & echo $$ $! $PPID > " + pids + ".tmp && mv " + pids + ".tmp " + pids + "; wait";
}

// SIGKILL to a `tenure lock` whose child and grandchild run: both must go
// at once, on the supervisor's lifeline EOF. Typically 5-50 ms; the bound is
// a second so a loaded sanitizer run (130 ms seen) does not trip it, while
// a cleanup that polled for the parent at a human pace would.
void kill9_kills_the_child_and_grandchild(std::vector<std::string> args, scratch_dir const& dir) {
    tenure_process p(std::move(args));
    auto const pids = await_pids(dir.file("pids"));
    BOOST_TEST_REQUIRE(pids.size() == 3u, "the child did not start; stderr:\n" << p.err());
    BOOST_TEST_REQUIRE(process_alive(pids[0]));
    BOOST_TEST_REQUIRE(process_alive(pids[1]));

    auto const t0 = steady::now();
    p.signal(SIGKILL);
    auto const took = await_gone({pids[0], pids[1]}, t0);
    BOOST_TEST_REQUIRE(took.has_value(), "the child or its grandchild outlived tenure lock");
    BOOST_TEST_MESSAGE("SIGKILL of tenure lock to its child and grandchild gone: " << to_ms(*took) << " ms");
    BOOST_TEST(to_ms(*took) < kill9_bound_ms);
    BOOST_TEST(p.wait() == 128 + SIGKILL);
    BOOST_TEST(await_gone({pids[2]}, steady::now()).has_value(), "the supervisor outlived tenure lock");
}

// Kills the holder with SIGKILL `rounds` times while `contenders` `tenure
// lock` processes contend for one lock; `args(script)` makes a contender's
// command line. Each child, and a grandchild of it, appends "start <id> <ns>"
// and "beat <id> <ns>" lines (date +%s%N, CLOCK_REALTIME) to a log; the test
// notes when it saw each killed holder's child and grandchild gone, on the
// same clock. Then no two children's lives may overlap: [first stamp, seen
// gone] of each holder, the last one open-ended. Returns the SIGKILL→gone
// times in ms.
std::vector<double> kill9_under_contention(std::function<std::vector<std::string>(std::string const&)> const& args,
                                           int rounds, int contenders) {
    scratch_dir dir;
    std::string const log = dir.file("log");
    auto const script = [&](int id) {
        std::string const k = std::to_string(id), pids = dir.file(k + ".pids");
        std::string const beat = "while :; do echo beat " + k + " $(date +%s%N) >> " + log + "; sleep 0.05; done";
        return "echo start " + k + " $(date +%s%N) >> " + log + "; (" + beat + ") & echo $$ $! > " + pids +
               ".tmp && mv " + pids + ".tmp " + pids + "; " + beat;
    };
    std::map<int, std::unique_ptr<tenure_process>> waiting;  // by contender id
    int next_id = 0;
    auto const spawn = [&] {
        int const id = next_id++;
        waiting.emplace(id, std::make_unique<tenure_process>(args(script(id))));
    };
    for (int i = 0; i < contenders; ++i) spawn();

    std::map<int, long long> gone_ns;  // holder id → when the test saw its child and grandchild gone
    std::vector<double> took_ms;
    for (int round = 0; round < rounds; ++round) {
        // The holder: the contender whose child wrote its pids.
        int holder = -1;
        std::vector<pid_t> pids;
        for (auto const deadline = steady::now() + 20s; holder < 0 && steady::now() < deadline; ::usleep(1000))
            for (auto const& [id, proc] : waiting)
                if (std::filesystem::exists(dir.file(std::to_string(id) + ".pids"))) {
                    holder = id;
                    pids = await_pids(dir.file(std::to_string(id) + ".pids"));
                    break;
                }
        BOOST_TEST_REQUIRE(holder >= 0, "round " << round << ": no contender got the lock");
        BOOST_TEST_REQUIRE(pids.size() == 2u);
        auto const t0 = steady::now();
        waiting.at(holder)->signal(SIGKILL);
        auto const took = await_gone(pids, t0);
        gone_ns[holder] = std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::system_clock::now().time_since_epoch()).count();
        BOOST_TEST_REQUIRE(took.has_value(), "round " << round << ": the child or grandchild outlived tenure lock");
        took_ms.push_back(to_ms(*took));
        BOOST_TEST(waiting.at(holder)->wait() == 128 + SIGKILL);
        waiting.erase(holder);
        spawn();  // contention stays at `contenders`
    }
    // SIGKILL to every contender at once: a holder then releases nothing, so
    // no child starts after this (SIGTERM one by one would hand the lock on).
    for (auto& [who, proc] : waiting) proc->signal(SIGKILL);
    for (auto& [who, proc] : waiting) proc->wait();
    waiting.clear();

    // [first stamp, end] per child; a child still running at the end (or
    // stopped by the clean-up above) is open-ended.
    std::map<int, std::pair<long long, long long>> life;
    std::ifstream in(log);
    std::string kind;
    int id = 0;
    long long ns = 0;
    while (in >> kind >> id >> ns) {
        auto [it, fresh] = life.try_emplace(id, ns, std::numeric_limits<long long>::max());
        if (kind == "start") BOOST_TEST(fresh, "child " << id << " started twice");
        if (auto g = gone_ns.find(id); g != gone_ns.end()) {
            it->second.second = g->second;
            BOOST_TEST(ns <= g->second, "child " << id << " stamped after it was seen gone");
        }
        it->second.first = std::min(it->second.first, ns);
    }
    BOOST_TEST(life.size() >= static_cast<std::size_t>(rounds));
    std::vector<std::pair<long long, long long>> spans;
    for (auto const& [who, span] : life) spans.push_back(span);
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i)
        BOOST_TEST(spans[i - 1].second < spans[i].first, "two children overlap: a child started "
                                                             << (spans[i - 1].second - spans[i].first) / 1e6
                                                             << " ms before the previous holder's was gone");
    return took_ms;
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cli_lock, cli_fixture)

BOOST_AUTO_TEST_CASE(runs_the_child_and_exits_zero_with_its_output) {
    tenure_process p(lock_args("itest/run", "echo hello from the child; echo second line"));
    BOOST_TEST(p.rest_of_stdout() == "hello from the child\nsecond line\n");
    auto rc = p.wait();
    BOOST_TEST(rc == 0, join_status(p, rc));
    // Released, not deleted: the key stays, free, so LockIndex keeps growing.
    BOOST_TEST(holder("itest/run/.lock").empty());
    BOOST_TEST(!key("itest/run/.lock").is_null());
}

BOOST_AUTO_TEST_CASE(talks_to_an_agent_on_a_unix_socket) {
    // -http-addr and CONSUL_HTTP_ADDR take unix:///path, as for consul lock.
    std::string const path = "/tmp/tenure-itest-cli-" + std::to_string(::getpid()) + ".sock";
    agent_options o;
    o.http_addr = "unix://" + path;
    agent_process local(o);
    tenure_process p({"lock", "-http-addr", local.address(), "itest/unix", "echo held=$CONSUL_LOCK_HELD"});
    BOOST_TEST(p.rest_of_stdout() == "held=true\n");
    auto rc = p.wait();
    BOOST_TEST(rc == 0, join_status(p, rc));
    // The key lives in the socket's agent, not in the fixture's TCP one.
    BOOST_TEST(key("itest/unix/.lock").is_null());
}

BOOST_AUTO_TEST_CASE(child_environment_matches_the_server) {
    // -pass-stdin: the child holds the lock until the test writes a line.
    tenure_process p(
        lock_args("itest/env",
                  "echo held=$CONSUL_LOCK_HELD key=$TENURE_LOCK_KEY session=$TENURE_SESSION token=$TENURE_FENCING_TOKEN; "
                  "read line; echo got $line",
                  {"-pass-stdin"}),
        true);
    auto f = fields(p.expect_line("held="));
    BOOST_TEST(f["held"] == "true");
    BOOST_TEST(f["key"] == "itest/env/.lock");
    // While the child runs, the server says the same.
    auto k = key("itest/env/.lock").as_object();
    BOOST_TEST(std::string(k.at("Session").as_string()) == f["session"]);
    BOOST_TEST(std::to_string(k.at("LockIndex").to_number<std::uint64_t>()) == f["token"]);
    BOOST_TEST(k.at("Flags").to_number<std::uint64_t>() == 3304740253564472344ull);  // Consul's lock flag value
    // The session is named like consul lock's.
    auto info = json::parse(http.get("/v1/session/info/" + f["session"]).body).as_array().at(0).as_object();
    BOOST_TEST(std::string(info.at("Name").as_string()) ==
               "Consul lock for 'echo held=$CONSUL_LOCK_HELD key=$TENURE_LOCK_KEY session=$TENURE_SESSION "
               "token=$TENURE_FENCING_TOKEN; read line; echo got $line' at 'itest/env'");

    p.write_stdin("bye\n");
    BOOST_TEST(p.expect_line("got") == "got bye");
    auto rc = p.wait();
    BOOST_TEST(rc == 0, join_status(p, rc));
    // Released, then the session destroyed.
    BOOST_TEST(holder("itest/env/.lock").empty());
    BOOST_TEST(json::parse(http.get("/v1/session/info/" + f["session"]).body).as_array().empty());

    // The next holder's token is larger.
    tenure_process q(lock_args("itest/env", "echo token=$TENURE_FENCING_TOKEN"));
    auto g = fields(q.expect_line("token="));
    BOOST_TEST(std::stoull(g["token"]) > std::stoull(f["token"]));
    BOOST_TEST(q.wait() == 0);
}

BOOST_AUTO_TEST_CASE(contenders_never_run_their_children_at_once) {
    char tmpl[] = "/tmp/tenure-itest-overlap-XXXXXX";
    int fd = ::mkstemp(tmpl);
    BOOST_REQUIRE(fd >= 0);
    ::close(fd);
    std::string const log = tmpl;
    std::vector<std::unique_ptr<tenure_process>> procs;
    for (int i = 0; i < 3; ++i) {
        std::string id = std::to_string(i);
        std::string script = "echo start " + id + " $(date +%s%N) >> " + log + "; sleep 0.2; echo end " + id +
                             " $(date +%s%N) >> " + log;
        procs.push_back(std::make_unique<tenure_process>(lock_args("itest/overlap", script)));
    }
    for (auto& p : procs) {
        auto rc = p->wait();
        BOOST_TEST(rc == 0, join_status(*p, rc));
    }
    std::ifstream in(log);
    std::vector<std::tuple<std::string, std::string, long long>> events;
    std::string kind, id;
    long long ns = 0;
    while (in >> kind >> id >> ns) events.emplace_back(kind, id, ns);
    ::unlink(log.c_str());
    // Three intervals, in file order start/end of the same child, disjoint in time.
    BOOST_TEST_REQUIRE(events.size() == 6u);
    for (std::size_t i = 0; i < events.size(); i += 2) {
        auto const& [k1, id1, t1] = events[i];
        auto const& [k2, id2, t2] = events[i + 1];
        BOOST_TEST(k1 == "start");
        BOOST_TEST(k2 == "end");
        BOOST_TEST(id1 == id2);
        BOOST_TEST(t1 <= t2);
        if (i > 0) BOOST_TEST(std::get<2>(events[i - 1]) <= t1);  // the previous holder ended first
    }
}

BOOST_AUTO_TEST_CASE(forced_release_kills_the_child_and_its_grandchildren) {
    tenure_process p(lock_args("itest/force", "sleep 100 & echo a $!; sleep 100 & echo b $!; echo ready; wait",
                               {"-kill-grace", "5s"}));
    pid_t const a = std::stoi(p.expect_line("a ").substr(2));
    pid_t const b = std::stoi(p.expect_line("b ").substr(2));
    p.expect_line("ready");
    BOOST_TEST(process_alive(a));
    BOOST_TEST(process_alive(b));
    std::string const sid = holder("itest/force/.lock");
    BOOST_TEST_REQUIRE(!sid.empty());

    auto const t0 = steady::now();
    BOOST_TEST(http.put("/v1/kv/itest/force/.lock?release=" + sid).body == "true");
    auto rc = p.wait(10s);
    auto const took = steady::now() - t0;
    BOOST_TEST(rc == 0, join_status(p, rc));  // a loss is a normal end, as with consul lock
    BOOST_TEST(!process_alive(a));
    BOOST_TEST(!process_alive(b));
 // Within the kill grace (5s): SIGTERM to the group did it.
    BOOST_TEST((took < 5s), "took " << std::chrono::duration<double>(took).count() << " s");
    BOOST_TEST(p.err().find("lock lost") != std::string::npos, p.err());
}

BOOST_AUTO_TEST_CASE(session_invalidation_kills_a_child_that_ignores_sigterm) {
    // The shell and its sleeps ignore SIGTERM: SIGKILL after the grace (500ms) ends them.
    tenure_process p(lock_args("itest/inval", "trap '' TERM; sleep 100 & echo a $!; echo ready; wait",
                               {"-kill-grace", "500ms", "-verbose"}));
    pid_t const a = std::stoi(p.expect_line("a ").substr(2));
    p.expect_line("ready");
    std::string const sid = holder("itest/inval/.lock");
    BOOST_TEST_REQUIRE(!sid.empty());
    BOOST_TEST(http.put("/v1/session/destroy/" + sid).body == "true");
    auto rc = p.wait(10s);
    BOOST_TEST(rc == 0, join_status(p, rc));
    BOOST_TEST(!process_alive(a));
    auto const err = p.err();
    BOOST_TEST(err.find("lock lost: session invalidated") != std::string::npos, err);
    BOOST_TEST(err.find("SIGKILL to the child's process group") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(unacknowledged_renewals_stop_the_child_by_the_local_deadline) {
    // The agent is frozen (SIGSTOP): renewals hang, nothing tells tenure lock
    // it lost anything. Its local deadline is at most TTL after the freeze
    // (the last acknowledged renewal was sent before it), and the child, which
    // ignores SIGTERM, must be dead by then: SIGTERM at deadline - kill grace,
    // SIGKILL at the deadline.
    tenure_process p(lock_args("itest/jeopardy", "trap '' TERM; echo pid $$; while :; do sleep 0.05; done",
                               {"-session-ttl", "1s", "-kill-grace", "300ms", "-verbose"}));
    pid_t const child = std::stoi(p.expect_line("pid ").substr(4));
    int const child_fd = open_pidfd(child);
    BOOST_TEST_REQUIRE(child_fd >= 0);
    struct thaw {
        pid_t agent;
        ~thaw() { ::kill(agent, SIGCONT); }
    } thaw_agent{agent.pid()};

    auto const frozen = steady::now();
    ::kill(agent.pid(), SIGSTOP);
    pollfd pfd{child_fd, POLLIN, 0};
    int const r = ::poll(&pfd, 1, 5000);  // readable once the child is gone
    auto const dead = steady::now();
    ::close(child_fd);
    ::kill(agent.pid(), SIGCONT);
    BOOST_TEST_REQUIRE(r == 1, "the child outlived its lease");
    double const after_freeze = std::chrono::duration<double>(dead - frozen).count();
    BOOST_TEST_MESSAGE("child killed " << after_freeze << " s after the agent froze (TTL 1 s, kill grace 0.3 s)");
    BOOST_TEST(after_freeze < 1.0 + 0.25);  // TTL, plus scheduling slack
    BOOST_TEST(p.wait(10s) == 0, p.err());
    auto const err = p.err();
    BOOST_TEST(err.find("lease in jeopardy") != std::string::npos, err);
    BOOST_TEST(err.find("SIGKILL to the child's process group") != std::string::npos, err);
}

BOOST_AUTO_TEST_CASE(leftovers_of_a_finished_child_are_stopped_before_release) {
    tenure_process p(lock_args("itest/leftover", "sleep 100 & echo a $!"));
    pid_t const a = std::stoi(p.expect_line("a ").substr(2));
    auto rc = p.wait(10s);
    BOOST_TEST(rc == 0, join_status(p, rc));
    BOOST_TEST(!process_alive(a));
    BOOST_TEST(holder("itest/leftover/.lock").empty());
}

BOOST_AUTO_TEST_CASE(child_exit_code) {
    tenure_process plain(lock_args("itest/code", "exit 3"));
    BOOST_TEST(plain.wait() == 0, plain.err());
    tenure_process flagged(lock_args("itest/code", "exit 3", {"-child-exit-code"}));
    BOOST_TEST(flagged.wait() == 2, flagged.err());
    tenure_process ok(lock_args("itest/code", "true", {"-child-exit-code"}));
    BOOST_TEST(ok.wait() == 0, ok.err());
    // -shell=false runs the arguments themselves.
    tenure_process direct({"lock", "-http-addr", addr(), "-shell=false", "itest/code", "echo", "a", "b"});
    BOOST_TEST(direct.rest_of_stdout() == "a b\n");
    BOOST_TEST(direct.wait() == 0, direct.err());
}

BOOST_AUTO_TEST_CASE(a_command_that_cannot_be_executed_counts_as_a_failed_child) {
    // Executable, but neither a script with #! nor a binary: exec fails
    // (ENOEXEC) in the supervisor, which tells tenure lock why.
    scratch_dir dir;
    std::string const program = dir.file("not-a-program");
    std::ofstream(program) << "\x01\x02 not a program\n";
    BOOST_TEST_REQUIRE(::chmod(program.c_str(), 0755) == 0);
    tenure_process p({"lock", "-http-addr", addr(), "-shell=false", "-child-exit-code", "itest/noexec", program});
    auto rc = p.wait();
    BOOST_TEST(rc == 2, join_status(p, rc));
    BOOST_TEST(p.err().find("Error starting handler: exec") != std::string::npos, p.err());
    BOOST_TEST(p.err().find(std::strerror(ENOEXEC)) != std::string::npos, p.err());
    BOOST_TEST(holder("itest/noexec/.lock").empty());
}

BOOST_AUTO_TEST_CASE(the_child_inherits_only_stdin_stdout_and_stderr) {
    // Neither end of the supervisor's pipes, nor tenure's sockets, nor what
    // tenure itself inherited. (`; true` keeps the shell from exec'ing ls in
    // its place.)
    tenure_process p(lock_args("itest/fds", "ls /proc/$$/fd; true"));
    BOOST_TEST(p.rest_of_stdout() == "0\n1\n2\n");
    auto rc = p.wait();
    BOOST_TEST(rc == 0, join_status(p, rc));
}

BOOST_AUTO_TEST_CASE(timeout_expiry_exits_one_while_another_holds) {
    tenure_process holder_proc(lock_args("itest/busy", "echo ready; read line", {"-pass-stdin"}), true);
    holder_proc.expect_line("ready");
    tenure_process waiter(lock_args("itest/busy", "echo should not run", {"-timeout", "300ms"}));
    auto rc = waiter.wait(10s);
    BOOST_TEST(rc == 1, join_status(waiter, rc));
    BOOST_TEST(waiter.err().find("Shutdown triggered or timeout during lock acquisition") != std::string::npos,
               waiter.err());
    BOOST_TEST(waiter.rest_of_stdout().empty());
    holder_proc.close_stdin();
    BOOST_TEST(holder_proc.wait() == 0, holder_proc.err());
}

BOOST_AUTO_TEST_CASE(sigint_is_forwarded_to_the_child_and_the_lock_released) {
    tenure_process p(lock_args("itest/sig", "trap 'echo got INT; exit 0' INT; echo ready; while :; do sleep 0.05; done"));
    p.expect_line("ready");
    std::string const sid = holder("itest/sig/.lock");
    p.signal(SIGINT);
    BOOST_TEST(p.expect_line("got") == "got INT");
    BOOST_TEST(p.wait() == 0, p.err());
    BOOST_TEST(holder("itest/sig/.lock").empty());
    BOOST_TEST(json::parse(http.get("/v1/session/info/" + sid).body).as_array().empty());
}

BOOST_AUTO_TEST_CASE(semaphore_admits_n_holders) {
    std::vector<std::string> n2 = {"-n", "2", "-pass-stdin"};
    tenure_process a(lock_args("itest/sem", "echo ready; read line", n2), true);
    tenure_process b(lock_args("itest/sem", "echo ready; read line", n2), true);
    a.expect_line("ready");
    b.expect_line("ready");  // both hold at once
    tenure_process c(lock_args("itest/sem", "echo should not run", {"-n", "2", "-timeout", "300ms"}));
    BOOST_TEST(c.wait(10s) == 1, c.err());
    BOOST_TEST(c.rest_of_stdout().empty());
    a.close_stdin();
    b.close_stdin();
    BOOST_TEST(a.wait() == 0, a.err());
    BOOST_TEST(b.wait() == 0, b.err());
}

BOOST_AUTO_TEST_CASE(bad_usage_exits_one) {
    std::vector<std::vector<std::string>> cases = {
        {"lock"},
        {"lock", "-http-addr", addr(), "itest/usage"},
        {"lock", "-http-addr", addr(), "-n", "0", "itest/usage", "true"},
        {"lock", "-http-addr", addr(), "-no-such-flag", "itest/usage", "true"},
        {"lock", "-http-addr", addr(), "-timeout", "soon", "itest/usage", "true"},
        {"lock", "-http-addr", addr(), "-timeout=-1s", "itest/usage", "true"},
        {"leader"},
        {"leader", "-http-addr", addr(), "a", "b"},
    };
    for (auto const& args : cases) {
        tenure_process p(args);
        auto rc = p.wait();
        BOOST_TEST(rc == 1, args.size() << " args; " << join_status(p, rc));
        BOOST_TEST(p.rest_of_stdout().empty());
    }
    // An unreachable agent is an error too, before anything runs.
    tenure_process unreachable({"lock", "-http-addr", "127.0.0.1:1", "itest/usage", "echo ran"});
    BOOST_TEST(unreachable.wait() == 1);
    BOOST_TEST(unreachable.rest_of_stdout().empty());
    BOOST_TEST(unreachable.err().find("Error querying Consul agent") != std::string::npos, unreachable.err());
}

BOOST_AUTO_TEST_CASE(help_shows_the_usage) {
    tenure_process top({"--help"});
    auto const top_out = top.rest_of_stdout();
    BOOST_TEST(top.wait() == 0);
    BOOST_TEST(top_out.find("--version") != std::string::npos, top_out);
    BOOST_TEST(top_out.find("tenure lock [options] <prefix> <child...>") != std::string::npos, top_out);
    BOOST_TEST(top_out.find("tenure leader [-watch] [options] <key>") != std::string::npos, top_out);
    BOOST_TEST(top_out.find("__supervise") == std::string::npos, top_out);  // tenure lock's internal helper
    tenure_process lock_help({"help", "lock"});
    auto const lock_out = lock_help.rest_of_stdout();
    BOOST_TEST(lock_help.wait() == 0);
    for (char const* flag : {"-n=", "-name=", "-pass-stdin", "-shell", "-timeout=", "-monitor-retry=", "-verbose",
                             "-child-exit-code", "-http-addr=", "-token=", "-session-ttl=", "-lock-delay=",
                             "-kill-grace="})
        BOOST_TEST(lock_out.find(flag) != std::string::npos, flag);
    BOOST_TEST(lock_out.find("-etcd-endpoints=") != std::string::npos, lock_out);
    tenure_process leader_help({"leader", "-help"});
    auto const leader_out = leader_help.rest_of_stdout();
    BOOST_TEST(leader_out.find("-watch") != std::string::npos);
    BOOST_TEST(leader_out.find("-etcd-endpoints=") != std::string::npos, leader_out);
    BOOST_TEST(leader_help.wait() == 0);
    // Every flag of lock and leader is listed with its default: in the
    // "...Options:" sections each option paragraph ("  -flag..." up to the
    // next blank line) says "Default:".
    for (auto const* out : {&lock_out, &leader_out}) {
        std::istringstream in(*out);
        std::string line, paragraph;
        bool in_options = false, in_option = false;
        int options_seen = 0;
        auto check = [&] {
            if (in_option) BOOST_TEST(paragraph.find("Default:") != std::string::npos, "no default in:\n" << paragraph);
        };
        while (std::getline(in, line)) {
            if (line.size() >= 8 && line.compare(line.size() - 8, 8, "Options:") == 0) {
                in_options = true;
                continue;
            }
            if (in_options && line.rfind("  -", 0) == 0) {
                ++options_seen;
                check();
                in_option = true;
                paragraph = line + "\n";
            } else if (line.empty()) {
                check();
                in_option = false;
            } else if (in_option) {
                paragraph += line + "\n";
            }
        }
        check();
        BOOST_TEST(options_seen >= 5);
    }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(cli_leader, cli_fixture)

BOOST_AUTO_TEST_CASE(prints_the_holder_or_no_leader) {
    {
        tenure_process none({"leader", "-http-addr", addr(), "itest/who/.lock"});
        BOOST_TEST(none.rest_of_stdout() == "no leader\n");
        BOOST_TEST(none.wait() == 0, none.err());
    }
    tenure_process holder_proc(lock_args("itest/who", "echo ready; read line", {"-pass-stdin"}), true);
    holder_proc.expect_line("ready");
    auto k = key("itest/who/.lock").as_object();
    tenure_process who({"leader", "-http-addr", addr(), "/itest/who/.lock"});
    BOOST_TEST(who.rest_of_stdout() == "leader value=\"\" session=" + std::string(k.at("Session").as_string()) +
                                           " lock_index=" +
                                           std::to_string(k.at("LockIndex").to_number<std::uint64_t>()) + "\n");
    BOOST_TEST(who.wait() == 0, who.err());
    holder_proc.close_stdin();
    BOOST_TEST(holder_proc.wait() == 0);
}

BOOST_AUTO_TEST_CASE(watch_prints_each_change) {
    tenure_process watch({"leader", "-watch", "-http-addr", addr(), "itest/watch/.lock"});
    BOOST_TEST(text(watch.read_line()) == "no leader");

    std::string last_session;
    for (int term = 1; term <= 2; ++term) {
        tenure_process holder_proc(lock_args("itest/watch", "echo ready; read line", {"-pass-stdin"}), true);
        holder_proc.expect_line("ready");
        auto line = watch.read_line();
        BOOST_TEST_REQUIRE(line.has_value(), watch.err());
        auto f = fields(*line);
        BOOST_TEST(line->rfind("leader value=\"\" ", 0) == 0u, *line);
        BOOST_TEST(f["session"] == holder("itest/watch/.lock"));
        BOOST_TEST(f["session"] != last_session);
        BOOST_TEST(f["lock_index"] == std::to_string(term));
        last_session = f["session"];
        holder_proc.close_stdin();  // the child ends, the lock is released
        BOOST_TEST(text(watch.read_line()) == "no leader");
        BOOST_TEST(holder_proc.wait() == 0);
    }
    watch.signal(SIGINT);
    BOOST_TEST(watch.wait() == 0, watch.err());
}

BOOST_AUTO_TEST_SUITE_END()

// Switchover and priorities through the command line (issue #21).
namespace cli_transfer_itest {

// Blocks (blocking queries on <key>.candidates/) until `n` live candidates
// are registered; their sessions' ids, best first is not implied.
std::vector<std::string> await_candidates(http_client& http, std::string const& key, std::size_t n) {
    std::string index = "0";
    for (int i = 0; i < 200; ++i) {
        auto r = http.get("/v1/kv/" + key + ".candidates/?recurse&index=" + index + "&wait=10s");
        std::vector<std::string> live;
        json::value const body = r.status == 200 ? json::parse(r.body) : json::value(json::array{});
        if (r.status == 200)
            for (auto const& e : body.as_array()) {
                // `.max`, locked by the candidate it names, is no entry.
                auto const& k = e.as_object().at("Key").as_string();
                if (k.ends_with(".candidates/.max")) continue;
                if (auto const* s = e.as_object().if_contains("Session"); s && s->is_string())
                    live.emplace_back(s->as_string());
            }
        if (live.size() == n) return live;
        index = r.header("X-Consul-Index").value_or("0");
    }
    throw std::runtime_error("the registry never had " + std::to_string(n) + " candidates");
}

}  // namespace cli_transfer_itest

BOOST_FIXTURE_TEST_SUITE(cli_transfer, cli_fixture)

BOOST_AUTO_TEST_CASE(transfer_to_z_makes_z_the_holder_stops_x_and_y_keeps_waiting) {
    using cli_transfer_itest::await_candidates;
    std::string const lk = "itest/switch/.lock";
    tenure_process x(lock_args("itest/switch", "echo x runs; sleep 100", {"-name", "x"}));
    BOOST_TEST(x.expect_line("x runs") == "x runs");
    std::string const x_session = holder(lk);
    tenure_process y(lock_args("itest/switch", "echo y runs; sleep 100", {"-name", "y"}));
    await_candidates(http, lk, 1);
    tenure_process z(lock_args("itest/switch", "echo z runs; sleep 100", {"-name", "z"}));
    await_candidates(http, lk, 2);
    auto const before = key(lk).as_object().at("LockIndex").to_number<std::uint64_t>();

    {
        tenure_process list({"leader", "-candidates", "-http-addr", addr(), lk});
        auto out = list.rest_of_stdout();
        BOOST_TEST(list.wait() == 0, list.err());
        auto first = out.find("name=\"y\"");
        auto second = out.find("name=\"z\"");
        BOOST_TEST(first != std::string::npos, out);
        BOOST_TEST(second != std::string::npos, out);
        BOOST_TEST(first < second, "equal priorities: the longest waiting first\n" << out);
    }

    auto const asked = steady::now();
    tenure_process t({"transfer", "-http-addr", addr(), "-to", "z", "itest/switch"});
    auto line = t.expect_line("transferred to ");
    int rc = t.wait();
    BOOST_TEST(rc == 0, join_status(t, rc));
    BOOST_TEST(z.expect_line("z runs") == "z runs");
    std::cout << "switchover: z runs " << std::chrono::duration<double, std::milli>(steady::now() - asked).count()
              << " ms after `tenure transfer` started\n";
    auto f = fields(line);
    BOOST_TEST(f["name"] == "\"z\"");
    BOOST_TEST(f["session"] == holder(lk));
    BOOST_TEST(f["lock_index"] == std::to_string(before + 1));
    // x's child was stopped as on a lock loss, and x exited 0.
    rc = x.wait();
    BOOST_TEST(rc == 0, join_status(x, rc));
    BOOST_TEST(x.err().find("transferred") != std::string::npos, x.err());
    BOOST_TEST(x_session != holder(lk));
    // y keeps waiting.
    BOOST_TEST(process_alive(y.pid()));
    auto waiting = await_candidates(http, lk, 1);
    BOOST_TEST(waiting.front() != holder(lk));
    BOOST_TEST(http.get("/v1/kv/" + lk + ".transfer").status == 404u);  // the request was consumed
}

BOOST_AUTO_TEST_CASE(bad_targets_and_deaf_holders_exit_one_and_change_nothing) {
    using cli_transfer_itest::await_candidates;
    std::string const lk = "itest/deaf/.lock";
    tenure_process x(lock_args("itest/deaf", "echo x runs; sleep 100", {"-name", "x"}));
    x.expect_line("x runs");
    tenure_process y(lock_args("itest/deaf", "echo y runs; sleep 100", {"-name", "y"}));
    await_candidates(http, lk, 1);
    auto const before = key(lk);

    tenure_process unknown({"transfer", "-http-addr", addr(), "-to", "nobody", "itest/deaf"});
    int rc = unknown.wait();
    BOOST_TEST(rc == 1, join_status(unknown, rc));
    BOOST_TEST(unknown.err().find("no waiting candidate named \"nobody\"") != std::string::npos, unknown.err());
    BOOST_TEST(key(lk) == before);
    BOOST_TEST(process_alive(x.pid()));

    tenure_process nobody_holds({"transfer", "-http-addr", addr(), "itest/nothing-here"});
    rc = nobody_holds.wait();
    BOOST_TEST(rc == 1, join_status(nobody_holds, rc));
    BOOST_TEST(nobody_holds.err().find("nobody holds") != std::string::npos, nobody_holds.err());

    // A holder that does not take requests: a raw api.Lock-style session.
    std::string const other = "itest/deaf2/.lock";
    auto sid = std::string(json::parse(http.put("/v1/session/create", R"({"TTL":"10s","LockDelay":"0s"})").body)
                               .as_object().at("ID").as_string());
    BOOST_TEST(http.put("/v1/kv/" + other + "?acquire=" + sid + "&flags=3304740253564472344").body == "true");
    tenure_process w(lock_args("itest/deaf2", "echo w runs; sleep 100", {"-name", "w"}));
    await_candidates(http, other, 1);
    auto const other_before = key(other);
    tenure_process deaf({"transfer", "-http-addr", addr(), "-timeout", "500ms", "itest/deaf2"});
    rc = deaf.wait();
    BOOST_TEST(rc == 1, join_status(deaf, rc));
    BOOST_TEST(deaf.err().find("does not honour transfer requests") != std::string::npos, deaf.err());
    BOOST_TEST(key(other) == other_before);
    BOOST_TEST(http.get("/v1/kv/" + other + ".transfer").status == 404u);  // withdrawn
    BOOST_TEST(process_alive(w.pid()));
    http.put("/v1/session/destroy/" + sid);
}

BOOST_AUTO_TEST_CASE(when_h_ends_p_with_priority_5_runs_before_l_with_priority_1) {
    using cli_transfer_itest::await_candidates;
    std::string const lk = "itest/prio/.lock";
    tenure_process h(lock_args("itest/prio", "echo h runs; read line", {"-pass-stdin", "-name", "h"}), true);
    h.expect_line("h runs");
    tenure_process l(lock_args("itest/prio", "echo l runs; read line", {"-pass-stdin", "-name", "l", "-priority", "1"}),
                     true);
    await_candidates(http, lk, 1);
    tenure_process p(lock_args("itest/prio", "echo p runs; read line", {"-pass-stdin", "-name", "p", "-priority", "5"}),
                     true);
    await_candidates(http, lk, 2);
    h.close_stdin();  // H ends: its release hands over to the best candidate
    BOOST_TEST(h.wait() == 0, h.err());
    BOOST_TEST(p.expect_line("p runs") == "p runs");
    BOOST_TEST(process_alive(l.pid()));
    await_candidates(http, lk, 1);  // L still waits
    p.close_stdin();
    BOOST_TEST(p.wait() == 0, p.err());
    BOOST_TEST(l.expect_line("l runs") == "l runs");
    l.close_stdin();
    BOOST_TEST(l.wait() == 0, l.err());
}

BOOST_AUTO_TEST_CASE(a_sigkilled_high_priority_candidate_blocks_nobody_beyond_the_grace) {
    using cli_transfer_itest::await_candidates;
    std::string const lk = "itest/stuck/.lock";
    // The holder: a session taken and destroyed over HTTP (an invalidation).
    auto sid = std::string(json::parse(http.put("/v1/session/create", R"({"TTL":"10s","LockDelay":"0s"})").body)
                               .as_object().at("ID").as_string());
    BOOST_TEST(http.put("/v1/kv/" + lk + "?acquire=" + sid + "&flags=3304740253564472344").body == "true");
    // P (priority 9) waits with a long session, then is SIGKILLed: its entry
    // stays live until its session lapses, ~60 s later.
    tenure_process p(lock_args("itest/stuck", "echo p runs; sleep 100", {"-name", "p", "-priority", "9",
                                                                           "-session-ttl", "30s"}));
    auto const p_session = await_candidates(http, lk, 1).front();
    p.signal(SIGKILL);
    BOOST_TEST(p.wait() == 128 + SIGKILL);
    tenure_process l(lock_args("itest/stuck", "echo l runs; sleep 100", {"-name", "l", "-priority", "1"}));
    await_candidates(http, lk, 2);
    auto const freed = steady::now();
    http.put("/v1/session/destroy/" + sid);
    BOOST_TEST(l.expect_line("l runs", 20s) == "l runs");
    std::cout << "stuck candidate: l took the key " << std::chrono::duration<double, std::milli>(steady::now() - freed).count()
              << " ms after the holder's invalidation (priority_grace 2s)\n";
    // P's session is still alive: the grace ended the wait, not P's end.
    BOOST_TEST(json::parse(http.get("/v1/session/info/" + p_session).body).as_array().size() == 1u);
    http.put("/v1/session/destroy/" + p_session);
}

BOOST_AUTO_TEST_SUITE_END()

// The issue's acceptance tests: SIGKILL to `tenure lock`, on the embedded agent.
BOOST_FIXTURE_TEST_SUITE(cli_lock_kill9, cli_fixture)

BOOST_AUTO_TEST_CASE(sigkill_of_tenure_lock_kills_its_child_and_grandchild_at_once) {
    scratch_dir dir;
    kill9_kills_the_child_and_grandchild(lock_args("itest/kill9", child_with_grandchild(dir.file("pids"))), dir);
}

BOOST_AUTO_TEST_CASE(contenders_never_overlap_across_20_sigkills_of_the_holder) {
    // Three contenders; TTL 400ms, so the agent frees the key of a killed
    // holder within 2 x TTL, then lock-delay 50ms.
    auto const args = [&](std::string const& script) {
        return lock_args("itest/kill9-loop", script, {"-session-ttl", "400ms", "-lock-delay", "50ms"});
    };
    auto const took = kill9_under_contention(args, 20, 3);
    BOOST_TEST_MESSAGE("agent: SIGKILL of the holder to its child and grandchild gone: " << summary(took));
    for (double ms : took) BOOST_TEST(ms < kill9_bound_ms);
}

BOOST_AUTO_TEST_CASE(a_killed_supervisor_takes_the_child_along_and_the_lock_is_released) {
    scratch_dir dir;
    tenure_process p(lock_args("itest/supervisor", child_with_grandchild(dir.file("pids")), {"-child-exit-code"}));
    auto const pids = await_pids(dir.file("pids"));
    BOOST_TEST_REQUIRE(pids.size() == 3u, "the child did not start; stderr:\n" << p.err());
    std::ifstream cmdline("/proc/" + std::to_string(pids[2]) + "/cmdline");
    std::string argv0, argv1;
    std::getline(cmdline, argv0, '\0');
    std::getline(cmdline, argv1, '\0');
    BOOST_TEST(argv1 == "__supervise", "the child's parent is " << argv0 << ' ' << argv1);
    BOOST_TEST_REQUIRE(!holder("itest/supervisor/.lock").empty());

    ::kill(pids[2], SIGKILL);
    auto rc = p.wait(10s);
    // The child's end, as if it was killed by SIGKILL: 2 with -child-exit-code (0 without).
    BOOST_TEST(rc == 2, join_status(p, rc));
    BOOST_TEST(!process_alive(pids[0]));
    BOOST_TEST(!process_alive(pids[1]));
    BOOST_TEST(p.err().find("the supervisor (pid " + std::to_string(pids[2]) + ") killed by SIGKILL") !=
                   std::string::npos,
               p.err());
    // Released, not left to lapse: the next holder runs at once.
    BOOST_TEST(holder("itest/supervisor/.lock").empty());
    tenure_process next(lock_args("itest/supervisor", "echo next", {"-timeout", "1s"}));
    BOOST_TEST(next.rest_of_stdout() == "next\n");
    BOOST_TEST(next.wait() == 0, next.err());
}

BOOST_AUTO_TEST_SUITE_END()

// ---- the CLI on etcd ---------------------------------------------------------------------

namespace {

// One request to etcd with tenure's client, synchronously.
template <class T>
T etcd_call(std::string const& url, std::function<boost::asio::awaitable<T>(tenure::etcd::client&)> f) {
    boost::asio::io_context io{1};
    tenure::etcd::client_config cfg;
    cfg.endpoints = {url};
    tenure::etcd::client c(io.get_executor(), cfg);
    auto fut = boost::asio::co_spawn(io, f(c), boost::asio::use_future);
    io.run_for(10s);
    return fut.get();
}

// The oldest key under `<name>/` (the election's leader), if any.
std::optional<tenure::etcd::key_value> etcd_leader(std::string const& url, std::string const& name) {
    return etcd_call<std::optional<tenure::etcd::key_value>>(
        url, [name](tenure::etcd::client& c) -> boost::asio::awaitable<std::optional<tenure::etcd::key_value>> {
            std::string key = name + "/";
            std::string end = tenure::etcd::prefix_end(key);
            tenure::etcd::range_options o;
            o.limit = 1;
            o.order = tenure::etcd::sort_order::ascend;
            o.target = tenure::etcd::sort_target::create;
            auto r = co_await c.range(key, end, o);
            if (r.kvs.empty()) co_return std::nullopt;
            co_return r.kvs.front();
        });
}

// How many keys there are under `prefix`.
std::int64_t etcd_keys_under(std::string const& url, std::string const& prefix) {
    return etcd_call<std::int64_t>(url, [prefix](tenure::etcd::client& c) -> boost::asio::awaitable<std::int64_t> {
        tenure::etcd::range_options o;
        o.count_only = true;
        auto r = co_await c.range(prefix, tenure::etcd::prefix_end(prefix), o);
        co_return r.count;
    });
}

std::int64_t etcd_lease_ttl(std::string const& url, std::int64_t lease) {
    return etcd_call<std::int64_t>(url, [lease](tenure::etcd::client& c) -> boost::asio::awaitable<std::int64_t> {
        co_return co_await c.lease_time_to_live(lease);
    });
}

struct cli_etcd_fixture {
    etcd_process etcd;
    std::string url() const { return etcd.client_url(); }

    std::vector<std::string> lock_args(std::string const& name, std::string const& script,
                                       std::vector<std::string> extra = {}) const {
        std::vector<std::string> a = {"lock", "-etcd-endpoints", url(), "-session-ttl", "2s", "-kill-grace", "2s"};
        a.insert(a.end(), extra.begin(), extra.end());
        a.push_back(name);
        a.push_back(script);
        return a;
    }
};

// Sets an environment variable for the processes started in a scope.
struct scoped_env {
    std::string name;
    scoped_env(std::string n, std::string const& value) : name(std::move(n)) { ::setenv(name.c_str(), value.c_str(), 1); }
    ~scoped_env() { ::unsetenv(name.c_str()); }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cli_etcd, cli_etcd_fixture)

BOOST_AUTO_TEST_CASE(lock_runs_the_child_with_the_same_environment) {
    tenure_process p(
        lock_args("itest-env",
                  "echo held=$CONSUL_LOCK_HELD key=$TENURE_LOCK_KEY session=$TENURE_SESSION token=$TENURE_FENCING_TOKEN; "
                  "read line; echo got $line",
                  {"-pass-stdin"}),
        true);
    auto f = fields(p.expect_line("held="));
    BOOST_TEST(f["held"] == "true");
    BOOST_TEST(f["key"] == "itest-env/" + f["session"]);
    // etcd says the same: the oldest key of the election is ours, on our lease.
    auto leader = etcd_leader(url(), "itest-env");
    BOOST_TEST_REQUIRE(leader.has_value());
    BOOST_TEST(leader->key == f["key"]);
    BOOST_TEST(std::to_string(leader->create_revision) == f["token"]);
    auto const lease = static_cast<std::int64_t>(std::stoull(f["session"], nullptr, 16));
    BOOST_TEST(leader->lease == lease);

    // tenure leader on etcd shows it.
    {
        tenure_process who({"leader", "-etcd-endpoints", url(), "itest-env"});
        BOOST_TEST(who.rest_of_stdout() == "leader value=\"\" session=" + f["session"] + " lock_index=" + f["token"] + "\n");
        BOOST_TEST(who.wait() == 0, who.err());
    }

    p.write_stdin("bye\n");
    BOOST_TEST(p.expect_line("got") == "got bye");
    auto rc = p.wait();
    BOOST_TEST(rc == 0, join_status(p, rc));
    // Resigned, then the lease revoked.
    BOOST_TEST(!etcd_leader(url(), "itest-env").has_value());
    BOOST_TEST(etcd_lease_ttl(url(), lease) == -1);

    // The next holder (ETCDCTL_ENDPOINTS instead of the flag) has a larger token.
    scoped_env env("ETCDCTL_ENDPOINTS", url());
    tenure_process q({"lock", "-session-ttl", "2s", "itest-env", "echo token=$TENURE_FENCING_TOKEN"});
    auto g = fields(q.expect_line("token="));
    BOOST_TEST(std::stoull(g["token"]) > std::stoull(f["token"]));
    BOOST_TEST(q.wait() == 0, q.err());
}

BOOST_AUTO_TEST_CASE(contenders_take_turns_and_leader_watch_follows) {
    tenure_process watch({"leader", "-watch", "-etcd-endpoints", url(), "itest-turns"});
    BOOST_TEST(text(watch.read_line()) == "no leader");

    tenure_process a(lock_args("itest-turns", "echo a-ready; read line", {"-pass-stdin"}), true);
    a.expect_line("a-ready");
    auto first = watch.read_line();
    BOOST_TEST_REQUIRE(first.has_value(), watch.err());
    auto fa = fields(*first);
    tenure_process b(lock_args("itest-turns", "echo b-ready; read line", {"-pass-stdin"}), true);
    // Absence: b does not run while a holds the lock.
    BOOST_TEST(!b.read_line(500ms).has_value());
    a.close_stdin();
    BOOST_TEST(a.wait() == 0, a.err());
    BOOST_TEST(b.expect_line("b-ready") == "b-ready");
    // The watch saw the handover (possibly with "no leader" in between).
    auto next = watch.read_line();
    if (next && *next == "no leader") next = watch.read_line();
    BOOST_TEST_REQUIRE(next.has_value(), watch.err());
    auto fb = fields(*next);
    BOOST_TEST(fb["session"] != fa["session"]);
    BOOST_TEST(std::stoull(fb["lock_index"]) > std::stoull(fa["lock_index"]));
    b.close_stdin();
    BOOST_TEST(b.wait() == 0, b.err());
    BOOST_TEST(text(watch.read_line()) == "no leader");
    watch.signal(SIGINT);
    BOOST_TEST(watch.wait() == 0, watch.err());
}

BOOST_AUTO_TEST_CASE(bad_usage_says_what_is_wrong) {
    struct bad {
        std::vector<std::string> args;
        std::string message;
    };
    std::vector<bad> cases = {
        {{"lock", "-etcd-endpoints", url(), "-n", "0", "itest-usage", "true"}, "-n must be >= 1 (got 0)"},
        {{"lock", "-etcd-endpoints", url(), "-http-addr", "127.0.0.1:1", "itest-usage", "true"},
         "-http-addr (Consul) and -etcd-endpoints (etcd) exclude each other"},
        {{"lock", "-etcd-endpoints", url(), "-token", "x", "itest-usage", "true"}, "-token is a Consul option"},
        {{"lock", "-etcd-endpoints", "", "itest-usage", "true"}, "-etcd-endpoints needs at least one URL"},
        {{"lock", "-etcd-endpoints", url(), "/", "true"}, "the prefix names the election and must not be empty"},
        {{"lock", "-etcd-endpoints", url(), "-n", "2", "/", "true"}, "the prefix names the semaphore and must not be empty"},
        {{"lock", "-etcd-endpoints", url(), "itest-usage"}, "a child command must be specified after the prefix"},
        {{"lock", "-session-ttl", "0s", "-etcd-endpoints", url(), "itest-usage", "true"}, "-session-ttl must be > 0 (got 0s)"},
        {{"leader", "-etcd-endpoints", url(), "a", "b"}, "exactly one key must be specified (got 2)"},
        {{"nosuchcommand"}, "unknown command \"nosuchcommand\""},
    };
    for (auto const& c : cases) {
        tenure_process p(c.args);
        auto rc = p.wait();
        BOOST_TEST(rc == 1, c.message << ": " << join_status(p, rc));
        BOOST_TEST(p.rest_of_stdout().empty());
        BOOST_TEST(p.err().find(c.message) != std::string::npos, c.message << " not in:\n" << p.err());
    }
    // An unreachable etcd is an error before anything runs.
    tenure_process unreachable({"lock", "-etcd-endpoints", "http://127.0.0.1:1", "itest-usage", "echo ran"});
    BOOST_TEST(unreachable.wait() == 1);
    BOOST_TEST(unreachable.rest_of_stdout().empty());
    BOOST_TEST(unreachable.err().find("Lock setup failed") != std::string::npos, unreachable.err());
}

BOOST_AUTO_TEST_SUITE_END()

// The issue's acceptance tests on etcd: the same child runner.
BOOST_FIXTURE_TEST_SUITE(cli_etcd_kill9, cli_etcd_fixture)

BOOST_AUTO_TEST_CASE(sigkill_of_tenure_lock_kills_its_child_and_grandchild_at_once) {
    scratch_dir dir;
    kill9_kills_the_child_and_grandchild(lock_args("itest-kill9", child_with_grandchild(dir.file("pids"))), dir);
}

BOOST_AUTO_TEST_CASE(contenders_never_overlap_across_20_sigkills_of_the_holder) {
    // A lease of 1 s (etcd's minimum here) frees a killed holder's key.
    auto const args = [&](std::string const& script) {
        return lock_args("itest-kill9-loop", script, {"-session-ttl", "1s"});
    };
    auto const took = kill9_under_contention(args, 20, 3);
    BOOST_TEST_MESSAGE("etcd: SIGKILL of the holder to its child and grandchild gone: " << summary(took));
    for (double ms : took) BOOST_TEST(ms < kill9_bound_ms);
}

BOOST_AUTO_TEST_SUITE_END()

// `tenure lock -n N` on etcd: tenure::semaphore with contender keys
// <prefix>/<lease hex>, the N oldest holding.
BOOST_FIXTURE_TEST_SUITE(cli_etcd_semaphore, cli_etcd_fixture)

BOOST_AUTO_TEST_CASE(lock_n_2_runs_six_children_never_more_than_two_at_once) {
    scratch_dir dir;
    std::string const log = dir.file("stamps");
    std::vector<std::unique_ptr<tenure_process>> procs;
    for (int i = 0; i < 6; ++i) {
        std::string id = std::to_string(i);
        std::string script = "echo start " + id + " $(date +%s%N) $TENURE_SESSION $TENURE_FENCING_TOKEN $TENURE_LOCK_KEY >> " +
                             log + "; sleep 0.4; echo end " + id + " $(date +%s%N) - - - >> " + log;
        procs.push_back(std::make_unique<tenure_process>(lock_args("itest-sem", script, {"-n", "2"})));
    }
    for (auto& p : procs) {
        auto rc = p->wait(30s);
        BOOST_TEST(rc == 0, join_status(*p, rc));
    }
    struct stamp {
        std::string kind, id;
        long long ns = 0;
        std::string session, token, key;
    };
    std::vector<stamp> stamps;
    {
        std::ifstream in(log);
        stamp st;
        while (in >> st.kind >> st.id >> st.ns >> st.session >> st.token >> st.key) stamps.push_back(st);
    }
    BOOST_TEST_REQUIRE(stamps.size() == 12u);
    // Each child ran once, with the contender key and its create revision.
    std::set<std::string> started, ended, tokens;
    for (auto const& st : stamps) {
        if (st.kind == "end") {
            ended.insert(st.id);
            continue;
        }
        started.insert(st.id);
        tokens.insert(st.token);
        BOOST_TEST(st.key == "itest-sem/" + st.session);
        BOOST_TEST(std::stoll(st.token) > 0);
    }
    BOOST_TEST(started.size() == 6u);
    BOOST_TEST(ended.size() == 6u);
    BOOST_TEST(tokens.size() == 6u);
    // Sweep the stamps in time order (an end before a start at the same
    // instant): never more than two children at once.
    std::sort(stamps.begin(), stamps.end(), [](stamp const& a, stamp const& b) {
        if (a.ns != b.ns) return a.ns < b.ns;
        return a.kind == "end" && b.kind != "end";
    });
    int running = 0, most = 0;
    for (auto const& st : stamps) {
        running += st.kind == "start" ? 1 : -1;
        most = std::max(most, running);
        BOOST_TEST(running <= 2);
        BOOST_TEST(running >= 0);
    }
    BOOST_TEST_MESSAGE("most children at once: " << most);
    BOOST_TEST(most >= 1);
    // Every contender key is gone with its holder.
    BOOST_TEST(etcd_keys_under(url(), "itest-sem/") == 0);
}

BOOST_AUTO_TEST_CASE(a_sigkilled_holders_permit_returns_after_its_lease) {
    // Two holders of -n 2 and a waiter; one holder's `tenure lock` is
    // SIGKILLed, so nothing releases its contender key: the permit comes
    // back when etcd expires the lease, and the waiter's child starts then,
    // never beside the killed holder's (which dies with its supervisor).
    scratch_dir dir;
    auto const args = [&](int id) {
        std::string const pids = dir.file(std::to_string(id) + ".pids");
        return lock_args("itest-sem-kill9", "echo $$ > " + pids + ".tmp && mv " + pids + ".tmp " + pids + "; sleep 300",
                         {"-n", "2", "-session-ttl", "1s"});
    };
    std::vector<std::unique_ptr<tenure_process>> procs;
    for (int i = 0; i < 2; ++i) procs.push_back(std::make_unique<tenure_process>(args(i)));
    std::vector<pid_t> children;
    for (int i = 0; i < 2; ++i) {
        auto pids = await_pids(dir.file(std::to_string(i) + ".pids"));
        BOOST_TEST_REQUIRE(pids.size() == 1u, "holder " << i << " did not start; stderr:\n" << procs[i]->err());
        children.push_back(pids[0]);
    }
    procs.push_back(std::make_unique<tenure_process>(args(2)));
    // The waiter has its contender key behind the two holders' before the kill.
    bool queued = false;
    for (auto const deadline = steady::now() + 10s; !queued && steady::now() < deadline; ::usleep(2000)) {
        queued = etcd_keys_under(url(), "itest-sem-kill9/") == 3;
    }
    BOOST_TEST_REQUIRE(queued, "the waiter wrote no contender key; stderr:\n" << procs[2]->err());
    BOOST_TEST_REQUIRE(!std::filesystem::exists(dir.file("2.pids")), "a third child ran beside two holders");

    auto const t0 = steady::now();
    procs[0]->signal(SIGKILL);
    BOOST_TEST(procs[0]->wait() == 128 + SIGKILL);
    auto const gone = await_gone({children[0]}, t0);
    BOOST_TEST_REQUIRE(gone.has_value(), "the killed holder's child outlived it");
    auto const pids = await_pids(dir.file("2.pids"), 15s);
    auto const took = steady::now() - t0;
    BOOST_TEST_REQUIRE(pids.size() == 1u, "the permit did not come back; stderr:\n" << procs[2]->err());
    BOOST_TEST_MESSAGE("SIGKILL of a holder to the waiter's child running: " << to_ms(took) << " ms (lease 1 s)");
    // The other holder kept its permit throughout.
    BOOST_TEST(process_alive(children[1]));
    BOOST_TEST(*gone < took);
}

BOOST_AUTO_TEST_SUITE_END()
