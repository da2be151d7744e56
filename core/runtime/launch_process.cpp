// launch_process.cpp — a rank's life in a run of one process per rank (under mpirun, or distlab's
// launcher over Gloo): the body, its failure ending the run, its log gathered and reported.
#include <fmt/format.h>

#include <new>
#include <stdexcept>

#include "core/base/check.hpp"
#include "core/base/clock.hpp"
#include "core/runtime/launch.hpp"

namespace distlab {

int run_rank_process(const World& world, Transport& transport, const ProcessControl& control,
                     const Options& options, const std::string& number,
                     const std::function<void(Comm&)>& body,
                     const std::function<int(RunResult&)>& finish) {
  Comm comm(world, transport, options.verbose);
  comm.set_inject_fault(options.inject_fault);
  RankLog& log = comm.recorder().log();
  log.host = control.host;
  log.clock_offset_us = control.clock_offset_us;
  log.clock_error_us = control.clock_error_us;
  log.t_start = now_us();
  const int rank = world.rank;
  try {
    body(comm);
    comm.finish_device_trace();
  } catch (const UsageError& e) {
    control.abort_all(fmt::format("lesson {}: {}", number, e.what()), 2);
  } catch (const std::bad_alloc&) {
    control.abort_all(fmt::format("lesson {}: {}", number, out_of_memory(rank)), 2);
  } catch (const std::length_error&) {
    control.abort_all(fmt::format("lesson {}: {}", number, out_of_memory(rank)), 2);
  } catch (const std::exception& e) {
    control.abort_all(fmt::format("lesson {}: rank {} failed: {}", number, rank, e.what()), 1);
  }
  log.t_end = now_us();
  log.peak = comm.ledger().peaks();
  log.peak_total = comm.ledger().peak_total();
  comm.transport().finished();
  int code = 0;
  try {
    control.barrier();
    auto parts = control.gather_bytes(serialize(log), 0);
    if (rank == 0) {
      RunResult result;
      result.world = world;
      result.world.rank = 0;
      for (const auto& p : parts) result.logs.push_back(deserialize(p));
      align_clocks(result.logs);
      code = finish(result);
    }
    code = control.broadcast_int(code, 0);
  } catch (const std::exception& e) {
    control.abort_all(
        fmt::format("lesson {}: rank {} failed at the end: {}", number, rank, e.what()), 1);
  }
  return code;
}

}  // namespace distlab
