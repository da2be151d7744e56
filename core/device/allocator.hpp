// allocator.hpp — where memory lives and how it is allocated.
//
// CPU memory is 64-byte aligned host memory. CUDA memory (when built with CUDA) comes from
// cudaMalloc, never managed memory. Every allocation goes through here so the memory ledger
// can charge it (see memory_ledger.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "core/base/world.hpp"

namespace distlab {

// CPU blocks of 64 KiB and more are kept, per thread, for the next allocation of the same
// size (up to 1 GiB per thread): a collective that allocates its workspace in every call then
// pays no fresh page faults after the first, as a library with preallocated buffers would.
// GPU blocks are kept likewise, per rank (up to 4 GiB), since cudaFree synchronizes the device:
// ranks sharing a GPU would wait on each other at every free. A cudaMalloc that runs out of
// memory gives the cached blocks back and tries once more.
void* device_alloc(Device device, std::size_t bytes);
void device_free(Device device, void* ptr, std::size_t bytes) noexcept;
// Frees the GPU blocks the calling thread's rank keeps (cuda_unbind_rank, after its streams
// drained).
void release_device_blocks() noexcept;

// Memory that messages still in flight name: another rank's thread may copy into it or out of
// it until the message is done or cancelled. The in-process runtime installs one per rank
// thread; device_free then holds back a block that is still in flight (a rank unwinding from
// an exception frees buffers its posted receives name) until release_held_blocks(), which the
// rank calls once its messages are cancelled or done.
class InFlight {
 public:
  virtual ~InFlight() = default;
  virtual bool in_flight(const void* ptr, std::size_t bytes) const = 0;
};
void set_in_flight(const InFlight* guard) noexcept;  // for the calling thread; nullptr: none
void release_held_blocks() noexcept;

// Copies between any two places (host or device) and returns when the copy is done; on a rank
// bound to a GPU the copy is ordered after the work already on the rank's stream. The CPU
// build only knows host memory.
void device_copy(void* dst, Device dst_device, const void* src, Device src_device,
                 std::size_t bytes);
// Zero bytes: memset on the CPU, cudaMemsetAsync on the rank's stream on a GPU.
void device_zero(Device device, void* ptr, std::size_t bytes);

// What CUDA answers on this machine, asked once per process. No driver at all (no libcuda: a
// machine without GPU) or no device is "no device"; any other error (a driver older than the
// runtime, a device that fails to start) is a setup failure, kept apart so that it is reported
// as what it is and never as "no GPU here".
struct CudaProbe {
  int devices = 0;
  std::string failure;     // a setup failure, in CUDA's words with the versions; "" otherwise
  int driver_version = 0;  // CUDA's code: 13000 is 13.0; 0 when no driver is installed
  int runtime_version = 0;
  // No GPU here (also in a build without CUDA), as against CUDA that does not start.
  bool no_device() const { return devices == 0 && failure.empty(); }
};
const CudaProbe& cuda_probe();
// How cuda_probe() reads CUDA's answer: cudaGetDeviceCount's error and count, and the versions.
CudaProbe classify_cuda(int error, int count, int driver_version, int runtime_version);
std::string cuda_version_text(int code);  // 13000 -> "13.0"

// Number of CUDA devices that answer; 0 in a build without CUDA, on a machine without one, or
// when CUDA fails to start (cuda_probe() says why).
int cuda_device_count();

// Free bytes on CUDA device `device` (cudaMemGetInfo); -1 where that cannot be asked (no CUDA
// in this build, or the device does not answer).
double cuda_free_bytes(int device);

// True when this build was compiled with CUDA support.
bool built_with_cuda();

// Resolves --device auto|cpu|cuda for this build and machine; throws UsageError with a
// sentence that says why cuda cannot be used.
Device resolve_device(const std::string& requested);

}  // namespace distlab
