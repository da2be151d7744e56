#include "core/runtime/runtime.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <system_error>
#include <thread>

#include "core/base/check.hpp"
#include "core/base/json.hpp"
#include "core/base/units.hpp"
#include "core/device/allocator.hpp"
#include "core/device/cuda_context.hpp"
#include "core/trace/writer.hpp"
#include "core/transport/choice.hpp"
#include "core/transport/threads.hpp"

#ifdef DISTLAB_HAVE_MPI
#include "core/transport/mpi.hpp"
#include "core/transport/open_mpi_gpu.hpp"
#endif

namespace distlab {

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names)
    if (const char* v = env(n)) return std::atoi(v);
  return fallback;
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

// A value as JSON: booleans and numbers in JSON's own grammar as they are ("-0.5", "1e9");
// anything else as a string, including numbers JSON cannot spell (".5", "+2", "007", "inf").
std::string json_value(const std::string& text) {
  if (text == "true" || text == "false") return text;
  static const std::regex number(R"(-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
  if (std::regex_match(text, number)) return text;
  return json_string(text);
}

}  // namespace

std::string path_beside(const std::string& path, const std::string& name) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path() / name;
  std::error_code ec;
  const std::filesystem::path whole = std::filesystem::absolute(p, ec).lexically_normal();
  return ec ? p.string() : whole.string();
}

bool launched_by_mpi() {
  return env("OMPI_COMM_WORLD_SIZE") || env("PMI_SIZE") || env("PMIX_RANK") ||
         env("MPI_LOCALNRANKS");
}
int launcher_size() {
  return env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
}
int launcher_rank() {
  return env_int({"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}, 0);
}
int launcher_local_rank() {
  return env_int({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "PMI_LOCAL_RANK"},
                 launcher_rank());
}

// --- memory ------------------------------------------------------------------------

namespace {

double read_number_file(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return -1;
  char buf[64] = {};
  const bool ok = std::fgets(buf, sizeof buf, f) != nullptr;
  std::fclose(f);
  if (!ok || std::strncmp(buf, "max", 3) == 0) return -1;
  return std::strtod(buf, nullptr);
}

// A "Key:   1234 kB" line of a /proc file (meminfo, self/status), in bytes; -1 when absent.
double read_kib_field(const char* path, const char* key) {
  double bytes = -1;
  const std::size_t n = std::strlen(key);
  if (std::FILE* f = std::fopen(path, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f))
      if (std::strncmp(line, key, n) == 0 && line[n] == ':')
        bytes = std::strtod(line + n + 1, nullptr) * 1024;
    std::fclose(f);
  }
  return bytes;
}

}  // namespace

double memory_available() {
  double available = read_kib_field("/proc/meminfo", "MemAvailable");
  const double limit = read_number_file("/sys/fs/cgroup/memory.max");
  const double used = read_number_file("/sys/fs/cgroup/memory.current");
  if (limit > 0 && used >= 0) {
    const double left = std::max(0.0, limit - used);
    available = available < 0 ? left : std::min(available, left);
  }
  return available;
}

double process_memory(const char* key) {
  return read_kib_field("/proc/self/status", key);
}

std::string memory_refusal(const MemoryNeed& need, int ranks_here, double available,
                           const std::string& where) {
  if (available < 0) return {};  // nothing to compare with: the run goes ahead
  const double total = need.per_rank * ranks_here + need.once;
  // The other programs on the machine move: keep a tenth of what is free for them.
  if (total <= 0.9 * available) return {};
  return fmt::format(
      "this run needs about {} of {} ({} rank{} x {} each{}), but {} is available; use {} or fewer "
      "ranks",
      format_bytes(total), where, ranks_here, ranks_here == 1 ? "" : "s",
      format_bytes(need.per_rank),
      need.once > 0 ? fmt::format(" + {} once", format_bytes(need.once)) : "",
      format_bytes(available), need.shrink);
}

void Lesson::check_memory(const World& world) {
  MemoryNeed need = needs_memory_ ? needs_memory_(world) : MemoryNeed{};
  const int here = world.mode == Mode::threads
                       ? world.size
                       : std::max(1, env_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1));
  if (world.device == Device::cuda) {
    // The buffers live on the GPUs, shared round-robin by the ranks; the host keeps the rest.
    const int devices = std::max(1, cuda_device_count());
    const int per_device = (here + devices - 1) / devices;
    const std::string gpu = memory_refusal({need.per_rank, 0, need.shrink}, per_device,
                                           cuda_free_bytes(0), "GPU memory on device 0");
    if (!gpu.empty()) throw UsageError(gpu);
    need.per_rank = 0;
  }
  need.per_rank += world.mode == Mode::threads ? kRankOverheadBytes : 0;
  const std::string host = memory_refusal(need, here, memory_available(), "memory");
  if (!host.empty()) throw UsageError(host);
  planned_bytes_ = need.per_rank * here + need.once;
  resident_start_ = process_memory("VmRSS");
}

// --- results --------------------------------------------------------------------------

std::vector<RankTraffic> RunResult::traffic(int first_step, int last_step) const {
  std::vector<RankTraffic> out(logs.size());
  for (std::size_t i = 0; i < logs.size(); ++i) {
    auto& t = out[i];
    std::set<int> steps;
    std::vector<std::pair<double, double>> spans;
    for (const auto& e : logs[i].spans) {
      if (e.kind == SpanEvent::Kind::plain) continue;
      if (first_step >= 0 && (e.meta.step < first_step || e.meta.step > last_step)) continue;
      if (e.kind == SpanEvent::Kind::send) {
        t.bytes_sent += e.bytes;
        ++t.msgs_sent;
      } else {
        t.bytes_recv += e.bytes;
        ++t.msgs_recv;
      }
      if (e.meta.step >= 0) steps.insert(e.meta.step);
      spans.emplace_back(e.t0, e.t1);
    }
    t.steps = static_cast<int>(steps.size());
    // Time covered by at least one message: the union of their intervals.
    std::sort(spans.begin(), spans.end());
    double end = -1e300;
    for (const auto& [a, b] : spans) {
      if (a > end) {
        t.comm_seconds += (b - a) * 1e-6;
        end = b;
      } else if (b > end) {
        t.comm_seconds += (b - end) * 1e-6;
        end = b;
      }
    }
  }
  return out;
}

int RunResult::steps() const {
  std::set<int> steps;
  for (const auto& log : logs)
    for (const auto& e : log.spans)
      if (e.kind != SpanEvent::Kind::plain && e.meta.step >= 0) steps.insert(e.meta.step);
  return static_cast<int>(steps.size());
}

void print_schedule(const RunResult& result, int max_ranks, int max_lines) {
  if (result.world.size > max_ranks) return;
  fmt::print("\nschedule (one line per step):\n");
  std::map<int, std::vector<std::pair<int, const SpanEvent*>>> by_step;
  for (const auto& log : result.logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::send && e.meta.step >= 0)
        by_step[e.meta.step].emplace_back(log.rank, &e);
  int lines = 0;
  for (auto& [step, sends] : by_step) {
    if (lines++ >= max_lines) {
      fmt::print("  ... ({} steps in all)\n", by_step.size());
      break;
    }
    std::sort(sends.begin(), sends.end(), [](auto& a, auto& b) { return a.first < b.first; });
    std::string line = fmt::format("  step {:>2}:", step);
    for (std::size_t i = 0; i < sends.size(); ++i) {
      const auto& [src, e] = sends[i];
      line += fmt::format("{} r{} -> r{}", i ? "," : "", src, e->peer);
      if (e->meta.chunk_begin >= 0) {
        if (e->meta.chunk_end == e->meta.chunk_begin + 1)
          line += fmt::format(" chunk {}", e->meta.chunk_begin);
        else
          line += fmt::format(" chunks {}-{}", e->meta.chunk_begin, e->meta.chunk_end - 1);
      }
      line += fmt::format(" ({}{})", format_bytes(static_cast<double>(e->bytes)),
                          e->meta.apply == Apply::reduce ? ", reduce" : "");
    }
    fmt::print("{}\n", line);
  }
}

void print_traffic(const RunResult& result, const std::string& title) {
  fmt::print("\n{}:\n", title);
  const auto traffic = result.traffic();
  fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}  {:>10}\n", "rank", "sent", "received",
             "msgs>", "msgs<", "steps", "comm time");
  std::uint64_t sent = 0, recv = 0;
  for (std::size_t r = 0; r < traffic.size(); ++r) {
    const auto& t = traffic[r];
    fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}  {:>10}\n", fmt::format("r{}", r),
               format_bytes(static_cast<double>(t.bytes_sent)),
               format_bytes(static_cast<double>(t.bytes_recv)), t.msgs_sent, t.msgs_recv, t.steps,
               format_seconds(t.comm_seconds));
    sent += t.bytes_sent;
    recv += t.bytes_recv;
  }
  fmt::print("  {:>4}  {:>12}  {:>12}  {:>6}  {:>6}  {:>5}\n", "all",
             format_bytes(static_cast<double>(sent)), format_bytes(static_cast<double>(recv)), "",
             "", result.steps());
}

// --- the lesson frame -----------------------------------------------------------------

Lesson::Lesson(LessonInfo info)
    : info_(std::move(info)),
      app_(fmt::format("distlab lesson {} {}: {}", info_.number, info_.name, info_.title)) {
  const char* dir = env("DISTLAB_TRACE_DIR");
#ifdef DISTLAB_TRACE_DIR_DEFAULT
  const std::string trace_dir = dir ? dir : DISTLAB_TRACE_DIR_DEFAULT;
#else
  const std::string trace_dir = dir ? dir : "traces";
#endif
  add_common_options(app_, options_, info_.default_size, trace_dir + "/" + id() + ".json");
  app_.get_formatter()->column_width(34);
}

void Lesson::add_root_option(int& root, const std::string& what) {
  app_.add_option("--root", root, what)->capture_default_str();
  on_world([&root](const World& w) {
    if (root < 0 || root >= w.size)
      throw UsageError(
          fmt::format("--root {} is not a rank of this world; use 0 .. {}", root, w.size - 1));
  });
}

void Lesson::describe_size(const std::string& what) {
  if (CLI::Option* size = app_.get_option_no_throw("--size")) size->description(what);
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

void Lesson::set_memory_formula(const std::string& label,
                                const std::vector<double>& bytes_per_rank) {
  std::string values;
  for (double b : bytes_per_rank) values += (values.empty() ? "" : ",") + json_number(b);
  set_metadata("memory_formula",
               fmt::format(R"({{"label":{},"bytes_per_rank":[{}]}})", json_string(label), values));
}

std::vector<std::pair<std::string, std::string>> Lesson::parameters() const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const CLI::Option* opt : app_.get_options()) {
    std::string name = opt->get_name(false, true);
    if (name.rfind("--", 0) != 0) continue;
    name = name.substr(2);
    if (name == "help" || name == "inject-fault" || name == "verbose") continue;
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

// With --device cuda, the rank's GPU and streams for the body's lifetime (cuda_context.hpp).
// `gpu_rank` picks the GPU: the rank in-process, the rank on its node under mpirun.
// In-process ranks on several GPUs also open peer access, so their copies go GPU to GPU.
class CudaBinding {
 public:
  CudaBinding(Device device, int gpu_rank, bool in_process) {
    if (device != Device::cuda) return;
    cuda_bind_rank(gpu_rank);
    bound_ = true;
    if (in_process) cuda_enable_peer_access();
  }
  ~CudaBinding() {
    if (bound_) cuda_unbind_rank();
  }
  CudaBinding(const CudaBinding&) = delete;
  CudaBinding& operator=(const CudaBinding&) = delete;

 private:
  bool bound_ = false;
};

// What a rank that ran out of memory says (std::bad_alloc, or a container asked for more than
// it can hold): the check before the run let it through, so the estimate was short.
std::string out_of_memory(int rank) {
  return fmt::format(
      "rank {} ran out of memory: this run needs more than the {} available; use a smaller --size "
      "or "
      "fewer ranks",
      rank, format_bytes(memory_available()));
}

// Runs one rank's body and records how it ended on the hub. The way down is memory-safe: a
// rank that unwinds holds back every block its messages still name (InFlight), cancels those
// messages or waits for the copies already under way, and only then lets the blocks go.
void run_thread_rank(Comm& comm, ThreadTransport& transport, const std::function<void(Comm&)>& body,
                     ThreadHub& hub) {
  RankLog& log = comm.recorder().log();
  log.t_start = now_us();
  set_in_flight(&transport);
  transport.started();
  try {
    CudaBinding gpu(comm.device(), comm.rank(), true);
    if (comm.device() ==
        Device::cuda)  // NCCL's finalize at unbind waits for the others while they run
      cuda_rank().nccl_give_up = [&hub, r = comm.rank()] {
        return hub.aborting() || hub.others_finished(r);
      };
    try {
      body(comm);
    } catch (...) {
      transport.cancel_pending();  // while the GPU is still bound: its copies end on it
      release_held_blocks();
      throw;
    }
    comm.finish_device_trace();  // the gpu lane's last spans, while the GPU is still bound
  } catch (const UsageError& e) {
    hub.fail(-1, e.what(), 2);
  } catch (const Aborted&) {
  } catch (const std::bad_alloc&) {
    hub.fail(-1, out_of_memory(comm.rank()), 2);
  } catch (const std::length_error&) {
    hub.fail(-1, out_of_memory(comm.rank()), 2);
  } catch (const std::exception& e) {
    hub.fail(comm.rank(), e.what(), 1);
  } catch (...) {
    hub.fail(comm.rank(), "an exception that is not a std::exception", 1);
  }
  transport.finished();  // cancels what is left, then counts the rank out of the wait-for graph
  release_held_blocks();
  set_in_flight(nullptr);
  log.t_end = now_us();
  log.peak = comm.ledger().peaks();
  log.peak_total = comm.ledger().peak_total();
}

// Every rank of `world` as a thread of this process; returns their logs and how it ended.
struct ThreadRun {
  std::vector<RankLog> logs;
  bool failed = false;
  std::string failure;
  int exit_code = 0;
};
ThreadRun launch_threads(const World& world, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s, bool verbose, bool inject_fault) {
  ThreadHub hub(world.size, deadlock_timeout_s);
  std::vector<std::unique_ptr<ThreadTransport>> transports;
  std::vector<std::unique_ptr<Comm>> comms;
  const std::string host = host_name();
  for (int r = 0; r < world.size; ++r) {
    transports.push_back(std::make_unique<ThreadTransport>(hub, r));
    World w = world;
    w.rank = r;
    comms.push_back(std::make_unique<Comm>(w, *transports.back(), verbose));
    comms.back()->set_inject_fault(inject_fault);
    comms.back()->recorder().log().host = host;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size && !hub.failed(); ++r) {
    try {
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        run_thread_rank(*comms[i], *transports[i], body, hub);
      });
    } catch (const std::system_error& e) {  // the ranks already started see the abort and end
      hub.fail(
          -1,
          fmt::format("could not start the thread of rank {} ({}); run fewer ranks", r, e.what()),
          2);
    }
  }
  for (auto& t : threads) t.join();
  ThreadRun run;
  run.failed = hub.failed();
  run.failure = hub.failure();
  run.exit_code = hub.exit_code();
  for (auto& c : comms) run.logs.push_back(std::move(c->recorder().log()));
  return run;
}

}  // namespace

RunResult run_in_process(int ranks, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s, Device device) {
  World world;
  world.size = ranks;
  world.device = device;
  ThreadRun run = launch_threads(world, body, deadlock_timeout_s, false, false);
  if (run.failed) throw Error(run.failure);
  RunResult result;
  result.world = world;
  result.logs = std::move(run.logs);
  return result;
}

int Lesson::run(int argc, char** argv, const std::function<void(Comm&)>& body) {
  const bool under_mpi = launched_by_mpi();
  const bool speaker = !under_mpi || launcher_rank() == 0;
  auto usage = [&](const std::string& message) {
    if (speaker) fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, message);
    return 2;
  };
  try {
    app_.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return speaker ? app_.exit(e) : 0;  // --help
    return usage(fmt::format("{} (run with --help to see the options)", e.what()));
  }

  World world;
  try {
    finish_options(options_);
    if (options_.transport == "mpi" && !under_mpi)
      throw UsageError(
          fmt::format("--transport mpi needs the lesson to be started by mpirun, e.g. ./distlab "
                      "lesson {} --mpi 4",
                      info_.number));
    if (options_.transport == "threads" && under_mpi)
      throw UsageError(
          "--transport threads cannot be used under mpirun; leave --transport out or run without "
          "mpirun");
    world.mode = under_mpi ? Mode::mpi : Mode::threads;
    if (under_mpi) {
      world.size = launcher_size();
      if (options_.ranks != 0 && options_.ranks != world.size)
        throw UsageError(
            fmt::format("--ranks {} disagrees with the {} processes mpirun started; leave --ranks "
                        "out under mpirun",
                        options_.ranks, world.size));
#ifndef DISTLAB_HAVE_MPI
      throw UsageError(
          "this build has no MPI support (Open MPI was not found at configure time); run without "
          "mpirun");
#endif
    } else {
      world.size = options_.ranks != 0 ? options_.ranks : info_.default_ranks;
    }
    world.device = resolve_device(options_.device);
    check_transport_request(options_.transport, world.mode, world.device);
    world.transport = to_string(world.mode);
    for (const auto& check : on_world_) check(world);
    check_memory(world);
  } catch (const UsageError& e) {
    return usage(e.what());
  }

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

#ifdef DISTLAB_HAVE_MPI
  MPI_Init(&argc, &argv);
  int code = 0;
  {
    MpiTransport mpi(options_.deadlock_timeout);
    World w = world;
    w.rank = mpi.rank();
    w.size = mpi.size();
    // --device cuda: bind the GPU first (NCCL starts on it), then open the GPU transport over
    // MPI. MPI itself still carries the control traffic: clock offsets, reports, logs.
    std::optional<CudaBinding> gpu;
    std::unique_ptr<Transport> gpu_transport;
    // --device auto resolves in each process: all must agree, or some would wait forever in
    // the GPU setup below for ranks that skip it.
    const int on_gpu = w.device == Device::cuda;
    int gpu_everywhere = 0, gpu_anywhere = 0;
    MPI_Allreduce(&on_gpu, &gpu_everywhere, 1, MPI_INT, MPI_MIN, mpi.comm());
    MPI_Allreduce(&on_gpu, &gpu_anywhere, 1, MPI_INT, MPI_MAX, mpi.comm());
    if (gpu_everywhere != gpu_anywhere) {
      if (w.rank == 0)
        fmt::print(stderr,
                   "distlab lesson {}: --device {}: some ranks found a GPU and some did not; use "
                   "--device cpu, "
                   "or run where every rank has one\n",
                   info_.number, options_.device);
      code = 2;
    } else if (w.device == Device::cuda) {
      try {
        gpu.emplace(w.device, launcher_local_rank(), false);
        gpu_transport = open_mpi_gpu_transport(mpi, options_.transport);
        w.transport = gpu_transport->name();
      } catch (const UsageError& e) {
        // Every rank decided alike from the same numbers: rank 0 says why, all end cleanly.
        if (w.rank == 0) fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, e.what());
        code = 2;
      } catch (const std::exception& e) {
        MpiTransport::abort_all(
            fmt::format("lesson {}: rank {} failed: {}", info_.number, w.rank, e.what()), 1);
      }
    }
    if (code == 0) {
      Comm comm(w, gpu_transport ? *gpu_transport : static_cast<Transport&>(mpi), options_.verbose);
      comm.set_inject_fault(options_.inject_fault);
      RankLog& log = comm.recorder().log();
      log.host = mpi.host();
      log.clock_offset_us = mpi.clock_offset_us();
      log.t_start = now_us();
      try {
        body(comm);
        comm.finish_device_trace();
      } catch (const UsageError& e) {
        MpiTransport::abort_all(fmt::format("lesson {}: {}", info_.number, e.what()), 2);
      } catch (const std::bad_alloc&) {
        MpiTransport::abort_all(fmt::format("lesson {}: {}", info_.number, out_of_memory(w.rank)),
                                2);
      } catch (const std::length_error&) {
        MpiTransport::abort_all(fmt::format("lesson {}: {}", info_.number, out_of_memory(w.rank)),
                                2);
      } catch (const std::exception& e) {
        MpiTransport::abort_all(
            fmt::format("lesson {}: rank {} failed: {}", info_.number, w.rank, e.what()), 1);
      }
      log.t_end = now_us();
      log.peak = comm.ledger().peaks();
      log.peak_total = comm.ledger().peak_total();
      comm.transport().finished();
      try {
        mpi.barrier();  // polled: a rank still blocked elsewhere is reported, not waited on forever
        auto parts = mpi.gather_bytes(serialize(log), 0);
        if (w.rank == 0) {
          RunResult result;
          result.world = w;
          result.world.rank = 0;
          for (const auto& p : parts) result.logs.push_back(deserialize(p));
          code = finish(result);
        }
        code = mpi.broadcast_int(code, 0);
      } catch (const std::exception& e) {
        MpiTransport::abort_all(
            fmt::format("lesson {}: rank {} failed at the end: {}", info_.number, w.rank, e.what()),
            1);
      }
    }
    gpu_transport.reset();  // before the GPU is unbound: NCCL ends on it
  }
  MPI_Finalize();
  return code;
#else
  return usage("this build has no MPI support");
#endif
}

int Lesson::finish(RunResult& result) {
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

  bool report_ok = true;
  try {
    if (on_report_) on_report_(result);
  } catch (const std::exception& e) {
    fmt::print(stderr, "distlab lesson {}: the report failed: {}\n", info_.number, e.what());
    report_ok = false;
  }
  // The report's checks belong to rank 0, which made them; they go into the trace with the rest.
  for (auto& c : result.report_checks) {
    ++result.checks;
    if (!c.ok) ++failed;
    if (!result.logs.empty()) result.logs[0].checks.push_back(std::move(c));
  }
  result.report_checks.clear();
  result.verified = report_ok && result.checks > 0 && failed == 0;
  int code = result.verified ? 0 : 1;
  for (const auto& log : result.logs)
    for (const auto& c : log.checks)
      if (!c.ok)
        fmt::print("check failed on r{}: {}{}{}\n", log.rank, c.name, c.detail.empty() ? "" : ": ",
                   c.detail);

  std::string trace_note;
  if (!options_.no_trace) {
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
    ti.verified = result.verified && code == 0;
    ti.wall_seconds = result.wall_seconds;
    ti.cost_model = cost_model_;
    try {
      write_trace(options_.trace_path, ti, result.logs);
      std::error_code ec;
      const auto shown = std::filesystem::proximate(options_.trace_path, ec);
      const bool inside = !ec && !shown.empty() && shown.string().rfind("..", 0) != 0;
      trace_note = ", trace " + (inside ? shown.string() : options_.trace_path);
    } catch (const std::exception& e) {
      fmt::print(stderr, "distlab lesson {}: {}\n", info_.number, e.what());
      code = 1;
    }
  }
  const std::string where =
      fmt::format("{} ranks, {}, {}", result.world.size, to_string(result.world.mode),
                  to_string(result.world.device));
  // The plan against what the process took (tests/memory_plan.sh): the growth from the start to
  // the resident peak should stay within the plan, or the check before the run protects nothing.
  if (options_.verbose && planned_bytes_ >= 0)
    fmt::print("memory: planned {} for this process; resident {} at the start, peak {}\n",
               format_bytes(planned_bytes_), format_bytes(resident_start_),
               format_bytes(process_memory("VmHWM")));
  if (code == 0)
    fmt::print("lesson {} {}: verified ({} checks, {}, {:.3f} s{})\n", info_.number, info_.name,
               result.checks, where, result.wall_seconds, trace_note);
  else if (result.checks == 0)
    fmt::print("lesson {} {}: FAILED (no checks ran, {})\n", info_.number, info_.name, where);
  else
    fmt::print("lesson {} {}: FAILED ({} of {} checks failed, {})\n", info_.number, info_.name,
               failed, result.checks, where);
  std::fflush(stdout);
  return code;
}

}  // namespace distlab
