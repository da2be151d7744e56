// lesson.cpp — the lesson frame: the options every lesson shares, the world a run asks for, the
// launch (threads or mpirun: launch.hpp), and the end of every run: the report, the checks, the
// trace and the one line that says verified or FAILED.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/base/breaks.hpp"
#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/cost/simulated_platform.hpp"
#include "core/device/allocator.hpp"
#include "core/runtime/launch.hpp"
#include "core/runtime/runtime.hpp"
#include "core/trace/writer.hpp"
#include "core/transport/choice.hpp"

namespace distlab {

namespace {

// How long the other ranks under mpirun leave rank 0 to print a usage error (Lesson::run).
constexpr std::chrono::seconds kUsageGrace{5};

// A value as JSON: booleans and numbers in JSON's own grammar as they are ("-0.5", "1e9");
// anything else as a string, including numbers JSON cannot spell (".5", "+2", "007", "inf").
std::string json_value(const std::string& text) {
  if (text == "true" || text == "false") return text;
  if (is_json_number(text)) return text;
  return json_string(text);
}

// Counts every rank's checks into `result` and the run's wall time (the earliest start to the
// latest end on one clock); returns how many checks failed.
int count_rank_checks(RunResult& result) {
  double t0 = 1e300, t1 = -1e300;
  int failed = 0;
  for (const auto& log : result.logs) {
    t0 = std::min(t0, log.t_start + log.clock_offset_us);
    t1 = std::max(t1, log.t_end + log.clock_offset_us);
    for (const auto& c : log.checks) {
      ++result.checks;
      if (!c.ok) ++failed;
    }
  }
  result.wall_seconds = result.logs.empty() ? 0 : (t1 - t0) * 1e-6;
  return failed;
}

// The report's checks belong to rank 0, which made them; they go into the trace with the rest.
// Returns how many failed.
int adopt_report_checks(RunResult& result) {
  int failed = 0;
  for (auto& c : result.report_checks) {
    ++result.checks;
    if (!c.ok) ++failed;
    if (!result.logs.empty()) result.logs[0].checks.push_back(std::move(c));
  }
  result.report_checks.clear();
  return failed;
}

// The failed checks; with --checks (`all`) the passed ones too, each with its detail.
void print_checks(const RunResult& result, bool all) {
  for (const auto& log : result.logs)
    for (const auto& c : log.checks)
      if (!c.ok || all)
        fmt::print("check {} on r{}: {}{}{}\n", c.ok ? "passed" : "failed", log.rank, c.name,
                   c.detail.empty() ? "" : ": ", c.detail);
}

}  // namespace

Lesson::Lesson(LessonInfo info)
    : info_(std::move(info)),
      app_(std::make_unique<CLI::App>(
          fmt::format("distlab lesson {} {}: {}", info_.number, info_.name, info_.title))) {
  const char* dir = env_text("DISTLAB_TRACE_DIR");
#ifdef DISTLAB_TRACE_DIR_DEFAULT
  const std::string trace_dir = dir ? dir : DISTLAB_TRACE_DIR_DEFAULT;
#else
  const std::string trace_dir = dir ? dir : "traces";
#endif
  add_common_options(*app_, options_, info_.default_size, trace_dir + "/" + id() + ".json");
  app_->get_formatter()->column_width(34);
}

Lesson::~Lesson() = default;

void Lesson::add_root_option(int& root, const std::string& what) {
  app_->add_option("--root", root, what)->capture_default_str();
  on_world([&root](const World& w) {
    if (root < 0 || root >= w.size)
      throw UsageError(
          fmt::format("--root {} is not a rank of this world; use 0 .. {}", root, w.size - 1));
  });
}

void Lesson::add_break(const std::string& name, const std::string& what) {
  DL_CHECK(!name.empty() && name != "list", "a break needs a name other than 'list'");
  breaks_.emplace_back(name, what);
  std::string footer = "Classic bugs to switch on with --break NAME (the checks must catch each):";
  for (const auto& [n, w] : breaks_) footer += fmt::format("\n  {:<24} {}", n, w);
  app_->footer(footer);
}

void Lesson::describe_size(const std::string& what) {
  if (CLI::Option* size = app_->get_option_no_throw("--size")) size->description(what);
}

void Lesson::set_metadata(const std::string& key, const std::string& json_value) {
  for (auto& kv : metadata_)
    if (kv.first == key) {
      kv.second = json_value;
      return;
    }
  metadata_.emplace_back(key, json_value);
}

void Lesson::set_text(const std::string& concept_text, const std::string& look_at) {
  set_metadata("text", fmt::format(R"({{"concept":{},"look_at":{}}})", json_string(concept_text),
                                   json_string(look_at)));
}

void Lesson::set_value_tracks(const std::vector<std::string>& names) {
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + json_string(n);
  set_metadata("value_tracks", "[" + list + "]");
}

void Lesson::set_memory_formula(const std::string& label,
                                const std::vector<double>& bytes_per_rank) {
  std::string values;
  for (double b : bytes_per_rank) values += (values.empty() ? "" : ",") + json_number(b);
  set_metadata("memory_formula",
               fmt::format(R"({{"label":{},"bytes_per_rank":[{}]}})", json_string(label), values));
}

std::vector<std::pair<std::string, std::string>> Lesson::parameters() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* opt : app_->get_options()) {
    std::string name = opt->get_name(false, true);
    if (name.rfind("--", 0) != 0) continue;
    name = name.substr(2);
    if (name == "help" || name == "inject-fault" || name == "verbose") continue;
    if (name == "break" && opt->count() == 0) continue;  // a trace names a break only when on
    std::string value;
    if (opt->get_expected_min() == 0)
      value = opt->count() > 0 ? "true" : "false";
    else if (opt->count() > 0 && !opt->results().empty())
      value = opt->results().back();
    else
      value = opt->get_default_str();
    out.emplace_back(name, json_value(value));
  }
  return out;
}

namespace {

// --ranks-per-node, checked against the ranks; else the simulated platform's nodes; else 0 (the
// hierarchical algorithms' own default).
int resolve_ranks_per_node(int requested, int ranks) {
  if (requested > 0) {
    if (ranks % requested != 0)
      throw UsageError(fmt::format(
          "--ranks-per-node {} does not divide the {} ranks into whole nodes", requested, ranks));
    return requested;
  }
  const std::optional<int> platform = simulated_ranks_per_node(ranks);
  return platform ? *platform : 0;
}

}  // namespace

// The world this run asks for, from the options and the launcher; throws UsageError when they
// disagree, or when the run would not fit in memory.
World Lesson::resolve_world(Mode launched) {
  World world;
  finish_options(options_);
  if (!options_.break_name.empty() &&
      std::none_of(breaks_.begin(), breaks_.end(),
                   [&](const auto& b) { return b.first == options_.break_name; })) {
    if (breaks_.empty())
      throw UsageError(fmt::format("lesson {} has no --break variants", info_.number));
    std::string names;
    for (const auto& b : breaks_) names += (names.empty() ? "" : ", ") + b.first;
    throw UsageError(
        fmt::format("--break '{}' is not one of this lesson's: {}", options_.break_name, names));
  }
  const bool under_mpi = launched == Mode::mpi, under_gloo = launched == Mode::gloo;
  if (options_.transport == "mpi" && !under_mpi)
    throw UsageError(
        fmt::format("--transport mpi needs the lesson to be started by mpirun, e.g. ./distlab "
                    "lesson {} --mpi 4",
                    info_.number));
  if (options_.transport == "gloo" && !under_gloo)
    throw UsageError(fmt::format(
        "--transport gloo runs one process per rank, started by distlab's launcher: ./distlab "
        "lesson {} --procs 4 --transport gloo",
        info_.number));
  if (under_gloo && options_.transport != "auto" && options_.transport != "gloo" &&
      options_.transport != "shm")
    throw UsageError(fmt::format(
        "--transport {}: the processes distlab's launcher starts (--procs) talk over Gloo or "
        "shared memory; leave --transport out or give gloo or shm (mpirun runs the others: --mpi "
        "4)",
        options_.transport));
  if (options_.transport == "shm" && kSimulatedBuild)
    throw UsageError(
        "--transport shm polls shared memory, which a simulated cluster's clock never sees; "
        "leave --transport out under --sim");
  if (options_.transport == "shm" && !under_gloo && !under_mpi)
    throw UsageError(fmt::format(
        "--transport shm runs one process per rank on this host, started by distlab's launcher or "
        "mpirun: ./distlab lesson {0} --procs 4 --transport shm, or --mpi 4 --transport shm "
        "(in-process ranks share their memory already)",
        info_.number));
  if (options_.transport == "threads" && under_mpi)
    throw UsageError(
        "--transport threads cannot be used under mpirun; leave --transport out or run without "
        "mpirun");
  world.mode = launched;
  if (launched != Mode::threads) {
    world.size = launcher_size();
    if (options_.ranks != 0 && options_.ranks != world.size)
      throw UsageError(fmt::format(
          "--ranks {} disagrees with the {} processes {} started; leave --ranks out there",
          options_.ranks, world.size, under_mpi ? "mpirun" : "the launcher"));
#ifndef DISTLAB_HAVE_MPI
    if (under_mpi)
      throw UsageError(
          "this build has no MPI support (Open MPI was not found at configure time); run without "
          "mpirun");
#endif
#ifndef DISTLAB_HAVE_GLOO
    if (under_gloo)
      throw UsageError(
          "this build has no Gloo (libgloo-dev was not found at configure time: ./distlab deps "
          "installs it)");
#endif
  } else {
    world.size = options_.ranks != 0 ? options_.ranks : info_.default_ranks;
  }
  world.ranks_per_node = resolve_ranks_per_node(options_.ranks_per_node, world.size);
  if (options_.transport == "shm" && options_.device == "cuda")
    throw UsageError(
        "--transport shm moves host memory; GPU runs under mpirun take NCCL or staging (leave "
        "--transport out)");
  if (under_gloo || options_.transport == "shm") {  // host memory: auto means the CPU here
    if (options_.device == "cuda")
      throw UsageError(
          "--device cuda: Gloo's TCP pairs move host memory; GPU runs go under mpirun (--mpi 4 "
          "--device cuda) or on in-process ranks");
    world.device = Device::cpu;
  } else {
    world.device = resolve_device(options_.device);
  }
  check_transport_request(options_.transport, world.mode, world.device);
  world.transport = to_string(world.mode);
  for (const auto& check : on_world_) check(world);
  check_memory(world);
  return world;
}

int Lesson::run(int argc, char** argv, const std::function<void(Comm&)>& body) {
  const Mode launched = launched_by_mpi()       ? Mode::mpi
                        : launched_by_distlab() ? Mode::gloo
                                                : Mode::threads;
  const bool speaker = launched == Mode::threads || launcher_rank() == 0;
  // A usage error: every rank reaches the same verdict, and rank 0 says it. mpirun may end the job
  // as soon as any rank exits (Open MPI 5 does), which can be before rank 0 has printed; so under
  // mpirun the others give it kUsageGrace to say it and end the job, and say it themselves if the
  // job is still running then. distlab's launcher waits for every rank of a usage error.
  auto usage = [&](const std::string& message) {
    if (!speaker && launched == Mode::mpi) std::this_thread::sleep_for(kUsageGrace);
    if (speaker || launched == Mode::mpi)
      fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, message);
    return 2;
  };
  try {
    app_->parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return speaker ? app_->exit(e) : 0;  // --help
    return usage(fmt::format("{} (run with --help to see the options)", e.what()));
  }

  if (options_.break_name == "list") {
    if (speaker)
      for (const auto& b : breaks_) fmt::print("{}\n", b.first);
    return 0;
  }

  World world;
  try {
    world = resolve_world(launched);
  } catch (const UsageError& e) {
    return usage(e.what());
  }

  const BreakSwitch break_switch(options_.break_name);
  if (speaker && !options_.break_name.empty())
    for (const auto& [name, what] : breaks_)
      if (name == options_.break_name)
        fmt::print(
            "--break {}: {}\nThis run carries the bug on purpose; its checks should catch it.\n",
            name, what);

  if (world.mode == Mode::threads) {
    ThreadRun run = launch_threads(world, body, options_.deadlock_timeout, options_.verbose,
                                   options_.inject_fault);
    if (run.failed) {
      fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, run.failure);
      if (run.exit_code != 2)
        fmt::print("lesson {} {}: FAILED ({} ranks, threads, {})\n", info_.number, info_.name,
                   world.size, to_string(world.device));
      return run.exit_code;
    }
    RunResult result;
    result.world = world;
    result.world.rank = 0;
    result.logs = std::move(run.logs);
    return finish(result);
  }

  const auto report = [this](RunResult& result) { return finish(result); };
  if (world.mode == Mode::gloo) return launch_gloo(world, options_, info_.number, body, report);
  return launch_mpi(argc, argv, world, options_, info_.number, body, report);
}

int Lesson::finish(RunResult& result) {
  int failed = count_rank_checks(result);
  bool report_ok = true;
  try {
    if (on_report_) on_report_(result);
  } catch (const std::exception& e) {
    fmt::print(stderr, "distlab lesson {}: the report failed: {}\n", info_.number, e.what());
    report_ok = false;
  }
  failed += adopt_report_checks(result);
  result.verified = report_ok && result.checks > 0 && failed == 0;
  print_checks(result, options_.show_checks);

  int code = result.verified ? 0 : 1;
  std::string trace_note;
  if (!options_.no_trace) {
    try {
      trace_note = write_trace_file(result);
    } catch (const std::exception& e) {
      fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, e.what());
      code = 1;
    }
  }
  const std::string where = fmt::format("{} ranks, {}, {}", result.world.size,
                                        run_kind(result.world), to_string(result.world.device));
  // The plan against what the process took (tests/memory_plan.sh): the growth from the start to
  // the resident peak should stay within the plan, or the check before the run protects nothing.
  if (options_.verbose && planned_bytes_ >= 0)
    fmt::print("memory: planned {} for this process; resident {} at the start, peak {}\n",
               format_bytes(planned_bytes_), format_bytes(resident_start_),
               format_bytes(process_memory("VmHWM")));
  if (!options_.break_name.empty())
    fmt::print("--break {}: {}\n", options_.break_name,
               code == 0 ? "no check failed, so this bug went unnoticed"
                         : "caught, by the failed checks above");
  if (!trace_note.empty()) fmt::print("trace: {}\n", trace_note);
  if (code == 0)
    fmt::print("lesson {} {}: verified ({} checks, {}, {:.3f} s)\n", info_.number, info_.name,
               result.checks, where, result.wall_seconds);
  else if (result.checks == 0)
    fmt::print("lesson {} {}: FAILED (no checks ran, {})\n", info_.number, info_.name, where);
  else
    fmt::print("lesson {} {}: FAILED ({} of {} checks failed, {})\n", info_.number, info_.name,
               failed, result.checks, where);
  std::fflush(stdout);
  return code;
}

// Writes the trace; returns its path for the line before the verdict (relative to here when
// it is below it). Throws Error when the file cannot be written.
std::string Lesson::write_trace_file(const RunResult& result) const {
  TraceInfo ti;
  ti.lesson = id();
  ti.title = info_.title;
  ti.algorithm = algorithm_;
  ti.world = result.world;
  ti.parameters = parameters();
  for (auto& [key, value] : ti.parameters) {  // resolved values, not how they were typed
    if (key == "ranks") value = std::to_string(result.world.size);
    if (key == "size") value = std::to_string(options_.size);
  }
  ti.metadata = metadata_;
  if (kSimulatedBuild) {  // the timestamps are the simulated cluster's time (SimGrid's SMPI)
    const std::string platform = simulated_platform_name();
    ti.metadata.emplace_back("clock", json_string("simulated"));
    ti.metadata.emplace_back("platform", json_string(platform.empty() ? "unknown" : platform));
  }
  ti.verified = result.verified;
  ti.wall_seconds = result.wall_seconds;
  ti.cost_model = cost_model_;
  write_trace(options_.trace_path, ti, result.logs);
  std::error_code ec;
  const auto shown = std::filesystem::proximate(options_.trace_path, ec);
  const bool inside = !ec && !shown.empty() && shown.string().rfind("..", 0) != 0;
  return inside ? shown.string() : options_.trace_path;
}

}  // namespace distlab
