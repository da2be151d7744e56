// viewer/model/splits.hpp: otherData.splits (lessons 12 and 13) parsed, and which part of the
// layer runs at a moment; on a hand-written trace, on the committed example traces, on what the
// lessons' writer (core/training/tensor_parallel.hpp) produces, and on malformed input.
#include "catch.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "core/base/partition.hpp"
#include "core/training/tensor_parallel.hpp"
#include "example_traces.hpp"
#include "viewer/model/splits.hpp"

using namespace distlab::viewer;
using distlab::testing::example_trace;

namespace {

Moment at_time(double t) {
  Moment m;
  m.clock = Clock::measured;
  m.time_us = t;
  return m;
}

// A split weight's or activation's ranges, in rank order, cover [0, shape[axis]) exactly once.
bool tiles(const SplitBlock& b) {
  if (b.axis < 0 || b.ranges.empty()) return false;
  std::int64_t at = 0;
  for (const SplitRange& r : b.ranges) {
    if (r.begin != at || r.end < r.begin) return false;
    at = r.end;
  }
  return at == b.shape[static_cast<std::size_t>(b.axis)];
}

// Two ranks, one column-split weight A between f and g (MLP-like, 4 x 8 split 2 ways), and the
// phases: A forward [0, 10), g [10, 20) (rank 1 from 11, with a nested add), A backward
// [20, 30), f [30, 40).
const char* const kHandTrace = R"({"traceEvents":[
  {"ph":"X","name":"fwd A","cat":"compute","pid":1,"tid":1,"ts":0,"dur":10},
  {"ph":"X","name":"fwd A","cat":"compute","pid":2,"tid":1,"ts":0,"dur":11},
  {"ph":"X","name":"g: all-reduce","cat":"compute","pid":1,"tid":1,"ts":10,"dur":10},
  {"ph":"X","name":"add","cat":"compute","pid":1,"tid":1,"ts":12,"dur":1},
  {"ph":"X","name":"g: all-reduce","cat":"compute","pid":2,"tid":1,"ts":11,"dur":9},
  {"ph":"X","name":"bwd A","cat":"compute","pid":1,"tid":1,"ts":20,"dur":10},
  {"ph":"X","name":"bwd A","cat":"compute","pid":2,"tid":1,"ts":20,"dur":10},
  {"ph":"X","name":"f: all-reduce","cat":"compute","pid":1,"tid":1,"ts":30,"dur":10},
  {"ph":"X","name":"f: all-reduce","cat":"compute","pid":2,"tid":1,"ts":30,"dur":10}],
  "otherData":{"schema":"distlab-trace","schema_version":3,"world_size":2,
  "splits":{"layer":"mlp","formula":"Y = X A","ranks":2,"blocks":[
    {"name":"X","kind":"activation","shape":[3,4],"rank_shape":[3,4],"split":"none"},
    {"name":"f","kind":"f","forward":"identity","backward":"all-reduce",
     "backward_phase":"f: all-reduce"},
    {"name":"A","kind":"weight","shape":[4,8],"rank_shape":[4,4],"split":"columns","axis":1,
     "ranges":[[0,4],[4,8]],"forward_phase":"fwd A","backward_phase":"bwd A"},
    {"name":"X A_i","kind":"activation","shape":[3,8],"rank_shape":[3,4],"split":"partial"},
    {"name":"g","kind":"g","forward":"all-reduce","backward":"identity",
     "forward_phase":"g: all-reduce"},
    {"name":"Y","kind":"activation","shape":[3,8],"split":"none"}]}}})";

}  // namespace

TEST_CASE("splits: a hand-written layer parses into blocks, ranges, f and g", "[splits]") {
  const TraceModel m = parse_trace_model(kHandTrace);
  const SplitsIndex index = build_splits_index(m);
  const Splits& s = index.splits;
  INFO(s.error);
  REQUIRE(s.blocks.size() == 6);
  CHECK(s.error.empty());
  CHECK(s.layer == "mlp");
  CHECK(s.ranks == 2);
  CHECK(s.f == 1);
  CHECK(s.g == 4);
  CHECK(s.blocks[1].backward == "all-reduce");
  CHECK(s.blocks[4].forward_phase == "g: all-reduce");
  const SplitBlock& a = s.blocks[2];
  CHECK(a.kind == SplitBlockKind::weight);
  CHECK(a.split == SplitHow::columns);
  CHECK(a.axis == 1);
  CHECK(tiles(a));
  CHECK(a.ranges[1].begin == 4);
  CHECK(s.blocks[3].split == SplitHow::partial);
  CHECK(s.blocks[5].rank_shape == s.blocks[5].shape);  // absent: the whole tensor
  // fwd A, g, bwd A, f on two ranks; the nested add belongs to no block
  CHECK(index.intervals.size() == 8);
}

TEST_CASE("splits: the active stage follows the phases on every rank", "[splits]") {
  const SplitsIndex index = build_splits_index(parse_trace_model(kHandTrace));
  const int a = 2, partial = 3, g = 4, y = 5, f = 1;

  SECTION("inside A's forward: A runs, g has not, Y is empty") {
    const SplitsMoment now = splits_at(index, at_time(5));
    CHECK(now.active == a);
    CHECK_FALSE(now.backward);
    CHECK(now.blocks[a].forward == PassState::running);
    CHECK(now.blocks[a].backward == PassState::pending);
    CHECK(now.blocks[g].forward == PassState::pending);
    CHECK(now.blocks[g].backward == PassState::none);  // g's backward is the identity
    CHECK(now.blocks[partial].filled);                 // A is making it
    CHECK_FALSE(now.blocks[y].filled);                 // g has not summed it yet
    CHECK(now.blocks[0].filled);                       // X is the input
  }
  SECTION("inside g's all-reduce, and inside a span nested in it, g is the active stage") {
    for (double t : {15.0, 12.5}) {
      const SplitsMoment now = splits_at(index, at_time(t));
      CHECK(now.active == g);
      CHECK_FALSE(now.backward);
      CHECK(now.blocks[g].forward == PassState::running);
      CHECK(now.blocks[g].ranks == std::vector<bool>{true, true});
      CHECK(now.blocks[a].forward == PassState::done);
      CHECK_FALSE(now.blocks[y].filled);  // an all-reduce's output is whole only once it is over
    }
  }
  SECTION("ranks apart: rank 0 in g while rank 1 still multiplies by A") {
    const SplitsMoment now = splits_at(index, at_time(10.5));
    CHECK(now.blocks[g].forward == PassState::running);
    CHECK(now.blocks[g].ranks == std::vector<bool>{true, false});
    CHECK(now.blocks[a].forward == PassState::running);
    CHECK(now.blocks[a].ranks == std::vector<bool>{false, true});
  }
  SECTION("backward: A again, then f's all-reduce; g done") {
    SplitsMoment now = splits_at(index, at_time(25));
    CHECK(now.active == a);
    CHECK(now.backward);
    CHECK(now.blocks[a].forward == PassState::done);
    CHECK(now.blocks[a].backward == PassState::running);
    CHECK(now.blocks[g].forward == PassState::done);
    CHECK(now.blocks[y].filled);
    CHECK(now.blocks[f].backward == PassState::pending);
    now = splits_at(index, at_time(35));
    CHECK(now.active == f);
    CHECK(now.backward);
    CHECK(now.blocks[f].backward == PassState::running);
    CHECK(now.blocks[f].forward == PassState::none);  // f's forward is the identity
  }
  SECTION("before and after every phase") {
    CHECK(splits_at(index, at_time(-1)).active == -1);
    const SplitsMoment end = splits_at(index, at_time(40));
    CHECK(end.active == -1);
    CHECK(end.blocks[f].backward == PassState::done);
    CHECK(end.blocks[a].backward == PassState::done);
  }
}

TEST_CASE("splits: the lessons' writer gives the viewer each rank's range of the Partition",
          "[splits]") {
  namespace tp = distlab::tp;
  const distlab::Partition heads{10, 3};  // uneven: 4, 3, 3 heads of 2 columns
  tp::SplitBlock w;
  w.name = "W \"q\"";
  w.kind = "weight";
  w.shape = {5, 20};
  w.rank_shape = {5, 8};
  w.split = "columns";
  w.ranges = tp::rank_ranges(heads, 2);
  w.heads = tp::rank_ranges(heads);
  w.head_shape = {5, 2};
  w.forward_phase = "my heads";
  const Splits s =
      parse_splits(tp::splits_json("attention", "Y", 3, {tp::f_block(), w, tp::g_block()}));
  INFO(s.error);
  REQUIRE(s.blocks.size() == 3);
  CHECK(s.f == 0);
  CHECK(s.g == 2);
  CHECK(s.blocks[0].backward_phase == tp::kFPhase);
  CHECK(s.blocks[2].forward_phase == tp::kGPhase);
  const SplitBlock& b = s.blocks[1];
  CHECK(b.name == "W \"q\"");
  CHECK(tiles(b));
  REQUIRE(b.ranges.size() == 3);
  REQUIRE(b.heads.size() == 3);
  for (int r = 0; r < 3; ++r) {
    CHECK(b.ranges[r].begin == static_cast<std::int64_t>(2 * heads.begin(r)));
    CHECK(b.ranges[r].end == static_cast<std::int64_t>(2 * heads.end(r)));
    CHECK(b.heads[r].begin == static_cast<std::int64_t>(heads.begin(r)));
  }
  CHECK(b.head_shape == std::vector<std::int64_t>{5, 2});
}

TEST_CASE("splits: lessons 12 and 13's example traces tile every split and light f and g",
          "[splits]") {
  for (const char* name : {"12_tensor_parallel_mlp", "13_tensor_parallel_attention"}) {
    INFO(name);
    const TraceModel m = load_trace_model(example_trace(name));
    const SplitsIndex index = build_splits_index(m);
    const Splits& s = index.splits;
    INFO(s.error);
    REQUIRE_FALSE(s.empty());
    CHECK(s.ranks == m.world_size());

    // Every split tensor's ranges tile it once, each rank's as wide as its rank_shape says; the
    // heads tile the heads.
    int split = 0, weights = 0, first_weight = -1, last_weight = -1;
    for (int i = 0; i < static_cast<int>(s.blocks.size()); ++i) {
      const SplitBlock& b = s.blocks[i];
      INFO(b.name);
      if (b.kind == SplitBlockKind::weight) {
        ++weights;
        if (first_weight < 0) first_weight = i;
        last_weight = i;
        CHECK(b.split != SplitHow::none);
        CHECK(b.split != SplitHow::partial);
        CHECK_FALSE(b.forward_phase.empty());
        CHECK_FALSE(b.backward_phase.empty());
      }
      if (b.split != SplitHow::rows && b.split != SplitHow::columns && b.split != SplitHow::heads)
        continue;
      ++split;
      CHECK(tiles(b));
      REQUIRE(static_cast<int>(b.ranges.size()) == s.ranks);
      for (const SplitRange& r : b.ranges)
        CHECK(r.size() == b.rank_shape[static_cast<std::size_t>(b.axis)]);
      if (!b.heads.empty()) {
        std::int64_t at = 0;
        for (const SplitRange& h : b.heads) {
          CHECK(h.begin == at);
          at = h.end;
        }
        CHECK(at > 0);
      }
    }
    CHECK(weights >= 2);
    CHECK(split >= weights);
    // f before the column-split weights, g after the row-split ones
    REQUIRE(s.f >= 0);
    REQUIRE(s.g >= 0);
    CHECK(s.f < first_weight);
    CHECK(s.g > last_weight);
    CHECK(s.blocks[s.f].backward_phase == "f: all-reduce");
    CHECK(s.blocks[s.g].forward_phase == "g: all-reduce");

    // Every phase the splits name runs on every rank in the trace.
    for (std::size_t b = 0; b < s.blocks.size(); ++b) {
      if (s.blocks[b].kind == SplitBlockKind::activation) continue;
      std::vector<bool> seen(static_cast<std::size_t>(s.ranks));
      for (const auto& iv : index.intervals)
        if (iv.block == static_cast<int>(b)) seen[static_cast<std::size_t>(iv.rank)] = true;
      INFO(s.blocks[b].name);
      CHECK(std::count(seen.begin(), seen.end(), true) == s.ranks);
    }

    // The active stage in the middle of the time every rank spends in g's all-reduce (found
    // from the spans themselves) is g; in f's, f.
    for (const char* phase : {"g: all-reduce", "f: all-reduce"}) {
      INFO(phase);
      double begin = -1e300, end = 1e300;
      int ranks = 0;
      for (const Span& sp : m.spans)
        if (sp.kind == SpanKind::compute && m.str(sp.name) == phase) {
          begin = std::max(begin, sp.start), end = std::min(end, sp.end());
          ++ranks;
        }
      REQUIRE(ranks == s.ranks);
      REQUIRE(begin < end);
      const SplitsMoment now = splits_at(index, at_time(0.5 * (begin + end)));
      const bool is_g = phase[0] == 'g';
      REQUIRE(now.active == (is_g ? s.g : s.f));
      CHECK(now.backward == !is_g);
      CHECK(std::count(now.blocks[now.active].ranks.begin(), now.blocks[now.active].ranks.end(),
                       true) == s.ranks);
      if (is_g)
        CHECK(now.blocks[first_weight].forward == PassState::done);
      else
        CHECK(now.blocks[s.g].forward == PassState::done);
    }
  }
}

TEST_CASE("splits: malformed splits give an empty model with a reason, never a throw", "[splits]") {
  const char* const bad[] = {
      "{",
      "[]",
      "null",
      "42",
      R"({"blocks":[]})",                                                 // no ranks
      R"({"ranks":0,"blocks":[]})",                                       // no ranks
      R"({"ranks":1e300,"blocks":[]})",                                   // not a count
      R"({"ranks":"4","blocks":[]})",                                     // a string
      R"({"ranks":2})",                                                   // no blocks
      R"({"ranks":2,"blocks":{}})",                                       // blocks not an array
      R"({"ranks":2,"blocks":[7]})",                                      // a block not an object
      R"({"ranks":2,"blocks":[{"kind":"tensor","shape":[1]}]})",          // unknown kind
      R"({"ranks":2,"blocks":[{"kind":"weight"}]})",                      // no shape
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[]}]})",           // empty shape
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[1,2,3,4,5]}]})",  // 5 axes
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[-4,4]}]})",       // negative
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,1e99]}]})",     // too large
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,"4"]}]})",      // a string
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"diagonal"}]})",
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns"}]})",  // no ranges
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns",
          "ranges":[[0,2]]}]})",              // one range for two ranks
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns",
          "ranges":[[0,2],[2,4],[4,4]]}]})",  // three
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns",
          "ranges":[[0,2],[2,9]]}]})",        // past the end
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns",
          "ranges":[[0,2],[3,1]]}]})",        // begin after end
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"columns",
          "ranges":[[0,2],[2]]}]})",          // not a pair
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4],"split":"columns",
          "ranges":[[0,2],[2,4]]}]})",        // no second axis to cut
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"rows","axis":-1,
          "ranges":[[0,2],[2,4]]}]})",
      R"({"ranks":2,"blocks":[{"kind":"weight","shape":[4,4],"split":"rows",
          "ranges":[[0,2],[2,4]],"heads":[[0,1]]}]})",  // heads not one per rank
  };
  for (const char* json : bad) {
    INFO(json);
    Splits s;
    REQUIRE_NOTHROW(s = parse_splits(json));
    CHECK(s.empty());
    CHECK(s.f == -1);
    CHECK_FALSE(s.error.empty());
  }
  CHECK(parse_splits("").empty());
  CHECK(parse_splits("").error.empty());  // absent is not an error

  // Depth: a bomb of nested arrays is refused, not recursed into.
  const std::string deep =
      R"({"ranks":2,"blocks":)" + std::string(5000, '[') + std::string(5000, ']') + "}";
  CHECK(parse_splits(deep).empty());

  // A trace whose splits are malformed loads, and indexes and plays as one without splits.
  const TraceModel m = parse_trace_model(R"({"traceEvents":[
    {"ph":"X","name":"g: all-reduce","cat":"compute","pid":1,"tid":1,"ts":0,"dur":10}],
    "otherData":{"schema":"distlab-trace","schema_version":3,"world_size":1,
    "splits":{"ranks":1,"blocks":[{"kind":"g","forward_phase":"g: all-reduce"},{"kind":1}]}}})");
  SplitsIndex index;
  REQUIRE_NOTHROW(index = build_splits_index(m));
  CHECK(index.splits.empty());
  CHECK(index.intervals.empty());
  const SplitsMoment now = splits_at(index, at_time(5));
  CHECK(now.active == -1);
  CHECK(now.blocks.empty());
}

TEST_CASE("splits: a trace without the field has none, and no error", "[splits]") {
  const TraceModel m = load_trace_model(example_trace("02_scatter_gather"));
  const SplitsIndex index = build_splits_index(m);
  CHECK(index.splits.empty());
  CHECK(index.splits.error.empty());
  CHECK(splits_at(index, at_time(m.t_end)).active == -1);
}
