// failure_probe — a small program that goes wrong on purpose, so tests can watch distlab
// report it: a deadlock from a wrong send/recv order, an exception on one rank, a receive
// of the wrong size. Each must end every rank with a clear message and a non-zero exit.
//
//   failure_probe --scenario wrong-order --deadlock-timeout 1     (threads; or under mpirun -n 2)
#include <fmt/format.h>

#include "core/runtime.hpp"

using namespace distlab;

int main(int argc, char** argv) {
  Lesson lesson({"99", "failure_probe", "goes wrong on purpose (for the tests)", 2, 8});
  std::string scenario = "wrong-order";
  lesson.app()
      .add_option("--scenario", scenario, "wrong-order | throw | size-mismatch")
      ->check(CLI::IsMember({"wrong-order", "throw", "size-mismatch"}))
      ->capture_default_str();
  lesson.on_world([](const World& w) {
    if (w.size < 2) throw UsageError("the probe needs at least 2 ranks");
  });
  return lesson.run(argc, argv, [&](Comm& comm) {
    const int me = comm.rank(), peer = me ^ 1;
    Buffer<float> out = comm.alloc<float>(lesson.options().size, Category::data);
    Buffer<float> in = comm.alloc<float>(lesson.options().size, Category::data);
    if (peer >= comm.size()) return;
    if (scenario == "wrong-order") {
      // Both ranks receive first: each waits for a message the other has not sent yet.
      comm.recv(in.view(), peer, 7);
      comm.send(View<const float>(out.view()), peer, 7);
    } else if (scenario == "throw") {
      if (me == 1) throw Error("rank 1 hit a failed check on purpose");
      comm.recv(in.view(), peer, 7);  // rank 0 would wait forever without the abort
    } else {
      if (me == 0) comm.send(View<const float>(out.view()), 1, 7);
      else comm.recv(in.sub(0, in.size() / 2), 0, 7);
    }
    comm.check("unreachable", false);
  });
}
