// distlab_trace_load_bench — how fast the viewer's trace model loads a file, and at what peak
// memory.
//
// Loads FILE once with load_trace_model (read, parse, build) and prints the wall time, the
// events, the file size, the throughput and the process's peak resident memory (VmHWM), as a
// multiple of the file size. Two peaks are shown:
//   peak RSS   everything the process ever held: code, libraries, the padded file, the model
//   load peak  the peak minus the resident memory just before loading: what loading added
// The targets (issue: 1 M events, about 100 MB, in at most 2 s, at most 3x the file) are
// checked with --check: the load time against --max-seconds and the load peak against
// --max-ratio; on a large file the two peaks differ by a few MB, on a small one the baseline
// would dominate, which is why the check uses the load peak.
//
//   distlab_trace_gen -o /tmp/1m.json && distlab_trace_load_bench /tmp/1m.json [--check]
//
// A real run, several files or a folder of PyTorch profiler traces (one per rank), loads with
// load_trace_set: read, parse, collectives matched and clocks aligned (issue: a 4-rank set of
// 1 M events in all within 2 s); its file size is the files' sum.
//   distlab_trace_gen --pytorch --ranks 4 -o /tmp/run && distlab_trace_load_bench /tmp/run --check
// Gzipped files (distlab_trace_gen --gzip) count at the size of the JSON they inflate to (the
// issue's target for a 1 M-event gzipped 4-rank set: 3 s).
#include <fmt/format.h>
#include <sys/resource.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "viewer/model/gzip.hpp"
#include "viewer/model/pytorch_trace.hpp"
#include "viewer/model/trace_model.hpp"

namespace {

// Sanitizer builds (the asan and tsan presets run the smoke test too) are slower and hold
// shadow memory: their figures are printed, not held to the targets.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// A "VmHWM:   1234 kB" line of /proc/self/status, in bytes; -1 when absent.
std::int64_t proc_status_bytes(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  return -1;
}

std::int64_t peak_rss_bytes() {
  const std::int64_t hwm = proc_status_bytes("VmHWM");
  if (hwm >= 0) return hwm;
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;  // KiB on Linux
}

double mb(double bytes) {
  return bytes / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "distlab_trace_load_bench: time load_trace_model on one file and report its peak memory");
  std::vector<std::string> paths;
  bool check = false;
  double max_seconds = 2.0, max_ratio = 3.0;
  app.add_option("files", paths,
                 "a trace (distlab_trace_gen writes large ones), or a real run: a folder of "
                 "PyTorch traces or several files")
      ->required();
  app.add_flag("--check", check, "exit 1 when the load time or the load peak exceeds the targets");
  app.add_option("--max-seconds", max_seconds,
                 "load time target; 0: the time is reported, not checked (a shared machine's "
                 "load can stretch it, as in the test suite)")
      ->capture_default_str();
  app.add_option("--max-ratio", max_ratio, "load peak / file size target")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const std::string& path = paths.front();
  std::error_code ec;
  const bool run = paths.size() > 1 || std::filesystem::is_directory(path, ec);
  double file_bytes = 0;
  std::vector<std::string> files;
  try {
    for (const auto& p : paths)
      for (auto& f : distlab::viewer::trace_files(p)) files.push_back(std::move(f));
  } catch (const distlab::Error& e) {
    fmt::print(stderr, "distlab_trace_load_bench: {}\n", e.what());
    return 2;
  }
  double gzip_bytes = 0;  // gzipped files: the JSON's size is what they inflate to
  for (const auto& f : files) {
    if (distlab::viewer::is_gzip_file(f)) {
      gzip_bytes += static_cast<double>(std::filesystem::file_size(f, ec));
      try {
        file_bytes += static_cast<double>(distlab::viewer::gunzip_file(
            f, [](std::size_t) {}, [](const char*, std::size_t) {}));
      } catch (const distlab::Error& e) {
        fmt::print(stderr, "distlab_trace_load_bench: {}\n", e.what());
        return 2;
      }
      continue;
    }
    file_bytes += static_cast<double>(std::filesystem::file_size(f, ec));
    if (ec) break;
  }
  if (ec || file_bytes <= 0) {
    fmt::print(
        stderr,
        "distlab_trace_load_bench: cannot read {} ({}); give an existing, non-empty trace file\n",
        path, ec ? ec.message() : "empty");
    return 2;
  }
  const std::int64_t rss_before = std::max<std::int64_t>(0, proc_status_bytes("VmRSS"));

  const auto t0 = std::chrono::steady_clock::now();
  std::size_t events = 0, spans = 0, messages = 0, collectives = 0;
  double clock_error = -1;
  try {
    const distlab::viewer::TraceModel m =
        run ? distlab::viewer::load_trace_set(paths) : distlab::viewer::load_trace_model(path);
    events = m.events, spans = m.spans.size(), messages = m.messages.size();
    collectives = m.collectives.size(), clock_error = m.info.clock_error_us;
  } catch (const distlab::Error& e) {
    fmt::print(stderr, "distlab_trace_load_bench: {}\n", e.what());
    return 2;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double peak = static_cast<double>(peak_rss_bytes());
  const double load_peak = peak - static_cast<double>(rss_before);

  fmt::print("file        {}{}\n", path,
             run ? fmt::format(" (a real run: {} files, {} collectives matched, clocks agree "
                               "within {:.3f} us)",
                               files.size(), collectives, clock_error)
                 : "");
  fmt::print("file size   {:10.1f} MB\n", mb(file_bytes));
  if (gzip_bytes > 0)
    fmt::print("gzipped     {:10.1f} MB      (the file size above is the JSON they inflate to)\n",
               mb(gzip_bytes));
  fmt::print("events      {:10}      ({} spans, {} messages)\n", events, spans, messages);
  fmt::print("load time   {:10.3f} s       (target <= {} s)\n", seconds, max_seconds);
  fmt::print("throughput  {:10.1f} MB/s\n", mb(file_bytes) / seconds);
  fmt::print("peak RSS    {:10.1f} MB      {:.2f} x file\n", mb(peak), peak / file_bytes);
  fmt::print("load peak   {:10.1f} MB      {:.2f} x file (target <= {} x)\n", mb(load_peak),
             load_peak / file_bytes, max_ratio);
  if (!check) return 0;
  if (kSanitized) {
    fmt::print("sanitizer build: the targets are not checked\n");
    return 0;
  }
  int status = 0;
  if (max_seconds > 0 && seconds > max_seconds) {
    fmt::print(stderr, "FAIL: loading took {:.3f} s, more than the {} s target\n", seconds,
               max_seconds);
    status = 1;
  }
  if (load_peak / file_bytes > max_ratio) {
    fmt::print(stderr,
               "FAIL: loading peaked at {:.2f} x the file size, more than the {} x target\n",
               load_peak / file_bytes, max_ratio);
    status = 1;
  }
  if (status == 0 && max_seconds > 0)
    fmt::print("ok: within {} s and {} x the file size\n", max_seconds, max_ratio);
  else if (status == 0)
    fmt::print("ok: within {} x the file size (the time not checked)\n", max_ratio);
  return status;
}
