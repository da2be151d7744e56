// memory_ledger.hpp — the memory ledger: every buffer is charged to (rank, category).
//
// Each rank owns one Ledger. Charges and releases update the current and peak bytes per
// category, and each change is a counter sample in the trace, so memory per rank can be
// read off the timeline and compared with a lesson's formula (e.g. 16 bytes per parameter).
// A ledger may also charge a parent: a part of the run measured on its own (its own peaks, as
// lesson 16 measures each configuration) whose memory still reaches the rank's ledger and so
// the trace's counters.
#pragma once

#include <array>
#include <cstdint>

#include "core/trace/recorder.hpp"

namespace distlab {

class Ledger {
 public:
  explicit Ledger(Recorder* recorder = nullptr, Ledger* parent = nullptr)
      : recorder_(recorder), parent_(parent) {}
  Ledger(const Ledger&) = delete;  // a parent is charged through its address
  Ledger& operator=(const Ledger&) = delete;

  void charge(Category c, std::uint64_t bytes);
  void release(Category c, std::uint64_t bytes);

  std::int64_t current(Category c) const { return current_[idx(c)]; }
  std::int64_t peak(Category c) const { return peak_[idx(c)]; }
  std::int64_t current_total() const { return total_; }
  std::int64_t peak_total() const { return peak_total_; }
  const std::array<std::int64_t, kCategories>& peaks() const { return peak_; }

 private:
  static int idx(Category c) { return static_cast<int>(c); }
  Recorder* recorder_;
  Ledger* parent_;  // charged and released alike; null when none
  std::array<std::int64_t, kCategories> current_{}, peak_{};
  std::int64_t total_ = 0, peak_total_ = 0;
};

}  // namespace distlab
