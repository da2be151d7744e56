// cost_model.hpp: the alpha-beta-gamma terms per algorithm, for concrete p and n; the fold's
// extra steps; orderings the lectures claim; the calibration file and its fallback; and the
// model's message and byte counts against what the algorithms really send (from the trace).
#include "catch.hpp"

#include <thread>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <map>
#include <vector>

#include "core/collectives/all_reduce.hpp"
#include "core/cost/calibration.hpp"
#include "core/cost/cost_model.hpp"
#include "core/runtime/data.hpp"
#include "thread_world.hpp"

using namespace distlab;
using coll::AllReduceAlgo;

namespace {

std::string temp_path(const char* name) {
  return (std::filesystem::temp_directory_path() / (std::string("distlab_test_") + name)).string();
}

void check_cost(const Cost& c, double messages, double moved, double reduced) {
  CHECK(c.messages == Approx(messages));
  CHECK(c.bytes_moved == Approx(moved));
  CHECK(c.bytes_reduced == Approx(reduced));
}

// The longest chain of messages when every send ends as its receiver takes it (rendezvous, as
// under SMPI and for large messages anywhere): each rank runs its sends and receives in the order
// it recorded them, and a send and its receive finish together one unit after both are posted.
double rendezvous_path(const std::vector<RankLog>& logs) {
  struct Op {
    bool send;
    int peer;
  };
  std::vector<std::vector<Op>> ops(logs.size());
  for (const RankLog& log : logs) {
    std::vector<SpanEvent> spans = log.spans;
    std::stable_sort(spans.begin(), spans.end(),
                     [](const SpanEvent& a, const SpanEvent& b) { return a.t0 < b.t0; });
    for (const SpanEvent& e : spans)
      if (e.kind != SpanEvent::Kind::plain)
        ops[std::size_t(log.rank)].push_back({e.kind == SpanEvent::Kind::send, e.peer});
  }
  std::vector<std::size_t> at(logs.size(), 0);
  std::vector<double> t(logs.size(), 0);
  for (bool moved = true; moved;) {
    moved = false;
    for (std::size_t r = 0; r < ops.size(); ++r) {
      if (at[r] == ops[r].size() || !ops[r][at[r]].send) continue;
      const auto d = std::size_t(ops[r][at[r]].peer);
      if (at[d] < ops[d].size() && !ops[d][at[d]].send && ops[d][at[d]].peer == int(r)) {
        t[r] = t[d] = std::max(t[r], t[d]) + 1;
        ++at[r], ++at[d];
        moved = true;
      }
    }
  }
  for (std::size_t r = 0; r < ops.size(); ++r) REQUIRE(at[r] == ops[r].size());  // none stuck
  return *std::max_element(t.begin(), t.end());
}

Cost minus(const Cost& a, const Cost& b) {
  return {a.messages - b.messages, a.bytes_moved - b.bytes_moved,
          a.bytes_reduced - b.bytes_reduced};
}

// What one rank's part of a traced run looks like step by step: a step costs one message
// start-up and the larger of what it sends and receives then (links are full duplex).
struct PathCount {
  int steps = 0;
  double bytes = 0;
};
PathCount busiest_rank(const std::vector<RankLog>& logs) {
  PathCount best;
  for (const auto& log : logs) {
    std::map<int, std::pair<double, double>> per_step;  // step -> (sent, received)
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::plain) continue;
      auto& [sent, recv] = per_step[e.meta.step];
      (e.kind == SpanEvent::Kind::send ? sent : recv) += double(e.bytes);
    }
    PathCount mine{int(per_step.size()), 0};
    for (const auto& [step, sr] : per_step) mine.bytes += std::max(sr.first, sr.second);
    if (mine.bytes > best.bytes || (mine.bytes == best.bytes && mine.steps > best.steps))
      best = mine;
  }
  return best;
}

}  // namespace

TEST_CASE("cost model: the chunked ring on 4 ranks", "[cost_model]") {
  const double n = 1 << 20;
  // 2(p-1) = 6 steps of n/4: 1.5 n through each link, 0.75 n added.
  check_cost(predict_all_reduce(AllReduceAlgo::ring_chunked, 4, n), 6, 1.5 * n, 0.75 * n);
  const CostParams c{1e-6, 1e-10, 2e-10, "test"};
  CHECK(predict_all_reduce(AllReduceAlgo::ring_chunked, 4, n).seconds(c) ==
        Approx(6 * 1e-6 + 1.5 * n * 1e-10 + 0.75 * n * 2e-10));
}

TEST_CASE("cost model: every all-reduce's terms for p = 4 and p = 8", "[cost_model]") {
  const double n = 1000;
  check_cost(predict_all_reduce(AllReduceAlgo::reduce_broadcast, 4, n), 6, 6 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::sequential, 4, n), 9, 9 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::parallel, 4, n), 3, 3 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::ring, 4, n), 3, 3 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_doubling, 4, n), 2, 2 * n, 2 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_halving, 4, n), 4, 1.5 * n, 0.75 * n);
  // p = 8: recursive doubling finishes in 3 steps; Rabenseifner in 2 x 3 with 2(7/8) n moved.
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_doubling, 8, n), 3, 3 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_halving, 8, n), 6, 1.75 * n, 0.875 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::ring_chunked, 8, n), 14, 1.75 * n, 0.875 * n);
}

TEST_CASE("cost model: one rank costs nothing, and a world needs a rank", "[cost_model]") {
  for (AllReduceAlgo a : coll::all_reduce_algos())
    check_cost(predict_all_reduce(a, 1, 4096), 0, 0, 0);
  for (Collective c : {Collective::all_gather, Collective::reduce_scatter, Collective::broadcast,
                       Collective::reduce})
    for (bool ring : {true, false}) check_cost(predict_collective(c, ring, 1, 4096), 0, 0, 0);
  CHECK_THROWS(predict_all_reduce(AllReduceAlgo::ring, 0, 8));
}

TEST_CASE("cost model: the library is predicted as the chunked ring", "[cost_model]") {
  for (int p : {2, 3, 4, 7, 16}) {
    const Cost lib = predict_all_reduce(AllReduceAlgo::library, p, 1e6);
    const Cost ring = predict_all_reduce(AllReduceAlgo::ring_chunked, p, 1e6);
    CHECK(lib.messages == ring.messages);
    CHECK(lib.bytes_moved == ring.bytes_moved);
    CHECK(lib.bytes_reduced == ring.bytes_reduced);
  }
}

TEST_CASE("cost model: off powers of two the recursive algorithms pay the fold", "[cost_model]") {
  // The fold: one whole buffer in and added, one whole result out: 2 alpha + 2 n beta + n gamma.
  const double n = 4096;
  for (AllReduceAlgo a : {AllReduceAlgo::recursive_doubling, AllReduceAlgo::recursive_halving}) {
    for (int p : {3, 5, 6, 7, 9, 12, 15}) {
      INFO(coll::to_string(a) << " p = " << p);
      const int p2 = int(std::bit_floor(unsigned(p)));
      check_cost(minus(predict_all_reduce(a, p, n), predict_all_reduce(a, p2, n)), 2, 2 * n, n);
    }
    for (int p : {2, 4, 8, 16}) {  // powers of two: no fold, just log2 p (or 2 log2 p) steps
      const double k = std::countr_zero(unsigned(p));
      CHECK(predict_all_reduce(a, p, n).messages ==
            (a == AllReduceAlgo::recursive_doubling ? k : 2 * k));
    }
  }
  // p = 6: r4 and r5 fold into r0 and r1, four ranks run 2 steps (4 for halving), then fold out.
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_doubling, 6, n), 4, 4 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::recursive_halving, 6, n), 6, 3.5 * n, 1.75 * n);
}

TEST_CASE("cost model: what the lectures claim about the orderings", "[cost_model]") {
  const double n = 64 << 20;
  for (int p = 2; p <= 64; ++p) {
    INFO("p = " << p);
    const Cost halving = predict_all_reduce(AllReduceAlgo::recursive_halving, p, n);
    const Cost doubling = predict_all_reduce(AllReduceAlgo::recursive_doubling, p, n);
    const Cost ring = predict_all_reduce(AllReduceAlgo::ring_chunked, p, n);
    const Cost lecture_ring = predict_all_reduce(AllReduceAlgo::ring, p, n);
    const Cost naive = predict_all_reduce(AllReduceAlgo::reduce_broadcast, p, n);
    // Rabenseifner moves fewer bytes than recursive doubling from 4 ranks on (equal at 2 and 3).
    if (p >= 4)
      CHECK(halving.bytes_moved < doubling.bytes_moved);
    else
      CHECK(halving.bytes_moved == doubling.bytes_moved);
    // The chunked ring moves under 2 n whatever p is; the lecture's ring and the naive one grow
    // with p.
    CHECK(ring.bytes_moved < 2 * n);
    CHECK(lecture_ring.bytes_moved == Approx((p - 1) * n));
    CHECK(naive.bytes_moved == Approx(2 * (p - 1) * n));
    // On powers of two Rabenseifner moves exactly the ring's bytes in far fewer steps.
    if ((p & (p - 1)) == 0) {
      CHECK(halving.bytes_moved == Approx(ring.bytes_moved));
      CHECK(halving.messages <= ring.messages);
    }
    // More ranks never make the chunked ring cheaper.
    const Cost more = predict_all_reduce(AllReduceAlgo::ring_chunked, p + 1, n);
    CHECK(more.messages > ring.messages);
    CHECK(more.bytes_moved > ring.bytes_moved);
  }
}

TEST_CASE("cost model: the other collectives, ring and linear", "[cost_model]") {
  const double n = 1 << 20;
  check_cost(predict_collective(Collective::all_gather, true, 4, n), 3, 0.75 * n, 0);
  check_cost(predict_collective(Collective::reduce_scatter, true, 4, n), 3, 0.75 * n, 0.75 * n);
  check_cost(predict_collective(Collective::all_gather, false, 4, n), 6, 0.75 * n + 3 * n, 0);
  check_cost(predict_collective(Collective::reduce_scatter, false, 4, n), 6, 3 * n + 0.75 * n,
             3 * n);
  check_cost(predict_collective(Collective::broadcast, false, 4, n), 3, 3 * n, 0);
  check_cost(predict_collective(Collective::reduce, false, 4, n), 3, 3 * n, 3 * n);
  for (int p : {2, 3, 5, 8}) {
    // ring reduce-scatter + ring all-gather is the chunked ring all-reduce, term by term.
    const Cost rs = predict_collective(Collective::reduce_scatter, true, p, n);
    const Cost ag = predict_collective(Collective::all_gather, true, p, n);
    const Cost ar = predict_collective(Collective::all_reduce, true, p, n);
    check_cost(ar, rs.messages + ag.messages, rs.bytes_moved + ag.bytes_moved,
               rs.bytes_reduced + ag.bytes_reduced);
    const Cost naive = predict_collective(Collective::all_reduce, false, p, n);
    const Cost rb = predict_all_reduce(AllReduceAlgo::reduce_broadcast, p, n);
    CHECK(naive.messages == rb.messages);
    CHECK(naive.bytes_moved == rb.bytes_moved);
  }
  CHECK(std::string(to_string(Collective::reduce_scatter)) == "reducescatter");
  CHECK(std::string(to_string(Collective::all_reduce)) == "allreduce");
}

TEST_CASE("cost model: the terms are what the algorithms send, read from the trace",
          "[cost_model]") {
  // For every algorithm whose critical path is one rank's steps: the busiest rank takes
  // `messages` steps and pushes `bytes_moved` through its link (per step the larger of what it
  // sends and receives). Lengths divisible by every p below, so chunks are equal.
  const std::size_t length = 840 * 64;
  const double n = double(length * sizeof(float));
  for (AllReduceAlgo a :
       {AllReduceAlgo::reduce_broadcast, AllReduceAlgo::ring, AllReduceAlgo::ring_chunked,
        AllReduceAlgo::recursive_doubling, AllReduceAlgo::recursive_halving}) {
    for (int p : {2, 3, 4, 5, 6, 7, 8}) {
      INFO(coll::to_string(a) << " on " << p << " ranks");
      const auto run = test::run_ranks(p, [&](Comm& comm) {
        Buffer<float> data = comm.alloc<float>(length, Category::data);
        fill_input(data.view(), 1, comm.rank());
        coll::all_reduce(comm, data.view(), a);
      });
      REQUIRE_FALSE(run.failed);
      const PathCount path = busiest_rank(run.logs);
      const Cost model = predict_all_reduce(a, p, n);
      CHECK(path.steps == Approx(model.messages));
      CHECK(path.bytes == Approx(model.bytes_moved));
    }
  }
  // sequential: the rounds overlap like a wave; the path is the longest chain of messages when
  // each send waits for its receiver (rendezvous_path replays the recorded order).
  // parallel: one step in which each rank sends p-1 whole buffers.
  for (int p : {2, 3, 5}) {
    for (AllReduceAlgo a : {AllReduceAlgo::sequential, AllReduceAlgo::parallel}) {
      INFO(coll::to_string(a) << " on " << p << " ranks");
      const auto run = test::run_ranks(p, [&](Comm& comm) {
        Buffer<float> data = comm.alloc<float>(length, Category::data);
        coll::all_reduce(comm, data.view(), a);
      });
      REQUIRE_FALSE(run.failed);
      double msgs = 0, bytes = 0, max_rank_msgs = 0;
      for (const auto& log : run.logs) {
        double mine = 0;
        for (const auto& e : log.spans)
          if (e.kind == SpanEvent::Kind::send) ++mine, bytes += double(e.bytes);
        msgs += mine;
        max_rank_msgs = std::max(max_rank_msgs, mine);
      }
      const Cost model = predict_all_reduce(a, p, n);
      if (a == AllReduceAlgo::sequential) {
        CHECK(msgs == p * (p - 1));  // every rank's buffer to every other rank
        CHECK(bytes == Approx(msgs * n));
        CHECK(rendezvous_path(run.logs) == model.messages);
        CHECK(rendezvous_path(run.logs) * n == Approx(model.bytes_moved));
      } else {
        CHECK(max_rank_msgs == model.messages);
        CHECK(max_rank_msgs * n == Approx(model.bytes_moved));
      }
    }
  }
}

TEST_CASE("cost model: gamma is measured and plausible", "[cost_model]") {
  const double g = measure_gamma();
  // Adding float32 streams from memory: somewhere between 0.1 and 1000 GB/s on any machine.
  CHECK(g > 1e-12);
  CHECK(g < 1e-8);
}

TEST_CASE("cost model: alpha and beta come from the calibration file, else the defaults",
          "[cost_model]") {
  const std::string path = temp_path("cost_model_calibration.json");
  std::remove(path.c_str());

  const CostParams fallback = load_cost_params(path, "threads-cpu", 3e-6, 2e-10);
  CHECK(fallback.alpha_s == 3e-6);
  CHECK(fallback.beta_s_per_byte == 2e-10);
  CHECK(fallback.gamma_s_per_byte > 0);
  CHECK_THAT(fallback.source, Catch::Contains("defaults"));

  save_calibration(path, "threads-cpu", Calibration{5e-7, 4e-11, {}});
  save_calibration(path, "mpi-cpu", Calibration{-1e-8, 1e-10, {}});  // a fit can dip below zero
  const CostParams threads = load_cost_params(path, "threads-cpu", 3e-6, 2e-10);
  CHECK(threads.alpha_s == Approx(5e-7));
  CHECK(threads.beta_s_per_byte == Approx(4e-11));
  CHECK_THAT(threads.source, Catch::Contains("threads-cpu") && Catch::Contains(path));
  const CostParams mpi = load_cost_params(path, "mpi-cpu", 3e-6, 2e-10);
  CHECK(mpi.alpha_s == 0);  // no time is negative
  CHECK(mpi.beta_s_per_byte == Approx(1e-10));
  // A key the file lacks falls back, too.
  const CostParams cuda = load_cost_params(path, "mpi-cuda", 7e-6, 1e-11);
  CHECK(cuda.alpha_s == 7e-6);
  CHECK_THAT(cuda.source, Catch::Contains("defaults"));
  std::remove(path.c_str());
}

TEST_CASE("cost model: the streaming beta is the slope of the large ping-pongs alone",
          "[cost_model]") {
  // Cache-sized messages at 40 GB/s, from 4 MiB on at 10 GB/s (as lesson 01 sees on a laptop).
  Calibration cal;
  const double alpha = 1e-6, fast = 1.0 / 40e9, slow = 1.0 / 10e9, knee = 4 << 20;
  for (double n = 8; n <= (64 << 20); n *= 4)
    cal.points.emplace_back(n,
                            n < knee ? alpha + fast * n : alpha + fast * knee + slow * (n - knee));
  cal.beta_s_per_byte = fit_alpha_beta(cal.points).beta_s_per_byte;
  const auto beta = streaming_beta(cal, knee);
  REQUIRE(beta.has_value());
  CHECK(*beta == Approx(slow).epsilon(0.1));
  CHECK(*beta > 2 * cal.beta_s_per_byte);  // the all-sizes fit is the cache's bandwidth
  // Fewer than two points that large (the sizes are 4^k x 8: only 32 MiB is above 16 MiB): none.
  CHECK(streaming_beta(cal, 8 << 20).has_value());
  CHECK_FALSE(streaming_beta(cal, 16 << 20).has_value());
  CHECK_FALSE(streaming_beta(Calibration{}, 1).has_value());
}

TEST_CASE("cost model: ranks sharing cores stretch the byte terms, not the latency",
          "[cost_model]") {
  const Cost c{2, 1000, 500};
  CostParams one;
  one.alpha_s = 1e-6, one.beta_s_per_byte = 1e-9, one.gamma_s_per_byte = 2e-9;
  CostParams shared = one;
  shared.sharing = 2;
  CHECK(c.seconds(one) == Approx(2e-6 + 1e-6 + 1e-6));
  CHECK(c.seconds(shared) == Approx(2e-6 + 2 * (1e-6 + 1e-6)));
  World w;
  w.size = 1;
  CHECK(core_sharing(w) == 1.0);  // never below one
  w.size = 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CHECK(core_sharing(w) == Approx(4.0));
}

TEST_CASE("cost model: trees, Bruck and all-to-all", "[cost_model]") {
  const double n = 1000;
  // Binomial all-reduce on 8 ranks: 3 rounds up, 3 down, whole buffers through rank 0's link;
  // on 5 ranks ceil(lg 5) = 3 rounds as well.
  check_cost(predict_all_reduce(AllReduceAlgo::tree, 8, n), 6, 6 * n, 3 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::tree, 5, n), 6, 6 * n, 3 * n);
  // Double binary tree on 8 ranks: H = 3, G = 4 segments per half: 2(4 + 3 - 1) = 12 steps of
  // n/4 through an inner rank's link, n added.
  check_cost(predict_all_reduce(AllReduceAlgo::double_binary_tree, 8, n), 12, 3 * n, n);
  // Hierarchical on 8 ranks: 2 per node, 4 nodes: 2 + 6 steps; 2(1/2) n + 2(3/8) n moved.
  check_cost(predict_all_reduce(AllReduceAlgo::hierarchical, 8, n), 8, 1.75 * n, 0.875 * n);
  CHECK(coll::default_ranks_per_node(16) == 4);
  CHECK(coll::default_ranks_per_node(12) == 3);
  CHECK(coll::default_ranks_per_node(13) == 1);
  // Every other collective by name.
  check_cost(predict_algorithm(Collective::all_gather, "bruck", 8, n), 3, 0.875 * n, 0);
  check_cost(predict_algorithm(Collective::all_gather, "bruck", 13, n), 4, 12.0 / 13 * n, 0);
  check_cost(predict_algorithm(Collective::broadcast, "tree", 8, n), 3, 3 * n, 0);
  check_cost(predict_algorithm(Collective::reduce, "tree", 8, n), 3, 3 * n, 3 * n);
  check_cost(predict_algorithm(Collective::all_to_all, "pairwise", 8, n), 7, 0.875 * n, 0);
  // Bruck: block i hops popcount(i) times; sum over i < 8 is 12, over i < 13 is 22.
  check_cost(predict_algorithm(Collective::all_to_all, "bruck", 8, n), 3, 1.5 * n, 0);
  check_cost(predict_algorithm(Collective::all_to_all, "bruck", 13, n), 4, 22.0 / 13 * n, 0);
  CHECK(predict_algorithm(Collective::all_to_all, "bruck", 1, n).messages == 0);
  // Nodes given: 8 ranks as 2 nodes of 4: 2(4-1) + 2(2-1) = 8 steps, 2(G-1)/G + 2(M-1)/N of n.
  check_cost(predict_all_reduce(AllReduceAlgo::hierarchical, 8, n, 4), 8, 1.5 * n + 0.25 * n,
             0.75 * n + 0.125 * n);
  check_cost(predict_all_reduce(AllReduceAlgo::hierarchical, 8, n, 1), 14, 1.75 * n, 0.875 * n);
  // The names the bench had before mean what they meant.
  check_cost(predict_algorithm(Collective::all_gather, "ring", 8, n),
             predict_collective(Collective::all_gather, true, 8, n).messages, 0.875 * n, 0);
  check_cost(predict_algorithm(Collective::broadcast, "linear", 8, n), 7, 7 * n, 0);
  CHECK(predict_algorithm(Collective::all_reduce, "ring_chunked", 8, n).messages == 14);
  CHECK_THROWS_AS(predict_algorithm(Collective::all_gather, "tree", 8, n), UsageError);
  CHECK_THROWS_AS(predict_algorithm(Collective::all_reduce, "bruck", 8, n), UsageError);
}
