// nccl.cpp — ncclSend / ncclRecv in groups, headers by MPI (nccl.hpp).
#include "core/transport/nccl.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <algorithm>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"
#include "core/transport/mpi_check.hpp"

namespace distlab {

namespace {

ncclComm_t as_nccl(void* c) {
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
  Context& world = contexts_.emplace_back();
  world.comm = nccl_init_comm(n, me, &id, mpi_);  // aborted there when it fails: nothing to release
  DL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &world.headers));
  MPI_Comm_set_errhandler(world.headers, MPI_ERRORS_RETURN);
  for (int r = 0; r < n; ++r) world.rank_of.push_back(r);
  world.sent_to.assign(static_cast<std::size_t>(n), 0);
  world.received_from.assign(static_cast<std::size_t>(n), 0);
}

NcclTransport::~NcclTransport() {
  for (auto& c : contexts_) {
    if (c.comm) cuda_release_nccl(c.comm);
    if (c.headers != MPI_COMM_NULL) MPI_Comm_free(&c.headers);
  }
}

int NcclTransport::split(int parent, int color, int key, const std::vector<int>& members) {
  const int id = mpi_.split(parent, color, key, members);
  DL_CHECK(id == static_cast<int>(contexts_.size()),
           "r{}: the MPI transport numbered a split {}, the NCCL transport {}", mpi_.rank(), id,
           contexts_.size());
  Context c;
  const int n = mpi_.size();
  c.rank_of.assign(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < members.size(); ++i)
    c.rank_of[static_cast<std::size_t>(members[i])] = static_cast<int>(i);
  c.sent_to.assign(static_cast<std::size_t>(n), 0);
  c.received_from.assign(static_cast<std::size_t>(n), 0);
  DL_MPI_CHECK(MPI_Comm_split(at(parent).headers, color, key, &c.headers));
  MPI_Comm_set_errhandler(c.headers, MPI_ERRORS_RETURN);
  const int me = c.rank_of[static_cast<std::size_t>(mpi_.rank())];
  ncclUniqueId uid{};
  if (me == 0) DL_NCCL_CHECK(ncclGetUniqueId(&uid));
  DL_MPI_CHECK(MPI_Bcast(&uid, sizeof uid, MPI_BYTE, 0, mpi_.comm(id)));
  c.comm = nccl_init_comm(static_cast<int>(members.size()), me, &uid, mpi_);
  contexts_.push_back(std::move(c));
  return id;
}

const NcclTransport::Context& NcclTransport::at(int context) const {
  DL_CHECK(context >= 0 && static_cast<std::size_t>(context) < contexts_.size(),
           "r{}: no NCCL communicator was split off as context {}", mpi_.rank(), context);
  return contexts_[static_cast<std::size_t>(context)];
}

std::shared_ptr<NcclTransport::Req> NcclTransport::make(bool is_send, const MemRef& mem, int peer,
                                                        int tag, int context) {
  auto r = new_request<Req>(is_send, mem, peer, tag, context);
  r->mine.bytes = mem.bytes;
  r->mine.dtype = static_cast<std::uint8_t>(mem.dtype);
  r->mine.on_gpu = mem.device == Device::cuda;
  r->by_nccl = r->mine.on_gpu && mem.bytes > 0;
  Context& c = contexts_[static_cast<std::size_t>(context)];
  DL_CHECK(c.rank_of[static_cast<std::size_t>(peer)] >= 0,
           "r{}: r{} is not in the group of context {}", mpi_.rank(), peer, context);
  auto& count = is_send ? c.sent_to : c.received_from;
  if (r->by_nccl) {
    r->mine.order = count[static_cast<std::size_t>(peer)]++;
    queued_.push_back(r);
  }
  return r;
}

Request NcclTransport::isend(const MemRef& mem, int dst, int tag, int context) {
  const Context& c = at(context);
  auto r = make(true, mem, dst, tag, context);
  DL_MPI_CHECK(MPI_Isend(&r->mine, sizeof(Header), MPI_BYTE,
                         c.rank_of[static_cast<std::size_t>(dst)], tag, c.headers, &r->header));
  if (!r->mine.on_gpu) r->host = mpi_.isend(mem, dst, tag, context);
  return r;
}

Request NcclTransport::irecv(const MemRef& mem, int src, int tag, int context) {
  const Context& c = at(context);
  auto r = make(false, mem, src, tag, context);
  DL_MPI_CHECK(MPI_Irecv(&r->theirs, sizeof(Header), MPI_BYTE,
                         c.rank_of[static_cast<std::size_t>(src)], tag, c.headers, &r->header));
  if (!r->mine.on_gpu) r->host = mpi_.irecv(mem, src, tag, context);
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
  // One group: every queued send and receive progresses together (a sendrecv cannot hang),
  // whichever communicators they are on.
  std::vector<void*> comms;
  for (const auto& r : queued_) {
    void* c = at(r->context).comm;
    if (std::find(comms.begin(), comms.end(), c) == comms.end()) comms.push_back(c);
  }
  nccl_group(comms, mpi_, [&] {
    for (const auto& r : queued_) {
      const Context& c = at(r->context);
      const int peer = c.rank_of[static_cast<std::size_t>(r->peer)];
      if (r->is_send)
        nccl_check_queued(
            c.comm, ncclSend(r->mem.ptr, r->mem.bytes, ncclUint8, peer, as_nccl(c.comm), stream),
            "ncclSend");
      else
        nccl_check_queued(
            c.comm, ncclRecv(r->mem.ptr, r->mem.bytes, ncclUint8, peer, as_nccl(c.comm), stream),
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
    return !r.group || nccl_done(at(r.context).comm, *r.group);
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
