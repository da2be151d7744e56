#include "core/device/memory_ledger.hpp"

#include <algorithm>

#include "core/base/check.hpp"

namespace distlab {

void Ledger::charge(Category c, std::uint64_t bytes) {
  if (bytes == 0) return;
  auto& cur = current_[idx(c)];
  cur += static_cast<std::int64_t>(bytes);
  total_ += static_cast<std::int64_t>(bytes);
  peak_[idx(c)] = std::max(peak_[idx(c)], cur);
  peak_total_ = std::max(peak_total_, total_);
  if (recorder_) recorder_->counter(current_);
  if (parent_) parent_->charge(c, bytes);
}

void Ledger::release(Category c, std::uint64_t bytes) {
  if (bytes == 0) return;
  auto& cur = current_[idx(c)];
  DL_CHECK(cur >= static_cast<std::int64_t>(bytes),
           "memory ledger: releasing {} B of {} but only {} B are charged", bytes, to_string(c),
           cur);
  cur -= static_cast<std::int64_t>(bytes);
  total_ -= static_cast<std::int64_t>(bytes);
  if (recorder_) recorder_->counter(current_);
  if (parent_) parent_->release(c, bytes);
}

}  // namespace distlab
