// Counts the heap allocations of a bench process: a replacement of the global
// operator new / operator delete (every form) that forwards to malloc / free
// and counts each allocation and its bytes.
//
// Include it in exactly ONE translation unit of a bench executable (it defines
// the replacement functions; a second copy would not link). The library is
// not changed: the replacement takes effect for the whole process at link time,
// so tenure's allocations (coroutine frames, strings, JSON, buffers) are
// counted with the bench's own. Allocations that bypass operator new (malloc
// from C code, the kernel's socket buffers) are not counted.
//
//   auto const a0 = bench::alloc_counts::now();
//   ... N operations ...
//   auto const d = bench::alloc_counts::now() - a0;   // d.count / N, d.bytes / N
//
// Counters are relaxed atomics: the benches run their clients on one thread,
// but helper threads (log readers, ping-pong) allocate too.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <new>

namespace bench {

struct alloc_counts {
    std::uint64_t count = 0;  // operator new calls that returned memory
    std::uint64_t bytes = 0;  // bytes they asked for

    static alloc_counts now();
    friend alloc_counts operator-(alloc_counts a, alloc_counts b) { return {a.count - b.count, a.bytes - b.bytes}; }
};

namespace alloc_detail {
inline std::atomic<std::uint64_t> count{0}, bytes{0};

inline void* allocate(std::size_t n, std::size_t align = 0) noexcept {
    if (n == 0) n = 1;
    void* p = align > alignof(std::max_align_t) ? std::aligned_alloc(align, (n + align - 1) / align * align)
                                                : std::malloc(n);
    if (p) {
        count.fetch_add(1, std::memory_order_relaxed);
        bytes.fetch_add(n, std::memory_order_relaxed);
    }
    return p;
}

inline void* allocate_or_throw(std::size_t n, std::size_t align = 0) {
    for (;;) {
        if (void* p = allocate(n, align)) return p;
        std::new_handler h = std::get_new_handler();
        if (!h) throw std::bad_alloc();
        h();
    }
}
}  // namespace alloc_detail

inline alloc_counts alloc_counts::now() {
    return {alloc_detail::count.load(std::memory_order_relaxed), alloc_detail::bytes.load(std::memory_order_relaxed)};
}

}  // namespace bench

// The replacements (not inline: [replacement.functions] forbids it).
void* operator new(std::size_t n) { return bench::alloc_detail::allocate_or_throw(n); }
void* operator new[](std::size_t n) { return bench::alloc_detail::allocate_or_throw(n); }
void* operator new(std::size_t n, std::nothrow_t const&) noexcept { return bench::alloc_detail::allocate(n); }
void* operator new[](std::size_t n, std::nothrow_t const&) noexcept { return bench::alloc_detail::allocate(n); }
void* operator new(std::size_t n, std::align_val_t a) {
    return bench::alloc_detail::allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a) {
    return bench::alloc_detail::allocate_or_throw(n, static_cast<std::size_t>(a));
}
void* operator new(std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return bench::alloc_detail::allocate(n, static_cast<std::size_t>(a));
}
void* operator new[](std::size_t n, std::align_val_t a, std::nothrow_t const&) noexcept {
    return bench::alloc_detail::allocate(n, static_cast<std::size_t>(a));
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t, std::nothrow_t const&) noexcept { std::free(p); }
