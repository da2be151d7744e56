// device.hpp — where memory lives and how it is allocated.
//
// CPU memory is 64-byte aligned host memory. CUDA memory (when built with CUDA) comes from
// cudaMalloc, never managed memory. Every allocation goes through here so the memory ledger
// can charge it (see memory.hpp).
#pragma once

#include <cstddef>
#include <string>

#include "world.hpp"

namespace distlab {

// CPU blocks of 64 KiB and more are kept, per thread, for the next allocation of the same
// size (up to 1 GiB per thread): a collective that allocates its workspace in every call then
// pays no fresh page faults after the first, as a library with preallocated buffers would.
void* device_alloc(Device device, std::size_t bytes);
void device_free(Device device, void* ptr, std::size_t bytes) noexcept;

// Copies between any two places (host or device) and returns when the copy is done; on a rank
// bound to a GPU the copy is ordered after the work already on the rank's stream. The CPU
// build only knows host memory.
void device_copy(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// Zero bytes: memset on the CPU, cudaMemsetAsync on the rank's stream on a GPU.
void device_zero(Device device, void* ptr, std::size_t bytes);

// Number of CUDA devices that answer; 0 in a build without CUDA or on a machine without one.
int cuda_device_count();

// True when this build was compiled with CUDA support.
bool built_with_cuda();

// Resolves --device auto|cpu|cuda for this build and machine; throws UsageError with a
// sentence that says why cuda cannot be used.
Device resolve_device(const std::string& requested);

}  // namespace distlab
