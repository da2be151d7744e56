// distlab_trace_gen — writes a large synthetic distlab trace, for the loader benchmark.
//
// The file is what a lesson would write (core/trace/writer.cpp, docs/trace-format.md) for a
// run of ring all-reduces, one after another, on R ranks. Each rank's events come as the
// writer orders them, lane by lane:
//   M   process_name / process_sort_index, thread_name / thread_sort_index of lanes 1, 2, 3
//   X   compute lane: one "all-reduce" span per iteration, an "add" inside each reduce step
//   X s send lane: per step one send span (message args) and its flow start
//   X f recv lane: per step one recv span, the deliver span in its last 0.5 us, the flow finish
//   C   the memory ledger: the comm buffer allocated and freed around each all-reduce
// then the global "step frame" instants and otherData (world size, the "data" buffer, ...).
//
// One all-reduce is 2(R-1) steps; in step s every rank r sends one chunk to r+1 and receives
// one from r-1 (reduce-scatter: chunk r-s, apply reduce; all-gather: chunk r+1-s, apply copy).
// Events per all-reduce: 5 per message x R (R-1) x 2, R compute spans + R (R-1) adds,
// 2 R counters, 2 (R-1) frames. Whole all-reduces are written until there are >= --events.
//
//   distlab_trace_gen [--events 1000000] [--ranks 8] [--size 1048576] -o FILE
//
// --pytorch writes a real run's shape instead (viewer/model/pytorch_trace.hpp): a folder of
// PyTorch profiler traces, rank<R>.json, in PyTorch 2.x's Kineto format (distributedInfo,
// record_param_comms and NCCL kernels with the collective args). Per training step and rank: a
// ProfilerStep# span, 6 aten::mm CPU ops and their GEMM kernels on stream 7, then the
// gradients' all-reduce (record_param_comms on the CPU, its kernel on stream 13): 15 events.
// Each rank's clock is its own (rank r's times are r x 1000.25 us ahead), and rank k mod R
// arrives 5 us late at step k's all-reduce.
//   distlab_trace_gen --pytorch --events 1000000 --ranks 4 -o DIR
// --gzip writes them gzipped (rank<R>.pt.trace.json.gz), as tensorboard_trace_handler does with
// use_gzip=True.
#include <fmt/format.h>
#include <zlib.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

namespace {

constexpr double kStepUs = 5.0;      // one ring step
constexpr double kSendUs = 1.5;      // a send span
constexpr double kTransferUs = 2.0;  // from the send being posted to the data being in place
constexpr double kDeliverUs = 0.5;   // the writer's deliver slice

struct Gen {
  int ranks = 8;
  std::int64_t iters = 1;
  std::int64_t size = 1 << 20;  // float32 elements in the "data" buffer
  std::FILE* out = nullptr;
  fmt::memory_buffer buf;
  std::int64_t events = 0;
  bool first = true;

  int steps() const { return 2 * (ranks - 1); }
  double iter_start(std::int64_t i) const { return 10.0 + double(i) * (steps() * kStepUs + 10.0); }
  double step_start(std::int64_t i, int s) const { return iter_start(i) + 2.0 + s * kStepUs; }
  // Ranks post their sends a little apart, the same way every time.
  double send_start(std::int64_t i, int s, int r) const {
    return step_start(i, s) + 0.1 * ((r * 7 + s) % 5);
  }
  std::int64_t global_step(std::int64_t i, int s) const { return i * steps() + s + 1; }
  std::uint64_t msg_id(std::int64_t i, int s, int src) const {
    return static_cast<std::uint64_t>((i * steps() + s) * ranks + src + 1);
  }
  std::int64_t chunk_bytes(int c) const { return 4 * (size / ranks + (c < size % ranks ? 1 : 0)); }

  // One event, comma-separated from the previous; the buffer goes to disk every megabyte.
  template <typename... Args>
  void event(fmt::format_string<Args...> f, Args&&... args) {
    if (!first) buf.append(std::string_view(",\n"));
    first = false;
    fmt::format_to(std::back_inserter(buf), f, std::forward<Args>(args)...);
    ++events;
    if (buf.size() > (1 << 20)) flush();
  }
  void flush() {
    std::fwrite(buf.data(), 1, buf.size(), out);
    buf.clear();
  }

  // The message rank `src` sends in step s: reduce-scatter first, then all-gather.
  void message_args(std::int64_t i, int s, int src, int peer, bool with_msg) {
    const bool reduce = s < ranks - 1;
    const int k = reduce ? s : s - (ranks - 1);
    const int chunk = ((reduce ? src - k : src + 1 - k) % ranks + ranks) % ranks;
    const int contributions = reduce ? k + 1 : ranks;
    std::uint64_t mask = 0;  // ranks src, src-1, ..., src-k (all of them in the all-gather)
    for (int j = 0; j < contributions && ranks <= 64; ++j)
      mask |= std::uint64_t{1} << ((src - j + ranks) % ranks);
    fmt::format_to(
        std::back_inserter(buf),
        R"(,"args":{{"peer":{},"bytes":{},"tag":{},"step":{},"buffer":"data","chunk":{},"chunk_end":{},)"
        R"("apply":"{}","contributions":{})",
        peer, chunk_bytes(chunk), s, global_step(i, s), chunk, chunk + 1,
        reduce ? "reduce" : "copy", contributions);
    if (mask) fmt::format_to(std::back_inserter(buf), R"(,"contrib_mask":"0x{:x}")", mask);
    if (with_msg) fmt::format_to(std::back_inserter(buf), R"(,"msg":{})", msg_id(i, s, src));
    buf.append(std::string_view("}}"));
  }

  void rank(int r) {
    const int pid = r + 1, left = (r + ranks - 1) % ranks, right = (r + 1) % ranks;
    event(
        R"({{"ph":"M","name":"process_name","pid":{},"tid":0,"args":{{"name":"rank {} [gen]"}}}})",
        pid, r);
    event(R"({{"ph":"M","name":"process_sort_index","pid":{},"tid":0,"args":{{"sort_index":{}}}}})",
          pid, pid);
    const char* lanes[] = {"compute", "send", "recv"};
    for (int l = 0; l < 3; ++l) {
      event(R"({{"ph":"M","name":"thread_name","pid":{},"tid":{},"args":{{"name":"{}"}}}})", pid,
            l + 1, lanes[l]);
      event(
          R"({{"ph":"M","name":"thread_sort_index","pid":{},"tid":{},"args":{{"sort_index":{}}}}})",
          pid, l + 1, l * 100);
    }
    // Compute lane: the all-reduce, and an add after each reduce-scatter receive.
    for (std::int64_t i = 0; i < iters; ++i) {
      const double t0 = iter_start(i) + 1.0, t1 = step_start(i, steps()) + 1.0;
      event(
          R"({{"ph":"X","name":"all-reduce","cat":"compute","pid":{},"tid":1,"ts":{:.3f},"dur":{:.3f}}})",
          pid, t0, t1 - t0);
      for (int s = 0; s < ranks - 1; ++s)
        event(
            R"({{"ph":"X","name":"add","cat":"compute","pid":{},"tid":1,"ts":{:.3f},"dur":0.800}})",
            pid, send_start(i, s, left) + kTransferUs + 0.1);
    }
    // Send lane: the send span, then its flow start at the same time.
    for (std::int64_t i = 0; i < iters; ++i)
      for (int s = 0; s < steps(); ++s) {
        const double t0 = send_start(i, s, r);
        event(R"({{"ph":"X","name":"send","cat":"send","pid":{},"tid":2,"ts":{:.3f},"dur":{:.3f})",
              pid, t0, kSendUs);
        message_args(i, s, r, right, true);
        event(
            R"({{"ph":"s","name":"message","cat":"message","id":{},"pid":{},"tid":2,"ts":{:.3f}}})",
            msg_id(i, s, r), pid, t0);
      }
    // Recv lane: posted at the step's start, complete when the left neighbour's data is in.
    for (std::int64_t i = 0; i < iters; ++i)
      for (int s = 0; s < steps(); ++s) {
        const double t0 = step_start(i, s), sent = send_start(i, s, left), t1 = sent + kTransferUs;
        const double d0 = std::min(t1, std::max(std::max(t0, t1 - kDeliverUs), sent));
        event(R"({{"ph":"X","name":"recv","cat":"recv","pid":{},"tid":3,"ts":{:.3f},"dur":{:.3f})",
              pid, t0, t1 - t0);
        message_args(i, s, left, left, false);
        event(
            R"({{"ph":"X","name":"deliver","cat":"deliver","pid":{},"tid":3,"ts":{:.3f},"dur":{:.3f})",
            pid, d0, t1 - d0);
        message_args(i, s, left, left, true);
        event(
            R"({{"ph":"f","bp":"e","name":"message","cat":"message","id":{},"pid":{},"tid":3,"ts":{:.3f}}})",
            msg_id(i, s, left), pid, d0);
      }
    // Memory: the data buffer all along, a comm buffer of one chunk during each all-reduce.
    const std::int64_t data = 4 * size, comm = chunk_bytes(0);
    for (std::int64_t i = 0; i < iters; ++i)
      for (const std::int64_t c : {comm, std::int64_t{0}})
        event(
            R"({{"ph":"C","name":"memory","pid":{},"tid":0,"ts":{:.3f},"args":{{"params_bytes":0,"grads_bytes":0,)"
            R"("optimizer_bytes":0,"activations_bytes":0,"comm_bytes":{},"data_bytes":{},"total_bytes":{}}}}})",
            pid, c ? iter_start(i) + 0.5 : step_start(i, steps()) + 2.0, c, data, c + data);
  }

  void write() {
    buf.append(std::string_view("{\"traceEvents\":[\n"));
    for (int r = 0; r < ranks; ++r) rank(r);
    for (std::int64_t i = 0; i < iters; ++i)
      for (int s = 0; s < steps(); ++s)
        event(
            R"({{"ph":"i","s":"g","name":"step frame","pid":1,"tid":0,"ts":{:.3f},"args":{{"step":{}}}}})",
            step_start(i, s), global_step(i, s));
    fmt::format_to(
        std::back_inserter(buf),
        "\n],\n\"displayTimeUnit\":\"ns\",\n\"otherData\":{{\"schema\":\"distlab-trace\",\"schema_"
        "version\":1,"
        R"("lesson":"bench_trace_gen","title":"synthetic ring all-reduces","algorithm":"ring, synthetic",)"
        R"("world_size":{},"mode":"threads","device":"cpu","transport":"threads",)"
        R"("parameters":{{"ranks":{},"size":{},"iterations":{}}},)"
        R"("verification":{{"verified":true,"checks":{},"failed":[]}},)"
        R"("buffers":[{{"name":"data","length":{},"chunks":{}}}],"steps":{},"messages":{},)"
        R"("wall_seconds":{},"cost_model":null}}}})"
        "\n",
        ranks, ranks, size, iters, ranks, size, ranks, iters * steps(), iters * steps() * ranks,
        iter_start(iters) * 1e-6);
    flush();
  }
};

// A real run: one PyTorch 2.x profiler trace per rank (see the header).
struct TorchGen {
  int ranks = 4;
  std::int64_t steps = 1;
  std::int64_t size = 1 << 20;
  std::int64_t events = 0;

  static constexpr double kStepUs = 1000.0, kMmUs = 60.0, kReduceUs = 400.0;

  bool gzip = false;  // write rank<R>.pt.trace.json.gz, as tensorboard_trace_handler(use_gzip)

  bool write_rank(const std::string& path, int r) {
    std::FILE* out = gzip ? nullptr : std::fopen(path.c_str(), "wb");
    gzFile zout = gzip ? gzopen(path.c_str(), "wb") : nullptr;
    if (!out && !zout) return false;
    auto put = [&](const char* data, std::size_t n) {
      if (zout)
        gzwrite(zout, data, static_cast<unsigned>(n));
      else
        std::fwrite(data, 1, n, out);
    };
    fmt::memory_buffer buf;
    bool first = true;
    auto event = [&](std::string_view text) {
      if (!first) buf.append(std::string_view(",\n"));
      first = false;
      buf.append(text);
      ++events;
      if (buf.size() > (1 << 20)) put(buf.data(), buf.size()), buf.clear();
    };
    fmt::format_to(std::back_inserter(buf),
                   R"({{"schemaVersion":1,"distributedInfo":{{"backend":"nccl","rank":{},)"
                   R"("world_size":{}}},"traceEvents":[)"
                   "\n",
                   r, ranks);
    const int pid = 1000 + r;
    event(fmt::format(
        R"({{"ph":"M","name":"process_name","pid":0,"tid":0,"args":{{"name":"GPU {}"}}}})", r));
    event(R"({"ph":"M","name":"thread_name","pid":0,"tid":7,"args":{"name":"stream 7"}})");
    event(R"({"ph":"M","name":"thread_name","pid":0,"tid":13,"args":{"name":"stream 13"}})");
    const double clock = 1000.25 * r;
    const std::string comms = fmt::format(
        R"("Collective name":"allreduce","dtype":"Float","In msg nelems":{},"Out msg nelems":{},)"
        R"("Group size":{},"Process Group Name":"0")",
        size, size, ranks);
    for (std::int64_t k = 0; k < steps; ++k) {
      const double t = clock + 10.0 + static_cast<double>(k) * kStepUs;
      const double late = k % ranks == r ? 5.0 : 0.0;
      const double reduce = t + 6 * (kMmUs + 10) + 20;  // every rank's kernel ends together
      event(fmt::format(R"({{"ph":"X","cat":"user_annotation","name":"ProfilerStep#{}","pid":{},)"
                        R"("tid":{},"ts":{:.3f},"dur":{:.3f}}})",
                        k, pid, pid, t, kStepUs - 10));
      for (int j = 0; j < 6; ++j) {
        const double at = t + 5 + j * (kMmUs + 10);
        event(fmt::format(R"({{"ph":"X","cat":"cpu_op","name":"aten::mm","pid":{},"tid":{},)"
                          R"("ts":{:.3f},"dur":8.000,"args":{{"External id":{}}}}})",
                          pid, pid, at, k * 8 + j));
        event(fmt::format(R"({{"ph":"X","cat":"kernel","name":"ampere_sgemm_128x64_nn","pid":0,)"
                          R"("tid":7,"ts":{:.3f},"dur":{:.3f},"args":{{"External id":{}}}}})",
                          at + 8, kMmUs + (j == 5 ? late : 0.0), k * 8 + j));
      }
      event(fmt::format(R"({{"ph":"X","cat":"cpu_op","name":"record_param_comms","pid":{},)"
                        R"("tid":{},"ts":{:.3f},"dur":6.000,"args":{{{}}}}})",
                        pid, pid, reduce - 10, comms));
      event(fmt::format(
          R"({{"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL)"
          R"x((ncclDevKernelArgsStorage<4096ul>)","pid":0,"tid":13,"ts":{:.3f},"dur":{:.3f},)x"
          R"("args":{{{}}}}})",
          reduce + late, kReduceUs - late, comms));
    }
    buf.append(std::string_view("\n]}\n"));
    put(buf.data(), buf.size());
    return zout ? gzclose(zout) == Z_OK : std::fclose(out) == 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("distlab_trace_gen: write a synthetic distlab trace of ring all-reduces");
  std::int64_t events = 1000000;
  Gen g;
  std::string path;
  app.add_option("--events", events, "write whole all-reduces until at least this many events")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 34))
      ->capture_default_str();
  app.add_option("--ranks", g.ranks, "ranks (pids 1..R)")
      ->check(CLI::Range(2, 1024))
      ->capture_default_str();
  app.add_option("--size", g.size, "float32 elements in the all-reduced buffer")
      ->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40))
      ->capture_default_str();
  app.add_option("-o,--output", path, "the trace file to write (with --pytorch: a folder)")
      ->required();
  bool pytorch = false;
  app.add_flag("--pytorch", pytorch,
               "write a real run instead: one PyTorch 2.x profiler trace per rank, rank<R>.json "
               "in the folder -o names");
  bool gzip = false;
  app.add_flag("--gzip", gzip,
               "with --pytorch: gzip each rank's file, rank<R>.pt.trace.json.gz, as "
               "tensorboard_trace_handler(use_gzip=True) writes them");
  CLI11_PARSE(app, argc, argv);
  if (gzip && !pytorch) {
    fmt::print(stderr, "distlab_trace_gen: --gzip goes with --pytorch\n");
    return 2;
  }

  if (pytorch) {
    TorchGen t;
    t.gzip = gzip;
    t.ranks = g.ranks;
    t.size = g.size;
    t.steps = std::max<std::int64_t>(1, (events / g.ranks - 3 + 14) / 15);
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
    for (int r = 0; r < t.ranks; ++r) {
      const std::string file =
          (std::filesystem::path(path) /
           (gzip ? fmt::format("rank{}.pt.trace.json.gz", r) : fmt::format("rank{}.json", r)))
              .string();
      if (!t.write_rank(file, r)) {
        fmt::print(stderr, "distlab_trace_gen: cannot write {}; give a writable folder\n", file);
        return 2;
      }
    }
    fmt::print("wrote {}: {} events ({} steps on {} ranks, one file each)\n", path, t.events,
               t.steps, t.ranks);
    return 0;
  }

  const std::int64_t r = g.ranks;
  const std::int64_t per_iter = 10 * r * (r - 1) + r * r + 2 * r + 2 * (r - 1);
  const std::int64_t fixed = 8 * r;  // metadata
  g.iters = std::max<std::int64_t>(1, (events - fixed + per_iter - 1) / per_iter);
  g.out = std::fopen(path.c_str(), "wb");
  if (!g.out) {
    fmt::print(stderr,
               "distlab_trace_gen: cannot write {}; give a path in an existing, writable folder\n",
               path);
    return 2;
  }
  g.write();
  const bool ok = std::fclose(g.out) == 0;
  if (!ok) {
    fmt::print(stderr, "distlab_trace_gen: writing {} failed (disk full?)\n", path);
    return 1;
  }
  fmt::print("wrote {}: {} events ({} all-reduces on {} ranks)\n", path, g.events, g.iters,
             g.ranks);
  return 0;
}
