/// @file
/// tenure's error codes, reported through boost::system::error_code.
#pragma once

#include <boost/system/error_code.hpp>

#include <type_traits>

namespace tenure {

/// Why an operation failed or why leadership ended.
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
    /// tenure::etcd::client (the gRPC code and message stay on etcd::api_error)
    etcd_error,            // etcd answered a gRPC error not listed below
    etcd_compacted,        // the revision asked for has been compacted (see api_error::compact_revision())
    lease_not_found,       // etcd does not know the lease (never granted, revoked or expired)
    etcd_unavailable,      // etcd answered Unavailable (no leader, request timed out, member stopping)
    watch_canceled,        // etcd canceled a watch for a reason other than compaction
    /// tenure::semaphore
    semaphore_limit_conflict,  // the semaphore's .lock carries another Limit than ours
    /// every primitive
    no_session,            // the session (or what uses it) is empty: default-constructed or moved from
    /// leadership transfer and candidate priority (election.hpp, leadership_scope.hpp)
    transferred,           // loss reason: this leader handed the key to another candidate (transfer_to, a request)
    yielded,               // loss reason: this leader handed over to a higher-priority candidate (yield_to_higher)
    no_such_candidate,     // transfer_to: no waiting candidate has that session id or name
    operation_not_supported,  // the backend cannot do this (documented per backend on the operation)
};

boost::system::error_category const& error_category() noexcept;

inline boost::system::error_code make_error_code(error e) noexcept {
    return {static_cast<int>(e), error_category()};
}

}  // namespace tenure

template <>
struct boost::system::is_error_code_enum<tenure::error> : std::true_type {};
