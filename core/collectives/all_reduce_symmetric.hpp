// all_reduce_symmetric.hpp — all-reduce through symmetric memory (core/transport/symmetric.hpp):
// loads and stores into the other ranks' windows, no messages, as NCCL 2.27's symmetric kernels
// run inside a node.
//
//   algorithm      syncs per call            bytes per rank (S = the buffer)
//   one_shot       1 (every rank's input in)  writes S into its own window; reads S from each of
//                                             the N ranks' windows, (N-1) S of it remote
//   two_shot       2 (inputs in; sums out)    writes S; reads S/N from each window ((N-1)/N S
//                                             remote) and stores its S/N sum into every window
//                                             ((N-1)/N S remote); reads its own result back, S
//   one_shot_ll    none apart from the data   writes 2 S (each 4-byte element with a 4-byte flag,
//                                             one 8-byte store); reads 2 S from each window
//   switch         1 (the switch's result)    pushes S to the switch and reads S back: its link
//                                             carries S each way; the switch reads N S, writes S
//   two_shot_registered                       the data in the window already (a registered
//                  2 (inputs in; sums out)    buffer): reads S/N from each window and stores its
//                                             S/N sum into each: S read, S written, no copy
//
// Each call takes a number (SymmetricWindows::next_epoch); its parity picks one of two regions,
// so a call never waits for the last one's readers: a rank that starts call e + 2, overwriting
// what call e used, has seen every rank's flag (or LL word) of call e + 1, stored after its reads
// of call e. The flags are release and acquire; LL's words are relaxed, so an LL call fences
// before its stores (release) and after its reads (acquire), which orders any call's reads
// before the next call's stores whatever the algorithms.
// A buffer larger than a region goes in pieces, one call each. Every rank sums in rank order, so
// all hold the same bits.
//
// The LL protocol (NCCL's "low latency"): the flag travels in the same 8-byte word as the data,
// and an aligned 8-byte store is seen whole or not at all (single-copy atomicity: a relaxed
// std::atomic store), so a reader that sees this call's flag in a word has that word's data:
// no fence, no separate flag, no barrier, at the cost of half the bytes being flags. LL128 packs
// 120 bytes of data with an 8-byte flag in a 128-byte line, which only holds where the hardware
// stores a line at once in order (NVLink does; a CPU's 16-byte stores do not promise it).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/base/breaks.hpp"
#include "core/base/clock.hpp"
#include "core/base/partition.hpp"
#include "core/comm/comm.hpp"
#include "core/device/buffer.hpp"
#include "core/transport/symmetric.hpp"

namespace distlab::coll {

// The regions of a window: two data slots, two result slots (two-shot), two LL slots, what this
// rank pushes to the switch, and (the first rank's window) the switch's sum.
inline constexpr int kSymmetricRegions = 8;
inline constexpr int kPushRegion = 6, kSwitchRegion = 7;
inline int data_region(std::uint64_t epoch) {
  return int(epoch & 1);
}
inline int result_region(std::uint64_t epoch) {
  return 2 + int(epoch & 1);
}
inline int ll_region(std::uint64_t epoch) {
  return 4 + int(epoch & 1);
}

// Windows for every rank of `comm` (collective over it): `regions` regions of `bytes` each.
inline std::unique_ptr<SymmetricWindows> open_windows(Comm& comm, std::size_t bytes,
                                                      int regions = kSymmetricRegions) {
  std::vector<int> members;
  for (int r = 0; r < comm.size(); ++r) members.push_back(comm.world_rank(r));
  return std::make_unique<SymmetricWindows>(comm.transport(), comm.context(), members, comm.rank(),
                                            bytes, regions);
}

namespace detail {

inline constexpr std::size_t kSumBlock = 16384;  // elements summed at once (64 KiB: in L2)

// out[i] = src(0)[i] + src(1)[i] + ... + src(ranks - 1)[i], added in rank order, block by block.
template <class T, class Source>
void sum_in_rank_order(int ranks, const Source& src, std::size_t n, T* out) {
  T acc[kSumBlock];
  for (std::size_t b = 0; b < n; b += kSumBlock) {
    const std::size_t m = std::min(kSumBlock, n - b);
    for (int r = 0; r < ranks; ++r) {
      const T* from = src(r) + b;
      if (r == 0)
        std::copy(from, from + m, acc);
      else
        for (std::size_t i = 0; i < m; ++i) acc[i] += from[i];
    }
    std::copy(acc, acc + m, out + b);
  }
}

// The same over region `k` of every rank's window, elements [first, first + n), counted as read.
template <class T>
void sum_windows(SymmetricWindows& w, int k, std::size_t first, std::size_t n, T* out) {
  const double t0 = w.trace_clock();
  sum_in_rank_order<T>(
      w.size(), [&](int r) { return reinterpret_cast<const T*>(w.region(r, k)) + first; }, n, out);
  for (int r = 0; r < w.size(); ++r) w.count_read(r, n * sizeof(T), t0);
}

// A rank slower than the others by this much, where a break needs one to lose its race every
// time (the readers get there first).
inline void slow_rank() {
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

// Calls piece(at, n) for each piece of `total` elements that one region holds at `unit` bytes an
// element (a buffer larger than a region goes in pieces, a call each), at most `most` a piece.
template <class Piece>
void for_each_piece(const SymmetricWindows& w, std::size_t total, std::size_t unit,
                    const Piece& piece, std::size_t most = SIZE_MAX) {
  const std::size_t cap = std::min(w.bytes() / unit, most);
  DL_CHECK(cap > 0, "a window region of {} B holds no element of {} B", w.bytes(), unit);
  for (std::size_t at = 0; at < total; at += cap) piece(at, std::min(cap, total - at));
}

inline void wait_all(SymmetricWindows& w, int which, std::uint64_t epoch) {
  for (int r = 0; r < w.size(); ++r)
    if (r != w.rank()) w.wait_flag(r, which, epoch);
}

// This rank's n elements into its data region of call `epoch`, then its flag 0 (it is in), then
// every rank's flag 0: from here every rank's input of this call can be read.
template <class T>
void publish_input(SymmetricWindows& w, const T* piece, std::size_t n, std::uint64_t epoch) {
  if (broken("flag-before-data")) {  // lesson 21's --break: the flag says "in" before it is
    w.raise(0, epoch);               // (and the last rank is slow to store its data)
    if (w.rank() == w.size() - 1) slow_rank();
    w.store(w.rank(), data_region(epoch), 0, piece, n * sizeof(T));
  } else {
    w.store(w.rank(), data_region(epoch), 0, piece, n * sizeof(T));
    w.raise(0, epoch);
  }
  wait_all(w, 0, epoch);
}

}  // namespace detail

// data: this rank's input, replaced by the sum over the group.
template <class T>
void all_reduce_one_shot(SymmetricWindows& w, View<T> data) {
  detail::for_each_piece(w, data.size(), sizeof(T), [&](std::size_t at, std::size_t n) {
    const std::uint64_t e = w.next_epoch();
    // STEP 1: my input into my window, my flag raised, every rank's awaited (one sync).
    detail::publish_input(w, data.data() + at, n, e);
    // STEP 2: every input read and summed.
    detail::sum_windows(w, data_region(e), 0, n, data.data() + at);
  });
}

template <class T>
void all_reduce_two_shot(SymmetricWindows& w, View<T> data) {
  std::vector<T> mine;
  detail::for_each_piece(w, data.size(), sizeof(T), [&](std::size_t at, std::size_t n) {
    const std::uint64_t e = w.next_epoch();
    detail::publish_input(w, data.data() + at, n, e);
    // STEP 1: reduce-scatter by loads: my 1/N of the buffer, summed from every window.
    const Partition part{n, w.size()};
    const std::size_t first = part.begin(w.rank()), count = part.size(w.rank());
    mine.resize(count);
    detail::sum_windows(w, data_region(e), first, count, mine.data());
    // STEP 2: all-gather by stores: my sum into every rank's result region, then my flag.
    const bool early = broken("two-shot-early-read");  // lesson 21's --break: no wait for flag 1
    if (early && w.rank() == w.size() - 1) detail::slow_rank();
    for (int r = 0; r < w.size(); ++r)
      w.store(r, result_region(e), first * sizeof(T), mine.data(), count * sizeof(T));
    w.raise(1, e);
    if (!early) detail::wait_all(w, 1, e);
    w.load(w.rank(), result_region(e), 0, data.data() + at, n * sizeof(T));
  });
}

// Two-shot on a registered buffer, as NCCL's symmetric kernels run on a user buffer registered as
// a window (ncclCommWindowRegister): the n elements already live in region `k` of this rank's
// window, and their sum lands there. Nothing is copied in or out: rank r reads its 1/N from every
// window (S in all, (N-1)/N S of it its peers') and stores each block of its sum straight back
// into every window (S, (N-1)/N S of it its peers'); two synchronisations. A rank may rewrite its
// region once this returns: every peer's flag 1 says that peer has read from it and stored into
// it for the last time.
template <class T>
void all_reduce_two_shot_registered(SymmetricWindows& w, int k, std::size_t n) {
  DL_CHECK(n * sizeof(T) <= w.bytes(), "{} elements do not fit a window region of {} B", n,
           w.bytes());
  const std::uint64_t e = w.next_epoch();
  // STEP 1: my input is in place: my flag 0, and every rank's awaited.
  w.raise(0, e);
  detail::wait_all(w, 0, e);
  // STEP 2: my 1/N, a block at a time: summed from every window, stored into every window.
  const double t0 = w.trace_clock();
  const Partition part{n, w.size()};
  const std::size_t first = part.begin(w.rank()), count = part.size(w.rank());
  // Block by block into my own window (its block of my 1/N is read, by me alone, before it is
  // written), then from there into every other window while the block is still in cache.
  const auto at = [&](int r) { return reinterpret_cast<T*>(w.region(r, k)) + first; };
  for (std::size_t b = 0; b < count; b += detail::kSumBlock) {
    const std::size_t m = std::min(detail::kSumBlock, count - b);
    detail::sum_in_rank_order<T>(
        w.size(), [&](int r) { return at(r) + b; }, m, at(w.rank()) + b);
    for (int r = 0; r < w.size(); ++r)
      if (r != w.rank()) std::memcpy(at(r) + b, at(w.rank()) + b, m * sizeof(T));
  }
  for (int r = 0; r < w.size(); ++r) {
    w.count_read(r, count * sizeof(T), t0);
    w.count_written(r, count * sizeof(T), t0);
  }
  // STEP 3: every rank's sums in: flag 1, and every rank's awaited.
  w.raise(1, e);
  detail::wait_all(w, 1, e);
}

// The LL protocol on float32: element and flag in one word.
inline std::uint64_t ll_word(float value, std::uint64_t epoch) {
  return (std::uint64_t(std::uint32_t(epoch)) << 32) | std::bit_cast<std::uint32_t>(value);
}

inline void all_reduce_one_shot_ll(SymmetricWindows& w, View<float> data) {
  float acc[detail::kSumBlock];
  detail::for_each_piece(w, data.size(), sizeof(std::uint64_t), [&](std::size_t at, std::size_t n) {
    const std::uint64_t e = w.next_epoch();
    // lesson 21's --break: one flag value for every call, so a word left by call e - 2 in the
    // same region passes for this call's (and the last rank is late to store this call's).
    const bool stale = broken("stale-flag");
    const std::uint32_t flag = stale ? 1u : std::uint32_t(e);
    if (stale && w.rank() == w.size() - 1) detail::slow_rank();
    // STEP 1: each element and the call's flag, one 8-byte store each (after this rank's reads
    // of earlier calls: the fence).
    double t0 = w.trace_clock();
    std::atomic_thread_fence(std::memory_order_release);
    auto* mine = reinterpret_cast<std::atomic<std::uint64_t>*>(w.region(w.rank(), ll_region(e)));
    for (std::size_t i = 0; i < n; ++i)
      mine[i].store(ll_word(data.data()[at + i], flag), std::memory_order_relaxed);
    w.count_written(w.rank(), n * sizeof(std::uint64_t), t0);
    // STEP 2: every rank's words, each read until it carries this call's flag.
    t0 = w.trace_clock();
    for (std::size_t b = 0; b < n; b += detail::kSumBlock) {
      const std::size_t m = std::min(detail::kSumBlock, n - b);
      for (int r = 0; r < w.size(); ++r) {
        auto* words = reinterpret_cast<std::atomic<std::uint64_t>*>(w.region(r, ll_region(e))) + b;
        for (std::size_t i = 0; i < m; ++i) {
          std::uint64_t word = words[i].load(std::memory_order_relaxed);
          if (std::uint32_t(word >> 32) != flag) {
            w.await(
                [&] {
                  word = words[i].load(std::memory_order_relaxed);
                  return std::uint32_t(word >> 32) == flag;
                },
                [&] { return "an LL word of r" + std::to_string(w.world_rank(r)); });
          }
          const float v = std::bit_cast<float>(std::uint32_t(word));
          acc[i] = r == 0 ? v : acc[i] + v;
        }
      }
      std::copy(acc, acc + m, data.data() + at + b);
    }
    std::atomic_thread_fence(std::memory_order_acquire);  // before any later call's stores
    for (int r = 0; r < w.size(); ++r) w.count_read(r, n * sizeof(std::uint64_t), t0);
  });
}

// --- a reducing switch (NVLink SHARP) ---------------------------------------------------------
//
// NVLS lets the NVSwitch add: every GPU pushes its buffer into the switch once and reads the sum
// back once, so each GPU's link carries S each way, where a ring's carries 2(N-1)/N S each way.
// Its busbw (algbw x 2(N-1)/N, as nccl-tests counts an all-reduce) can therefore pass the link's
// own rate. Here the switch is a thread of the group's first rank: it waits for every rank's
// push of call s (flag 2, which also carries the call's element count), sums the pushes in rank
// order into its region of the first rank's window, and raises flag 3 of that window. A rank
// pushes call s + 1 only after it has read call s's sum, so one push region and one sum region
// are enough.
class ReducingSwitch {
 public:
  explicit ReducingSwitch(SymmetricWindows& w) : w_(w) {
    if (w.rank() == 0) thread_ = std::thread([this] { serve(); });
  }
  ~ReducingSwitch() {
    {
      std::lock_guard<std::mutex> lock(park_);
      stop_.store(true, std::memory_order_release);
    }
    parked_.notify_one();
    if (thread_.joinable()) thread_.join();
  }
  ReducingSwitch(const ReducingSwitch&) = delete;
  ReducingSwitch& operator=(const ReducingSwitch&) = delete;

  std::uint64_t next_call() { return ++calls_; }
  // Between calls the switch's thread may sleep (the first rank's object only): a caller that runs
  // other work between switch calls (distlab-bench) pauses it, so that the thread's polling takes
  // no core from that work, and resumes it before the next call.
  void pause() {
    std::lock_guard<std::mutex> lock(park_);
    paused_.store(true, std::memory_order_relaxed);
  }
  void resume() {
    {
      std::lock_guard<std::mutex> lock(park_);
      paused_.store(false, std::memory_order_relaxed);
    }
    parked_.notify_one();
  }
  // What the switch itself moved (the first rank's object only), read once the calls are over.
  std::uint64_t switch_read() const { return read_.load(std::memory_order_acquire); }
  std::uint64_t switch_written() const { return written_.load(std::memory_order_acquire); }

  static std::uint64_t push_word(std::uint64_t call, std::size_t n) {
    return (call << 32) | std::uint64_t(n);
  }

 private:
  void serve() {
    const int n_ranks = w_.size();
    for (std::uint64_t s = 1;; ++s) {
      // Every rank's push of call s.
      for (int r = 0; r < n_ranks; ++r) {
        long spins = 0;
        while ((w_.flag_word(r, 2).load(std::memory_order_acquire) >> 32) < s) {
          if (stop_.load(std::memory_order_acquire)) return;
          if (paused_.load(std::memory_order_relaxed)) {
            std::unique_lock<std::mutex> lock(park_);
            parked_.wait(lock, [&] {
              return !paused_.load(std::memory_order_relaxed) ||
                     stop_.load(std::memory_order_acquire);
            });
            spins = 0;
            continue;
          }
          poll_backoff(spins);
        }
      }
      const std::size_t n = w_.flag_word(0, 2).load(std::memory_order_acquire) & 0xffffffffu;
      detail::sum_in_rank_order<float>(
          n_ranks, [&](int r) { return reinterpret_cast<const float*>(w_.region(r, kPushRegion)); },
          n, reinterpret_cast<float*>(w_.region(0, kSwitchRegion)));
      read_.fetch_add(std::uint64_t(n_ranks) * n * sizeof(float), std::memory_order_relaxed);
      written_.fetch_add(n * sizeof(float), std::memory_order_relaxed);
      w_.flag_word(0, 3).store(s, std::memory_order_release);  // the sum of call s is out
    }
  }

  SymmetricWindows& w_;
  std::uint64_t calls_ = 0;
  std::atomic<bool> stop_{false}, paused_{false};
  std::mutex park_;
  std::condition_variable parked_;
  std::atomic<std::uint64_t> read_{0}, written_{0};
  std::thread thread_;
};

inline void all_reduce_switch(SymmetricWindows& w, ReducingSwitch& sw, View<float> data) {
  // At most 2^32 - 1 elements a call: the push word carries the count in 32 bits.
  detail::for_each_piece(
      w, data.size(), sizeof(float),
      [&](std::size_t at, std::size_t n) {
        const std::uint64_t s = sw.next_call();
        // STEP 1: push my piece into the switch (S over my link), then say so with the call's size.
        double t0 = w.trace_clock();
        std::memcpy(w.region(w.rank(), kPushRegion), data.data() + at, n * sizeof(float));
        w.counts().to_switch += n * sizeof(float);
        w.record(SpanEvent::Kind::store, w.rank(), n * sizeof(float), t0);
        w.raise(2, ReducingSwitch::push_word(s, n));
        // STEP 2: the switch adds every rank's push; read the sum back (S over my link).
        w.wait_flag(0, 3, s);
        t0 = w.trace_clock();
        std::memcpy(data.data() + at, w.region(0, kSwitchRegion), n * sizeof(float));
        w.counts().from_switch += n * sizeof(float);
        w.record(SpanEvent::Kind::load, 0, n * sizeof(float), t0);
      },
      0xffffffffu);
}

}  // namespace distlab::coll
