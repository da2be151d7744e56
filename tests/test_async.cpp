// async.hpp: nonblocking operations — many at once, moved on by progress, mixed with blocking
// collectives, and failing cleanly while pending.
#include "catch.hpp"

#include <fmt/format.h>

#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/collectives/async.hpp"
#include "core/runtime/data.hpp"
#include "thread_world.hpp"

using namespace distlab;
using coll::AllReduceAlgo;
using distlab::test::run_ranks;

namespace {
constexpr std::uint64_t kSeed = 11;

// The exact int64 sum over n ranks of inputs of `length` (offset `salt` so buffers differ).
std::vector<std::int64_t> sum_of(int n, std::size_t length, std::uint64_t salt) {
  std::vector<std::int64_t> want(length, 0);
  for (int r = 0; r < n; ++r)
    for (std::size_t i = 0; i < length; ++i)
      want[i] += input_value<std::int64_t>(kSeed + salt, r, i);
  return want;
}

std::vector<AllReduceAlgo> traced_algos() {
  std::vector<AllReduceAlgo> out;
  for (AllReduceAlgo a : coll::all_reduce_algos())
    if (a != AllReduceAlgo::library) out.push_back(a);
  return out;
}

// Every send of the run has its receive with the same step, and the other way round: the flows
// of many operations at once pair up as the trace writer pairs them (src, dst, tag, group, seq).
std::string unpaired(const test::ThreadRun& run) {
  using Key = std::tuple<int, int, int, std::string, std::uint64_t>;
  std::map<Key, int> sends, recvs;
  for (const auto& log : run.logs)
    for (const auto& e : log.spans) {
      if (e.kind == SpanEvent::Kind::send)
        sends[{log.rank, e.peer, e.tag, e.meta.group, e.seq}] = e.meta.step;
      if (e.kind == SpanEvent::Kind::recv)
        recvs[{e.peer, log.rank, e.tag, e.meta.group, e.seq}] = e.meta.step;
    }
  if (sends.size() != recvs.size())
    return fmt::format("{} sends, {} receives", sends.size(), recvs.size());
  for (const auto& [key, step] : sends) {
    auto it = recvs.find(key);
    if (it == recvs.end())
      return fmt::format("a send to r{} (group {}) has no receive", std::get<1>(key),
                         std::get<3>(key));
    if (it->second != step)
      return fmt::format("a message's sides carry steps {} and {}", step, it->second);
  }
  return {};
}
}  // namespace

TEST_CASE(
    "async: 12 all-reduces at once (more than the contexts), three at a time of one algorithm, "
    "each the exact sum "
    "whatever the order of the waits",
    "[async][comm][collectives]") {
  const auto algos = traced_algos();
  for (int n : {1, 2, 3, 7})
    for (std::size_t length : {std::size_t(0), std::size_t(37), std::size_t(1000)}) {
      INFO(n << " ranks, " << length << " elements");
      // kAsyncSlots + 4: four slots serve a second operation. Three operations in a row run the
      // same algorithm (the same tags): only their contexts keep their messages apart.
      constexpr int kOps = 12;
      std::vector<std::string> wrong(static_cast<std::size_t>(n));
      auto run = run_ranks(n, [&](Comm& comm) {
        std::vector<Buffer<std::int64_t>> data;
        for (int k = 0; k < kOps; ++k) {
          data.push_back(comm.alloc<std::int64_t>(length, Category::data));
          fill_input(data.back().view(), kSeed + std::uint64_t(k), comm.rank());
        }
        std::vector<AsyncHandle> handles;
        for (int k = 0; k < kOps; ++k) {
          handles.push_back(coll::all_reduce_async(comm, data[std::size_t(k)].view(),
                                                   algos[std::size_t(k / 3) % algos.size()]));
          for (int i = 0; i < 3; ++i) comm.progress();  // the rank "computes" between starts
        }
        for (int k = kOps - 1; k >= 0; --k) handles[std::size_t(k)].wait();
        for (int k = 0; k < kOps && wrong[std::size_t(comm.rank())].empty(); ++k) {
          const auto want = sum_of(n, length, std::uint64_t(k));
          const auto got = to_host(data[std::size_t(k)].view());
          if (got != want)
            wrong[std::size_t(comm.rank())] = fmt::format(
                "operation {} ({})", k, coll::to_string(algos[std::size_t(k / 3) % algos.size()]));
        }
      });
      REQUIRE_FALSE(run.failed);
      for (int r = 0; r < n; ++r) {
        INFO("r" << r);
        CHECK(wrong[std::size_t(r)] == "");
      }
      CHECK(unpaired(run) == "");
    }
}

TEST_CASE("async: progress alone finishes an operation while the rank computes", "[async][comm]") {
  constexpr std::size_t kLength = 100000;
  std::vector<int> polls(4, 0);
  std::vector<int> right(4, 0);  // not vector<bool>: its bits share words across ranks
  auto run = run_ranks(4, [&](Comm& comm) {
    auto data = comm.alloc<std::int64_t>(kLength, Category::data);
    fill_input(data.view(), kSeed, comm.rank());
    AsyncHandle h = coll::all_reduce_async(comm, data.view(), AllReduceAlgo::ring_chunked);
    while (!h.test()) ++polls[std::size_t(comm.rank())];  // compute; test() progresses
    right[std::size_t(comm.rank())] = to_host(data.view()) == sum_of(4, kLength, 0);
  });
  REQUIRE_FALSE(run.failed);
  for (int r = 0; r < 4; ++r) CHECK(right[std::size_t(r)]);
  CHECK(unpaired(run) == "");
}

TEST_CASE(
    "async: a blocking all-reduce, a barrier and a split while an operation is pending, a "
    "handle left without a wait finishes in its destructor",
    "[async][comm]") {
  std::vector<std::string> wrong(3);
  auto run = run_ranks(3, [&](Comm& comm) {
    auto a = comm.alloc<std::int64_t>(500, Category::data);
    auto b = comm.alloc<std::int64_t>(500, Category::data);
    auto c = comm.alloc<std::int64_t>(500, Category::data);
    fill_input(a.view(), kSeed + 0, comm.rank());
    fill_input(b.view(), kSeed + 1, comm.rank());
    fill_input(c.view(), kSeed + 2, comm.rank());
    AsyncHandle ha = coll::all_reduce_async(comm, a.view(), AllReduceAlgo::ring_chunked);
    coll::all_reduce(comm, b.view(), AllReduceAlgo::recursive_doubling);  // its waits move `ha`
    comm.barrier();                                                       // finishes `ha`
    ha.wait();  // already done: returns at once
    {
      AsyncHandle hc = coll::all_reduce_async(comm, c.view(), AllReduceAlgo::tree);
    }  // no wait: the destructor waits
    Comm group = comm.split(comm.rank() % 2, comm.rank(), "half");
    std::string& w = wrong[std::size_t(comm.rank())];
    if (to_host(a.view()) != sum_of(3, 500, 0)) w += "a ";
    if (to_host(b.view()) != sum_of(3, 500, 1)) w += "b ";
    if (to_host(c.view()) != sum_of(3, 500, 2)) w += "c ";
  });
  REQUIRE_FALSE(run.failed);
  for (int r = 0; r < 3; ++r) CHECK(wrong[std::size_t(r)] == "");
  CHECK(unpaired(run) == "");
}

TEST_CASE("async: a rank that throws while operations are pending ends every rank with its message",
          "[async][comm][failure]") {
  for (int n : {2, 4, 8}) {
    INFO(n << " ranks");
    auto run = run_ranks(n, [&](Comm& comm) {
      std::vector<Buffer<float>> data;
      for (int k = 0; k < 3; ++k) data.push_back(comm.alloc<float>(4096, Category::data));
      std::vector<AsyncHandle> handles;
      for (int k = 0; k < 3; ++k)
        handles.push_back(
            coll::all_reduce_async(comm, data[std::size_t(k)].view(), AllReduceAlgo::ring_chunked));
      if (comm.rank() == 1) throw Error("r1 threw with nonblocking all-reduces pending");
      for (auto& h : handles) h.wait();
    });
    CHECK(run.failed);
    CHECK(run.exit_code == 1);
    CHECK_THAT(run.failure, Catch::Contains("r1 threw with nonblocking all-reduces pending"));
    // Every other rank ended: stopped ("aborted") or, where rank 1 had already posted all it
    // needed, finished. None hangs until the deadlock timeout (that would be the failure).
    CHECK(run.errors[1] == "r1 threw with nonblocking all-reduces pending");
    for (int r = 0; r < n; ++r) {
      INFO("r" << r << ": " << run.errors[std::size_t(r)]);
      if (r != 1)
        CHECK((run.errors[std::size_t(r)].empty() || run.errors[std::size_t(r)] == "aborted"));
    }
  }
}

TEST_CASE("async: an operation's own error reaches its wait, and ends the run",
          "[async][comm][failure]") {
  auto run = run_ranks(2, [&](Comm& comm) {
    // Rank 0 all-reduces 10 elements, rank 1 12: the first receive of the wrong size fails.
    auto data = comm.alloc<float>(comm.rank() == 0 ? 10 : 12, Category::data);
    AsyncHandle h = coll::all_reduce_async(comm, data.view(), AllReduceAlgo::ring);
    h.wait();
  });
  CHECK(run.failed);
  CHECK_THAT(run.failure, Catch::Contains("receive expects"));
}

TEST_CASE("async: an operation cannot start or wait for another", "[async][comm]") {
  std::string error;
  auto run = run_ranks(2, [&](Comm& comm) {
    AsyncHandle h = comm.start([](Comm& c) { c.start([](Comm&) {}); });
    try {
      h.wait();
    } catch (const std::exception& e) {
      if (comm.rank() == 0) error = e.what();
    }
  });
  CHECK_FALSE(run.failed);
  CHECK_THAT(error, Catch::Contains("a nonblocking operation cannot start another"));
}
