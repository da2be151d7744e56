// options.hpp — the options every lesson takes (CLI11).
//
//   --ranks N              in-process ranks (default: the lesson's); under mpirun: absent or = -np
//   --device auto|cpu|cuda
//   --transport auto|threads|mpi|nccl|gloo|shm   (choice.hpp says which runs take which)
//   --size N[K|M|G]        elements of the lesson's element type; K, M, G are powers of 1024
//   --seed S               data seed
//   --trace PATH           default traces/NN_name.json; --no-trace writes none
//   --verbose              log every message: "r0 -> r1 | step 3 | chunk 2 | 1.0 MiB"
//   --checks               print every check with its detail, passed ones too
//   --deadlock-timeout S   no progress for S seconds (nothing matched, finished or computed) ends the run
//                          with who waits for whom; a deadlock is reported without waiting for it
//   --ranks-per-node G     ranks per node for hierarchical algorithms (default: the simulated
//                          platform's nodes under --sim, else the largest divisor <= sqrt(ranks))
//   --break NAME           switch on one of the lesson's classic bugs (--break list names them)
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;  // <CLI/CLI.hpp>: included where options are added, not by every file of the runtime
}  // namespace CLI

namespace distlab {

struct Options {
  int ranks = 0;  // 0: the lesson's default (threads) or the launcher's (mpirun)
  std::string device = "auto";
  std::string transport = "auto";
  std::string size_text;  // as typed; parsed into size
  std::uint64_t size = 0;
  std::uint64_t seed = 42;
  std::string trace_path;
  bool no_trace = false;
  bool verbose = false;
  bool show_checks = false;  // --checks
  double deadlock_timeout = 30.0;
  int ranks_per_node = 0;     // 0: the platform's nodes under --sim, else the algorithm's default
  std::string break_name;     // --break: "" for none, "list" to print the lesson's names
  bool inject_fault = false;  // corrupts one rank's result so tests can see the check fail
};

void add_common_options(CLI::App& app, Options& options, std::uint64_t default_size,
                        const std::string& default_trace);

// Parses --size and checks ranges; throws UsageError with one sentence.
void finish_options(Options& options);

}  // namespace distlab
