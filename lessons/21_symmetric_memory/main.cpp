// Lesson 21 — symmetric memory: all-reduce by loads and stores, as NCCL runs it inside a node
//
// Concept: lessons 01-18 move data by messages. Inside one node today's libraries do not: NCCL
// registers a window of the same layout on every GPU (ncclCommWindowRegister, NCCL 2.27) and its
// kernels load from and store to the peers' windows directly over NVLink. Here the windows are one
// shared-memory segment that every rank maps (core/transport/symmetric.hpp), so the same
// all-reduce runs five ways with no message in its data path:
//   one_shot     every rank stores its input into its own window and raises a flag; once every
//                flag is up it reads every window and sums: one synchronisation, (N-1) S read
//                from peers. The fewest steps: best for small S.
//   two_shot     reduce-scatter by loads (rank r sums its 1/N from every window), then all-gather
//                by stores (its sum into every rank's result region) and a second flag:
//                2 synchronisations, 2(N-1)/N S across: fewer bytes than one-shot's (N-1) S
//                once N > 2, so the better of the two for large S (--sweep finds where).
//   one_shot_ll  the LL protocol: each float travels with the call's number in one 8-byte word,
//                stored at once, so a reader that sees the number has the float: no flag, no
//                synchronisation, twice the bytes.
//   switch       a reducing switch (NVLink SHARP): every rank pushes S into the switch, which
//                adds, and reads the sum back: S each way on each link.
//   pat          PAT all-gather (NCCL 2.23, one rank per node): Bruck's schedule with its
//                distances reversed, through a staging buffer of B chunks.
// Checks: every result against the float32 sum in rank order (made here, bit for bit) and the
// float64 sum; every rank's bytes read and written, local and remote, and its flags and waits as
// counted by its window, against each formula; the same from the trace's loads and stores; the
// switch's own reads and writes; PAT's steps and staging against theirs.
//
// Per call, rank k of N (S = 4L bytes, S_k its 1/N; counted by the window):
//   algorithm    written (own, peers')     read (own, peers')        flags  waits
//   one_shot     S, 0                      S, (N-1) S                1      N-1
//   two_shot     S + S_k, (N-1) S_k        S_k + S, (N-1) S_k        2      2(N-1)
//   one_shot_ll  2S, 0                     2S, 2(N-1) S              0      0
//   switch       pushes S, reads S back; the switch reads N S and writes S
//
// Run:  ./distlab lesson 21                      4 in-process ranks, 64K float32 each
//       ./distlab lesson 21 --procs 4 --transport shm     4 processes on one host
//       ./distlab lesson 21 --mpi 4              4 processes under mpirun
//       ./distlab lesson 21 --algo two_shot      one algorithm (one_shot, two_shot, one_shot_ll,
//                                                switch, pat)
//       ./distlab lesson 21 --pat-buffer 1       PAT through a staging buffer of one chunk
//       ./distlab lesson 21 --sweep              time one-shot, two-shot and the ring over sizes:
//                                                the crossovers against alpha-beta's
#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_gather_pat.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/all_reduce_symmetric.hpp"
#include "core/cost/crossover.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"
#include "core/transport/symmetric.hpp"

using namespace distlab;

namespace {

enum class Algo { one_shot, two_shot, one_shot_ll, reducing_switch, pat };
const std::vector<std::pair<Algo, std::string>> kAlgos = {{Algo::one_shot, "one_shot"},
                                                          {Algo::two_shot, "two_shot"},
                                                          {Algo::one_shot_ll, "one_shot_ll"},
                                                          {Algo::reducing_switch, "switch"},
                                                          {Algo::pat, "pat"}};
std::string name_of(Algo a) {
  for (const auto& [x, name] : kAlgos)
    if (x == a) return name;
  return "?";
}

// --- the formulas, written out (bytes of one call, rank k of n, L elements) ------------------

WindowCounts formula(Algo a, int k, int n, std::uint64_t L) {
  const std::uint64_t S = 4 * L, Sk = 4 * Partition{L, n}.size(k), m = std::uint64_t(n - 1);
  WindowCounts c;
  switch (a) {
    case Algo::one_shot:
      c.written_local = S, c.read_local = S, c.read_remote = m * S, c.flags = 1, c.syncs = m;
      break;
    case Algo::two_shot:
      c.written_local = S + Sk, c.written_remote = m * Sk;
      c.read_local = Sk + S, c.read_remote = m * Sk, c.flags = 2, c.syncs = 2 * m;
      break;
    case Algo::one_shot_ll:
      c.written_local = 2 * S, c.read_local = 2 * S, c.read_remote = 2 * m * S;
      break;
    case Algo::reducing_switch:
      c.to_switch = S, c.from_switch = S, c.flags = 1, c.syncs = 1;
      break;
    case Algo::pat:
      break;
  }
  return c;
}

WindowCounts times(WindowCounts c, std::uint64_t k) {
  for (std::uint64_t* x : {&c.read_remote, &c.written_remote, &c.read_local, &c.written_local,
                           &c.syncs, &c.flags, &c.to_switch, &c.from_switch})
    *x *= k;
  return c;
}

std::string show(const WindowCounts& c) {
  return fmt::format(
      "written {} own, {} peers'; read {} own, {} peers'; flags {}, waits {}; switch {} in, {} out",
      c.written_local, c.written_remote, c.read_local, c.read_remote, c.flags, c.syncs, c.to_switch,
      c.from_switch);
}

// PAT: the chunks step k moves each way, D = 2^(L-1-k): the multiples of 2D below N whose
// offset plus D stays below N (written out here; the algorithm keeps its own list).
std::vector<std::uint64_t> pat_chunks(int n) {
  std::vector<std::uint64_t> c;
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  for (int k = 0; k < rounds; ++k) {
    const std::uint64_t d = std::uint64_t(1) << (rounds - 1 - k);
    c.push_back((std::uint64_t(n) - d + 2 * d - 1) / (2 * d));
  }
  return c;
}
std::uint64_t pat_steps(int n, int b) {
  std::uint64_t steps = 0;
  for (std::uint64_t c : pat_chunks(n)) steps += (c + std::uint64_t(b) - 1) / std::uint64_t(b);
  return steps;
}

// Each call's input: call c of rank r is data.hpp's input under seed + c, so a result that
// sums another call's data is wrong.
float input_of(std::uint64_t seed, int call, int rank, std::uint64_t i) {
  return input_value<float>(seed + std::uint64_t(call), rank, i);
}

// The steps each algorithm took, on rank 0 (every rank numbers them alike).
struct Ran {
  Algo algo;
  int first = 0, last = -1;
};

// --- the sweep (--sweep): one-shot, two-shot and the ring, timed over sizes --------------------

struct Crossovers {
  std::vector<std::uint64_t> sizes;    // bytes per rank
  std::vector<double> one, two, ring;  // seconds a call: rank 0's best of kSweepReps
  AlphaBeta one_ab, two_ab, ring_ab;   // fitted below
  unsigned cores = 0;
};
constexpr int kSweepReps = 5, kSweepCalls = 10;

// A call's time: kSweepCalls back to back (each waits for every rank's part of the last, so
// rank 0's clock sees them all), divided out; the best of kSweepReps such runs.
template <class Call>
double best_time(Comm& comm, const Call& call) {
  double best = 1e30;
  for (int rep = 0; rep < kSweepReps; ++rep) {
    comm.barrier();
    const double t0 = now_us();
    for (int c = 0; c < kSweepCalls; ++c) call();
    best = std::min(best, (now_us() - t0) * 1e-6 / kSweepCalls);
  }
  return best;
}

// Every rank runs it; rank 0's answer counts. Sizes 64 B .. 1 MiB, by 4.
Crossovers measure_crossovers(Comm& comm) {
  Crossovers x;
  x.cores = std::thread::hardware_concurrency();
  const std::uint64_t most = 1 << 20;
  const auto windows = coll::open_windows(comm, most);
  SymmetricWindows& w = *windows;
  comm.recorder().set_enabled(false);  // the sweep is timing, not the lesson's trace
  std::vector<float> v(most / 4, 1.0f);
  for (std::uint64_t bytes = 64; bytes <= most; bytes *= 4) {
    const View<float> view{v.data(), std::size_t(bytes / 4), Device::cpu};
    x.sizes.push_back(bytes);
    x.one.push_back(best_time(comm, [&] { coll::all_reduce_one_shot(w, view); }));
    x.two.push_back(best_time(comm, [&] { coll::all_reduce_two_shot(w, view); }));
    x.ring.push_back(best_time(
        comm, [&] { coll::all_reduce(comm, view, coll::AllReduceAlgo::ring_chunked, "sweep"); }));
  }
  comm.recorder().set_enabled(true);
  // alpha-beta, each algorithm its own: t(S) = alpha + beta S through its smallest and largest
  // sizes (alpha: the waits, beta: the bytes it moves a byte of S; the formulas say how many).
  const auto fit = [&](const std::vector<double>& t) {
    const double s0 = double(x.sizes.front()), s1 = double(x.sizes.back());
    const double beta = std::max(0.0, (t.back() - t.front()) / (s1 - s0));
    return AlphaBeta{1, 1, std::max(0.0, t.front() - beta * s0), beta};
  };
  x.one_ab = fit(x.one);
  x.two_ab = fit(x.two);
  x.ring_ab = fit(x.ring);
  return x;
}

template <class Bytes>
std::string show_crossover(std::optional<Bytes> s) {
  return s ? format_bytes(double(*s)) : std::string("none");
}

void print_crossovers(RunResult& r, const Crossovers& x, int n) {
  fmt::print("\nsweep (us a call: {} back to back, the best of {} runs; model: alpha-beta):\n",
             kSweepCalls, kSweepReps);
  fmt::print("  {:>9} {:>10} {:>10} {:>10}  {:>10} {:>10}\n", "S", "one_shot", "two_shot", "ring",
             "one model", "two model");
  for (std::size_t i = 0; i < x.sizes.size(); ++i) {
    const double s = double(x.sizes[i]);
    fmt::print("  {:>9} {:>10.1f} {:>10.1f} {:>10.1f}  {:>10.1f} {:>10.1f}\n", format_bytes(s),
               x.one[i] * 1e6, x.two[i] * 1e6, x.ring[i] * 1e6, x.one_ab.time(s) * 1e6,
               x.two_ab.time(s) * 1e6);
  }
  const auto show_ab = [](const char* name, const AlphaBeta& ab) {
    fmt::print("  {:<9} alpha {:>6.2f} us, beta {:>6.3f} ns/B\n", name, ab.alpha * 1e6,
               ab.beta * 1e9);
  };
  fmt::print("  alpha-beta, each through its smallest and largest size:\n");
  show_ab("one_shot", x.one_ab);
  show_ab("two_shot", x.two_ab);
  show_ab("ring", x.ring_ab);
  fmt::print(
      "  (alpha: the waits, one for one-shot, two for two-shot; beta: the bytes each moves, its\n"
      "  peers' dearer than its own: see the summary's formulas)\n");
  const auto model12 = model_crossover(x.one_ab, x.two_ab);
  const auto model2r = model_crossover(x.two_ab, x.ring_ab);
  const SweepCrossover swept12 = sweep_crossover(x.sizes, x.one, x.two);
  const SweepCrossover swept2r = sweep_crossover(x.sizes, x.two, x.ring);
  fmt::print("  one_shot -> two_shot: model {}, sweep {}\n", show_crossover(model12),
             show_crossover(swept12.at));
  fmt::print("  two_shot -> ring:     model {}, sweep {}\n", show_crossover(model2r),
             show_crossover(swept2r.at));
  // The check: with a core per rank, the sweep crosses once and where the two lines cross,
  // within a factor 4 (the sweep's sizes are a factor 4 apart: one size either way), or neither
  // crosses inside the sweep. Where it does not, time is not alpha + beta S (caches).
  if (n < 2) return;
  if (x.cores < unsigned(n)) {
    fmt::print("  not checked: {} ranks on {} cores time the scheduler, not the windows\n", n,
               x.cores);
    return;
  }
  if (swept12.flips > 1) {
    fmt::print("  not checked: the sweep changes its faster one {} times (noise); run again\n",
               swept12.flips);
    return;
  }
  const double lo = double(x.sizes.front()), hi = double(x.sizes.back());
  const bool model_inside = model12 && *model12 >= lo && *model12 <= hi;
  bool ok;
  if (model_inside && swept12.at)
    ok = *model12 / double(*swept12.at) <= 4 && double(*swept12.at) / *model12 <= 4;
  else
    ok = !model_inside && !swept12.at;
  r.check("sweep: one-shot -> two-shot crosses where their alpha-beta lines do (within 4x)", ok,
          fmt::format("model {}, sweep {}", show_crossover(model12), show_crossover(swept12.at)));
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"21", "symmetric_memory",
                 "symmetric memory: all-reduce by loads and stores, as NCCL runs it in a node", 4,
                 1 << 16});
  lesson.set_text(
      "Every rank maps a window of the same layout, and loads from and stores to the others' "
      "directly: one-shot reads every input (one synchronisation), two-shot reduce-scatters by "
      "loads and all-gathers by stores (two), LL sends each float with its flag in one 8-byte "
      "word (none), a reducing switch adds what every rank pushes; PAT all-gathers over the "
      "network through a bounded staging buffer.",
      "Topology: loads and stores between windows, not messages; one-shot loads from every "
      "window at once, two-shot stores each rank's 1/N into every window. Timeline: the waits for "
      "flags, and LL with none.");
  lesson.add_break(
      "flag-before-data",
      "one_shot and two_shot: a rank raises its flag before it stores its input (and "
      "the last rank is slow), so readers see the flag and read stale data: zeros in the "
      "first call, later the data of the call before last (the same region)");
  lesson.add_break(
      "stale-flag",
      "one_shot_ll: every call's words carry the same flag, so a word left by the call "
      "before last in the same region passes for this call's");
  lesson.add_break("two-shot-early-read",
                   "two_shot: the all-gather reads its result region without waiting for the "
                   "owners' flags (and the last rank is slow to store its sum)");

  std::vector<std::string> algo_names;
  int calls = 4, pat_buffer = 2;
  bool sweep = false;
  auto& app = lesson.app();
  app.add_option("--algo", algo_names,
                 "the algorithms to run: one_shot, two_shot, one_shot_ll, switch, pat (all)")
      ->check(CLI::IsMember({"one_shot", "two_shot", "one_shot_ll", "switch", "pat"}));
  app.add_option("--calls", calls,
                 "all-reduces per algorithm, each on new inputs (3 at least shows a stale flag)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--pat-buffer", pat_buffer, "B: the chunks PAT's staging buffer holds")
      ->check(CLI::Range(1, 1 << 16));
  app.add_flag("--sweep", sweep,
               "time one-shot, two-shot and the ring over sizes; check the crossovers against "
               "alpha-beta's (on threads, one core a rank)");
  const auto& opt = lesson.options();
  std::vector<Algo> algos;

  lesson.on_world([&](const World& world) {
    if (world.device != Device::cpu)
      throw UsageError(
          "lesson 21's windows are host shared memory: run it with --device cpu (GPU windows "
          "need CUDA peer access, which this lesson does not use)");
    if (kSimulatedBuild)
      throw UsageError("lesson 21 needs ranks that share memory; a simulated cluster has none");
    algos.clear();
    for (const auto& [a, name] : kAlgos)
      if (algo_names.empty() || std::count(algo_names.begin(), algo_names.end(), name))
        algos.push_back(a);
    if (sweep && world.mode != Mode::threads)
      throw UsageError("--sweep times in-process ranks: run it without --procs or --mpi");
  });

  // Every rank's window: 8 regions of 2S (LL's words are twice the floats), 64 L bytes; its data
  // and float32 reference (8 L), its float64 reference (8 L), PAT's staging (under 8 L): 88 L,
  // counted twice for the trace's copies and the allocator; --sweep's windows of 8 regions of
  // 1 MiB and its 1 MiB buffer besides.
  lesson.needs_memory([&](const World&) {
    const double sweep_bytes = sweep ? 9.0 * (1 << 20) : 0;
    return MemoryNeed{2 * 88.0 * double(lesson.options().size) + sweep_bytes + (1 << 20), 0};
  });

  std::vector<Ran> ran;                   // rank 0's record of the steps
  std::map<Algo, WindowCounts> counted0;  // rank 0's window counts, per algorithm
  std::uint64_t switch_read = 0, switch_written = 0;
  std::optional<Crossovers> crossovers;  // --sweep, from rank 0

  // STEP 7 (rank 0, after the run): every rank's loads and stores read back from the trace,
  // against the formulas; the switch's own traffic; the summary.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size, S = 4 * L;
    fmt::print("\n{} ranks, S = {} per rank, calls per algorithm: {}\n", n, format_bytes(double(S)),
               calls);
    const auto row = [](auto... cells) {
      fmt::print("  {:>5} {:>12} {:>12} {:>12} {:>12}\n", cells...);
    };
    for (const Ran& run : ran) {
      if (run.algo == Algo::pat) continue;
      const std::string name = name_of(run.algo);
      const char* note = run.algo == Algo::two_shot ? " (rank k stores S_k, its 1/N, into each)"
                         : run.algo == Algo::reducing_switch
                             ? "\n  (each rank pushes into its own window and loads the sum "
                               "from r0's, where the switch lives)"
                             : "";
      fmt::print("\n{}: loads and stores per call, from the trace{}\n", name, note);
      row("rank", "stored own", "in peers'", "loaded own", "from peers'");
      bool all_ok = true;
      std::string wrong;
      for (const RankLog& log : r.logs) {
        WindowCounts t;
        for (const SpanEvent& e : log.spans) {
          if (!is_window_access(e.kind) || e.meta.step < run.first || e.meta.step > run.last)
            continue;
          const bool own = e.peer == log.rank;
          if (e.kind == SpanEvent::Kind::load)
            (own ? t.read_local : t.read_remote) += e.bytes;
          else
            (own ? t.written_local : t.written_remote) += e.bytes;
        }
        WindowCounts want = times(formula(run.algo, log.rank, n, L), std::uint64_t(calls));
        if (run.algo == Algo::reducing_switch) {  // the push into my window, the sum from r0's
          want = {};
          want.written_local = S * std::uint64_t(calls);
          (log.rank == 0 ? want.read_local : want.read_remote) = S * std::uint64_t(calls);
        }
        want.syncs = want.flags = want.to_switch = want.from_switch = 0;
        if (!(t == want) && all_ok) {
          all_ok = false;
          wrong = fmt::format("r{}: {} (formula: {})", log.rank, show(t), show(want));
        }
        const auto per_call = [&](std::uint64_t b) {
          return format_bytes(double(b) / double(calls));
        };
        row(log.rank, per_call(t.written_local), per_call(t.written_remote), per_call(t.read_local),
            per_call(t.read_remote));
      }
      r.check(fmt::format("{}: every rank's loads and stores in the trace equal the formula", name),
              all_ok, wrong);
    }
    if (std::any_of(ran.begin(), ran.end(),
                    [](const Ran& x) { return x.algo == Algo::reducing_switch; })) {
      const std::uint64_t k = std::uint64_t(calls);
      r.check("switch: the switch read every rank's push (N S a call) and wrote the sum (S)",
              switch_read == std::uint64_t(n) * S * k && switch_written == S * k,
              fmt::format("read {} B, wrote {} B", switch_read, switch_written));
      fmt::print(
          "\nswitch: each rank's link carries S each way ({}),\n  where the ring's carries "
          "2(N-1)/N S = {};\n  nccl-tests' busbw (algbw x 2(N-1)/N) can so pass the link's own "
          "rate by 2(N-1)/N = {:.2f}\n  (NVLS: about 480 GB/s busbw on 8 H100s against 365-370 "
          "for the ring)\n",
          format_bytes(double(S)), format_bytes(2.0 * (n - 1) / n * double(S)), 2.0 * (n - 1) / n);
    }
    for (const Ran& run : ran) {
      if (run.algo != Algo::pat) continue;
      // Every rank receives every chunk but its own once a call, each its own message.
      const Partition part{L, n};
      const auto traffic = r.traffic(run.first, run.last);
      bool ok = true;
      std::string wrong;
      for (int k = 0; k < n && ok; ++k) {
        const std::uint64_t want = 4 * (L - part.size(k)) * std::uint64_t(calls);
        const RankTraffic& t = traffic[std::size_t(k)];
        if (t.bytes_recv != want || t.msgs_recv != std::uint64_t(n - 1) * std::uint64_t(calls)) {
          ok = false;
          wrong = fmt::format("r{}: {} B in {} messages, formula {} B in {}", k, t.bytes_recv,
                              t.msgs_recv, want, (n - 1) * calls);
        }
      }
      r.check("pat: every rank receives every chunk but its own once a call (N-1 messages)", ok,
              wrong);
    }
    // The summary: rank 0's window counts per call (checked above on every rank) and its best
    // call, each algorithm's formula under it.
    fmt::print("\nsummary (rank 0, per call; time: its best call):\n");
    const auto srow = [](auto... cells) {
      std::string line = fmt::format("  {:<12} {:>7} {:>6} {:>12} {:>12} {:>10}", cells...);
      fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
    };
    srow("algorithm", "waits", "flags", "stored peer", "loaded peer", "time");
    const auto best = [&](const std::string& name) {
      double t = 0;
      for (const SpanEvent& e : r.logs.front().spans)
        if (e.kind == SpanEvent::Kind::plain && e.name.rfind(name + " ", 0) == 0 &&
            e.name.find_first_not_of("0123456789", name.size() + 1) == std::string::npos)
          t = t == 0 ? e.t1 - e.t0 : std::min(t, e.t1 - e.t0);
      return fmt::format("{:.1f} us", t);
    };
    for (const Ran& run : ran) {
      const std::string name = name_of(run.algo);
      if (run.algo == Algo::pat) {
        srow(name, "-", "-", "-", "-", best(name));
        continue;
      }
      const WindowCounts& c = counted0.at(run.algo);
      const std::uint64_t k = std::uint64_t(calls);
      const bool to_switch = run.algo == Algo::reducing_switch;
      srow(name, c.syncs / k, c.flags / k,
           format_bytes(double(to_switch ? c.to_switch : c.written_remote) / double(k)),
           format_bytes(double(to_switch ? c.from_switch : c.read_remote) / double(k)), best(name));
    }
    if (!counted0.empty())
      fmt::print("formulas (rank k; S_k its 1/N; the switch's columns: S pushed, S read back):\n");
    if (!counted0.empty()) {
      if (counted0.count(Algo::one_shot)) srow("one_shot", "N-1", "1", "0", "(N-1) S", "");
      if (counted0.count(Algo::two_shot))
        srow("two_shot", "2(N-1)", "2", "(N-1) S_k", "(N-1) S_k", "");
      if (counted0.count(Algo::one_shot_ll)) srow("one_shot_ll", "0", "0", "0", "2(N-1) S", "");
      if (counted0.count(Algo::reducing_switch)) srow("switch", "1", "1", "S", "S", "");
      if (counted0.count(Algo::one_shot_ll))
        fmt::print(
            "  one_shot_ll against one_shot: no flag and no wait, each float carries the call's "
            "number;\n  twice the bytes (a 4-byte flag with every 4-byte float)\n");
    }

    // PAT's schedule: distance, chunks and sub-steps of each step, against the formulas.
    if (std::any_of(ran.begin(), ran.end(), [](const Ran& x) { return x.algo == Algo::pat; }) &&
        n > 1) {
      const std::vector<std::uint64_t> moved = pat_chunks(n);
      fmt::print("\npat: all-gather, a staging buffer of B = {} chunk{} each way\n", pat_buffer,
                 pat_buffer == 1 ? "" : "s");
      fmt::print("  {:>4} {:>9} {:>14} {:>16}\n", "k", "D", "chunks c_k", "sub-steps");
      int rounds = int(moved.size());
      for (int k = 0; k < rounds; ++k)
        fmt::print(
            "  {:>4} {:>9} {:>14} {:>16}\n", k, 1 << (rounds - 1 - k), moved[std::size_t(k)],
            (moved[std::size_t(k)] + std::uint64_t(pat_buffer) - 1) / std::uint64_t(pat_buffer));
      fmt::print(
          "  steps {} = sum of ceil(c_k / B); Bruck takes ceil(log2 N) = {} with a scratch of N = "
          "{} chunks,\n  the ring N - 1 = {}; c_k = ceil((N - D) / 2D), N - 1 = {} chunks in "
          "all\n",
          pat_steps(n, pat_buffer), rounds, n, n - 1, n - 1);
    }
    if (crossovers) print_crossovers(r, *crossovers, n);
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    const std::size_t L = opt.size;
    const std::uint64_t S = 4 * L;

    // STEP 1: the windows: every rank maps a window of 8 regions of 2S (LL's words hold a float and
    // a flag each); the first rank names the segment and unlinks it once all have mapped it.
    const auto opened = coll::open_windows(comm, std::max<std::size_t>(2 * S, 64));
    SymmetricWindows& windows = *opened;
    windows.trace_into(&comm.recorder());

    std::vector<float> data(L), own32(L);
    for (Algo a : algos) {
      const std::string name = name_of(a);
      std::unique_ptr<coll::ReducingSwitch> sw;
      if (a == Algo::reducing_switch) sw = std::make_unique<coll::ReducingSwitch>(windows);
      windows.reset_counts();
      const int first = comm.next_steps(a == Algo::pat ? 0 : calls);
      int last = first + (a == Algo::pat ? 0 : calls) - 1;
      bool results_ok = true, bits_ok = true;
      std::string detail;
      for (int c = 0; c < calls; ++c) {
        if (a == Algo::pat) {
          // STEP 6: PAT all-gather: rank r fills in its chunk r; every chunk arrives in place.
          const Partition part{L, n};
          std::fill(data.begin(), data.end(), 0.0f);
          for (std::size_t i = part.begin(me); i < part.end(me); ++i)
            data[i] = input_of(opt.seed, c, me, i);
          coll::PatStats stats;
          {
            auto phase = comm.phase(fmt::format("pat {}", c));
            stats = coll::all_gather_pat(comm, View<float>{data.data(), L, Device::cpu}, pat_buffer,
                                         "pat");
          }
          last = first + stats.steps * (c + 1) - 1;
          if (comm.inject_fault()) data[0] += 1.0f;
          for (int r = 0; r < n; ++r)
            for (std::size_t i = part.begin(r); i < part.end(r); ++i)
              if (data[i] != input_of(opt.seed, c, r, i) && results_ok) {
                results_ok = false;
                detail = fmt::format("call {}: [{}] = {}, r{}'s input {}", c, i, data[i], r,
                                     input_of(opt.seed, c, r, i));
              }
          if (c == 0) {
            const std::vector<std::uint64_t> moved = pat_chunks(n);
            const std::uint64_t most =
                moved.empty() ? 0 : *std::max_element(moved.begin(), moved.end());
            const std::uint64_t want_steps = pat_steps(n, pat_buffer);
            const std::uint64_t want_staged =
                std::min<std::uint64_t>(std::uint64_t(pat_buffer), most);
            comm.check(fmt::format("pat: steps = sum over k of ceil(c_k / B) = {}", want_steps),
                       std::uint64_t(stats.steps) == want_steps,
                       fmt::format("took {}", stats.steps));
            comm.check(
                fmt::format("pat: the staging buffer held min(B, most c_k) = {} chunk(s) at most, "
                            "and at most B times the largest chunk ({} B)",
                            want_staged, 4 * std::uint64_t(pat_buffer) * part.size(0)),
                std::uint64_t(stats.staged_chunks) == want_staged &&
                    stats.staged_bytes <= 4 * std::uint64_t(pat_buffer) * part.size(0),
                fmt::format("{} chunks, {} B", stats.staged_chunks, stats.staged_bytes));
          }
          continue;
        }
        for (std::size_t i = 0; i < L; ++i) data[i] = input_of(opt.seed, c, me, i);
        // The reference, made here: the float32 sum in rank order (what every algorithm must give
        // bit for bit) and the float64 sum (the error model's anchor).
        Eigen::VectorXd want64 = Eigen::VectorXd::Zero(Eigen::Index(L));
        for (int r = 0; r < n; ++r)
          for (std::size_t i = 0; i < L; ++i) {
            const float x = input_of(opt.seed, c, r, i);
            own32[i] = r == 0 ? x : own32[i] + x;
            want64[Eigen::Index(i)] += double(x);
          }
        {
          auto phase = comm.phase(fmt::format("{} {}", name, c));
          windows.set_step(first + c);
          comm.mark_step(first + c);
          const View<float> v{data.data(), L, Device::cpu};
          // STEP 2: one_shot (core/collectives/all_reduce_symmetric.hpp): store, flag, read all.
          if (a == Algo::one_shot) coll::all_reduce_one_shot(windows, v);
          // STEP 3: two_shot: my 1/N summed from every window, stored into every window, flag.
          if (a == Algo::two_shot) coll::all_reduce_two_shot(windows, v);
          // STEP 4: the LL protocol: each float and the call's number in one 8-byte store.
          if (a == Algo::one_shot_ll) coll::all_reduce_one_shot_ll(windows, v);
          // STEP 5: the reducing switch: push S, the switch adds, read the sum back.
          if (a == Algo::reducing_switch) coll::all_reduce_switch(windows, *sw, v);
        }
        if (comm.inject_fault()) data[L / 2] += 1.0f;
        if (results_ok && std::memcmp(data.data(), own32.data(), 4 * L) != 0) {
          bits_ok = false;
          std::size_t i = 0;
          while (data[i] == own32[i]) ++i;
          detail = fmt::format("call {}: [{}] = {:.9g}, the rank-order sum is {:.9g}", c, i,
                               data[i], own32[i]);
        }
        // float32 adds N - 1 times in rank order, each rounding within 2^-24 of the partial sum:
        // within (N-1) 2^-24 of the terms' magnitudes, which add to N at most (|x| < 1, data.hpp).
        const auto cmp = compare(View<const float>{data.data(), L, Device::cpu}, want64,
                                 std::max(1, n - 1) * std::ldexp(1.0, -24) * n);
        if (!cmp.ok && results_ok) detail += "; float64: " + cmp.detail();
        results_ok = results_ok && bits_ok && cmp.ok;
      }
      const WindowCounts got = windows.counts();
      if (a == Algo::pat) {
        comm.check("pat: every rank holds every rank's chunk, exactly", results_ok, detail);
      } else {
        comm.check(fmt::format("{}: the sum equals the float32 rank-order sum bit for bit and "
                               "the float64 sum within (N-1) 2^-24",
                               name),
                   results_ok, detail);
        const WindowCounts want = times(formula(a, me, n, L), std::uint64_t(calls));
        comm.check(fmt::format("{}: my window's counts equal the formula", name), got == want,
                   fmt::format("counted {}; formula {}", show(got), show(want)));
      }
      if (sw && me == 0) {  // the switch raised its last flag after counting: these are final
        switch_read = sw->switch_read();
        switch_written = sw->switch_written();
      }
      sw.reset();
      if (me == 0) {
        ran.push_back({a, first, last});
        if (a != Algo::pat) counted0[a] = got;
      }
    }
    if (sweep) {
      // STEP 8 (--sweep): the three all-reduces timed over sizes, for the crossovers.
      Crossovers found = measure_crossovers(comm);
      if (me == 0) crossovers = found;
    }
  });
}
