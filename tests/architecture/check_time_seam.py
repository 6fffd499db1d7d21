#!/usr/bin/env python3
"""Checks that tenure's library reads time and randomness only through its seam.

The seam is include/tenure/detail/clock.hpp (detail::clock, detail::timer,
detail::wall_clock), with detail/simulated_time.hpp behind it, and
include/tenure/detail/random.hpp (detail::random_seed). Anywhere else in src/
or include/, a clock, a timer or a random source of the standard library, of
Asio or of the OS would run on real time in the simulation build (tests/sim)
and break its determinism. Each use is reported with its file and line, and
the exit code is 1.

    check_time_seam.py [ROOT]       check the tree at ROOT (default: the checkout)
    check_time_seam.py --self-test  plant each kind of use in a scratch tree and
                                    require that every one is caught
"""
import pathlib
import re
import sys
import tempfile

SEAM = {
    "include/tenure/detail/clock.hpp",
    "include/tenure/detail/simulated_time.hpp",
    "include/tenure/detail/random.hpp",
}
FORBIDDEN = [
    (re.compile(r"\b(steady_clock|system_clock|high_resolution_clock|utc_clock|file_clock)\b"), "a std::chrono clock"),
    (re.compile(r"\b(steady_timer|system_timer|high_resolution_timer|deadline_timer)\b"), "an Asio timer"),
    (re.compile(r"\brandom_device\b"), "std::random_device"),
    (re.compile(r"\b(s?rand|time|gettimeofday|clock_gettime|clock)\s*\("), "a C time or random function"),
]
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\\n])*"')


def check(root):
    root = pathlib.Path(root)
    problems = []
    for folder in ("src", "include"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".hpp", ".cpp", ".h", ".ipp") or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if rel in SEAM:
                continue
            text = path.read_text(errors="replace")
            # Blank out comments and strings, keeping line numbers.
            text = COMMENT.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
            text = STRING.sub(lambda m: '"' + " " * (len(m.group(0)) - 2) + '"', text)
            for number, line in enumerate(text.splitlines(), 1):
                # Members and qualified names of our own (x.time(), detail::clock)
                # are not the C functions.
                for pattern, what in FORBIDDEN:
                    for m in pattern.finditer(line):
                        before = line[: m.start()]
                        if what.startswith("a C") and re.search(r"(\.|->|\w::)$", before) and not before.endswith("std::"):
                            continue
                        problems.append(f"{rel}:{number}: {what} outside the time seam: {line.strip()}")
    return problems


def self_test():
    planted = {
        "src/core/a.cpp": "auto t = std::chrono::steady_clock::now();\n",
        "src/agent/b.cpp": "boost::asio::steady_timer t(ex);\n",
        "src/net/c.cpp": "std::random_device rd;\n",
        "src/consul/d.cpp": "auto now = time(nullptr);\n",
        "src/etcd/f.cpp": "return std::rand() % 6;\n",
        "include/tenure/e.hpp": "using wall = std::chrono::system_clock;\n",
    }
    clean = {
        "src/core/ok.cpp": "// steady_clock in a comment\nauto t = detail::clock::now(); auto s = \"steady_timer\"; x.time();\n",
        "include/tenure/detail/clock.hpp": "using clock = std::chrono::steady_clock;\n",
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in {**planted, **clean}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        problems = check(root)
    caught = {p.split(":")[0] for p in problems}
    missed = set(planted) - caught
    wrong = caught - set(planted)
    if missed or wrong:
        print("self-test failed: missed", sorted(missed), "wrongly reported", sorted(wrong))
        for p in problems:
            print(" ", p)
        return 1
    print(f"self-test passed: {len(planted)} planted uses caught, the clean files pass")
    return 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        return self_test()
    root = argv[1] if len(argv) > 1 else pathlib.Path(__file__).resolve().parents[2]
    problems = check(root)
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} use(s) of time or randomness outside include/tenure/detail/clock.hpp and random.hpp")
        return 1
    print("time seam: src/ and include/ read clocks, timers and randomness only through detail/clock.hpp and random.hpp")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
