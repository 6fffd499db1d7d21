// The small POSIX helpers the integration tests' process runners share: a
// deadline as a poll() timeout, a pidfd, and the whole of a log file.
#pragma once

#include <cerrno>
#include <chrono>
#include <string>

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

namespace tenure::itest {

// Milliseconds left until `deadline`, never negative (a poll() timeout).
inline int remaining_ms(std::chrono::steady_clock::time_point deadline) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    return left < 0 ? 0 : static_cast<int>(left);
}

// A pidfd for `pid` (readable once it exits), or -1 where the kernel has none.
inline int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
    return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
    (void)pid;
    return -1;
#endif
}

// Everything written to the file behind `fd` so far, from its start (the
// file's offset is left alone: pread).
inline std::string read_all(int fd) {
    std::string out;
    char chunk[4096];
    off_t off = 0;
    for (;;) {
        ssize_t n = ::pread(fd, chunk, sizeof chunk, off);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        out.append(chunk, static_cast<std::size_t>(n));
        off += n;
    }
    return out;
}

}  // namespace tenure::itest
