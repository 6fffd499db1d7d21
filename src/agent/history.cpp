#include "agent/history.hpp"

namespace tenure::detail::agent {

void lock_history::begin(lock_term term) {
    if (capacity_ == 0) return;
    if (open_.count(term.key)) end(term.key, "released", term.acquired, std::nullopt);
    if (ring_.size() == capacity_) {
        auto& oldest = ring_.front();
        if (!oldest.ended)
            if (auto it = open_.find(oldest.key); it != open_.end() && it->second == first_seq_) open_.erase(it);
        ring_.pop_front();
        ++first_seq_;
    }
    open_[term.key] = first_seq_ + ring_.size();
    term.ended.reset();
    term.end = {};
    term.lock_delay_until.reset();
    ring_.push_back(std::move(term));
}

void lock_history::end(std::string_view key, std::string_view how, time_point now,
                       std::optional<time_point> lock_delay_until) {
    auto it = open_.find(std::string(key));
    if (it == open_.end()) return;
    std::uint64_t const seq = it->second;
    open_.erase(it);
    if (seq < first_seq_) return;
    auto& t = ring_[seq - first_seq_];
    t.ended = now;
    t.end = how;
    t.lock_delay_until = lock_delay_until;
}

}  // namespace tenure::detail::agent
