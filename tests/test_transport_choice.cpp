// choice.hpp: which transport a run gets — NCCL only when every rank of every node
// has a GPU of its own, staging through host memory otherwise, and --transport nccl refused
// with a sentence where NCCL cannot run. Pure functions: they run here, with no GPU.
#include "catch.hpp"

#include "core/base/check.hpp"
#include "core/transport/choice.hpp"

using namespace distlab;
using Catch::Contains;

TEST_CASE("choice: one rank per GPU on every node takes NCCL without a note",
          "[transport_choice]") {
  const std::vector<NodeGpus> nodes = {{4, 4, "a"}, {4, 8, "b"}};  // more GPUs than ranks is fine
  const auto c = choose_mpi_gpu_transport("auto", nodes, true);
  CHECK(c.transport == GpuTransport::nccl);
  CHECK(c.note.empty());
  CHECK(choose_mpi_gpu_transport("nccl", nodes, true).transport == GpuTransport::nccl);
}

TEST_CASE("choice: ranks sharing a GPU stage through host memory, with one line that says why",
          "[transport_choice]") {
  // Node b runs 8 ranks on 2 GPUs: the most crowded node decides for the whole run.
  const std::vector<NodeGpus> nodes = {{4, 4, "a"}, {8, 2, "b"}, {3, 2, "c"}};
  const auto c = choose_mpi_gpu_transport("auto", nodes, true);
  CHECK(c.transport == GpuTransport::staged);
  CHECK_THAT(c.note, Contains("8 ranks share 2 GPUs on b") &&
                         Contains("NCCL needs a GPU per rank") && Contains("host memory"));
  CHECK(c.note.find('\n') == std::string::npos);
  // Two ranks on one GPU: the single GPU is named in the singular.
  CHECK_THAT(choose_mpi_gpu_transport("auto", {{2, 1, "x"}}, true).note,
             Contains("2 ranks share 1 GPU on x;"));
}

TEST_CASE("choice: the same numbers give the same choice on every rank", "[transport_choice]") {
  // Every rank passes every rank's node (repeats): the answer does not depend on who asks.
  const std::vector<NodeGpus> per_rank = {{2, 1, "a"}, {2, 1, "a"}, {2, 2, "b"}, {2, 2, "b"}};
  std::vector<NodeGpus> reversed(per_rank.rbegin(), per_rank.rend());
  const auto a = choose_mpi_gpu_transport("auto", per_rank, true);
  const auto b = choose_mpi_gpu_transport("auto", reversed, true);
  CHECK(a.transport == b.transport);
  CHECK(a.note == b.note);
  CHECK(a.transport == GpuTransport::staged);
}

TEST_CASE("choice: --transport mpi stages as asked, without a note", "[transport_choice]") {
  const auto c = choose_mpi_gpu_transport("mpi", {{4, 4, "a"}}, true);
  CHECK(c.transport == GpuTransport::staged);
  CHECK(c.note.empty());
}

TEST_CASE("choice: --transport nccl with two ranks on one GPU is a usage error that says so",
          "[transport_choice]") {
  CHECK_THROWS_AS(choose_mpi_gpu_transport("nccl", {{2, 1, "node7"}}, true), UsageError);
  CHECK_THROWS_WITH(choose_mpi_gpu_transport("nccl", {{2, 1, "node7"}}, true),
                    Contains("2 ranks share 1 GPU on node7") &&
                        Contains("NCCL refuses two ranks") && Contains("at most 1 rank per node"));
  CHECK_THROWS_WITH(choose_mpi_gpu_transport("nccl", {{4, 4, "a"}}, false),
                    Contains("this build has no NCCL"));
}

TEST_CASE("choice: a build without NCCL stages, and says so once", "[transport_choice]") {
  const auto c = choose_mpi_gpu_transport("auto", {{4, 4, "a"}}, false);
  CHECK(c.transport == GpuTransport::staged);
  CHECK_THAT(c.note, Contains("no NCCL"));
}

TEST_CASE("choice: --transport nccl needs mpirun and the GPU", "[transport_choice]") {
  CHECK_NOTHROW(check_transport_request("nccl", Mode::mpi, Device::cuda));
  CHECK_NOTHROW(check_transport_request("auto", Mode::threads, Device::cuda));
  CHECK_NOTHROW(check_transport_request("threads", Mode::threads, Device::cpu));
  CHECK_THROWS_AS(check_transport_request("nccl", Mode::threads, Device::cuda), UsageError);
  CHECK_THROWS_WITH(check_transport_request("nccl", Mode::threads, Device::cuda),
                    Contains("mpirun") && Contains("cudaMemcpyPeerAsync"));
  CHECK_THROWS_WITH(check_transport_request("nccl", Mode::mpi, Device::cpu),
                    Contains("--device cuda"));
  CHECK(std::string(to_string(GpuTransport::nccl)) == "nccl");
  CHECK(std::string(to_string(GpuTransport::staged)) == "staged");
}
