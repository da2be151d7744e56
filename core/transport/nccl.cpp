// nccl.cpp — ncclSend / ncclRecv in groups, headers by MPI (nccl.hpp).
#include "core/transport/nccl.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"
#include "core/transport/mpi_check.hpp"

namespace distlab {

namespace {

ncclComm_t nc(void* c) {
  return static_cast<ncclComm_t>(c);
}

std::string ordinal(std::uint64_t k) {
  const std::uint64_t n = k + 1;  // orders count from 0, people from 1st
  const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                       : n % 10 == 1                    ? "st"
                       : n % 10 == 2                    ? "nd"
                       : n % 10 == 3                    ? "rd"
                                                        : "th";
  return fmt::format("{}{}", n, suffix);
}

}  // namespace

// --- the transport -------------------------------------------------------------------------

// What a message says about itself, by MPI, so that the receiver can check what NCCL cannot.
struct NcclTransport::Header {
  std::uint64_t bytes = 0;
  std::uint64_t order = 0;  // its place among the sender's NCCL messages to this receiver
  std::uint8_t dtype = 0;
  std::uint8_t on_gpu = 0;
  std::uint8_t pad[6] = {};
};

struct NcclTransport::Req : RequestState {
  Header mine;    // a send's header; a receive's expectation
  Header theirs;  // a receive: the sender's header, once it arrived
  MPI_Request header = MPI_REQUEST_NULL;
  bool header_seen = false;
  Request host;                       // host memory: the payload's MPI message
  bool by_nccl = false;               // GPU memory with bytes: moved by a group launch
  std::shared_ptr<DeviceWork> group;  // that launch, once flushed
};

NcclTransport::NcclTransport(MpiTransport& mpi) : mpi_(mpi) {
  const int n = mpi_.size(), me = mpi_.rank();
  ncclUniqueId id{};
  if (me == 0) DL_NCCL_CHECK(ncclGetUniqueId(&id));
  DL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, mpi_.comm()));
  comm_ = nccl_init_comm(n, me, &id, mpi_);  // aborted there when it fails: nothing to release
  DL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &headers_));
  MPI_Comm_set_errhandler(headers_, MPI_ERRORS_RETURN);
  sent_to_.assign(static_cast<std::size_t>(n), 0);
  received_from_.assign(static_cast<std::size_t>(n), 0);
}

NcclTransport::~NcclTransport() {
  if (comm_) cuda_release_nccl(comm_);
  if (headers_ != MPI_COMM_NULL) MPI_Comm_free(&headers_);
}

std::shared_ptr<NcclTransport::Req> NcclTransport::make(bool is_send, const MemRef& mem, int peer,
                                                        int tag) {
  auto r = std::make_shared<Req>();
  r->is_send = is_send;
  r->peer = peer;
  r->tag = tag;
  r->mem = mem;
  r->t_post = now_us();
  r->mine.bytes = mem.bytes;
  r->mine.dtype = static_cast<std::uint8_t>(mem.dtype);
  r->mine.on_gpu = mem.device == Device::cuda;
  r->by_nccl = r->mine.on_gpu && mem.bytes > 0;
  auto& count = is_send ? sent_to_ : received_from_;
  if (r->by_nccl) {
    r->mine.order = count[static_cast<std::size_t>(peer)]++;
    queued_.push_back(r);
  }
  return r;
}

Request NcclTransport::isend(const MemRef& mem, int dst, int tag) {
  auto r = make(true, mem, dst, tag);
  DL_MPI_CHECK(MPI_Isend(&r->mine, sizeof(Header), MPI_BYTE, dst, tag, headers_, &r->header));
  if (!r->mine.on_gpu) r->host = mpi_.isend(mem, dst, tag);
  return r;
}

Request NcclTransport::irecv(const MemRef& mem, int src, int tag) {
  auto r = make(false, mem, src, tag);
  DL_MPI_CHECK(MPI_Irecv(&r->theirs, sizeof(Header), MPI_BYTE, src, tag, headers_, &r->header));
  if (!r->mine.on_gpu) r->host = mpi_.irecv(mem, src, tag);
  return r;
}

std::size_t NcclTransport::flush() {
  if (queued_.empty()) return 0;
  const std::size_t launched = queued_.size();
  const auto stream = static_cast<cudaStream_t>(cuda_stream());
  int sends = 0;
  for (const auto& r : queued_) sends += r->is_send;
  const int recvs = static_cast<int>(queued_.size()) - sends;
  auto group = std::make_shared<DeviceWork>(sends && recvs ? "ncclSend/ncclRecv"
                                            : sends        ? "ncclSend"
                                                           : "ncclRecv");
  group->record_start(stream);
  // One group: every queued send and receive progresses together (a sendrecv cannot hang).
  nccl_group(comm_, mpi_, [&] {
    for (const auto& r : queued_) {
      if (r->is_send)
        nccl_check_queued(comm_,
                          ncclSend(r->mem.ptr, r->mem.bytes, ncclUint8, r->peer, nc(comm_), stream),
                          "ncclSend");
      else
        nccl_check_queued(comm_,
                          ncclRecv(r->mem.ptr, r->mem.bytes, ncclUint8, r->peer, nc(comm_), stream),
                          "ncclRecv");
    }
  });
  group->record_stop(stream);  // only now: nothing may go on NCCL's stream before it settled
  for (const auto& r : queued_) {
    r->group = group;
    r->device_work = group;  // this rank's GPU ran it: its gpu lane shows the group once
  }
  queued_.clear();
  return launched;
}

// The header's MPI message; on a receive, the check of what arrived against what was posted.
bool NcclTransport::header_arrived(Req& r) {
  if (r.header_seen) return true;
  int flag = 0;
  DL_MPI_CHECK(MPI_Test(&r.header, &flag, MPI_STATUS_IGNORE));
  if (!flag) return false;
  r.header_seen = true;
  if (r.is_send) return true;
  const Header& h = r.theirs;
  const std::string message =
      fmt::format("message r{} -> r{} (tag {})", r.peer, mpi_.rank(), r.tag);
  if (h.on_gpu != r.mine.on_gpu)
    throw Error(
        fmt::format("{} leaves {} memory but the receive is in {} memory: with NCCL both ends of a "
                    "message must be on the GPU "
                    "or both on the host",
                    message, h.on_gpu ? "GPU" : "host", r.mine.on_gpu ? "GPU" : "host"));
  if (h.bytes != r.mine.bytes || h.dtype != r.mine.dtype)
    throw Error(fmt::format("{} has {} B of {} but the receive expects {} B of {}", message,
                            h.bytes, to_string(static_cast<DType>(h.dtype)), r.mine.bytes,
                            to_string(r.mem.dtype)));
  if (r.by_nccl && h.order != r.mine.order)
    throw Error(
        fmt::format("{} is r{}'s {} GPU message to r{}, but this receive is r{}'s {} from r{}: "
                    "NCCL pairs the messages between "
                    "two ranks in posting order, not by tag, so post the receives in the order the "
                    "sends are posted",
                    message, r.peer, ordinal(h.order), mpi_.rank(), mpi_.rank(),
                    ordinal(r.mine.order), r.peer));
  return true;
}

void NcclTransport::wait(RequestState& request) {
  if (request.done.load(std::memory_order_acquire)) return;
  auto& r = static_cast<Req&>(request);
  flush();
  auto ready = [&] {
    if (!header_arrived(r)) return false;
    if (r.host) return mpi_.test(*r.host);
    return !r.group || nccl_done(comm_, *r.group);
  };
  if (!ready()) mpi_.wait_until(ready, request);
  r.t_done = now_us();
  r.done.store(true, std::memory_order_release);
}

void NcclTransport::barrier() {
  flush();  // a rank in the barrier must not hold back sends another rank waits for
  mpi_.barrier();
}

}  // namespace distlab
