// test_transport_cuda.cpp — device buffers through the in-process transport, on real GPUs.
//
// Rank worlds are built as lessons build them (run_in_process with Device::cuda: rank r bound
// to GPU r % count with its own streams), so with one GPU every rank shares it and with
// several each gets its own. Rank bodies only record; the test's thread asserts after the join
// (Catch's assertions are not thread-safe).
#include <cuda_runtime_api.h>
#include "catch.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/baseline.hpp"
#include "core/device/allocator.hpp"
#include "core/device/cuda_context.hpp"
#include "core/ops/ops.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;
using Catch::Contains;

namespace {

// Rank r's input: small integers, so every sum is exact in f32 and the GPU and CPU results
// must agree to the bit whatever the order of the additions.
std::vector<float> input_of(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((rank + 1) * 100 + static_cast<int>(i % 97));
  return v;
}

// Runs `algo` on `ranks` ranks of `device` and returns every rank's result.
std::vector<std::vector<float>> all_reduce_on(Device device, int ranks, coll::AllReduceAlgo algo,
                                              std::size_t n) {
  std::vector<std::vector<float>> out(static_cast<std::size_t>(ranks));
  run_in_process(
      ranks,
      [&](Comm& comm) {
        Buffer<float> data = comm.alloc<float>(n, Category::grads);
        from_host(data.view(), input_of(comm.rank(), n));
        coll::all_reduce(comm, data.view(), algo);
        out[static_cast<std::size_t>(comm.rank())] = to_host(data.view());
      },
      30, device);
  return out;
}

}  // namespace

TEST_CASE("cuda threads: device buffers go around a ring, on one GPU or several",
          "[cuda][transport]") {
  // Each rank sends its buffer right and receives from the left; rank r must hold r-1's data.
  constexpr int kRanks = 4;
  constexpr std::size_t n = 1 << 16;
  std::vector<std::vector<float>> got(kRanks);
  std::vector<int> gpu(kRanks, -1);
  run_in_process(
      kRanks,
      [&](Comm& comm) {
        const int me = comm.rank(), right = (me + 1) % kRanks, left = (me + kRanks - 1) % kRanks;
        gpu[static_cast<std::size_t>(me)] = cuda_rank().device;
        Buffer<float> mine = comm.alloc<float>(n, Category::data);
        Buffer<float> theirs = comm.alloc<float>(n, Category::data);
        from_host(mine.view(), input_of(me, n));
        comm.sendrecv(View<const float>(mine.view()), right, theirs.view(), left, 1);
        got[static_cast<std::size_t>(me)] = to_host(theirs.view());
      },
      30, Device::cuda);
  const int count = cuda_device_count();
  for (int r = 0; r < kRanks; ++r) {
    CHECK(gpu[static_cast<std::size_t>(r)] == r % count);  // rank r on GPU r % count
    CHECK(got[static_cast<std::size_t>(r)] == input_of((r + kRanks - 1) % kRanks, n));
  }
}

TEST_CASE("cuda threads: every all-reduce algorithm on device buffers equals the CPU result",
          "[cuda][all_reduce]") {
  constexpr std::size_t n = 10007;  // not a multiple of the rank count: uneven chunks
  for (int ranks : {2, 3, 4}) {
    for (coll::AllReduceAlgo algo : coll::all_reduce_algos()) {
      if (algo == coll::AllReduceAlgo::library) continue;  // its own test below
      INFO(coll::to_string(algo) << " on " << ranks << " ranks");
      const auto cpu = all_reduce_on(Device::cpu, ranks, algo, n);
      const auto gpu = all_reduce_on(Device::cuda, ranks, algo, n);
      for (int r = 0; r < ranks; ++r)
        CHECK(gpu[static_cast<std::size_t>(r)] == cpu[static_cast<std::size_t>(r)]);
    }
  }
}

TEST_CASE("cuda threads: every all-reduce on split groups of device buffers sums its members only",
          "[cuda][all_reduce]") {
  // 6 ranks in groups r % 2 (a mesh's tp groups of 3), keys backwards: each group's sum is its
  // members' inputs, exact in f32.
  constexpr int kRanks = 6;
  constexpr std::size_t n = 4099;
  for (coll::AllReduceAlgo algo : coll::all_reduce_algos()) {
    if (algo == coll::AllReduceAlgo::library) continue;
    INFO(coll::to_string(algo));
    std::vector<std::vector<float>> got(kRanks);
    run_in_process(
        kRanks,
        [&](Comm& world) {
          Comm group = world.split(world.rank() % 2, kRanks - world.rank(), "tp");
          Buffer<float> data = group.alloc<float>(n, Category::grads);
          from_host(data.view(), input_of(world.rank(), n));
          coll::all_reduce(group, data.view(), algo);
          got[static_cast<std::size_t>(world.rank())] = to_host(data.view());
        },
        30, Device::cuda);
    for (int r = 0; r < kRanks; ++r) {
      std::vector<float> want(n, 0.0f);
      for (int k = r % 2; k < kRanks; k += 2) {
        const auto in = input_of(k, n);
        for (std::size_t i = 0; i < n; ++i) want[i] += in[i];
      }
      CHECK(got[static_cast<std::size_t>(r)] == want);
    }
  }
}

TEST_CASE("cuda threads: a send takes the data its stream produced, the buffer is free after wait",
          "[cuda][ordering]") {
  // r0 fills its buffer with a kernel and posts the send at once, without synchronizing: the
  // copy must wait for the kernel. After wait, r0 overwrites the buffer at once and sends it
  // again: the first message must not see the second value. Large buffers make a missing
  // dependency show.
  constexpr std::size_t n = std::size_t{1} << 24;  // 64 MiB of f32
  std::vector<float> first, second;
  run_in_process(
      2,
      [&](Comm& comm) {
        Buffer<float> buf = comm.alloc<float>(n, Category::data);
        if (comm.rank() == 0) {
          ops::fill(buf.view(), 1.0f);
          comm.send(View<const float>(buf.view()), 1, 7);
          ops::fill(buf.view(), 2.0f);
          comm.send(View<const float>(buf.view()), 1, 8);
        } else {
          Buffer<float> other = comm.alloc<float>(n, Category::data);
          comm.recv(buf.view(), 0, 7);
          comm.recv(other.view(), 0, 8);
          first = to_host(buf.view());
          second = to_host(other.view());
        }
      },
      30, Device::cuda);
  REQUIRE(first.size() == n);
  CHECK(std::all_of(first.begin(), first.end(), [](float x) { return x == 1.0f; }));
  CHECK(std::all_of(second.begin(), second.end(), [](float x) { return x == 2.0f; }));
}

TEST_CASE("cuda threads: a receive waits for the kernels still reading its buffer",
          "[cuda][ordering]") {
  // r1 adds its receive buffer into an accumulator (a kernel, not waited for) and at once posts
  // the next receive into the same buffer: the copy must wait for the add, so the accumulator
  // holds exactly the first message.
  constexpr std::size_t n = std::size_t{1} << 24;
  std::vector<float> acc_host, last;
  run_in_process(
      2,
      [&](Comm& comm) {
        Buffer<float> buf = comm.alloc<float>(n, Category::data);
        if (comm.rank() == 0) {
          ops::fill(buf.view(), 1.0f);
          comm.send(View<const float>(buf.view()), 1, 1);
          ops::fill(buf.view(), 5.0f);
          comm.send(View<const float>(buf.view()), 1, 2);
        } else {
          Buffer<float> acc = comm.alloc<float>(n, Category::data);  // zeroed
          comm.recv(buf.view(), 0, 1);
          ops::add(acc.view(), View<const float>(buf.view()));
          comm.recv(buf.view(), 0, 2);
          acc_host = to_host(acc.view());
          last = to_host(buf.view());
        }
      },
      30, Device::cuda);
  REQUIRE(acc_host.size() == n);
  CHECK(std::all_of(acc_host.begin(), acc_host.end(), [](float x) { return x == 1.0f; }));
  CHECK(std::all_of(last.begin(), last.end(), [](float x) { return x == 5.0f; }));
}

TEST_CASE("cuda threads: host memory at one end of a message works too", "[cuda][transport]") {
  constexpr std::size_t n = 1000;
  std::vector<float> on_host(n, 0.0f), back;
  run_in_process(
      2,
      [&](Comm& comm) {
        Buffer<float> dev = comm.alloc<float>(n, Category::data);
        const View<float> host{on_host.data(), n, Device::cpu};
        if (comm.rank() == 0) {
          from_host(dev.view(), input_of(0, n));
          comm.send(View<const float>(dev.view()), 1, 1);  // GPU -> host
          comm.recv(dev.view(), 1, 2);                     // host -> GPU
          back = to_host(dev.view());
        } else {
          comm.recv(host, 0, 1);
          for (float& x : on_host) x += 1.0f;
          comm.send(View<const float>(host), 0, 2);
        }
      },
      30, Device::cuda);
  std::vector<float> want = input_of(0, n);
  for (float& x : want) x += 1.0f;
  CHECK(back == want);
}

TEST_CASE("cuda threads: empty messages between device buffers complete", "[cuda][transport]") {
  // An uneven split leaves some ranks an empty chunk: a message of no bytes whose device
  // pointers are null (cudaMalloc of 0 bytes) still matches, orders and completes.
  auto empty = [] {
    run_in_process(
        2,
        [](Comm& comm) {
          Buffer<float> none = comm.alloc<float>(0, Category::data);
          if (comm.rank() == 0)
            comm.send(View<const float>(none.view()), 1, 3);
          else
            comm.recv(none.view(), 0, 3);
        },
        30, Device::cuda);
  };
  CHECK_NOTHROW(empty());
}

TEST_CASE("cuda context: a thread binds once, and unbinding releases the binding",
          "[cuda][context]") {
  cuda_bind_rank(0);
  CHECK(cuda_rank().device == 0);
  CHECK(cuda_rank().stream != nullptr);
  CHECK(cuda_rank().epoch_event != nullptr);
  CHECK_THROWS_WITH(cuda_bind_rank(1), Contains("bound to GPU 0 already"));
  CHECK(cuda_rank().device == 0);  // the refused bind left the first one as it was
  cuda_unbind_rank();
  CHECK(cuda_rank().device == -1);
  CHECK(cuda_rank().stream == nullptr);
  cuda_bind_rank(0);  // and the thread can bind again
  CHECK(cuda_rank().device == 0);
  cuda_unbind_rank();
}

TEST_CASE("cuda threads: mismatched sizes and deadlocks on the GPU are reported as on the CPU",
          "[cuda][transport]") {
  auto mismatch = [] {
    run_in_process(
        2,
        [](Comm& comm) {
          Buffer<float> a = comm.alloc<float>(8, Category::data);
          if (comm.rank() == 0)
            comm.send(View<const float>(a.view()), 1, 1);
          else
            comm.recv(a.sub(0, 4), 0, 1);
        },
        30, Device::cuda);
  };
  CHECK_THROWS_WITH(mismatch(), Contains("32 B of f32") && Contains("16 B of f32"));
  auto deadlock = [] {
    run_in_process(
        2,
        [](Comm& comm) {
          Buffer<float> a = comm.alloc<float>(8, Category::data);
          comm.recv(a.view(), 1 - comm.rank(), 1);  // both receive first
        },
        0.5, Device::cuda);
  };
  CHECK_THROWS_WITH(
      deadlock(), Contains("deadlock") && Contains("r0 waits in recv from r1 (tag 1, 32 B, f32)"));
}

TEST_CASE("cuda threads: the trace shows when the GPU copied and added", "[cuda][trace]") {
  constexpr int kRanks = 3;
  const RunResult run = run_in_process(
      kRanks,
      [](Comm& comm) {
        Buffer<float> data = comm.alloc<float>(1 << 20, Category::grads);
        from_host(data.view(), input_of(comm.rank(), 1 << 20));
        coll::all_reduce_ring(comm, data.view());
      },
      30, Device::cuda);
  for (const RankLog& log : run.logs) {
    INFO("rank " << log.rank);
    std::vector<const SpanEvent*> copies, adds, recvs;
    for (const auto& e : log.spans) {
      if (e.lane == Lane::gpu && e.name.rfind("copy r", 0) == 0) copies.push_back(&e);
      if (e.lane == Lane::gpu && e.name == "add") adds.push_back(&e);
      if (e.kind == SpanEvent::Kind::recv) recvs.push_back(&e);
    }
    // N-1 steps: one copy into this rank and one add per step, each on the gpu lane.
    CHECK(copies.size() == kRanks - 1);
    CHECK(adds.size() == kRanks - 1);
    REQUIRE(recvs.size() == copies.size());
    std::sort(copies.begin(), copies.end(), [](auto* a, auto* b) { return a->t0 < b->t0; });
    std::sort(recvs.begin(), recvs.end(), [](auto* a, auto* b) { return a->t0 < b->t0; });
    for (std::size_t k = 0; k < copies.size(); ++k) {
      // On the host clock, within the calibration's error (microseconds): the copy ran while
      // the receive was open, and the host saw it end after the GPU did.
      constexpr double kSlackUs = 100;
      CHECK(copies[k]->t1 >= copies[k]->t0);
      CHECK(copies[k]->t0 >= recvs[k]->t0 - kSlackUs);
      CHECK(copies[k]->t1 <= recvs[k]->t1 + kSlackUs);
      CHECK(copies[k]->t0 >= log.t_start - kSlackUs);
      CHECK(copies[k]->t1 <= log.t_end + kSlackUs);
    }
  }
}

TEST_CASE("cuda threads: the library all-reduce is NCCL's when every rank has a GPU",
          "[cuda][library]") {
  const int gpus = cuda_device_count();
  const int ranks = std::min(gpus, 4);
  constexpr std::size_t n = 4096;
  std::vector<std::vector<float>> got(static_cast<std::size_t>(ranks));
  std::vector<std::string> calls(static_cast<std::size_t>(ranks));
  run_in_process(
      ranks,
      [&](Comm& comm) {
        Buffer<float> in = comm.alloc<float>(n, Category::data);
        Buffer<float> out = comm.alloc<float>(n, Category::data);
        from_host(in.view(), input_of(comm.rank(), n));
        calls[static_cast<std::size_t>(comm.rank())] =
            baseline::all_reduce(comm, in.data(), out.data(), n, DType::f32);
        coll::all_reduce(comm, in.view(),
                         coll::AllReduceAlgo::library);  // in place, through the registry
        got[static_cast<std::size_t>(comm.rank())] = to_host(out.view());
        if (to_host(in.view()) != got[static_cast<std::size_t>(comm.rank())])
          calls[static_cast<std::size_t>(comm.rank())] += " (in place differs)";
      },
      60, Device::cuda);
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < ranks; ++r) {
    const auto in = input_of(r, n);
    for (std::size_t i = 0; i < n; ++i) want[i] += in[i];
  }
  for (int r = 0; r < ranks; ++r) {
    CHECK(calls[static_cast<std::size_t>(r)] == "ncclAllReduce");
    CHECK(got[static_cast<std::size_t>(r)] == want);
  }
}

TEST_CASE("cuda threads: the library collectives refuse two ranks on one GPU with a sentence",
          "[cuda][library]") {
  const int gpus = cuda_device_count();
  std::string why;
  bool available = true;
  run_in_process(
      gpus + 1,
      [&](Comm& comm) {
        if (comm.rank() != 0) return;
        available = baseline::available(comm);
        why = baseline::unavailable_reason(comm);
      },
      30, Device::cuda);
  CHECK_FALSE(available);
  CHECK_THAT(why, Contains("NCCL refuses two ranks") &&
                      Contains(std::to_string(gpus + 1) + " ranks share"));
}

TEST_CASE(
    "cuda context: a freed device block is the rank's next block of that size, and goes back at "
    "unbind",
    "[cuda][context]") {
  // cudaFree synchronizes the device, so ranks sharing a GPU would wait on each other at every
  // freed workspace: the rank keeps its blocks (allocator.hpp) and gives them back at unbind.
  constexpr std::size_t n = std::size_t{1} << 24;  // 64 MiB
  const void* first = nullptr;
  const void* again = nullptr;
  const void* other_size = nullptr;
  std::size_t free_before = 0, free_after = 0, total = 0;
  cudaMemGetInfo(&free_before, &total);
  run_in_process(
      1,
      [&](Comm& comm) {
        {
          Buffer<float> a = comm.alloc<float>(n, Category::data);
          first = a.data();
        }
        Buffer<float> b = comm.alloc<float>(n, Category::data);
        again = b.data();
        Buffer<float> c = comm.alloc<float>(n / 2, Category::data);
        other_size = c.data();
        ops::fill(b.view(), 3.0f);  // a reused block is zeroed and usable like a fresh one
        const auto h = to_host(b.view());
        if (!std::all_of(h.begin(), h.end(), [](float x) { return x == 3.0f; })) again = nullptr;
      },
      30, Device::cuda);
  cudaMemGetInfo(&free_after, &total);
  CHECK(again == first);
  CHECK(other_size != first);
  // Unbinding gave every block back: what is free now is what was free before, give or take
  // what another process on the GPU did meanwhile (nothing, on the check's machine).
  constexpr std::size_t kSlack = std::size_t{16} << 20;
  CHECK(free_after + kSlack >= free_before);
}
