// symmetric.hpp — symmetric memory: every rank of a group holds a window of the same layout, and
// every rank can load from and store to every other's, as NCCL's registered windows
// (ncclCommWindowRegister) and PyTorch's symmetric memory let GPUs of one node do over NVLink.
//
// Here the windows are one POSIX shared-memory segment that every rank of the group maps, so
// they work alike for in-process ranks, the launcher's processes and mpirun's, on one host. The
// group's first rank makes the segment and sends its name to the others over the transport;
// once all have mapped it (each says so) it unlinks the name, so nothing stays in /dev/shm.
//
// Each rank's window holds kWindowFlags flag lines (cache lines of their own: 0 and 1 for the
// algorithms, 2 for what this rank pushed to a switch, 3 for the switch's results on the first
// rank's window) and `bytes` of data in each of `regions` regions. Every access goes through load,
// store and the flags, which count what they move: bytes this rank read from and wrote to other
// ranks' windows and to its own, and the synchronisations it waited for. Lesson 21's checks hold
// those counts to each algorithm's formula.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/clock.hpp"
#include "core/trace/recorder.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

// What one rank moved through the windows since they opened (or since reset).
struct WindowCounts {
  std::uint64_t read_remote = 0, written_remote = 0;  // bytes, other ranks' windows
  std::uint64_t read_local = 0, written_local = 0;    // bytes, this rank's own window
  std::uint64_t syncs = 0;                            // waits for another rank's flag
  std::uint64_t flags = 0;                            // flags this rank raised
  std::uint64_t to_switch = 0, from_switch = 0;       // bytes pushed to and read from a switch
  bool operator==(const WindowCounts&) const = default;
};

inline constexpr int kWindowFlags = 4;

class SymmetricWindows {
 public:
  // Collective over the group: `members` are its world ranks (this rank among them), `context`
  // its transport context. Each window holds `regions` regions of `bytes`.
  SymmetricWindows(Transport& transport, int context, const std::vector<int>& members, int me,
                   std::size_t bytes, int regions);
  ~SymmetricWindows();
  SymmetricWindows(const SymmetricWindows&) = delete;
  SymmetricWindows& operator=(const SymmetricWindows&) = delete;

  int rank() const { return me_; }  // in the group
  int world_rank(int r) const { return members_[std::size_t(r)]; }
  int size() const { return int(members_.size()); }
  std::size_t bytes() const { return bytes_; }
  int regions() const { return regions_; }

  // The address of `region` of rank r's window, in this process.
  unsigned char* region(int r, int region) const;
  // Counted copies between this rank's memory and rank r's window.
  void store(int r, int region, std::size_t offset, const void* from, std::size_t n);
  void load(int r, int region, std::size_t offset, void* to, std::size_t n);
  // Counts what a caller moved itself (a sum read straight from several windows) since `t0`
  // (now_us(); the trace's span starts there, now when left out).
  void count_read(int r, std::size_t n, double t0 = -1);
  void count_written(int r, std::size_t n, double t0 = -1);

  // The trace (lesson 21): from here every load and store is also a span on `recorder` (a
  // window access: SpanEvent::Kind::load or store, peer = the window's owner), marked with the
  // step set last; every flag waited for, a span on the compute lane. nullptr: none (the
  // default, as in distlab-bench).
  void trace_into(Recorder* recorder) { recorder_ = recorder; }
  void set_step(int step) { step_ = step; }
  // A span for an access the counts keep apart (a switch's push and sum), not counted here.
  void record(SpanEvent::Kind kind, int r, std::size_t n, double t0);
  // now_us() when tracing (an access's span starts there), else 0: no clock read on the hot path.
  double trace_clock() const { return recorder_ ? now_us() : 0; }

  // Flag `which` (0 or 1) of this rank's window: raise stores `value` (release: what this rank
  // stored before is visible to whoever sees it); wait_flag polls rank r's until it reaches
  // `value` (acquire), through the transport's wait so that a hang is reported, not waited on.
  void raise(int which, std::uint64_t value);
  void wait_flag(int r, int which, std::uint64_t value);
  std::uint64_t flag(int r, int which) const;
  // Polls `ready` on the spot a while (where every rank of the group has a core), then through
  // the transport's wait, which reports a hang; `what()` names the wait, made only then.
  template <class Ready, class What>
  void await(const Ready& ready, const What& what) {
    for (long spin = 0; spin < spins_; ++spin)
      if (ready()) return;
    transport_.wait_until(ready, what());
  }
  // The flag's word itself, for the LL protocol's words and the tests.
  std::atomic<std::uint64_t>& flag_word(int r, int which) const;

  // The next call's number, the same on every rank (each rank counts its calls): flags and LL
  // words carry it, and its parity picks which of two regions the call uses.
  std::uint64_t next_epoch() { return ++epoch_; }

  const WindowCounts& counts() const { return counts_; }
  WindowCounts& counts() { return counts_; }
  void reset_counts() { counts_ = {}; }
  Transport& transport() { return transport_; }

 private:
  Transport& transport_;
  std::vector<int> members_;
  int me_ = 0;
  std::size_t bytes_ = 0, stride_ = 0, total_ = 0;
  int regions_ = 0;
  long spins_ = 0;
  unsigned char* base_ = nullptr;
  WindowCounts counts_;
  std::uint64_t epoch_ = 0;
  Recorder* recorder_ = nullptr;
  int step_ = -1;
};

}  // namespace distlab
