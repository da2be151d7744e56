// baseline_gloo.cpp — Gloo's own collectives on host memory, for runs under distlab's launcher
// (--transport gloo): what torch.distributed's gloo backend calls. Each runs on the Gloo context
// of the Comm's group (GlooTransport::library_context) and returns when its result is in place.
// Gloo's scatter and gather take equal blocks: where N does not divide the length, the blocks
// travel padded to the largest and are unpadded here (the call's name says so).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/partition.hpp"
#include "core/collectives/baseline_detail.hpp"

#ifdef DISTLAB_HAVE_GLOO
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include "core/transport/gloo.hpp"
#endif

namespace distlab::baseline {

const std::vector<std::string>& gloo_all_reduce_algorithms() {
  // Not Gloo's AllreduceRingChunked class: run beside gloo::allreduce on 4 processes here, one
  // of the two stopped for good within a few iterations (every rank waiting in gloo::allreduce);
  // gloo::allreduce's own ring is the library row.
  static const std::vector<std::string> names = {"bcube", "halving_doubling"};
  return names;
}

}  // namespace distlab::baseline

namespace distlab::baseline::detail {

bool gloo_run(const Comm& comm) {
  return comm.world().mode == Mode::gloo;
}

#ifndef DISTLAB_HAVE_GLOO

#define DL_NO_GLOO DL_FAIL("Gloo is not in this build")
std::string gloo_scatter(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_GLOO;
}
std::string gloo_gather(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_GLOO;
}
std::string gloo_broadcast(Comm&, void*, std::size_t, DType, int) {
  DL_NO_GLOO;
}
std::string gloo_reduce(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_GLOO;
}
std::string gloo_all_gather(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_GLOO;
}
std::string gloo_reduce_scatter(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_GLOO;
}
std::string gloo_all_reduce(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_GLOO;
}
std::string gloo_all_to_all(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_GLOO;
}
}  // namespace distlab::baseline::detail
namespace distlab::baseline {
std::string gloo_all_reduce_as(Comm&, const std::string&, const void*, void*, std::size_t, DType) {
  DL_NO_GLOO;
}
}  // namespace distlab::baseline
namespace distlab::baseline::detail {

#else

namespace {

// Calls f.template operator()<T>() with the C++ type Gloo moves or sums the elements as; f16 and
// bf16 are moved as 2-byte words and never summed (Gloo's sums of them are not these formats').
template <class F>
void with_type(DType t, bool reduce, F&& f) {
  switch (t) {
    case DType::u8:
      return f.template operator()<std::uint8_t>();
    case DType::i32:
      return f.template operator()<std::int32_t>();
    case DType::i64:
      return f.template operator()<std::int64_t>();
    case DType::f32:
      return f.template operator()<float>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::f16:
    case DType::bf16:
      DL_CHECK(!reduce, "distlab does not ask Gloo to sum {} elements; compare in f32",
               to_string(t));
      return f.template operator()<std::uint16_t>();
  }
}

template <class T>
void (*sum_of())(void*, const void*, const void*, size_t) {
  return static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<T>);
}

GlooTransport& gloo_of(Comm& comm) {
  GlooTransport* g = comm.transport().gloo_transport();
  DL_CHECK(g != nullptr, "Gloo's collectives need the Gloo transport (--transport gloo)");
  return *g;
}

// Runs `call` on the group's Gloo context as a wait the deadlock check sees.
template <class F>
void on_group(Comm& comm, const char* what, F&& call) {
  GlooTransport& g = gloo_of(comm);
  const auto ctx = g.library_context(comm.context());
  g.library_call(what, [&] { call(ctx); });
}

template <class T>
T* typed(const void* p) {
  return static_cast<T*>(const_cast<void*>(p));
}

// gloo::allreduce with the algorithm given, in place when send is recv.
template <class T>
void options_all_reduce(const std::shared_ptr<gloo::Context>& ctx, const void* send, void* recv,
                        std::size_t length, gloo::AllreduceOptions::Algorithm algorithm) {
  gloo::AllreduceOptions opts(ctx);
  if (send != recv) opts.setInput(typed<T>(send), length);
  opts.setOutput(typed<T>(recv), length);
  opts.setReduceFunction(sum_of<T>());
  opts.setAlgorithm(algorithm);
  gloo::allreduce(opts);
}

}  // namespace

std::string gloo_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype) {
  with_type(dtype, true, [&]<class T>() {
    on_group(comm, "gloo::allreduce", [&](const auto& ctx) {
      options_all_reduce<T>(ctx, send, recv, length, gloo::AllreduceOptions::Algorithm::RING);
    });
  });
  return "gloo::allreduce";
}

std::string gloo_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root) {
  with_type(dtype, false, [&]<class T>() {
    on_group(comm, "gloo::broadcast", [&](const auto& ctx) {
      gloo::BroadcastOptions opts(ctx);
      opts.setOutput(typed<T>(data), length);
      opts.setRoot(root);
      gloo::broadcast(opts);
    });
  });
  return "gloo::broadcast";
}

std::string gloo_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root) {
  with_type(dtype, true, [&]<class T>() {
    // Every rank gives an output: off the root it is scratch Gloo reduces into along the way.
    std::vector<T> scratch(comm.rank() == root ? 0 : length);
    on_group(comm, "gloo::reduce", [&](const auto& ctx) {
      gloo::ReduceOptions opts(ctx);
      T* out = comm.rank() == root ? typed<T>(recv) : scratch.data();
      if (send != out) opts.setInput(typed<T>(send), length);
      opts.setOutput(out, length);
      opts.setRoot(root);
      opts.setReduceFunction(sum_of<T>());
      gloo::reduce(opts);
    });
  });
  return "gloo::reduce";
}

std::string gloo_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype) {
  const Partition part{length, comm.size()};
  const bool equal = length % std::size_t(comm.size()) == 0;
  with_type(dtype, false, [&]<class T>() {
    const std::size_t mine = part.size(comm.rank());
    std::vector<T> input(typed<T>(send), typed<T>(send) + mine);  // send may be recv's own chunk
    on_group(comm, equal ? "gloo::allgather" : "gloo::allgatherv", [&](const auto& ctx) {
      if (equal) {
        gloo::AllgatherOptions opts(ctx);
        opts.setInput(input.data(), mine);
        opts.setOutput(typed<T>(recv), length);
        gloo::allgather(opts);
        return;
      }
      std::vector<size_t> counts;
      for (int r = 0; r < comm.size(); ++r) counts.push_back(part.size(r));
      gloo::AllgathervOptions opts(ctx);
      opts.setInput(input.data(), mine);
      opts.setOutput(typed<T>(recv), counts);
      gloo::allgatherv(opts);
    });
  });
  return equal ? "gloo::allgather" : "gloo::allgatherv";
}

std::string gloo_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                                DType dtype) {
  // Gloo's options API has no reduce-scatter, and its halving-doubling class leaves the blocks
  // in another order than rank order (r1 and r2 swap on 4 ranks): the whole sum by
  // gloo::allreduce, then this rank's block, as PyTorch's gloo backend long did.
  const Partition part{length, comm.size()};
  with_type(dtype, true, [&]<class T>() {
    std::vector<T> whole(length);
    on_group(comm, "gloo::allreduce", [&](const auto& ctx) {
      options_all_reduce<T>(ctx, send, whole.data(), length,
                            gloo::AllreduceOptions::Algorithm::RING);
    });
    std::memcpy(recv, whole.data() + part.begin(comm.rank()), part.size(comm.rank()) * sizeof(T));
  });
  return "gloo::allreduce (its chunk)";
}

std::string gloo_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                         int root) {
  const Partition part{length, comm.size()};
  const bool equal = length % std::size_t(comm.size()) == 0;
  with_type(dtype, false, [&]<class T>() {
    const std::size_t block = part.size(0);  // the largest
    std::vector<std::vector<T> > blocks;     // the root's, padded to `block`
    std::vector<T*> inputs;
    if (comm.rank() == root)
      for (int r = 0; r < comm.size(); ++r) {
        const T* from = typed<T>(send) + part.begin(r);
        blocks.emplace_back(from, from + part.size(r)).resize(block);
        inputs.push_back(blocks.back().data());
      }
    std::vector<T> out(block);
    on_group(comm, "gloo::scatter", [&](const auto& ctx) {
      gloo::ScatterOptions opts(ctx);
      if (comm.rank() == root) opts.setInputs(inputs, block);
      opts.setOutput(out.data(), block);
      opts.setRoot(root);
      gloo::scatter(opts);
    });
    std::copy_n(out.data(), part.size(comm.rank()), typed<T>(recv));
  });
  return equal ? "gloo::scatter" : "gloo::scatter (padded blocks)";
}

std::string gloo_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root) {
  const Partition part{length, comm.size()};
  const bool equal = length % std::size_t(comm.size()) == 0;
  with_type(dtype, false, [&]<class T>() {
    const std::size_t block = part.size(0);
    std::vector<T> in(typed<T>(send), typed<T>(send) + part.size(comm.rank()));
    in.resize(block);
    std::vector<T> all(comm.rank() == root ? block * std::size_t(comm.size()) : 0);
    on_group(comm, "gloo::gather", [&](const auto& ctx) {
      gloo::GatherOptions opts(ctx);
      opts.setInput(in.data(), block);
      if (comm.rank() == root) opts.setOutput(all.data(), all.size());
      opts.setRoot(root);
      gloo::gather(opts);
    });
    if (comm.rank() == root)
      for (int r = 0; r < comm.size(); ++r)
        std::copy_n(all.data() + std::size_t(r) * block, part.size(r),
                    typed<T>(recv) + part.begin(r));
  });
  return equal ? "gloo::gather" : "gloo::gather (padded blocks)";
}

std::string gloo_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                            DType dtype) {
  with_type(dtype, false, [&]<class T>() {
    on_group(comm, "gloo::alltoall", [&](const auto& ctx) {
      gloo::AlltoallOptions opts(ctx);
      opts.setInput(typed<T>(send), length);
      opts.setOutput(typed<T>(recv), length);
      gloo::alltoall(opts);
    });
  });
  return "gloo::alltoall";
}

}  // namespace distlab::baseline::detail

namespace distlab::baseline {

std::string gloo_all_reduce_as(Comm& comm, const std::string& algorithm, const void* send,
                               void* recv, std::size_t length, DType dtype) {
  using namespace detail;
  const auto& names = gloo_all_reduce_algorithms();
  DL_CHECK(std::find(names.begin(), names.end(), algorithm) != names.end(),
           "Gloo has no all-reduce '{}' here (bcube, halving_doubling)", algorithm);
  DL_CHECK(comm.device() == Device::cpu && gloo_run(comm),
           "Gloo's all-reduces run under distlab's launcher (--procs N --transport gloo)");
  const std::string call = "gloo::" + algorithm;
  with_type(dtype, true, [&]<class T>() {
    on_group(comm, call.c_str(), [&](const auto& ctx) {
      if (algorithm == "bcube") {
        options_all_reduce<T>(ctx, send, recv, length, gloo::AllreduceOptions::Algorithm::BCUBE);
        return;
      }
      if (send != recv) std::memcpy(recv, send, length * sizeof(T));
      gloo::AllreduceHalvingDoubling<T> a(ctx, std::vector<T*>{typed<T>(recv)}, int(length));
      a.run();
    });
  });
  return call;
}

}  // namespace distlab::baseline

namespace distlab::baseline::detail {

#endif

}  // namespace distlab::baseline::detail
