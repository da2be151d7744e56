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
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/dtype.hpp"
#include "core/base/world.hpp"
#include "core/device/buffer.hpp"
#include "core/device/device_timing.hpp"
#include "core/device/memory_ledger.hpp"
#include "core/trace/recorder.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

class Comm {
 public:
  Comm(World world, Transport& transport, bool verbose);

  const World& world() const { return world_; }
  int rank() const { return world_.rank; }
  int size() const { return world_.size; }
  Device device() const { return world_.device; }
  Transport& transport() { return transport_; }
  Recorder& recorder() { return recorder_; }
  Ledger& ledger() { return ledger_; }

  template <class T>
  Buffer<T> alloc(std::size_t n, Category category) {
    return Buffer<T>(ledger_, category, n, world_.device);
  }
  // A buffer holding `values` (copied to the GPU on a GPU rank), charged to `category`.
  template <class T>
  Buffer<T> alloc_from(const std::vector<T>& values, Category category) {
    Buffer<T> b(ledger_, category, values.size(), world_.device, /*zero=*/false);
    from_host(b.view(), values);
    return b;
  }
  // A collective's workspace: charged to Category::comm, not zero-filled (write before reading).
  template <class T>
  Buffer<T> scratch(std::size_t n) {
    return Buffer<T>(scratch_ledger_ ? *scratch_ledger_ : ledger_, Category::comm, n, world_.device,
                     /*zero=*/false);
  }
  // Charges collectives' workspaces to `ledger` instead of this rank's (nullptr: back to it), for
  // a comparison run that must leave the rank's memory figures alone.
  void charge_scratch_to(Ledger* ledger) { scratch_ledger_ = ledger; }

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
  void barrier() { transport_.barrier(); }
  // The most sends this rank had posted and not yet waited for, at once, since the last call
  // (which starts the count again from the sends open now). That is what an algorithm keeps in
  // flight, whatever the transport does with the data meanwhile: on threads a send whose receive
  // is already posted is copied at once and its trace span ends there, while MPI keeps the
  // request, and its span, open until the wait.
  int take_most_open_sends() {
    const int most = most_open_sends_;
    most_open_sends_ = open_sends_;
    return most;
  }

  // --- steps and phases -----------------------------------------------------------------
  // Reserves `count` global step ids. Every rank calls the same collectives in the same
  // order, so every rank gets the same ids without talking.
  int next_steps(int count) {
    const int base = step_counter_;
    step_counter_ += count;
    return base;
  }
  void mark_step(int step) { recorder_.step(step); }

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

  // --- verification and output ----------------------------------------------------------
  void check(const std::string& name, bool ok, const std::string& detail = {});
  // True when a test asked (with --inject-fault) that this rank's result be corrupted.
  bool inject_fault() const { return inject_fault_ && world_.rank == world_.size - 1; }
  bool fault_requested() const { return inject_fault_; }  // on every rank: the lesson picks one
  void set_inject_fault(bool on) { inject_fault_ = on; }

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
  Request post(bool is_send, const MemRef& mem, int peer, int tag, MsgMeta meta);

  World world_;
  Transport& transport_;
  Recorder recorder_;
  Ledger ledger_;
  Ledger* scratch_ledger_ = nullptr;
  bool verbose_;
  bool inject_fault_ = false;
  int step_counter_ = 1;                      // step ids start at 1, as people count them
  int open_sends_ = 0, most_open_sends_ = 0;  // sends posted, not yet waited for
  std::unordered_map<std::uint64_t, std::uint64_t> send_seq_, recv_seq_;
  std::unique_ptr<GpuTimeline> gpu_;  // --device cuda only: no cost on the CPU
};

}  // namespace distlab
