#include "lessons/common/all_reduce_study.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "core/base/clock.hpp"
#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/collectives/baseline.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/verify.hpp"

namespace distlab {

using coll::AllReduceAlgo;

std::vector<AllReduceAlgo> study_algos(const std::string& choice, bool under_mpi,
                                       const std::vector<AllReduceAlgo>& menu,
                                       const std::string& number) {
  std::vector<AllReduceAlgo> out;
  for (AllReduceAlgo a : menu)
    if (choice == "all" || choice == coll::to_string(a)) out.push_back(a);
  if (out.empty()) {
    std::string names;
    for (AllReduceAlgo a : menu) names += std::string(", ") + coll::to_string(a);
    // An algorithm of another all-reduce lesson (06, 07 and 15 share this): say whose.
    const auto lesson_of = [](const std::string& name) -> std::string {
      for (const auto& [lesson, names] :
           std::vector<std::pair<std::string, std::vector<std::string>>>{
               {"06", {"reduce_broadcast", "sequential", "parallel", "ring", "ring_chunked"}},
               {"07", {"recursive_doubling", "recursive_halving"}},
               {"15", {"tree", "double_binary_tree", "hierarchical"}}})
        if (std::find(names.begin(), names.end(), name) != names.end()) return lesson;
      return "";
    };
    const std::string whose = lesson_of(choice);
    throw UsageError(fmt::format(
        "--algo '{}' is not one of this lesson's algorithms; use all{} "
        "(library under mpirun or the launcher, --procs, only){}",
        choice, names,
        whose.empty() || whose == number ? "" : fmt::format(" (that one is lesson {}'s)", whose)));
  }
  if (!under_mpi && out == std::vector{AllReduceAlgo::library})
    throw UsageError(
        fmt::format("--algo library calls MPI_Allreduce under mpirun or Gloo's allreduce under "
                    "distlab's launcher: ./distlab lesson {} --mpi 4 --algo library (or --procs 4 "
                    "--transport gloo)",
                    number));
  if (!under_mpi) std::erase(out, AllReduceAlgo::library);
  if (under_mpi && out.back() != AllReduceAlgo::library)
    out.push_back(AllReduceAlgo::library);  // the comparison
  return out;
}

void add_study_options(Lesson& lesson, StudyOptions& options,
                       const std::vector<AllReduceAlgo>& menu) {
  std::string names;
  for (AllReduceAlgo a : menu)
    if (a != AllReduceAlgo::library)
      names += std::string(names.empty() ? "" : ", ") + coll::to_string(a);
  lesson.app()
      .add_option("--algo", options.algo, "all, or one of " + names + ", library (mpirun)")
      ->capture_default_str();
  options.calibration_path = path_beside(lesson.options().trace_path, "calibration.json");
  lesson.app()
      .add_option("--calibration", options.calibration_path,
                  "alpha and beta saved by lesson 01, for the predicted times")
      ->capture_default_str();
  lesson.app().add_flag("--schedule", options.schedule,
                        "print every step's messages (shown anyway for buffers of 64 elements or "
                        "fewer)");
  lesson.on_world([&lesson, &options, menu](const World& w) {
    options.algos = study_algos(options.algo, w.mode != Mode::threads, menu, lesson.info().number);
    std::string chosen;
    for (AllReduceAlgo a : options.algos)
      chosen += std::string(chosen.empty() ? "" : ", ") + coll::to_string(a);
    lesson.set_algorithm(chosen);
  });
}

namespace {
// Used when there is no calibration and no second rank to measure one with.
constexpr double kDefaultAlpha = 5e-6, kDefaultBeta = 1e-10;
constexpr std::uint64_t kStreamBytes = std::uint64_t{4}
                                       << 20;  // buffers this large stream from memory
}  // namespace

StudyRank prepare_study(Comm& comm, const std::vector<AllReduceAlgo>& algos, std::size_t length,
                        std::uint64_t seed, const std::string& calibration_path,
                        AllReduceStudy& study) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t L = length;
  StudyRank rank;
  rank.tiny = L <= 16 && n <= 8;
  for (AllReduceAlgo a : algos) rank.width = std::max(rank.width, std::strlen(coll::to_string(a)));

  rank.input = comm.alloc<float>(L, Category::data);
  fill_input(rank.input.view(), seed, me);
  if (rank.tiny)
    for (int k = 0; k < n; ++k) {
      std::vector<float> x(L);
      fill_input(View<float>{x.data(), L}, seed, k);
      comm.say("{:<{}}: {}\n", fmt::format("input of r{}", k), rank.width + 7, fmt::join(x, " "));
    }

  rank.sum = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(L));
  for (int k = 0; k < n; ++k) rank.sum += reference_input(seed, k, L);
  rank.mpi_sum = comm.alloc<float>(baseline::available(comm) ? L : 0, Category::data);
  if (baseline::available(comm)) {
    const std::string call =
        baseline::all_reduce(comm, rank.input.data(), rank.mpi_sum.data(), L, DType::f32);
    auto c = compare(View<const float>(rank.mpi_sum.view()), rank.sum, sum_tolerance(n));
    comm.check(call + " gives the sum", c.ok, c.detail());
  }

  // A simulated run takes alpha and beta from its platform (study_cost_params), not a ping-pong.
  if (kSimulatedBuild) return rank;
  FoundCalibration found = find_or_measure_calibration(
      comm, calibration_path, calibration_key(comm.world()), std::size_t{1} << 20, 16);
  if (me == 0) study.calibration = std::move(found);
  return rank;
}

void run_study_algorithm(Comm& comm, StudyRank& rank, AllReduceAlgo a, AllReduceStudy& study) {
  const int n = comm.size();
  const std::size_t L = rank.input.size();
  const std::string name = coll::to_string(a);
  Buffer<float> work = comm.alloc<float>(L, Category::data);  // input in, sum out
  ops::copy(work.view(), View<const float>(rank.input.view()));
  // reduce.hpp and broadcast.hpp name chunks 0..N-1 of a buffer they leave the caller to declare
  if (a == AllReduceAlgo::reduce_broadcast) comm.declare_buffer(name, L, n);
  // The warm-up, untraced (its step ids are skipped).
  comm.recorder().set_enabled(false);
  coll::all_reduce(comm, work.view(), a, name);
  comm.recorder().set_enabled(true);
  ops::copy(work.view(), View<const float>(rank.input.view()));
  comm.barrier();  // start together, so the phase times the algorithm and not a late rank
  const int first = comm.next_steps(0);
  (void)comm.take_most_open_sends();  // none are open: the count starts here
  {
    auto phase = comm.phase(name);
    coll::all_reduce(comm, work.view(), a, name);
  }
  rank.most_open_sends.push_back(comm.take_most_open_sends());
  if (comm.rank() == 0) study.most_open_sends.push_back(rank.most_open_sends.back());
  if (comm.rank() == 0) study.step_range.emplace_back(first, comm.next_steps(0) - 1);

  // A test's --inject-fault corrupts one element of the last rank's result before its check.
  if (comm.inject_fault()) inject_fault_into(work.view());
  auto c = compare(View<const float>(work.view()), rank.sum, sum_tolerance(n));
  comm.check(name + ": I hold the sum over every rank", c.ok, c.detail());
  if (baseline::available(comm) && a != AllReduceAlgo::library) {
    const std::vector<float> lib = to_host(rank.mpi_sum.view());
    Eigen::VectorXd theirs(static_cast<Eigen::Index>(L));
    for (std::size_t i = 0; i < L; ++i) theirs[static_cast<Eigen::Index>(i)] = lib[i];
    auto d = compare(View<const float>(work.view()), theirs, 2 * sum_tolerance(n));
    comm.check(name + " agrees with MPI_Allreduce", d.ok, d.detail());
  }
  if (rank.tiny)
    comm.say("{:<{}}: {}\n", name + " on r0", rank.width + 7, fmt::join(to_host(work.view()), " "));
}

CostParams study_cost_params(const RunResult& run, const AllReduceStudy& study,
                             const std::string& calibration_path, std::uint64_t bytes) {
  if (auto simulated = simulated_cost_params(run.hosts())) return *simulated;
  const std::string key = calibration_key(run.world);
  const auto& fit = study.calibration.fit;
  CostParams cp = load_cost_params(calibration_path, key, fit ? fit->alpha_s : kDefaultAlpha,
                                   fit ? fit->beta_s_per_byte : kDefaultBeta);
  cp.sharing = core_sharing(run.world);  // ranks sharing a core take turns
  // Buffers of 4 MiB and more stream from memory: beta refitted on the ping-pongs that large.
  if (study.calibration.from_file && fit && bytes >= kStreamBytes)
    cp.beta_s_per_byte = streaming_beta(*fit, double(kStreamBytes)).value_or(cp.beta_s_per_byte);
  if (!study.calibration.from_file)
    cp.source =
        fit ? fmt::format(
                  "a quick ping-pong r0 <-> r1 in this run (no \"{}\" in {}; "
                  "./distlab lesson 01 saves one)",
                  key, calibration_path)
            : fmt::format(
                  "fixed defaults alpha {}, 1/beta {:.0f} GB/s (no \"{}\" in {} and no second "
                  "rank to measure with)",
                  format_seconds(kDefaultAlpha), 1e-9 / kDefaultBeta, key, calibration_path);
  return cp;
}

void print_study_header(const RunResult& run, const std::vector<AllReduceAlgo>& algos,
                        const AllReduceStudy& study, std::uint64_t length) {
  const std::uint64_t S = length * sizeof(float);
  fmt::print("\nall-reduce of {} float32 per rank (S = {}) over N = {} ranks ({}, {})\n", length,
             format_bytes(double(S)), run.world.size, run_kind(run.world),
             to_string(run.world.device));
  std::string ids;  // which steps belong to which algorithm
  for (std::size_t j = 0; j < algos.size(); ++j) {
    const auto [first, last] = study.step_range[j];
    if (algos[j] != AllReduceAlgo::library && last >= first)
      ids += fmt::format("{}{} {}{}", ids.empty() ? "" : ", ", coll::to_string(algos[j]), first,
                         last > first ? fmt::format("-{}", last) : "");
  }
  if (!ids.empty()) fmt::print("step ids: {}\n", ids);
}

StudyCounts count_study(const RunResult& run, const std::vector<AllReduceAlgo>& algos,
                        const AllReduceStudy& study, const CostParams& cp, std::uint64_t bytes) {
  StudyCounts out;
  for (std::size_t j = 0; j < algos.size(); ++j) {
    const std::string name = coll::to_string(algos[j]);
    const auto [first, last] = study.step_range[j];
    out.counts.push_back(count_steps(run, first, last, name));
    const double predicted =
        predict_all_reduce(algos[j], run.world.size, double(bytes), run.world.ranks_per_node)
            .seconds(cp);
    out.predictions += fmt::format("{}{}:{{\"predicted_s\":{},\"measured_s\":{}}}",
                                   out.predictions.empty() ? "" : ",", json_string(name),
                                   json_number(predicted), json_number(out.counts.back().seconds));
  }
  return out;
}

void check_rank_formulas(RunResult& run, const std::string& name, const StepCounts& m,
                         const std::function<FormulaTraffic(int)>& formula, std::uint64_t e,
                         const std::string& links_symbol) {
  std::uint64_t links = 0;
  for (int k = 0; k < run.world.size; ++k) {
    const FormulaTraffic want = formula(k);
    const RankTraffic& got = m.ranks[std::size_t(k)];
    links += want.sent * e;
    run.check(fmt::format("{}: r{} sends its formula's bytes and messages", name, k),
              got.bytes_sent == want.sent * e && got.msgs_sent == want.msgs_sent,
              fmt::format("{} B in {} messages, formula {} B in {}", got.bytes_sent, got.msgs_sent,
                          want.sent * e, want.msgs_sent));
    run.check(fmt::format("{}: r{} receives its formula's bytes and messages", name, k),
              got.bytes_recv == want.recv * e && got.msgs_recv == want.msgs_recv,
              fmt::format("{} B in {} messages, formula {} B in {}", got.bytes_recv, got.msgs_recv,
                          want.recv * e, want.msgs_recv));
  }
  run.check(fmt::format("{}: all links carry {}", name, links_symbol), m.all_links == links,
            fmt::format("{} B, formula {} B", m.all_links, links));
}

std::string study_cost_model_json(const CostParams& cp, std::uint64_t bytes, int ranks,
                                  const std::string& predictions) {
  return fmt::format(
      "{{\"model\":\"alpha-beta-gamma (Thakur, Rabenseifner & Gropp 2005)\","
      "\"alpha_s\":{},\"beta_s_per_byte\":{},\"gamma_s_per_byte\":{},\"source\":{},"
      "\"bytes\":{},\"ranks\":{},\"algorithms\":{{{}}}}}",
      json_number(cp.alpha_s), json_number(cp.beta_s_per_byte), json_number(cp.gamma_s_per_byte),
      json_string(cp.source), bytes, ranks, predictions);
}

namespace {
// The model's parameters and where they came from.
void print_model_notes(const CostParams& cp) {
  fmt::print("  model: alpha {}, beta {:.4g} ns/B, gamma {:.4g} ns/B (the add);\n",
             format_seconds(cp.alpha_s), cp.beta_s_per_byte * 1e9, cp.gamma_s_per_byte * 1e9);
  // Where alpha and beta came from, wrapped at 100 columns (it may name a long path).
  std::string line = "  alpha and beta from";
  std::size_t at = 0;
  while (at < cp.source.size()) {
    const std::size_t end = std::min(cp.source.find(' ', at), cp.source.size());
    const std::string word = cp.source.substr(at, end - at);
    if (line.size() + 1 + word.size() > 100 && line.size() > 4) {
      fmt::print("{}\n", line);
      line = "   ";
    }
    line += " " + word;
    at = end + 1;
  }
  fmt::print("{}\n", line);
  if (cp.sharing > 1)
    fmt::print(
        "  {:.1f} ranks per core here: they take turns, so the model stretches its byte terms by "
        "{:.1f}\n",
        cp.sharing, cp.sharing);
}
}  // namespace

namespace {
// Several of the algorithm's messages leave one rank at once and share its link: the model's
// formula for it is the contended one (their bytes queue: (N-1) n beta through one port).
bool contended(AllReduceAlgo a) {
  return a == AllReduceAlgo::parallel || a == AllReduceAlgo::sequential ||
         a == AllReduceAlgo::reduce_broadcast;
}
}  // namespace

void check_simulated_times(RunResult& run, const std::vector<AllReduceAlgo>& algos,
                           const std::vector<StepCounts>& counts, const CostParams& cp,
                           std::uint64_t bytes) {
  const int n = run.world.size;
  if (n == 1) return;
  if (double(bytes) < kSimulatedCheckBytes) {
    fmt::print(
        "  simulated times are checked against the model from {} up (this buffer is {}: the "
        "start-ups the model leaves out weigh more)\n",
        format_bytes(kSimulatedCheckBytes), format_bytes(double(bytes)));
    return;
  }
  if (!cp.network->uniform) {
    fmt::print(
        "  {}'s routes differ between pairs of hosts (several switches, or links of several "
        "speeds):\n  the model takes the slowest route for every message, so these times are a "
        "report, not a check\n",
        cp.network->platform);
    return;
  }
  for (std::size_t j = 0; j < algos.size(); ++j) {
    if (algos[j] == AllReduceAlgo::library) continue;  // the library's own choice of algorithm
    const double predicted =
        predict_all_reduce(algos[j], n, double(bytes), run.world.ranks_per_node).seconds(cp);
    const double ratio = predicted > 0 ? counts[j].seconds / predicted : 0;
    const std::string name = coll::to_string(algos[j]);
    run.check(fmt::format("{}: simulated time within {:.0f}% of the model{}", name,
                          kSimulatedTolerance * 100,
                          contended(algos[j]) ? " (its contended formula: N-1 messages share one "
                                                "port)"
                                              : ""),
              std::abs(ratio - 1) <= kSimulatedTolerance,
              fmt::format("simulated {}, predicted {}, ratio {:.3f}",
                          format_seconds(counts[j].seconds), format_seconds(predicted), ratio));
  }
  fmt::print(
      "  simulated on one switch: every algorithm's time is checked against its formula within "
      "{:.0f}%\n",
      kSimulatedTolerance * 100);
  if (std::any_of(algos.begin(), algos.end(), contended))
    fmt::print(
        "  parallel and sequential send N-1 messages through one port at once, so their formula "
        "is the\n  contended one, (N-1) n beta, not n beta per message\n");
}

void print_times(RunResult& run, const std::vector<AllReduceAlgo>& algos,
                 const std::vector<StepCounts>& counts, const CostParams& cp, std::uint64_t bytes) {
  const int n = run.world.size;
  struct Time {
    std::string name;
    double measured, predicted;
  };
  std::vector<Time> times;
  for (std::size_t j = 0; j < algos.size(); ++j)
    times.push_back(
        {coll::to_string(algos[j]), counts[j].seconds,
         predict_all_reduce(algos[j], n, double(bytes), run.world.ranks_per_node).seconds(cp)});
  // What the predictions depend on first (alpha and beta: lesson 01's calibration, a ping-pong
  // just now, or a platform), then the predictions.
  fmt::print("\ntime (the slowest rank's phase) against the alpha-beta-gamma model:\n");
  print_model_notes(cp);
  fmt::print("  {:<18}  {:>10}  {:>10}  {:>18}\n", "algorithm", "measured", "predicted",
             "measured/predicted");
  // On a simulated cluster of one switch, from 1 MiB up, each row is a check: its verdict.
  const bool checked =
      cp.network && n > 1 && cp.network->uniform && double(bytes) >= kSimulatedCheckBytes;
  for (std::size_t j = 0; j < times.size(); ++j) {
    const Time& t = times[j];
    const double ratio = t.predicted > 0 ? t.measured / t.predicted : 0;
    std::string verdict;
    if (checked)
      verdict = algos[j] == AllReduceAlgo::library ? "  (the library's own algorithm)"
                                                   : "  " + simulated_verdict(ratio);
    fmt::print("  {:<18}  {:>10}  {:>10}  {:>18}{}\n", t.name, format_seconds(t.measured),
               format_seconds(t.predicted), t.predicted > 0 ? fmt::format("{:.2f}", ratio) : "-",
               verdict);
  }
  if (cp.network) check_simulated_times(run, algos, counts, cp, bytes);
  if (n == 1 || times.size() < 2) return;

  // Which to believe: the model ranks the algorithms by their alpha, beta and gamma terms; the
  // machine by what it did. Fastest first, each way.
  const auto ranked = [&](double Time::*key) {
    std::vector<Time> v = times;
    std::stable_sort(v.begin(), v.end(),
                     [&](const Time& a, const Time& b) { return a.*key < b.*key; });
    std::string names;
    for (const Time& t : v) names += (names.empty() ? "" : ", ") + t.name;
    return names;
  };
  const std::string by_measured = ranked(&Time::measured), by_model = ranked(&Time::predicted);
  fmt::print("  fastest first, measured: {}\n", by_measured);
  fmt::print("  fastest first, the model: {}\n", by_model);
  fmt::print("  the ranking {} the model's\n",
             by_measured == by_model ? "agrees with" : "differs from");
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (cp.sharing > 1)
    fmt::print(
        "  {} ranks share {} cores here: these times measure how the ranks share the cores, not\n"
        "  a network; believe the steps and bytes above, and rank by time on one core per rank\n",
        std::lround(cp.sharing * cores), cores);
  else if (run.world.mode == Mode::threads)
    fmt::print(
        "  in-process ranks copy through memory: alpha and beta are this machine's memory "
        "system's,\n  not a network's; the model's ratio above says how far that carries\n");
}

std::vector<int> scaling_sizes(std::vector<int> sizes, int n) {
  if (n > 1 && std::find(sizes.begin(), sizes.end(), n) == sizes.end())
    sizes.insert(std::upper_bound(sizes.begin(), sizes.end(), n), n);
  return sizes;
}

StepCounts scaling_counts(AllReduceAlgo algo, int ranks, std::uint64_t length, std::uint64_t seed) {
  const RunResult sub = run_in_process(ranks, [&](Comm& c) {
    Buffer<float> x = c.alloc<float>(length, Category::data);
    fill_input(x.view(), seed, c.rank());
    auto phase = c.phase("scaling");
    coll::all_reduce(c, x.view(), algo);
  });
  return count_steps(sub, 1, 1 << 30, "scaling");
}

std::string in_units_of_s(double x) {
  return x == 0 ? "0" : fmt::format("{:.4g} S", x);
}

}  // namespace distlab
