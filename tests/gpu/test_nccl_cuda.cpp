// test_nccl_cuda.cpp — a smoke of every NCCL library collective on one in-process rank, the one
// thing one GPU can run of them (NCCL refuses two ranks of a communicator on one GPU).
//
// One rank, so every result equals its input: what is tested is that each call is made, runs
// to its end on the rank's stream, and leaves the right bytes, in f32, f16 and bf16, through
// the one-count calls and through the unequal-chunk forms (groups of ncclBroadcast,
// ncclReduce, ncclSend/ncclRecv, forced with set_nccl_chunked_forms), and that the
// communicator is finalized at the end. gpu-check.sh runs this group under a timeout: a wrong
// group or a communicator that never ends hangs NCCL rather than failing.
#include "catch.hpp"

#include <string>
#include <vector>

#include "core/base/half.hpp"
#include "core/collectives/baseline.hpp"
#include "core/collectives/baseline_detail.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;

namespace {

// Small integers: exact in every type here (bf16 holds integers up to 256 exactly).
template <class T>
std::vector<T> ramp(std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T(static_cast<float>(i % 200));
  return v;
}

template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (static_cast<float>(a[i]) != static_cast<float>(b[i])) return false;
  return true;
}

struct Outcome {
  std::string call;
  bool right = false;
};

// Every library collective on one rank; each outcome names the call made.
template <class T>
std::vector<Outcome> every_collective(bool chunked) {
  constexpr std::size_t n = 4099;
  const DType t = dtype_of<T>();
  std::vector<Outcome> out;
  run_in_process(
      1,
      [&](Comm& comm) {
        baseline::detail::set_nccl_chunked_forms(chunked);
        const auto in = ramp<T>(n);
        Buffer<T> src = comm.alloc_from(in, Category::data);
        Buffer<T> dst = comm.alloc<T>(n, Category::data);
        auto run = [&](std::string call, bool in_dst) {
          const auto got = to_host(in_dst ? dst.view() : src.view());
          out.push_back({std::move(call), same(got, in)});
          ops::fill(dst.view(), T(-1.0f));
        };
        run(baseline::scatter(comm, src.data(), dst.data(), n, t, 0), true);
        run(baseline::gather(comm, src.data(), dst.data(), n, t, 0), true);
        run(baseline::reduce(comm, src.data(), dst.data(), n, t, 0), true);
        run(baseline::all_gather(comm, src.data(), dst.data(), n, t), true);
        run(baseline::reduce_scatter(comm, src.data(), dst.data(), n, t), true);
        run(baseline::all_reduce(comm, src.data(), dst.data(), n, t), true);
        run(baseline::broadcast(comm, src.data(), n, t, 0), false);
        run(baseline::all_reduce(comm, src.data(), src.data(), n, t), false);  // in place
        baseline::detail::set_nccl_chunked_forms(false);
      },
      60, Device::cuda);
  return out;
}

template <class T>
void check_every_collective() {
  for (bool chunked : {false, true}) {
    const auto outcomes = every_collective<T>(chunked);
    REQUIRE(outcomes.size() == 8);
    for (const auto& o : outcomes) {
      INFO(o.call << (chunked ? " (unequal-chunk form)" : ""));
      CHECK(o.call.rfind("nccl", 0) == 0);  // NCCL's call, not a stand-in
      CHECK(o.right);
    }
  }
}

}  // namespace

TEMPLATE_TEST_CASE(
    "nccl: every library collective runs on one in-process rank and leaves its input", "[nccl]",
    float, Half, BFloat16) {
  check_every_collective<TestType>();
}

TEST_CASE("nccl: the unequal-chunk forms are the groups they say", "[nccl]") {
  const auto outcomes = every_collective<float>(true);
  REQUIRE(outcomes.size() == 8);
  CHECK(outcomes[0].call.rfind("ncclSend/ncclRecv (scatter", 0) == 0);
  CHECK(outcomes[1].call.rfind("ncclSend/ncclRecv (gather", 0) == 0);
  CHECK(outcomes[3].call == "ncclBroadcast x N (all-gather)");
  CHECK(outcomes[4].call == "ncclReduce x N (reduce-scatter)");
}
