// launch_gloo.cpp — one process per rank started by distlab's launcher (./distlab lesson NN
// --procs N): the rendezvous in the environment, messages over Gloo's TCP pairs.
#include <fmt/format.h>

#include "core/base/check.hpp"
#include "core/runtime/launch.hpp"

#ifdef DISTLAB_HAVE_GLOO
#include <filesystem>

#include "core/transport/gloo.hpp"
#include "core/transport/shm.hpp"
#endif

namespace distlab {

int launch_gloo(const World& world, const Options& options, const std::string& number,
                const std::function<void(Comm&)>& body,
                const std::function<int(RunResult&)>& finish) {
#ifdef DISTLAB_HAVE_GLOO
  std::unique_ptr<GlooTransport> gloo;
  try {
    gloo = std::make_unique<GlooTransport>(gloo_setup_from_environment(options.deadlock_timeout));
  } catch (const UsageError& e) {
    GlooTransport::abort_all(fmt::format("lesson {}: {}", number, e.what()), 2);
  } catch (const std::exception& e) {
    GlooTransport::abort_all(fmt::format("lesson {}: {}", number, e.what()), 1);
  }
  World w = world;
  w.rank = gloo->rank();
  w.size = gloo->size();
  // --transport shm, and auto where every rank runs on this host (the launcher gave none an
  // address of its own, as scripts/cluster.sh does): messages through shared memory, Gloo still
  // the control traffic. The segment is named after the rendezvous folder, which the launcher
  // removes it with.
  const bool one_host = env_text("DISTLAB_HOST") == nullptr;
  std::unique_ptr<ShmTransport> shm;
  if (options.transport == "shm" || (options.transport == "auto" && one_host)) {
    if (options.transport == "auto" && w.rank == 0)
      fmt::print(
          "distlab: {} processes on this host: messages through shared memory (--transport gloo "
          "for Gloo's TCP pairs)\n",
          w.size);
    ShmSetup setup;
    setup.rank = w.rank;
    setup.size = w.size;
    setup.name =
        "/" + std::filesystem::path(gloo_setup_from_environment(1).store).filename().string();
    setup.deadlock_timeout_s = options.deadlock_timeout;
    try {
      shm = std::make_unique<ShmTransport>(setup, *gloo, [&] { gloo->barrier(); });
    } catch (const std::exception& e) {
      GlooTransport::abort_all(fmt::format("lesson {}: rank {}: {}", number, w.rank, e.what()), 1);
    }
  }
  Transport& transport = shm ? static_cast<Transport&>(*shm) : *gloo;
  w.transport = transport.name();
  ProcessControl control;
  control.host = gloo->host();
  const ClockOffset clock = gloo->clock_offset();  // 0 where a rank shares rank 0's host
  control.clock_offset_us = clock.offset_us;
  control.clock_error_us = clock.error_us;
  control.barrier = [&] { gloo->barrier(); };
  control.gather_bytes = [&](const std::vector<char>& mine, int root) {
    return gloo->gather_bytes(mine, root);
  };
  control.broadcast_int = [&](int value, int root) { return gloo->broadcast_int(value, root); };
  control.abort_all = [](const std::string& message, int exit_code) {
    GlooTransport::abort_all(message, exit_code);
  };
  return run_rank_process(w, transport, control, options, number, body, finish);
#else
  (void)world, (void)options, (void)body, (void)finish;
  fmt::print(stderr, "distlab lesson {}: this build has no Gloo (libgloo-dev)\n", number);
  return 2;
#endif
}

}  // namespace distlab
