// tenure's error codes, reported through boost::system::error_code.
#pragma once

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace tenure {

// Why an operation failed or why leadership ended.
enum class error {
    leadership_lost = 1,   // generic: the scope no longer leads
    session_invalidated,   // the server destroyed the session (404 on renew, TTL lapse, check critical)
    lease_expired_locally, // no renewal acknowledged within the TTL; given up before the server could
    released_by_other,     // someone else released or took the key
    key_deleted,           // the lock key disappeared
    lock_conflict,         // the key exists with flags that are not a lock's
    lock_delay,            // acquire refused: a lock-delay is in force
    not_held,              // release of a lock this session does not hold
    unexpected_response,   // the server answered something this client cannot parse
    http_status,           // the server answered with an error status (see diagnostics)
    agent_stopped,         // the embedded agent was stopped
};

boost::system::error_category const& error_category() noexcept;

inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

}  // namespace tenure

template <>
struct boost::system::is_error_code_enum<tenure::error> : std::true_type {};
