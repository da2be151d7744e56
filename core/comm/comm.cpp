#include "core/comm/comm.hpp"

#include <algorithm>
#include <mutex>

#include "core/base/check.hpp"
#include "core/base/units.hpp"
#include "core/device/cuda_context.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <nvtx3/nvToolsExt.h>  // header-only NVTX v3: ranges show in Nsight Systems
#endif

namespace distlab {

namespace {
std::mutex g_print_mutex;  // --verbose lines from many rank threads stay whole

std::uint64_t pair_key(int peer, int tag) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(peer)) << 32) |
         static_cast<std::uint32_t>(tag);
}
}  // namespace

Comm::Comm(World world, Transport& transport, bool verbose)
    : world_(std::move(world)),
      transport_(transport),
      recorder_(world_.rank),
      ledger_(&recorder_),
      verbose_(verbose) {
  if (world_.device == Device::cuda) gpu_ = std::make_unique<GpuTimeline>();
}

Request Comm::post(bool is_send, const MemRef& mem, int peer, int tag, MsgMeta meta) {
  DL_CHECK(peer >= 0 && peer < world_.size, "r{}: peer rank {} is outside the world of {} ranks",
           world_.rank, peer, world_.size);
  DL_CHECK(tag >= 0 && tag <= kMaxTag, "r{}: tag {} is outside [0, {}]", world_.rank, tag, kMaxTag);
  auto& seqs = is_send ? send_seq_ : recv_seq_;
  const std::uint64_t seq = seqs[pair_key(peer, tag)]++;
  if (verbose_ && is_send) {
    std::string line = fmt::format("r{} -> r{}", world_.rank, peer);
    if (meta.step >= 0) line += fmt::format(" | step {}", meta.step);
    if (meta.chunk_begin >= 0)
      line += meta.chunk_end == meta.chunk_begin + 1
                  ? fmt::format(" | chunk {}", meta.chunk_begin)
                  : fmt::format(" | chunks {}-{}", meta.chunk_begin, meta.chunk_end - 1);
    line += fmt::format(" | {}", format_bytes(static_cast<double>(mem.bytes)));
    if (meta.apply == Apply::reduce) line += " | reduce";
    std::lock_guard lk(g_print_mutex);
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  Request r = is_send ? transport_.isend(mem, peer, tag) : transport_.irecv(mem, peer, tag);
  if (is_send) most_open_sends_ = std::max(most_open_sends_, ++open_sends_);
  r->meta = std::move(meta);
  r->seq = seq;
  return r;
}

void Comm::wait(Request& r) {
  if (!r) return;
  transport_.wait(*r);
  if (r->traced) return;  // waited on before
  r->traced = true;
  if (r->is_send) --open_sends_;
  SpanEvent e;
  e.kind = r->is_send ? SpanEvent::Kind::send : SpanEvent::Kind::recv;
  e.lane = r->is_send ? Lane::send : Lane::recv;
  e.name = r->is_send ? "send" : "recv";
  e.t0 = r->t_post;
  e.t1 = r->t_done > 0 ? r->t_done : now_us();
  e.peer = r->peer;
  e.tag = r->tag;
  e.bytes = r->mem.bytes;
  e.seq = r->seq;
  e.meta = std::move(r->meta);
  recorder_.span(std::move(e));
  if (gpu_) {
    // The device work that moved the message (a copy, an NCCL group), once; and whatever
    // phases have finished meanwhile.
    if (r->device_work && recorder_.enabled()) gpu_->add(r->device_work);
    gpu_->collect(recorder_, false);
  }
}

void Comm::record_device_work(std::shared_ptr<DeviceWork> work) {
  if (gpu_ && recorder_.enabled()) gpu_->add(std::move(work));
}

void Comm::finish_device_trace() {
  if (gpu_ && cuda_rank().device >= 0) gpu_->collect(recorder_, true);
}

Comm::Phase::Phase(Comm& comm, std::string name, PhaseArgs args)
    : comm_(comm), name_(std::move(name)), args_(std::move(args)), t0_(now_us()) {
  if (!comm_.gpu_ || cuda_rank().device < 0) return;
#ifdef DISTLAB_HAVE_CUDA
  nvtxRangePushA(name_.c_str());
  nvtx_ = true;
#endif
  if (comm_.recorder_.enabled()) gpu_ = comm_.gpu_->begin(name_);
}

Comm::Phase::~Phase() {
  if (gpu_) {
    try {
      comm_.gpu_->end(std::move(gpu_));
    } catch (const std::exception&) {
      // A CUDA error here has a better place to surface: the next checked call names it.
    }
  }
#ifdef DISTLAB_HAVE_CUDA
  if (nvtx_) nvtxRangePop();
#endif
  SpanEvent e;
  e.lane = Lane::compute;
  e.name = std::move(name_);
  e.phase = std::move(args_);
  e.t0 = t0_;
  e.t1 = now_us();
  comm_.recorder_.span(std::move(e));
}

void Comm::declare_buffer(const std::string& name, std::uint64_t length, int chunks) {
  if (!recorder_.enabled()) return;  // a run off the trace declares nothing in it
  auto& bufs = recorder_.log().buffers;
  for (auto& b : bufs)
    if (b.name == name) {
      b.length = length;
      b.chunks = chunks;
      return;
    }
  bufs.push_back({name, length, chunks});
}

void Comm::check(const std::string& name, bool ok, const std::string& detail) {
  recorder_.log().checks.push_back({name, ok, detail});
}

}  // namespace distlab
