# Lessons on simulated clusters (SimGrid's SMPI; docs/clusters.md), label sim. sim.build builds
# the smpi preset once (a fixture); every run goes through the front, as a student types it:
# ./distlab lesson NN --sim PLATFORM --ranks N. Included from tests/CMakeLists.txt.

set(sim_out ${CMAKE_CURRENT_BINARY_DIR}/sim-runs)
file(MAKE_DIRECTORY ${sim_out})
set(front ${CMAKE_SOURCE_DIR}/distlab)

add_test(NAME sim.build COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/sim_build.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(sim.build PROPERTIES FIXTURES_SETUP smpi LABELS sim TIMEOUT 1800 RUN_SERIAL ON
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

# Lesson 06 on one switch, 1 MiB buffers: every algorithm's simulated time is checked against
# its formula (the contended one for parallel and sequential); the trace plays simulated time.
set(t06 ${sim_out}/06_cluster-10gbe.json)
distlab_sim_test(06.cluster-10gbe 0 120 ": verified \\(" "ring_chunked: simulated time within 10%"
                 "parallel: simulated time within 10% of the model \\(its contended formula"
                 "sequential: simulated time within 10%" "8 ranks, mpi, cpu"
                 -- ${front} lesson 06 --sim cluster-10gbe --ranks 8 --size 256K --trace ${t06})
add_test(NAME sim.06.trace-clock COMMAND bash -c
         "grep -q '\"clock\":\"simulated\"' \"$0\" && grep -q '\"platform\":\"cluster-10gbe\"' \"$0\" && $1 \"$0\""
         ${t06} $<TARGET_FILE:distlab_trace_check>)
set_tests_properties(sim.06.trace-clock PROPERTIES DEPENDS sim.06.cluster-10gbe LABELS sim
                                                   FIXTURES_REQUIRED smpi)

# Lesson 07 on 1 GbE, 6 ranks (not a power of two: the fold's extra steps are in the formula).
distlab_sim_test(07.cluster-1gbe 0 120 ": verified \\(" "recursive_halving: simulated time within 10%"
                 "recursive_doubling: simulated time within 10%"
                 -- ${front} lesson 07 --sim cluster-1gbe --ranks 6 --size 256K
                 --trace ${sim_out}/07_cluster-1gbe.json)
