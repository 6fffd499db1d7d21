// tenure::fence: the highest token seen per key.
#include <tenure/fence.hpp>

#include <boost/system/system_error.hpp>

namespace tenure {

bool fence::admit(std::string key, std::uint64_t token) {
    auto it = highest_.find(key);
    if (it == highest_.end()) {
        highest_.emplace(std::move(key), token);
        return true;
    }
    if (token < it->second) return false;
    it->second = token;
    return true;
}

bool fence::would_admit(std::string const& key, std::uint64_t token) const noexcept {
    auto it = highest_.find(key);
    return it == highest_.end() || token >= it->second;
}

std::uint64_t fence::highest(std::string const& key) const noexcept {
    auto it = highest_.find(key);
    return it == highest_.end() ? 0 : it->second;
}

}  // namespace tenure
