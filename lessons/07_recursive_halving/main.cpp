// Lesson 07 — recursive doubling and recursive halving: all-reduce in log2 N steps
//
// Concept: the ring of lesson 06 needs N-1 (or 2(N-1)) steps, one hop at a time. Pairing
// ranks across ever larger distances needs only log2 N:
//   recursive_doubling  step k = 0 .. log2 N - 1: swap the whole buffer with partner
//                       rank ^ 2^k and add. After step k every rank holds the sum of its
//                       group of 2^(k+1) ranks; N = 8 is done in 3 steps.
//   recursive_halving   (Rabenseifner) reduce-scatter by recursive halving: at distance
//                       d = N/2, N/4, .., 1 keep half of my range, send the other half to
//                       rank ^ d and add the half it sends; then all-gather by recursive
//                       doubling, d = 1, 2, .., N/2, swapping ranges that double each step.
// Names: the lecture's "recursive halving all-reduce" (offsets 2^(i-1), N = 8 in 3 steps, log2 N
// for any N) is what the literature calls recursive doubling; Rabenseifner's recursive halving
// takes 2 log2 N steps and moves as few bytes as the chunked ring.
// N not a power of two: the fold. With N' the largest power of two <= N, ranks N' .. N-1
// first hand their buffer to rank r - N' (one step), ranks 0 .. N'-1 run the algorithm,
// and the partners hand the sum back (one step).
// Every rank holds its own input of L float32, S = 4L bytes.
//
// Cost, counted from the trace and checked against these formulas (N a power of two):
//                       steps       one rank sends   all links       alpha-beta-gamma model
//   recursive_doubling  log2 N      log2 N * S       N log2 N * S    lg N (alpha + S beta + S gamma)
//   recursive_halving   2 log2 N    2(N-1)/N S       2(N-1) S        2 lg N alpha + 2(N-1)/N S beta + (N-1)/N S gamma
//   ring_chunked        2(N-1)      2(N-1)/N S       2(N-1) S        2(N-1) alpha + 2(N-1)/N S beta + (N-1)/N S gamma
// Doubling wins for small buffers (fewest steps), halving for large ones (as few bytes as
// the ring in log2 N steps instead of N-1). The fold adds 2 steps and S each way for the
// partners and the folded ranks.
//
// Run:  ./distlab lesson 07                        4 in-process ranks, 1M float32 per rank
//       ./distlab lesson 07 --ranks 8 --size 8     N = 8: doubling in 3 steps; the schedule shows rank ^ 2^k
//       ./distlab lesson 07 --ranks 6              not a power of two: the fold r4 -> r0, r5 -> r1
//       ./distlab lesson 07 --schedule             every step's messages at the default size too
//       ./distlab lesson 07 --algo recursive_halving   one algorithm (recursive_doubling, recursive_halving,
//                                                  ring_chunked; library as processes)
//       ./distlab lesson 07 --mpi 4                one process per rank; also MPI_Allreduce
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <Eigen/Core>

#include <algorithm>
#include <bit>
#include <cmath>
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
#include "core/collectives/fold.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/runtime/verify.hpp"
#include "lessons/common/all_reduce_study.hpp"

using namespace distlab;
using coll::AllReduceAlgo;
using coll::Fold;

namespace {

// The algorithms this lesson runs, in the order they run (library: as processes only; see
// add_study_options).
const std::vector<AllReduceAlgo> kAlgos = {AllReduceAlgo::recursive_doubling,
                                           AllReduceAlgo::recursive_halving,
                                           AllReduceAlgo::ring_chunked, AllReduceAlgo::library};

bool recursive(AllReduceAlgo a) {
  return a == AllReduceAlgo::recursive_doubling || a == AllReduceAlgo::recursive_halving;
}

// --- the formulas, in elements of a buffer of L (bytes: times 4) -------------------------

using Traffic = FormulaTraffic;  // elements (all_reduce_study.hpp)

// What rank k of n sends and receives in one all-reduce of L elements.
Traffic formula_rank(AllReduceAlgo a, int k, int n, std::uint64_t L) {
  if (n == 1) return {};
  if (a == AllReduceAlgo::ring_chunked) {  // as in lesson 06: every chunk but one, twice
    const Partition part{L, n};
    const auto chunk = [&](int c) { return std::uint64_t(part.size(((c % n) + n) % n)); };
    const std::uint64_t m = 2 * std::uint64_t(n - 1);
    return {2 * L - chunk(k) - chunk(k + 1), 2 * L - chunk(k - 1) - chunk(k), m, m};
  }
  const Fold f(n);
  const std::uint64_t lg = std::uint64_t(f.log2_p2());
  if (k >= f.p2) return {L, L, 1, 1};  // folded: my buffer out, the sum back
  Traffic t;
  if (a == AllReduceAlgo::recursive_doubling) {
    t = {lg * L, lg * L, lg, lg};  // a whole buffer each way per step
  } else {
    // Halving: the halves I give up are every chunk but mine (L - own); I receive the halves
    // I keep, blocks of 2^j chunks around mine, j = log2 N' - 1 .. 0 (B). All-gather mirrors it.
    const Partition part{L, f.p2};
    std::uint64_t blocks = 0;
    for (int j = 0; j < f.log2_p2(); ++j) {
      const int lo = (k >> j) << j;
      blocks += part.begin(lo + (1 << j)) - part.begin(lo);
    }
    const std::uint64_t given = L - part.size(k);
    t = {given + blocks, blocks + given, 2 * lg, 2 * lg};
  }
  if (k < f.rem)
    t = {t.sent + L, t.recv + L, t.msgs_sent + 1,
         t.msgs_recv + 1};  // my folded rank's buffer and sum
  return t;
}

int formula_steps(AllReduceAlgo a, int n) {
  if (n == 1) return 0;
  const Fold f(n);
  switch (a) {
    case AllReduceAlgo::recursive_doubling:
      return f.log2_p2() + f.extra_steps();
    case AllReduceAlgo::recursive_halving:
      return 2 * f.log2_p2() + f.extra_steps();
    case AllReduceAlgo::ring_chunked:
      return 2 * (n - 1);
    default:
      return 0;
  }
}

// Whom `me` sends to at the algorithm's i-th step (0-based), or -1 when it sends nothing.
int formula_partner(AllReduceAlgo a, int n, int i, int me) {
  if (a == AllReduceAlgo::ring_chunked) return (me + 1) % n;
  const Fold f(n);
  const int lg = f.log2_p2(), exchanges = a == AllReduceAlgo::recursive_doubling ? lg : 2 * lg;
  if (f.rem) {
    if (i == 0) return me >= f.p2 ? me - f.p2 : -1;  // fold in: the extra ranks hand over
    if (i == exchanges + 1) return me < f.rem ? me + f.p2 : -1;  // fold out: the partners hand back
    --i;
  }
  if (me >= f.p2) return -1;
  if (a == AllReduceAlgo::recursive_doubling) return me ^ (1 << i);
  return me ^ (i < lg ? f.p2 >> (i + 1)
                      : 1 << (i - lg));  // halving d = N'/2 .. 1, doubling d = 1 .. N'/2
}

// The formulas in symbols (N' = the largest power of two <= N, when N is not one).
struct Symbols {
  std::string steps, rank, links, msgs;
};
Symbols symbols(AllReduceAlgo a, bool folded) {
  switch (a) {
    case AllReduceAlgo::recursive_doubling:
      return folded ? Symbols{"lgN'+2", "(lgN'+1)S", "(N'lgN'+2r)S", "lgN'+1"}
                    : Symbols{"lg N", "lg N S", "N lg N S", "lg N"};
    case AllReduceAlgo::recursive_halving:
      return folded ? Symbols{"2lgN'+2", "2(N'-1)S/N'+S", "2(N'-1+r)S", "2lgN'+1"}
                    : Symbols{"2 lg N", "2(N-1)S/N", "2(N-1)S", "2 lg N"};
    case AllReduceAlgo::ring_chunked:
      return {"2(N-1)", "2(N-1)S/N", "2(N-1)S", "2(N-1)"};
    default:
      return {"-", "-", "-", "-"};
  }
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"07", "recursive_halving",
                 "all-reduce in log2 N steps: recursive doubling and halving", 4, 1 << 20});
  lesson.set_text(
      "Pairing ranks across ever larger distances needs only log2 N steps: recursive doubling "
      "swaps whole buffers with rank ^ 2^k; recursive halving (Rabenseifner) halves the range it "
      "keeps at each step, then doubles it back, moving as few bytes as the ring in 2 log2 N "
      "steps.",
      "Topology: partners change every step (distance 1, 2, 4, ...). Shards: in recursive_halving "
      "each step halves the chunks a rank reduces and doubles their contributions; the all-gather "
      "then doubles the chunks it holds.");
  lesson.add_break(
      "doubling-one-step-short",
      "recursive_doubling: the loop stops at distance N/4 (mask < N/2), so each rank "
      "sums only its half of the world (core/collectives/all_reduce_recursive_doubling.hpp)");
  StudyOptions study_options;  // --algo and --calibration; the algorithms once the world is known
  add_study_options(lesson, study_options, kAlgos);
  const std::vector<AllReduceAlgo>& algos = study_options.algos;
  const std::string& calibration_path = study_options.calibration_path;
  const auto& opt = lesson.options();

  // Filled on rank 0 while it runs: each algorithm's step ids, and alpha/beta.
  AllReduceStudy study;

  // STEP 3 (rank 0, after the run): the fold, the schedule with its partners, every count
  // against its formula, the time against the cost model, and the scaling table.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size, e = sizeof(float), S = L * e;
    const Fold f(n);
    print_study_header(r, algos, study, L);

    // The fold, when N is not a power of two.
    if (n == 1) {
      fmt::print("N = 1: nothing to exchange\n");
    } else if (f.rem == 0) {
      fmt::print("N = {} = 2^{}: a power of two, no fold; partners are rank ^ 2^k\n", n,
                 f.log2_p2());
    } else {
      std::string in, out, rest;
      for (int x = f.p2; x < n; ++x) {
        in += fmt::format("{}r{} -> r{}", x > f.p2 ? ", " : "", x, x - f.p2);
        out += fmt::format("{}r{} -> r{}", x > f.p2 ? ", " : "", x - f.p2, x);
      }
      rest = f.rem <= 2
                 ? fmt::format("r{}{}", f.p2, f.rem == 2 ? fmt::format(" and r{}", n - 1) : "")
                 : fmt::format("r{} .. r{}", f.p2, n - 1);
      fmt::print(
          "N = {} is not a power of two: N' = {} ranks run the recursive algorithms, {} fold:\n", n,
          f.p2, f.rem);
      fmt::print(
          "  before (1 step):  {}    each hands its whole buffer to a partner, which adds it in\n",
          in);
      fmt::print("  middle:           r0 .. r{} run the algorithm as a world of {}; {} wait{}\n",
                 f.p2 - 1, f.p2, rest, f.rem == 1 ? "s" : "");
      fmt::print("  after (1 step):   {}    the partners hand the finished sum back\n", out);
      fmt::print(
          "  cost: 2 more steps; the partners send and receive S more, the folded ranks only S "
          "each way\n");
    }

    // The schedule of each recursive algorithm, and its partners checked against rank ^ 2^k.
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      if (!recursive(a)) continue;
      const std::string name = coll::to_string(a);
      const auto [first, last] = study.step_range[j];
      if (n <= 8) {
        std::vector<int> up;  // 1, 2, 4, .., N'/2: the distances 2^k
        for (int d = 1; d < f.p2; d *= 2) up.push_back(d);
        const std::vector<int> down(up.rbegin(), up.rend());
        if (a == AllReduceAlgo::recursive_doubling)
          fmt::print("\n{}: step k swaps the whole buffer with partner rank ^ 2^k, 2^k = {}\n",
                     name, fmt::join(up, ", "));
        else
          fmt::print(
              "\n{}: reduce-scatter, keep half, partner rank ^ d, d = {};\n"
              "  all-gather, swap ranges, d = {}\n",
              name, fmt::join(down, ", "), fmt::join(up, ", "));
        if (study_options.schedule || L <= 64) print_schedule(only_steps(r, first, last), 8, 64);
      }
      bool partners_ok = true;
      std::string wrong;
      for (const auto& log : r.logs)
        for (const auto& ev : log.spans) {
          if (ev.kind != SpanEvent::Kind::send || ev.meta.step < first || ev.meta.step > last)
            continue;
          const int want = formula_partner(a, n, ev.meta.step - first, log.rank);
          if (ev.peer != want && partners_ok) {
            partners_ok = false;
            wrong = fmt::format("step {}: r{} -> r{}, formula r{}", ev.meta.step, log.rank, ev.peer,
                                want);
          }
        }
      r.check(fmt::format("{}: every message goes to the formula's partner (rank ^ 2^k, the fold)",
                          name),
              partners_ok, wrong);
    }
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
      const Symbols sym = symbols(a, f.rem > 0);
      r.check(fmt::format("{}: steps = {} = {}", name, sym.steps, formula_steps(a, n)),
              m.steps == formula_steps(a, n), fmt::format("measured {}", m.steps));
      check_rank_formulas(
          r, name, m, [&](int k) { return formula_rank(a, k, n, L); }, e, sym.links);
      r.check(fmt::format("{}: one send in flight per rank", name), m.in_flight == (n > 1 ? 1 : 0),
              fmt::format("measured {}", m.in_flight));
    }
    lesson.set_cost_model(study_cost_model_json(cp, S, n, counted.predictions));

    // The summary: measured counts, each checked against the formula below it.
    const auto row = [](auto... cells) {
      std::string line = fmt::format("  {:<18}  {:>7}  {:>13}  {:>12}  {:>7}  {:>4}", cells...);
      fmt::print("{}\n", line.erase(line.find_last_not_of(' ') + 1));
    };
    fmt::print("\nsummary (S = {}; bytes sent; time = the slowest rank):\n",
               format_bytes(double(S)));
    row("algorithm", "steps", "one rank", "all links", "msgs", "fly");
    for (std::size_t j = 0; j < algos.size(); ++j) {
      const AllReduceAlgo a = algos[j];
      const StepCounts& m = meas[j];
      if (a == AllReduceAlgo::library) {
        row(coll::to_string(a), "-", "-", "-", "-", "-");
        continue;
      }
      row(coll::to_string(a), m.steps, format_bytes(double(m.max_sent)),
          format_bytes(double(m.all_links)), m.max_msgs, m.in_flight);
    }
    const bool traced =
        algos.front() != AllReduceAlgo::library;  // --algo library alone: nothing traced
    if (traced)
      fmt::print("formulas (checked on every rank: bytes and messages sent and received{}):\n",
                 f.rem ? fmt::format("; N' = {}, r = {} folded ranks", f.p2, f.rem) : "");
    for (AllReduceAlgo a : algos) {
      if (a == AllReduceAlgo::library) continue;
      const Symbols s = symbols(a, f.rem > 0);
      row(coll::to_string(a), s.steps, s.rank, s.links, s.msgs, "1");
    }
    if (traced)
      fmt::print(
          "  lg = log2; msgs: most messages one rank sends; fly: most sends one rank has in flight "
          "at once\n");
    // The formulas above are for chunks of equal size. Where L does not divide, the chunks
    // differ by one element, the checks count each rank's own, and "one rank" (the most any
    // rank sends) exceeds the even formula.
    std::string uneven;
    if (study_options.runs(AllReduceAlgo::recursive_halving) && L % std::uint64_t(f.p2) != 0)
      uneven = fmt::format("N' = {} chunks (halving)", f.p2);
    if (study_options.runs(AllReduceAlgo::ring_chunked) && L % std::uint64_t(n) != 0)
      uneven += fmt::format("{}N = {} chunks (the ring)", uneven.empty() ? "" : " and ", n);
    if (traced && !uneven.empty())
      fmt::print(
          "  uneven chunks: L = {} elements do not cut into {} of one size; they differ by\n"
          "  one element, each rank is checked with its own, and \"one rank\" (the most any rank\n"
          "  sends) can exceed the formula's even value\n",
          L, uneven);
    print_times(r, algos, meas, cp, S);

    // The scaling table, measured: each algorithm runs again on fresh in-process worlds of
    // N = 2, 4, 6, 8, 16 ranks (6 shows the fold's +2), and the counts read off those runs'
    // traces are checked against the formulas.
    const std::vector<int> ns = scaling_sizes({2, 4, 6, 8, 16}, n);
    if (!traced) return;
    fmt::print(
        "\nscaling with N (measured on in-process worlds of N ranks, in units of S;\n"
        "every row checked against its formula):\n");
    const auto srow = [](auto... cells) {
      fmt::print("  {:<18}  {:>4}  {:>7}  {:>6}  {:>10}  {:>10}\n", cells...);
    };
    srow("algorithm", "N", "log2 N", "steps", "one rank", "all links");
    for (AllReduceAlgo a : algos) {
      if (a == AllReduceAlgo::library) continue;
      for (std::size_t i = 0; i < ns.size(); ++i) {
        const int k = ns[i];
        const Fold fk(k);
        const std::uint64_t Lk =
            std::uint64_t(k) * std::uint64_t(fk.p2);  // every chunk whole, for N and N'
        const StepCounts m = scaling_counts(a, k, Lk, opt.seed);
        const std::uint64_t e = sizeof(float);
        std::uint64_t one = 0, all = 0;
        for (int q = 0; q < k; ++q) {
          one = std::max(one, formula_rank(a, q, k, Lk).sent);
          all += formula_rank(a, q, k, Lk).sent;
        }
        r.check(
            fmt::format("scaling: {} on {} ranks: steps and bytes as the formulas say",
                        coll::to_string(a), k),
            m.steps == formula_steps(a, k) && m.max_sent == one * e && m.all_links == all * e,
            fmt::format("steps {} (formula {}), one rank {} B ({}), all links {} B ({})", m.steps,
                        formula_steps(a, k), m.max_sent, one * e, m.all_links, all * e));
        const std::string lg =
            fk.rem ? fmt::format("{:.2f}", std::log2(double(k))) : fmt::format("{}", fk.log2_p2());
        const double s = double(Lk * e);
        srow(i == 0 ? coll::to_string(a) : "", fmt::format("{}{}", k == n ? "*" : "", k), lg,
             m.steps, in_units_of_s(double(m.max_sent) / s),
             in_units_of_s(double(m.all_links) / s));
      }
    }
    fmt::print("  * = this run's N, which was also measured at full size above\n");
    fmt::print(
        "  N = 8: recursive doubling is done in {} steps (log2 8 = 3), halving in {}, the ring in "
        "{}{}\n",
        formula_steps(AllReduceAlgo::recursive_doubling, 8),
        formula_steps(AllReduceAlgo::recursive_halving, 8),
        formula_steps(AllReduceAlgo::ring_chunked, 8),
        n == 8 ? " (this run: measured and checked)" : "");
    if (n == 1)
      fmt::print(
          "  (N = 1 has nothing to exchange: every count is 0; run with --ranks 2 or more)\n");
  });

  // Memory, counted from the buffers below: per rank the input, the result and the halving's
  // workspace (3 x 4 B per element) and the float64 reference (8 B): 20 B, 24 with slack.
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{24.0 * double(lesson.options().size), 0};
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    // STEP 1: every rank fills its own input of L float32; the reference every result is
    // checked against is the float64 sum of all the inputs, made on every rank from the seed;
    // alpha and beta for the predictions come from lesson 01's calibration
    // (lessons/common/all_reduce_study.cpp: prepare_study).
    StudyRank mine = prepare_study(comm, algos, opt.size, opt.seed, calibration_path, study);

    // STEP 2: each algorithm in turn on a copy of the input (untraced warm-up, traced and timed
    // run, every rank checks the sum). They live in core/collectives, which the README quotes:
    //   recursive_doubling  all_reduce_recursive_doubling.hpp   for mask = 1, 2, .., N/2: swap
    //                       the whole buffer with rank ^ mask and add
    //   recursive_halving   all_reduce_recursive_halving.hpp    for d = N/2 .. 1: keep half my
    //                       range, send the other half to rank ^ d, add; then d = 1 .. N/2: swap
    //                       ranges that double
    //   ring_chunked        reduce_scatter_ring.hpp, all_gather_ring.hpp (lesson 06)
    // N not a power of two: fold.hpp's fold_in before and fold_out after (one step each).
    for (AllReduceAlgo a : algos) run_study_algorithm(comm, mine, a, study);
  });
}
