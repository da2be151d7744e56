// launch.hpp — how a lesson's ranks start, inside the runtime layer: the launcher's environment,
// one thread per rank in this process (launch_threads.cpp), or one process per rank under mpirun
// (launch_mpi.cpp) or distlab's launcher (launch_gloo.cpp), both through launch_process.cpp.
// Lesson::run (lesson.cpp) picks one; lessons never call these.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/base/world.hpp"
#include "core/comm/comm.hpp"
#include "core/device/cuda_context.hpp"
#include "core/runtime/options.hpp"
#include "core/runtime/runtime.hpp"
#include "core/trace/recorder.hpp"

namespace distlab {

// --- the launcher's environment (launcher.cpp) --------------------------------------------

// An environment variable's value; nullptr when it is unset or empty.
const char* env_text(const char* name);
// The first of `names` that is set, as an int; `fallback` when none is.
int env_int(std::initializer_list<const char*> names, int fallback);
// This machine's name ("" when it has none): every rank's log carries it.
std::string host_name();

// What a rank that ran out of memory says (std::bad_alloc, or a container asked for more than
// it can hold): the check before the run let it through, so the estimate was short
// (memory_plan.cpp).
std::string out_of_memory(int rank);

// With --device cuda, the rank's GPU and streams for the body's lifetime (cuda_context.hpp).
// `gpu_rank` picks the GPU: the rank in-process, the rank on its node under mpirun.
// In-process ranks on several GPUs also open peer access, so their copies go GPU to GPU.
class CudaBinding {
 public:
  CudaBinding(Device device, int gpu_rank, bool in_process) {
    if (device != Device::cuda) return;
    cuda_bind_rank(gpu_rank);
    bound_ = true;
    if (in_process) cuda_enable_peer_access();
  }
  ~CudaBinding() {
    if (bound_) cuda_unbind_rank();
  }
  CudaBinding(const CudaBinding&) = delete;
  CudaBinding& operator=(const CudaBinding&) = delete;

 private:
  bool bound_ = false;
};

// --- in-process ranks (launch_threads.cpp) ---------------------------------------------------

// Every rank of `world` as a thread of this process: their logs, and how the run ended.
struct ThreadRun {
  std::vector<RankLog> logs;
  bool failed = false;
  std::string failure;
  int exit_code = 0;
};
ThreadRun launch_threads(const World& world, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s, bool verbose, bool inject_fault);

// --- one process per rank (launch_mpi.cpp) ----------------------------------------------------

// Under mpirun: MPI_Init; with --device cuda the rank's GPU and the transport over it; the body;
// every rank's log gathered on rank 0, which `finish` reports; MPI_Finalize. Returns the exit
// code, the same on every rank. `number` is the lesson's, for the messages.
int launch_mpi(int& argc, char**& argv, const World& world, const Options& options,
               const std::string& number, const std::function<void(Comm&)>& body,
               const std::function<int(RunResult&)>& finish);

// Under distlab's launcher (./distlab lesson NN --procs N): the Gloo transport from the
// environment's rendezvous, the body, the logs gathered and reported as under mpirun.
int launch_gloo(const World& world, const Options& options, const std::string& number,
                const std::function<void(Comm&)>& body,
                const std::function<int(RunResult&)>& finish);

// --- what every process-per-rank launch shares (launch_process.cpp) ---------------------------

// The control traffic of a run of one process per rank: MPI's or Gloo's.
struct ProcessControl {
  std::string host;
  double clock_offset_us = 0, clock_error_us = 0;  // Cristian's estimate and its bound
  std::function<void()> barrier;  // polled: a rank blocked elsewhere is reported, not waited on
  std::function<std::vector<std::vector<char>>(const std::vector<char>&, int)> gather_bytes;
  std::function<int(int, int)> broadcast_int;
  std::function<void(const std::string&, int)> abort_all;  // prints, ends every process
};

// The rank's body on `transport`, its log gathered on rank 0, which `finish` reports; a rank
// that fails ends the run through control.abort_all. Returns the exit code, alike on every rank.
int run_rank_process(const World& world, Transport& transport, const ProcessControl& control,
                     const Options& options, const std::string& number,
                     const std::function<void(Comm&)>& body,
                     const std::function<int(RunResult&)>& finish);

}  // namespace distlab
