// Internal: the campaign loop shared by every backend's tenure::campaign.
#pragma once

#include <tenure/election.hpp>
#include <tenure/session.hpp>

#include <boost/asio/awaitable.hpp>

#include <functional>

namespace tenure::detail {

// Creates a session on the backend the campaign runs on.
using session_factory = std::function<boost::asio::awaitable<session>(session_options const&)>;

// Create a session, acquire, run `body` under the scope, release, campaign
// again (with a new session once the old one is lost) until cancelled; on
// cancellation release and close cleanly, then throw operation_aborted.
boost::asio::awaitable<void> campaign_loop(session_factory create_session, campaign_options options,
                                           std::function<boost::asio::awaitable<void>(leadership_scope&)> body);

}  // namespace tenure::detail
