// Internal: per-client state that layers above the client keep with it.
#pragma once

#include <tenure/consul/client.hpp>

#include <memory>
#include <string>
#include <unordered_map>

namespace tenure::detail {

struct client_access {
    // Watch hubs by prefix (src/consul/watch_hub.cpp), alive while in use.
    static std::unordered_map<std::string, std::weak_ptr<void>>& watch_hubs(consul::client& c);
};

}  // namespace tenure::detail
