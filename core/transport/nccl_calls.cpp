// nccl_calls.cpp — the NCCL calls every NCCL user shares (nccl_calls.hpp).
#include "core/transport/nccl_calls.hpp"

#include <fmt/format.h>
#include <nccl.h>

#include <dlfcn.h>

#include <cstring>

#include "core/base/check.hpp"
#include "core/device/cuda_check.hpp"
#include "core/device/device_timing.hpp"
#include "core/transport/transport.hpp"

namespace distlab {

namespace {

ncclComm_t nc(void* c) {
  return static_cast<ncclComm_t>(c);
}

std::string nccl_text(void* comm, ncclResult_t rc) {
  const char* last = ncclGetLastError(nc(comm));
  return last && *last ? fmt::format("{} ({})", ncclGetErrorString(rc), last)
                       : ncclGetErrorString(rc);
}

}  // namespace

void nccl_check_queued(void* comm, int result, const char* call) {
  const auto rc = static_cast<ncclResult_t>(result);
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("{} failed: {}", call, nccl_text(comm, rc)));
}

void nccl_settle(void* comm, int result, const char* call, Transport& waiter) {
  const auto rc = static_cast<ncclResult_t>(result);
  if (rc == ncclSuccess) return;
  if (rc != ncclInProgress) throw Error(fmt::format("{} failed: {}", call, nccl_text(comm, rc)));
  waiter.wait_until(
      [&] {
        ncclResult_t state = ncclSuccess;
        DL_NCCL_CHECK(ncclCommGetAsyncError(nc(comm), &state));
        if (state == ncclInProgress) return false;
        if (state != ncclSuccess)
          throw Error(fmt::format("{} failed: {}", call, nccl_text(comm, state)));
        return true;
      },
      call);
}

bool nccl_done(void* comm, const DeviceWork& work) {
  ncclResult_t state = ncclSuccess;
  DL_NCCL_CHECK(ncclCommGetAsyncError(nc(comm), &state));
  if (state != ncclSuccess && state != ncclInProgress)
    throw Error(fmt::format("NCCL failed during {}: {}", work.name(), nccl_text(comm, state)));
  return work.done();
}

void nccl_group(void* comm, Transport& waiter, const std::function<void()>& calls) {
  nccl_group(std::vector<void*>{comm}, waiter, calls);
}

void nccl_group(const std::vector<void*>& comms, Transport& waiter,
                const std::function<void()>& calls) {
  DL_NCCL_CHECK(ncclGroupStart());
  try {
    calls();
  } catch (...) {
    // Every ncclGroupStart is ended, also when a call in the group failed: an open group would
    // swallow this thread's later NCCL calls (the communicator's finalize at the end).
    ncclGroupEnd();
    throw;
  }
  const ncclResult_t rc = ncclGroupEnd();
  if (comms.empty()) {
    DL_NCCL_CHECK(rc);
    return;
  }
  for (void* comm : comms) nccl_settle(comm, rc, "ncclGroupEnd", waiter);
}

void nccl_wait(void* comm, const DeviceWork& work, const std::string& what, Transport& waiter) {
  if (!nccl_done(comm, work)) waiter.wait_until([&] { return nccl_done(comm, work); }, what);
}

void* nccl_init_comm(int size, int rank, const void* unique_id, Transport& waiter) {
  ncclUniqueId id;
  std::memcpy(&id, unique_id, sizeof id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // no NCCL call may hang the host: waits poll (nccl_calls.hpp)
  ncclComm_t c = nullptr;
  const ncclResult_t rc = ncclCommInitRankConfig(&c, size, id, rank, &config);
  try {
    nccl_settle(c, rc, "ncclCommInitRankConfig", waiter);
  } catch (...) {
    // Half made (a peer that never came, two ranks on one GPU, the run aborted): abort ends it
    // without waiting for the other ranks, which destroy would.
    if (c) ncclCommAbort(c);
    throw;
  }
  return c;
}

int nccl_runtime_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return 0;
  return v;
}

int nccl_build_version() {
  return NCCL_VERSION_CODE;
}

std::string nccl_version_text(int code) {
  // From 2.9 on the code is X*10000 + Y*100 + Z; before it, X*1000 + Y*100 + Z.
  if (code >= 20900) return fmt::format("{}.{}.{}", code / 10000, code / 100 % 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code / 100 % 10, code % 100);
}

void* nccl_function(const char* name, int since) {
  if (nccl_runtime_version() < since) return nullptr;
  return dlsym(RTLD_DEFAULT, name);
}

}  // namespace distlab
