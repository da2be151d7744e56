#include "core/runtime/options.hpp"

#include <CLI/CLI.hpp>

#include "core/base/check.hpp"
#include "core/base/units.hpp"

namespace distlab {

void add_common_options(CLI::App& app, Options& o, std::uint64_t default_size,
                        const std::string& default_trace) {
  o.size_text = format_count(default_size);
  o.trace_path = default_trace;
  app.add_option("--ranks", o.ranks,
                 "number of in-process ranks (threads); under mpirun leave it out or give -np")
      ->check(CLI::Range(1, 1024));
  app.add_option("--device", o.device, "where the data lives: auto, cpu or cuda")
      ->capture_default_str();
  app.add_option(
         "--transport", o.transport,
         "how ranks talk: auto (threads; under mpirun mpi, or with --device cuda nccl when "
         "every rank has its own GPU; under ./distlab lesson NN --procs N shm on one host, gloo "
         "across hosts), threads, "
         "mpi (with --device cuda: through host memory), nccl, gloo (Gloo's TCP pairs), shm "
         "(shared memory between processes on one host: --procs N or mpirun)")
      ->capture_default_str();
  app.add_option("--size", o.size_text,
                 "elements per buffer; K, M, G suffixes are powers of 1024 (e.g. 4K, 64M, 1G)")
      ->capture_default_str();
  app.add_option("--seed", o.seed, "seed for the generated data")->capture_default_str();
  app.add_option("--trace", o.trace_path, "where to write the trace (Chrome Trace Event JSON)")
      ->capture_default_str();
  app.add_flag("--no-trace", o.no_trace, "write no trace file");
  app.add_flag("--verbose", o.verbose, "log every message: r0 -> r1 | step 3 | chunk 2 | 1.0 MiB");
  app.add_flag("--checks", o.show_checks,
               "print every check with what it measured, passed ones too (how close each came to "
               "its bound)");
  app.add_option(
         "--deadlock-timeout", o.deadlock_timeout,
         "end the run (exit 3) when nothing progresses for S seconds: no message matched, no rank "
         "finished "
         "or computed. A deadlock needs no timeout: it is reported as soon as the waits form one")
      ->capture_default_str();
  app.add_option("--ranks-per-node", o.ranks_per_node,
                 "ranks per node for the hierarchical all-reduce, consecutive ranks forming a "
                 "node (default: the simulated platform's nodes under --sim, else the largest "
                 "divisor of the ranks up to their square root)")
      ->check(CLI::Range(1, 1024));
  app.add_option("--break", o.break_name,
                 "switch on a classic bug, NAME from --break list; the lesson's checks must catch "
                 "it (exit 1, FAILED, the failing check says what broke)")
      ->group("Teaching");
  app.add_flag("--inject-fault", o.inject_fault,
               "corrupt the last rank's result (to see verification fail)")
      ->group("Testing");
}

void finish_options(Options& o) {
  o.size = parse_size(o.size_text);
  if (!(o.deadlock_timeout > 0))
    throw UsageError("--deadlock-timeout must be a positive number of seconds");
  if (o.transport != "auto" && o.transport != "threads" && o.transport != "mpi" &&
      o.transport != "nccl" && o.transport != "gloo" && o.transport != "shm")
    throw UsageError("--transport must be auto, threads, mpi, nccl, gloo or shm, not '" +
                     o.transport + "'");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw UsageError("--device must be auto, cpu or cuda, not '" + o.device + "'");
  if (o.trace_path.empty() && !o.no_trace)
    throw UsageError("--trace needs a path (or use --no-trace)");
}

}  // namespace distlab
