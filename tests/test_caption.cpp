// viewer/model/caption.hpp, train_steps.hpp and panel_content.hpp: the caption of every step
// of traces made in-process (a ring all-reduce, a scatter, phases with text), the Shards
// replay starting over at each training step, and which panels have something to show.
#include "catch.hpp"

#include <limits>
#include <string>
#include <vector>

#include "core/collectives/all_gather_bruck.hpp"
#include "core/collectives/all_reduce_double_binary_tree.hpp"
#include "core/collectives/all_reduce_hierarchical.hpp"
#include "core/collectives/all_reduce_ring_chunked.hpp"
#include "core/collectives/all_reduce_tree.hpp"
#include "core/collectives/all_to_all.hpp"
#include "core/collectives/all_to_all_bruck.hpp"
#include "core/collectives/scatter.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/trace/writer.hpp"
#include "viewer/model/caption.hpp"
#include "viewer/model/panel_content.hpp"
#include "viewer/model/playback.hpp"
#include "viewer/model/shard_replay.hpp"
#include "viewer/model/train_steps.hpp"

using namespace distlab::viewer;
using Catch::Contains;

namespace {

// `ranks_per_node`: what the trace says of the nodes (otherData.ranks_per_node), 0 nothing.
TraceModel traced(int n, const std::function<void(distlab::Comm&)>& body, int ranks_per_node = 0) {
  const distlab::RunResult run = distlab::run_in_process(n, body);
  distlab::TraceInfo info;
  info.lesson = "99_caption";
  info.title = "caption test";
  info.algorithm = "test";
  info.world = run.world;
  info.world.size = n;
  info.world.ranks_per_node = ranks_per_node;
  info.verified = true;
  return parse_trace_model(distlab::trace_json(info, run.logs));
}

distlab::PhaseArgs with_text(std::string text) {
  distlab::PhaseArgs args;
  args.text = std::move(text);
  return args;
}

// A ring all-reduce of 64 floats on 4 ranks (16 floats, 64 B a chunk), inside a phase with a
// text, then a phase with a text and no message: steps 1-3 reduce-scatter, 4-6 all-gather.
TraceModel ring_with_phases() {
  return traced(4, [](distlab::Comm& comm) {
    auto data = comm.alloc<float>(64, distlab::Category::grads);
    distlab::fill_input(data.view(), 1, comm.rank());
    {
      auto phase = comm.phase("ring", with_text("the ring sums the gradients"));
      distlab::coll::all_reduce_ring_chunked(comm, data.view());
    }
    auto phase = comm.phase("after", with_text("every rank holds the sum"));
    distlab::fill_input(data.view(), 2, comm.rank());
  });
}

Moment at_beat(const TraceModel& m, double beat) {
  Playback p;
  p.seek_beat(m, beat);
  return p.moment(m);
}

Moment at_time(const TraceModel& m, double t_us) {
  Playback p;
  p.set_clock(m, Clock::measured);
  p.seek_time(m, t_us);
  return p.moment(m);
}

// The span called `name` that starts first (or, with latest, last) on any rank.
const Span& span_named(const TraceModel& m, const std::string& name, bool latest) {
  const Span* found = nullptr;
  for (const Span& s : m.spans)
    if (m.str(s.name) == name &&
        (!found || (latest ? s.start > found->start : s.start < found->start)))
      found = &s;
  REQUIRE(found);
  return *found;
}

// `iterations` training steps of a ring all-reduce of the same buffer, each inside a phase
// whose op is "train step" (as the lessons mark them) or, with marked = false, a plain phase.
TraceModel training(int iterations, bool marked) {
  return traced(4, [=](distlab::Comm& comm) {
    auto grads = comm.alloc<float>(64, distlab::Category::grads);
    for (int k = 0; k < iterations; ++k) {
      distlab::PhaseArgs args;
      if (marked) args.op = distlab::kTrainStepOp;
      auto phase = comm.phase("iteration " + std::to_string(k + 1), args);
      distlab::fill_input(grads.view(), k + 1, comm.rank());
      distlab::coll::all_reduce_ring_chunked(comm, grads.view(), "grads");
    }
  });
}

int max_count(const ShardState& st) {
  int most = 0;
  for (const BufferState& b : st.buffers)
    for (const ChunkState& c : b.cells) most = std::max(most, c.count);
  return most;
}

}  // namespace

TEST_CASE("caption: a ring all-reduce names reduce-scatter and all-gather, chunks and bytes",
          "[caption]") {
  const TraceModel m = ring_with_phases();
  REQUIRE(m.step_ids.size() == 6);
  const CaptionIndex index = index_captions(m);
  for (int k = 1; k <= 3; ++k) {
    const Caption c = caption_at(m, index, at_beat(m, k));
    INFO(c.line());
    CHECK(c.beat == k);
    CHECK(c.steps == 6);
    CHECK(c.collective == "reduce-scatter");
    CHECK_THAT(c.line(), Contains("step " + std::to_string(k) + " of 6, reduce-scatter: "));
    CHECK_THAT(c.flow, Contains("every rank sends chunk (r - " + std::to_string(k) +
                                ") mod 4 right and adds the one from its left"));
    CHECK_THAT(c.flow, Contains("64 B per link"));
    CHECK_THAT(c.flow, Contains(std::to_string(k) + " of 4 ranks' data"));
  }
  for (int k = 4; k <= 6; ++k) {
    const Caption c = caption_at(m, index, at_beat(m, k));
    INFO(c.line());
    CHECK(c.collective == "all-gather");
    CHECK_THAT(c.flow, Contains("right and stores the one from its left"));
    CHECK_THAT(c.flow, Contains("64 B per link"));
    CHECK_THAT(c.flow, Contains("the finished sum of all 4 ranks"));
  }
  // The all-gather sends the chunk each rank completed (r) first, then the ones it received.
  CHECK_THAT(caption_at(m, index, at_beat(m, 4)).flow, Contains("its own chunk r "));
  CHECK_THAT(caption_at(m, index, at_beat(m, 5)).flow, Contains("chunk (r - 1) mod 4"));
  // Halfway through a step the caption is that step's; before the first, the next one's.
  CHECK(caption_at(m, index, at_beat(m, 2.5)).beat == 3);
  const Caption start = caption_at(m, index, at_beat(m, 0));
  CHECK(start.beat == 0);
  CHECK_THAT(start.line(), Contains("nothing has moved yet; next, reduce-scatter"));
  // The one-call form gives the same.
  CHECK(caption_at(m, at_beat(m, 2)).line() == caption_at(m, index, at_beat(m, 2)).line());
}

TEST_CASE("caption: a scatter from r0 is named, each step one message", "[caption]") {
  const int n = 4;
  const TraceModel m = traced(n, [](distlab::Comm& comm) {
    comm.declare_buffer("data", 64, n);
    auto all = comm.alloc<float>(64, distlab::Category::data);
    distlab::fill_input(all.view(), 1, 0);
    const distlab::Partition part{64, n};
    auto mine = comm.alloc<float>(part.size(comm.rank()), distlab::Category::data);
    distlab::coll::scatter(comm, distlab::View<const float>(all.view()), mine.view(), 0);
  });
  REQUIRE(m.step_ids.size() == n - 1);
  for (int k = 1; k < n; ++k) {
    const Caption c = caption_at(m, at_beat(m, k));
    INFO(c.line());
    CHECK(c.collective == "scatter");
    CHECK_THAT(c.flow, Contains("r0 sends chunk " + std::to_string(k) + " to r" +
                                std::to_string(k) + ", which stores it; 64 B"));
  }
}

TEST_CASE("caption: the lesson's phase texts come with the step", "[caption]") {
  const TraceModel m = ring_with_phases();
  const CaptionIndex index = index_captions(m);
  // Steps clock: the phase around the step's messages; the last step also has the phase with
  // no message that follows it on the ranks.
  for (int k = 1; k <= 5; ++k) {
    const Caption c = caption_at(m, index, at_beat(m, k));
    INFO(k);
    CHECK(c.phase_texts == std::vector<std::string>{"the ring sums the gradients"});
  }
  CHECK(caption_at(m, index, at_beat(m, 6)).phase_texts ==
        std::vector<std::string>{"the ring sums the gradients", "every rank holds the sum"});
  // Measured clock: the phases covering the moment, on any rank (the ranks' threads drift: at
  // the middle of one rank's "after" another may still be in "ring").
  const Span ring = span_named(m, "ring", false);
  const Span after = span_named(m, "after", true);
  CHECK_THAT(caption_at(m, index, at_time(m, ring.start + ring.dur / 2)).phase_texts,
             Catch::VectorContains(std::string("the ring sums the gradients")));
  const auto late = caption_at(m, index, at_time(m, after.start + after.dur / 2)).phase_texts;
  CHECK_THAT(late, Catch::VectorContains(std::string("every rank holds the sum")));
  // --describe prints the caption, the phase, and the panels' state.
  const std::string d = describe(m, at_beat(m, 1.5));
  CHECK_THAT(d, Contains("caption: step 2 of 6, reduce-scatter: every rank sends chunk (r - 2)"));
  CHECK_THAT(d, Contains("phase: the ring sums the gradients"));
  CHECK_THAT(d, Contains("in flight: 4"));
  CHECK_THAT(d, Contains("r0 -> r1  64 B  data chunk 2  reduce  50% of the way"));
  CHECK_THAT(d, Contains("data, 4 chunks, reduced into"));
  CHECK_THAT(d, Contains("    r1 1 1 1 2  (4 of 4 held, 0 complete)"));
  CHECK_THAT(d, Contains("memory: the ledger per rank at this moment"));
  CHECK_THAT(d, Contains("grads 256 B"));
}

TEST_CASE("train steps: the shard replay starts over at each training step", "[caption][shards]") {
  const TraceModel m = training(2, true);
  REQUIRE(m.step_ids.size() == 12);
  const TrainSteps ts = train_steps(m);
  REQUIRE(ts.count() == 2);
  CHECK(ts.first_step[0] == m.step_ids[0]);
  CHECK(ts.first_step[1] == m.step_ids[6]);
  CHECK(ts.at_step(m.step_ids[5]) == 0);
  CHECK(ts.at_step(m.step_ids[6]) == 1);
  CHECK(ts.at_time(ts.start[1]) == 1);

  // The end of iteration 1: every chunk on every rank holds all 4 ranks' data.
  const ShardState end1 = state_at_step(m, m.step_ids[5]);
  CHECK(end1.train_step == 0);
  for (const ChunkState& c : end1.buffers.at(0).cells) CHECK(c.count == 4);
  // The first step of iteration 2: only its own reduce-scatter step, as iteration 1's first.
  const ShardState step1 = state_at_step(m, m.step_ids[0]);
  const ShardState step7 = state_at_step(m, m.step_ids[6]);
  CHECK(step7.train_step == 1);
  CHECK(max_count(step7) == 2);
  for (std::size_t i = 0; i < step7.buffers.at(0).cells.size(); ++i)
    CHECK(step7.buffers[0].cells[i].mask == step1.buffers[0].cells[i].mask);
  // The same on the measured clock, when iteration 2's first message lands. Its first: by the
  // latest, another rank may already have received a step-8 chunk (each rank sends step 8 as
  // soon as its own step-7 chunk is in), which makes 3 on a loaded machine. No step-8 message
  // can land before the first step-7 one, since each is sent only after one of those arrived.
  double landed = std::numeric_limits<double>::infinity();
  for (const Message& msg : m.messages)
    if (msg.step == m.step_ids[6]) landed = std::min(landed, msg.arrival);
  const ShardState t7 = state_at_time(m, landed);
  CHECK(t7.train_step == 1);
  CHECK(max_count(t7) == 2);
  // The caption says which training step it is.
  CHECK_THAT(caption_at(m, at_beat(m, 7)).line(),
             Contains("step 7 of 12 (training step 2 of 2), reduce-scatter"));

  // Without the marker nothing starts over: iteration 1's sums stay in the cells.
  const TraceModel plain = training(2, false);
  CHECK(train_steps(plain).count() == 0);
  const ShardState piled = state_at_step(plain, plain.step_ids[6]);
  CHECK(piled.train_step == -1);
  CHECK(max_count(piled) == 4);
}

TEST_CASE("panel content: Shards needs buffers, Memory a ledger or a formula", "[caption]") {
  // A send with no buffer declared: a ledger, but nothing for Shards.
  const TraceModel bare = traced(2, [](distlab::Comm& comm) {
    auto x = comm.alloc<float>(16, distlab::Category::data);
    if (comm.rank() == 0) comm.send(distlab::View<const float>(x.view()), 1, 7);
    if (comm.rank() == 1) comm.recv(x.view(), 0, 7);
  });
  CHECK_FALSE(shards_have_content(bare));
  CHECK_THAT(shards_empty_reason(bare), Contains("declares no buffers"));
  CHECK(memory_has_content(bare));
  CHECK(memory_empty_reason(bare).empty());

  const TraceModel ring = ring_with_phases();
  CHECK(shards_have_content(ring));
  CHECK(shards_empty_reason(ring).empty());

  TraceModel none = ring;
  none.memory.assign(none.memory.size(), {});
  CHECK_FALSE(memory_has_content(none));
  CHECK_THAT(memory_empty_reason(none), Contains("no memory ledger"));
  none.info.memory_expected_bytes = {1e6, 1e6, 1e6, 1e6};  // a formula alone still draws
  CHECK(memory_has_content(none));

  const TraceModel empty;
  CHECK_FALSE(shards_have_content(empty));
  CHECK_FALSE(memory_has_content(empty));
}

TEST_CASE("caption: a binomial tree all-reduce names each level a reduce, then a broadcast",
          "[caption][tree]") {
  // 8 ranks: reduce in 3 rounds (r1, r3, r5, r7 to their left; r2, r6 to r ^ 2; r4 to r0), then
  // broadcast in 3 (r0 to r4; r0, r4 to r ^ 2; r0, r2, r4, r6 to their right). Before the fix, a
  // level read "all-reduce: ... send left and add the one from their right".
  const TraceModel m = traced(8, [](distlab::Comm& comm) {
    auto data = comm.alloc<float>(16, distlab::Category::grads);
    distlab::fill_input(data.view(), 1, comm.rank());
    distlab::coll::all_reduce_tree(comm, data.view());
  });
  REQUIRE(m.step_ids.size() == 6);
  const CaptionIndex index = index_captions(m);
  const auto line = [&](int k) { return caption_at(m, index, at_beat(m, k)); };
  for (int k = 1; k <= 3; ++k) {
    INFO(line(k).line());
    CHECK(line(k).collective == "reduce");
  }
  CHECK_THAT(line(1).flow,
             Contains("r1, r3, r5 and r7 send the whole buffer left, where it is added in"));
  CHECK_THAT(line(1).flow, Contains("each message holds 1 of 8 ranks' data"));
  CHECK_THAT(line(3).flow, Contains("r4 sends the whole buffer to r0, which adds it in"));
  CHECK_THAT(line(4).flow, Contains("r0 sends the whole buffer to r4, which stores it"));
  // Step 4 is one message, r0 to r4: the top level of the broadcast (its copies start at r0
  // only, the root the reduce ended on), named as the levels after it.
  for (int k = 4; k <= 6; ++k) {
    INFO(line(k).line());
    CHECK(line(k).collective == "broadcast");
  }
  CHECK_THAT(line(6).flow, Contains("r0, r2, r4 and r6 send the whole buffer right, where it is "
                                    "stored"));
}

// ---- lesson 15's algorithms: each step reads as what it is ----------------------------------

namespace {

std::vector<Caption> captions_of(const TraceModel& m) {
  const CaptionIndex index = index_captions(m);
  std::vector<Caption> out;
  for (int k = 1; k <= static_cast<int>(m.step_ids.size()); ++k)
    out.push_back(caption_at(m, index, at_beat(m, k)));
  return out;
}

// The all-to-all's blocks: n of 2 floats each way.
void all_to_all(distlab::Comm& comm, bool bruck) {
  const std::size_t n = std::size_t(comm.size());
  auto send = comm.alloc<float>(2 * n, distlab::Category::data);
  auto recv = comm.alloc<float>(2 * n, distlab::Category::data);
  distlab::fill_input(send.view(), 1, comm.rank());
  const distlab::View<const float> in(send.view());
  if (bruck)
    distlab::coll::all_to_all_bruck(comm, in, recv.view());
  else
    distlab::coll::all_to_all_pairwise(comm, in, recv.view(), "dispatch");
}

}  // namespace

TEST_CASE("caption: the double binary tree reduces and broadcasts half the data down each tree",
          "[caption][tree]") {
  // 8 ranks: every step of the reduce moves segments of the two halves up their trees, each
  // half ending on its tree's root; the broadcast brings them down. Before the fix the reduce
  // read "reduce-scatter" (which leaves a part on every rank) and the broadcast "all-gather".
  const TraceModel m = traced(8, [](distlab::Comm& comm) {
    auto data = comm.alloc<float>(64, distlab::Category::grads);
    distlab::fill_input(data.view(), 1, comm.rank());
    distlab::coll::all_reduce_double_binary_tree(comm, data.view());
  });
  const std::vector<Caption> c = captions_of(m);
  REQUIRE(c.size() >= 4);
  int reduces = 0, broadcasts = 0;
  for (const Caption& k : c) {
    INFO(k.line());
    const bool reduce = k.flow.find("add") != std::string::npos;
    CHECK(k.collective == (reduce ? "reduce up two trees (half of the data each)"
                                  : "broadcast down two trees (half of the data each)"));
    (reduce ? reduces : broadcasts) += 1;
  }
  CHECK(reduces > 0);
  CHECK(broadcasts > 0);
}

TEST_CASE("caption: the hierarchical all-reduce's rings inside the nodes and its step between",
          "[caption][hierarchical]") {
  // 8 ranks, nodes of 4: a reduce-scatter by a ring in each node (3 steps), one exchange with
  // r ^ 4 between the nodes each way (reduce-scatter, then all-gather), an all-gather by the
  // rings (3 steps).
  const TraceModel m = traced(
      8,
      [](distlab::Comm& comm) {
        auto data = comm.alloc<float>(64, distlab::Category::grads);
        distlab::fill_input(data.view(), 1, comm.rank());
        distlab::coll::all_reduce_hierarchical(comm, data.view(), 4);
      },
      4);
  CHECK(m.info.ranks_per_node == 4);  // written and read back
  const std::vector<Caption> c = captions_of(m);
  REQUIRE(c.size() == 8);
  for (int k : {0, 1, 2, 3}) CHECK(c[std::size_t(k)].collective == "reduce-scatter");
  for (int k : {4, 5, 6, 7}) CHECK(c[std::size_t(k)].collective == "all-gather");
  for (int k : {0, 1, 2, 5, 6, 7}) {
    INFO(c[std::size_t(k)].line());
    CHECK_THAT(c[std::size_t(k)].flow, Contains("in each node of 4 ranks (r0-r3, ...), every rank "
                                                "sends"));
    CHECK_THAT(c[std::size_t(k)].flow, Contains("to the next rank of it"));
  }
  for (int k : {3, 4}) {
    INFO(c[std::size_t(k)].line());
    CHECK_THAT(c[std::size_t(k)].flow,
               Contains("with its partner r ^ 4 (the same place in the other node)"));
  }
}

TEST_CASE("caption: Bruck's all-gather, and the all-to-all by pairwise exchange and by Bruck",
          "[caption][alltoall]") {
  SECTION("Bruck's all-gather: every step an all-gather, to the rank 2^k away") {
    const TraceModel m = traced(8, [](distlab::Comm& comm) {
      auto data = comm.alloc<float>(16, distlab::Category::data);
      distlab::fill_input(data.view(), 1, comm.rank());
      distlab::coll::all_gather_bruck(comm, data.view(), "load");
    });
    const std::vector<Caption> c = captions_of(m);
    REQUIRE(c.size() == 3);
    for (const Caption& k : c) CHECK(k.collective == "all-gather");
    CHECK_THAT(c[1].flow,
               Contains("every rank sends chunks to r - 2 and stores the one from r + 2"));
  }
  SECTION("pairwise: step s sends to r + s, at s = N/2 the partner r ^ 4: an all-to-all") {
    const TraceModel m = traced(8, [](distlab::Comm& comm) { all_to_all(comm, false); });
    const std::vector<Caption> c = captions_of(m);
    REQUIRE(c.size() == 7);
    for (const Caption& k : c) {
      INFO(k.line());
      CHECK(k.collective == "all-to-all");  // before the fix: "all-gather"
      CHECK_THAT(k.flow, Contains("its block for the receiver d (d's block r)"));
    }
    CHECK_THAT(c[1].flow, Contains("to r + 2 and stores the one from r - 2"));
    CHECK_THAT(c[3].flow, Contains("with its partner r ^ 4"));
  }
  SECTION("Bruck: step k moves the blocks that hop 2^k ranks") {
    const TraceModel m = traced(8, [](distlab::Comm& comm) { all_to_all(comm, true); });
    const std::vector<Caption> c = captions_of(m);
    REQUIRE(c.size() == 3);
    for (const Caption& k : c) {
      INFO(k.line());
      CHECK(k.collective == "all-to-all (Bruck)");  // before: no name
    }
    CHECK_THAT(c[0].flow, Contains("its blocks that hop 1 rank now (bit 0 of their distance set)"));
    CHECK_THAT(c[1].flow,
               Contains("its blocks that hop 2 ranks now (bit 1 of their distance set)"));
  }
}
