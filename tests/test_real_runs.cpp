// Real runs as others record them (viewer/model/pytorch_trace.hpp, torch_calls.hpp,
// call_align.hpp, gzip.hpp): traces written here in the shapes the field writes (gzipped
// files, sampled windows, all-to-all through NCCL's send/recv kernels with split sizes, a
// pipeline's send and recv, PyTorch 2.x's sequence numbers, PyTorch <= 2.1's Concrete Inputs),
// and, under the hidden tag [.real-traces], the real traces in ../shared/real-traces/ beside
// the checkout (ctest's viewer.real-traces runs them, and says skipped when the folder is not
// there; they are read in place, never copied into the tree).
#include "catch.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "viewer/model/call_align.hpp"
#include "viewer/model/gzip.hpp"
#include "viewer/model/pytorch_trace.hpp"
#include "viewer/model/real_run.hpp"

using namespace distlab::viewer;
using Catch::Contains;

namespace {

std::string x(std::string_view name, double ts, double dur, int pid, int tid, std::string_view cat,
              std::string_view args = "{}") {
  return fmt::format(
      R"({{"ph": "X", "cat": "{}", "name": "{}", "pid": {}, "tid": {}, "ts": {:.3f}, "dur": {:.3f}, "args": {}}})",
      cat, name, pid, tid, ts, dur, args);
}

std::string file(int rank, int world, const std::vector<std::string>& events,
                 std::string_view extra = "") {
  std::string out = fmt::format(
      R"({{"schemaVersion": 1, {}"distributedInfo": {{"backend": "nccl", "rank": {}, "world_size": {}}}, "traceEvents": [)",
      extra, rank, world);
  out +=
      "\n" +
      std::string(
          R"({"ph": "M", "name": "thread_name", "pid": 0, "tid": 7, "args": {"name": "stream 7"}})");
  for (const std::string& e : events) out += ",\n" + e;
  return out + "\n]}\n";
}

// One collective as PyTorch <= 2.1 records it (the Megatron traces' shape): c10d's op around
// record_param_comms (Concrete Inputs: tensors, seq, pg pointer, rank, name, splits, world
// size), the nccl: annotation with its Input type, the launch, and the kernel it launched.
struct Call {
  std::string op = "allreduce_", annotation = "all_reduce", kernel = "AllReduce_Sum_f16_RING_LL";
  std::string dims = "[[4, 2048, 4096]]";  // the tensor list's Input Dims
  std::string type = "c10::Half";
  long long seq = -1;  // -1: none written
  int world = 2;
  double at = 0, kernel_us = 100;
  std::string concrete_extra;  // the c10d op's Concrete Inputs after the tensors
};

void add_call(std::vector<std::string>& ev, const Call& c, long long& correlation,
              std::string_view around = "") {
  const double t = c.at;
  if (!around.empty()) ev.push_back(x(around, t - 50, 300, 100, 100, "user_annotation"));
  ev.push_back(x(
      "c10d::" + c.op, t, 120, 100, 100, "cpu_op",
      fmt::format(
          R"({{"Input Dims": [{}, [], [], [], []], "Input type": ["TensorList", "", "", "", "Scalar"], "Concrete Inputs": ["", ""{}]}})",
          c.dims, c.concrete_extra)));
  ev.push_back(x(
      "record_param_comms", t + 10, 90, 100, 100, "cpu_op",
      fmt::format(
          R"({{"Input Dims": [{}, [], [], [], [], [], [], []], "Input type": ["TensorList", "Scalar", "Scalar", "Scalar", "", "ScalarList", "ScalarList", "Scalar"], "Concrete Inputs": ["", "{}", "93825114103440", "0", "", "[]", "[]", "{}"]}})",
          c.dims, c.seq >= 0 ? std::to_string(c.seq) : "", c.world)));
  ev.push_back(x("nccl:" + c.annotation, t + 20, 60, 100, 100, "user_annotation",
                 fmt::format(R"({{"Input Dims": [{}], "Input type": ["{}"]}})",
                             c.dims.substr(1, c.dims.size() - 2), c.type)));
  ++correlation;
  ev.push_back(x("cudaLaunchKernelExC", t + 30, 10, 100, 100, "cuda_runtime",
                 fmt::format(R"({{"correlation": {}}})", correlation)));
  ev.push_back(x("ncclDevKernel_" + c.kernel + "(ncclDevComm*, unsigned long, ncclWork*)", t + 45,
                 c.kernel_us, 0, 7, "kernel",
                 fmt::format(R"({{"correlation": {}}})", correlation)));
}

std::string temp_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() / ("distlab_real_runs_" + name);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

void write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("real runs: calls align by content, so a missing call costs only itself",
          "[pytorch][align]") {
  // Eight identical calls every 1000 us; b lacks the fourth (a sampled window) and its clock
  // runs 3 us behind.
  std::vector<AlignCall> a, b;
  for (int k = 0; k < 8; ++k) {
    a.push_back({1, 64, -1, 1000.0 * k});
    if (k != 3) b.push_back({1, 64, -1, 1000.0 * k - 3});
  }
  const Alignment al = align_calls(a, b);
  CHECK(al.gaps == 1);
  CHECK(al.offset == Approx(3));
  for (const auto& [i, j] : al.path)
    if (i >= 0 && j >= 0)
      CHECK(a[static_cast<std::size_t>(i)].time == Approx(b[static_cast<std::size_t>(j)].time + 3));
  // Order alone would pair a's fourth with b's fourth (a's fifth): sizes disagree, so no.
  std::vector<AlignCall> c = a;
  c[5].bytes = 128;
  std::vector<AlignCall> d = b;
  d[4].bytes = 128;  // b's fifth is a's sixth
  const Alignment al2 = align_calls(c, d);
  CHECK(al2.gaps == 1);
  // Sizes decide where time would mislead: b's clock is one call (1000 us) behind and its
  // window starts a call late; by time alone b's calls pair with a's first three.
  const std::vector<AlignCall> e{
      {1, 64, -1, 0}, {1, 128, -1, 1000}, {1, 64, -1, 2000}, {1, 128, -1, 3000}},
      f{{1, 128, -1, 0}, {1, 64, -1, 1000}, {1, 128, -1, 2000}};
  const Alignment al5 = align_calls(e, f);
  CHECK(al5.gaps == 1);
  CHECK(al5.path[0] == std::pair<int, int>{0, -1});
  CHECK(al5.offset == Approx(1000));
  // Far off the diagonal: 20 calls only b has, 20 both have, 20 only a has. The best
  // alignment pairs the 20 at a distance of 20 from the diagonal, past the first band's 16.
  std::vector<AlignCall> g, h;
  for (int k = 0; k < 20; ++k) h.push_back({2, -1, -1, 10.0 * k});
  for (int k = 0; k < 20; ++k)
    g.push_back({1, -1, -1, 1000.0 + k}), h.push_back({1, -1, -1, 1000.0 + k});
  for (int k = 0; k < 20; ++k) g.push_back({3, -1, -1, 5000.0 + k});
  const Alignment al6 = align_calls(g, h);
  CHECK(al6.gaps == 40);
  int pairs = 0;
  for (const auto& [i, j] : al6.path) pairs += i >= 0 && j >= 0;
  CHECK(pairs == 20);
  // Sequence numbers decide alone when every call has one.
  std::vector<AlignCall> s1{{1, -1, 10, 0}, {1, -1, 11, 5}, {1, -1, 12, 9}},
      s2{{1, -1, 11, 500}, {1, -1, 12, 900}};
  const Alignment al3 = align_calls(s1, s2);
  REQUIRE(al3.path.size() == 3);
  CHECK(al3.path[0] == std::pair<int, int>{0, -1});
  CHECK(al3.path[1] == std::pair<int, int>{1, 0});
  // A window that starts later: as few gaps either way, time puts them at the start.
  std::vector<AlignCall> late(a.begin() + 2, a.end());
  const Alignment al4 = align_calls(a, late);
  CHECK(al4.gaps == 2);
  CHECK(al4.path[0] == std::pair<int, int>{0, -1});
  CHECK(al4.path[1] == std::pair<int, int>{1, -1});
}

TEST_CASE("real runs: sizes from shapes, the group from Concrete Inputs, phases and steps",
          "[pytorch]") {
  // Two ranks, PyTorch <= 2.1's records: 64 MiB of c10::Half per all-reduce (4 x 2048 x 4096),
  // world size 2 and sequence numbers in record_param_comms' Concrete Inputs.
  std::vector<std::string> texts;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> ev;
    long long corr = 0;
    ev.push_back(x("ProfilerStep#3", 0, 10000, 100, 100, "user_annotation"));
    Call c;
    c.seq = 337;
    c.at = 1000 + r * 5;
    add_call(ev, c, corr, "_ReduceFromModelParallelRegion");
    c.seq = 338;
    c.at = 3000;
    add_call(ev, c, corr, "## backward ##");
    c.seq = 339;
    c.at = 6000;
    c.dims = "[[1024], [1024]]";  // a list of two tensors: elements add up
    c.type = "float";
    c.kernel = "AllReduce_Sum_f32_RING_LL";
    add_call(ev, c, corr, "Optimizer.step#AdamW.step");
    c.seq = 340;
    c.at = 8000;
    add_call(ev, c, corr, "autograd::engine::evaluate_function: AddmmBackward0");
    texts.push_back(file(r, 2, ev));
  }
  const TraceModel m = parse_trace_set({texts[0], texts[1]}, {"r0", "r1"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.collectives.size() == 4);
  const CollectiveCall& c0 = m.collectives[0];
  CHECK(c0.bytes == 64ll << 20);
  CHECK(std::string(m.str(c0.size_from)) == "shapes of c10d::allreduce and nccl:all_reduce");
  CHECK(c0.group_size == 2);
  CHECK(std::string(m.str(c0.group_size_from)) == "record_param_comms");
  CHECK(c0.seq == 337);
  CHECK(std::string(m.str(c0.phase)) == "forward");
  CHECK(c0.profiler_step == 3);
  CHECK(std::string(m.str(m.collectives[1].phase)) == "backward");
  CHECK(std::string(m.str(m.collectives[2].phase)) == "optimizer");
  CHECK(std::string(m.str(m.collectives[3].phase)) == "backward");
  CHECK(m.collectives[2].bytes == 2048 * 4);
  // Timed by the kernel each launched (correlation), not by the CPU side.
  for (const CollectiveCall& c : m.collectives)
    for (int r = 0; r < 2; ++r) {
      CHECK(c.spans[static_cast<std::size_t>(r)] != c.cpu_spans[static_cast<std::size_t>(r)]);
      CHECK(std::string(
                m.str(m.spans[static_cast<std::size_t>(c.spans[static_cast<std::size_t>(r)])].name))
                .starts_with("ncclDevKernel_"));
    }
  // busbw = S / t x 2 (n - 1) / n, the kernel's 100 us.
  CHECK(run.calls[0].busbw == Approx((64 << 20) / 100e-6 * 2 * 1 / 2));
  REQUIRE(run.phases.size() == 3);  // forward, backward (twice), optimizer
  CHECK(run.phases[0].name == "forward");
  CHECK(run.phases[0].bytes == 64ll << 20);
  CHECK_THAT(describe_real_run(m, run), Contains("forward"));
  CHECK_THAT(real_run_csv(m, run), Contains("\"shapes of c10d::allreduce and nccl:all_reduce\""));
}

TEST_CASE("real runs: a gzipped folder loads, and a folder of several runs takes the latest",
          "[pytorch][gz]") {
  std::vector<std::string> ev;
  long long corr = 0;
  Call c;
  add_call(ev, c, corr);
  const std::string dir = temp_dir("gz");
  for (int r = 0; r < 2; ++r) {
    // Two windows per rank, as tensorboard_trace_handler names them: the later one is taken.
    write(dir + fmt::format("/host_{}.1000.pt.trace.json.gz", r), gzip(file(r, 2, {})));
    write(dir + fmt::format("/host_{}.2000.pt.trace.json.gz", r), gzip(file(r, 2, ev)));
  }
  std::string note;
  const std::vector<std::string> files = trace_files(dir, &note);
  REQUIRE(files.size() == 2);
  CHECK_THAT(files[0], Contains("host_0.2000"));
  CHECK_THAT(note, Contains("took the latest"));
  const TraceModel m = load_trace_set({dir});
  REQUIRE(m.collectives.size() == 1);
  CHECK(m.collectives[0].present == 2);
  CHECK(m.collectives[0].bytes == 64ll << 20);
  CHECK_THAT(m.info.files_note, Contains("several runs"));
  // A gzipped text parses as its JSON would; one cut short says so.
  const std::string z = gzip(file(0, 1, ev));
  CHECK(parse_trace_model(z).collectives.size() == 1);
  CHECK_THROWS_WITH(parse_trace_model(z.substr(0, z.size() / 2)), Contains("cut short"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("real runs: a sampled window and a late start cost their calls only, and no hang",
          "[pytorch]") {
  // Ten identical all-reduces, 2 ms apart. Rank 1's trace lacks the fifth (a sampled window)
  // and starts at the third; rank 0's clock is 4 us ahead.
  std::vector<std::string> texts;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> ev;
    long long corr = 0;
    for (int k = 0; k < 10; ++k) {
      if (r == 1 && (k == 4 || k < 2)) continue;
      Call c;
      c.at = 2000.0 * k + (r == 0 ? 4 : 0);
      add_call(ev, c, corr);
    }
    texts.push_back(file(r, 2, ev));
  }
  const TraceModel m = parse_trace_set({texts[0], texts[1]}, {"r0", "r1"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.collectives.size() == 10);
  int both = 0, outside = 0, dropped = 0;
  for (const CollectiveCall& c : m.collectives) {
    both += c.present == 2;
    outside += c.missing(Absence::outside_window);
    dropped += c.missing(Absence::dropped);
    CHECK(c.missing(Absence::not_called) == 0);
  }
  CHECK(both == 7);
  CHECK(outside == 2);
  CHECK(dropped == 1);
  CHECK(m.collectives[4].absent[1] == Absence::dropped);
  CHECK(run.hang_calls == 0);
  CHECK(m.info.clock_offset_us[1] == Approx(4));
  CHECK(m.info.clock_error_us == Approx(0).margin(1e-6));
  CHECK_THAT(describe_real_run(m, run), Contains("no hang"));
}

TEST_CASE(
    "real runs: all-to-all through send/recv kernels with its splits, and a pipeline's "
    "send and recv paired",
    "[pytorch]") {
  std::vector<std::string> texts;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> ev;
    long long corr = 0;
    Call a2a;
    a2a.op = "alltoall_base_";
    a2a.annotation = "all_to_all";
    a2a.kernel = "SendRecv";
    a2a.dims = "[[8, 1024]]";
    a2a.type = "c10::BFloat16";
    a2a.at = 1000;
    a2a.concrete_extra = R"(, "", "[2, 6]", "[4, 4]", "-1")";
    add_call(ev, a2a, corr);
    // Rank 0 sends to rank 1 (Concrete Inputs: tensors, group, dst, tag); rank 1 receives.
    Call p;
    p.op = r == 0 ? "send" : "recv_";
    p.annotation = r == 0 ? "send" : "recv";
    p.kernel = "SendRecv";
    p.dims = "[[16, 1024]]";
    p.type = "float";
    p.at = 5000;
    p.concrete_extra = r == 0 ? R"(, "1", "0")" : R"(, "0", "0")";
    add_call(ev, p, corr);
    texts.push_back(file(r, 2, ev));
  }
  // The all-to-all's Input Dims hold the output at 0 and the input at 1.
  for (std::string& t : texts) {
    const std::size_t at = t.find("\"c10d::alltoall_base_\"");
    const std::size_t dims = t.find("[[[8, 1024]], []", at);
    REQUIRE(dims != std::string::npos);
    t.replace(dims, 16, "[[8, 1024], [8, 1024]");
    const std::size_t type = t.find("[\"TensorList\", \"\"", at);
    t.replace(type, 17, "[\"c10::BFloat16\", \"c10::BFloat16\"");
  }
  const TraceModel m = parse_trace_set({texts[0], texts[1]}, {"r0", "r1"});
  const RealRun run = analyze_real_run(m);
  INFO(real_run_table(m, run));
  REQUIRE(m.collectives.size() == 2);
  const CollectiveCall* a2a = nullptr;
  const CollectiveCall* p2p = nullptr;
  for (const CollectiveCall& c : m.collectives)
    (std::string(m.str(c.name)) == "all-to-all" ? a2a : p2p) = &c;
  REQUIRE(a2a);
  REQUIRE(p2p);
  CHECK(a2a->present == 2);
  CHECK(a2a->bytes == 8 * 1024 * 2);
  CHECK(std::string(m.str(a2a->splits)) == "in [4, 4] out [2, 6]");
  CHECK(std::string(m.str(m.spans[static_cast<std::size_t>(a2a->spans[0])].name))
            .starts_with("ncclDevKernel_SendRecv"));
  CHECK(std::string(m.str(p2p->name)) == "send-recv");
  CHECK(p2p->present == 2);
  CHECK(p2p->bytes == 16 * 1024 * 4);
  CHECK(run.hang_calls == 0);
  const CallStats& s = run.calls[static_cast<std::size_t>(p2p - m.collectives.data())];
  CHECK(s.busbw == Approx(s.algbw));  // nccl-tests' sendrecv: factor 1
}

TEST_CASE("real runs: PyTorch 2.x's Seq pairs calls whose order differs by rank", "[pytorch]") {
  // Comms args with "Seq": rank 1's window lacks seq 7; its two kernels would pair with
  // rank 0's first two by order alone.
  std::vector<std::string> texts;
  for (int r = 0; r < 2; ++r) {
    std::vector<std::string> ev;
    for (int seq : {7, 8, 9}) {
      if (r == 1 && seq == 7) continue;
      const std::string args = fmt::format(
          R"({{"Collective name": "allreduce", "dtype": "Float", "In msg nelems": 1024, "Out msg nelems": 1024, "Group size": 2, "Process Group Name": "0", "Process Group Ranks": "[0, 1]", "Seq": "{}"}})",
          seq);
      ev.push_back(x("record_param_comms", 1000.0 * seq, 20, 100, 100, "cpu_op", args));
      ev.push_back(x("ncclDevKernel_AllReduce_Sum_f32_RING_LL(x)", 1000.0 * seq + 30, 50, 0, 7,
                     "kernel", args));
    }
    texts.push_back(file(r, 2, ev));
  }
  const TraceModel m = parse_trace_set({texts[0], texts[1]}, {"r0", "r1"});
  REQUIRE(m.collectives.size() == 3);
  CHECK(m.collectives[0].seq == 7);
  CHECK(m.collectives[0].present == 1);
  CHECK(m.collectives[1].present == 2);
  CHECK(m.collectives[1].seq == 8);
  CHECK(m.collectives[0].absent[1] == Absence::outside_window);
}

namespace {
std::string real_traces() {
  return std::string(DISTLAB_SOURCE_DIR) + "/../shared/real-traces";
}
}  // namespace

TEST_CASE("real traces: Megatron-LM's 8 A100s, every all-reduce 64 MiB from its shapes",
          "[.real-traces]") {
  const TraceModel m = load_trace_set({real_traces() + "/astrasim-megatron-tp8"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.world_size() == 8);
  int tp = 0, of_64 = 0;
  for (const CollectiveCall& c : m.collectives) {
    CHECK(c.bytes > 0);
    CHECK(c.missing(Absence::not_called) == 0);
    if (c.group_size != 8) continue;
    ++tp;
    CHECK(c.present == 8);
    CHECK(std::string(m.str(c.phase)) == "forward");
    CHECK(c.profiler_step == 3);
    if (c.bytes == 64ll << 20) ++of_64;
  }
  CHECK(tp == 84);
  CHECK(of_64 == 81);  // and 3 of 32 KiB (the cross-entropy's)
  CHECK(run.hang_calls == 0);
  CHECK(m.info.clock_error_us < 100);  // the false matches of order alone gave 135 ms
  CHECK_THAT(real_run_table(m, run), Contains("64.0 MiB"));
}

TEST_CASE("real traces: HTA's gzipped rank, comms args and phases", "[.real-traces]") {
  const TraceModel m = load_trace_set({real_traces() + "/hta-single-rank"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.collectives.size() == 21);
  int backward = 0, forward = 0;
  for (const CollectiveCall& c : m.collectives) {
    CHECK(std::string(m.str(c.size_from)) == "comms args");
    CHECK(c.group_size == 2);  // from Group size: the other rank's file is not here
    backward += std::string(m.str(c.phase)) == "backward";
    forward += std::string(m.str(c.phase)) == "forward";
  }
  CHECK(backward == 15);  // DDP's all-reduces, in autograd's AccumulateGrad
  CHECK(forward == 6);    // DDP's broadcasts, in DistributedDataParallel.forward
  CHECK(run.sized_calls == 21);
}

TEST_CASE("real runs: overlap counts kernels as computation, never copies, fills or waits",
          "[pytorch]") {
  // One rank: its all-reduce kernel runs 1000-1100 us (45 us after the call's start at 955);
  // a GEMM on stream 9 covers its first 40 us, a Memcpy and a Memset its last 60: 40 us hidden,
  // 60 exposed.
  std::vector<std::string> ev;
  long long corr = 0;
  Call c;
  c.at = 955;
  c.world = 1;
  add_call(ev, c, corr, "Optimizer.step#SGD.step");
  ev.push_back(
      R"({"ph": "M", "name": "thread_name", "pid": 0, "tid": 9, "args": {"name": "stream 9"}})");
  ev.push_back(x("ampere_sgemm_128x64_nn", 960, 80, 0, 9, "kernel"));
  ev.push_back(x("Memcpy DtoD (Device -> Device)", 1040, 30, 0, 9, "gpu_memcpy"));
  ev.push_back(x("Memset (Device)", 1070, 30, 0, 9, "gpu_memset"));
  const TraceModel m = parse_trace_set({file(0, 1, ev)}, {"r0"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(run.calls.size() == 1);
  CHECK(run.calls[0].exposed_us == Approx(60));
  CHECK(run.ranks[0].hidden_us == Approx(40));
  REQUIRE(run.phases.size() == 1);
  CHECK(run.phases[0].name == "optimizer");
  CHECK(run.phases[0].time_us == Approx(100));
  CHECK(run.phases[0].exposed_us == Approx(60));
}

TEST_CASE("real runs: a position that holds no tensor gives no size", "[pytorch]") {
  // An all-to-all whose op recorded its output at 0 and nothing it calls a tensor at 1 (Input
  // Dims [], Input type ""): the size is the output's (8 x 1024 bfloat16 = 16 KiB), not the
  // empty position read as one element.
  std::vector<std::string> ev;
  long long corr = 0;
  Call c;
  c.op = "alltoall_base_";
  c.annotation = "all_to_all";
  c.kernel = "SendRecv";
  c.dims = "[[8, 1024]]";
  c.type = "c10::BFloat16";
  c.world = 1;
  add_call(ev, c, corr);
  const TraceModel m = parse_trace_set({file(0, 1, ev)}, {"r0"});
  REQUIRE(m.collectives.size() == 1);
  CHECK(m.collectives[0].bytes == 8 * 1024 * 2);
  CHECK(std::string(m.str(m.collectives[0].size_from)) ==
        "shapes of c10d::alltoallbase and nccl:all_to_all");
}

TEST_CASE("real runs: groups of one size that the trace does not tell apart are said to mix",
          "[pytorch]") {
  // Four ranks in two groups of 2 (Concrete Inputs' world size 2, a pointer per process):
  // nothing names which ranks share a group, so both fall under "2-rank #0".
  std::vector<std::string> texts;
  for (int r = 0; r < 4; ++r) {
    std::vector<std::string> ev;
    long long corr = 0;
    Call c;
    c.seq = 1;
    c.at = 1000;
    add_call(ev, c, corr);
    texts.push_back(file(r, 4, ev));
  }
  const TraceModel m =
      parse_trace_set({texts[0], texts[1], texts[2], texts[3]}, {"r0", "r1", "r2", "r3"});
  const RealRun run = analyze_real_run(m);
  REQUIRE(m.collectives.size() == 1);
  CHECK(m.collectives[0].group_size == 2);
  CHECK(m.collectives[0].present == 4);
  CHECK(run.merged_group_calls == 1);
  CHECK_THAT(describe_real_run(m, run), Contains("groups of one size were taken as one"));
  // The same call on the group's own two ranks: as many ranks as the group holds, nothing mixed.
  const TraceModel pair = parse_trace_set({texts[0], texts[1]}, {"r0", "r1"});
  const RealRun one = analyze_real_run(pair);
  REQUIRE(pair.collectives.size() == 1);
  CHECK(pair.collectives[0].present == 2);
  CHECK(one.merged_group_calls == 0);
  CHECK_THAT(describe_real_run(pair, one), !Contains("groups of one size"));
}
