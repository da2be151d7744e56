// options.hpp: the options every lesson takes, parsed through CLI11 and finish_options.
#include <CLI/CLI.hpp>
#include "catch.hpp"

#include <string>
#include <vector>

#include "core/base/check.hpp"
#include "core/runtime/options.hpp"
#include "core/runtime/runtime.hpp"

using namespace distlab;
using Catch::Contains;

namespace {

// Parses args (without the program name) as a lesson would, then finishes them.
Options parse(std::vector<std::string> args, std::uint64_t default_size = 1 << 20) {
  CLI::App app("test");
  Options o;
  add_common_options(app, o, default_size, "traces/99_test.json");
  std::vector<const char*> argv = {"lesson"};
  for (auto& a : args) argv.push_back(a.c_str());
  app.parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  finish_options(o);
  return o;
}

}  // namespace

TEST_CASE("options: defaults", "[options]") {
  const Options o = parse({});
  CHECK(o.ranks == 0);
  CHECK(o.device == "auto");
  CHECK(o.transport == "auto");
  CHECK(o.size_text == "1M");
  CHECK(o.size == 1u << 20);
  CHECK(o.seed == 42);
  CHECK(o.trace_path == "traces/99_test.json");
  CHECK_FALSE(o.no_trace);
  CHECK_FALSE(o.verbose);
  CHECK(o.deadlock_timeout == 30.0);
  CHECK_FALSE(o.inject_fault);
  CHECK(parse({}, 1000).size == 1000);  // a default that is no power of two
}

TEST_CASE("options: values given on the command line", "[options]") {
  const Options o = parse({"--ranks", "3", "--device", "cpu", "--transport", "threads", "--size",
                           "4K", "--seed", "7", "--trace", "/tmp/x.json", "--verbose",
                           "--deadlock-timeout", "0.5", "--inject-fault"});
  CHECK(o.ranks == 3);
  CHECK(o.device == "cpu");
  CHECK(o.transport == "threads");
  CHECK(o.size == 4096);
  CHECK(o.seed == 7);
  CHECK(o.trace_path == "/tmp/x.json");
  CHECK(o.verbose);
  CHECK(o.deadlock_timeout == 0.5);
  CHECK(o.inject_fault);
  CHECK(parse({"--size", "1000"}).size == 1000);
  CHECK(parse({"--size", "64m"}).size == 64u << 20);
  CHECK(parse({"--no-trace"}).no_trace);
  CHECK(parse({"--trace", "", "--no-trace"}).no_trace);
}

TEST_CASE("options: a bad --size is a usage error quoting it", "[options]") {
  CHECK_THROWS_AS(parse({"--size", "4X"}), UsageError);
  CHECK_THROWS_WITH(parse({"--size", "4X"}), Contains("'4X'"));
  CHECK_THROWS_AS(parse({"--size=-4"}), UsageError);
  CHECK_THROWS_AS(parse({"--size", "lots"}), UsageError);
}

TEST_CASE("options: a bad --device or --transport is a usage error listing the choices",
          "[options]") {
  CHECK_THROWS_AS(parse({"--device", "gpu"}), UsageError);
  CHECK_THROWS_WITH(parse({"--device", "gpu"}), Contains("auto, cpu or cuda") && Contains("'gpu'"));
  CHECK_THROWS_WITH(parse({"--transport", "ucx"}),
                    Contains("auto, threads, mpi, nccl, gloo or shm") && Contains("'ucx'"));
}

TEST_CASE("options: --deadlock-timeout must be positive", "[options]") {
  CHECK_THROWS_AS(parse({"--deadlock-timeout", "0"}), UsageError);
  CHECK_THROWS_AS(parse({"--deadlock-timeout", "-1"}), UsageError);
  CHECK_THROWS_WITH(parse({"--deadlock-timeout", "0"}), Contains("--deadlock-timeout"));
  CHECK_THROWS_AS(parse({"--deadlock-timeout", "nan"}), std::exception);  // CLI11 or finish_options
}

TEST_CASE("options: an empty --trace needs --no-trace", "[options]") {
  CHECK_THROWS_WITH(parse({"--trace", ""}), Contains("--no-trace"));
}

TEST_CASE("options: CLI11 refuses --ranks out of range, non-numbers and unknown options",
          "[options]") {
  CHECK_THROWS_AS(parse({"--ranks", "0"}), CLI::ParseError);
  CHECK_THROWS_AS(parse({"--ranks", "2000"}), CLI::ParseError);
  CHECK_THROWS_AS(parse({"--ranks", "two"}), CLI::ParseError);
  CHECK_THROWS_AS(parse({"--seed", "x"}), CLI::ParseError);
  CHECK_THROWS_AS(parse({"--bogus"}), CLI::ParseError);
}

TEST_CASE("options: a Lesson declares the common options and its own", "[options]") {
  Lesson lesson({"99", "test", "a test lesson", 3, 4096});
  int root = 0;
  lesson.app().add_option("--root", root, "root");
  std::vector<const char*> argv = {"lesson", "--root", "2", "--size", "8K"};
  lesson.app().parse(static_cast<int>(argv.size()), const_cast<char**>(argv.data()));
  CHECK(root == 2);
  CHECK(lesson.options().size_text == "8K");
  CHECK(lesson.id() == "99_test");
  // The default trace path is <trace dir>/NN_name.json.
  const std::string& trace = lesson.options().trace_path;
  CHECK(trace.size() >= std::string("/99_test.json").size());
  CHECK(trace.substr(trace.size() - std::string("/99_test.json").size()) == "/99_test.json");
}
