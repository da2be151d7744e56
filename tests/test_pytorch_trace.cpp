// viewer/model/pytorch_trace.hpp and real_run.hpp: a real run's PyTorch profiler traces, one per
// rank. Traces written here in the two shapes PyTorch writes (1.13's: a bare array, the string
// pid "CPU functions", gloo's spans without args; 2.x's: record_param_comms and NCCL kernels
// with the collective args from PyTorch's source, torch/csrc/profiler/util.h), and the committed
// samples in traces/torch/ (scripts/make-torch-traces.sh, scripts/make_torch2_sample.py).
#include "catch.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/pytorch_trace.hpp"
#include "viewer/model/real_run.hpp"

using distlab::Error;
using namespace distlab::viewer;
using Catch::Contains;

namespace {

// One 'X' event.
std::string event(std::string_view name, double ts, double dur, std::string_view pid,
                  std::string_view tid, std::string_view cat = "cpu_op",
                  std::string_view args = "{}") {
  return fmt::format(
      R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, "ts": {:.3f}, )"
      R"("dur": {:.3f}, "args": {}}})",
      cat, name, pid, tid, ts, dur, args);
}

// PyTorch 1.13's shape: a bare array, pid "CPU functions", gloo's spans on a worker thread.
// `calls` gloo all-reduces, call k starting at arrive[k] and ending at end[k], all plus `clock`
// (this rank's clock offset); computation (aten::mm) on the main thread before each.
std::string torch113_rank(double clock, const std::vector<double>& arrive,
                          const std::vector<double>& end) {
  std::vector<std::string> ev;
  ev.push_back(
      R"({"ph": "M", "name": "thread_name", "pid": "CPU functions", "tid": 1, "args": {"name": "python"}})");
  for (std::size_t k = 0; k < arrive.size(); ++k) {
    ev.push_back(event("ProfilerStep#" + std::to_string(k), clock + arrive[k] - 300,
                       300 + end[k] - arrive[k] + 1, "\"CPU functions\"", "1"));
    ev.push_back(event("aten::mm", clock + arrive[k] - 200, 150, "\"CPU functions\"", "1"));
    ev.push_back(event("c10d::allreduce_", clock + arrive[k] - 20, 10, "\"CPU functions\"", "1"));
    ev.push_back(
        event("gloo:all_reduce", clock + arrive[k], end[k] - arrive[k], "\"CPU functions\"", "2"));
  }
  std::string out = "[\n";
  for (std::size_t i = 0; i < ev.size(); ++i) out += (i ? ",\n" : "") + ev[i];
  return out + "\n]\n";
}

// PyTorch 2.x's shape: an object with distributedInfo; record_param_comms on the CPU, and the NCCL
// kernel on GPU stream 7 with the same args (Kineto copies them). Each call: name, group, dtype,
// elements in and out, and its kernel's start and end on this rank (plus `clock`).
struct Pt2Call {
  std::string collective, dtype;
  long long in_elems, out_elems;
  double start, end;
};

std::string pt2_args(const Pt2Call& c, int world) {
  return fmt::format(
      R"({{"Collective name": "{}", "dtype": "{}", "In msg nelems": {}, "Out msg nelems": {}, )"
      R"("Group size": {}, "Process Group Name": "0", "Process Group Description": "default_pg", )"
      R"("Process Group Ranks": "[0, 1, 2, 3]", "In split size": "[]", "Out split size": "[]"}})",
      c.collective, c.dtype, c.in_elems, c.out_elems, world);
}

std::string pt2_rank(int rank, int world, double clock, const std::vector<Pt2Call>& calls) {
  std::vector<std::string> ev;
  ev.push_back(
      R"({"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}})");
  ev.push_back(
      R"({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}})");
  for (const Pt2Call& c : calls) {
    ev.push_back(event("record_param_comms", clock + c.start - 30, 12, "4242", "4242", "cpu_op",
                       pt2_args(c, world)));
    ev.push_back(event("ncclDevKernel_" +
                           std::string(c.collective == "allreduce" ? "AllReduce_Sum_f32_RING_LL"
                                                                   : "AllGather_RING_LL") +
                           "(ncclDevKernelArgsStorage<4096ul>)",
                       clock + c.start, c.end - c.start, "0", "7", "kernel", pt2_args(c, world)));
    ev.push_back(event("ampere_sgemm_128x64_nn", clock + c.start - 400, 350, "0", "7", "kernel"));
  }
  std::string out = fmt::format(
      R"({{"schemaVersion": 1, "distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": {}}}, )"
      R"("traceEvents": [)",
      rank, world);
  for (std::size_t i = 0; i < ev.size(); ++i) out += (i ? ",\n" : "\n") + ev[i];
  return out + "\n]}\n";
}

std::vector<std::string_view> views(const std::vector<std::string>& texts) {
  return {texts.begin(), texts.end()};
}

std::string torch_samples() {
  return std::string(DISTLAB_SOURCE_DIR) + "/traces/torch";
}

}  // namespace

TEST_CASE("pytorch: collective names and dtypes as PyTorch, gloo and NCCL spell them",
          "[pytorch]") {
  CHECK(canonical_collective("allreduce") == "all-reduce");
  CHECK(canonical_collective("all_reduce") == "all-reduce");
  CHECK(canonical_collective("AllReduce") == "all-reduce");
  CHECK(canonical_collective("_allgather_base") == "all-gather");
  CHECK(canonical_collective("all_gather_into_tensor") == "all-gather");
  CHECK(canonical_collective("reduce_scatter_tensor") == "reduce-scatter");
  CHECK(canonical_collective("_reduce_scatter_base") == "reduce-scatter");
  CHECK(canonical_collective("allreduce_coalesced") == "all-reduce");
  CHECK(canonical_collective("alltoall_base") == "all-to-all");
  CHECK(canonical_collective("all_to_allv") == "all-to-all");
  CHECK(canonical_collective("broadcast_") == "broadcast");
  CHECK(canonical_collective("barrier") == "barrier");
  CHECK(dtype_bytes("Float") == 4);
  CHECK(dtype_bytes("BFloat16") == 2);
  CHECK(dtype_bytes("c10::Half") == 2);
  CHECK(dtype_bytes("Double") == 8);
  CHECK(dtype_bytes("Long") == 8);
  CHECK(dtype_bytes("complex") == 0);
}

TEST_CASE("pytorch: a 1.13 trace loads as one rank per file, gloo's all-reduces match by order",
          "[pytorch]") {
  const std::vector<double> arrive{1000, 3000, 5000}, end{1400, 3500, 5300};
  const std::vector<std::string> texts{torch113_rank(0, arrive, end),
                                       torch113_rank(0, arrive, end)};
  const TraceModel m = parse_trace_set(views(texts), {"rank0.json", "rank1.json"});
  REQUIRE(m.world_size() == 2);
  CHECK(m.info.source == "pytorch");
  CHECK(m.info.rank_origin == "file order");
  CHECK(m.info.mode == "gloo");
  CHECK(m.ranks[1].name == "rank 1 (rank1.json)");
  REQUIRE(m.collectives.size() == 3);
  for (const CollectiveCall& c : m.collectives) {
    CHECK(m.str(c.name) == "all-reduce");
    CHECK(c.group_size == 2);
    CHECK(c.present == c.group_size);
    CHECK(c.bytes == -1);  // 1.13 records no sizes
  }
  CHECK(m.step_ids.size() == 3);  // a step per call
  // Each file's threads are its rank's lanes, named by its metadata.
  REQUIRE(m.ranks[0].lanes.size() == 2);
  CHECK(m.lanes[m.ranks[0].lanes[0]].name == "python");
  // No sizes: no bandwidth, and the summary says why.
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.present);
  CHECK(run.sized_calls == 0);
  CHECK(run.calls[0].busbw < 0);
  CHECK_THAT(describe_real_run(m, run), Contains("the trace gives none"));
}

TEST_CASE("pytorch: the rank that arrives last is the straggler, and the others' waits are its",
          "[pytorch]") {
  // Rank 2 arrives 700 us late at every call; all end together.
  std::vector<std::string> texts;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> arrive, end;
    for (int k = 0; k < 4; ++k) {
      const double t = 10000.0 * k;
      arrive.push_back(t + (r == 2 ? 700 : 10 * r));
      end.push_back(t + 900);
    }
    texts.push_back(torch113_rank(0, arrive, end));
  }
  const TraceModel m = parse_trace_set(views(texts), {"a", "b", "c"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.calls.size() == 4);
  CHECK(run.slowest_rank == 2);
  CHECK(run.ranks[2].last_arrivals == 4);
  for (const CallStats& s : run.calls) {
    CHECK(s.last_rank == 2);
    CHECK(s.wait[0] == Approx(700).margin(1e-6));
    CHECK(s.wait[1] == Approx(690).margin(1e-6));
    CHECK(s.wait[2] == Approx(0).margin(1e-6));
    CHECK(s.caused_us == Approx(1390).margin(1e-6));
    CHECK(s.transfer_us == Approx(200).margin(1e-6));  // the straggler's own time in the call
  }
  CHECK(run.ranks[2].caused_us == Approx(4 * 1390).margin(1e-6));
  CHECK(run.ranks[0].waited_us == Approx(4 * 700).margin(1e-6));
  CHECK_THAT(describe_real_run(m, run), Contains("slowest rank: rank 2 arrived last at 4 of 4"));
  // The caption of a step names its call and its straggler.
  const Caption c = caption_at(m, Moment{Clock::steps, 2.0, time_at_beat(m, 2.0), 2});
  CHECK(c.collective == "all-reduce");
  CHECK_THAT(c.flow, Contains("all-reduce #1: rank 2 arrives last"));
}

TEST_CASE("pytorch: each file's clock is aligned on the matched collectives' ends", "[pytorch]") {
  // The same run seen by clocks 0, +5 s and -1.25 s apart; arrivals differ, ends agree.
  const std::vector<double> offsets{0, 5e6, -1.25e6};
  std::vector<std::string> texts;
  for (int r = 0; r < 3; ++r) {
    std::vector<double> arrive, end;
    for (int k = 0; k < 5; ++k)
      arrive.push_back(20000.0 * k + 37 * r), end.push_back(20000.0 * k + 500);
    texts.push_back(torch113_rank(offsets[static_cast<std::size_t>(r)], arrive, end));
  }
  const TraceModel m = parse_trace_set(views(texts), {"a", "b", "c"});
  REQUIRE(m.info.clock_offset_us.size() == 3);
  REQUIRE(m.info.clock_error_us >= 0);
  // The offset added to rank r's times undoes its clock's: -offsets[r], within the stated error
  // (the ends here agree exactly, up to the 1 ns the file's times are written to).
  for (int r = 0; r < 3; ++r)
    CHECK(std::abs(m.info.clock_offset_us[static_cast<std::size_t>(r)] +
                   offsets[static_cast<std::size_t>(r)]) <= m.info.clock_error_us + 2e-3);
  CHECK(m.info.clock_error_us < 2e-3);
  // After alignment the matched calls' ends coincide and the extent is the run's, not 6 s.
  for (const CollectiveCall& c : m.collectives)
    for (std::int32_t i : c.spans)
      CHECK(m.spans[static_cast<std::size_t>(i)].end() ==
            Approx(m.spans[static_cast<std::size_t>(c.spans[0])].end()).margin(2e-3));
  CHECK(m.t_end - m.t_begin < 100000);
}

TEST_CASE("pytorch: 2.x's record_param_comms sizes give algbw and busbw with nccl-tests' factors",
          "[pytorch]") {
  // A small trace in PyTorch 2.x's comms format, written here from PyTorch's own field names
  // (torch/csrc/profiler/util.h), not recorded from a PyTorch 2.x run. Four ranks; rank 3 is 250
  // us late at the all-gather; every call's transfer (its last rank's kernel) is a round number.
  const int n = 4;
  std::vector<std::string> texts;
  for (int r = 0; r < n; ++r) {
    const double clock = 1234.5 * r;  // each process's own base time
    const std::vector<Pt2Call> calls{
        {"allreduce", "Float", 1 << 20, 1 << 20, 1000, 1000 + 2000},  // 4 MiB in 2 ms
        {"_allgather_base", "BFloat16", 1 << 18, n << 18, 5000.0 + (r == 3 ? 250 : 0), 5250 + 500},
    };
    texts.push_back(pt2_rank(r, n, clock, calls));
  }
  // Given in reverse order: the ranks come from distributedInfo, not the order.
  const std::vector<std::string> reversed(texts.rbegin(), texts.rend());
  const TraceModel m = parse_trace_set(views(reversed), {"r3", "r2", "r1", "r0"});
  CHECK(m.info.rank_origin == "distributedInfo");
  CHECK(m.info.mode == "nccl");
  CHECK(m.info.rank_files[0] == "r0");
  CHECK_THAT(std::string(m.info.extra_json("collectives_from")), Contains("NCCL kernels"));
  REQUIRE(m.collectives.size() == 2);
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.calls.size() == 2);
  CHECK(run.sized_calls == 2);
  CHECK(run.gpu);
  // all-reduce: S = 2^20 floats = 4 MiB, t = 2 ms: algbw = S / t, busbw = 2 (n - 1) / n algbw.
  const double s0 = 4.0 * (1 << 20), t0 = 2e-3;
  CHECK(m.collectives[0].bytes == static_cast<std::int64_t>(s0));
  CHECK(run.calls[0].algbw == Approx(s0 / t0).epsilon(1e-9));
  CHECK(run.calls[0].busbw == Approx(s0 / t0 * 2 * (n - 1) / n).epsilon(1e-9));
  // all-gather: S = the output, n 2^18 bfloat16 = 2 MiB; t = 500 us (rank 3's, the last in);
  // busbw = (n - 1) / n algbw.
  const double s1 = 2.0 * (n << 18), t1 = 500e-6;
  CHECK(m.collectives[1].bytes == static_cast<std::int64_t>(s1));
  CHECK(run.calls[1].last_rank == 3);
  CHECK(run.calls[1].max_wait_us == Approx(250).margin(1e-3));
  CHECK(run.calls[1].busbw == Approx(s1 / t1 * (n - 1) / n).epsilon(1e-6));
  // The GEMM kernels before each call are the computation it does not overlap.
  CHECK(run.ranks[0].hidden_us == Approx(0).margin(1e-6));
  CHECK(run.ranks[0].comm_us == Approx(2000 + 750).margin(1e-3));
}

TEST_CASE("pytorch: communication under computation is hidden, the rest exposed", "[pytorch]") {
  // One rank's all-reduce [1000, 1400) with aten::mm on the main thread over [1000, 1150) (the
  // test's 1.13 rank puts it at arrive - 200 for 150 us: shift so they overlap by 100 us).
  std::string text = torch113_rank(0, {1000}, {1400});
  text.insert(text.rfind(']'), ",\n" + event("aten::add_", 1300, 100, "\"CPU functions\"", "1"));
  const TraceModel m = parse_trace_set({text}, {"r0"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.present);
  CHECK(run.ranks[0].comm_us == Approx(400));
  CHECK(run.ranks[0].hidden_us == Approx(100));  // aten::add_ only; ProfilerStep# is no leaf
  CHECK(run.ranks[0].exposed_us() == Approx(300));
}

TEST_CASE("pytorch: a rank that runs another collective instead is where a hang would start",
          "[pytorch]") {
  // Rank b issues a broadcast where a issues its second all-reduce, and both traces run on past
  // it: content matching leaves each call alone, and each rank never called the other's.
  std::string a = torch113_rank(0, {1000, 2000}, {1100, 2100});
  std::string b = a;
  b.replace(b.rfind("gloo:all_reduce"), 15, "gloo:broadcast");
  b.replace(b.rfind("c10d::allreduce_"), 16, "c10d::broadcast_");
  for (std::string* t : {&a, &b})
    t->insert(t->rfind(']'), ",\n" + event("aten::mm", 5000, 100, "\"CPU functions\"", "1"));
  const TraceModel m = parse_trace_set({a, b}, {"a", "b"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.collectives.size() == 3);
  CHECK(m.collectives[0].present == 2);
  for (int k : {1, 2}) {
    const CollectiveCall& c = m.collectives[static_cast<std::size_t>(k)];
    CHECK(c.present == 1);
    CHECK(c.missing(Absence::not_called) == 1);
  }
  CHECK(run.hang_calls == 2);
  CHECK_THAT(describe_real_run(m, run), Contains("a hang would start"));
}

TEST_CASE("pytorch: truncated, foreign and odd files give a sentence or plain spans, never a crash",
          "[pytorch]") {
  const std::string good = torch113_rank(0, {1000}, {1100});
  // Cut short: the file is named.
  const std::string cut = good.substr(0, good.size() / 2);
  CHECK_THROWS_WITH(parse_trace_set({good, cut}, {"rank0.json", "rank1.json"}),
                    Contains("rank1.json") && Contains("truncated"));
  // A distlab trace is no rank of a PyTorch run.
  const std::string distlab =
      R"({"traceEvents": [], "otherData": {"schema": "distlab-trace", "schema_version": 1}})";
  CHECK_THROWS_WITH(parse_trace_set({good, distlab}, {"rank0.json", "lesson.json"}),
                    Contains("lesson.json is a distlab trace"));
  CHECK_THROWS_WITH(parse_trace_set({}, {}), Contains("no trace given"));
  // Unknown shapes: args of other types, a collective named by a number, no ts: plain spans.
  const std::string odd =
      R"([{"ph": "X", "name": "record_param_comms", "pid": "CPU functions", "tid": 1,
      "ts": 5, "dur": 3, "args": {"Collective name": 7, "In msg nelems": "many", "dtype": [1]}},
    {"ph": "X", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "dur": 3},
    {"ph": "X", "name": "ncclDevKernel_", "pid": 0, "tid": 7, "ts": 9, "dur": 1, "args": null}])";
  TraceModel m;
  REQUIRE_NOTHROW(m = parse_trace_set({odd, odd}, {"a", "b"}));
  CHECK(m.world_size() == 2);
  REQUIRE_NOTHROW(analyze_real_run(m));
  // One PyTorch file alone loads through parse_trace_model too, as a run of one rank.
  const TraceModel one = parse_trace_model(good);
  CHECK(one.info.source == "pytorch");
  CHECK(one.world_size() == 1);
}

TEST_CASE("pytorch: a folder's traces in natural order, a command line's runs grouped",
          "[pytorch]") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / "distlab-pytorch-run";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string text = torch113_rank(0, {1000}, {1100});
  for (const char* name : {"rank10.json", "rank2.json", "rank1.json"})
    std::ofstream(dir / name) << text;
  std::ofstream(dir / "README.txt") << "not a trace";
  const std::vector<std::string> files = trace_files(dir.string());
  REQUIRE(files.size() == 3);
  CHECK(fs::path(files[0]).filename() == "rank1.json");
  CHECK(fs::path(files[1]).filename() == "rank2.json");
  CHECK(fs::path(files[2]).filename() == "rank10.json");
  const TraceModel m = load_trace_set({dir.string()});
  CHECK(m.world_size() == 3);
  // A folder is one document; files given one after another are one; a distlab trace alone.
  const std::string lesson =
      std::string(DISTLAB_SOURCE_DIR) + "/traces/examples/02_scatter_gather.json";
  const auto groups = group_trace_args({dir.string(), lesson, files[0], files[1]});
  REQUIRE(groups.size() == 3);
  CHECK(groups[0] == std::vector<std::string>{dir.string()});
  CHECK(groups[1] == std::vector<std::string>{lesson});
  CHECK(groups[2].size() == 2);
  fs::remove_all(dir);
  CHECK_THROWS_WITH(load_trace_set({dir.string() + "-none"}), Contains("no such file"));
}

TEST_CASE("pytorch: the committed slow-rank run (PyTorch 1.13, gloo) names rank 3", "[pytorch]") {
  const TraceModel m = load_trace_set({torch_samples() + "/ddp4-slow"});
  REQUIRE(m.world_size() == 4);
  CHECK(m.info.rank_origin == "file order");  // 1.13 writes no distributedInfo
  CHECK_THAT(std::string(m.info.extra_json("collectives_from")), Contains("gloo's spans"));
  // 4 profiled steps, each 3 gradient buckets' all-reduces, a broadcast and an all-gather.
  REQUIRE(m.collectives.size() == 20);
  int all_reduces = 0;
  for (const CollectiveCall& c : m.collectives) {
    CHECK(c.present == c.group_size);
    CHECK(c.group_size == 4);
    all_reduces += m.str(c.name) == "all-reduce";
  }
  CHECK(all_reduces == 12);
  const RealRun run = analyze_real_run(m);
  // Rank 3 sleeps 60 ms before each forward (scripts/make_torch_traces.py): it is the slowest
  // rank, and every gradient all-reduce that has a straggler has it.
  CHECK(run.slowest_rank == 3);
  for (const CallStats& s : run.calls)
    if (s.pattern == Pattern::all_reduce && s.straggler) CHECK(s.last_rank == 3);
  double others = 0;
  for (int r = 0; r < 3; ++r) others += run.ranks[static_cast<std::size_t>(r)].caused_us;
  CHECK(run.ranks[3].caused_us > 10 * others);
  // Rank 3 waits least: the others wait for it.
  for (int r = 0; r < 3; ++r)
    CHECK(run.ranks[3].waited_us < run.ranks[static_cast<std::size_t>(r)].waited_us);
}

TEST_CASE("pytorch: the committed synthetic 2.x run: clocks, the late rank and busbw as written",
          "[pytorch]") {
  // traces/torch/pt2-comms/README.txt: written by scripts/make_torch2_sample.py from PyTorch's
  // field names, not recorded; rank R's ts run R x 234.567 ms ahead of rank 0's; rank 2 is
  // 3000 us late at the 6th call (Seq 6); every other call starts and ends together.
  const TraceModel m = load_trace_set({torch_samples() + "/pt2-comms/"});
  REQUIRE(m.world_size() == 4);
  CHECK(m.info.rank_origin == "distributedInfo");
  CHECK(m.info.mode == "nccl");
  REQUIRE(m.info.clock_error_us >= 0);
  CHECK(m.info.clock_error_us < 2e-3);  // ts are written to the nanosecond
  for (int r = 0; r < 4; ++r)
    CHECK(std::abs(m.info.clock_offset_us[static_cast<std::size_t>(r)] + r * 234567.0) <=
          m.info.clock_error_us + 2e-3);
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.calls.size() == 13);
  CHECK(run.sized_calls == 13);
  CHECK(run.slowest_rank == 2);
  for (std::size_t k = 0; k < run.calls.size(); ++k) {
    const CallStats& s = run.calls[k];
    if (k == 5) {
      CHECK(s.straggler);
      CHECK(s.last_rank == 2);
      CHECK(s.max_wait_us == Approx(3000).margin(0.01));
      CHECK(s.transfer_us == Approx(128).margin(0.01));
    } else {
      CHECK_FALSE(s.straggler);
    }
  }
  // busbw = S / t x factor, from the README's table (S: the buffer, all-gather's output,
  // reduce-scatter's input; t: the kernel, or the late rank's).
  struct Expected {
    const char* collective;
    double bytes, t_us, busbw_gb;
  };
  const std::vector<Expected> table{{"broadcast", 2097152, 64, 32.768},
                                    {"all-reduce", 4194304, 128, 49.152},
                                    {"all-reduce", 4194304, 64, 98.304},
                                    {"all-gather", 8388608, 256, 24.576},
                                    {"reduce-scatter", 16777216, 512, 24.576}};
  for (std::size_t k = 0; k < run.calls.size(); ++k) {
    const Expected& e = table[k == 0 ? 0 : 1 + (k - 1) % 4];
    const CollectiveCall& c = m.collectives[k];
    CHECK(m.str(c.name) == e.collective);
    CHECK(c.bytes == static_cast<std::int64_t>(e.bytes));
    CHECK(run.calls[k].transfer_us == Approx(e.t_us).margin(0.01));
    CHECK(run.calls[k].busbw == Approx(e.busbw_gb * 1e9).epsilon(1e-4));
  }
}

TEST_CASE("pytorch: the committed 4-rank run loads with every call matched", "[pytorch]") {
  const TraceModel m = load_trace_set({torch_samples() + "/ddp4"});
  REQUIRE(m.world_size() == 4);
  REQUIRE(m.collectives.size() == 20);
  for (const CollectiveCall& c : m.collectives) {
    CHECK(c.present == c.group_size);
    CHECK(c.group_size == 4);
  }
  CHECK(m.step_ids.size() == 20);
  CHECK(m.info.clock_error_us >= 0);
}
