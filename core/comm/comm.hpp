// comm.hpp — what a lesson's body gets: one rank's view of the run.
//
//   comm.rank(), comm.size()                 who am I, how many are we
//   comm.alloc<float>(n, Category::data)     a buffer charged to this rank's memory ledger
//   comm.alloc_from(values, Category::data)  the same, holding a host vector's values
//   comm.scratch<float>(n)                   a collective's workspace (Category::comm, not zeroed)
//   comm.send / recv / isend / irecv / wait  point-to-point, traced (one flow per message)
//   comm.sendrecv(...)                       both at once, never deadlocks on itself
//   comm.next_steps(k), comm.mark_step(s)    algorithm steps, for the trace and the viewer
//   comm.phase("name")                       a named span on the compute lane (RAII); on a GPU
//                                            also on the gpu lane (CUDA events) and in Nsight
//                                            Systems (an NVTX range); comm.phase("F 2",
//                                            {.op = "forward", .micro = 2}) says what it is
//   comm.check(name, ok, detail)             a verification result; all must pass
//   comm.say(...), comm.say_on(r, ...)       print on rank 0 only / on rank r only
//   comm.split(color, key, "tp")             the ranks that pass the same color, as a Comm of
//                                            their own (MPI_Comm_split's meaning)
//   comm.start(body), comm.progress()        a nonblocking operation, and moving the started
//                                            ones on (async.hpp)
//
// A Comm made by split is a group: rank() and size() are the rank's place in it, peers are
// group ranks, and every collective in core runs on it unchanged. Its messages match only its
// own (a context of the transport: MPI_Comm_split, a NCCL communicator per group), and the trace
// names them by world rank with the group's name. It shares the rank's trace, memory ledger and
// step ids with the Comm it was split from.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/world.hpp"
#include "core/comm/async.hpp"
#include "core/device/buffer.hpp"
#include "core/device/device_timing.hpp"
#include "core/device/memory_ledger.hpp"
#include "core/trace/recorder.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

struct AsyncScheduler;  // async.cpp: a rank's started operations
struct AsyncPool;       // async.cpp: a Comm's contexts for them

class Comm {
 public:
  Comm(World world, Transport& transport, bool verbose);
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&&) = default;

  // Collective over this Comm: every rank passes a color (>= 0) and a key. The ranks with this
  // rank's color become a group, ordered by key, then by their rank here. `name` ("tp", "dp")
  // labels its messages in the trace and its checks. Splits nest: a group splits like any Comm.
  Comm split(int color, int key, std::string name = {});

  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  Device device() const { return world_.device; }
  Transport& transport() { return transport_; }
  Recorder& recorder() { return rank_->recorder; }
  Ledger& ledger() { return rank_->ledger; }

  // --- groups (split) --------------------------------------------------------------------
  int context() const { return context_; }             // the transport's context: 0 for every rank
  const std::string& group() const { return group_; }  // the name given to split, "" at first
  // The world rank of this Comm's rank `r` (r itself before any split).
  int world_rank(int r) const {
    return members_.empty() ? r : members_[static_cast<std::size_t>(r)];
  }

  template <class T>
  Buffer<T> alloc(std::size_t n, Category category) {
    return Buffer<T>(rank_->ledger, category, n, world_.device);
  }
  // A buffer holding `values` (copied to the GPU on a GPU rank), charged to `category`.
  template <class T>
  Buffer<T> alloc_from(const std::vector<T>& values, Category category) {
    Buffer<T> b(rank_->ledger, category, values.size(), world_.device, /*zero=*/false);
    from_host(b.view(), values);
    return b;
  }
  // A collective's workspace: charged to Category::comm, not zero-filled (write before reading).
  template <class T>
  Buffer<T> scratch(std::size_t n) {
    return Buffer<T>(rank_->scratch_ledger ? *rank_->scratch_ledger : rank_->ledger, Category::comm,
                     n, world_.device,
                     /*zero=*/false);
  }
  // Charges collectives' workspaces to `ledger` instead of this rank's (nullptr: back to it), for
  // a comparison run that must leave the rank's memory figures alone.
  void charge_scratch_to(Ledger* ledger) { rank_->scratch_ledger = ledger; }

  // --- point-to-point ------------------------------------------------------------------
  template <class T>
  Request isend(View<const T> data, int dst, int tag, MsgMeta meta = {}) {
    return post(true, {const_cast<T*>(data.ptr), data.bytes(), dtype_of<T>(), data.device}, dst,
                tag, std::move(meta));
  }
  template <class T>
  Request irecv(View<T> data, int src, int tag, MsgMeta meta = {}) {
    return post(false, {data.ptr, data.bytes(), dtype_of<T>(), data.device}, src, tag,
                std::move(meta));
  }
  // A receive that adds the message into `data` as it arrives, in one pass over memory; only
  // where reduces_on_receive(data) says the transport can (coll::sendrecv_reduce asks).
  template <class T>
  bool reduces_on_receive(View<T> data) {
    return transport_.reduces_on_receive({data.ptr, data.bytes(), dtype_of<T>(), data.device});
  }
  template <class T>
  Request irecv_reduce(View<T> data, int src, int tag, MsgMeta meta = {}) {
    DL_CHECK(reduces_on_receive(data), "r{}: the {} transport cannot add a message on receipt",
             world_.rank, transport_.name());
    return post(false, {data.ptr, data.bytes(), dtype_of<T>(), data.device, true}, src, tag,
                std::move(meta));
  }
  template <class T>
  void send(View<const T> data, int dst, int tag, MsgMeta meta = {}) {
    auto r = isend(data, dst, tag, std::move(meta));
    wait(r);
  }
  template <class T>
  void recv(View<T> data, int src, int tag, MsgMeta meta = {}) {
    auto r = irecv(data, src, tag, std::move(meta));
    wait(r);
  }
  // Sends to dst and receives from src at once (both posted before either is waited on).
  template <class T>
  void sendrecv(View<const T> out, int dst, View<T> in, int src, int tag, MsgMeta send_meta = {},
                MsgMeta recv_meta = {}) {
    Request r[2] = {irecv(in, src, tag, std::move(recv_meta)),
                    isend(out, dst, tag, std::move(send_meta))};
    wait_all(r);
  }
  void wait(Request& r);
  template <std::size_t N>
  void wait_all(Request (&rs)[N]) {
    for (auto& r : rs) wait(r);
  }
  void wait_all(std::vector<Request>& rs) {
    for (auto& r : rs) wait(r);
  }
  // Every rank of this Comm (a group: its members only) has arrived. Finishes the operations
  // started on this rank first (start).
  void barrier();
  // The most sends this rank had posted and not yet waited for, at once, since the last call
  // (which starts the count again from the sends open now). That is what an algorithm keeps in
  // flight, whatever the transport does with the data meanwhile: on threads a send whose receive
  // is already posted is copied at once and its trace span ends there, while MPI keeps the
  // request, and its span, open until the wait.
  int take_most_open_sends() {
    const int most = rank_->most_open_sends;
    rank_->most_open_sends = rank_->open_sends;
    return most;
  }

  // --- steps and phases -----------------------------------------------------------------
  // Reserves `count` global step ids. Every rank calls the same collectives in the same
  // order, so every rank gets the same ids without talking. A nonblocking operation's Comm
  // takes them from the block reserved when it started.
  int next_steps(int count) {
    int& counter = own_steps_ >= 0 ? own_steps_ : rank_->step_counter;
    const int base = counter;
    counter += count;
    if (own_steps_ >= 0) check_own_steps();
    return base;
  }
  void mark_step(int step) { rank_->recorder.step(step); }
  // Moves the next step id on to `id` (never back): a lesson that lays its steps out on a clock
  // of its own reserves places for them (lesson 14: each pipeline op at its time on the ideal
  // machine, the collectives inside it numbered from there).
  void seek_steps(int id) {
    DL_CHECK(id >= rank_->step_counter, "step ids only move on: at {}, asked for {}",
             rank_->step_counter, id);
    rank_->step_counter = id;
  }

  // On a GPU rank a phase also records a CUDA event pair on the rank's stream around the work
  // enqueued inside it (the gpu lane shows when the GPU ran it) and pushes an NVTX range; on
  // the CPU it costs what it always did: two clock reads and a span.
  class Phase {
   public:
    Phase(Comm& comm, std::string name, PhaseArgs args = {});
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    Comm& comm_;
    std::string name_;
    PhaseArgs args_;
    double t0_;
    std::shared_ptr<DeviceWork> gpu_;  // null on the CPU
    bool nvtx_ = false;
  };
  // `args` says what the phase is (op, micro-batch, stage, a caption) for the viewer's pictures.
  Phase phase(std::string name, PhaseArgs args = {}) {
    return Phase(*this, std::move(name), std::move(args));
  }

  // --- the gpu lane (--device cuda; device_timing.hpp) -----------------------------------------
  // Device work this rank's GPU runs (a library collective): a span on the gpu lane once done.
  void record_device_work(std::shared_ptr<DeviceWork> work);
  // Waits for the rank's device work and puts what is left on the gpu lane; the runtime calls
  // it when the body returns, before the log leaves the rank.
  void finish_device_trace();

  // Declares a logical buffer whose chunks messages will name (MsgMeta::buffer).
  void declare_buffer(const std::string& name, std::uint64_t length, int chunks);

  // --- nonblocking operations (async.hpp) ------------------------------------------------------
  // Starts `body` as a nonblocking operation on a Comm of its own over these ranks and returns
  // when it first waits (or ends). Every rank starts the same operations in the same order.
  AsyncHandle start(std::function<void(Comm&)> body);
  // Resumes every started operation of this rank whose awaited message has arrived, until none
  // can move; returns how many resumptions there were. Cheap when nothing was started.
  int progress();
  // Finishes every operation started on this rank; rethrows the first one's error.
  void finish_started();

  // --- verification and output ----------------------------------------------------------
  void check(const std::string& name, bool ok, const std::string& detail = {});
  // True when a test asked (with --inject-fault) that this rank's result be corrupted.
  bool inject_fault() const { return rank_->inject_fault && world_.rank == world_.size - 1; }
  bool fault_requested() const { return rank_->inject_fault; }  // every rank: the lesson picks
  void set_inject_fault(bool on) { rank_->inject_fault = on; }

  template <class... Args>
  void say(fmt::format_string<Args...> f, Args&&... args) {
    if (world_.rank != 0) return;
    fmt::print(f, std::forward<Args>(args)...);
    std::fflush(stdout);
  }
  // Print on one chosen rank (a root other than 0, say).
  template <class... Args>
  void say_on(int rank, fmt::format_string<Args...> f, Args&&... args) {
    if (world_.rank != rank) return;
    fmt::print(f, std::forward<Args>(args)...);
    std::fflush(stdout);
  }

 private:
  // What a rank has once, whichever group it speaks in: its trace, its memory, its step ids.
  struct RankState {
    explicit RankState(int world_rank) : recorder(world_rank), ledger(&recorder) {}
    Recorder recorder;
    Ledger ledger;
    Ledger* scratch_ledger = nullptr;
    bool verbose = false;
    bool inject_fault = false;
    int step_counter = 1;                     // step ids start at 1, as people count them
    int open_sends = 0, most_open_sends = 0;  // sends posted, not yet waited for
    // Messages so far per (world peer, tag, context), which pairs a send with its receive.
    std::map<std::tuple<int, int, std::string>, std::uint64_t> send_seq, recv_seq;
    std::unique_ptr<GpuTimeline> gpu;       // --device cuda only: no cost on the CPU
    std::shared_ptr<AsyncScheduler> async;  // made by the first start()
  };
  Comm(std::shared_ptr<RankState> rank, World world, Transport& transport, int context,
       std::vector<int> members, std::string group);
  Request post(bool is_send, const MemRef& mem, int peer, int tag, MsgMeta meta);
  // Before a wait: inside an operation's fiber, yields until `r` completes; on the rank's own
  // stack with operations started, runs them while it waits (async.cpp).
  void await(RequestState& r);
  void check_own_steps() const;  // a nonblocking operation stays inside its block of step ids
  friend class AsyncHandle;
  friend struct AsyncScheduler;
  // Sends `out` to every other rank of this Comm and returns all ranks' values (its own in its
  // place): the exchange split and a group's barrier run on, below the trace.
  std::vector<std::int64_t> exchange(std::int64_t out, int tag);

  std::shared_ptr<RankState> rank_;
  World world_;  // rank and size in this Comm
  Transport& transport_;
  int context_ = 0;
  std::vector<int> members_;  // world ranks by rank here; empty: this Comm is the world
  std::string group_;
  int splits_ = 0;                           // splits made of this Comm
  std::shared_ptr<AsyncPool> async_pool_;    // the contexts of its operations (start)
  int own_steps_ = -1, own_steps_end_ = -1;  // a nonblocking operation's block of step ids
};

}  // namespace distlab
