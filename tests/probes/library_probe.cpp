// library_probe — every library collective (MPI's, or NCCL's with --device cuda) in place and
// out of place, against values worked out on the host. A test program, not a lesson.
//
// In place is spelled as MPI and NCCL spell it (baseline.hpp): the rank's own chunk already in
// its place. The calls must then see MPI_IN_PLACE (or NCCL's aliasing rule), never one buffer
// passed as two: MPI forbids aliased send and receive buffers and may sum a rank's input twice.
// Inputs are small integers, so every sum is exact and the comparison is bit for bit.
//
//   mpiexec -n 3 library_probe --size 7               MPI's calls on host memory
//   mpiexec -n 2 library_probe --device cuda          NCCL (a GPU per rank) or staged MPI
#include <fmt/format.h>

#include <vector>

#include "core/base/partition.hpp"
#include "core/collectives/all_reduce.hpp"
#include "core/collectives/baseline.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;

namespace {

float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * 10 + static_cast<int>(i % 7));
}

std::vector<float> input(int rank, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(rank, i);
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  Lesson lesson({"97", "library_probe", "the library collectives in place and out of place", 3, 7});
  lesson.set_algorithm("library");
  const auto& opt = lesson.options();

  return lesson.run(argc, argv, [&](Comm& comm) {
    if (!baseline::available(comm)) {
      comm.check("the library collectives are available here", false,
                 baseline::unavailable_reason(comm));
      return;
    }
    const int n = comm.size(), me = comm.rank(),
              root = n - 1;  // a root off 0: its chunk is not at the front
    const std::size_t L = opt.size;
    const Partition part{L, n};
    const std::size_t mine = part.begin(me), root_at = part.begin(root);
    std::vector<float> sum(L, 0.0f);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = 0; i < L; ++i) sum[i] += value(r, i);
    // The whole buffer, each chunk from its own rank (what gather and all-gather assemble).
    std::vector<float> gathered(L);
    for (int r = 0; r < n; ++r)
      for (std::size_t i = part.begin(r); i < part.end(r); ++i) gathered[i] = value(r, i);
    auto slice = [](const std::vector<float>& v, std::size_t at, std::size_t count) {
      return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(at),
                                v.begin() + static_cast<std::ptrdiff_t>(at + count));
    };
    auto expect = [&](const std::string& what, const std::vector<float>& got,
                      const std::vector<float>& want) {
      std::vector<float> g = got;
      if (comm.inject_fault() && !g.empty()) g[0] += 1.0f;
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < want.size(); ++i) wrong += i >= g.size() || g[i] != want[i];
      comm.check(what, wrong == 0 && g.size() == want.size(),
                 fmt::format("{} of {} elements wrong", wrong, want.size()));
    };
    const DType t = DType::f32;

    for (bool in_place : {false, true}) {
      const char* how = in_place ? "in place" : "out of place";
      {  // all-reduce: send == recv
        Buffer<float> a = comm.alloc_from(input(me, L), Category::data);
        Buffer<float> b = comm.alloc<float>(L, Category::data);
        const std::string call =
            baseline::all_reduce(comm, a.data(), in_place ? a.data() : b.data(), L, t);
        expect(fmt::format("{} {}", call, how), to_host(in_place ? a.view() : b.view()), sum);
      }
      {  // reduce: send == recv on the root
        Buffer<float> a = comm.alloc_from(input(me, L), Category::data);
        Buffer<float> b = comm.alloc<float>(L, Category::data);
        const std::string call =
            baseline::reduce(comm, a.data(), in_place ? a.data() : b.data(), L, t, root);
        if (me == root)
          expect(fmt::format("{} {}", call, how), to_host(in_place ? a.view() : b.view()), sum);
      }
      {  // all-gather: send is the rank's chunk of recv
        Buffer<float> whole = comm.alloc<float>(L, Category::data);
        Buffer<float> chunk =
            comm.alloc_from(slice(input(me, L), mine, part.size(me)), Category::data);
        if (in_place)
          from_host(whole.view().sub(mine, part.size(me)),
                    slice(input(me, L), mine, part.size(me)));
        const float* send = in_place ? whole.data() + mine : chunk.data();
        const std::string call = baseline::all_gather(comm, send, whole.data(), L, t);
        expect(fmt::format("{} {}", call, how), to_host(whole.view()), gathered);
      }
      {  // reduce-scatter: recv is the rank's chunk of send
        Buffer<float> a = comm.alloc_from(input(me, L), Category::data);
        Buffer<float> b = comm.alloc<float>(part.size(me), Category::data);
        float* recv = in_place ? a.data() + mine : b.data();
        const std::string call = baseline::reduce_scatter(comm, a.data(), recv, L, t);
        const auto got =
            in_place ? slice(to_host(a.view()), mine, part.size(me)) : to_host(b.view());
        expect(fmt::format("{} {}", call, how), got, slice(sum, mine, part.size(me)));
      }
      {  // scatter from the root: recv is the root's chunk of send there
        Buffer<float> whole = comm.alloc_from(input(root, L), Category::data);
        Buffer<float> chunk = comm.alloc<float>(part.size(me), Category::data);
        float* recv = in_place && me == root ? whole.data() + root_at : chunk.data();
        const std::string call =
            baseline::scatter(comm, me == root ? whole.data() : nullptr, recv, L, t, root);
        const auto got = recv == chunk.data()
                             ? to_host(chunk.view())
                             : slice(to_host(whole.view()), root_at, part.size(me));
        expect(fmt::format("{} {}", call, how), got, slice(input(root, L), mine, part.size(me)));
      }
      {  // gather to the root: send is the root's chunk of recv there
        Buffer<float> whole = comm.alloc<float>(L, Category::data);
        Buffer<float> chunk =
            comm.alloc_from(slice(input(me, L), mine, part.size(me)), Category::data);
        if (in_place && me == root)
          from_host(whole.view().sub(root_at, part.size(me)),
                    slice(input(me, L), mine, part.size(me)));
        const float* send = in_place && me == root ? whole.data() + root_at : chunk.data();
        const std::string call =
            baseline::gather(comm, send, me == root ? whole.data() : nullptr, L, t, root);
        if (me == root) expect(fmt::format("{} {}", call, how), to_host(whole.view()), gathered);
      }
    }
    {  // and distlab's own ring beside the library's, on the same input: the trace's messages
      Buffer<float> a = comm.alloc_from(input(me, L), Category::data);
      coll::all_reduce(comm, a.view(), coll::AllReduceAlgo::ring);
      expect("ring all-reduce beside the library's", to_host(a.view()), sum);
    }
    comm.say("library collectives, in place and out of place, on {} ranks of {} elements\n", n, L);
  });
}
