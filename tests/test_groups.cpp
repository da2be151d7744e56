// Comm::split and Mesh: groups of ranks that talk among themselves, every collective unchanged.
#include "catch.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "core/collectives/all_gather_ring.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/comm/mesh.hpp"
#include "core/runtime/verify.hpp"
#include "core/trace/reader.hpp"
#include "core/trace/writer.hpp"
#include "thread_world.hpp"

using namespace distlab;
using distlab::test::run_ranks;

namespace {

// A value no two (world rank, element) pairs share, exact in float32 and in sums of up to 64.
float value(int world_rank, std::size_t i) {
  return static_cast<float>(world_rank * 1000 + static_cast<int>(i % 997));
}

// Rank bodies record what they saw; the test's thread asserts (Catch is not thread-safe).
struct Seen {
  std::mutex m;
  std::vector<std::string> wrong;
  int checked = 0;
  void expect(bool ok, const std::string& what) {
    std::lock_guard lk(m);
    ++checked;
    if (!ok) wrong.push_back(what);
  }
};

// The all-reduce algorithms that run on in-process ranks (all but the library's).
int runnable_algos() {
  return static_cast<int>(coll::all_reduce_algos().size()) - 1;
}

// Every all-reduce algorithm on `group`, against the sum of its members' values.
void all_reduce_every_algo(Comm& group, std::size_t length, Seen& seen) {
  for (coll::AllReduceAlgo algo : coll::all_reduce_algos()) {
    if (algo == coll::AllReduceAlgo::library) continue;  // MPI's: the probe under mpirun
    auto data = group.alloc<float>(length, Category::data);
    for (std::size_t i = 0; i < length; ++i) data[i] = value(group.world_rank(group.rank()), i);
    coll::all_reduce(group, data.view(), algo, coll::to_string(algo));
    bool ok = true;
    for (std::size_t i = 0; i < length && ok; ++i) {
      double want = 0;
      for (int r = 0; r < group.size(); ++r) want += value(group.world_rank(r), i);
      ok = data[i] == static_cast<float>(want);
    }
    seen.expect(ok, fmt::format("{} on group {} (size {}), world rank {}", coll::to_string(algo),
                                group.group(), group.size(), group.world_rank(group.rank())));
  }
}

}  // namespace

TEST_CASE("split: every all-reduce on groups of 1 to 16 ranks sums its members only", "[groups]") {
  for (int n = 1; n <= 16; ++n)
    for (int k : {1, 2, 3}) {
      if (k > n) continue;
      Seen seen;
      auto run = run_ranks(n, [&](Comm& world) {
        Comm group = world.split(world.rank() % k, world.rank());
        all_reduce_every_algo(group, 13, seen);
      });
      INFO("n " << n << ", " << k << " groups");
      REQUIRE_FALSE(run.failed);
      CHECK(seen.wrong == std::vector<std::string>{});
      CHECK(seen.checked == n * runnable_algos());
    }
}

TEST_CASE("split: a group's ranks go by key, then by rank, and world_rank names its members",
          "[comm]") {
  // An odd split of 7: color 0 holds ranks 0, 3, 6 (3 ranks), color 1 ranks 1, 4 and color 2
  // ranks 2, 5; keys count backwards, so the highest world rank is each group's rank 0.
  std::mutex m;
  std::vector<std::vector<int>> members(7);
  std::vector<std::vector<float>> gathered(7);
  auto run = run_ranks(7, [&](Comm& world) {
    Comm g = world.split(world.rank() % 3, 100 - world.rank(), "odd");
    std::vector<int> mine;
    for (int r = 0; r < g.size(); ++r) mine.push_back(g.world_rank(r));
    // An all-gather: chunk r holds group rank r's world rank.
    auto data = g.alloc<float>(static_cast<std::size_t>(g.size()), Category::data);
    data[static_cast<std::size_t>(g.rank())] = static_cast<float>(world.rank());
    coll::all_gather_ring(g, data.view());
    std::lock_guard lk(m);
    members[static_cast<std::size_t>(world.rank())] = mine;
    gathered[static_cast<std::size_t>(world.rank())] = to_host(View<const float>(data.view()));
  });
  REQUIRE_FALSE(run.failed);
  CHECK(members[0] == std::vector<int>{6, 3, 0});
  CHECK(members[3] == std::vector<int>{6, 3, 0});
  CHECK(members[1] == std::vector<int>{4, 1});
  CHECK(members[5] == std::vector<int>{5, 2});
  CHECK(gathered[0] == std::vector<float>{6, 3, 0});
  CHECK(gathered[4] == std::vector<float>{4, 1});
  CHECK(gathered[2] == std::vector<float>{5, 2});
}

TEST_CASE("split: groups nest, and an inner group's all-reduce stays inside it", "[comm]") {
  Seen seen;
  std::mutex m;
  std::vector<std::string> names(16);
  auto run = run_ranks(16, [&](Comm& world) {
    Comm half = world.split(world.rank() / 8, world.rank(), "half");
    Comm quarter = half.split(half.rank() / 4, half.rank(), "quarter");
    Comm pair = quarter.split(quarter.rank() / 2, quarter.rank());
    all_reduce_every_algo(pair, 5, seen);
    all_reduce_every_algo(quarter, 9, seen);
    all_reduce_every_algo(half, 1, seen);
    std::lock_guard lk(m);
    names[static_cast<std::size_t>(world.rank())] = pair.group();
    seen.expect(pair.size() == 2 && quarter.size() == 4 && half.size() == 8,
                "sizes of the nested groups");
    seen.expect(pair.world_rank(0) == world.rank() / 2 * 2, "the pair's first member");
  });
  REQUIRE_FALSE(run.failed);
  CHECK(seen.wrong == std::vector<std::string>{});
  CHECK(seen.checked == 16 * (3 * runnable_algos() + 2));
  CHECK(names[5] == "quarter split 1 color 0");
}

TEST_CASE("split: a message in a group never matches a receive of the same peer and tag outside it",
          "[comm]") {
  std::vector<float> world_got(1), group_got(1);
  auto run = run_ranks(2, [&](Comm& world) {
    Comm g = world.split(0, world.rank(), "g");
    auto out = world.alloc<float>(1, Category::data);
    if (world.rank() == 0) {
      out[0] = 1;  // the group's message first, then the world's, with one tag
      g.send(View<const float>(out.view()), 1, 5);
      out[0] = 2;
      world.send(View<const float>(out.view()), 1, 5);
    } else {
      auto in = world.alloc<float>(1, Category::data);
      auto r = world.irecv(in.view(), 0, 5);  // posted first: would take the group's
      auto in_g = g.alloc<float>(1, Category::data);
      g.recv(in_g.view(), 0, 5);
      world.wait(r);
      world_got[0] = in[0];
      group_got[0] = in_g[0];
    }
  });
  REQUIRE_FALSE(run.failed);
  CHECK(world_got[0] == 2.0f);
  CHECK(group_got[0] == 1.0f);
}

TEST_CASE("split: a group's messages are traced by world rank with the group's name, and pair up",
          "[comm]") {
  auto run = run_ranks(4, [&](Comm& world) {
    Comm g = world.split(world.rank() % 2, world.rank(), "tp");
    Comm all = world.split(0, world.rank(), "all");  // the world's ranks, pairs and tags
    auto data = g.alloc<float>(8, Category::data);
    coll::all_reduce(g, data.view(), coll::AllReduceAlgo::ring_chunked);
    coll::all_reduce(all, data.view(), coll::AllReduceAlgo::ring);
    coll::all_reduce(world, data.view(), coll::AllReduceAlgo::ring);
  });
  REQUIRE_FALSE(run.failed);
  int in_group = 0;
  for (const auto& log : run.logs)
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::plain) continue;
      if (e.meta.group == "tp") {
        ++in_group;
        CHECK(e.peer % 2 == log.rank % 2);  // a world rank of the same group
        CHECK(e.peer != log.rank);
      }
    }
  CHECK(in_group == 4 * 2 * 2);  // ring_chunked on 2: 2 steps, a send and a receive each
  TraceInfo info;
  info.lesson = "groups";
  info.world.size = 4;
  const LoadedTrace t = parse_trace(trace_json(info, run.logs));
  const auto problems = check_invariants(t);
  for (const auto& p : problems) INFO(p);
  CHECK(problems.empty());
  int flows = 0, in_tp = 0, in_all = 0;
  for (const auto& f : t.flows) flows += f.start;
  for (const auto& s : t.spans) {
    in_tp += s.name == "send" && s.group == "tp";
    in_all += s.name == "send" && s.group == "all";
  }
  // Every message of the three all-reduces has its own arrow: "all"'s and the world's share
  // senders, receivers, tags and counts, and only the group tells them apart.
  CHECK(flows == 4 * 2 + 4 * 3 + 4 * 3);
  CHECK(in_tp == 4 * 2);
  CHECK(in_all == 4 * 3);
}

TEST_CASE("split: a bad color or key is an error naming it", "[comm]") {
  std::vector<std::string> errors(2);
  auto run = run_ranks(2, [&](Comm& world) {
    try {
      world.split(world.rank() == 0 ? -1 : 0, 0);
    } catch (const std::exception& e) {
      errors[static_cast<std::size_t>(world.rank())] = e.what();
      throw;
    }
  });
  CHECK(run.failed);
  CHECK_THAT(errors[0], Catch::Contains("color >= 0, not -1"));
}

TEST_CASE("mesh: tp varies fastest, and coord and rank_of are inverses", "[comm]") {
  const MeshShape s{2, 2, 2};
  CHECK(s.coord(5) == MeshCoord{1, 0, 1});
  CHECK(s.rank_of({1, 0, 1}) == 5);
  CHECK(s.coord(1) == MeshCoord{0, 0, 1});
  CHECK(s.coord(2) == MeshCoord{0, 1, 0});
  CHECK(s.coord(4) == MeshCoord{1, 0, 0});
  for (const MeshShape shape : {MeshShape{4, 1, 2}, MeshShape{1, 3, 2}, MeshShape{3, 2, 1}})
    for (int r = 0; r < shape.size(); ++r) CHECK(shape.rank_of(shape.coord(r)) == r);
  CHECK_THROWS_WITH(MeshShape({2, 2, 2}).check(6),
                    "the mesh dp 2 x pp 2 x tp 2 has 8 ranks, but the run has 6: --dp x --pp x "
                    "--tp must equal the ranks");
  CHECK_THROWS_WITH(MeshShape({0, 2, 2}).check(0),
                    "--dp, --pp and --tp must each be at least 1 (got dp 0 x pp 2 x tp 2)");
}

TEST_CASE("mesh: each rank's three groups hold the ranks that share the other two coordinates",
          "[comm]") {
  std::mutex m;
  std::vector<std::string> described(8);
  std::vector<std::vector<int>> tp(8), pp(8), dp(8);
  Seen seen;
  auto run = run_ranks(8, [&](Comm& world) {
    Mesh mesh(world, {2, 2, 2});
    auto members = [](Comm& c) {
      std::vector<int> v;
      for (int r = 0; r < c.size(); ++r) v.push_back(c.world_rank(r));
      return v;
    };
    all_reduce_every_algo(mesh.tp(), 6, seen);
    all_reduce_every_algo(mesh.pp(), 6, seen);
    all_reduce_every_algo(mesh.dp(), 6, seen);
    std::lock_guard lk(m);
    const auto i = static_cast<std::size_t>(world.rank());
    described[i] = mesh.describe();
    tp[i] = members(mesh.tp());
    pp[i] = members(mesh.pp());
    dp[i] = members(mesh.dp());
  });
  REQUIRE_FALSE(run.failed);
  CHECK(seen.wrong == std::vector<std::string>{});
  CHECK(described[5] == "mesh dp 2 x pp 2 x tp 2: rank 5 = (dp 1, pp 0, tp 1)");
  CHECK(tp[5] == std::vector<int>{4, 5});
  CHECK(pp[5] == std::vector<int>{5, 7});
  CHECK(dp[5] == std::vector<int>{1, 5});
  CHECK(dp[2] == std::vector<int>{2, 6});
}
