// nccl_calls.hpp — the NCCL calls every NCCL user shares, with or without MPI.
//
// The in-process library collectives (one communicator per rank thread, baseline_gpu.cpp) and
// the mpirun transport (nccl.hpp) both drive non-blocking communicators
// (ncclConfig_t.blocking = 0): a call may answer ncclInProgress, and is then polled through a
// transport's wait loop, so a rank that never arrives is reported by the deadlock report and
// never waited on forever. Nothing here needs MPI: a build without MPI (the GPU bundle) still
// has NCCL.
//
// Communicators are void* here (ncclComm_t), so this header needs no NCCL headers.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace distlab {

class Transport;
class DeviceWork;

// After a call on a non-blocking communicator: ncclSuccess passes, ncclInProgress is polled
// through `waiter` until NCCL has enqueued the work, anything else throws Error naming `call`,
// NCCL's error string and its last message.
void nccl_settle(void* comm, int result, const char* call, Transport& waiter);
// Inside a group: ncclSuccess and ncclInProgress pass (the group's end settles them).
void nccl_check_queued(void* comm, int result, const char* call);
// ncclGroupStart, `calls` (NCCL calls checked with nccl_check_queued), ncclGroupEnd settled
// through `waiter`: one launch. The group is ended also when a call throws.
void nccl_group(void* comm, Transport& waiter, const std::function<void()>& calls);
// The same for calls on several communicators (one group spans them): each is settled.
void nccl_group(const std::vector<void*>& comms, Transport& waiter,
                const std::function<void()>& calls);
// Polls until `work` (enqueued after NCCL calls on `comm`) is done; a failing communicator
// throws Error. Reported as a wait in `what` after the deadlock timeout.
void nccl_wait(void* comm, const DeviceWork& work, const std::string& what, Transport& waiter);
// True once `work` is done; throws Error when the communicator has failed.
bool nccl_done(void* comm, const DeviceWork& work);

// Makes a non-blocking communicator of `size` ranks (this one is `rank`) from `unique_id`
// (a ncclUniqueId's bytes) and waits for it through `waiter`. A communicator whose
// initialisation fails is aborted before the Error is thrown: nothing is left half made.
void* nccl_init_comm(int size, int rank, const void* unique_id, Transport& waiter);

// The NCCL library loaded at run time, as NCCL spells its version code (2.28.3 is 22803), and
// the version this build was compiled against. They can differ: the library is found at run
// time (a GPU machine may carry its own).
int nccl_runtime_version();
int nccl_build_version();
std::string nccl_version_text(int code);  // 22803 -> "2.28.3"
// A function of the loaded NCCL that came in version `since` (ncclScatter and ncclGather came in
// 2.28), looked up at run time so that the same binary runs on an older NCCL: nullptr there, and
// the caller takes another way. A direct call would bind the symbol and fail on load.
void* nccl_function(const char* name, int since);

}  // namespace distlab
