// test_stress_cuda.cpp — the ordering and all-reduce tests made hard to pass by luck: many
// ranks sharing the GPU, and a delay kernel before every post, so that the data a message
// carries is still being produced (or its receive buffer still being read) when the host posts.
// A missing stream dependency then shows as a wrong value, and the inputs are small integers,
// so the results are compared bit for bit.
//
// Hidden ([.][stress]): `distlab_gpu_tests "[stress]"` runs them; scripts/gpu-check.sh repeats
// them about 20 times. DISTLAB_GPU_STRESS_RANKS (default 8) and DISTLAB_GPU_DELAY_US (default
// 200) set the ranks and the delay.
#include "catch.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/collectives/all_reduce.hpp"
#include "core/device/cuda_context.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;

namespace {

double env_or(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atof(v) : fallback;
}

int stress_ranks() {
  return std::max(2, static_cast<int>(env_or("DISTLAB_GPU_STRESS_RANKS", 8)));
}
double delay_us() {
  return env_or("DISTLAB_GPU_DELAY_US", 200);
}

// Rank r's input: integers below 2^12, so a sum over 8 ranks stays exact in f32.
std::vector<float> input_of(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((rank + 1) * 16 + static_cast<int>(i % 251));
  return v;
}

}  // namespace

TEST_CASE(
    "stress: around a ring, each send takes what its stream produced, each receive waits for its "
    "readers",
    "[.][stress]") {
  // Each rank fills its buffer (behind a delay) and sends it right twice with a refill between;
  // the receiver adds the first message into an accumulator (behind a delay, not waited for)
  // and at once receives the second into the same buffer.
  const int ranks = stress_ranks();
  constexpr std::size_t n = std::size_t{1} << 20;
  std::vector<int> acc_right(static_cast<std::size_t>(ranks), 0),
      last_right(static_cast<std::size_t>(ranks), 0);
  run_in_process(
      ranks,
      [&](Comm& comm) {
        const int me = comm.rank(), right = (me + 1) % ranks, left = (me + ranks - 1) % ranks;
        Buffer<float> out = comm.alloc<float>(n, Category::data);
        Buffer<float> in = comm.alloc<float>(n, Category::data);
        Buffer<float> acc = comm.alloc<float>(n, Category::data);  // zeroed
        cuda_delay(delay_us());
        ops::fill(out.view(), static_cast<float>(me + 1));
        Request s1 = comm.isend(View<const float>(out.view()), right, 1);
        Request r1 = comm.irecv(in.view(), left, 1);
        comm.wait(s1);
        comm.wait(r1);
        cuda_delay(delay_us());
        ops::fill(out.view(), static_cast<float>(100 + me));  // the buffer is free after wait
        cuda_delay(delay_us());
        ops::add(acc.view(), View<const float>(in.view()));  // still reading `in` ...
        Request r2 = comm.irecv(in.view(), left, 2);         // ... when its next receive posts
        Request s2 = comm.isend(View<const float>(out.view()), right, 2);
        comm.wait(r2);
        comm.wait(s2);
        const auto a = to_host(acc.view());
        const auto l = to_host(in.view());
        acc_right[static_cast<std::size_t>(me)] = std::all_of(
            a.begin(), a.end(), [&](float x) { return x == static_cast<float>(left + 1); });
        last_right[static_cast<std::size_t>(me)] = std::all_of(
            l.begin(), l.end(), [&](float x) { return x == static_cast<float>(100 + left); });
      },
      60, Device::cuda);
  for (int r = 0; r < ranks; ++r) {
    INFO("rank " << r << " of " << ranks);
    CHECK(acc_right[static_cast<std::size_t>(r)] == 1);
    CHECK(last_right[static_cast<std::size_t>(r)] == 1);
  }
}

TEST_CASE("stress: every all-reduce algorithm on many ranks sharing the GPU is exact",
          "[.][stress]") {
  const int ranks = stress_ranks();
  constexpr std::size_t n = 100003;  // not a multiple of the rank count: uneven chunks
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const auto in = input_of(r, n);
    for (std::size_t i = 0; i < n; ++i) want[i] += in[i];
  }
  for (coll::AllReduceAlgo algo : coll::all_reduce_algos()) {
    if (algo == coll::AllReduceAlgo::library) continue;  // NCCL refuses ranks sharing a GPU
    std::vector<int> right(static_cast<std::size_t>(ranks), 0);
    run_in_process(
        ranks,
        [&](Comm& comm) {
          Buffer<float> data = comm.alloc_from(input_of(comm.rank(), n), Category::grads);
          cuda_delay(delay_us() * (comm.rank() % 3));  // ranks out of step
          ops::scale(data.view(), 1.0f);               // produced on the stream, behind the delay
          coll::all_reduce(comm, data.view(), algo);
          right[static_cast<std::size_t>(comm.rank())] = to_host(data.view()) == want;
        },
        60, Device::cuda);
    for (int r = 0; r < ranks; ++r) {
      INFO(coll::to_string(algo) << ", rank " << r << " of " << ranks);
      CHECK(right[static_cast<std::size_t>(r)] == 1);
    }
  }
}
