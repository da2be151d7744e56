// baseline_gpu.cpp — the library collectives on GPU memory (baseline.hpp): NCCL's calls, or MPI's
// on host copies when the staged transport carries the run.
//
// Every call is enqueued on the rank's stream (after the kernels that produced its input),
// bracketed by a DeviceWork for the trace's gpu lane, and waited for by polling (the deadlock
// timeout applies), so that it returns with the result in place, like the MPI calls.
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "core/base/check.hpp"
#include "core/base/partition.hpp"
#include "core/collectives/baseline_detail.hpp"
#include "core/device/allocator.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"
#include "core/transport/threads.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif
#ifdef DISTLAB_HAVE_NCCL
#include <nccl.h>

#include "core/transport/nccl_calls.hpp"
#ifdef DISTLAB_HAVE_MPI
#include "core/transport/nccl.hpp"
#endif
#endif

namespace distlab::baseline::detail {

namespace {
thread_local bool t_chunked_forms = false;
}  // namespace

void set_nccl_chunked_forms(bool on) {
  t_chunked_forms = on;
}

#ifndef DISTLAB_HAVE_CUDA

bool gpu_available(const Comm&, std::string* why) {
  if (why) *why = "this build has no CUDA";
  return false;
}
#define DL_NO_CUDA DL_FAIL("GPU library collectives in a build without CUDA")
std::string gpu_scatter(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_CUDA;
}
std::string gpu_gather(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_CUDA;
}
std::string gpu_broadcast(Comm&, void*, std::size_t, DType, int) {
  DL_NO_CUDA;
}
std::string gpu_reduce(Comm&, const void*, void*, std::size_t, DType, int) {
  DL_NO_CUDA;
}
std::string gpu_all_gather(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_CUDA;
}
std::string gpu_reduce_scatter(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_CUDA;
}
std::string gpu_all_reduce(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_CUDA;
}
std::string gpu_all_to_all(Comm&, const void*, void*, std::size_t, DType) {
  DL_NO_CUDA;
}

#else

namespace {

// --- staged: MPI's call on host copies (ranks under mpirun share a GPU) ---------------------

// Copies `send` down, runs `mpi_call(host_send, host_recv)`, copies the result up. Buffers that
// overlap (in place: baseline.hpp) share one host buffer with the same offsets, so that MPI sees
// the same in-place call (MPI_IN_PLACE, baseline.cpp), never one buffer passed as two.
template <class Call>
std::string staged(const void* send, std::size_t send_bytes, void* recv, std::size_t recv_bytes,
                   Call mpi_call) {
  const char* s = static_cast<const char*>(send);
  char* r = static_cast<char*>(recv);
  const bool overlap = send_bytes && recv_bytes && s < r + recv_bytes && r < s + send_bytes;
  std::vector<char> host_send, host_recv;
  char *hs = nullptr, *hr = nullptr;
  if (overlap) {
    const char* lo = std::min<const char*>(s, r);
    const char* hi = std::max<const char*>(s + send_bytes, r + recv_bytes);
    host_recv.resize(static_cast<std::size_t>(hi - lo));
    hs = host_recv.data() + (s - lo);
    hr = host_recv.data() + (r - lo);
  } else {
    host_send.resize(send_bytes);
    host_recv.resize(recv_bytes);
    hs = host_send.data();
    hr = host_recv.data();
  }
  if (send_bytes) device_copy(hs, Device::cpu, send, Device::cuda, send_bytes);
  const std::string name = mpi_call(hs, hr);
  if (recv_bytes) device_copy(recv, Device::cuda, hr, Device::cpu, recv_bytes);
  return name + " (through host memory)";
}

#ifdef DISTLAB_HAVE_NCCL

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::u8:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
  }
  DL_FAIL("no NCCL type for {}", to_string(t));
}

// The communicator a call runs on and the transport whose loop waits for it.
struct Nccl {
  ncclComm_t comm = nullptr;
  Transport* waiter = nullptr;
  std::size_t launched_before = 0;  // queued point-to-point messages launched just before it
};

// In-process ranks: each rank thread makes its own communicator per context (the run's, or a
// split group's), once, from an id the first member makes (NCCL's one-device-per-thread
// pattern). Non-blocking, so that a rank that never arrives is reported, not waited on.
ncclComm_t thread_comm(Comm& comm, ThreadTransport& t) {
  CudaRank& rank = cuda_rank();
  void*& made_comm = rank.nccl[comm.context()];
  if (made_comm) return static_cast<ncclComm_t>(made_comm);
  const std::string key = fmt::format("library NCCL id, context {}", comm.context());
  auto id = std::static_pointer_cast<ncclUniqueId>(t.hub().shared(key, [] {
    auto made = std::make_shared<ncclUniqueId>();
    DL_NCCL_CHECK(ncclGetUniqueId(made.get()));
    return std::shared_ptr<void>(made);
  }));
  // A failed initialisation is aborted inside; a made one is released at unbind
  // (cuda_release_nccl), whatever happens next.
  made_comm = nccl_init_comm(comm.size(), comm.rank(), id.get(), t);
  return static_cast<ncclComm_t>(made_comm);
}

// The NCCL communicator of this run, or none when the staged transport carries it.
bool nccl_of(Comm& comm, Nccl& out) {
#ifdef DISTLAB_HAVE_MPI
  if (auto* t = dynamic_cast<NcclTransport*>(&comm.transport())) {
    // Queued point-to-point first: every rank issues its NCCL calls in one order.
    const std::size_t launched = t->flush();
    out = {static_cast<ncclComm_t>(t->comm(comm.context())), t, launched};
    return true;
  }
#endif
  if (auto* t = dynamic_cast<ThreadTransport*>(&comm.transport())) {
    out = {thread_comm(comm, *t), t};
    return true;
  }
  return false;
}

// Runs `enqueue(comm, stream)` (NCCL calls on the rank's stream), waits for it and puts it on
// the rank's gpu lane as `name`.
template <class Enqueue>
std::string nccl_run(Comm& comm, const Nccl& n, const std::string& name, Enqueue enqueue) {
  const auto stream = static_cast<cudaStream_t>(cuda_stream());
  auto work = std::make_shared<DeviceWork>(name);
  work->record_start(stream);
  enqueue(n.comm, stream);
  work->record_stop(stream);  // after the calls settled: NCCL's work is on the stream by now
  // A hang here whose report names the messages launched before it is the order MPI allows
  // and NCCL does not (nccl.hpp): a peer that posts its receive after this call.
  const std::string what =
      n.launched_before == 0
          ? name
          : fmt::format(
                "{} (launched behind {} queued GPU message{}: each holds this stream until its "
                "partner "
                "is posted, so a peer that posts it only after its own {} hangs both)",
                name, n.launched_before, n.launched_before == 1 ? "" : "s", name);
  nccl_wait(n.comm, *work, what, *n.waiter);
  comm.record_device_work(work);
  return name;
}

// One call, settled: a non-blocking communicator may answer ncclInProgress.
#define DL_NCCL_CALL(n, call) nccl_settle((n).comm, (call), #call, *(n).waiter)

// A group of calls, one launch (nccl.hpp: ended also when a call throws).
template <class Calls>
void nccl_group(const Nccl& n, Calls calls) {
  distlab::nccl_group(n.comm, *n.waiter, calls);
}

// One NCCL call per non-empty chunk r of `part` (call(r, comm, stream)), all in one group and
// one launch: the unequal-chunk forms of the collectives that NCCL gives a single count.
template <class Call>
std::string nccl_per_chunk(Comm& comm, const Nccl& nc, const std::string& name,
                           const Partition& part, Call call) {
  return nccl_run(comm, nc, name, [&](ncclComm_t c, cudaStream_t s) {
    nccl_group(nc, [&] {
      for (int r = 0; r < comm.size(); ++r)
        if (part.size(r) > 0) call(r, c, s);
    });
  });
}

const char* at(const void* base, std::size_t elements, DType t) {
  return static_cast<const char*>(base) + elements * dtype_size(t);
}
char* at(void* base, std::size_t elements, DType t) {
  return static_cast<char*>(base) + elements * dtype_size(t);
}

#endif  // DISTLAB_HAVE_NCCL

std::size_t bytes_of(std::size_t elements, DType t) {
  return elements * dtype_size(t);
}

#ifdef DISTLAB_HAVE_NCCL
// NCCL's one-count calls fit: every rank's chunk is as long (and the tests did not ask for
// the unequal-chunk forms).
bool equal_chunks(std::size_t length, int n) {
  return length % static_cast<std::size_t>(n) == 0 && !t_chunked_forms;
}

// ncclScatter and ncclGather came in NCCL 2.28: an older library (a GPU machine's own) has
// neither, and they go point to point there.
constexpr int kScatterGather = 22800;

// The name of a scatter or gather made of point-to-point calls, and why it is one: unequal
// chunks, or (equal ones) an NCCL without `call`.
std::string point_to_point(const char* what, const char* call, std::size_t length, int n) {
  if (!equal_chunks(length, n)) return fmt::format("ncclSend/ncclRecv ({})", what);
  return fmt::format("ncclSend/ncclRecv ({}; NCCL {} has no {})", what,
                     nccl_version_text(nccl_runtime_version()), call);
}

// Scatter or gather of unequal chunks (NCCL's scatter and gather take one count): the root
// exchanges each rank's chunk of `whole` with it point to point and copies its own.
// to_root: gather (chunks come in to `whole`), else scatter (they go out of it).
std::string nccl_root_chunks(Comm& comm, const Nccl& nc, const std::string& name, bool to_root,
                             void* whole, void* mine, const Partition& part, DType dtype,
                             int root) {
  const int n = comm.size(), me = comm.rank();
  const ncclDataType_t t = nccl_type(dtype);
  return nccl_run(comm, nc, name, [&](ncclComm_t c, cudaStream_t s) {
    if (me == root && part.size(root) > 0) {
      char* slot = at(whole, part.begin(root), dtype);
      DL_CUDA_CHECK(cudaMemcpyAsync(to_root ? slot : mine, to_root ? mine : slot,
                                    bytes_of(part.size(root), dtype), cudaMemcpyDeviceToDevice, s));
    }
    // One peer's chunk: into `buf` when it comes to this rank, out of it when it leaves.
    auto exchange = [&](void* buf, std::size_t count, int peer, bool incoming) {
      if (incoming)
        nccl_check_queued(c, ncclRecv(buf, count, t, peer, c, s), "ncclRecv");
      else
        nccl_check_queued(c, ncclSend(buf, count, t, peer, c, s), "ncclSend");
    };
    nccl_group(nc, [&] {
      if (me == root) {
        for (int r = 0; r < n; ++r)
          if (r != root && part.size(r) > 0)
            exchange(at(whole, part.begin(r), dtype), part.size(r), r, to_root);
      } else if (part.size(me) > 0) {
        exchange(mine, part.size(me), root, !to_root);
      }
    });
  });
}
#endif

// Fails with the sentence unavailable_reason() gives, before any rank starts a call it cannot end.
void require(const Comm& comm) {
  std::string why;
  DL_CHECK(gpu_available(comm, &why), "{}", why);
}

}  // namespace

bool gpu_available(const Comm& comm, std::string* why) {
  std::string reason;
  if (comm.world().mode == Mode::threads) {
#ifdef DISTLAB_HAVE_NCCL
    const int gpus = cuda_device_count();
    if (comm.size() > gpus)
      reason = fmt::format(
          "the library collectives on in-process GPU ranks are NCCL's, and NCCL refuses two ranks "
          "of one "
          "communicator on one GPU: {} ranks share {} GPU{} here (use --ranks {} or fewer, or "
          "mpirun)",
          comm.size(), gpus, gpus == 1 ? "" : "s", gpus);
#else
    reason =
        "the library collectives on in-process GPU ranks are NCCL's, and this build has no NCCL";
#endif
  }
  if (why) *why = reason;
  return reason.empty();
}

std::string gpu_scatter(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                        int root) {
  require(comm);
  const int n = comm.size(), me = comm.rank();
  const Partition part{length, n};
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    const ncclDataType_t t = nccl_type(dtype);
    if (equal_chunks(length, n)) {
      if (const auto scatter = reinterpret_cast<decltype(&ncclScatter)>(
              nccl_function("ncclScatter", kScatterGather))) {
        const void* from = send ? send : recv;  // sendbuff is unused off the root; never pass null
        return nccl_run(comm, nc, "ncclScatter", [&](ncclComm_t c, cudaStream_t s) {
          DL_NCCL_CALL(nc, scatter(from, recv, part.size(me), t, root, c, s));
        });
      }
    }
    // Unequal chunks (NCCL's scatter takes one count), or an NCCL without ncclScatter: the root
    // sends each its own.
    return nccl_root_chunks(comm, nc, point_to_point("scatter", "ncclScatter", length, n), false,
                            const_cast<void*>(send), recv, part, dtype, root);
  }
#endif
  return staged(
      send, me == root ? bytes_of(length, dtype) : 0, recv, bytes_of(part.size(me), dtype),
      [&](const void* s, void* r) { return mpi_scatter(comm, s, r, length, dtype, root); });
}

std::string gpu_gather(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root) {
  require(comm);
  const int n = comm.size(), me = comm.rank();
  const Partition part{length, n};
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    const ncclDataType_t t = nccl_type(dtype);
    if (equal_chunks(length, n)) {
      if (const auto gather = reinterpret_cast<decltype(&ncclGather)>(
              nccl_function("ncclGather", kScatterGather))) {
        void* into = recv ? recv : const_cast<void*>(send);  // recvbuff is unused off the root
        return nccl_run(comm, nc, "ncclGather", [&](ncclComm_t c, cudaStream_t s) {
          DL_NCCL_CALL(nc, gather(send, into, part.size(me), t, root, c, s));
        });
      }
    }
    return nccl_root_chunks(comm, nc, point_to_point("gather", "ncclGather", length, n), true, recv,
                            const_cast<void*>(send), part, dtype, root);
  }
#endif
  return staged(
      send, bytes_of(part.size(me), dtype), recv, me == root ? bytes_of(length, dtype) : 0,
      [&](const void* s, void* r) { return mpi_gather(comm, s, r, length, dtype, root); });
}

std::string gpu_broadcast(Comm& comm, void* data, std::size_t length, DType dtype, int root) {
  require(comm);
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc))
    return nccl_run(comm, nc, "ncclBroadcast", [&](ncclComm_t c, cudaStream_t s) {
      DL_NCCL_CALL(nc, ncclBroadcast(data, data, length, nccl_type(dtype), root, c, s));
    });
#endif
  const std::size_t bytes = bytes_of(length, dtype);
  return staged(data, bytes, data, bytes,
                [&](const void*, void* r) { return mpi_broadcast(comm, r, length, dtype, root); });
}

std::string gpu_reduce(Comm& comm, const void* send, void* recv, std::size_t length, DType dtype,
                       int root) {
  require(comm);
  const int me = comm.rank();
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    void* into = recv ? recv : const_cast<void*>(send);  // recvbuff is unused off the root
    return nccl_run(comm, nc, "ncclReduce", [&](ncclComm_t c, cudaStream_t s) {
      DL_NCCL_CALL(nc, ncclReduce(send, into, length, nccl_type(dtype), ncclSum, root, c, s));
    });
  }
#endif
  const std::size_t bytes = bytes_of(length, dtype);
  return staged(send, bytes, recv, me == root ? bytes : 0, [&](const void* s, void* r) {
    return mpi_reduce(comm, s, r, length, dtype, root);
  });
}

std::string gpu_all_gather(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  require(comm);
  const int n = comm.size(), me = comm.rank();
  const Partition part{length, n};
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    const ncclDataType_t t = nccl_type(dtype);
    if (equal_chunks(length, n))
      return nccl_run(comm, nc, "ncclAllGather", [&](ncclComm_t c, cudaStream_t s) {
        DL_NCCL_CALL(nc, ncclAllGather(send, recv, part.size(me), t, c, s));
      });
    // Unequal chunks: each rank broadcasts its own into place.
    return nccl_per_chunk(
        comm, nc, "ncclBroadcast x N (all-gather)", part, [&](int r, ncclComm_t c, cudaStream_t s) {
          char* place = at(recv, part.begin(r), dtype);
          nccl_check_queued(c,
                            ncclBroadcast(r == me ? send : place, place, part.size(r), t, r, c, s),
                            "ncclBroadcast");
        });
  }
#endif
  return staged(send, bytes_of(part.size(me), dtype), recv, bytes_of(length, dtype),
                [&](const void* s, void* r) { return mpi_all_gather(comm, s, r, length, dtype); });
}

std::string gpu_reduce_scatter(Comm& comm, const void* send, void* recv, std::size_t length,
                               DType dtype) {
  require(comm);
  const int n = comm.size(), me = comm.rank();
  const Partition part{length, n};
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    const ncclDataType_t t = nccl_type(dtype);
    if (equal_chunks(length, n))
      return nccl_run(comm, nc, "ncclReduceScatter", [&](ncclComm_t c, cudaStream_t s) {
        DL_NCCL_CALL(nc, ncclReduceScatter(send, recv, part.size(me), t, ncclSum, c, s));
      });
    // Unequal chunks: chunk r is reduced onto rank r.
    return nccl_per_chunk(
        comm, nc, "ncclReduce x N (reduce-scatter)", part,
        [&](int r, ncclComm_t c, cudaStream_t s) {
          const char* chunk = at(send, part.begin(r), dtype);
          void* into = r == me ? recv : const_cast<char*>(chunk);  // unused off the root
          nccl_check_queued(c, ncclReduce(chunk, into, part.size(r), t, ncclSum, r, c, s),
                            "ncclReduce");
        });
  }
#endif
  return staged(
      send, bytes_of(length, dtype), recv, bytes_of(part.size(me), dtype),
      [&](const void* s, void* r) { return mpi_reduce_scatter(comm, s, r, length, dtype); });
}

std::string gpu_all_reduce(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  require(comm);
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc))
    return nccl_run(comm, nc, "ncclAllReduce", [&](ncclComm_t c, cudaStream_t s) {
      DL_NCCL_CALL(nc, ncclAllReduce(send, recv, length, nccl_type(dtype), ncclSum, c, s));
    });
#endif
  const std::size_t bytes = bytes_of(length, dtype);
  return staged(send, bytes, recv, bytes,
                [&](const void* s, void* r) { return mpi_all_reduce(comm, s, r, length, dtype); });
}

std::string gpu_all_to_all(Comm& comm, const void* send, void* recv, std::size_t length,
                           DType dtype) {
  require(comm);
  const int n = comm.size();
  const std::size_t block = length / std::size_t(n);
#ifdef DISTLAB_HAVE_NCCL
  Nccl nc;
  if (nccl_of(comm, nc)) {
    // NCCL has no all-to-all call: its documented form is a group of ncclSend and ncclRecv, one
    // pair per peer (the own block included, which NCCL copies).
    const ncclDataType_t t = nccl_type(dtype);
    return nccl_run(comm, nc, "ncclSend/ncclRecv (all-to-all)", [&](ncclComm_t c, cudaStream_t s) {
      nccl_group(nc, [&] {
        for (int r = 0; r < n && block > 0; ++r) {
          nccl_check_queued(c, ncclSend(at(send, std::size_t(r) * block, dtype), block, t, r, c, s),
                            "ncclSend");
          nccl_check_queued(c, ncclRecv(at(recv, std::size_t(r) * block, dtype), block, t, r, c, s),
                            "ncclRecv");
        }
      });
    });
  }
#endif
  return staged(send, bytes_of(length, dtype), recv, bytes_of(length, dtype),
                [&](const void* s, void* r) { return mpi_all_to_all(comm, s, r, length, dtype); });
}

#endif  // DISTLAB_HAVE_CUDA

}  // namespace distlab::baseline::detail
