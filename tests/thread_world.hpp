// thread_world.hpp — in-process ranks for the unit tests, built by hand.
//
// The same wiring as Lesson::run in threads mode (launch_threads.cpp): one ThreadHub, one
// ThreadTransport and one Comm per rank, one std::thread per rank. What each rank threw is
// kept, so a test can ask which rank failed, how, and how long the run took.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/base/check.hpp"
#include "core/comm/comm.hpp"
#include "core/device/allocator.hpp"
#include "core/transport/threads.hpp"

namespace distlab::test {

struct ThreadRun {
  std::vector<RankLog> logs;        // one per rank, in rank order
  std::vector<std::string> errors;  // what each rank threw ("" none, "aborted" for Aborted)
  bool failed = false;              // the hub recorded a failure
  std::string failure;              // its text
  int exit_code = 0;                // the exit status Lesson::run would return
  double seconds = 0;               // wall time of the whole run
};

// `ranks_per_node`: the World's (0: none given, as in-process runs without --ranks-per-node).
inline ThreadRun run_ranks(int n, const std::function<void(Comm&)>& body,
                           double deadlock_timeout_s = 10.0, int ranks_per_node = 0) {
  ThreadHub hub(n, deadlock_timeout_s);
  std::vector<std::unique_ptr<ThreadTransport>> transports;
  std::vector<std::unique_ptr<Comm>> comms;
  for (int r = 0; r < n; ++r) {
    transports.push_back(std::make_unique<ThreadTransport>(hub, r));
    World w;
    w.rank = r;
    w.size = n;
    w.ranks_per_node = ranks_per_node;
    comms.push_back(std::make_unique<Comm>(w, *transports.back(), false));
  }
  ThreadRun run;
  run.errors.resize(static_cast<std::size_t>(n));
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Comm& comm = *comms[static_cast<std::size_t>(r)];
      std::string& error = run.errors[static_cast<std::size_t>(r)];
      RankLog& log = comm.recorder().log();
      log.t_start = now_us();
      ThreadTransport& transport = *transports[static_cast<std::size_t>(r)];
      transport.started();
      set_in_flight(&transport);  // the way down of launch_threads.cpp's run_thread_rank
      try {
        try {
          body(comm);
        } catch (...) {
          transport.cancel_pending();
          release_held_blocks();
          throw;
        }
      } catch (const UsageError& e) {
        error = e.what();
        hub.fail(-1, e.what(), 2);
      } catch (const Aborted&) {
        error = "aborted";
      } catch (const std::exception& e) {
        error = e.what();
        hub.fail(r, e.what(), 1);
      }
      transport.finished();
      release_held_blocks();
      set_in_flight(nullptr);
      log.t_end = now_us();
      log.peak = comm.ledger().peaks();
      log.peak_total = comm.ledger().peak_total();
    });
  }
  for (auto& t : threads) t.join();
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.failed = hub.failed();
  run.failure = hub.failure();
  run.exit_code = hub.exit_code();
  for (auto& c : comms) run.logs.push_back(std::move(c->recorder().log()));
  return run;
}

}  // namespace distlab::test
