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

// Tags split and a group's barrier use below the trace: above every tag a lesson may use, so
// they never meet its messages.
constexpr int kSplitTag = kMaxTag + 1;
constexpr int kBarrierTag = kMaxTag + 2;
}  // namespace

Comm::Comm(World world, Transport& transport, bool verbose)
    : rank_(std::make_shared<RankState>(world.rank)),
      world_(std::move(world)),
      transport_(transport) {
  rank_->verbose = verbose;
  if (world_.device == Device::cuda) rank_->gpu = std::make_unique<GpuTimeline>();
}

Comm::Comm(std::shared_ptr<RankState> rank, World world, Transport& transport, int context,
           std::vector<int> members, std::string group)
    : rank_(std::move(rank)),
      world_(std::move(world)),
      transport_(transport),
      context_(context),
      members_(std::move(members)),
      group_(std::move(group)) {}

std::vector<std::int64_t> Comm::exchange(std::int64_t out, int tag) {
  const int n = size(), me = rank();
  std::vector<std::int64_t> all(static_cast<std::size_t>(n));
  all[static_cast<std::size_t>(me)] = out;
  std::vector<Request> requests;
  for (int i = 1; i < n; ++i) {
    const int from = (me - i + n) % n;
    requests.push_back(transport_.irecv(
        {&all[static_cast<std::size_t>(from)], sizeof(std::int64_t), DType::i64, Device::cpu},
        world_rank(from), tag, context_));
  }
  for (int i = 1; i < n; ++i)
    requests.push_back(transport_.isend({&out, sizeof out, DType::i64, Device::cpu},
                                        world_rank((me + i) % n), tag, context_));
  for (auto& r : requests) transport_.wait(*r);
  return all;
}

Comm Comm::split(int color, int key, std::string name) {
  finish_started();
  DL_CHECK(color >= 0, "r{}: split needs a color >= 0, not {}", rank(), color);
  DL_CHECK(key >= 0 && key < (1 << 30), "r{}: split needs a key in [0, 2^30), not {}", rank(), key);
  // Every rank's color and key, in one value each: who is in my group, and in which order.
  const auto all = exchange((static_cast<std::int64_t>(color) << 32) | key, kSplitTag);
  std::vector<std::pair<int, int>> order;  // (key, rank here) of my group's ranks
  for (int r = 0; r < size(); ++r) {
    const std::int64_t v = all[static_cast<std::size_t>(r)];
    if (static_cast<int>(v >> 32) == color) order.emplace_back(static_cast<int>(v & 0xffffffff), r);
  }
  std::sort(order.begin(), order.end());
  std::vector<int> members;
  World w = world_;
  for (const auto& [k, r] : order) {
    if (r == rank()) w.rank = static_cast<int>(members.size());
    members.push_back(world_rank(r));
  }
  w.size = static_cast<int>(members.size());
  w.ranks_per_node = 0;  // a group's ranks need not sit G to a node
  const int context = transport_.split(context_, color, key, members);
  ++splits_;
  if (name.empty())
    name = fmt::format("{}split {} color {}", group_.empty() ? "" : group_ + " ", splits_, color);
  return Comm(rank_, w, transport_, context, std::move(members), std::move(name));
}

void Comm::barrier() {
  finish_started();
  if (context_ == 0) {
    transport_.barrier();
    return;
  }
  exchange(0, kBarrierTag);  // a group's: each member hears from every other
}

Request Comm::post(bool is_send, const MemRef& mem, int peer, int tag, MsgMeta meta) {
  DL_CHECK(peer >= 0 && peer < world_.size, "r{}: peer rank {} is outside the {} of {} ranks",
           world_.rank, peer, group_.empty() ? "world" : "group " + group_, world_.size);
  DL_CHECK(tag >= 0 && tag <= kMaxTag, "r{}: tag {} is outside [0, {}]", world_.rank, tag, kMaxTag);
  const int to = world_rank(peer);
  if (!members_.empty()) {
    // The trace speaks of world ranks: a group's contributions are its members'.
    std::uint64_t mask = 0;
    for (int r = 0; r < world_.size && r < 64; ++r)
      if (meta.contrib_mask >> r & 1) {
        const int w = world_rank(r);
        if (w < 64) mask |= std::uint64_t{1} << w;
      }
    meta.contrib_mask = mask;
    meta.group = group_;
  }
  auto& seqs = is_send ? rank_->send_seq : rank_->recv_seq;
  const std::uint64_t seq = seqs[{to, tag, group_}]++;
  if (rank_->verbose && is_send) {
    std::string line = fmt::format("r{} -> r{}", world_rank(world_.rank), to);
    if (!group_.empty()) line += fmt::format(" | {}", group_);
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
  Request r =
      is_send ? transport_.isend(mem, to, tag, context_) : transport_.irecv(mem, to, tag, context_);
  if (is_send) rank_->most_open_sends = std::max(rank_->most_open_sends, ++rank_->open_sends);
  r->meta = std::move(meta);
  r->seq = seq;
  return r;
}

void Comm::wait(Request& r) {
  if (!r) return;
  await(*r);
  transport_.wait(*r);
  if (r->traced) return;  // waited on before
  r->traced = true;
  if (r->is_send) --rank_->open_sends;
  if (rank_->recorder.enabled()) {  // off (the bench's timed runs): not even the span's strings
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
    rank_->recorder.span(std::move(e));
  }
  if (rank_->gpu) {
    // The device work that moved the message (a copy, an NCCL group), once; and whatever
    // phases have finished meanwhile.
    if (r->device_work && rank_->recorder.enabled()) rank_->gpu->add(r->device_work);
    rank_->gpu->collect(rank_->recorder, false);
  }
}

void Comm::record_device_work(std::shared_ptr<DeviceWork> work) {
  if (rank_->gpu && rank_->recorder.enabled()) rank_->gpu->add(std::move(work));
}

void Comm::finish_device_trace() {
  if (rank_->gpu && cuda_rank().device >= 0) rank_->gpu->collect(rank_->recorder, true);
}

Comm::Phase::Phase(Comm& comm, std::string name, PhaseArgs args)
    : comm_(comm), name_(std::move(name)), args_(std::move(args)), t0_(now_us()) {
  if (!comm_.rank_->gpu || cuda_rank().device < 0) return;
#ifdef DISTLAB_HAVE_CUDA
  nvtxRangePushA(name_.c_str());
  nvtx_ = true;
#endif
  if (comm_.rank_->recorder.enabled()) gpu_ = comm_.rank_->gpu->begin(name_);
}

Comm::Phase::~Phase() {
  if (gpu_) {
    try {
      comm_.rank_->gpu->end(std::move(gpu_));
    } catch (const std::exception&) {
      // A CUDA error here has a better place to surface: the next checked call names it.
    }
  }
#ifdef DISTLAB_HAVE_CUDA
  if (nvtx_) nvtxRangePop();
#endif
  if (!comm_.rank_->recorder.enabled()) return;
  SpanEvent e;
  e.lane = Lane::compute;
  e.name = std::move(name_);
  e.phase = std::move(args_);
  e.t0 = t0_;
  e.t1 = now_us();
  comm_.rank_->recorder.span(std::move(e));
}

void Comm::declare_buffer(const std::string& name, std::uint64_t length, int chunks) {
  if (!rank_->recorder.enabled()) return;  // a run off the trace declares nothing in it
  auto& bufs = rank_->recorder.log().buffers;
  for (auto& b : bufs)
    if (b.name == name) {
      b.length = length;
      b.chunks = chunks;
      return;
    }
  bufs.push_back({name, length, chunks});
}

void Comm::check(const std::string& name, bool ok, const std::string& detail) {
  rank_->recorder.log().checks.push_back(
      {group_.empty() ? name : fmt::format("{} ({} {})", name, group_, rank()), ok, detail});
}

}  // namespace distlab
