// comm.hpp: one rank's view — checked arguments, traced messages, steps, phases, checks.
#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/comm/comm.hpp"
#include "thread_world.hpp"

using namespace distlab;
using distlab::test::run_ranks;

namespace {
// What f throws, as text ("" when it returns). Catch's assertions are not thread-safe, so
// rank bodies record and the test's own thread asserts.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}
}  // namespace

TEST_CASE("comm: a peer outside the world or a tag out of range is an error naming it", "[comm]") {
  std::vector<std::string> errors;
  auto run = run_ranks(2, [&](Comm& comm) {
    auto b = comm.alloc<float>(4, Category::data);
    if (comm.rank() != 0) return;
    errors.push_back(error_of([&] { comm.isend(View<const float>(b.view()), 2, 0); }));
    errors.push_back(error_of([&] { comm.irecv(b.view(), -1, 0); }));
    errors.push_back(error_of([&] { comm.isend(View<const float>(b.view()), 1, kMaxTag + 1); }));
    errors.push_back(error_of([&] { comm.irecv(b.view(), 1, -1); }));
  });
  CHECK_FALSE(run.failed);
  REQUIRE(errors.size() == 4);
  CHECK_THAT(errors[0], Catch::Contains("peer rank 2") && Catch::Contains("2 ranks"));
  CHECK_THAT(errors[1], Catch::Contains("peer rank -1"));
  CHECK_THAT(errors[2], Catch::Contains("tag " + std::to_string(kMaxTag + 1)));
  CHECK_THAT(errors[3], Catch::Contains("tag -1"));
  // A refused post leaves nothing behind: no message was traced.
  for (const auto& log : run.logs) CHECK(log.spans.empty());
}

TEST_CASE("comm: each message is one span on each side, paired by (peer, tag, seq)", "[comm]") {
  auto run = run_ranks(2, [](Comm& comm) {
    auto b = comm.alloc<std::int32_t>(3, Category::data);
    MsgMeta m;
    m.step = 5;
    m.buffer = "x";
    m.chunk_begin = 1;
    m.chunk_end = 2;
    m.apply = Apply::reduce;
    m.contributions = 1;
    m.contrib_mask = 1;
    for (int k = 0; k < 3; ++k) {
      if (comm.rank() == 0)
        comm.send(View<const std::int32_t>(b.view()), 1, 9, m);
      else
        comm.recv(b.view(), 0, 9, m);
    }
  });
  REQUIRE_FALSE(run.failed);
  const auto& s = run.logs[0].spans;
  const auto& r = run.logs[1].spans;
  REQUIRE(s.size() == 3);
  REQUIRE(r.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    CHECK(s[k].kind == SpanEvent::Kind::send);
    CHECK(s[k].lane == Lane::send);
    CHECK(r[k].kind == SpanEvent::Kind::recv);
    CHECK(r[k].lane == Lane::recv);
    CHECK(s[k].peer == 1);
    CHECK(r[k].peer == 0);
    CHECK(s[k].tag == 9);
    CHECK(s[k].bytes == 12);
    CHECK(r[k].bytes == 12);
    CHECK(s[k].seq == k);
    CHECK(r[k].seq == k);
    CHECK(s[k].t0 <= s[k].t1);
    CHECK(r[k].t0 <= r[k].t1);
    for (const auto* e : {&s[k], &r[k]}) {
      CHECK(e->meta.step == 5);
      CHECK(e->meta.buffer == "x");
      CHECK(e->meta.chunk_begin == 1);
      CHECK(e->meta.chunk_end == 2);
      CHECK(e->meta.apply == Apply::reduce);
      CHECK(e->meta.contrib_mask == 1);
    }
  }
}

TEST_CASE("comm: waiting twice on a request traces it once", "[comm]") {
  auto run = run_ranks(2, [](Comm& comm) {
    auto b = comm.alloc<float>(1, Category::data);
    Request r = comm.rank() == 0 ? comm.isend(View<const float>(b.view()), 1, 0)
                                 : comm.irecv(b.view(), 0, 0);
    comm.wait(r);
    comm.wait(r);
    Request none;
    comm.wait(none);  // an empty request is a no-op
  });
  REQUIRE_FALSE(run.failed);
  CHECK(run.logs[0].spans.size() == 1);
  CHECK(run.logs[1].spans.size() == 1);
}

TEST_CASE("comm: take_most_open_sends counts sends posted and not yet waited for", "[comm]") {
  // Rank 1 posts its receives first, so on threads rank 0's sends are copied as they are
  // posted: the count is of requests, not of data still moving.
  std::vector<int> seen;  // rank 0's: three isends then a wait for all; blocking sends; none
  auto run = run_ranks(2, [&](Comm& comm) {
    auto b = comm.alloc<float>(3, Category::data);
    if (comm.rank() == 1) {
      for (int round = 0; round < 2; ++round)
        for (int t = 0; t < 3; ++t) comm.recv(b.view().sub(std::size_t(t), 1), 0, t);
      return;
    }
    (void)comm.take_most_open_sends();
    std::vector<Request> rs;
    for (int t = 0; t < 3; ++t)
      rs.push_back(comm.isend(View<const float>(b.view()).sub(std::size_t(t), 1), 1, t));
    comm.wait_all(rs);
    comm.wait_all(rs);  // waited twice: counted once
    seen.push_back(comm.take_most_open_sends());
    for (int t = 0; t < 3; ++t) comm.send(View<const float>(b.view()).sub(std::size_t(t), 1), 1, t);
    seen.push_back(comm.take_most_open_sends());
    seen.push_back(comm.take_most_open_sends());
  });
  REQUIRE_FALSE(run.failed);
  CHECK(seen == std::vector<int>{3, 1, 0});
}

TEST_CASE("comm: next_steps hands out the same ids on every rank, from 1", "[comm]") {
  std::vector<int> first(3), second(3);
  auto run = run_ranks(3, [&](Comm& comm) {
    first[static_cast<std::size_t>(comm.rank())] = comm.next_steps(4);
    second[static_cast<std::size_t>(comm.rank())] = comm.next_steps(2);
    comm.mark_step(7);
  });
  REQUIRE_FALSE(run.failed);
  CHECK(first == std::vector<int>{1, 1, 1});
  CHECK(second == std::vector<int>{5, 5, 5});
  for (const auto& log : run.logs) {
    REQUIRE(log.steps.size() == 1);
    CHECK(log.steps[0].step == 7);
  }
}

TEST_CASE("comm: phase, declare_buffer, check and alloc land in the rank's log", "[comm]") {
  std::int64_t inside = -1, after = -1;
  bool fault_before = true, fault_after = false;
  auto run = run_ranks(1, [&](Comm& comm) {
    {
      auto p = comm.phase("work");
      auto b = comm.alloc<double>(8, Category::activations);
      inside = comm.ledger().current(Category::activations);
    }
    after = comm.ledger().current_total();
    comm.declare_buffer("grads", 100, 4);
    comm.declare_buffer("grads", 200, 8);  // a second declaration updates the first
    comm.declare_buffer("params", 10, 2);
    comm.check("ok one", true);
    comm.check("bad one", false, "why");
    fault_before = comm.inject_fault();
    comm.set_inject_fault(true);
    fault_after = comm.inject_fault();  // the last rank of a world of 1 is rank 0
  });
  CHECK(inside == 64);
  CHECK(after == 0);
  CHECK_FALSE(fault_before);
  CHECK(fault_after);
  REQUIRE_FALSE(run.failed);
  const RankLog& log = run.logs[0];
  REQUIRE(log.spans.size() == 1);
  CHECK(log.spans[0].name == "work");
  CHECK(log.spans[0].kind == SpanEvent::Kind::plain);
  CHECK(log.spans[0].lane == Lane::compute);
  CHECK(log.spans[0].t0 <= log.spans[0].t1);
  REQUIRE(log.buffers.size() == 2);
  CHECK(log.buffers[0].name == "grads");
  CHECK(log.buffers[0].length == 200);
  CHECK(log.buffers[0].chunks == 8);
  REQUIRE(log.checks.size() == 2);
  CHECK(log.checks[0].ok);
  CHECK_FALSE(log.checks[1].ok);
  CHECK(log.checks[1].detail == "why");
  CHECK(log.peak[static_cast<int>(Category::activations)] == 64);
  CHECK(log.counters.size() == 2);  // charge and release
}

TEST_CASE("comm: inject_fault applies to the last rank only", "[comm]") {
  std::vector<int> faulty(4, -1);
  run_ranks(4, [&](Comm& comm) {
    comm.set_inject_fault(true);
    faulty[static_cast<std::size_t>(comm.rank())] = comm.inject_fault() ? 1 : 0;
  });
  CHECK(faulty == std::vector<int>{0, 0, 0, 1});
}
