// device_timing.cpp — CUDA events to spans on the host clock (device_timing.hpp).
#include "core/device/device_timing.hpp"

#include "core/base/check.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/cuda_context.hpp"

#ifdef DISTLAB_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace distlab {

namespace {
constexpr std::size_t kSpareWork = 64;  // phase event pairs kept for reuse per rank
}

#ifdef DISTLAB_HAVE_CUDA

namespace {
cudaEvent_t ev(void* e) {
  return static_cast<cudaEvent_t>(e);
}
cudaStream_t st(void* s) {
  return static_cast<cudaStream_t>(s);
}
}  // namespace

DeviceWork::DeviceWork(std::string name) : name_(std::move(name)) {
  DL_CUDA_CHECK(cudaGetDevice(&device_));
  // Timing events: cudaEventDisableTiming would forbid cudaEventElapsedTime.
  cudaEvent_t a = nullptr, b = nullptr;
  DL_CUDA_CHECK(cudaEventCreate(&a));
  const cudaError_t rc = cudaEventCreate(&b);
  if (rc != cudaSuccess) cudaEventDestroy(a);  // no destructor runs for a throwing constructor
  DL_CUDA_CHECK(rc);
  start_ = a;
  stop_ = b;
}

DeviceWork::~DeviceWork() {
  // On the event's own device: destroying it from another would create a context there.
  int previous = -1;
  cudaGetDevice(&previous);
  if (previous != device_) cudaSetDevice(device_);
  cudaEventDestroy(ev(start_));
  cudaEventDestroy(ev(stop_));
  if (previous != device_) cudaSetDevice(previous);
  cudaGetLastError();
}

void DeviceWork::record_start(void* stream) {
  DL_CUDA_CHECK(cudaEventRecord(ev(start_), st(stream)));
  started_ = true;
}

void DeviceWork::record_stop(void* stream) {
  DL_CUDA_CHECK(cudaEventRecord(ev(stop_), st(stream)));
  stopped_ = true;
}

bool DeviceWork::done() const {
  if (!stopped_) return false;
  const cudaError_t rc = cudaEventQuery(ev(stop_));
  if (rc == cudaErrorNotReady) return false;
  DL_CUDA_CHECK(rc);  // a fault in the work itself surfaces here, named
  return true;
}

bool DeviceWork::host_times(double& t0_us, double& t1_us) const {
  const CudaRank& rank = cuda_rank();
  if (!started_ || !stopped_ || rank.device != device_ || !rank.epoch_event) return false;
  float since_epoch_ms = 0, duration_ms = 0;
  DL_CUDA_CHECK(cudaEventElapsedTime(&since_epoch_ms, ev(rank.epoch_event), ev(start_)));
  DL_CUDA_CHECK(cudaEventElapsedTime(&duration_ms, ev(start_), ev(stop_)));
  t0_us = event_host_us(rank.epoch_us, since_epoch_ms);
  t1_us = t0_us + static_cast<double>(duration_ms) * 1e3;
  return true;
}

void DeviceWork::reuse(std::string name) {
  name_ = std::move(name);
  started_ = stopped_ = false;
  claimed = false;
}

#else

DeviceWork::DeviceWork(std::string name) : name_(std::move(name)) {
  DL_FAIL("device timing in a build without CUDA");
}
DeviceWork::~DeviceWork() = default;
void DeviceWork::record_start(void*) {}
void DeviceWork::record_stop(void*) {}
bool DeviceWork::done() const {
  return true;
}
bool DeviceWork::host_times(double&, double&) const {
  return false;
}
void DeviceWork::reuse(std::string name) {
  name_ = std::move(name);
}

#endif

std::shared_ptr<DeviceWork> GpuTimeline::begin(const std::string& name) {
  std::shared_ptr<DeviceWork> work;
  if (!spare_.empty()) {
    work = std::move(spare_.back());
    spare_.pop_back();
    work->reuse(name);
  } else {
    work = std::make_shared<DeviceWork>(name);
  }
  work->record_start(cuda_stream());
  return work;
}

void GpuTimeline::end(std::shared_ptr<DeviceWork> work) {
  work->record_stop(cuda_stream());
  work->claimed = true;
  pending_.push_back(std::move(work));
}

void GpuTimeline::add(std::shared_ptr<DeviceWork> work) {
  if (!work || work->claimed) return;
  work->claimed = true;
  pending_.push_back(std::move(work));
}

void GpuTimeline::collect(Recorder& recorder, bool wait) {
  if (pending_.empty()) return;
  if (wait) cuda_sync();  // phases are on the rank's stream; transports' work is done when waited
  std::size_t kept = 0;
  for (auto& work : pending_) {
    if (!work->done()) {
      pending_[kept++] = std::move(work);
      continue;
    }
    SpanEvent e;
    e.lane = Lane::gpu;
    e.name = work->name();
    if (work->host_times(e.t0, e.t1)) recorder.span(std::move(e));
    if (work.use_count() == 1 && spare_.size() < kSpareWork && work->device() == cuda_rank().device)
      spare_.push_back(std::move(work));
  }
  pending_.resize(kept);
}

}  // namespace distlab
