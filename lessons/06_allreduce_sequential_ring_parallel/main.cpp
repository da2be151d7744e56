// Lesson 06 — all-reduce without a centre: sequential, parallel and ring
//
// Concept: lesson 04 built all-reduce through rank 0 (reduce + broadcast), a parameter
// server in all but name. The lecture removes the centre and lets the workers reduce among
// themselves, three ways:
//   sequential  N rounds; in round i rank i sends its whole buffer to every other rank,
//               one after another, and every rank adds it in
//   parallel    one step; every rank sends its whole buffer to every other rank at once
//   ring        N-1 steps; every rank passes the buffer it received last to its right
//               neighbour and adds the one arriving from its left
// and the chunked ring NCCL runs (reduce-scatter then all-gather around the ring, S/N per
// message). Every rank holds its own input of L float32, S = 4L bytes.
//
// Cost, counted from the trace and checked against these formulas (N ranks):
//                     steps    one rank sends   all links     in one step: one rank / all links
//   reduce_broadcast  2(N-1)   (N-1) S at r0    2(N-1) S      S / S
//   sequential        N        (N-1) S          N(N-1) S      (N-1) S / (N-1) S
//   parallel          1        (N-1) S          N(N-1) S      (N-1) S / N(N-1) S
//   ring              N-1      (N-1) S          N(N-1) S      S / N S
//   ring_chunked      2(N-1)   2(N-1)/N S       2(N-1) S      S/N / S
// The lecture's three claims, read off the columns (steps = time, one step = bandwidth):
//   sequential: time O(N), bandwidth O(N);  ring: time O(N), peak per rank O(1), total O(N);
//   parallel: time O(1), per rank O(N), total O(N^2).
//
// Run:  ./distlab lesson 06                        4 in-process ranks, 1M float32 per rank, every algorithm
//       ./distlab lesson 06 --ranks 3 --size 6     small: the schedule of every step and the values
//       ./distlab lesson 06 --schedule             every step's messages at the default size too
//       ./distlab lesson 06 --algo ring            one algorithm (reduce_broadcast, sequential, parallel,
//                                                  ring, ring_chunked; library as processes)
//       ./distlab lesson 06 --ranks 16             16 ranks (the scaling table measures N = 2 .. 16 anyway)
//       ./distlab lesson 06 --mpi 4                one process per rank; also MPI_Allreduce
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/baseline.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/runtime/verify.hpp"
#include "lessons/common/all_reduce_study.hpp"

using namespace distlab;
using coll::AllReduceAlgo;

namespace {

// The algorithms this lesson runs, in the order they run (library: as processes only; see
// add_study_options).
const std::vector<AllReduceAlgo> kAlgos = {
    AllReduceAlgo::reduce_broadcast, AllReduceAlgo::sequential,
    AllReduceAlgo::parallel,         AllReduceAlgo::ring,
    AllReduceAlgo::ring_chunked,     AllReduceAlgo::library};

// --- the formulas, in elements of a buffer of L (bytes: times 4) -------------------------

using Traffic = FormulaTraffic;  // elements (all_reduce_study.hpp)

// What rank k of n sends and receives in one all-reduce of L elements.
Traffic formula_rank(AllReduceAlgo a, int k, int n, std::uint64_t L) {
  if (n == 1) return {};
  const std::uint64_t m = std::uint64_t(n - 1);
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:  // r0 receives N-1 buffers, then sends N-1 sums
      return k == 0 ? Traffic{m * L, m * L, m, m} : Traffic{L, L, 1, 1};
    case AllReduceAlgo::sequential:  // N-1 copies of my buffer in my round; one from each other
                                     // rank
    case AllReduceAlgo::parallel:    // the same messages, all at once
    case AllReduceAlgo::ring:        // one whole buffer each way per step
      return {m * L, m * L, m, m};
    case AllReduceAlgo::ring_chunked: {  // every chunk but one each way, in each half
      const coll::RingChunkedTraffic t = coll::ring_chunked_traffic(k, n, L);
      return {t.sent, t.recv, 2 * m, 2 * m};
    }
    default:
      return {};
  }
}

int formula_steps(AllReduceAlgo a, int n) {
  if (n == 1) return 0;  // nothing to exchange
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:
      return 2 * (n - 1);
    case AllReduceAlgo::sequential:
      return n;
    case AllReduceAlgo::parallel:
      return 1;
    case AllReduceAlgo::ring:
      return n - 1;
    case AllReduceAlgo::ring_chunked:
      return 2 * (n - 1);
    default:
      return 0;
  }
}

// The most elements one rank, and all ranks together, send within one step.
struct StepPeak {
  std::uint64_t rank = 0, all = 0;
};
StepPeak formula_step_peak(AllReduceAlgo a, int n, std::uint64_t L) {
  if (n == 1) return {};
  const std::uint64_t m = std::uint64_t(n - 1);
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:
      return {L, L};  // one message per step
    case AllReduceAlgo::sequential:
      return {m * L, m * L};  // the round's speaker, alone
    case AllReduceAlgo::parallel:
      return {m * L, n * m * L};  // everybody, everything
    case AllReduceAlgo::ring:
      return {L, n * L};  // every link one buffer
    case AllReduceAlgo::ring_chunked:
      return {Partition{L, n}.size(0), L};  // every link one chunk
    default:
      return {};
  }
}

// Sends one rank has posted and not yet waited for, at most at once.
int formula_in_flight(AllReduceAlgo a, int n) {
  if (n == 1) return 0;
  return a == AllReduceAlgo::parallel ? n - 1 : 1;
}

// The same formulas in symbols, for the table under the measured one.
struct Symbols {
  const char *steps, *rank, *links, *step_rank, *step_links, *in_flight, *msgs;
};
Symbols symbols(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:
      return {"2(N-1)", "(N-1)S", "2(N-1)S", "S", "S", "1", "N-1"};
    case AllReduceAlgo::sequential:
      return {"N", "(N-1)S", "N(N-1)S", "(N-1)S", "(N-1)S", "1", "N-1"};
    case AllReduceAlgo::parallel:
      return {"1", "(N-1)S", "N(N-1)S", "(N-1)S", "N(N-1)S", "N-1", "N-1"};
    case AllReduceAlgo::ring:
      return {"N-1", "(N-1)S", "N(N-1)S", "S", "NS", "1", "N-1"};
    case AllReduceAlgo::ring_chunked:
      return {"2(N-1)", "2(N-1)S/N", "2(N-1)S", "S/N", "S", "1", "2(N-1)"};
    default:
      return {"-", "-", "-", "-", "-", "-", "-"};
  }
}
// How each column grows with N (steps, one rank, all links, one step: one rank, all links).
std::vector<const char*> growth(AllReduceAlgo a) {
  switch (a) {
    case AllReduceAlgo::reduce_broadcast:
      return {"O(N)", "O(N)", "O(N)", "O(1)", "O(1)"};
    case AllReduceAlgo::sequential:
      return {"O(N)", "O(N)", "O(N^2)", "O(N)", "O(N)"};
    case AllReduceAlgo::parallel:
      return {"O(1)", "O(N)", "O(N^2)", "O(N)", "O(N^2)"};
    case AllReduceAlgo::ring:
      return {"O(N)", "O(N)", "O(N^2)", "O(1)", "O(N)"};
    case AllReduceAlgo::ring_chunked:
      return {"O(N)", "O(1)", "O(N)", "O(1/N)", "O(1)"};
    default:
      return {"", "", "", "", ""};
  }
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"06", "allreduce_sequential_ring_parallel",
                 "all-reduce: sequential, parallel and ring", 4, 1 << 20});
  lesson.set_text(
      "All-reduce without a centre: sequential (N rounds, one rank broadcasts its buffer per "
      "round), parallel (one step, everyone sends everything to everyone, O(N^2) traffic), ring "
      "(N-1 steps to the right neighbour) and the chunked ring NCCL runs: reduce-scatter then "
      "all-gather, 2(N-1) steps of S/N each, so every rank sends 2(N-1)/N S however large N is.",
      "Shards: in ring_chunked every chunk gains one contribution per step of the reduce-scatter "
      "until each rank owns one complete chunk, then the all-gather copies the complete chunks "
      "around. Topology: the ring uses every link at once with small packets; parallel floods all "
      "links in one step.");
  lesson.add_break("ring-resend-own",
                   "ring: each step sends my own buffer again instead of the one just received "
                   "(core/collectives/all_reduce_ring.hpp)");
  lesson.add_break(
      "parallel-one-send-at-a-time",
      "parallel: each send is waited for before the next is posted (a blocking "
      "send), so one is in flight, not N-1 (core/collectives/all_reduce_parallel.hpp)");
  lesson.add_break("ring-one-step-short",
                   "ring_chunked: the reduce-scatter loop runs N-2 steps, not N-1, so each chunk "
                   "misses one rank (core/collectives/reduce_scatter_ring.hpp)");
  StudyOptions study_options;  // --algo and --calibration; the algorithms once the world is known
  add_study_options(lesson, study_options, kAlgos);
  const std::vector<AllReduceAlgo>& algos = study_options.algos;
  const std::string& calibration_path = study_options.calibration_path;
  const auto& opt = lesson.options();

  // Filled on rank 0 while it runs: each algorithm's step ids, and alpha/beta.
  AllReduceStudy study;

  // STEP 3 (rank 0, after the run): the schedule, every count against its formula, the time
  // against the cost model, and the scaling table.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size, e = sizeof(float), S = L * e;
    print_study_header(r, algos, study, L);
    if (study_options.schedule || L <= 64) print_schedule(r, study_options.schedule ? 16 : 4);
    print_traffic(r, "traffic per rank, every algorithm together");

    // The cost model: alpha and beta from lesson 01's calibration, else measured just now;
    // gamma (seconds per byte added) is timed on the spot.
    CostParams cp = study_cost_params(r, study, calibration_path, S);

    // Measured counts, each against its formula.
    const StudyCounts counted = count_study(r, algos, study, cp, S);
    const std::vector<StepCounts>& meas = counted.counts;
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      const std::string name = coll::to_string(a);
      const StepCounts& m = meas[j];
      if (a == AllReduceAlgo::library) continue;  // the library's own schedule is not traced
      r.check(fmt::format("{}: steps = {} = {}", name, symbols(a).steps, formula_steps(a, n)),
              m.steps == formula_steps(a, n), fmt::format("measured {}", m.steps));
      check_rank_formulas(
          r, name, m, [&](int k) { return formula_rank(a, k, n, L); }, e, symbols(a).links);
      const StepPeak peak = formula_step_peak(a, n, L);
      r.check(fmt::format("{}: in one step one rank sends at most {}", name, symbols(a).step_rank),
              m.peak.rank == peak.rank * e,
              fmt::format("{} B, formula {} B", m.peak.rank, peak.rank * e));
      r.check(
          fmt::format("{}: in one step all links carry at most {}", name, symbols(a).step_links),
          m.peak.all == peak.all * e, fmt::format("{} B, formula {} B", m.peak.all, peak.all * e));
      // Sends in flight are checked on every rank, by the ranks themselves (STEP 2): the
      // trace cannot tell them, since on threads a send whose receive is already posted is
      // copied at once and its span ends before the next send is posted.
    }
    lesson.set_cost_model(study_cost_model_json(cp, S, n, counted.predictions));

    // The summary: measured counts, each checked against the formula below it.
    const auto row = [](auto... cells) {
      std::string line =
          fmt::format("  {:<16}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6}  {:>5}", cells...);
      fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
    };
    fmt::print(
        "\nsummary (S = {}; bytes sent; one step = the busiest step; time = the slowest rank):\n",
        format_bytes(double(S)));
    row("algorithm", "steps", "one rank", "all links", "step: rank", "step: all", "msgs", "fly");
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      const StepCounts& m = meas[j];
      if (a == AllReduceAlgo::library) {
        row(coll::to_string(a), "-", "-", "-", "-", "-", "-", "-");
        continue;
      }
      const auto b = [](std::uint64_t x) { return format_bytes(double(x)); };
      row(coll::to_string(a), m.steps, b(m.max_sent), b(m.all_links), b(m.peak.rank), b(m.peak.all),
          m.max_msgs, study.most_open_sends[j]);
    }
    const bool traced =
        algos.front() != AllReduceAlgo::library;  // --algo library alone: nothing traced
    if (traced)
      fmt::print("formulas (checked on every rank: bytes and messages sent and received):\n");
    for (AllReduceAlgo a : algos) {
      if (a == AllReduceAlgo::library) continue;
      const Symbols s = symbols(a);
      row(coll::to_string(a), s.steps, s.rank, s.links, s.step_rank, s.step_links, s.msgs,
          s.in_flight);
    }
    if (traced)
      fmt::print(
          "  msgs: most messages one rank sends; fly: most sends r0 had posted and not yet waited "
          "for\n  at once (checked on every rank)\n");
    print_times(r, algos, meas, cp, S);

    // The scaling table, measured: each algorithm runs again on fresh in-process worlds of
    // N = 2, 4, 8, 16 ranks (N elements each, so every chunk is one element and S/N is exact);
    // the counts are read off those runs' traces and checked against the formulas.
    const std::vector<int> ns = scaling_sizes({2, 4, 8, 16}, n);
    if (!traced) return;
    fmt::print(
        "\nscaling with N (measured on in-process worlds of N ranks, in units of S;\n"
        "every row checked against its formula):\n");
    fmt::print(
        "  steps ~ time; step: rank and step: all ~ bandwidth (what one rank, and all links, carry "
        "at once)\n");
    const auto srow = [](auto... cells) {
      fmt::print("  {:<16}  {:>4}  {:>6}  {:>10}  {:>10}  {:>10}  {:>10}\n", cells...);
    };
    srow("algorithm", "N", "steps", "one rank", "all links", "step: rank", "step: all");
    for (AllReduceAlgo a : algos) {
      if (a == AllReduceAlgo::library) continue;
      for (std::size_t i = 0; i < ns.size(); ++i) {
        const int k = ns[i];
        const std::uint64_t Lk = std::uint64_t(k);
        const StepCounts m = scaling_counts(a, k, Lk, opt.seed);
        const std::uint64_t e = sizeof(float);
        std::uint64_t one = 0, all = 0;
        for (int q = 0; q < k; ++q) {
          one = std::max(one, formula_rank(a, q, k, Lk).sent);
          all += formula_rank(a, q, k, Lk).sent;
        }
        const StepPeak p = formula_step_peak(a, k, Lk);
        r.check(
            fmt::format("scaling: {} on {} ranks: steps and bytes as the formulas say",
                        coll::to_string(a), k),
            m.steps == formula_steps(a, k) && m.max_sent == one * e && m.all_links == all * e &&
                m.peak.rank == p.rank * e && m.peak.all == p.all * e,
            fmt::format("steps {} (formula {}), one rank {} B ({}), all links {} B ({})", m.steps,
                        formula_steps(a, k), m.max_sent, one * e, m.all_links, all * e));
        const double s = double(Lk * e);
        srow(i == 0 ? coll::to_string(a) : "", fmt::format("{}{}", k == n ? "*" : "", k), m.steps,
             in_units_of_s(double(m.max_sent) / s), in_units_of_s(double(m.all_links) / s),
             in_units_of_s(double(m.peak.rank) / s), in_units_of_s(double(m.peak.all) / s));
      }
      const auto g = growth(a);
      srow("", "", g[0], g[1], g[2], g[3], g[4]);
    }
    fmt::print("  * = this run's N, which was also measured at full size above\n");
    fmt::print(
        "  the lecture: sequential time O(N), bandwidth O(N); ring time O(N), peak per rank O(1), "
        "total O(N);\n"
        "  parallel time O(1), per rank O(N), total O(N^2): the steps, step: rank and step: all "
        "columns\n");
    if (n == 1)
      fmt::print(
          "  (N = 1 has nothing to exchange: every count is 0; run with --ranks 2 or more)\n");
  });

  // Memory, counted from the buffers below: per rank the input, the result and the
  // algorithms' workspace (4 x 4 B per element at most at once) and the float64 reference
  // (8 B): 32 B per element with allocator slack.
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{32.0 * double(lesson.options().size), 0};
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    // STEP 1: every rank fills its own input of L float32; the reference every result is
    // checked against is the float64 sum of all the inputs, made on every rank from the seed
    // (as processes, the library's must give it too); alpha and beta for the predicted times
    // come from lesson 01's calibration (lessons/common/all_reduce_study.cpp: prepare_study).
    StudyRank mine = prepare_study(comm, algos, opt.size, opt.seed, calibration_path, study);

    // STEP 2: each algorithm in turn on a copy of the input: an untraced warm-up, the traced and
    // timed run, then every rank checks that it holds the sum. The algorithms live in
    // core/collectives, because lesson 05, the ZeRO lessons and the benchmarks run them too;
    // the README quotes each one's step loop from there:
    //   sequential    all_reduce_sequential.hpp    N rounds: in round i rank i sends its buffer
    //                                              to every other rank in turn; each adds it
    //   parallel      all_reduce_parallel.hpp      one step: everyone sends to everyone at once
    //   ring          all_reduce_ring.hpp          N-1 steps: pass the buffer received last to
    //                                              the right, add the one from the left
    //   ring_chunked  reduce_scatter_ring.hpp,     N-1 steps of S/N reduce-scatter, then N-1 of
    //                 all_gather_ring.hpp          all-gather, around the same ring
    for (AllReduceAlgo a : algos) run_study_algorithm(comm, mine, a, study);

    // Then how many sends each algorithm kept in flight on this rank: posted and not yet waited
    // for, at most at once (Comm::take_most_open_sends). Parallel posts all N-1 before it waits
    // for any; the others wait for each send before the next.
    for (std::size_t j = 0; j < algos.size(); ++j) {
      if (algos[j] == AllReduceAlgo::library) continue;  // the library: its requests are its own
      const int flight = formula_in_flight(algos[j], comm.size());
      comm.check(fmt::format("{}: sends in flight on this rank = {}", coll::to_string(algos[j]),
                             symbols(algos[j]).in_flight),
                 mine.most_open_sends[j] == flight,
                 fmt::format("{} open at once, formula {}", mine.most_open_sends[j], flight));
    }
  });
}
