// distlab_bench_trace — what recording the trace costs.
//
// Runs the same all-reduce (--algo, default ring_chunked) with the recorder on and off,
// interleaved, and reports the median time per all-reduce for each and the difference. Recording is
// a push_back into the rank's own event vectors, so the cost is per message, not per byte: large
// buffers should show no measurable difference, tiny ones a fraction of a microsecond per message.
//
//   distlab_bench_trace [--ranks 4] [--size 16M] [--iters 10] [--algo ring_chunked]
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <vector>

#include "core/base/units.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson bench(
      {"b1", "trace_overhead", "all-reduce with the trace recorder on and off", 4, 16 << 20});
  int iters = 10;
  std::string algo_name = "ring_chunked";
  bench.app()
      .add_option("--algo", algo_name, "all-reduce algorithm (see lesson 06/07)")
      ->capture_default_str();
  coll::AllReduceAlgo algo = coll::AllReduceAlgo::ring_chunked;
  bench.on_world([&](const World&) { algo = coll::parse_all_reduce_algo(algo_name); });
  bench.app()
      .add_option("--iters", iters, "all-reduces per setting")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  std::vector<double> on, off;  // rank 0's seconds per all-reduce
  bench.on_report([&](RunResult& r) {
    auto quantile = [](std::vector<double> v, double q) {
      std::sort(v.begin(), v.end());
      return v[static_cast<std::size_t>(q * double(v.size() - 1) + 0.5)];
    };
    const double t_on = quantile(on, 0.5), t_off = quantile(off, 0.5);
    const std::uint64_t bytes = bench.options().size * sizeof(float);
    int msgs = 0;  // rank 0's messages per all-reduce, counted from the last (recorded) one
    for (const auto& e : r.logs[0].spans) msgs += is_message(e.kind);
    msgs = std::max(1, msgs / (iters + 1));
    fmt::print("\n{} all-reduce of {} on {} ranks ({}), median of {} each:\n",
               coll::to_string(algo), format_bytes(double(bytes)), r.world.size, r.world.transport,
               iters);
    fmt::print("  recorder off  {:>10}   (quartiles {} .. {})\n", format_seconds(t_off),
               format_seconds(quantile(off, 0.25)), format_seconds(quantile(off, 0.75)));
    fmt::print("  recorder on   {:>10}   (quartiles {} .. {})\n", format_seconds(t_on),
               format_seconds(quantile(on, 0.25)), format_seconds(quantile(on, 0.75)));
    fmt::print("  overhead      {:>+9.2f} %   ({:+.3f} us per message on rank 0)\n",
               100.0 * (t_on - t_off) / t_off, (t_on - t_off) * 1e6 / msgs);
    r.check("timed every iteration",
            on.size() == std::size_t(iters) && off.size() == std::size_t(iters));
  });
  return bench.run(argc, argv, [&](Comm& comm) {
    const std::size_t n = bench.options().size;
    Buffer<float> data = comm.alloc<float>(n, Category::data);
    fill_input(data.view(), 1, comm.rank());
    for (int i = 0; i < 2 * iters + 1; ++i) {
      // i = 0 warms up, then off, on, on, off, off, on, on, off ...: each setting runs as often
      // first as second, so drift and ordering effects cancel.
      const bool record = i > 0 && ((i - 1) % 4 == 1 || (i - 1) % 4 == 2);
      comm.recorder().set_enabled(record);
      comm.barrier();
      const double t0 = now_us();
      coll::all_reduce(comm, data.view(), algo);
      comm.barrier();
      const double dt = (now_us() - t0) * 1e-6;
      if (comm.rank() == 0 && i > 0) (record ? on : off).push_back(dt);
      for (float& x : data.host()) x = 1.0f;  // keep values bounded across iterations
    }
    comm.recorder().set_enabled(true);
    // After the last all-reduce of ones every element is N.
    bool all_n = std::all_of(data.host().begin(), data.host().end(),
                             [&](float x) { return x == float(comm.size()); });
    if (iters > 0) {
      for (float& x : data.host()) x = 1.0f;
      coll::all_reduce(comm, data.view(), algo);
      all_n = std::all_of(data.host().begin(), data.host().end(),
                          [&](float x) { return x == float(comm.size()); });
    }
    comm.check("all-reduce of ones gives N everywhere", all_n);
  });
}
