// launch_threads.cpp — every rank a thread of this process, talking through the thread transport.
#include <fmt/format.h>

#include <memory>
#include <new>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/device/allocator.hpp"
#include "core/device/cuda_context.hpp"
#include "core/runtime/launch.hpp"
#include "core/transport/threads.hpp"

namespace distlab {

namespace {

// Runs one rank's body and records how it ended on the hub. The way down is memory-safe: a
// rank that unwinds holds back every block its messages still name (InFlight), cancels those
// messages or waits for the copies already under way, and only then lets the blocks go.
void run_thread_rank(Comm& comm, ThreadTransport& transport, const std::function<void(Comm&)>& body,
                     ThreadHub& hub) {
  RankLog& log = comm.recorder().log();
  log.t_start = now_us();
  set_in_flight(&transport);
  transport.started();
  try {
    CudaBinding gpu(comm.device(), comm.rank(), true);
    // NCCL's finalize at unbind waits for the others while they run.
    if (comm.device() == Device::cuda)
      cuda_rank().nccl_give_up = [&hub, r = comm.rank()] {
        return hub.aborting() || hub.others_finished(r);
      };
    try {
      body(comm);
    } catch (...) {
      transport.cancel_pending();  // while the GPU is still bound: its copies end on it
      release_held_blocks();
      throw;
    }
    comm.finish_device_trace();  // the gpu lane's last spans, while the GPU is still bound
  } catch (const UsageError& e) {
    hub.fail(-1, e.what(), 2);
  } catch (const Aborted&) {
  } catch (const std::bad_alloc&) {
    hub.fail(-1, out_of_memory(comm.rank()), 2);
  } catch (const std::length_error&) {
    hub.fail(-1, out_of_memory(comm.rank()), 2);
  } catch (const std::exception& e) {
    hub.fail(comm.rank(), e.what(), 1);
  } catch (...) {
    hub.fail(comm.rank(), "an exception that is not a std::exception", 1);
  }
  transport.finished();  // cancels what is left, then counts the rank out of the wait-for graph
  release_held_blocks();
  set_in_flight(nullptr);
  log.t_end = now_us();
  log.peak = comm.ledger().peaks();
  log.peak_total = comm.ledger().peak_total();
}

}  // namespace

ThreadRun launch_threads(const World& world, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s, bool verbose, bool inject_fault) {
  // In-process ranks live on the machine's clock, also when a simulated rank (SMPI) starts them
  // for its report: its thread's clock is the simulation's until they are done.
  const auto simulated_clock = std::exchange(thread_clock_us, nullptr);
  struct Restore {
    double (*clock)();
    ~Restore() { thread_clock_us = clock; }
  } restore{simulated_clock};
  ThreadHub hub(world.size, deadlock_timeout_s);
  std::vector<std::unique_ptr<ThreadTransport>> transports;
  std::vector<std::unique_ptr<Comm>> comms;
  const std::string host = host_name();
  for (int r = 0; r < world.size; ++r) {
    transports.push_back(std::make_unique<ThreadTransport>(hub, r));
    World w = world;
    w.rank = r;
    comms.push_back(std::make_unique<Comm>(w, *transports.back(), verbose));
    comms.back()->set_inject_fault(inject_fault);
    comms.back()->recorder().log().host = host;
  }
  std::vector<std::thread> threads;
  for (int r = 0; r < world.size && !hub.failed(); ++r) {
    try {
      threads.emplace_back([&, r] {
        const auto i = static_cast<std::size_t>(r);
        run_thread_rank(*comms[i], *transports[i], body, hub);
      });
    } catch (const std::system_error& e) {  // the ranks already started see the abort and end
      hub.fail(
          -1,
          fmt::format("could not start the thread of rank {} ({}); run fewer ranks", r, e.what()),
          2);
    }
  }
  for (auto& t : threads) t.join();
  ThreadRun run;
  run.failed = hub.failed();
  run.failure = hub.failure();
  run.exit_code = hub.exit_code();
  for (auto& c : comms) run.logs.push_back(std::move(c->recorder().log()));
  return run;
}

RunResult run_in_process(int ranks, const std::function<void(Comm&)>& body,
                         double deadlock_timeout_s, Device device) {
  World world;
  world.size = ranks;
  world.device = device;
  ThreadRun run = launch_threads(world, body, deadlock_timeout_s, false, false);
  if (run.failed) throw Error(run.failure);
  RunResult result;
  result.world = world;
  result.logs = std::move(run.logs);
  return result;
}

}  // namespace distlab
