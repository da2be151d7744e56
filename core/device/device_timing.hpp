// device_timing.hpp — when the GPU actually did the work, on the rank's host timeline.
//
// The host spans of a CUDA run say when the host enqueued work and when it saw it finish; the
// GPU may have run it much later. A DeviceWork brackets device work with two CUDA timing
// events on the rank's stream; once they have completed, the gpu lane of the trace gets a
// span placed on the host clock. The conversion needs one fixed point per rank: at bind time
// (cuda_context.cpp) the rank records an event on its idle stream, waits for it and reads the
// host clock around the wait; the tightest of a few rounds gives the host time of that event
// (the "epoch"). Every later event is the epoch plus cudaEventElapsedTime from it.
//
//   host_us(event) = epoch_host_us + 1000 * elapsed_ms(epoch_event, event)
//
// Durations come from the two events directly (elapsed_ms(start, stop)), so they keep the
// events' half-microsecond resolution; positions drift with the two clocks (a few ppm, a few
// microseconds over a run of seconds) and lose float precision after minutes (elapsed_ms is
// a float: 1 us resolution at ~16 s from the epoch, 8 us at ~2 min).
//
// The types are opaque (void* events) so that Comm and the transports need no CUDA headers.
// Nothing here runs on a CPU rank: Comm creates its GpuTimeline only for --device cuda.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "core/device/clock_sync.hpp"
#include "core/trace/recorder.hpp"

namespace distlab {

// --- device work and the rank's gpu lane --------------------------------------------------------

// Device work bracketed by two timing events on one GPU (cudaEvent_t as void*). Created on
// the current device (the rank's); destroyed on that device, from whichever thread drops it.
class DeviceWork {
 public:
  explicit DeviceWork(std::string name);
  ~DeviceWork();
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;

  void record_start(void* stream);  // cudaStream_t of the same device
  void record_stop(void* stream);
  bool done() const;  // the stop event has completed (cudaEventQuery)

  const std::string& name() const { return name_; }
  void set_name(std::string name) { name_ = std::move(name); }
  int device() const { return device_; }
  void* stop_event() const { return stop_; }

  // Both ends on the calling rank's host clock (the rank must be bound to this work's GPU and
  // the work done). Returns false when it cannot say (events never recorded).
  bool host_times(double& t0_us, double& t1_us) const;

  // Handed to a rank's GpuTimeline already: requests that one NCCL group served share one
  // DeviceWork, and it becomes one span.
  bool claimed = false;

  // Ready to be recorded again under a new name (GpuTimeline reuses its phases' events).
  void reuse(std::string name);

 private:
  std::string name_;
  int device_ = -1;
  // The events and their state: read only where CUDA is built (a CPU build's stubs never do).
  [[maybe_unused]] void* start_ = nullptr;
  void* stop_ = nullptr;
  [[maybe_unused]] bool started_ = false;
  [[maybe_unused]] bool stopped_ = false;
};

// One rank's device spans in flight: work is added when it is enqueued and becomes a span on
// Lane::gpu once its events have completed. Owned by Comm; used only by the rank's thread.
class GpuTimeline {
 public:
  // Phase spans (Comm::phase): a start event on the rank's stream now, the stop at `end`.
  std::shared_ptr<DeviceWork> begin(const std::string& name);
  void end(std::shared_ptr<DeviceWork> work);
  // Work another part recorded (a copy, an NCCL group); traced once.
  void add(std::shared_ptr<DeviceWork> work);
  // Moves completed work into the recorder; with `wait`, first waits for all of it (the end
  // of the rank's body).
  void collect(Recorder& recorder, bool wait);

 private:
  std::vector<std::shared_ptr<DeviceWork>> pending_;
  std::vector<std::shared_ptr<DeviceWork>> spare_;  // finished phase events, created once
};

}  // namespace distlab
