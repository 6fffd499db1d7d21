#!/usr/bin/env python3
"""Where a bench process's CPU samples go, by kind of work (issue 23).

Reads the output of
    perf script -i perf.data -F comm,ip,sym > stacks.txt
(a recording with --call-graph dwarf) and gives each sample to the innermost
frame of its stack that matches a category (leaf first). Template arguments
are stripped from the names before matching. "Wrapper" categories (Asio's
executor type erasure, cancellation slots, coroutine frames) only count at the
leaf or one frame above it: they sit in the caller chain of every handler.

    bench/profile_categories.py stacks.txt [more.txt ...]

Prints the share of every category over all samples, then over the samples
whose leaf is in user space, then the callers of the allocation samples.
"""
import collections
import re
import sys

CATEGORIES = [  # (name, pattern), matched in this order at each frame
    ("sleep/wake: the scheduler (finish_task_switch, __schedule)", r"finish_task_switch|__schedule\b|schedule_hrtimeout"),
    ("epoll_wait (the reactor)", r"epoll_wait"),
    ("socket writes (sendmsg; the loopback delivery to the agent)", r"__libc_sendmsg|sendmsg|__libc_write\b|tcp_sendmsg"),
    ("socket reads (recvmsg)", r"__libc_recvmsg|recvmsg|tcp_recvmsg|__libc_read\b"),
    ("recv(MSG_PEEK) probe of an idle connection", r"__libc_recv\b|idle_connection_dead"),
    ("allocation: operator new/delete, malloc/free",
     r"bench::alloc_detail|^operator new|^operator delete|^malloc$|cfree|_int_free|_int_malloc|memalign|^free$|"
     r"libc_free|libc_malloc|malloc_consolidate|tcache|unlink_chunk|sysmalloc|malloc@plt|free@plt"),
    ("boost::json (parse, build, serialize)", r"boost::json"),
    ("HTTP answer parsing (Beast basic_parser)", r"basic_parser"),
    ("request formatting (http_transport::send)", r"http_transport::send"),
    ("watch hub", r"watch_hub"),
    ("timers (steady_timer, timer queue)", r"timer_queue|basic_waitable_timer|deadline_timer"),
    ("clock reads (steady_clock::now)", r"steady_clock::now|clock_gettime"),
]
WRAPPERS = [
    ("Asio executor type erasure (any_executor_base)", r"any_executor_base|any_io_executor::"),
    ("cancellation slots / signals", r"cancellation_(slot|signal|state)|cancellation_handler"),
    ("coroutine frames (awaitable_thread, awaitable_frame)", r"awaitable_thread|awaitable_frame|co_spawn|~awaitable"),
]
ALLOC = re.compile(CATEGORIES[5][1])


def strip_templates(name):
    out, depth = [], 0
    for ch in name:
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            out.append(ch)
    return "".join(out)


def read_samples(paths):
    """[(leaf_in_kernel, [frame names, leaf first])]"""
    samples = []
    for path in paths:
        frames, kernel = None, False
        for line in open(path, errors="replace"):
            if not line.strip():
                continue
            if not line[0].isspace():  # "comm" starts a sample
                if frames:
                    samples.append((kernel, frames))
                frames = []
                continue
            ip, _, sym = line.strip().partition(" ")
            if not frames:
                kernel = ip.startswith("ffffffff")
            frames.append(strip_templates(sym))
        if frames:
            samples.append((kernel, frames))
    return samples


def classify(frames, user_only=False):
    cats = [c for c in CATEGORIES if not (user_only and c[0].startswith(("sleep", "epoll", "socket")))]
    for i, f in enumerate(frames):
        for name, pat in cats:
            if re.search(pat, f):
                return name
        if i <= 1:
            for name, pat in WRAPPERS:
                if re.search(pat, f):
                    return name
    t = next((f for f in frames if f.startswith("tenure::") and "run_with_busy_poll" not in f), None)
    if t:
        return "tenure code: " + t.split("(")[0]
    if any("run_with_busy_poll" in f or "scheduler::" in f for f in frames):
        return "Asio's run loop and reactor (scheduler, epoll_reactor), other"
    return "other"


def table(title, samples, user_only=False, top=20):
    counts = collections.Counter(classify(f, user_only) for _, f in samples)
    n = max(1, len(samples))
    print(f"\n{title}: {len(samples)} samples")
    for name, v in counts.most_common(top):
        print(f"{100 * v / n:6.1f}%  {v:5d}  {name[:110]}")


def alloc_callers(samples, top=12):
    skip = re.compile(r"^std::|^__gnu_cxx|allocator|^boost::asio::detail::(thread_info_base|recycling_allocator)|"
                      r"^boost::asio::aligned|^boost_asio_handler_alloc_helpers|^boost::json::.*(storage|resource)")

    def bucket(f):
        if "awaitable_frame_base" in f or "awaitable_thread" in f:
            return "coroutine frames (awaitable_frame_base new / destroy)"
        if "beast::http" in f:
            return "Beast header fields / parser"
        if f.startswith("boost::json"):
            return "boost::json values"
        if "cancellation" in f:
            return "cancellation slots / signals"
        if any(w in f for w in ("executor_function", "handler", "co_spawn", "scheduler", "reactive", "async_result")):
            return "Asio operations and handlers (co_spawn, posted functions)"
        if f.startswith("tenure::"):
            return "tenure: " + f.split("(")[0][:80]
        return "other: " + f[:80]

    counts = collections.Counter()
    for _, frames in samples:
        if not any(ALLOC.search(f) for f in frames[:4]):
            continue
        i = 0
        while i < len(frames) and (ALLOC.search(frames[i]) or skip.search(frames[i])):
            i += 1
        counts[bucket(frames[i]) if i < len(frames) else "?"] += 1
    n = max(1, sum(counts.values()))
    print(f"\nwho allocates (the allocation samples by their caller): {sum(counts.values())} samples")
    for name, v in counts.most_common(top):
        print(f"{100 * v / n:6.1f}%  {v:5d}  {name}")


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    samples = read_samples(sys.argv[1:])
    table("all samples of the process", samples)
    user = [s for s in samples if not s[0]]
    table(f"samples whose leaf is in user space ({100 * len(user) / max(1, len(samples)):.1f}% of all)", user,
          user_only=True)
    alloc_callers(samples)
    return 0


if __name__ == "__main__":
    sys.exit(main())
