// distlab-bench — nccl-tests-style tables for every collective and every algorithm.
//
// For each collective and each size from --min-bytes to --max-bytes (times --step-factor),
// every candidate algorithm runs --warmup untimed and then --iters timed iterations, and the
// candidates take turns inside each iteration (iteration 1: A B C, iteration 2: B C A, ...),
// so a slow moment of a noisy machine hits all of them alike and their ratios survive.
//
//   time    one iteration: barrier, then every rank times its own call; the iteration takes
//           as long as its slowest rank. The row shows the median over iterations.
//   algbw   size / time                                    (GB/s, 1 GB = 1e9 B)
//   busbw   algbw x factor: what each rank's link carried, comparable across rank counts
//             all-reduce 2(N-1)/N, all-gather and reduce-scatter (N-1)/N, broadcast and reduce 1
//   predicted  the alpha-beta-gamma model (core/cost/cost_model.hpp) for this algorithm and size
//   #wrong  result elements, summed over ranks, that differ from a float64 reference computed
//           from the inputs (data.hpp): copies must match exactly, sums within sum_tolerance(N)
// docs/performance.md explains the columns and works an example.
//
// Run:  distlab-bench                                        4 in-process ranks, 4 KiB .. 64 MiB
//       distlab-bench --ranks 8 --collectives allreduce --algos ring_chunked,recursive_halving
//       mpirun -np 4 distlab-bench --min-bytes 64M --max-bytes 64M --collectives allreduce
//              --algos ring_chunked,library            (library = MPI_Allreduce; on GPUs NCCL's call)
//       ./distlab bench --procs 4 --transport gloo --algos ring_chunked,library
//                                                        (processes over Gloo; library = gloo::allreduce)
//       distlab-bench --device cuda --ranks 4            GPU buffers; library = ncclAllReduce when each
//                                                        rank has its own GPU (NCCL refuses shared ones)
//       distlab-bench --csv results.csv                  also write every row as CSV
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_gather_bruck.hpp"
#include "core/collectives/all_gather_gather_broadcast.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/all_reduce_symmetric.hpp"
#include "core/collectives/all_to_all.hpp"
#include "core/collectives/all_to_all_bruck.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/broadcast_tree.hpp"
#include "core/collectives/reduce_scatter_reduce_scatter.hpp"
#include "core/collectives/reduce_tree.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"

using namespace distlab;

namespace {

constexpr int kTagResults = 9000;         // timings to rank 0; no collective uses it
constexpr int kRoot = 0;                  // root of broadcast and reduce
constexpr int kTagAddresses = 9001;       // buffer addresses between in-process ranks
constexpr double kStreamBytes = 4 << 20;  // buffers this large stream from memory (model's beta)
constexpr const char* kDirectName = "direct_read";
constexpr const char* kLimitName = "limit";
// The all-reduces through symmetric memory (all_reduce_symmetric.hpp), and the bytes of each
// region of their windows: a larger buffer goes in pieces of this size.
constexpr const char* kSymmetricAlgos[] = {"one_shot", "two_shot", "one_shot_ll", "switch",
                                           "two_shot_registered"};
constexpr std::size_t kWindowBytes = std::size_t(1) << 20;
// two_shot_registered's buffer lives in a window of its own, one region as large as the largest
// size: the data is there before the call (outside the timing), as a registered user buffer is.
constexpr const char* kRegisteredName = "two_shot_registered";

// --- what can be measured --------------------------------------------------------------------

const std::vector<Collective> kCollectives = {Collective::all_reduce,     Collective::all_gather,
                                              Collective::reduce_scatter, Collective::broadcast,
                                              Collective::reduce,         Collective::all_to_all};

// One row of the table: a collective done one way.
struct Candidate {
  Collective collective;
  std::string name;                                              // the algorithm column
  coll::AllReduceAlgo algo = coll::AllReduceAlgo::ring_chunked;  // all-reduce only
  bool library = false;                                          // the MPI library's own call
  bool ring = false;                                             // the model's ring or linear form
  bool direct = false;     // direct_read: in-process ranks read each other's buffers
  bool limit = false;      // the limit row: a flag and S at memory's copy bandwidth, measured
  std::string gloo{};      // one of Gloo's other all-reduces (library_<name>, under the launcher)
  bool symmetric = false;  // through symmetric memory: loads and stores, no messages
  // reduce-scatter by distlab's ring works in place: the result is a chunk of `work`, not `out`
  bool in_place() const { return ring && !library; }
};

std::vector<Candidate> candidates_of(Collective c) {
  switch (c) {
    case Collective::all_reduce: {
      std::vector<Candidate> out;
      for (auto a : coll::all_reduce_algos())
        out.push_back({c, coll::to_string(a), a, a == coll::AllReduceAlgo::library});
      for (const auto& g : baseline::gloo_all_reduce_algorithms())
        out.push_back(
            {c, "library_" + g, coll::AllReduceAlgo::library, true, false, false, false, g});
      out.push_back({c, kDirectName, {}, false, false, true});
      Candidate limit{c, kLimitName};
      limit.limit = true;
      out.push_back(limit);
      for (const char* name : kSymmetricAlgos) {
        Candidate k{c, name};
        k.symmetric = true;
        out.push_back(k);
      }
      return out;
    }
    case Collective::all_gather:
      return {{c, "ring", {}, false, true},
              {c, "gather_broadcast"},
              {c, "bruck"},
              {c, "library", {}, true, true}};
    case Collective::reduce_scatter:
      return {{c, "ring", {}, false, true}, {c, "reduce_scatter"}, {c, "library", {}, true, true}};
    case Collective::broadcast:
    case Collective::reduce:
      return {{c, "linear"}, {c, "tree"}, {c, "library", {}, true}};
    case Collective::all_to_all:
      return {{c, "pairwise"}, {c, "bruck"}, {c, "library", {}, true}};
  }
  return {};
}

Cost predict(const Candidate& k, int p, double bytes, int ranks_per_node) {
  if (k.direct || k.limit || k.symmetric) return {};  // no messages: not the alpha-beta model
  if (k.collective == Collective::all_reduce)
    return predict_all_reduce(k.algo, p, bytes, ranks_per_node);
  if (k.library) return predict_collective(k.collective, k.ring, p, bytes);
  return predict_algorithm(k.collective, k.name, p, bytes);
}

// nccl-tests' bus bandwidth factor: busbw = algbw x factor (docs/performance.md derives them).
double bus_factor(Collective c, int p) {
  switch (c) {
    case Collective::all_reduce:
      return 2.0 * (p - 1) / p;
    case Collective::all_gather:
    case Collective::reduce_scatter:
    case Collective::all_to_all:
      return double(p - 1) / p;
    case Collective::broadcast:
    case Collective::reduce:
      return 1.0;
  }
  return 1.0;
}

// Does a comma list name this?
bool listed(const std::vector<std::string>& list, const std::string& name) {
  return list.empty() || std::find(list.begin(), list.end(), name) != list.end();
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty() && item != "all") out.push_back(item);
  return out;
}

// --- one collective at one size on one rank ----------------------------------------------------

// Buffers of one (collective, size); every candidate reuses them.
struct Case {
  Collective collective;
  std::size_t count = 0;  // float32 elements in the whole buffer
  Partition part;
  Buffer<float> input;      // this rank's input (all-gather: only my chunk filled in)
  Buffer<float> work;       // in-place algorithms work here; whole-buffer results land here
  Buffer<float> out;        // reduce-scatter by reduce + scatter / library: my chunk of the sum
  std::vector<float> want;  // the reference for what I must hold afterwards (float64 sums, rounded)
  double tol = 0;           // 0 for copies, sum_tolerance(N) for sums
  std::vector<const float*> peers;      // every rank's `work`, for direct_read (in-process ranks)
  SymmetricWindows* windows = nullptr;  // the symmetric candidates' windows
  SymmetricWindows* registered = nullptr;  // two_shot_registered's: the buffer itself
  // The window a registered candidate's buffer lives in (region 0 of this rank's), or nullptr.
  SymmetricWindows* registered_for(const std::string& name) const {
    return name == kRegisteredName ? registered : nullptr;
  }
  coll::ReducingSwitch* reducing_switch = nullptr;  // the switch row's (a thread of rank 0)
};

std::vector<const float*> share_addresses(Comm& comm, const Buffer<float>& work);

// share: the direct_read row runs at this size, so every rank learns the others' buffers.
Case make_case(Comm& comm, Collective c, std::size_t count, std::uint64_t seed, bool share) {
  const int p = comm.size(), me = comm.rank();
  Case k{c,
         count,
         Partition{count, p},
         comm.alloc<float>(count, Category::data),
         comm.alloc<float>(count, Category::data),
         Buffer<float>(),
         {},
         0,
         {}};
  const std::size_t b = k.part.begin(me), m = k.part.size(me);
  if (c == Collective::all_gather)
    fill_input(k.input.sub(b, m), seed, me, b);
  else
    fill_input(k.input.view(), seed, me);
  if (c == Collective::reduce_scatter) k.out = comm.alloc<float>(m, Category::data);
  if (share) k.peers = share_addresses(comm, k.work);

  // The reference, from the inputs only: value(seed, rank, i) for any rank (data.hpp).
  auto sum_of = [&](std::size_t i) {
    double s = 0;
    for (int r = 0; r < p; ++r) s += input_value<float>(seed, r, i);
    return float(s);
  };
  switch (c) {
    case Collective::all_reduce:
      k.want.resize(count);
      for (std::size_t i = 0; i < count; ++i) k.want[i] = sum_of(i);
      k.tol = sum_tolerance(p);
      break;
    case Collective::all_gather:  // chunk r of the result is chunk r of rank r's input
      k.want.resize(count);
      for (int r = 0; r < p; ++r)
        for (std::size_t i = k.part.begin(r); i < k.part.end(r); ++i)
          k.want[i] = input_value<float>(seed, r, i);
      break;
    case Collective::reduce_scatter:
      k.want.resize(m);
      for (std::size_t i = 0; i < m; ++i) k.want[i] = sum_of(b + i);
      k.tol = sum_tolerance(p);
      break;
    case Collective::broadcast:
      k.want.resize(count);
      for (std::size_t i = 0; i < count; ++i) k.want[i] = input_value<float>(seed, kRoot, i);
      break;
    case Collective::reduce:  // only the root holds a result
      if (me == kRoot) {
        k.want.resize(count);
        for (std::size_t i = 0; i < count; ++i) k.want[i] = sum_of(i);
      }
      k.tol = sum_tolerance(p);
      break;
    case Collective::all_to_all: {  // block r of my result: rank r's input block for me
      const std::size_t block = count / std::size_t(p);
      k.want.resize(count);
      for (int r = 0; r < p; ++r)
        for (std::size_t i = 0; i < block; ++i)
          k.want[std::size_t(r) * block + i] =
              input_value<float>(seed, r, std::size_t(me) * block + i);
      break;
    }
  }
  return k;
}

// Puts the inputs back before a run (outside the timing): in-place algorithms overwrite them,
// and a result left over from the last run must not pass for this run's.
void reset(Case& k, const Candidate& cand) {
  if (SymmetricWindows* w = k.registered_for(cand.name)) {  // the input into the window
    std::memcpy(w->region(w->rank(), 0), k.input.data(), k.count * sizeof(float));
    return;
  }
  switch (k.collective) {
    case Collective::all_reduce:
    case Collective::all_gather:
    case Collective::broadcast:  // other ranks start from their own input, not the root's
      ops::copy(k.work.view(), View<const float>(k.input.view()));
      break;
    case Collective::reduce_scatter:
      if (cand.in_place())
        ops::copy(k.work.view(), View<const float>(k.input.view()));
      else
        ops::fill(k.out.view(), 0.0f);
      break;
    case Collective::reduce:
    case Collective::all_to_all:
      ops::fill(k.work.view(), 0.0f);
      break;
  }
}

// --- direct_read: in-process ranks read each other's buffers -------------------------------------
//
// Ranks in one process can read each other's memory, so an all-reduce can go
//   1. each rank sums its chunk straight out of every rank's buffer (N reads, 1 write of S/N),
//   2. barrier, then each rank copies the other N-1 finished chunks from their owners,
//   3. barrier (no rank may reuse its buffer while a peer still copies from it).
// No messages and no waits but the two barriers: (3N-1)/N S of memory traffic per rank, against
// 5(N-1)/N S for a ring that reduces as it receives: two-shot on the user's own buffers.

bool direct_runs_here(const Comm& comm) {
  return comm.world().mode == Mode::threads && comm.device() == Device::cpu;
}

// Every in-process rank learns where every other rank's `work` lives (outside the timing).
std::vector<const float*> share_addresses(Comm& comm, const Buffer<float>& work) {
  const int p = comm.size(), me = comm.rank();
  std::vector<const float*> peers(std::size_t(p), nullptr);
  peers[std::size_t(me)] = work.data();
  for (int s = 1; s < p; ++s) {
    std::int64_t mine = std::int64_t(reinterpret_cast<std::intptr_t>(work.data())), theirs = 0;
    comm.sendrecv(View<const std::int64_t>{&mine, 1, Device::cpu}, (me + s) % p,
                  View<std::int64_t>{&theirs, 1, Device::cpu}, (me - s + p) % p, kTagAddresses);
    peers[std::size_t((me - s + p) % p)] = reinterpret_cast<const float*>(std::intptr_t(theirs));
  }
  return peers;
}

void all_reduce_direct_read(Comm& comm, Case& k) {
  const int p = comm.size(), me = comm.rank();
  const std::size_t begin = k.part.begin(me), end = k.part.end(me);
  // 1. my chunk, summed block by block in rank order; a block fits in L1, so each input is read
  //    once from memory and the sum written once (the output is my own input: hence the block)
  constexpr std::size_t kBlock = 2048;
  float acc[kBlock];
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t m = std::min(kBlock, end - b);
    const float* first = k.peers[0] + b;
    for (std::size_t i = 0; i < m; ++i) acc[i] = first[i];
    for (int r = 1; r < p; ++r) {
      const float* src = k.peers[std::size_t(r)] + b;
      for (std::size_t i = 0; i < m; ++i) acc[i] += src[i];
    }
    std::copy(acc, acc + m, k.work.data() + b);
  }
  comm.barrier();
  // 2. the others' finished chunks, from their owners
  for (int r = 0; r < p; ++r)
    if (r != me)
      std::copy(k.peers[std::size_t(r)] + k.part.begin(r), k.peers[std::size_t(r)] + k.part.end(r),
                k.work.data() + k.part.begin(r));
  comm.barrier();
}

// --- the limit: the memory model's bound, measured in the same run ------------------------------
//
// Two bounds, added: an all-reduce must hand a flag between cores (every result depends on every
// input: at least one cache line from every other rank), and it must move its bytes through the
// host's memory. The least it moves: each rank reads S and writes S (two-shot on a registered
// buffer does just that: its 1/N summed from every window, stored into every window), 2 N S in
// all, at the copy bandwidth the ranks get together from memory (STREAM's copy: arrays far past
// the caches, every rank at once). The flag is a call timed in the loop as every algorithm is (a
// flag raised, every other rank's awaited); the copy rate is measured at each size before its
// warm-up, every rank copying chunks of a 2 x 64 MiB ring it cycles through (cold: other chunks
// came between), the best of kStreamChunks. Each iteration's time is the flag's plus S at that
// rate. A buffer that stays in the caches can go faster than memory (above 1.00x): the bound is
// the memory's, not the caches'.
void limit_call(SymmetricWindows& w) {
  const std::uint64_t e = w.next_epoch();
  w.raise(0, e);
  for (int r = 0; r < w.size(); ++r)
    if (r != w.rank()) w.wait_flag(r, 0, e);
}

// STREAM's copy on one rank, a chunk at a time from a ring far past the caches.
constexpr int kStreamChunks = 4;  // chunks copied at each size, the best taken
class StreamRing {
 public:
  static constexpr std::size_t kArray = std::size_t(64) << 20, kChunk = kArray / 8;
  StreamRing() : from_(kArray, 1), to_(kArray, 0) {}  // every page touched before any timing
  // Seconds a byte of the next chunk's copy.
  double seconds_per_byte() {
    const double t0 = now_us();
    std::memcpy(to_.data() + at_, from_.data() + at_, kChunk);
    const double t = (now_us() - t0) * 1e-6;
    at_ = (at_ + kChunk) % kArray;
    return t / double(kChunk);
  }

 private:
  std::vector<char> from_, to_;
  std::size_t at_ = 0;
};

void run_once(Comm& comm, Case& k, const Candidate& cand) {
  const int me = comm.rank();
  const View<const float> input(k.input.view());
  const View<const float> my_chunk = input.sub(k.part.begin(me), k.part.size(me));
  float* const in = k.input.data();
  const DType f32 = DType::f32;
  switch (k.collective) {
    case Collective::all_reduce:
      // The library is called out of place, as programs call MPI_Allreduce: no copy is timed.
      if (cand.direct)
        all_reduce_direct_read(comm, k);
      else if (cand.limit)
        limit_call(*k.windows);
      else if (cand.name == "one_shot")
        coll::all_reduce_one_shot(*k.windows, k.work.view());
      else if (cand.name == "two_shot")
        coll::all_reduce_two_shot(*k.windows, k.work.view());
      else if (cand.name == "one_shot_ll")
        coll::all_reduce_one_shot_ll(*k.windows, k.work.view());
      else if (cand.name == "switch")
        coll::all_reduce_switch(*k.windows, *k.reducing_switch, k.work.view());
      else if (cand.name == kRegisteredName)
        coll::all_reduce_two_shot_registered<float>(*k.registered, 0, k.count);
      else if (!cand.gloo.empty())
        baseline::gloo_all_reduce_as(comm, cand.gloo, in, k.work.data(), k.count, f32);
      else if (cand.library)
        baseline::all_reduce(comm, in, k.work.data(), k.count, f32);
      else
        coll::all_reduce(comm, k.work.view(), cand.algo);
      return;
    case Collective::all_gather:
      if (cand.library)
        baseline::all_gather(comm, my_chunk.data(), k.work.data(), k.count, f32);
      else if (cand.ring)
        coll::all_gather_ring(comm, k.work.view());
      else if (cand.name == "bruck")
        coll::all_gather_bruck(comm, k.work.view());
      else
        coll::all_gather_gather_broadcast(comm, my_chunk, k.work.view());
      return;
    case Collective::reduce_scatter:
      if (cand.library)
        baseline::reduce_scatter(comm, in, k.out.data(), k.count, f32);
      else if (cand.ring)
        coll::reduce_scatter_ring(comm, k.work.view());
      else
        coll::reduce_scatter_reduce_scatter(comm, input, k.out.view());
      return;
    case Collective::broadcast:
      if (cand.library)
        baseline::broadcast(comm, k.work.data(), k.count, f32, kRoot);
      else if (cand.name == "tree")
        coll::broadcast_tree(comm, k.work.view(), kRoot);
      else
        coll::broadcast(comm, k.work.view(), kRoot);
      return;
    case Collective::reduce:
      if (cand.library)
        baseline::reduce(comm, in, k.work.data(), k.count, f32, kRoot);
      else if (cand.name == "tree")
        coll::reduce_tree(comm, input, k.work.view(), kRoot);
      else
        coll::reduce(comm, input, k.work.view(), kRoot);
      return;
    case Collective::all_to_all:
      if (cand.library)
        baseline::all_to_all(comm, in, k.work.data(), k.count, f32);
      else if (cand.name == "bruck")
        coll::all_to_all_bruck(comm, input, k.work.view());
      else
        coll::all_to_all_pairwise(comm, input, k.work.view());
      return;
  }
}

// Elements of my result that differ from the reference (--inject-fault spoils one first).
std::uint64_t count_wrong(Comm& comm, Case& k, const Candidate& cand) {
  if (k.want.empty() || cand.limit) return 0;  // the limit row copies; it computes no sum
  if (const SymmetricWindows* w = k.registered_for(cand.name))  // the result is in the window
    std::memcpy(k.work.data(), w->region(w->rank(), 0), k.count * sizeof(float));
  View<float> result = k.work.view();
  if (k.collective == Collective::reduce_scatter)
    result = cand.in_place() ? k.work.view().sub(k.part.begin(comm.rank()), k.want.size())
                             : k.out.view();
  if (comm.inject_fault()) inject_fault_into(result);
  const std::vector<float> got = to_host(result);  // a GPU result is checked on the host
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < k.want.size(); ++i) {
    const double g = got[i], w = k.want[i];
    if (!(std::fabs(g - w) <= k.tol * (1.0 + std::fabs(w)))) ++wrong;  // NaN counts as wrong
  }
  return wrong;
}

// Bytes this process would hold for one candidate at `bytes` (input, work, reference, and the
// algorithm's own buffers), for every rank it runs.
double memory_needed(const Candidate& c, int p, int ranks_here, double bytes) {
  double buffers = 3;  // input, work, reference
  if (c.collective == Collective::all_reduce) {
    switch (c.algo) {
      case coll::AllReduceAlgo::parallel:
        buffers += p;
        break;  // N-1 incoming and the sum
      case coll::AllReduceAlgo::sequential:
      case coll::AllReduceAlgo::ring:
      case coll::AllReduceAlgo::recursive_doubling:
        buffers += 2;
        break;
      default:
        buffers += 1;
        break;
    }
  } else {
    buffers += 1;
  }
  return ranks_here * buffers * bytes;
}

double physical_memory() {
  return double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
}

// --- alpha and beta, measured on the spot when no calibration has them --------------------------

// --- the table ---------------------------------------------------------------------------------

struct Row {
  std::size_t bytes = 0, count = 0;
  int ranks = 0;
  std::string mode, collective, algorithm;
  double time_s = 0, algbw = 0, busbw = 0, predicted_s = 0;
  std::uint64_t wrong = 0;
};

void print_header() {
  fmt::print("\n#{:>11} {:>11} {:>6} {:>14} {:>19} {:>11} {:>8} {:>8} {:>11} {:>7}\n", "size",
             "count", "type", "collective", "algorithm", "time", "algbw", "busbw", "predicted",
             "#wrong");
  fmt::print("#{:>11} {:>11} {:>6} {:>14} {:>19} {:>11} {:>8} {:>8} {:>11} {:>7}\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "(us)", "");
}

void print_row(const Row& r) {
  const std::string predicted =
      std::isfinite(r.predicted_s) ? fmt::format("{:.1f}", r.predicted_s * 1e6) : "-";
  fmt::print(" {:>11} {:>11} {:>6} {:>14} {:>19} {:>11.1f} {:>8.2f} {:>8.2f} {:>11} {:>7}\n",
             r.bytes, r.count, "float", r.collective, r.algorithm, r.time_s * 1e6, r.algbw, r.busbw,
             predicted, r.wrong);
  std::fflush(stdout);
}

std::string csv_line(const Row& r) {
  const std::string predicted =
      std::isfinite(r.predicted_s) ? fmt::format("{:.3f}", r.predicted_s * 1e6) : "";
  return fmt::format("{},{},float,{},{},{},{},{:.3f},{:.4f},{:.4f},{},{}\n", r.bytes, r.count,
                     r.collective, r.algorithm, r.ranks, r.mode, r.time_s * 1e6, r.algbw, r.busbw,
                     predicted, r.wrong);
}
constexpr const char* kCsvHeader =
    "size_bytes,count,type,collective,algorithm,ranks,mode,time_us,algbw_GBps,busbw_GBps,predicted_"
    "us,wrong\n";

// One line per size: every all-reduce's busbw over the reference row's (1.00x = as fast).
void print_relative(const std::vector<Row>& rows, const std::string& reference,
                    const std::string& what) {
  std::map<std::size_t, std::map<std::string, double>> busbw;
  for (const auto& row : rows)
    if (row.collective == "allreduce") busbw[row.bytes][row.algorithm] = row.busbw;
  bool header = false;
  for (const auto& [bytes, by_algo] : busbw) {
    auto ref = by_algo.find(reference);
    if (ref == by_algo.end() || ref->second <= 0) continue;
    if (!header) fmt::print("\nall-reduce busbw relative to {} ({}):\n", reference, what);
    header = true;
    std::string line = fmt::format("  {:>10}", format_bytes(double(bytes)));
    for (const auto& [algo, bw] : by_algo)
      if (algo != reference) line += fmt::format("  {} {:.2f}x", algo, bw / ref->second);
    fmt::print("{}\n", line);
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The bench writes no trace unless --trace is given: recording is not what it measures.
std::vector<char*> default_no_trace(int argc, char** argv) {
  static char no_trace[] = "--no-trace";
  std::vector<char*> args(argv, argv + argc);
  bool asked = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-trace" || a == "--trace" || a.rfind("--trace=", 0) == 0) asked = true;
  }
  if (!asked) args.push_back(no_trace);
  return args;
}

}  // namespace

int main(int argc, char** argv) {
  Lesson bench(
      {"bench", "collectives", "nccl-tests-style tables for every collective and algorithm", 4, 0});
  std::string min_text = "4K", max_text = "64M", algos_text = "all", collectives_text = "all",
              csv_path;
  double step_factor = 4;
  int iters = 10, warmup = 2;
  std::string calibration_path = path_beside(bench.options().trace_path, "calibration.json");
  auto& app = bench.app();
  app.add_option("--min-bytes", min_text, "smallest buffer in bytes (K, M, G: powers of 1024)")
      ->capture_default_str();
  app.add_option("--max-bytes", max_text, "largest buffer in bytes")->capture_default_str();
  app.add_option("--step-factor", step_factor, "each size is this many times the last")
      ->check(CLI::Range(1.01, 1024.0))
      ->capture_default_str();
  app.add_option("--iters", iters, "timed iterations per size")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  app.add_option("--warmup", warmup, "untimed iterations first")
      ->check(CLI::Range(0, 100000))
      ->capture_default_str();
  app.add_option(
         "--algos", algos_text,
         "comma list of algorithms (all-reduce: reduce_broadcast, sequential, parallel, "
         "ring, ring_chunked, "
         "recursive_doubling, recursive_halving, tree, double_binary_tree, hierarchical, "
         "direct_read (in-process ranks reading each other's buffers), one_shot, two_shot, "
         "one_shot_ll, switch, two_shot_registered (through symmetric memory, CPU ranks on one "
         "host; switch: a thread of rank 0 adds, as NVLink SHARP's switch does; "
         "two_shot_registered: the buffer lives in the window, as a registered one), limit (a "
         "flag and S at memory's copy rate, measured now: the memory model's bound); "
         "all-gather: "
         "ring, gather_broadcast, bruck; reduce-scatter: ring, reduce_scatter; broadcast "
         "and reduce: linear, tree; alltoall: pairwise, bruck; library: MPI's call under mpirun, "
         "Gloo's under --procs N --transport gloo, NCCL's with --device cuda and a GPU per rank; "
         "under Gloo also library_bcube, library_halving_doubling: its other all-reduces)")
      ->capture_default_str();
  app.add_option("--collectives", collectives_text,
                 "comma list of allreduce, allgather, reducescatter, broadcast, reduce, alltoall")
      ->capture_default_str();
  app.add_option("--csv", csv_path, "also write every row to this CSV file");
  app.add_option("--calibration", calibration_path,
                 "alpha and beta for the predicted column (lesson 01's file)")
      ->capture_default_str();

  std::size_t min_bytes = 0, max_bytes = 0;
  std::vector<Collective> collectives;
  std::vector<std::string> algos;
  bench.on_world([&](const World& w) {
    min_bytes = parse_size(min_text);
    max_bytes = parse_size(max_text);
    if (min_bytes < sizeof(float) || max_bytes < min_bytes)
      throw UsageError(
          fmt::format("sizes must satisfy 4 <= --min-bytes <= --max-bytes (got {} and {})",
                      min_bytes, max_bytes));
    const auto wanted = split_commas(collectives_text);
    for (auto c : kCollectives)
      if (listed(wanted, to_string(c))) collectives.push_back(c);
    for (const auto& name : wanted)
      if (std::none_of(kCollectives.begin(), kCollectives.end(),
                       [&](Collective c) { return name == to_string(c); }))
        throw UsageError(
            fmt::format("--collectives: '{}' is not one of allreduce, allgather, reducescatter, "
                        "broadcast, reduce, alltoall",
                        name));
    algos = split_commas(algos_text);
    for (const auto& name : algos) {
      bool known = false;
      for (auto c : collectives)
        for (const auto& k : candidates_of(c)) known = known || k.name == name;
      if (!known)
        throw UsageError(fmt::format(
            "--algos: '{}' is not an algorithm of the chosen collectives (see --help)", name));
    }
    if (w.mode == Mode::threads && w.device == Device::cpu && algos.size() == 1 &&
        algos[0] == "library")
      throw UsageError(
          "--algos library on the CPU calls MPI's collectives under mpirun or Gloo's under "
          "distlab's launcher: run with --mpi 4 or --procs 4 --transport gloo");
  });

  std::vector<Row> rows;       // rank 0's table, for the summary
  double limit_bandwidth = 0;  // rank 0: the limit's copy bandwidth, bytes a second a rank
  bench.on_report([&](RunResult& r) {
    const int p = r.world.size;
    // Model against measurement at >= 1 MiB (the factor-of-2 target), per algorithm.
    std::map<std::string, std::pair<double, double>> ratio;  // predicted / measured: min, max
    for (const auto& row : rows) {
      if (row.bytes < (1u << 20) || row.time_s <= 0 || p == 1 || !std::isfinite(row.predicted_s) ||
          row.predicted_s <= 0)
        continue;
      const std::string key = row.collective + " " + row.algorithm;
      const double x = row.predicted_s / row.time_s;
      auto [it, fresh] = ratio.try_emplace(key, x, x);
      if (!fresh) it->second = {std::min(it->second.first, x), std::max(it->second.second, x)};
    }
    if (!ratio.empty()) {
      fmt::print("\npredicted / measured at sizes >= 1 MiB (1 = the model is exact):\n");
      for (const auto& [key, mm] : ratio)
        fmt::print("  {:<34} {:>6.2f} .. {:.2f}\n", key, mm.first, mm.second);
    }
    // Every all-reduce against the library's and against the limit, size by size.
    print_relative(rows, "library",
                   r.world.device == Device::cuda ? "ncclAllReduce"
                   : r.world.mode == Mode::gloo   ? "gloo::allreduce, its ring"
                                                  : "MPI_Allreduce");
    print_relative(rows, kLimitName,
                   fmt::format("a flag to every other rank plus S at memory's copy rate with every "
                               "rank copying at once (median {:.1f} GB/s a rank), both measured "
                               "now: the memory model's bound",
                               limit_bandwidth * 1e-9));
    r.check("the bench timed at least one candidate", !rows.empty());
  });

  auto args = default_no_trace(argc, argv);
  return bench.run(int(args.size()), args.data(), [&](Comm& comm) {
    const int p = comm.size(), me = comm.rank();
    const bool own_process = comm.world().mode != Mode::threads;
    const bool tracing = !bench.options().no_trace;
    comm.recorder().set_enabled(false);  // timed runs are never recorded

    // The model's parameters, on rank 0 (the others wait while it times ops::add alone):
    // alpha and beta from lesson 01's file, else from a ping-pong now; from kStreamBytes on,
    // buffers no longer fit in cache and rows use beta refitted on the large ping-pongs.
    const std::string key =
        fmt::format("{}-{}", to_string(comm.world().mode), to_string(comm.device()));
    const FoundCalibration found =
        find_or_measure_calibration(comm, calibration_path, key, std::size_t{64} << 20, 4);
    const std::optional<Calibration> cal = found.fit;
    const std::string source = found.from_file
                                   ? fmt::format("\"{}\" in {}", key, calibration_path)
                                   : fmt::format("a ping-pong r0 <-> r1 just now (no \"{}\" in {})",
                                                 key, calibration_path);
    CostParams small, large;
    if (me == 0) {
      small = load_cost_params(calibration_path, key, 0, 0);  // measures gamma
      if (cal) {
        small.alpha_s = std::max(0.0, cal->alpha_s);
        small.beta_s_per_byte = std::max(0.0, cal->beta_s_per_byte);
        small.source = source;
      }
      small.sharing = core_sharing(comm.world());  // ranks sharing a core take turns
      large = small;
      if (cal)
        large.beta_s_per_byte = streaming_beta(*cal, kStreamBytes).value_or(small.beta_s_per_byte);
      comm.say(
          "distlab-bench: {} ranks ({}, {}), float32, {} timed + {} warm-up iterations per size, "
          "candidates in turn\n",
          p, comm.world().transport, to_string(comm.device()), iters, warmup);
      auto rate = [](double s_per_byte) { return s_per_byte > 0 ? 1e-9 / s_per_byte : 0.0; };
      comm.say("  model: alpha {:.2f} us and beta {:.4f} ns/B ({:.2f} GB/s) from {};\n",
               small.alpha_s * 1e6, small.beta_s_per_byte * 1e9, rate(small.beta_s_per_byte),
               small.source);
      comm.say(
          "         beta {:.4f} ns/B ({:.2f} GB/s) for buffers of {} and more (the fit over "
          "ping-pongs that "
          "large);\n         gamma {:.4f} ns/B ({:.2f} GB/s), ops::add on 16 MiB timed now\n",
          large.beta_s_per_byte * 1e9, rate(large.beta_s_per_byte), format_bytes(kStreamBytes),
          small.gamma_s_per_byte * 1e9, rate(small.gamma_s_per_byte));
      if (small.sharing > 1)
        comm.say(
            "  note: {:.1f} ranks per core on this machine; they take turns, so the model "
            "stretches its byte "
            "terms by {:.1f}\n",
            small.sharing, small.sharing);
    }
    comm.barrier();

    std::ofstream csv;
    if (me == 0 && !csv_path.empty()) {
      csv.open(csv_path);
      if (!csv) throw UsageError("--csv: cannot write " + csv_path);
      csv << kCsvHeader;
    }
    const int ranks_here = own_process ? 1 : p;
    // float32 elements per size: min, min x factor, .. up to max (each size once).
    std::vector<std::size_t> counts;
    for (double size = double(min_bytes); size <= double(max_bytes) * (1 + 1e-9);
         size *= step_factor)
      if (counts.empty() || std::size_t(size) / sizeof(float) != counts.back())
        counts.push_back(std::size_t(size) / sizeof(float));
    // The library's calls: MPI's under mpirun, Gloo's under the launcher, NCCL's on GPUs; left
    // out, with the reason, where they cannot run (CPU ranks in one process; GPU ranks sharing a
    // GPU).
    const bool library_here = baseline::available(comm);
    if (!library_here && listed(algos, "library"))
      comm.say("  (library left out: {})\n", baseline::unavailable_reason(comm));
    if (comm.world().mode != Mode::gloo && !algos.empty())
      for (const auto& g : baseline::gloo_all_reduce_algorithms())
        if (listed(algos, "library_" + g))
          comm.say(
              "  (library_{} left out: Gloo's all-reduces run under --procs N --transport gloo)\n",
              g);
    const bool direct_here = direct_runs_here(comm);
    if (!direct_here && !algos.empty() && listed(algos, kDirectName) &&
        std::find(collectives.begin(), collectives.end(), Collective::all_reduce) !=
            collectives.end())
      comm.say("  ({} left out: it reads other ranks' memory, so it needs in-process CPU ranks)\n",
               kDirectName);
    // Symmetric memory: windows every rank maps, opened once (CPU ranks on one host).
    const bool windows_here = comm.device() == Device::cpu && !kSimulatedBuild;
    std::unique_ptr<SymmetricWindows> windows, registered;
    std::unique_ptr<coll::ReducingSwitch>
        reducing_switch;  // before the windows it reads: ends first
    if (windows_here &&
        std::find(collectives.begin(), collectives.end(), Collective::all_reduce) !=
            collectives.end() &&
        (listed(algos, kLimitName) ||
         std::any_of(std::begin(kSymmetricAlgos), std::end(kSymmetricAlgos),
                     [&](const char* a) { return listed(algos, a); }))) {
      windows = coll::open_windows(comm, kWindowBytes);
      if (listed(algos, "switch"))
        reducing_switch = std::make_unique<coll::ReducingSwitch>(*windows);
      if (reducing_switch) reducing_switch->pause();  // it polls only while its row runs
      if (listed(algos, kRegisteredName)) registered = coll::open_windows(comm, max_bytes, 1);
    }
    std::map<std::string, std::uint64_t> wrong_total;  // per collective + algorithm, rank 0

    // The limit's copies (memory's bandwidth), and the rates they saw: rank 0's, for the table.
    std::unique_ptr<StreamRing> stream;
    std::vector<double> stream_rates;
    if (windows && listed(algos, kLimitName)) stream = std::make_unique<StreamRing>();
    for (Collective c : collectives) {
      std::vector<Candidate> cands;
      const bool gloo_here = comm.world().mode == Mode::gloo;
      for (auto& k : candidates_of(c))
        if (listed(algos, k.name) && (!k.library || library_here) && (!k.direct || direct_here) &&
            (k.gloo.empty() || gloo_here) && (!(k.symmetric || k.limit) || windows) &&
            (k.name != kRegisteredName || registered))
          cands.push_back(k);
      if (cands.empty()) continue;
      if (me == 0) print_header();
      const int ncand = int(cands.size());
      for (const std::size_t size_count : counts) {
        // all-to-all sends N equal blocks: the count rounded down to a multiple of N
        const std::size_t count =
            c == Collective::all_to_all ? size_count - size_count % std::size_t(p) : size_count;
        const std::size_t bytes = count * sizeof(float);
        // Candidates that would not fit in memory sit this size out (parallel holds N-1 buffers).
        std::vector<bool> runs(std::size_t(ncand), true);
        for (int a = 0; a < ncand; ++a)
          if (memory_needed(cands[a], p, ranks_here, double(bytes)) > 0.5 * physical_memory()) {
            runs[std::size_t(a)] = false;
            comm.say("  ({} {} at {} skipped: it would need {} of memory here)\n", to_string(c),
                     cands[a].name, format_bytes(double(bytes)),
                     format_bytes(memory_needed(cands[a], p, ranks_here, double(bytes))));
          }
        bool share = false;
        for (int a = 0; a < ncand; ++a)
          share = share || (cands[std::size_t(a)].direct && runs[std::size_t(a)]);
        // The limit's copy rate at this size: every rank copies kStreamChunks chunks of its
        // ring at once, after a barrier; the best (the warm-up runs after, so the caches these
        // copies emptied fill again before anything is timed).
        double copy_per_byte = 0;
        if (stream) {
          copy_per_byte = 1e30;
          for (int j = 0; j < kStreamChunks; ++j) {
            comm.barrier();
            copy_per_byte = std::min(copy_per_byte, stream->seconds_per_byte());
          }
          stream_rates.push_back(1.0 / copy_per_byte);
        }
        Case k = make_case(comm, c, count, bench.options().seed, share);
        k.windows = windows.get();
        k.registered = registered.get();
        k.reducing_switch = reducing_switch.get();

        // times[i * ncand + a]: my seconds in iteration i for candidate a; then #wrong per
        // candidate.
        std::vector<double> mine(std::size_t(iters * ncand + ncand), 0.0);
        for (int i = -warmup; i < iters; ++i) {
          for (int j = 0; j < ncand; ++j) {
            const int a =
                (j + std::max(i, 0)) % ncand;  // a different candidate goes first each time
            if (!runs[std::size_t(a)]) continue;
            reset(k, cands[a]);
            const bool switch_row = cands[a].name == "switch";
            if (switch_row) k.reducing_switch->resume();
            comm.recorder().set_enabled(tracing && i == -warmup);  // the first warm-up is traced
            comm.barrier();
            const double t0 = now_us();
            run_once(comm, k, cands[a]);
            double dt = (now_us() - t0) * 1e-6;
            comm.recorder().set_enabled(false);
            if (switch_row) k.reducing_switch->pause();
            if (cands[a].limit) dt += double(bytes) * copy_per_byte;  // + S at memory's rate
            if (i >= 0) mine[std::size_t(i * ncand + a)] = dt;
            if (i == iters - 1)
              mine[std::size_t(iters * ncand + a)] = double(count_wrong(comm, k, cands[a]));
          }
        }

        // Rank 0 gathers every rank's times: an iteration lasts as long as its slowest rank.
        std::vector<double> slowest = mine;
        if (me == 0) {
          std::vector<double> theirs(mine.size());
          for (int r = 1; r < p; ++r) {
            comm.recv(View<double>{theirs.data(), theirs.size(), Device::cpu}, r, kTagResults);
            for (std::size_t i = 0; i < mine.size(); ++i)
              slowest[i] = i < std::size_t(iters * ncand) ? std::max(slowest[i], theirs[i])
                                                          : slowest[i] + theirs[i];
          }
          for (int a = 0; a < ncand; ++a) {
            if (!runs[std::size_t(a)]) continue;
            std::vector<double> t;
            for (int i = 0; i < iters; ++i) t.push_back(slowest[std::size_t(i * ncand + a)]);
            Row row;
            row.bytes = bytes;
            row.count = count;
            row.ranks = p;
            row.mode = to_string(comm.world().mode);
            row.collective = to_string(c);
            row.algorithm = cands[a].name;
            row.time_s = median(t);
            row.algbw = row.time_s > 0 ? double(bytes) / row.time_s * 1e-9 : 0;
            row.busbw = row.algbw * bus_factor(c, p);
            row.predicted_s = cands[a].direct || cands[a].limit || cands[a].symmetric
                                  ? std::nan("")
                                  : predict(cands[a], p, double(bytes), comm.world().ranks_per_node)
                                        .seconds(bytes >= kStreamBytes ? large : small);
            row.wrong = std::uint64_t(slowest[std::size_t(iters * ncand + a)]);
            wrong_total[row.collective + " " + row.algorithm] += row.wrong;
            print_row(row);
            if (csv.is_open()) csv << csv_line(row);
            rows.push_back(row);
          }
        } else {
          comm.send(View<const double>{mine.data(), mine.size(), Device::cpu}, 0, kTagResults);
        }
      }
    }
    if (me == 0 && !stream_rates.empty()) {
      std::sort(stream_rates.begin(), stream_rates.end());
      limit_bandwidth = stream_rates[stream_rates.size() / 2];
      comm.say(
          "\nlimit: memory's copy rate, every rank copying {} at once, the best of {} at each "
          "size: median {:.1f} GB/s a rank (from {:.1f} to {:.1f})\n",
          format_bytes(double(StreamRing::kChunk)), kStreamChunks, limit_bandwidth * 1e-9,
          stream_rates.front() * 1e-9, stream_rates.back() * 1e-9);
    }
    for (const auto& [name, wrong] : wrong_total)
      comm.check(name + ": #wrong is 0 at every size", wrong == 0,
                 fmt::format("{} wrong elements", wrong));
    if (me == 0 && csv.is_open()) comm.say("\nrows written to {}\n", csv_path);
    comm.recorder().set_enabled(true);
  });
}
