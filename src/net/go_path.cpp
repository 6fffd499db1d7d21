// Go's path.Clean and path.Join, for key layouts that Go clients build with them.
#include "net/go_path.hpp"

// g++ 12 false positives on std::string appends inlined at -O2 (GCC PR 105651).
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wrestrict"

#include <vector>

namespace tenure::detail {

std::string go_path_clean(std::string_view p) {
    if (p.empty()) return ".";
    bool const rooted = p.front() == '/';
    std::vector<std::string_view> parts;
    std::size_t i = 0;
    while (i <= p.size()) {
        std::size_t j = p.find('/', i);
        if (j == std::string_view::npos) j = p.size();
        std::string_view seg = p.substr(i, j - i);
        i = j + 1;
        if (seg.empty() || seg == ".") continue;
        if (seg == "..") {
            if (!parts.empty() && parts.back() != "..") parts.pop_back();
            else if (!rooted) parts.push_back(seg);
            continue;
        }
        parts.push_back(seg);
    }
    std::string out = rooted ? "/" : "";
    for (std::size_t k = 0; k < parts.size(); ++k) {
        if (k) out += '/';
        out += parts[k];
    }
    if (out.empty()) out = ".";
    return out;
}

std::string go_path_join(std::string_view a, std::string_view b) {
    if (a.empty() && b.empty()) return {};
    if (a.empty()) return go_path_clean(b);
    if (b.empty()) return go_path_clean(a);
    std::string joined;
    joined.reserve(a.size() + 1 + b.size());
    joined.append(a).append(1, '/').append(b);
    return go_path_clean(joined);
}

}  // namespace tenure::detail
