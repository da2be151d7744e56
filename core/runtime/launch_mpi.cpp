// launch_mpi.cpp — one process per rank under mpirun: MPI for the control traffic, and with
// --device cuda the GPU transport over it (NCCL, or staged through host memory).
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <new>
#include <optional>
#include <random>
#include <stdexcept>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/runtime/launch.hpp"

#ifdef DISTLAB_HAVE_MPI
#include <mpi.h>

#include "core/transport/mpi.hpp"
#include "core/transport/open_mpi_gpu.hpp"
#include "core/transport/shm.hpp"
#endif
#include <unistd.h>

namespace distlab {

int launch_mpi(int& argc, char**& argv, const World& world, const Options& options,
               const std::string& number, const std::function<void(Comm&)>& body,
               const std::function<int(RunResult&)>& finish) {
#ifdef DISTLAB_HAVE_MPI
  MPI_Init(&argc, &argv);
  // Simulated (SMPI): this rank's timestamps are the simulated cluster's time. That time stands
  // still while a rank computes, so each reading is at least a nanosecond after the last: the
  // rank's events keep the order they happened in (the trace binds each flow to a slice by time).
  if constexpr (kSimulatedBuild)
    thread_clock_us = [] {
      static double last = -1;  // each rank has its own copy of the program (smpirun dlopens it)
      last = std::max(MPI_Wtime() * 1e6, last + 1e-3);
      return last;
    };
  int code = 0;
  {
    MpiTransport mpi(options.deadlock_timeout);
    World w = world;
    w.rank = mpi.rank();
    w.size = mpi.size();
    // --device cuda: bind the GPU first (NCCL starts on it), then open the GPU transport over
    // MPI. MPI itself still carries the control traffic: clock offsets, reports, logs.
    std::optional<CudaBinding> gpu;
    std::unique_ptr<Transport> gpu_transport;
    // --device auto resolves in each process: all must agree, or some would wait forever in
    // the GPU setup below for ranks that skip it.
    const int on_gpu = w.device == Device::cuda;
    int gpu_everywhere = 0, gpu_anywhere = 0;
    MPI_Allreduce(&on_gpu, &gpu_everywhere, 1, MPI_INT, MPI_MIN, mpi.comm());
    MPI_Allreduce(&on_gpu, &gpu_anywhere, 1, MPI_INT, MPI_MAX, mpi.comm());
    if (gpu_everywhere != gpu_anywhere) {
      if (w.rank == 0)
        fmt::print(stderr,
                   "distlab lesson {}: --device {}: some ranks found a GPU and some did not; use "
                   "--device cpu, "
                   "or run where every rank has one\n",
                   number, options.device);
      code = 2;
    } else if (w.device == Device::cuda) {
      try {
        gpu.emplace(w.device, launcher_local_rank(), false);
        gpu_transport = open_mpi_gpu_transport(mpi, options.transport);
        w.transport = gpu_transport->name();
      } catch (const UsageError& e) {
        // Every rank decided alike from the same numbers: rank 0 says why, all end cleanly.
        if (w.rank == 0) fmt::print(stderr, "distlab lesson {}: {}\n", number, e.what());
        code = 2;
      } catch (const std::exception& e) {
        MpiTransport::abort_all(
            fmt::format("lesson {}: rank {} failed: {}", number, w.rank, e.what()), 1);
      }
    }
    // --transport shm: messages through shared memory, MPI still the control traffic.
    std::unique_ptr<ShmTransport> shm;
    if (code == 0 && w.device == Device::cpu && options.transport == "shm") {
      ShmSetup setup;
      setup.rank = w.rank;
      setup.size = w.size;
      // Rank 0's pid (a later run removes the name if that process has ended) and a number
      // of its own: a container reuses pids.
      const int pid = mpi.broadcast_int(int(::getpid()), 0);
      const int nonce = mpi.broadcast_int(int(std::random_device{}() & 0x7fffffff), 0);
      setup.name = fmt::format("/distlab-mpi-{}-{}", pid, nonce);
      setup.deadlock_timeout_s = options.deadlock_timeout;
      try {
        shm = std::make_unique<ShmTransport>(setup, mpi, [&] { mpi.barrier(); });
        w.transport = shm->name();
      } catch (const std::exception& e) {
        MpiTransport::abort_all(fmt::format("lesson {}: rank {}: {}", number, w.rank, e.what()), 1);
      }
    }
    if (code == 0) {
      ProcessControl control;
      control.host = mpi.host();
      const ClockOffset clock = mpi.clock_offset();
      control.clock_offset_us = clock.offset_us;
      control.clock_error_us = clock.error_us;
      control.barrier = [&] { mpi.barrier(); };
      control.gather_bytes = [&](const std::vector<char>& mine, int root) {
        return mpi.gather_bytes(mine, root);
      };
      control.broadcast_int = [&](int value, int root) { return mpi.broadcast_int(value, root); };
      control.abort_all = [](const std::string& message, int exit_code) {
        MpiTransport::abort_all(message, exit_code);
      };
      Transport& transport = gpu_transport ? *gpu_transport
                             : shm         ? static_cast<Transport&>(*shm)
                                           : static_cast<Transport&>(mpi);
      code = run_rank_process(w, transport, control, options, number, body, finish);
    }
    gpu_transport.reset();  // before the GPU is unbound: NCCL ends on it
  }
  MPI_Finalize();
  return code;
#else
  (void)argc, (void)argv, (void)world, (void)options, (void)body, (void)finish;
  fmt::print(stderr, "distlab lesson {}: this build has no MPI support\n", number);
  return 2;
#endif
}

}  // namespace distlab
