# Lessons on simulated clusters (SimGrid's SMPI; docs/clusters.md), label sim. sim.build builds
# the smpi preset once (a fixture); every run goes through the front, as a student types it:
# ./distlab lesson NN --sim PLATFORM --ranks N. Included from tests/CMakeLists.txt.

set(sim_out ${CMAKE_CURRENT_BINARY_DIR}/sim-runs)
file(MAKE_DIRECTORY ${sim_out})
set(front ${CMAKE_SOURCE_DIR}/distlab)

# Not serial: the other tests (mostly sleeping ranks and short runs) go on beside its compile, as
# beside lesson 15's below, which saves CI its two minutes alone; COST starts it first.
add_test(NAME sim.build COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim_build.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(sim.build PROPERTIES FIXTURES_SETUP smpi LABELS sim TIMEOUT 1800 COST 1000
                                          SKIP_RETURN_CODE 77)

# distlab_sim_test(NAME EXIT SECONDS PATTERNS... -- ARGS...): ./distlab lesson ARGS must exit
# with EXIT within SECONDS and print every pattern.
function(distlab_sim_test name)
  add_test(NAME sim.${name} COMMAND bash ${expect_failure} ${ARGN})
  set_tests_properties(sim.${name} PROPERTIES FIXTURES_REQUIRED smpi LABELS sim TIMEOUT 300
                                              RESOURCE_LOCK smpi_tmp)
endfunction()

# The platforms, and a name that is not one: one sentence, exit 2.
distlab_sim_test(list 0 10 "^cluster-1gbe +256 hosts" "^cluster-10gbe " "^fat-tree-64 +64 hosts"
                 "^dgx-pair +2 nodes of 4 GPUs" -- ${front} lesson 06 --sim list)
distlab_sim_test(bad-platform 2 10 "there is no platform 'cluster-99gbe' in platforms/"
                 -- ${front} lesson 06 --sim cluster-99gbe --ranks 4)
distlab_sim_test(too-many-ranks 2 10 "platform dgx-pair has 8 hosts; --ranks 9 needs as many"
                 -- ${front} lesson 06 --sim dgx-pair --ranks 9)

# Lesson 01's ping-pong on 1 GbE: its fitted line must be the platform's (alpha = the route's
# latency, beta = 1 / its bandwidth, within 10%), saved under the platform's own key.
distlab_sim_test(01.cluster-1gbe 0 120 ": verified \\(" "the platform cluster-1gbe: alpha 50.0 us, 1/beta 0.125 GB/s; the fit's ratio"
                 "saved as \"sim-cluster-1gbe\""
                 -- ${front} lesson 01 --sim cluster-1gbe --ranks 2 --size 4M
                 --calibration ${sim_out}/calibration-sim.txt --trace ${sim_out}/01_cluster-1gbe.json)

# Lesson 06 on one switch, 1 MiB buffers: every algorithm's simulated time is checked against
# its formula (the contended one for parallel and sequential); the trace plays simulated time.
set(t06 ${sim_out}/06_cluster-10gbe.json)
distlab_sim_test(06.cluster-10gbe 0 120 ": verified \\(" "ring_chunked .*  within 10%" "parallel .*  within 10%"
                 "sequential .*  within 10%" "contended one, \\(N-1\\) n beta"
                 "8 ranks, mpi, cpu"
                 -- ${front} lesson 06 --sim cluster-10gbe --ranks 8 --size 256K --trace ${t06})
# Lesson 07 on 1 GbE, 6 ranks (not a power of two: the fold's extra steps are in the formula).
distlab_sim_test(07.cluster-1gbe 0 120 ": verified \\(" "recursive_halving .*  within 10%"
                 "recursive_doubling .*  within 10%"
                 -- ${front} lesson 07 --sim cluster-1gbe --ranks 6 --size 256K
                 --trace ${sim_out}/07_cluster-1gbe.json)

# Lesson 15 on two 4-GPU nodes: the platform's grouping gives the hierarchical all-reduce its
# nodes of 4; the bytes between nodes are checked, and the two-level model printed beside the
# simulated times. ./distlab builds the lesson for smpi on first use, here rather than in the
# serial sim.build, so that other tests run beside its compile.
distlab_sim_test(15.dgx-pair 0 180 ": verified \\(" "G = 4 ranks per node \\(the simulated platform's\\)"
                 "the two-level model on dgx-pair" "hierarchical .*2\\(M-1\\) S \\(checked\\)"
                 -- ${front} lesson 15 --sim dgx-pair --ranks 8 --size 256K --reps 2
                 --trace ${sim_out}/15_dgx-pair.json)

# Lesson 05 with a server, 1 MiB of weights: the pull and the push are checked against the
# contended formula (the server's port carries N-1 messages at once); on dgx-pair (two nodes)
# the all-reduce mode verifies and its times are a report.
distlab_sim_test(05.cluster-10gbe 0 120 ": verified \\("
                 "1 pull .*alpha \\+ \\(N-1\\) S beta  within 10%"
                 "4 push & sum .*  within 10%" "a worker's 2 S beta stays flat"
                 -- ${front} lesson 05 --sim cluster-10gbe --ranks 8 --size 512 --layers 2 --steps 3
                 --trace ${sim_out}/05_cluster-10gbe.json)
distlab_sim_test(05.dgx-pair 0 120 ": verified \\(" "dgx-pair's routes differ"
                 -- ${front} lesson 05 --sim dgx-pair --ranks 8 --mode allreduce
                 --trace ${sim_out}/05_dgx-pair.json)

# ZeRO-3 with every layer 1 MiB or more: its step and plain data parallel's checked against the
# ring model. Lesson 09 at 64 ranks on the fat tree verifies, its times a report.
distlab_sim_test(10.cluster-10gbe 0 120 ": verified \\("
                 "ZeRO-3 \\(FSDP\\) .*  within 10%" "plain data parallel .*  within 10%"
                 -- ${front} lesson 10 --sim cluster-10gbe --ranks 4 --inputs 512 --size 1024
                 --outputs 512 --steps 2 --trace ${sim_out}/10_cluster-10gbe.json)
distlab_sim_test(09.fat-tree-64 0 120 ": verified \\(" "64 ranks, mpi, cpu"
                 "fat-tree-64's routes differ"
                 -- ${front} lesson 09 --sim fat-tree-64 --ranks 64 --trace ${sim_out}/09_fat-tree-64.json)

# The probes on a simulated cluster (./distlab probe NAME --sim ...): every all-reduce against
# SMPI's MPI_Allreduce, the library calls in place and out of place, a fault that must fail;
# and the ways a run goes wrong. SMPI's MPI_Abort and deadlocks would end the run with exit 0:
# each must exit non-zero with distlab's words (a deadlock with every rank's wait, exit 3).
distlab_sim_test(probe.all_reduce 0 120 ": verified \\(" "6 ranks, mpi, cpu"
                 -- ${front} probe all_reduce --sim cluster-1gbe --ranks 6 --size 1000 --no-trace)
distlab_sim_test(probe.all_reduce-split 0 120 ": verified \\(" "12 ranks, mpi, cpu"
                 -- ${front} probe all_reduce --sim fat-tree-64 --ranks 12 --split 5 --size 13 --no-trace)
distlab_sim_test(probe.library 0 120 ": verified \\(" "3 ranks, mpi, cpu"
                 -- ${front} probe library --sim cluster-10gbe --ranks 3 --size 7 --no-trace)
distlab_sim_test(probe.inject-fault 1 120 ": FAILED \\("
                 -- ${front} probe library --sim cluster-10gbe --ranks 3 --size 7 --inject-fault --no-trace)
distlab_sim_test(deadlock 3 60 "deadlock: every rank waits and no message can move"
                 "r0 waits in recv from r1 \\(tag 7, 32 B, f32\\) since simulated t = "
                 "r3 waits in recv from r2 \\(tag 7"
                 -- ${front} probe failure --sim cluster-1gbe --ranks 4 --scenario wrong-order --no-trace)
distlab_sim_test(failure.throw 1 60 "rank 1 failed: rank 1 hit a failed check on purpose"
                 -- ${front} probe failure --sim cluster-1gbe --ranks 2 --scenario throw --no-trace)
distlab_sim_test(failure.size-mismatch 1 60 "is larger than the 16 B the receive expects"
                 -- ${front} probe failure --sim cluster-1gbe --ranks 2 --scenario size-mismatch --no-trace)

# Every simulated run's trace: its invariants (distlab_trace_check: flows bound to their
# messages' slices, spans nested, ...), and its clock marked simulated with the platform's name.
add_test(NAME sim.traces COMMAND bash -c "set -e; n=0; for t in \"$1\"/*.json; do \
  grep -q '\"clock\":\"simulated\"' \"$t\"; grep -q '\"platform\":\"' \"$t\"; \"$0\" \"$t\"; n=$((n+1)); done; \
  echo \"$n traces\"; ((n >= 6))" $<TARGET_FILE:distlab_trace_check> ${sim_out})
set_tests_properties(sim.traces PROPERTIES LABELS sim FIXTURES_REQUIRED smpi
  DEPENDS "sim.01.cluster-1gbe;sim.06.cluster-10gbe;sim.07.cluster-1gbe;sim.05.cluster-10gbe;sim.05.dgx-pair;sim.10.cluster-10gbe;sim.09.fat-tree-64")
