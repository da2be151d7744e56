// distlab-analyze — a real training run's collectives as text, with no window: for scripts and
// the CI of your own jobs.
//
//   distlab-analyze traces/torch/ddp4-slow/            the run's summary and a table, one line
//   distlab-analyze rank0.json rank1.json ...          per collective call (real_run.hpp)
//   distlab-analyze --csv calls.csv run/               also one CSV row per call and rank
//   distlab-analyze --summary run/                     the summary only
//
// A run is PyTorch profiler traces, one per rank (pytorch_trace.hpp): a folder of them, or the
// files. It links the viewer's model only (no ImGui, no GL).
//
// Exit status: 0; 1 the traces did not load or the CSV was not written; 2 bad options, or a
// trace that is not a real run's.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "viewer/model/pytorch_trace.hpp"
#include "viewer/model/real_run.hpp"

namespace dv = distlab::viewer;

int main(int argc, char** argv) {
  std::vector<std::string> traces;
  std::string csv;
  bool summary = false;
  CLI::App app{
      "distlab-analyze: a real run's collectives (PyTorch profiler traces, one per rank): each "
      "call's straggler, waits, transfer time and bandwidth, and each rank's waits and "
      "communication hidden under computation"};
  app.add_option("traces", traces,
                 "the run: a folder of PyTorch profiler traces, or the files (one per rank)")
      ->required();
  app.add_option("--csv", csv, "also write one row per call and rank to this CSV file");
  app.add_flag("--summary", summary, "print the summary only, not the table of calls");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  dv::TraceModel m;
  try {
    for (const std::string& path : traces) {
      const std::string first = dv::trace_files(path).front();
      std::error_code ec;
      if (std::filesystem::exists(first, ec) && !dv::file_looks_like_pytorch(first)) {
        fmt::print(stderr,
                   "distlab-analyze: {} is not a PyTorch profiler trace (distlab-viewer "
                   "--describe tells a lesson's trace)\n",
                   first);
        return 2;
      }  // a file that does not open: loading says so
    }
    m = dv::load_trace_set(traces);
  } catch (const std::exception& e) {
    fmt::print(stderr, "distlab-analyze: {}\n", e.what());
    return 1;
  }
  const dv::RealRun run = dv::analyze_real_run(m);
  fmt::print("{}", summary ? dv::describe_real_run(m, run) : dv::real_run_table(m, run));
  if (!csv.empty()) {
    std::ofstream out(csv, std::ios::binary);
    out << dv::real_run_csv(m, run);
    out.close();
    if (!out) {
      fmt::print(stderr, "distlab-analyze: cannot write {}\n", csv);
      return 1;
    }
    fmt::print("distlab-analyze: wrote {} ({} calls)\n", csv, run.calls.size());
  }
  return 0;
}
