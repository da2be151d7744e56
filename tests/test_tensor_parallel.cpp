// Tests for core/training/tensor_parallel.hpp's sequence parallelism: f's all-gather and g's
// reduce-scatter of a (T x h) activation's rows, and the bytes they move against one ring
// all-reduce's.
#include "catch.hpp"

#include <cstdint>
#include <vector>

#include "core/base/partition.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/runtime/runtime.hpp"
#include "core/training/tensor_parallel.hpp"

using namespace distlab;

TEST_CASE(
    "sequence parallelism: the all-gather hands every rank all the rows and the reduce-scatter "
    "my rows' sum, together they send one ring all-reduce's bytes",
    "[tp]") {
  for (int n : {1, 2, 3, 4, 5}) {
    CAPTURE(n);
    const std::size_t rows = 3 * std::size_t(n), h = 7, L = rows * h;
    // Whole numbers below 2^24: every sum is exact in float32.
    const auto value = [](int rank, std::size_t i) { return float(1000 * rank + int(i % 997)); };
    tp::AllReduceSteps gather, scatter;
    const RunResult run = run_in_process(n, [&](Comm& comm) {
      const int me = comm.rank();
      const Partition part{L, n};
      Buffer<float> whole = comm.alloc<float>(L, Category::activations);
      ops::fill(whole.view(), -1.0f);
      for (std::size_t i = part.begin(me); i < part.end(me); ++i) whole[i] = value(0, i);
      const tp::AllReduceSteps g = tp::sp_all_gather(comm, whole.view(), tp::kFGatherPhase, "X");
      bool all = true;
      for (std::size_t i = 0; i < L; ++i) all = all && whole[i] == value(0, i);
      comm.check("the all-gather gives every rank every row", all);
      for (std::size_t i = 0; i < L; ++i) whole[i] = value(me, i);
      const tp::AllReduceSteps s =
          tp::sp_reduce_scatter(comm, whole.view(), tp::kGScatterPhase, "Y");
      bool mine = true;
      for (std::size_t i = part.begin(me); i < part.end(me); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += value(r, i);
        mine = mine && whole[i] == want;
      }
      comm.check("the reduce-scatter leaves my rows' sum over the ranks", mine);
      if (me == 0) gather = g, scatter = s;
    });
    for (const RankLog& log : run.logs)
      for (const CheckResult& c : log.checks) {
        INFO(c.name);
        CHECK(c.ok);
      }
    const auto g = run.traffic(gather.first, gather.last),
               s = run.traffic(scatter.first, scatter.last);
    for (int k = 0; k < n; ++k) {
      CHECK(g[std::size_t(k)].bytes_sent == tp::sp_gather_bytes(k, n, L));
      CHECK(s[std::size_t(k)].bytes_sent == tp::sp_scatter_bytes(k, n, L));
      // rows divide by n: both together are exactly a ring all-reduce's 2(N-1)/N x 4L bytes
      CHECK(tp::sp_gather_bytes(k, n, L) + tp::sp_scatter_bytes(k, n, L) ==
            coll::ring_chunked_traffic(k, n, L).sent * sizeof(float));
      CHECK(tp::sp_gather_bytes(k, n, L) == (std::uint64_t(n) - 1) * L / std::uint64_t(n) * 4);
    }
  }
}
