// Lesson 04 — all-gather, reduce-scatter and all-reduce, built from the one-root collectives
//
// Concept: the "all" collectives leave the result on every rank instead of on one root.
// The first way anyone builds them is to glue two collectives of lessons 02 and 03 together
// through rank 0:
//   all-gather     = gather to r0 + broadcast from r0     every rank ends with every rank's chunk
//   reduce-scatter = reduce to r0 + scatter from r0       rank r ends with chunk r of the sum
//   all-reduce     = reduce to r0 + broadcast from r0     every rank ends with the whole sum
// Each rank holds its own input of L float32 (4L bytes); chunk k is 1/N of it (Partition).
//
// Cost: 2(N - 1) steps each, and all the traffic passes through rank 0:
//                    rank 0 sent + received            any other rank sent + received
//   all-gather       (N-1) * 4L  +  (N-1)/N * 4L       4L/N + 4L
//   reduce-scatter   (N-1)/N * 4L  +  (N-1) * 4L       4L + 4L/N
//   all-reduce       (N-1) * 4L  +  (N-1) * 4L         4L + 4L
// Rank 0 is the bottleneck: its traffic grows as O(N) while every other rank's stays O(1),
// so the time grows with N even though the other ranks' links sit idle most of the run.
// This is the parameter server's shape. Later lessons remove the centre: the ring (06) gives
// every rank the same 2(N-1)/N * 4L, and recursive halving / doubling (07) needs log2 N steps.
//
// Run:  ./distlab lesson 04                        4 in-process ranks, 1M float32 per rank, all three ops
//       ./distlab lesson 04 --ranks 5 --size 10    small: prints every step and every value
//       ./distlab lesson 04 --op allreduce         one op: allgather, reducescatter or allreduce
//       ./distlab lesson 04 --mpi 4                one process per rank; also checks MPI_Allgather,
//                                                  MPI_Reduce_scatter_block and MPI_Allreduce
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>
#include <Eigen/Core>

#include <algorithm>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_gather_gather_broadcast.hpp"
#include "core/collectives/all_reduce_reduce_broadcast.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/reduce_scatter_reduce_scatter.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/verify.hpp"

using namespace distlab;

namespace {

// The three compositions, in the order they run.
enum class Op { all_gather, reduce_scatter, all_reduce };
const char* op_name(Op op) {
  switch (op) {
    case Op::all_gather:
      return "all-gather";
    case Op::reduce_scatter:
      return "reduce-scatter";
    case Op::all_reduce:
      return "all-reduce";
  }
  return "?";
}

std::vector<Op> ops_for(const std::string& choice) {
  if (choice == "all") return {Op::all_gather, Op::reduce_scatter, Op::all_reduce};
  if (choice == "allgather") return {Op::all_gather};
  if (choice == "reducescatter") return {Op::reduce_scatter};
  if (choice == "allreduce") return {Op::all_reduce};
  throw UsageError(fmt::format(
      "--op '{}' is not one of the operations; use all, allgather, reducescatter or allreduce",
      choice));
}

// Bytes rank `k` should send and receive in one op (4L-byte inputs, root 0, chunks by Partition).
struct Expected {
  std::uint64_t sent = 0, recv = 0;
};
Expected expected(Op op, int k, int n, std::uint64_t L) {
  const Partition part{L, n};
  const std::uint64_t e = sizeof(float), whole = L * e, mine = part.size(k) * e;
  const std::uint64_t others = (n - 1) * whole,
                      rest = (L - part.size(0)) * e;  // rest: the chunks r0 lacks
  switch (op) {
    case Op::all_gather:  // gather: r0 gets the others' chunks; broadcast: r0 sends the whole
                          // result N-1 times
      return k == 0 ? Expected{others, rest} : Expected{mine, whole};
    case Op::reduce_scatter:  // reduce: r0 gets N-1 whole buffers; scatter: r0 sends out the
                              // others' chunks
      return k == 0 ? Expected{rest, others} : Expected{whole, mine};
    case Op::all_reduce:  // reduce: r0 gets N-1 whole buffers; broadcast: r0 sends N-1 whole sums
      return k == 0 ? Expected{others, others} : Expected{whole, whole};
  }
  return {};
}

// The longest time any rank spent in the phase called `name`.
double phase_seconds(const RunResult& r, const std::string& name) {
  double longest = 0;
  for (const auto& log : r.logs)
    for (const auto& e : log.spans)
      if (e.kind == SpanEvent::Kind::plain && e.name == name)
        longest = std::max(longest, (e.t1 - e.t0) * 1e-6);
  return longest;
}

// Elements [begin, begin + count) of rank k's input, in float64.
Eigen::VectorXd input_of(std::uint64_t seed, int k, std::size_t begin, std::size_t count) {
  Eigen::VectorXd x(static_cast<Eigen::Index>(count));
  for (std::size_t i = 0; i < count; ++i)
    x[Eigen::Index(i)] = input_value<float>(seed, k, begin + i);
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"04", "allreduce_allgather",
                 "all-gather, reduce-scatter and all-reduce built through rank 0", 4, 1 << 20});
  lesson.set_text(
      "The all-collectives leave the result on every rank. Built through rank 0 (gather or reduce "
      "to r0, then broadcast or scatter from r0) they take 2(N-1) steps and all traffic crosses "
      "rank 0: its traffic grows as O(N) while every other rank's stays O(1).",
      "Topology: every link touches rank 0 and the others sit idle most of the run. Stats: rank "
      "0's bytes against any other rank's; this is the bottleneck the ring of lesson 06 removes.");
  std::string op_choice = "all";
  lesson.app()
      .add_option("--op", op_choice,
                  "which composition to run: all, allgather, reducescatter or allreduce")
      ->capture_default_str();
  lesson.set_algorithm("naive (through rank 0)");
  std::vector<Op> ops;
  std::vector<std::pair<int, int>> step_ranges;  // rank 0: each op's traced step ids
  lesson.on_world([&](const World&) { ops = ops_for(op_choice); });
  const auto& opt = lesson.options();

  // On rank 0 after the run: the schedule, each op's traffic against its formula, and a summary.
  lesson.on_report([&](RunResult& r) {
    const int n = r.world.size;
    const std::uint64_t L = opt.size;
    const int per_op = 2 * (n - 1);  // each op is two collectives of N - 1 steps
    fmt::print("\n{} of {} float32 ({}) per rank\nover {} ranks, all through rank 0\n",
               ops.size() == 1 ? op_name(ops[0]) : "all-gather, reduce-scatter, all-reduce", L,
               format_bytes(double(L * sizeof(float))), n);
    print_schedule(r);
    print_traffic(r, "traffic per rank, all ops together");

    struct Row {
      Op op;
      int steps;
      std::uint64_t r0, r0_want, other, other_want;
      double seconds;
    };
    std::vector<Row> rows;
    for (std::size_t j = 0; j < ops.size(); ++j) {
      // The traced run's step ids, kept by rank 0 (the warm-up before it took others).
      const Op op = ops[j];
      const auto [first, last] = step_ranges[j];
      const auto t = r.traffic(first, last);
      fmt::print("\n{} (steps {}..{}):\n", op_name(op), first, last);
      fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>5}\n", "rank", "sent", "formula",
                 "received", "formula", "steps");
      Row row{op, t[0].steps, 0, 0, 0, 0, phase_seconds(r, op_name(op))};
      for (int k = 0; k < n; ++k) {
        const Expected want = expected(op, k, n, L);
        fmt::print("  {:>4}  {:>12}  {:>12}  {:>12}  {:>12}  {:>5}\n", fmt::format("r{}", k),
                   format_bytes(double(t[k].bytes_sent)), format_bytes(double(want.sent)),
                   format_bytes(double(t[k].bytes_recv)), format_bytes(double(want.recv)),
                   t[k].steps);
        r.check(fmt::format("{}: r{} sends its formula's bytes", op_name(op), k),
                t[k].bytes_sent == want.sent);
        r.check(fmt::format("{}: r{} receives its formula's bytes", op_name(op), k),
                t[k].bytes_recv == want.recv);
        const std::uint64_t moved = t[k].bytes_sent + t[k].bytes_recv,
                            moved_want = want.sent + want.recv;
        if (k == 0) {
          row.r0 = moved;
          row.r0_want = moved_want;
        } else if (moved_want >=
                   row.other_want) {  // the busiest other rank (chunks differ by one element)
          row.other = moved;
          row.other_want = moved_want;
        }
      }
      // Rank 0 is in every step of these compositions, so its step count is the op's.
      r.check(fmt::format("{}: steps = 2(N-1)", op_name(op)), row.steps == per_op);
      rows.push_back(row);
    }

    fmt::print("\nsummary (bytes are sent + received; other ranks: the busiest one):\n");
    fmt::print("  {:<14}  {:>5}  {:>7}  {:>12}  {:>12}  {:>12}  {:>12}  {:>10}\n", "op", "steps",
               "2(N-1)", "rank 0", "formula", "other ranks", "formula", "time");
    for (const auto& row : rows) {
      const auto other = [&](std::uint64_t b) {
        return n > 1 ? format_bytes(double(b)) : std::string("-");
      };
      fmt::print("  {:<14}  {:>5}  {:>7}  {:>12}  {:>12}  {:>12}  {:>12}  {:>10}\n",
                 op_name(row.op), row.steps, per_op, format_bytes(double(row.r0)),
                 format_bytes(double(row.r0_want)), other(row.other), other(row.other_want),
                 format_seconds(row.seconds));
      r.check(fmt::format("{}: rank 0 moves its formula's bytes", op_name(row.op)),
              row.r0 == row.r0_want);
      r.check(fmt::format("{}: the busiest other rank moves its formula's bytes", op_name(row.op)),
              row.other == row.other_want);
    }
    fmt::print("  steps in all: {} (formula {} ops x 2(N-1) = {})\n", r.steps(), ops.size(),
               int(ops.size()) * per_op);
    r.check("steps in all = ops x 2(N-1)", r.steps() == int(ops.size()) * per_op);
    if (n > 1 && !rows.empty() && rows.back().other > 0)
      fmt::print("  rank 0 moves {:.1f}x the bytes of any other rank in {}: O(N) at the centre\n",
                 double(rows.back().r0) / double(rows.back().other), op_name(rows.back().op));
  });

  // Memory, counted from the buffers below: per rank the input, the all-gather's and the
  // all-reduce's results, a library result (4 x 4 B per element) and the float64 concat and sum
  // (2 x 8 B): 32 B per element.
  lesson.needs_memory([&](const World&) {
    return MemoryNeed{32.0 * double(lesson.options().size), 0};
  });

  return lesson.run(argc, argv, [&](Comm& comm) {
    const int n = comm.size(), me = comm.rank();
    const std::size_t L = opt.size;
    const Partition part{
        L, n};  // chunk k is [part.begin(k), part.end(k)); sizes differ by at most one
    const auto my_begin = part.begin(me), my_size = part.size(me);
    const auto runs = [&](Op op) { return std::find(ops.begin(), ops.end(), op) != ops.end(); };
    // One logical buffer per op, so the viewer replays each op's shards on their own.
    for (Op op : ops) comm.declare_buffer(op_name(op), L, n);

    // STEP 1: every rank fills its own input of L elements.
    Buffer<float> input = comm.alloc<float>(L, Category::data);
    fill_input(input.view(), opt.seed, me);
    const View<const float> my_input(input.view()), my_chunk = my_input.sub(my_begin, my_size);
    if (L <= 16 && n <= 8) {
      comm.say("\n");
      for (int k = 0; k < n; ++k) {
        std::vector<float> x(L);
        fill_input(View<float>{x.data(), L}, opt.seed, k);
        comm.say("input of r{}                     : {}\n", k, fmt::join(x, " "));
      }
    }

    // The independent references, in float64 from the inputs:
    //   concat  chunk k of rank k's input, for every k   (what all-gather must give)
    //   sum     the element-wise sum of every rank's input (what the reductions must give)
    Eigen::VectorXd concat(static_cast<Eigen::Index>(L));
    for (int k = 0; k < n; ++k)
      concat.segment(Eigen::Index(part.begin(k)), Eigen::Index(part.size(k))) =
          input_of(opt.seed, k, part.begin(k), part.size(k));
    Eigen::VectorXd sum = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(L));
    if (runs(Op::reduce_scatter) || runs(Op::all_reduce))
      for (int k = 0; k < n; ++k) sum += input_of(opt.seed, k, 0, L);
    const Eigen::VectorXd my_sum_chunk = sum.segment(Eigen::Index(my_begin), Eigen::Index(my_size));

    // A test's --inject-fault corrupts one element of the last rank's result before its check.
    const auto corrupt_if_asked = [&](Buffer<float>& result) {
      if (comm.inject_fault()) inject_fault_into(result.view());
    };

    // Each op runs twice: an untraced warm-up, so that the timed run finds its workspace (rank
    // 0's whole-buffer sum in the reduce-scatter) in the allocator's cache instead of allocating
    // it inside the timed phase, then a barrier and the traced, timed run.
    // `reset` restores what the warm-up overwrote (an in-place op's input).
    const auto run_op = [&](Op op, const std::function<void()>& collective,
                            const std::function<void()>& reset = {}) {
      comm.recorder().set_enabled(false);
      collective();
      comm.recorder().set_enabled(true);
      if (reset) reset();
      comm.barrier();  // start together, so the phase times the op and not a late rank
      const int first = comm.next_steps(0);
      {
        auto phase = comm.phase(op_name(op));
        collective();
      }
      if (me == 0) step_ranges.emplace_back(first, comm.next_steps(0) - 1);
    };

    // STEP 2: all-gather = gather my chunk to r0 (N-1 steps), then r0 broadcasts the whole (N-1
    // steps).
    Buffer<float> gathered = comm.alloc<float>(runs(Op::all_gather) ? L : 0, Category::data);
    if (runs(Op::all_gather)) {
      run_op(Op::all_gather, [&] {
        coll::all_gather_gather_broadcast(comm, my_chunk, gathered.view(), op_name(Op::all_gather));
      });
      corrupt_if_asked(gathered);
      auto c = compare(View<const float>(gathered.view()), concat, 0.0);  // copies only: exact
      comm.check("all-gather: I hold every rank's chunk in rank order", c.ok, c.detail());
      if (L <= 16)
        comm.say("\nall-gather result on every rank : {}\n",
                 fmt::join(to_host(gathered.view()), " "));
    }

    // STEP 3: reduce-scatter = reduce every whole input to r0 (N-1 steps), then r0 scatters the
    // sum's chunks (N-1 steps). Rank r keeps chunk r of the sum.
    Buffer<float> sum_chunk =
        comm.alloc<float>(runs(Op::reduce_scatter) ? my_size : 0, Category::data);
    if (runs(Op::reduce_scatter)) {
      run_op(Op::reduce_scatter, [&] {
        coll::reduce_scatter_reduce_scatter(comm, my_input, sum_chunk.view(),
                                            op_name(Op::reduce_scatter));
      });
      corrupt_if_asked(sum_chunk);
      auto c = compare(View<const float>(sum_chunk.view()), my_sum_chunk, sum_tolerance(n));
      comm.check("reduce-scatter: I hold my chunk of the sum", c.ok, c.detail());
      if (L <= 16)
        comm.say("\nreduce-scatter chunk 0 on r0    : {}\n",
                 fmt::join(to_host(sum_chunk.view()), " "));
    }

    // STEP 4: all-reduce = reduce to r0 (N-1 steps), then r0 broadcasts the sum (N-1 steps).
    Buffer<float> reduced = comm.alloc<float>(runs(Op::all_reduce) ? L : 0, Category::data);
    if (runs(Op::all_reduce)) {
      // All-reduce works in place, input in and sum out: the input again after the warm-up.
      const auto load_input = [&] { ops::copy(reduced.view(), my_input); };
      load_input();
      run_op(
          Op::all_reduce,
          [&] { coll::all_reduce_reduce_broadcast(comm, reduced.view(), op_name(Op::all_reduce)); },
          load_input);
      corrupt_if_asked(reduced);
      auto c = compare(View<const float>(reduced.view()), sum, sum_tolerance(n));
      comm.check("all-reduce: I hold the whole sum", c.ok, c.detail());
      if (L <= 16)
        comm.say("\nall-reduce result on every rank : {}\n",
                 fmt::join(to_host(reduced.view()), " "));
    }

    // STEP 5 (processes): MPI's or Gloo's own collectives on the same inputs must agree.
    if (baseline::available(comm)) {
      if (runs(Op::all_gather)) {
        Buffer<float> out = comm.alloc<float>(L, Category::data);
        const std::string call =
            baseline::all_gather(comm, my_chunk.data(), out.data(), L, DType::f32);
        auto c = compare(View<const float>(out.view()), concat, 0.0);
        comm.check(call + " gives the same all-gather", c.ok, c.detail());
      }
      if (runs(Op::reduce_scatter)) {
        Buffer<float> out = comm.alloc<float>(my_size, Category::data);
        const std::string call =
            baseline::reduce_scatter(comm, my_input.data(), out.data(), L, DType::f32);
        auto c = compare(View<const float>(out.view()), my_sum_chunk, sum_tolerance(n));
        comm.check(call + " gives the same chunk of the sum", c.ok, c.detail());
      }
      if (runs(Op::all_reduce)) {
        Buffer<float> out = comm.alloc<float>(L, Category::data);
        const std::string call =
            baseline::all_reduce(comm, my_input.data(), out.data(), L, DType::f32);
        auto c = compare(View<const float>(out.view()), sum, sum_tolerance(n));
        comm.check(call + " gives the same sum", c.ok, c.detail());
      }
    }
  });
}
