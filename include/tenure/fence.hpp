/// @file
/// Fencing helpers.
///
/// A leader can be deposed without knowing it yet (a GC pause, a partition):
/// its writes must then be refused by what it writes to. Two tools:
///
/// - tenure::fence, for a protected resource of your own: remember the highest
///   fencing token seen per lock key and refuse writes stamped with an older one.
///
///       tenure::fence gate;
///       if (!gate.admit(request.fencing)) return reject("stale leader");
///
/// - tenure::fenced_write (tenure/fenced_write.hpp), for writes into the
///   coordination store itself (Consul KV, etcd), checked by the server.
#pragma once

#include <tenure/leadership_scope.hpp>

#include <cstdint>
#include <map>
#include <string>

namespace tenure {

/// A monotonic gate per lock key. admit() accepts a token at least as high as
/// the highest admitted so far for its key (equal: the same term) and records
/// it; a lower one is refused and changes nothing. Keys are independent.
/// Plain single-threaded C++: no I/O, no locking.
class fence {
public:
    bool admit(fencing_token const& token) { return admit(token.key, token.value); }
    bool admit(std::string key, std::uint64_t token);
    /// Would admit() accept this token? (Records nothing.)
    bool would_admit(std::string const& key, std::uint64_t token) const noexcept;
    /// The highest token admitted for `key`; 0 when none.
    std::uint64_t highest(std::string const& key) const noexcept;
    /// Forgets every key.
    void clear() noexcept { highest_.clear(); }

private:
    std::map<std::string, std::uint64_t, std::less<>> highest_;
};

}  // namespace tenure
