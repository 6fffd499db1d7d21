#include <tenure/error.hpp>

#include <string>

namespace tenure {

namespace {

class category final : public boost::system::error_category {
public:
    char const* name() const noexcept override { return "tenure"; }

    std::string message(int ev) const override {
        switch (static_cast<error>(ev)) {
        case error::leadership_lost: return "leadership lost";
        case error::session_invalidated: return "session invalidated by the server";
        case error::lease_expired_locally: return "no renewal acknowledged within the TTL; leadership given up locally";
        case error::released_by_other: return "lock released or taken by another session";
        case error::key_deleted: return "lock key deleted";
        case error::lock_conflict: return "existing key does not match lock use";
        case error::lock_delay: return "acquire refused: lock-delay in force";
        case error::not_held: return "lock not held";
        case error::unexpected_response: return "unexpected response from the server";
        case error::http_status: return "the server answered with an error status";
        case error::agent_stopped: return "agent stopped";
        case error::etcd_error: return "etcd answered an error";
        case error::etcd_compacted: return "etcd: the requested revision has been compacted";
        case error::lease_not_found: return "etcd: requested lease not found";
        case error::etcd_unavailable: return "etcd unavailable";
        case error::watch_canceled: return "etcd canceled the watch";
        case error::semaphore_limit_conflict: return "semaphore limit conflict: .lock holds another Limit";
        case error::no_session: return "no session: the object is empty (default-constructed or moved from)";
        case error::transferred: return "leadership transferred to another candidate";
        case error::yielded: return "leadership yielded to a higher-priority candidate";
        case error::no_such_candidate: return "no waiting candidate with that session id or name";
        case error::operation_not_supported: return "operation not supported by this backend";
        }
        return "unknown tenure error";
    }
};

}  // namespace

boost::system::error_category const& error_category() noexcept {
    static category const instance;
    return instance;
}

}  // namespace tenure
