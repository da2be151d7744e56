// runtime.hpp: Lesson::run end to end on thread ranks — exit statuses, the report hook's
// RunResult (steps and traffic counted from the messages), and the trace it writes.
#include "catch.hpp"

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/collectives/all_reduce_reduce_broadcast.hpp"
#include "core/runtime/data.hpp"
#include "core/runtime/runtime.hpp"
#include "core/runtime/trace_counts.hpp"
#include "core/trace/reader.hpp"

using namespace distlab;

namespace {

int run_lesson(Lesson& lesson, std::vector<std::string> args,
               const std::function<void(Comm&)>& body) {
  std::vector<std::string> all = {"lesson"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  return lesson.run(static_cast<int>(argv.size()), argv.data(), body);
}

LessonInfo info() {
  return {"99", "unit", "a lesson made by the unit tests", 3, 10};
}

// Every rank all-reduces its input and checks the sum.
void all_reduce_body(Comm& comm, std::uint64_t length) {
  auto data = comm.alloc<std::int64_t>(length, Category::data);
  fill_input(data.view(), 42, comm.rank());
  coll::all_reduce_reduce_broadcast(comm, data.view());
  bool ok = true;
  for (std::uint64_t i = 0; i < length; ++i) {
    std::int64_t want = 0;
    for (int r = 0; r < comm.size(); ++r) want += input_value<std::int64_t>(42, r, i);
    ok = ok && data[i] == want;
  }
  comm.check("sum", ok);
}

}  // namespace

TEST_CASE("runtime: a run whose checks pass exits 0, the report sees steps and traffic",
          "[runtime]") {
  Lesson lesson(info());
  int steps = -1, world = -1;
  std::vector<RankTraffic> reduce, bcast, everything;
  lesson.on_report([&](RunResult& r) {
    world = r.world.size;
    steps = r.steps();
    reduce = r.traffic(1, 2);
    bcast = r.traffic(3, 4);
    everything = r.traffic();
    r.check("report check", true);
  });
  const int code = run_lesson(lesson, {"--no-trace", "--size", "10"},
                              [&](Comm& comm) { all_reduce_body(comm, 10); });
  CHECK(code == 0);
  CHECK(world == 3);
  CHECK(steps == 4);  // 2(N-1)
  REQUIRE(reduce.size() == 3);
  CHECK(reduce[0].bytes_recv == 2 * 10 * 8);
  CHECK(reduce[0].msgs_recv == 2);
  CHECK(reduce[0].bytes_sent == 0);
  CHECK(reduce[0].steps == 2);
  CHECK(reduce[1].bytes_sent == 80);
  CHECK(reduce[1].steps == 1);
  CHECK(bcast[0].bytes_sent == 160);
  CHECK(bcast[0].msgs_sent == 2);
  CHECK(bcast[2].bytes_recv == 80);
  CHECK(everything[0].bytes_sent + everything[0].bytes_recv == 320);
  CHECK(everything[0].steps == 4);
  CHECK(everything[0].comm_seconds >= 0);
}

TEST_CASE("runtime: a failed check exits 1", "[runtime]") {
  Lesson lesson(info());
  CHECK(run_lesson(lesson, {"--no-trace"},
                   [](Comm& comm) { comm.check("wrong", comm.rank() != 1); }) == 1);
}

TEST_CASE("runtime: a failed report check exits 1", "[runtime]") {
  Lesson lesson(info());
  lesson.on_report([](RunResult& r) { r.check("formula", false, "off by one"); });
  CHECK(run_lesson(lesson, {"--no-trace"}, [](Comm& comm) { comm.check("fine", true); }) == 1);
}

TEST_CASE("runtime: a run with no checks at all is not verified", "[runtime]") {
  Lesson lesson(info());
  CHECK(run_lesson(lesson, {"--no-trace"}, [](Comm&) {}) == 1);
}

TEST_CASE("runtime: --inject-fault corrupts the last rank, and the check catches it", "[runtime]") {
  Lesson lesson(info());
  std::atomic<int> faulty{0};
  const int code =
      run_lesson(lesson, {"--no-trace", "--inject-fault", "--ranks", "4"}, [&](Comm& comm) {
        if (comm.inject_fault()) faulty += 1 + comm.rank();
        comm.check("no fault", !comm.inject_fault());
      });
  CHECK(code == 1);
  CHECK(faulty == 4);  // rank 3 only
}

TEST_CASE("runtime: an exception on a rank exits 1", "[runtime]") {
  Lesson lesson(info());
  CHECK(run_lesson(lesson, {"--no-trace"}, [](Comm& comm) {
          if (comm.rank() == 2) throw std::runtime_error("on purpose");
          comm.barrier();
          comm.check("x", true);
        }) == 1);
}

TEST_CASE("runtime: a deadlock exits 3 from the wait-for graph, long before --deadlock-timeout",
          "[runtime]") {
  Lesson lesson(info());
  const auto t0 = std::chrono::steady_clock::now();
  const int code = run_lesson(lesson, {"--no-trace", "--ranks", "2", "--deadlock-timeout", "30"},
                              [](Comm& comm) {
                                auto b = comm.alloc<float>(1, Category::data);
                                comm.recv(b.view(), 1 - comm.rank(), 0);
                              });
  CHECK(code == 3);
  CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 10.0);
}

TEST_CASE("runtime: bad options exit 2 before any rank starts", "[runtime]") {
  std::atomic<int> bodies{0};
  auto body = [&](Comm&) { ++bodies; };
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--size", "4X"},
                                             {"--device", "gpu"},
                                             {"--device", "cuda"},
                                             {"--deadlock-timeout", "0"},
                                             {"--ranks", "0"},
                                             {"--transport", "mpi"},
                                             {"--no-such-option"}}) {
    INFO(args[0]);
    Lesson lesson(info());
    CHECK(run_lesson(lesson, args, body) == 2);
  }
  CHECK(bodies == 0);
}

TEST_CASE("runtime: on_world can refuse a world with a usage error (exit 2)", "[runtime]") {
  Lesson lesson(info());
  int seen = 0;
  lesson.on_world([&](const World& w) {
    seen = w.size;
    if (w.size > 4) throw UsageError("at most 4 ranks");
  });
  CHECK(run_lesson(lesson, {"--no-trace", "--ranks", "5"}, [](Comm&) {}) == 2);
  CHECK(seen == 5);
}

TEST_CASE("runtime: a UsageError thrown by a rank exits 2", "[runtime]") {
  Lesson lesson(info());
  CHECK(run_lesson(lesson, {"--no-trace"}, [](Comm& comm) {
          if (comm.rank() == 0) throw UsageError("no");
        }) == 2);
}

TEST_CASE("runtime: --help exits 0 without running", "[runtime]") {
  Lesson lesson(info());
  bool ran = false;
  CHECK(run_lesson(lesson, {"--help"}, [&](Comm&) { ran = true; }) == 0);
  CHECK_FALSE(ran);
}

TEST_CASE("runtime: the trace a verified run writes holds every invariant", "[runtime][trace]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("distlab_rt_" + std::to_string(::getpid()));
  const std::string path = (dir / "run.json").string();
  Lesson lesson(info());
  lesson.set_algorithm("reduce+broadcast");
  lesson.set_metadata("note", "\"hello\"");
  const int code = run_lesson(lesson, {"--trace", path, "--ranks", "4", "--size", "7"},
                              [&](Comm& comm) { all_reduce_body(comm, 7); });
  CHECK(code == 0);
  const LoadedTrace t = load_trace(path);
  std::string problems;
  for (const auto& p : check_invariants(t)) problems += p + "\n";
  INFO(problems);
  CHECK(problems.empty());
  CHECK(t.world_size == 4);
  CHECK(t.verified);
  CHECK(t.checks == 4);
  CHECK(t.algorithm == "reduce+broadcast");
  CHECK(t.lesson == "99_unit");
  std::size_t flows = 0;
  for (const auto& f : t.flows) flows += f.start;
  CHECK(flows == 6);
  std::filesystem::remove_all(dir);
}

TEST_CASE("runtime: --break switches a declared bug on for its run only", "[runtime]") {
  SECTION("on: every rank sees it, and a check it breaks fails the run") {
    Lesson lesson(info());
    lesson.add_break("off-by-one", "the unit test's bug");
    std::atomic<int> seen{0};
    CHECK(run_lesson(lesson, {"--no-trace", "--break", "off-by-one"}, [&](Comm& comm) {
            if (broken("off-by-one")) ++seen;
            comm.check("no bug", !broken("off-by-one"));
          }) == 1);
    CHECK(seen == 3);
    CHECK_FALSE(broken("off-by-one"));  // the switch ends with the run
  }
  SECTION("off unless asked for, and only by its own name") {
    Lesson lesson(info());
    lesson.add_break("off-by-one", "the unit test's bug");
    CHECK(run_lesson(lesson, {"--no-trace"},
                     [](Comm& comm) { comm.check("no bug", !broken("off-by-one")); }) == 0);
  }
  SECTION("--break list prints the names and runs nothing") {
    Lesson lesson(info());
    lesson.add_break("a", "one");
    lesson.add_break("b", "two");
    bool ran = false;
    CHECK(run_lesson(lesson, {"--break", "list"}, [&](Comm&) { ran = true; }) == 0);
    CHECK_FALSE(ran);
  }
  SECTION("an unknown name, or a lesson with none, is a usage error") {
    Lesson with(info());
    with.add_break("a", "one");
    CHECK(run_lesson(with, {"--no-trace", "--break", "b"}, [](Comm&) {}) == 2);
    Lesson without(info());
    CHECK(run_lesson(without, {"--no-trace", "--break", "a"}, [](Comm&) {}) == 2);
  }
}

TEST_CASE("runtime: the median of a phase's times is the middle one, the upper of two middles",
          "[runtime]") {
  CHECK(median({}) == 0);
  CHECK(median({3.0}) == 3.0);
  CHECK(median({5.0, 1.0, 4.0}) == 4.0);
  CHECK(median({4.0, 1.0, 3.0, 2.0}) == 3.0);  // sorted 1 2 3 4: the upper middle
  CHECK(median({2.0, 2.0, 9.0, 1.0, 2.0}) == 2.0);
}
