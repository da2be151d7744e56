// runtime.hpp — a lesson program's frame: options, launch of ranks, failure, report, trace.
//
//   int main(int argc, char** argv) {
//     distlab::Lesson lesson({"02", "scatter_gather", "scatter and gather from a root", 4, 1 << 20});
//     int root = 0;
//     lesson.app().add_option("--root", root, "rank that scatters and gathers");
//     return lesson.run(argc, argv, [&](distlab::Comm& comm) { ... });
//   }
//
// run() parses the options, starts the ranks (threads, or this process's rank under
// mpirun), runs the body on every rank, and then on rank 0: collects every rank's log,
// calls the report hook, writes the trace and prints the final line, which says
// `verified` only when every rank's every check passed. Exit status: 0 verified,
// 1 a check failed or a rank threw, 2 bad options (or a run too big for the memory available,
// refused before it starts; a rank that still runs out of memory also ends with 2), 3 deadlock
// or no progress for --deadlock-timeout.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/base/breaks.hpp"
#include "core/base/world.hpp"
#include "core/comm/comm.hpp"
#include "core/runtime/options.hpp"
#include "core/trace/recorder.hpp"

namespace distlab {

struct LessonInfo {
  std::string number;  // "02"
  std::string name;    // "scatter_gather"
  std::string title;   // one line for --help and the trace
  int default_ranks = 4;
  std::uint64_t default_size = 1 << 20;
};

// Per-rank traffic, counted from the recorded messages (window accesses are none).
struct RankTraffic {
  std::uint64_t bytes_sent = 0, bytes_recv = 0;
  std::uint64_t msgs_sent = 0, msgs_recv = 0;
  int steps = 0;            // distinct steps in which this rank sent or received
  double comm_seconds = 0;  // time with at least one message in flight
};

struct RunResult {
  World world;  // size, mode, device, transport (rank is 0)
  std::vector<RankLog> logs;
  double wall_seconds = 0;
  bool verified = false;
  int checks = 0;

  // Checks the report hook makes (formulas against measured counts); they count like any.
  std::vector<CheckResult> report_checks;
  void check(const std::string& name, bool ok, const std::string& detail = {}) {
    report_checks.push_back({name, ok, detail});
  }

  // Traffic of the messages whose step lies in [first_step, last_step] (default: all).
  std::vector<RankTraffic> traffic(int first_step = -1, int last_step = 1 << 30) const;
  int steps() const;                       // distinct global steps of messages, all ranks
  std::vector<std::string> hosts() const;  // each rank's host, in rank order
};

// "step 1: r0 -> r1 chunk 1 (4 B)" lines under a heading, one per step; only for worlds of at
// most `max_ranks` ranks (larger ones would flood the terminal).
void print_schedule(const RunResult& result, int max_ranks = 8, int max_lines = 48);
// Per-rank table under a heading: bytes sent and received, messages, steps, communication time.
void print_traffic(const RunResult& result, const std::string& title = "traffic per rank");

// Runs `body` on `ranks` fresh in-process ranks (threads; on the CPU unless `device` says cuda,
// each rank then bound to GPU rank % count as in a lesson) and returns what they recorded;
// throws Error with the failing rank's message. For tables that need world sizes other than
// the run's own (lesson 06 measures its scaling table this way, from the report).
RunResult run_in_process(int ranks, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s = 30, Device device = Device::cpu);

// What a run allocates, for the check before any rank starts: each rank's own buffers
// (per_rank: its data, copies, scratch and references) and what the process holds once besides.
struct MemoryNeed {
  double per_rank = 0;
  double once = 0;
  std::string shrink =
      "a smaller --size";  // what the refusal tells the user to change, besides fewer ranks
};
// The memory this process may still take: /proc/meminfo's MemAvailable, lowered to what the
// cgroup's memory.max leaves, where one is set. -1 when neither can be read.
double memory_available();
// A size line of /proc/self/status ("VmRSS": resident now, "VmHWM": the resident peak), in bytes;
// -1 when it cannot be read.
double process_memory(const char* key);
// Bookkeeping each in-process rank costs besides its buffers (its thread's stack as touched,
// its Comm, mailbox and log), counted with every plan.
inline constexpr double kRankOverheadBytes = 512.0 * 1024;
// The refusal for a run that needs more than is available: one sentence with what it needs,
// what is available and what to change; "" when it fits. `ranks_here` ranks share `available`
// bytes (all of them in-process; those on this node under mpirun); `where` names the memory.
std::string memory_refusal(const MemoryNeed& need, int ranks_here, double available,
                           const std::string& where);

class Lesson {
 public:
  explicit Lesson(LessonInfo info);
  ~Lesson();

  // The lesson's command line, to add its own options (include <CLI/CLI.hpp> to use it).
  CLI::App& app() { return *app_; }
  const Options& options() const { return options_; }
  const LessonInfo& info() const { return info_; }
  std::string id() const { return info_.number + "_" + info_.name; }

  // Checked once the world size is known, before any rank starts; throw UsageError.
  void on_world(std::function<void(const World&)> f) { on_world_.push_back(std::move(f)); }
  // What a run will allocate, from the options and the world; checked against the memory
  // available before any rank starts (exit 2 with a sentence when it does not fit).
  void needs_memory(std::function<MemoryNeed(const World&)> f) { needs_memory_ = std::move(f); }
  // What --size means in this lesson, for --help ("units per hidden layer"), when not elements.
  void describe_size(const std::string& what);
  // Adds --root (default 0), checked to be a rank of the world.
  void add_root_option(int& root, const std::string& what);
  // A classic bug this lesson can carry, switched on by `--break name` (core/base/breaks.hpp):
  // `what` says the mistake in one sentence; the code asks broken(name) where the bug lives.
  // `--break list` prints the names, one per line; --help lists them with what they do.
  void add_break(const std::string& name, const std::string& what);
  // Runs on rank 0 after all ranks have finished, before the final line: tables, and checks
  // of measured counts against formulas (result.check).
  void on_report(std::function<void(RunResult&)> f) { on_report_ = std::move(f); }
  // Extra otherData fields for the trace: key and an already-encoded JSON value.
  void set_metadata(const std::string& key, const std::string& json_value);
  void set_algorithm(std::string algorithm) { algorithm_ = std::move(algorithm); }
  // otherData.text: the lesson's concept and what to look at, shown by the viewer's Stats panel.
  void set_text(const std::string& concept_text, const std::string& look_at);
  // otherData.memory_formula: the ledger total each rank should reach, with the formula's label
  // ("4 + 12/N bytes per parameter"); the viewer's Memory panel draws it over the bars.
  void set_memory_formula(const std::string& label, const std::vector<double>& bytes_per_rank);
  // otherData.cost_model: the cost model's prediction (an encoded JSON value).
  void set_cost_model(std::string json_value) { cost_model_ = std::move(json_value); }
  // The values (Recorder::value names) the viewer's Timeline draws as tracks over the run.
  void set_value_tracks(const std::vector<std::string>& names);

  int run(int argc, char** argv, const std::function<void(Comm&)>& body);

 private:
  World resolve_world(Mode launched);  // throws UsageError
  int finish(RunResult& result);
  std::string write_trace_file(const RunResult& result) const;  // throws Error
  void check_memory(const World& world);  // throws UsageError; notes the plan for --verbose
  std::vector<std::pair<std::string, std::string>> parameters() const;

  LessonInfo info_;
  std::unique_ptr<CLI::App>
      app_;  // held by pointer: CLI11 costs seconds in every file that includes it
  Options options_;
  std::vector<std::function<void(const World&)>> on_world_;
  std::function<void(RunResult&)> on_report_;
  std::function<MemoryNeed(const World&)> needs_memory_;
  double planned_bytes_ =
      -1;  // this process's plan (check_memory): its ranks' buffers and the rest
  double resident_start_ = -1;  // VmRSS when the plan was made, before any rank started
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::string algorithm_;
  std::vector<std::pair<std::string, std::string>> breaks_;  // name, what
  std::string cost_model_ = "null";
};

// `name` in the folder of `path` ("traces/06_x.json", "calibration.json" ->
// "/abs/traces/calibration.json"), as an absolute path: a default shown in --help is the file
// that will be used, wherever the program runs from.
std::string path_beside(const std::string& path, const std::string& name);

// True when this process was started by mpirun / mpiexec (Open MPI, MPICH or PMIx).
bool launched_by_mpi();
// True when distlab's launcher started it (./distlab lesson NN --procs N): DISTLAB_WORLD_SIZE.
bool launched_by_distlab();
// The world size and rank the launcher announced in the environment (1 and 0 otherwise).
int launcher_size();
int launcher_rank();
// This process's rank among those on its node (the GPU it takes under mpirun).
int launcher_local_rank();

}  // namespace distlab
