// The web UI's files (src/agent/ui/), built into the agent by
// cmake/embed_ui.cmake: the page needs nothing from disk or the network.
#pragma once

#include <string_view>

namespace tenure::detail::agent {

struct ui_asset {
    std::string_view name;  // "index.html", "app.js", "style.css"
    std::string_view content_type;
    std::string_view body;
};

// The file of that name, or nullptr.
ui_asset const* find_ui_asset(std::string_view name) noexcept;

}  // namespace tenure::detail::agent
