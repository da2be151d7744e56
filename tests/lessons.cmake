# Lesson runs (threads and mpiexec), their traces, and the failure probes.
# Included from tests/CMakeLists.txt.

add_executable(distlab_trace_check trace_check.cpp)
target_link_libraries(distlab_trace_check PRIVATE distlab_core)

set(run_lesson ${CMAKE_CURRENT_SOURCE_DIR}/run_lesson.sh)
set(expect_failure ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.sh)
set(out ${CMAKE_CURRENT_BINARY_DIR}/lesson-runs)
file(MAKE_DIRECTORY ${out})
# Root, oversubscription (4 ranks on 2 cores) and yielding idle ranks, for mpiexec in ctest.
# Oversubscription has a name per launcher, and each ignores the other's: Open MPI 4's mpirun
# reads OMPI_MCA_rmaps_base_oversubscribe, Open MPI 5's (PRRTE) the mapping policy's modifier
# PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe (docs.open-mpi.org, "MCA parameter changes
# between Open MPI 4.x and 5.x"). Both read OMPI_ALLOW_RUN_AS_ROOT*.
# The exercises' runner (tests/exercises.py): ./distlab test installs python3 with the tests'
# packages; without it the exercises.NN tests are not defined, and configure says so.
find_program(DISTLAB_PYTHON3 python3)
if(NOT DISTLAB_PYTHON3)
  message(STATUS "distlab: no python3: the exercises.NN tests are left out")
endif()
set(mpi_env "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMPI_MCA_rmaps_base_oversubscribe=1;PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe;OMPI_MCA_mpi_yield_when_idle=1")

# distlab_lesson_test(NAME LESSON EXPECT WORLD MPI_PROCS [lesson args...])
#   MPI_PROCS 0 runs on in-process ranks; gN as N processes of distlab's launcher over Gloo
#   (scripts/procs.sh N ... --transport gloo), sN the same over shared memory (--transport shm);
#   otherwise under mpiexec -n MPI_PROCS.
function(distlab_lesson_test name lesson expect world np)
  set(trace ${out}/${name}.json)
  set(args ${ARGN} --trace ${trace})
  if(lesson STREQUAL "01_send_recv")
    list(APPEND args --calibration ${out}/${name}.calibration.json)
  endif()
  if(np MATCHES "^g([0-9]+)$")
    set(cmd bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh ${CMAKE_MATCH_1} $<TARGET_FILE:${lesson}> ${args} --transport gloo)
  elseif(np MATCHES "^s([0-9]+)$")
    set(cmd bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh ${CMAKE_MATCH_1} $<TARGET_FILE:${lesson}> ${args} --transport shm)
  elseif(np EQUAL 0)
    set(cmd $<TARGET_FILE:${lesson}> ${args})
  else()
    set(cmd ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${np} $<TARGET_FILE:${lesson}> ${args})
  endif()
  # distlab_gpu_lesson sets a prefix: run_gpu.sh, which skips the test where no GPU answers.
  add_test(NAME ${name} COMMAND ${lesson_test_prefix} bash ${run_lesson} $<TARGET_FILE:distlab_trace_check> ${trace}
                                ${expect} ${world} -- ${cmd})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 LABELS lesson)
  if(np MATCHES "^g")
    set_tests_properties(${name} PROPERTIES RUN_SERIAL ON LABELS "lesson;gloo")
  elseif(np MATCHES "^s")
    set_tests_properties(${name} PROPERTIES RUN_SERIAL ON LABELS "lesson;shm")
  elseif(NOT np EQUAL 0)
    set_tests_properties(${name} PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "lesson;mpi")
  endif()
endfunction()

# The launcher names the rank a signal ended, not the peer that failed because of it, when it
# finds both ended at once (stand-in ranks, no lesson).
add_test(NAME lesson.launcher-blames-signal COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/procs_blame.sh
                                                    ${CMAKE_SOURCE_DIR}/scripts/procs.sh)
set_tests_properties(lesson.launcher-blames-signal PROPERTIES TIMEOUT 300 LABELS lesson)

# distlab's launcher (scripts/procs.sh) when a rank is killed, and when every rank refuses its
# options: the others stopped, the rank and its status named, nothing left behind.
if(DISTLAB_HAVE_GLOO)
  add_test(NAME lesson.gloo-launcher
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gloo_launcher.sh ${CMAKE_SOURCE_DIR}/scripts/procs.sh
                   $<TARGET_FILE:06_allreduce_sequential_ring_parallel>)
  set_tests_properties(lesson.gloo-launcher PROPERTIES RUN_SERIAL ON TIMEOUT 120 LABELS "lesson;gloo")
  add_test(NAME lesson.shm-launcher
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gloo_launcher.sh ${CMAKE_SOURCE_DIR}/scripts/procs.sh
                   $<TARGET_FILE:06_allreduce_sequential_ring_parallel> shm)
  set_tests_properties(lesson.shm-launcher PROPERTIES RUN_SERIAL ON TIMEOUT 120 LABELS "lesson;shm")
  # Lesson 01's fits on threads and over Gloo, side by side (--compare).
  add_test(NAME lesson.01_send_recv.transports
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson01_transports.sh ${CMAKE_SOURCE_DIR}/scripts/procs.sh
                   $<TARGET_FILE:01_send_recv>)
  set_tests_properties(lesson.01_send_recv.transports PROPERTIES RUN_SERIAL ON TIMEOUT 120 LABELS "lesson;gloo")
endif()

# ./distlab takes the run mode anywhere among the options (--ranks 8 --sim list as --sim list
# --ranks 8), and one run mode at a time.
set(front env DISTLAB_NO_DEPS=1 DISTLAB_BUILD_DIR=${CMAKE_BINARY_DIR} bash ${CMAKE_SOURCE_DIR}/distlab)
add_test(NAME usage.front.mode-anywhere COMMAND bash ${expect_failure} 0 20 "^dgx-pair +2 nodes of 4"
         -- ${front} lesson 15 --ranks 8 --sim list)
add_test(NAME usage.front.two-modes COMMAND bash ${expect_failure} 2 20 "one run mode at a time: --mpi and --sim"
         -- ${front} lesson 03 --mpi 2 --size 6 --sim dgx-pair)
set_tests_properties(usage.front.mode-anywhere usage.front.two-modes PROPERTIES LABELS lesson)

# The exercises' checker itself, on READMEs it writes: a wrong figure, a break that passes, an
# answer with no command each fail.
if(DISTLAB_PYTHON3)
  add_test(NAME lesson.exercises-checker
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/exercises_checker.sh ${DISTLAB_PYTHON3}
                   ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(lesson.exercises-checker PROPERTIES TIMEOUT 120 LABELS lesson)
endif()

foreach(lesson ${DISTLAB_LESSONS})
  # A README whose table of steps links main.cpp lines: each link lands on its STEP marker.
  file(STRINGS ${CMAKE_SOURCE_DIR}/lessons/${lesson}/README.md step_links REGEX "^\\| *[0-9]+ .*main\\.cpp#L[0-9]+")
  if(step_links)
    add_test(NAME lesson.${lesson}.readme-steps
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/readme_steps.sh ${CMAKE_SOURCE_DIR}/lessons/${lesson})
    set_tests_properties(lesson.${lesson}.readme-steps PROPERTIES LABELS lesson)
  endif()
  # Its exercises run as written, each answer's figures found in the output (tests/exercises.py;
  # the long tier: a hundred lesson runs).
  file(STRINGS ${CMAKE_SOURCE_DIR}/lessons/${lesson}/README.md exercises_heading REGEX "^## Exercises")
  if(exercises_heading AND DISTLAB_PYTHON3)
    string(SUBSTRING ${lesson} 0 2 nn)
    add_test(NAME exercises.${nn}
             COMMAND ${DISTLAB_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/exercises.py
                     ${CMAKE_SOURCE_DIR}/lessons/${lesson}/README.md --build ${CMAKE_BINARY_DIR})
    file(READ ${CMAKE_SOURCE_DIR}/lessons/${lesson}/README.md readme_text)
    if(readme_text MATCHES "`./distlab lesson [0-9]+[^`]*--mpi")
      set_tests_properties(exercises.${nn} PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON)
    endif()
    set_tests_properties(exercises.${nn} PROPERTIES TIMEOUT 600 LABELS lesson)
  endif()
  set(tiny 7)  # chunks of 3, 2, 2 elements on 3 ranks
  set(small 64)
  set(odd 1000)
  if(lesson MATCHES "^(05|08|09|10|11|16)_")
    set(odd 100)  # --size is a hidden layer's width in the training lessons
  endif()
  if(lesson STREQUAL "01_send_recv")
    set(odd 100000)  # not a power of two: the sweep stops at 64K
    set(tiny 64K)  # the smallest ping-pong sweep lesson 01 accepts
    set(small 64K)
  endif()
  distlab_lesson_test(lesson.${lesson}.threads ${lesson} verified 4 0 --ranks 4)
  set(n5_extra "")  # lessons 11-13 split by 5 only with sizes that allow it
  if(lesson STREQUAL "12_tensor_parallel_mlp")
    set(n5_extra --hidden 40)
  elseif(lesson STREQUAL "13_tensor_parallel_attention")
    set(n5_extra --heads 10 --hidden 80)
  endif()
  distlab_lesson_test(lesson.${lesson}.threads-n5-odd ${lesson} verified 5 0 --ranks 5 --size ${odd} ${n5_extra})
  distlab_lesson_test(lesson.${lesson}.threads-n3-tiny ${lesson} verified 3 0 --ranks 3 --size ${tiny})
  distlab_lesson_test(lesson.${lesson}.inject-fault ${lesson} failed 3 0 --ranks 3 --size ${small} --inject-fault)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${lesson}.mpi4 ${lesson} verified 4 4)
  endif()
  # Every lesson as 4 processes over Gloo, started by distlab's launcher (02-07 also against
  # Gloo's own collectives); 2 and 3 processes with odd sizes for the collectives' lessons.
  if(DISTLAB_HAVE_GLOO)
    distlab_lesson_test(lesson.${lesson}.gloo4 ${lesson} verified 4 g4)
    if(lesson MATCHES "^0[2-7]_")
      distlab_lesson_test(lesson.${lesson}.gloo3-odd ${lesson} verified 3 g3 --size ${odd})
      distlab_lesson_test(lesson.${lesson}.gloo2 ${lesson} verified 2 g2 --size ${small})
    endif()
    # And as 4 processes over shared memory (Gloo only starts them); 3 with odd sizes for the
    # collectives' lessons.
    distlab_lesson_test(lesson.${lesson}.shm4 ${lesson} verified 4 s4)
    if(lesson MATCHES "^0[2-7]_")
      distlab_lesson_test(lesson.${lesson}.shm3-odd ${lesson} verified 3 s3 --size ${odd})
    endif()
  endif()
  # On a GPU: 4 in-process ranks sharing device 0 (or one GPU each), checked against the same
  # CPU reference. Skipped (exit 77) where no CUDA device answers.
  if(TARGET distlab_gpu_tests AND NOT lesson MATCHES "^21_")  # 21: host windows, refuses cuda
    set(lesson_test_prefix bash ${CMAKE_CURRENT_SOURCE_DIR}/run_gpu.sh $<TARGET_FILE:distlab_gpu_tests> --)
    distlab_lesson_test(lesson.${lesson}.cuda ${lesson} verified 4 0 --ranks 4 --device cuda)
    set_tests_properties(lesson.${lesson}.cuda PROPERTIES LABELS "lesson;gpu" SKIP_RETURN_CODE 77)
    if(DISTLAB_HAVE_MPI)  # 4 processes: NCCL with a GPU each, else staged through host memory
      distlab_lesson_test(lesson.${lesson}.mpi4-cuda ${lesson} verified 4 4 --device cuda)
      set_tests_properties(lesson.${lesson}.mpi4-cuda PROPERTIES LABELS "lesson;gpu;mpi" SKIP_RETURN_CODE 77)
    endif()
    unset(lesson_test_prefix)
  endif()
endforeach()

# Lesson 05: parameter server and all-reduce training equal the float64 reference for N = 2,
# 3, 4 (the byte counts against the formulas are checks of every run), servers split, Adam,
# under mpiexec, the trace's phases and hotspot, and bad options.
if(TARGET 05_parameter_server)
  foreach(n 2 3 4)
    distlab_lesson_test(lesson.05_parameter_server.ps-n${n} 05_parameter_server verified ${n} 0 --ranks ${n} --steps 6)
    distlab_lesson_test(lesson.05_parameter_server.allreduce-n${n} 05_parameter_server verified ${n} 0 --ranks ${n}
                        --mode allreduce --steps 6)
  endforeach()
  distlab_lesson_test(lesson.05_parameter_server.servers2-n5 05_parameter_server verified 5 0 --ranks 5 --servers 2)
  # ".5" is a number to the options and not to JSON: the trace must still parse.
  distlab_lesson_test(lesson.05_parameter_server.lr-dot5 05_parameter_server verified 4 0 --lr .5 --steps 2)
  distlab_lesson_test(lesson.05_parameter_server.adam-n4 05_parameter_server verified 4 0 --ranks 4 --optimizer adam
                      --layers 2)
  distlab_lesson_test(lesson.05_parameter_server.allreduce-adam-n3 05_parameter_server verified 3 0 --ranks 3
                      --mode allreduce --optimizer adam)
  distlab_lesson_test(lesson.05_parameter_server.allreduce-inject-fault 05_parameter_server failed 3 0 --ranks 3
                      --mode allreduce --inject-fault)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.05_parameter_server.allreduce-mpi4 05_parameter_server verified 4 4 --mode allreduce)
    distlab_lesson_test(lesson.05_parameter_server.servers2-mpi4 05_parameter_server verified 4 4 --servers 2
                        --optimizer adam)
  endif()
  if(DISTLAB_HAVE_MPI)
    # Traces written under mpirun with every core busy hold their invariants every time (the
    # parameter server's deliver spans once overlapped their neighbours now and then).
    add_test(NAME trace.stress-mpi4 COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/trace_stress.sh 20
             $<TARGET_FILE:distlab_trace_check> ${MPIEXEC_EXECUTABLE} ${out}/trace-stress
             -- $<TARGET_FILE:05_parameter_server> --servers 2 --optimizer adam)
    set_tests_properties(trace.stress-mpi4 PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "lesson;mpi"
                         TIMEOUT 300)
  endif()
  add_test(NAME lesson.05_parameter_server.trace-phases
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson05_trace.sh $<TARGET_FILE:05_parameter_server>
                   ${out}/lesson05-phases.json)
  set_tests_properties(lesson.05_parameter_server.trace-phases PROPERTIES TIMEOUT 120 LABELS lesson)
  add_test(NAME usage.05.no-worker COMMAND bash ${expect_failure} 2 10 "needs at least one worker besides the 4 servers"
           -- $<TARGET_FILE:05_parameter_server> --ranks 4 --servers 4 --no-trace)
  add_test(NAME usage.05.servers-allreduce COMMAND bash ${expect_failure} 2 10 "--mode allreduce has no server"
           -- $<TARGET_FILE:05_parameter_server> --mode allreduce --servers 2 --no-trace)
  add_test(NAME usage.05.small-batch COMMAND bash ${expect_failure} 2 10 "gives some of the 3 workers no sample"
           -- $<TARGET_FILE:05_parameter_server> --batch 2 --no-trace)
  add_test(NAME usage.05.bad-mode COMMAND bash ${expect_failure} 2 10 "--mode: bogus not in"
           -- $<TARGET_FILE:05_parameter_server> --mode bogus --no-trace)
endif()

# Lessons 08-10 (ZeRO-1, 2, 3): for N = 2, 4, 8 every run checks the model state on the ledger
# against the stage's formula, communication against 2 Psi / 3 Psi from the trace, and the
# weights against plain data parallel and the float64 reference; --deterministic makes them
# equal plain data parallel bit for bit; --ranks 64 reproduces the lecture's table within 2%.
foreach(lesson 08_zero1 09_zero2 10_zero3_fsdp)
  if(NOT TARGET ${lesson})
    continue()
  endif()
  foreach(n 2 8)
    distlab_lesson_test(lesson.${lesson}.n${n} ${lesson} verified ${n} 0 --ranks ${n} --steps 3)
  endforeach()
  distlab_lesson_test(lesson.${lesson}.deterministic-n4 ${lesson} verified 4 0 --ranks 4 --deterministic)
  distlab_lesson_test(lesson.${lesson}.deterministic-n3-odd ${lesson} verified 3 0 --ranks 3 --deterministic
                      --size 37 --layers 3 --batch 50)
  add_test(NAME lesson.${lesson}.lecture-n64 COMMAND bash ${expect_failure} 0 120
           "measured \\(padding included, checked exactly\\); the formula's [0-9.]+ rounds to the lecture's"
           ": verified \\(" -- $<TARGET_FILE:${lesson}> --ranks 64 --steps 2 --no-trace)
  set_tests_properties(lesson.${lesson}.lecture-n64 PROPERTIES LABELS lesson TIMEOUT 300)
  # Small models on 64 ranks pad their shards by a large share: valid, and verified (the padded
  # figure is checked exactly, the lecture formula to formula).
  add_test(NAME lesson.${lesson}.lecture-n64-small COMMAND bash ${expect_failure} 0 120 ": verified \\("
           -- $<TARGET_FILE:${lesson}> --ranks 64 --size 16 --steps 2 --no-trace)
  set_tests_properties(lesson.${lesson}.lecture-n64-small PROPERTIES LABELS lesson TIMEOUT 300)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${lesson}.deterministic-mpi4 ${lesson} verified 4 4 --deterministic)
  endif()
  add_test(NAME usage.${lesson}.small-batch COMMAND bash ${expect_failure} 2 10 "gives some of the 4 ranks no sample"
           -- $<TARGET_FILE:${lesson}> --batch 3 --no-trace)
endforeach()

# Lesson 11 (pipeline): the first step's gradients and the trained weights equal the reference
# for every schedule, P = 1..4 stages, M = 1, 3, 4 micro-batches (GPipe, 1F1B), M = P and 2P + 1
# (zero bubble) and M = P and 2P over v = 2 and 3 chunks (interleaved) (each run also checks its
# order of work, its activation peak, and that the order replayed on the ideal machine gives
# the schedule's formula); the order read from the JSON trace; bad options. The measured utilisation is a
# timing: scripts/bench-pipeline.sh, not a test.
if(TARGET 11_pipeline_microbatching)
  set(l11 11_pipeline_microbatching)
  # The table of M = 1 to 16 runs in the lesson's default runs (lesson.11_*.threads and the
  # others above); these leave it out (--no-sweep).
  set(l11_quick --steps 2 --work-us 50 --sample-us 0 --no-sweep)
  foreach(p 1 2 3 4)
    distlab_lesson_test(lesson.${l11}.naive-p${p} ${l11} verified ${p} 0 --ranks ${p} --schedule naive --batch 12
                        --layers 4 ${l11_quick})
    foreach(m 1 3 4)
      foreach(schedule gpipe 1f1b)
        distlab_lesson_test(lesson.${l11}.${schedule}-p${p}-m${m} ${l11} verified ${p} 0 --ranks ${p} --schedule ${schedule}
                            --microbatches ${m} --batch 12 --layers 4 ${l11_quick})
      endforeach()
    endforeach()
    # Zero bubble with M = P (the fewest it takes) and M = 2P + 1; interleaved with v = 2 and
    # 3 chunks over M = P and 2P micro-batches.
    math(EXPR m_odd "2 * ${p} + 1")
    foreach(m ${p} ${m_odd})
      distlab_lesson_test(lesson.${l11}.zb-h1-p${p}-m${m} ${l11} verified ${p} 0 --ranks ${p} --schedule zb-h1
                          --microbatches ${m} --batch ${m} ${l11_quick})
    endforeach()
    math(EXPR m_two "2 * ${p}")
    foreach(v 2 3)
      foreach(m ${p} ${m_two})
        distlab_lesson_test(lesson.${l11}.interleaved-p${p}-v${v}-m${m} ${l11} verified ${p} 0 --ranks ${p}
                            --schedule interleaved --virtual-stages ${v} --microbatches ${m} --batch 24 ${l11_quick})
      endforeach()
    endforeach()
  endforeach()
  # The issue's commands as they are (4 ranks, the table included), and both under mpiexec.
  distlab_lesson_test(lesson.${l11}.interleaved-v2-m8 ${l11} verified 4 0 --schedule interleaved --virtual-stages 2
                      --microbatches 8)
  distlab_lesson_test(lesson.${l11}.zb-h1-m8 ${l11} verified 4 0 --schedule zb-h1 --microbatches 8)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l11}.mpi2-interleaved ${l11} verified 2 2 --schedule interleaved --microbatches 4
                        --no-sweep)
    distlab_lesson_test(lesson.${l11}.mpi2-zb-h1 ${l11} verified 2 2 --schedule zb-h1 --microbatches 4 --no-sweep)
  endif()
  # Each schedule's trace against its paper's order, listed by hand at P = 4, M = 8.
  add_test(NAME lesson.${l11}.paper-orders COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson11_paper.sh
           $<TARGET_FILE:${l11}>)
  set_tests_properties(lesson.${l11}.paper-orders PROPERTIES LABELS lesson TIMEOUT 120)
  add_test(NAME lesson.${l11}.trace-order COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson11_trace.sh
           $<TARGET_FILE:${l11}> ${out}/lesson11-order)
  set_tests_properties(lesson.${l11}.trace-order PROPERTIES LABELS lesson TIMEOUT 120)
  add_test(NAME usage.11.stages-layers COMMAND bash ${expect_failure} 2 10 "is more than the model's 3 layers"
           -- $<TARGET_FILE:${l11}> --ranks 4 --layers 2 --no-trace)
  add_test(NAME usage.11.batch-split COMMAND bash ${expect_failure} 2 10 "does not split into 5 equal micro-batches"
           -- $<TARGET_FILE:${l11}> --microbatches 5 --no-trace)
  add_test(NAME usage.11.naive-microbatches COMMAND bash ${expect_failure} 2 10 "runs the whole batch at once"
           -- $<TARGET_FILE:${l11}> --schedule naive --microbatches 4 --no-trace)
  add_test(NAME usage.11.stages-ranks COMMAND bash ${expect_failure} 2 10 "a stage is a rank"
           -- $<TARGET_FILE:${l11}> --ranks 4 --stages 2 --no-trace)
  add_test(NAME usage.11.interleaved-divides COMMAND bash ${expect_failure} 2 10 "must be a multiple of the 4 stages"
           -- $<TARGET_FILE:${l11}> --schedule interleaved --microbatches 6 --batch 12 --no-trace)
  add_test(NAME usage.11.zb-h1-too-few COMMAND bash ${expect_failure} 2 10 "on 4 stages is too few"
           -- $<TARGET_FILE:${l11}> --schedule zb-h1 --microbatches 2 --no-trace)
  add_test(NAME usage.11.virtual-stages-alone COMMAND bash ${expect_failure} 2 10 "is for --schedule interleaved"
           -- $<TARGET_FILE:${l11}> --virtual-stages 2 --no-trace)
  add_test(NAME usage.11.chunks-layers COMMAND bash ${expect_failure} 2 10 "every chunk needs a layer"
           -- $<TARGET_FILE:${l11}> --schedule interleaved --layers 5 --no-trace)
endif()

# Lessons 12 and 13 (tensor parallelism): the output and every gradient equal the unsplit layer
# for N = 1, 2, 4 (the MLP also N = 3), in threads and under mpiexec -n 2; every run checks from
# its trace one all-reduce forward (g) and one backward (f); sizes that do not split are refused.
if(TARGET 12_tensor_parallel_mlp)
  foreach(n 1 2 4)
    distlab_lesson_test(lesson.12_tensor_parallel_mlp.n${n} 12_tensor_parallel_mlp verified ${n} 0 --ranks ${n})
  endforeach()
  distlab_lesson_test(lesson.12_tensor_parallel_mlp.n3-h36 12_tensor_parallel_mlp verified 3 0 --ranks 3 --hidden 36
                      --batch 3 --seq 5)
  # One column of A per rank: a bias gradient whose terms cancel keeps its allowance (the bound
  # is relative to the terms, not to the tensor's largest value).
  distlab_lesson_test(lesson.12_tensor_parallel_mlp.n64-h16 12_tensor_parallel_mlp verified 64 0 --ranks 64 --hidden 16)
  foreach(seed 1 2 3)
    distlab_lesson_test(lesson.12_tensor_parallel_mlp.n64-h16-seed${seed} 12_tensor_parallel_mlp verified 64 0
                        --ranks 64 --hidden 16 --seed ${seed})
  endforeach()
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.12_tensor_parallel_mlp.mpi2 12_tensor_parallel_mlp verified 2 2)
  endif()
  add_test(NAME usage.12.split COMMAND bash ${expect_failure} 2 10 "do not split into 5 equal parts"
           -- $<TARGET_FILE:12_tensor_parallel_mlp> --ranks 5 --no-trace)
  # Sequence parallelism: the block with its LayerNorm and dropout, those regions on each rank's
  # rows; every tensor against the unsplit block, the bytes against tensor parallelism's
  # all-reduces and the regions' memory against 1/N of theirs (each run also runs the block
  # without sequence parallelism for its tables).
  foreach(n 1 2 4)
    distlab_lesson_test(lesson.12_tensor_parallel_mlp.sp-n${n} 12_tensor_parallel_mlp verified ${n} 0 --ranks ${n}
                        --sequence-parallel)
  endforeach()
  distlab_lesson_test(lesson.12_tensor_parallel_mlp.sp-n3-h36 12_tensor_parallel_mlp verified 3 0 --ranks 3
                      --hidden 36 --batch 3 --seq 5 --sequence-parallel --dropout 0.3)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.12_tensor_parallel_mlp.sp-mpi2 12_tensor_parallel_mlp verified 2 2 --sequence-parallel)
  endif()
  add_test(NAME usage.12.sp-tokens COMMAND bash ${expect_failure} 2 10 "tokens into 3 equal parts"
           -- $<TARGET_FILE:12_tensor_parallel_mlp> --ranks 3 --sequence-parallel --no-trace)
  add_test(NAME usage.12.dropout-alone COMMAND bash ${expect_failure} 2 10 "dropout of the --sequence-parallel block"
           -- $<TARGET_FILE:12_tensor_parallel_mlp> --dropout 0.2 --no-trace)
endif()
if(TARGET 13_tensor_parallel_attention)
  foreach(n 1 2 4)
    distlab_lesson_test(lesson.13_tensor_parallel_attention.n${n} 13_tensor_parallel_attention verified ${n} 0
                        --ranks ${n})
    distlab_lesson_test(lesson.13_tensor_parallel_attention.causal-n${n} 13_tensor_parallel_attention verified ${n} 0
                        --ranks ${n} --causal --seq 9 --batch 3)
  endforeach()
  # --sequence-parallel: the LayerNorm and dropout regions cut along the tokens.
  foreach(n 1 2 4)
    distlab_lesson_test(lesson.13_tensor_parallel_attention.sp-n${n} 13_tensor_parallel_attention verified ${n} 0
                        --ranks ${n} --sequence-parallel)
  endforeach()
  distlab_lesson_test(lesson.13_tensor_parallel_attention.sp-causal-n3 13_tensor_parallel_attention verified 3 0
                      --ranks 3 --heads 6 --hidden 48 --batch 3 --seq 5 --causal --sequence-parallel --dropout 0.3)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.13_tensor_parallel_attention.mpi2 13_tensor_parallel_attention verified 2 2 --causal)
    distlab_lesson_test(lesson.13_tensor_parallel_attention.sp-mpi2 13_tensor_parallel_attention verified 2 2
                        --sequence-parallel --causal)
  endif()
  add_test(NAME usage.13.sp-tokens COMMAND bash ${expect_failure} 2 10 "tokens into 3 equal parts"
           -- $<TARGET_FILE:13_tensor_parallel_attention> --ranks 3 --sequence-parallel --no-trace)
  add_test(NAME usage.13.dropout-alone COMMAND bash ${expect_failure} 2 10 "dropout of the --sequence-parallel layer"
           -- $<TARGET_FILE:13_tensor_parallel_attention> --dropout 0.2 --no-trace)
  # From the JSON trace itself: per lesson, 4 ranks, exactly 4 g spans and 4 f spans (one per rank).
  foreach(tpl 12_tensor_parallel_mlp 13_tensor_parallel_attention)
    add_test(NAME lesson.${tpl}.trace-one-all-reduce-each-way
             COMMAND bash -c "set -e; \"$0\" --ranks 4 --trace \"$1\" >/dev/null; g=$(grep -c '\"name\":\"g: all-reduce\"' \"$1\"); f=$(grep -c '\"name\":\"f: all-reduce\"' \"$1\"); echo \"g spans $g, f spans $f\"; [ $g = 4 ] && [ $f = 4 ]"
                     $<TARGET_FILE:${tpl}> ${out}/${tpl}-one-each.json)
    set_tests_properties(lesson.${tpl}.trace-one-all-reduce-each-way PROPERTIES LABELS lesson)
  endforeach()
  add_test(NAME usage.13.heads COMMAND bash ${expect_failure} 2 10 "--heads 12 do not split over 5 ranks: each rank needs whole heads"
           -- $<TARGET_FILE:13_tensor_parallel_attention> --ranks 5 --no-trace)
  add_test(NAME usage.13.head-size COMMAND bash ${expect_failure} 2 10 "--hidden 100 does not split into 12 heads"
           -- $<TARGET_FILE:13_tensor_parallel_attention> --hidden 100 --no-trace)
endif()

# A real cluster (scripts/cluster.sh): one rank on each of K network namespaces joined by tbf-
# shaped veths, Open MPI over TCP between them. Lessons 06 (K = 2) and 05's parameter server
# (K = 3) verify, their traces hold on clocks aligned across hosts, bytes cross the links; a
# failing command and SIGINT / SIGTERM leave no namespace, link or file behind. Without root or
# `ip netns` each says why and is skipped (77). One at a time: they share the dlc-* names.
if(DISTLAB_HAVE_MPI AND TARGET 06_allreduce_sequential_ring_parallel)
  set(cluster_test bash ${CMAKE_CURRENT_SOURCE_DIR}/cluster_test.sh ${CMAKE_SOURCE_DIR}/scripts/cluster.sh)
  add_test(NAME cluster.lesson06-k2 COMMAND ${cluster_test} verify $<TARGET_FILE:distlab_trace_check>
                                            ${out}/cluster-06-k2.json 2 -- $<TARGET_FILE:06_allreduce_sequential_ring_parallel>)
  add_test(NAME cluster.failure COMMAND ${cluster_test} fail -- $<TARGET_FILE:06_allreduce_sequential_ring_parallel>
                                        --size 64K)
  add_test(NAME cluster.interrupt-int COMMAND ${cluster_test} interrupt INT)
  add_test(NAME cluster.interrupt-term COMMAND ${cluster_test} interrupt TERM)
  set(cluster_tests cluster.lesson06-k2 cluster.failure cluster.interrupt-int cluster.interrupt-term)
  if(DISTLAB_HAVE_GLOO)  # the same lesson with no mpirun: distlab's launcher, Gloo over the links
    add_test(NAME cluster.lesson06-k3-gloo COMMAND ${cluster_test} verify-gloo $<TARGET_FILE:distlab_trace_check>
                                                   ${out}/cluster-06-k3-gloo.json 3 -- $<TARGET_FILE:06_allreduce_sequential_ring_parallel>)
    list(APPEND cluster_tests cluster.lesson06-k3-gloo)
  endif()
  if(TARGET 05_parameter_server)
    add_test(NAME cluster.lesson05-ps-k3 COMMAND ${cluster_test} verify $<TARGET_FILE:distlab_trace_check>
                                                 ${out}/cluster-05-ps-k3.json 3 -- $<TARGET_FILE:05_parameter_server> --mode ps --steps 4)
    list(APPEND cluster_tests cluster.lesson05-ps-k3)
  endif()
  set_tests_properties(${cluster_tests} PROPERTIES LABELS "cluster;mpi" SKIP_RETURN_CODE 77 TIMEOUT 300
                       RUN_SERIAL ON RESOURCE_LOCK distlab-cluster-netns)
endif()
# --transport gloo where it cannot run: one sentence and exit 2.
if(DISTLAB_HAVE_GLOO)
  add_test(NAME usage.gloo.no-launcher COMMAND bash ${expect_failure} 2 10
           "--transport gloo runs one process per rank, started by distlab's launcher: ./distlab lesson 04 --procs 4"
           -- $<TARGET_FILE:04_allreduce_allgather> --transport gloo --no-trace)
  add_test(NAME usage.gloo.cuda COMMAND bash ${expect_failure} 2 30 "--device cuda: Gloo's TCP pairs move host memory"
           -- bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh 2 $<TARGET_FILE:04_allreduce_allgather> --device cuda --no-trace)
  add_test(NAME usage.gloo.mpi-under-launcher COMMAND bash ${expect_failure} 2 30
           "--transport mpi needs the lesson to be started by mpirun"
           -- bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh 2 $<TARGET_FILE:04_allreduce_allgather> --transport mpi --no-trace)
  add_test(NAME usage.gloo.procs COMMAND bash ${expect_failure} 2 10 "usage: procs.sh N EXE"
           -- bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh 0 $<TARGET_FILE:04_allreduce_allgather>)
  set_tests_properties(usage.gloo.no-launcher usage.gloo.cuda usage.gloo.mpi-under-launcher usage.gloo.procs
                       PROPERTIES LABELS "usage;gloo")
endif()
# Bad input to scripts/cluster.sh: one sentence and exit 2, before anything is made (no root needed).
add_test(NAME usage.cluster.hosts COMMAND bash ${expect_failure} 2 10 "the number of hosts must be a whole number from 1 to 16, not '17'"
         -- ${CMAKE_SOURCE_DIR}/scripts/cluster.sh up 17)
add_test(NAME usage.cluster.rate COMMAND bash ${expect_failure} 2 10 "--rate must be a number with a unit of tc's, like 100mbit"
         -- ${CMAKE_SOURCE_DIR}/scripts/cluster.sh run 2 --rate fast -- true)
add_test(NAME usage.cluster.rate-range COMMAND bash ${expect_failure} 2 10 "--rate 10kbit is outside 1mbit to 100gbit"
         -- ${CMAKE_SOURCE_DIR}/scripts/cluster.sh up 2 --rate 10kbit)
add_test(NAME usage.cluster.no-command COMMAND bash ${expect_failure} 2 10 "run needs a command after --"
         -- ${CMAKE_SOURCE_DIR}/scripts/cluster.sh run 2)
set_tests_properties(usage.cluster.hosts usage.cluster.rate usage.cluster.rate-range usage.cluster.no-command
                     PROPERTIES LABELS cluster)

# A wrong send/recv order is a deadlock read off the wait-for graph: exit 3 before the 30 s
# timeout, with the cycle and every rank's wait (all 64 at 64 ranks). The sentence tells the
# graph's verdict from the timeout's ("no progress for"), so the limit can leave a loaded
# machine room: about 2 s quiet, 25 s allowed.
add_test(NAME deadlock.threads COMMAND bash ${expect_failure} 3 25
         "deadlock: these waits can never be matched \\(wait-for r0 -> r1 -> r0\\)"
         "r0 waits in recv from r1 \\(tag 7" "r1 waits in recv from r0 \\(tag 7"
         -- $<TARGET_FILE:failure_probe> --scenario wrong-order --deadlock-timeout 30 --no-trace)
add_test(NAME deadlock.threads-n64 COMMAND bash ${expect_failure} 3 25
         "wait-for r0 -> r1 -> r0; and 31 more like it" "r62 waits in recv from r63 \\(tag 7" "r63 waits in recv from r62"
         -- $<TARGET_FILE:failure_probe> --scenario wrong-order --ranks 64 --deadlock-timeout 30 --no-trace)
add_test(NAME deadlock.threads-n1000 COMMAND bash ${expect_failure} 3 30
         "and 499 more like it" "r999 waits in recv from r998 \\(tag 7"
         -- $<TARGET_FILE:failure_probe> --scenario wrong-order --ranks 1000 --deadlock-timeout 30 --no-trace)
set_tests_properties(deadlock.threads-n1000 PROPERTIES RUN_SERIAL ON)
# A rank that waits three timeouts for a peer that computes, while two others trade messages,
# is not a deadlock: the run verifies.
distlab_lesson_test(probe.failure.slow-threads failure_probe verified 4 0 --scenario slow --ranks 4 --deadlock-timeout 0.5)
add_test(NAME failure.throw-posted.threads COMMAND bash ${expect_failure} 1 10
         "rank 1 failed: rank 1 threw with two receives posted"
         -- $<TARGET_FILE:failure_probe> --scenario throw-posted --no-trace)
add_test(NAME failure.throw.threads COMMAND bash ${expect_failure} 1 10 "rank 1 failed: rank 1 hit a failed check on purpose"
         -- $<TARGET_FILE:failure_probe> --scenario throw --no-trace)
add_test(NAME failure.size-mismatch.threads COMMAND bash ${expect_failure} 1 10 "has 32 B of f32 but the receive expects 16 B"
         -- $<TARGET_FILE:failure_probe> --scenario size-mismatch --no-trace)
# Nonblocking collectives (core/comm/async.hpp): 20 all-reduces in flight at once verify, and
# their trace's flows pair; a rank that throws while they are in flight ends every rank with its
# message, on threads and under mpiexec (below).
distlab_lesson_test(probe.failure.async-threads failure_probe verified 4 0 --scenario async --ranks 4 --size 1000)
add_test(NAME failure.async-throw.threads COMMAND bash ${expect_failure} 1 20
         "rank 1 failed: rank 1 threw with nonblocking all-reduces in flight"
         -- $<TARGET_FILE:failure_probe> --scenario async-throw --ranks 4 --size 1000 --no-trace)
add_test(NAME usage.bad-size COMMAND bash ${expect_failure} 2 10 "unknown suffix"
         -- $<TARGET_FILE:failure_probe> --size 4X)
add_test(NAME usage.probe.unknown COMMAND bash ${expect_failure} 2 10
         "there is no probe 'nope'; probes: all_reduce failure library" -- ${CMAKE_SOURCE_DIR}/distlab probe nope)
# Lesson 01's --help shows the calibration file it will write as an absolute path, from any
# working directory.
add_test(NAME usage.calibration-path-absolute
         COMMAND bash -c "cd / && '$<TARGET_FILE:01_send_recv>' --help | grep -E -- '--calibration TEXT(=| \\[)/.+/calibration\\.json'")
set_tests_properties(usage.calibration-path-absolute PROPERTIES LABELS lesson TIMEOUT 30)
add_test(NAME usage.cuda-unavailable COMMAND bash ${expect_failure} 2 10 "--device cuda: "
         -- $<TARGET_FILE:failure_probe> --device cuda)
if(DISTLAB_HAVE_MPI)
  add_test(NAME deadlock.mpi COMMAND bash ${expect_failure} nonzero 30
           "deadlock or hang: no rank has progressed" "r0 waits in recv from r1 \\(tag 7" "r1 waits in recv from r0 \\(tag 7"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:failure_probe> --scenario wrong-order
              --deadlock-timeout 1 --no-trace)
  add_test(NAME failure.throw.mpi COMMAND bash ${expect_failure} nonzero 30 "rank 1 failed: rank 1 hit a failed check on purpose"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:failure_probe> --scenario throw --no-trace)
  distlab_lesson_test(probe.failure.async-mpi4 failure_probe verified 4 4 --scenario async --size 1000)
  add_test(NAME failure.async-throw.mpi COMMAND bash ${expect_failure} nonzero 30
           "rank 1 failed: rank 1 threw with nonblocking all-reduces in flight"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 $<TARGET_FILE:failure_probe> --scenario async-throw
              --size 1000 --no-trace)
  add_test(NAME usage.ranks-disagree.mpi COMMAND bash ${expect_failure} nonzero 30 "--ranks 3 disagrees with the 2 processes"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:failure_probe> --ranks 3)
  # Under mpirun a wait past the timeout asks the others: r2 and r3 still progress, so the run
  # goes on (one line says so) and verifies.
  add_test(NAME probe.failure.slow-mpi4 COMMAND bash ${expect_failure} 0 60 "so the run goes on" "verified"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 4 $<TARGET_FILE:failure_probe> --scenario slow
              --deadlock-timeout 1 --no-trace)
  set_tests_properties(deadlock.mpi failure.throw.mpi failure.async-throw.mpi usage.ranks-disagree.mpi probe.failure.slow-mpi4 PROPERTIES
                       ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS mpi)
endif()

# The shared-memory transport's failure paths, under distlab's launcher and under mpirun: a
# deadlock read off every rank's block in the segment (exit 3, every wait named), a rank still
# computing is not a hang, a size mismatch names both sizes, a rank that throws ends the run;
# and nothing is left in /dev/shm (tests/shm_left.sh wraps each run).
set(shm_left bash ${CMAKE_CURRENT_SOURCE_DIR}/shm_left.sh)
if(DISTLAB_HAVE_GLOO)
  set(procs_sh bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh)
  add_test(NAME deadlock.shm COMMAND ${shm_left} bash ${expect_failure} 3 30
           "deadlock or hang: no rank has progressed" "r0 waits in recv from r1 \\(tag 7" "r1 waits in recv from r0 \\(tag 7"
           -- ${procs_sh} 2 $<TARGET_FILE:failure_probe> --scenario wrong-order --transport shm
              --deadlock-timeout 1 --no-trace)
  add_test(NAME failure.size-mismatch.shm COMMAND ${shm_left} bash ${expect_failure} 1 30
           "has 4000 B of f32 but the receive expects 2000 B of f32"
           -- ${procs_sh} 2 $<TARGET_FILE:failure_probe> --scenario size-mismatch --size 1000 --transport shm --no-trace)
  add_test(NAME failure.throw.shm COMMAND ${shm_left} bash ${expect_failure} 1 30 "rank 1 failed: rank 1 hit a failed check on purpose"
           -- ${procs_sh} 3 $<TARGET_FILE:failure_probe> --scenario throw --transport shm --no-trace)
  add_test(NAME probe.failure.slow-shm4 COMMAND ${shm_left} bash ${expect_failure} 0 60 "is computing \\(it is in no wait\\), so the run goes on" "verified"
           -- ${procs_sh} 4 $<TARGET_FILE:failure_probe> --scenario slow --transport shm --deadlock-timeout 1 --no-trace)
  set_tests_properties(deadlock.shm failure.size-mismatch.shm failure.throw.shm probe.failure.slow-shm4
                       PROPERTIES RUN_SERIAL ON LABELS "shm")
  # What --procs gets without --transport: shared memory on one host (one line says so), Gloo
  # where the launcher gives ranks addresses of their own (DISTLAB_HOST, as scripts/cluster.sh).
  add_test(NAME lesson.procs-default-shm COMMAND ${shm_left} bash ${expect_failure} 0 60
           "distlab: 3 processes on this host: messages through shared memory" "verified \\([0-9]+ checks, 3 ranks, shm, cpu"
           -- ${procs_sh} 3 $<TARGET_FILE:04_allreduce_allgather> --no-trace)
  add_test(NAME lesson.procs-hosts-gloo COMMAND ${CMAKE_COMMAND} -E env DISTLAB_HOST=127.0.0.1
           bash ${expect_failure} 0 60 "verified \\([0-9]+ checks, 3 ranks, gloo, cpu"
           -- ${procs_sh} 3 $<TARGET_FILE:04_allreduce_allgather> --no-trace)
  set_tests_properties(lesson.procs-default-shm lesson.procs-hosts-gloo PROPERTIES RUN_SERIAL ON LABELS "lesson;shm")
  distlab_lesson_test(probe.failure.async-shm4 failure_probe verified 4 s4 --scenario async --size 1000)
  distlab_lesson_test(probe.all_reduce.split-shm3 all_reduce_probe verified 3 s3 --split 2 --size 1000)
  distlab_lesson_test(probe.library.shm3 library_probe verified 3 s3 --size 1000)
endif()
if(DISTLAB_HAVE_MPI)
  add_test(NAME deadlock.mpi-shm COMMAND ${shm_left} bash ${expect_failure} nonzero 30
           "deadlock or hang: no rank has progressed" "r0 waits in recv from r1 \\(tag 7" "r1 waits in recv from r0 \\(tag 7"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:failure_probe> --scenario wrong-order
              --transport shm --deadlock-timeout 1 --no-trace)
  set_tests_properties(deadlock.mpi-shm PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "mpi;shm")
  distlab_lesson_test(probe.all_reduce.split-mpi3-shm all_reduce_probe verified 3 3 --split 2 --size 1000 --transport shm)
  distlab_lesson_test(probe.library.mpi3-shm library_probe verified 3 3 --size 1000 --transport shm)
  distlab_lesson_test(lesson.14_capstone_3d_parallel.mpi4-shm 14_capstone_3d_parallel verified 4 4 --transport shm)
endif()

# Every all-reduce algorithm against the float64 sum in one run, on in-process ranks and under
# mpiexec (where MPI_Allreduce is checked as well); N = 3 and 6 fold, 7 elements give empty chunks.
# The library collectives in place and out of place (MPI_IN_PLACE, never one buffer twice).
if(DISTLAB_HAVE_MPI)
  distlab_lesson_test(probe.library.mpi3-tiny library_probe verified 3 3 --size 7)
  distlab_lesson_test(probe.library.mpi4 library_probe verified 4 4 --size 1000)
  distlab_lesson_test(probe.library.inject-fault library_probe failed 3 3 --size 7 --inject-fault)
  if(TARGET distlab_gpu_tests AND NOT lesson MATCHES "^21_")  # 21: host windows, refuses cuda
    set(lesson_test_prefix bash ${CMAKE_CURRENT_SOURCE_DIR}/run_gpu.sh $<TARGET_FILE:distlab_gpu_tests> --)
    distlab_lesson_test(probe.library.mpi2-cuda library_probe verified 2 2 --size 7 --device cuda)
    set_tests_properties(probe.library.mpi2-cuda PROPERTIES LABELS "gpu;mpi" SKIP_RETURN_CODE 77)
    unset(lesson_test_prefix)
  endif()
endif()

distlab_lesson_test(probe.all_reduce.threads-n6 all_reduce_probe verified 6 0 --ranks 6 --size 1000)
distlab_lesson_test(probe.all_reduce.threads-n6-tiny all_reduce_probe verified 6 0 --ranks 6 --size 7)
distlab_lesson_test(probe.all_reduce.inject-fault all_reduce_probe failed 3 0 --ranks 3 --size 64 --inject-fault)
# On groups (Comm::split): 7 ranks in 3 groups of 3, 2 and 2, keys backwards; a fault in one.
distlab_lesson_test(probe.all_reduce.split-threads-n7 all_reduce_probe verified 7 0 --ranks 7 --split 3 --size 1000)
distlab_lesson_test(probe.all_reduce.split-inject-fault all_reduce_probe failed 7 0 --ranks 7 --split 3 --size 64 --inject-fault)
if(DISTLAB_HAVE_MPI)
  distlab_lesson_test(probe.all_reduce.mpi4 all_reduce_probe verified 4 4 --size 1000)
  distlab_lesson_test(probe.all_reduce.mpi4-tiny all_reduce_probe verified 4 4 --size 7)
  distlab_lesson_test(probe.all_reduce.mpi3 all_reduce_probe verified 3 3 --size 1000)
  distlab_lesson_test(probe.all_reduce.mpi3-tiny all_reduce_probe verified 3 3 --size 7)
  # MPI_Comm_split's groups: every algorithm and MPI_Allreduce on a group of 2 and one of 1.
  distlab_lesson_test(probe.all_reduce.split-mpi3 all_reduce_probe verified 3 3 --split 2 --size 1000)
endif()

# distlab-bench: a small sweep must run, time every candidate and find no wrong element.
set(bench_cmd $<TARGET_FILE:distlab-bench> --min-bytes 4K --max-bytes 64K --iters 2 --warmup 1)
add_test(NAME bench.threads COMMAND bash -c "set -o pipefail; \"$@\" | tee /dev/stderr | grep -q ': verified ('" bench
         ${bench_cmd} --ranks 3)
set_tests_properties(bench.threads PROPERTIES TIMEOUT 300 LABELS bench)
# In-process ranks reading each other's buffers (direct_read) and the all-reduces through
# symmetric memory, right (#wrong 0), and every row against the limit measured in the same run.
add_test(NAME bench.threads.direct-read COMMAND bash ${expect_failure} 0 120
         "allreduce +direct_read +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
         "allreduce +one_shot +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$" "allreduce +two_shot +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
         "allreduce +one_shot_ll +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$" "allreduce +limit +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
         "allreduce +switch +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
         "allreduce +two_shot_registered +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
         "limit: memory's copy rate, every rank copying 8.00 MiB at once, the best of 4 at each size: median [0-9.]+ GB/s a rank"
         "busbw relative to limit" "64.0 KiB +direct_read [0-9.]+x" ": verified \\("
         -- $<TARGET_FILE:distlab-bench> --ranks 3 --collectives allreduce
         --algos ring_chunked,direct_read,one_shot,two_shot,one_shot_ll,switch,two_shot_registered,limit
         --min-bytes 64K --max-bytes 64K --iters 2 --warmup 1)
set_tests_properties(bench.threads.direct-read PROPERTIES LABELS bench)
if(DISTLAB_HAVE_MPI)
  add_test(NAME bench.mpi2 COMMAND bash -c "set -o pipefail; \"$@\" | tee /dev/stderr | grep -q ': verified ('" bench
           ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${bench_cmd})
  set_tests_properties(bench.mpi2 PROPERTIES TIMEOUT 300 ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "bench;mpi")
  # Processes cannot read each other's private buffers: direct_read is left out, with the
  # reason; they map symmetric memory, so one-shot, two-shot, LL and the limit run, right.
  add_test(NAME bench.mpi2.direct-read COMMAND bash ${expect_failure} 0 120
           "direct_read left out: it reads other ranks' memory"
           "allreduce +one_shot_ll +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$" "allreduce +limit +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
           "allreduce +switch +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$" "busbw relative to limit" ": verified \\("
           "allreduce +two_shot_registered +[0-9.]+ +[0-9.]+ +[0-9.]+ +- +0$"
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 $<TARGET_FILE:distlab-bench> --collectives allreduce
           --algos ring_chunked,direct_read,one_shot_ll,switch,two_shot_registered,limit --min-bytes 4K --max-bytes 4K --iters 2 --warmup 1)
  set_tests_properties(bench.mpi2.direct-read PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "bench;mpi")
  # Under mpirun over shared memory: every all-reduce, #wrong 0, against MPI's and the limit.
  add_test(NAME bench.mpi2.shm COMMAND ${shm_left} bash ${expect_failure} 0 300
           "distlab-bench: 2 ranks \\(shm, cpu\\)" "allreduce +two_shot .* 0$" "allreduce +library .* 0$"
           "busbw relative to library \\(MPI_Allreduce" "busbw relative to limit" ": verified \\("
           -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${bench_cmd} --collectives allreduce --transport shm)
  set_tests_properties(bench.mpi2.shm PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "bench;mpi;shm")
endif()
if(DISTLAB_HAVE_GLOO)
  # Under distlab's launcher: every collective against Gloo's own (the library rows), #wrong 0.
  add_test(NAME bench.gloo4 COMMAND bash ${expect_failure} 0 300
           "allreduce +library +[0-9.]+ +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$" "allgather +library .* 0$"
           "reducescatter +library .* 0$" "broadcast +library .* 0$" " reduce +library .* 0$"
           "alltoall +library .* 0$" "allreduce +library_bcube .* 0$" "allreduce +library_halving_doubling .* 0$"
           "busbw relative to library \\(gloo::allreduce" ": verified \\("
           -- bash ${CMAKE_SOURCE_DIR}/scripts/procs.sh 4 ${bench_cmd} --transport gloo)
  set_tests_properties(bench.gloo4 PROPERTIES RUN_SERIAL ON LABELS "bench;gloo")
endif()
if(TARGET distlab_gpu_tests)
  # GPU buffers: every algorithm, and the library (ncclAllReduce ...) where each rank has a GPU.
  add_test(NAME bench.cuda COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/run_gpu.sh $<TARGET_FILE:distlab_gpu_tests> --
           bash -c "set -o pipefail; \"$@\" | tee /dev/stderr | grep -q ': verified ('" bench ${bench_cmd} --ranks 2
           --device cuda)
  set_tests_properties(bench.cuda PROPERTIES TIMEOUT 300 LABELS "bench;gpu" SKIP_RETURN_CODE 77)
endif()

# Lesson 00: bad inputs end with one sentence and exit 2; changed inputs change the figures
# (twice the GPUs, half the minutes; ZeRO-1's 4.2 B per parameter fits 19B parameters).
if(TARGET 00_why_distributed)
  add_test(NAME usage.00.zero-gpus COMMAND bash ${expect_failure} 2 10 "--gpus must be at least 1, not 0"
           -- $<TARGET_FILE:00_why_distributed> --gpus 0 --no-trace)
  add_test(NAME usage.00.negative-memory COMMAND bash ${expect_failure} 2 10
           "--gpu-memory-gb must be a positive finite number, not -80"
           -- $<TARGET_FILE:00_why_distributed> --gpu-memory-gb -80 --no-trace)
  add_test(NAME usage.00.zero-flops COMMAND bash ${expect_failure} 2 10 "--flops must be a positive finite number, not 0"
           -- $<TARGET_FILE:00_why_distributed> --flops 0 --no-trace)
  add_test(NAME lesson.00_why_distributed.gpus-2048 COMMAND bash ${expect_failure} 0 10
           "a 10-GPU-day job on 2048 GPUs +10 GPU-days / 2048 GPUs +7\\.031 minutes" ": verified \\("
           -- $<TARGET_FILE:00_why_distributed> --gpus 2048 --no-trace)
  add_test(NAME lesson.00_why_distributed.zero1-bytes COMMAND bash ${expect_failure} 0 10
           "largest model on one GPU +80 GB / 4\\.2 B per param +19\\.0B params" ": verified \\("
           -- $<TARGET_FILE:00_why_distributed> --bytes-per-param 4.2 --no-trace)
  # The measured step: the FLOP per parameter per sample the counted GEMMs give (exact, from the
  # layer sizes), on 3 ranks, each of which checks its own count.
  add_test(NAME lesson.00_why_distributed.flops-counted COMMAND bash ${expect_failure} 0 20
           "FLOP +forward 2 \\+ backward 3\\.93 = 5\\.93 per parameter per sample, counted"
           "16 bytes per parameter of model state" ": verified \\(22 checks"
           -- $<TARGET_FILE:00_why_distributed> --ranks 3 --no-trace)
  set_tests_properties(lesson.00_why_distributed.gpus-2048 lesson.00_why_distributed.zero1-bytes
                       lesson.00_why_distributed.flops-counted PROPERTIES LABELS lesson)
endif()

# The property sweep: each training and tensor-parallel lesson on 40 (or 20) valid settings drawn
# from a fixed seed (ranks 1-8 and 64, sizes, seeds, schedules, switches); every one must verify.
foreach(lesson 05_parameter_server 08_zero1 09_zero2 10_zero3_fsdp 11_pipeline_microbatching 12_tensor_parallel_mlp
               13_tensor_parallel_attention)
  if(TARGET ${lesson})
    string(SUBSTRING ${lesson} 0 2 number)
    # 40 settings each; 20 for the three slowest (ZeRO-2 and -3, attention: 40-90 s at 40 on two cores),
    # which keeps CI's whole run under 30 minutes. (Lesson 11's draws leave out its table of
    # M = 1 to 16: --no-sweep.)
    set(settings 40)
    if(lesson MATCHES "^(09|10|13)_")
      set(settings 20)
    endif()
    add_test(NAME property.${lesson} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/property_sweep.sh ${number}
                                             $<TARGET_FILE:${lesson}> 2026 ${settings})
    # COST: the longest tests start first, so a clean build's ctest -j ends without a long tail
    # of one slow test on one core.
    set_tests_properties(property.${lesson} PROPERTIES TIMEOUT 600 LABELS "lesson;property" COST 100)
  endif()
endforeach()

# The weight checks at any number of steps (scripts/steps-sweep.sh, whose whole sweep is run by
# hand): CI's slice, one seed on 8 ranks at 20 and 100 steps, every schedule, and every break at
# one step.
if(TARGET 11_pipeline_microbatching)
  add_test(NAME property.steps COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/steps-sweep.sh --quick
                                       --build ${CMAKE_BINARY_DIR})
  set_tests_properties(property.steps PROPERTIES TIMEOUT 600 LABELS "lesson;property" COST 100)
endif()

# Inputs checked before the run: a --size no machine holds is refused with a sentence (what it
# needs, what is available, what to change) and exit 2, in every lesson that takes --size; so
# is lesson 11 on 1000 ranks (its default model on every rank).
foreach(lesson ${DISTLAB_LESSONS})
  if(lesson MATCHES "^(0[1-9]|1[01])_")
    add_test(NAME usage.${lesson}.huge-size
             COMMAND bash ${expect_failure} 2 30 "needs about .* but .* is available; use a smaller --size|is more than this lesson trains"
                     -- $<TARGET_FILE:${lesson}> --size 99999999999 --no-trace)
  endif()
endforeach()
# Lessons 12 and 13 size their layer with --hidden, --batch and --seq instead of --size.
foreach(run "12_tensor_parallel_mlp|" "13_tensor_parallel_attention|--heads 16")
  string(REPLACE "|" ";" parts "${run}")
  list(GET parts 0 lesson)
  list(LENGTH parts n)
  set(extra "")
  if(n GREATER 1)
    list(GET parts 1 extra)
    separate_arguments(extra UNIX_COMMAND "${extra}")
  endif()
  if(TARGET ${lesson})
    add_test(NAME usage.${lesson}.huge-shape
             COMMAND bash ${expect_failure} 2 30 "needs about .* but .* is available; use a smaller --hidden, --batch or --seq"
                     -- $<TARGET_FILE:${lesson}> --hidden 16384 --batch 4096 --seq 4096 ${extra} --no-trace)
  endif()
endforeach()

# The layers (docs/architecture.md): every include goes down them, and a planted upward include
# is caught (scripts/check-layers.sh).
add_test(NAME layers.includes COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/check_layers.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(layers.includes PROPERTIES LABELS "layers" TIMEOUT 120)

# Every code quote in a README equals the source lines between its markers.
# Every lesson README from 01 on shows its trace's animation (scripts/make-animations.sh).
add_test(NAME docs.animations COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/animations.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.animations PROPERTIES LABELS "layers")
add_test(NAME docs.readme-quotes COMMAND bash ${CMAKE_SOURCE_DIR}/scripts/readme-quotes.sh ${CMAKE_SOURCE_DIR})
set_tests_properties(docs.readme-quotes PROPERTIES LABELS "layers")

# The plan those refusals rest on, held to what the process takes (tests/memory_plan.sh): the
# resident growth stays within the plan + 64 MiB, and the plan within 3 x the growth + 64 MiB.
# Each at a size where the buffers dominate (hundreds of MiB) and the run takes a few seconds.
set(memory_plan_runs
    "01_send_recv|--ranks 2 --size 64M"
    "02_scatter_gather|--ranks 4 --size 16M"
    "03_reduce_broadcast|--ranks 4 --size 4M"
    "04_allreduce_allgather|--ranks 4 --size 2M"
    "05_parameter_server|--ranks 4 --size 4096 --steps 1"
    "06_allreduce_sequential_ring_parallel|--ranks 4 --size 2M"
    "07_recursive_halving|--ranks 4 --size 2M"
    "08_zero1|--ranks 4 --size 1024 --steps 1"
    "10_zero3_fsdp|--ranks 4 --size 1024 --steps 1"
    "11_pipeline_microbatching|--ranks 4 --size 512"
    "12_tensor_parallel_mlp|--ranks 4 --hidden 1024 --batch 1 --seq 16"
    "13_tensor_parallel_attention|--ranks 2 --hidden 64 --heads 16 --batch 4 --seq 512"
    "17_context_parallel|--ranks 4 --seq 1024 --heads 1 --head-dim 8")
foreach(run ${memory_plan_runs})
  string(REPLACE "|" ";" parts "${run}")
  list(GET parts 0 lesson)
  list(GET parts 1 args)
  separate_arguments(args UNIX_COMMAND "${args}")
  if(TARGET ${lesson})
    add_test(NAME memory.${lesson} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memory_plan.sh $<TARGET_FILE:${lesson}> ${args})
    set_tests_properties(memory.${lesson} PROPERTIES LABELS "lesson;memory" TIMEOUT 120)
  endif()
endforeach()

if(TARGET 11_pipeline_microbatching)
  add_test(NAME usage.11_pipeline_microbatching.ranks-1000
           COMMAND bash ${expect_failure} 2 30 "1000 ranks x .* each.* is available"
                   -- $<TARGET_FILE:11_pipeline_microbatching> --ranks 1000 --no-trace)
endif()

# Lesson 14: every mesh of up to 8 ranks in the issue's list verifies (the loss and gradient of
# step 1, the replicas and every weight against one device), ZeRO-1 too, under mpiexec as well;
# a mesh that does not multiply to the ranks, or heads that do not divide, is one sentence.
if(TARGET 14_capstone_3d_parallel)
  foreach(mesh "1 1 1" "2 1 1" "1 2 1" "1 1 2" "2 2 1" "2 1 2" "1 2 2" "2 2 2" "4 1 2")
    separate_arguments(m UNIX_COMMAND "${mesh}")
    list(GET m 0 d)
    list(GET m 1 p)
    list(GET m 2 t)
    math(EXPR n "${d} * ${p} * ${t}")
    distlab_lesson_test(lesson.14_capstone_3d_parallel.mesh-${d}x${p}x${t} 14_capstone_3d_parallel verified ${n} 0
                        --ranks ${n} --dp ${d} --pp ${p} --tp ${t} --steps 4)
  endforeach()
  distlab_lesson_test(lesson.14_capstone_3d_parallel.zero1-2x2x2 14_capstone_3d_parallel verified 8 0 --ranks 8 --zero 1
                      --steps 4)
  distlab_lesson_test(lesson.14_capstone_3d_parallel.zero1-4x1x1-m8 14_capstone_3d_parallel verified 4 0 --ranks 4
                      --dp 4 --pp 1 --tp 1 --zero 1 --microbatches 8 --batch 1 --steps 4)
  distlab_lesson_test(lesson.14_capstone_3d_parallel.pp4-m6 14_capstone_3d_parallel verified 4 0 --ranks 4 --dp 1
                      --pp 4 --tp 1 --microbatches 6 --steps 3)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.14_capstone_3d_parallel.mpi4-dp2-tp2 14_capstone_3d_parallel verified 4 4 --dp 2 --tp 2)
    distlab_lesson_test(lesson.14_capstone_3d_parallel.mpi4-zero1 14_capstone_3d_parallel verified 4 4 --dp 2 --pp 2
                        --tp 1 --zero 1 --steps 4)
  endif()
  add_test(NAME usage.14.mesh COMMAND bash ${expect_failure} 2 10
           "the mesh dp 3 x pp 1 x tp 2 has 6 ranks, but the run has 8: --dp x --pp x --tp must equal the ranks"
           -- $<TARGET_FILE:14_capstone_3d_parallel> --ranks 8 --dp 3 --no-trace)
  add_test(NAME usage.14.heads COMMAND bash ${expect_failure} 2 10 "the 4 heads must divide over --tp 3"
           -- $<TARGET_FILE:14_capstone_3d_parallel> --ranks 6 --tp 3 --no-trace)
  add_test(NAME usage.14.layers COMMAND bash ${expect_failure} 2 10 "the 4 layers must divide over --pp 3"
           -- $<TARGET_FILE:14_capstone_3d_parallel> --ranks 3 --dp 1 --pp 3 --tp 1 --no-trace)
  set_tests_properties(usage.14.mesh usage.14.heads usage.14.layers PROPERTIES LABELS lesson)
endif()

# Lesson 15: the trees, the hierarchy and Bruck on the worlds of the issue (any N, not only powers
# of two; a buffer of 1023 elements that no N divides), nodes given, and a node size that does
# not divide the ranks refused in one sentence.
if(TARGET 15_trees_hierarchy_alltoall)
  foreach(n 2 7 13)
    distlab_lesson_test(lesson.15_trees_hierarchy_alltoall.n${n}-1023 15_trees_hierarchy_alltoall verified ${n} 0
                        --ranks ${n} --size 1023 --reps 2)
  endforeach()
  distlab_lesson_test(lesson.15_trees_hierarchy_alltoall.n8-nodes4 15_trees_hierarchy_alltoall verified 8 0
                      --ranks 8 --ranks-per-node 4 --size 64K --reps 2)
  add_test(NAME usage.15.ranks-per-node COMMAND bash ${expect_failure} 2 10
           "--ranks-per-node 3 does not divide the 8 ranks into whole nodes"
           -- $<TARGET_FILE:15_trees_hierarchy_alltoall> --ranks 8 --ranks-per-node 3 --no-trace)
  set_tests_properties(usage.15.ranks-per-node PROPERTIES LABELS lesson)
endif()

# Lesson 16: buckets, their overlap and ZeRO-3's prefetch on 2 ranks, on threads and under
# mpiexec (the issue's runs); every configuration's weights equal bit for bit and the float64
# reference's.
if(TARGET 16_overlap_bucketing)
  distlab_lesson_test(lesson.16_overlap_bucketing.n2 16_overlap_bucketing verified 2 0 --ranks 2)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.16_overlap_bucketing.mpi2 16_overlap_bucketing verified 2 2)
  endif()
  # Its trace carries the memory ledger: ZeRO-3 with prefetch's peak of the weights, as printed.
  add_test(NAME lesson.16_overlap_bucketing.trace-memory
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson16_memory.sh $<TARGET_FILE:16_overlap_bucketing>
                   ${out}/lesson16-memory)
  set_tests_properties(lesson.16_overlap_bucketing.trace-memory PROPERTIES TIMEOUT 120 LABELS lesson)
  # The viewer's overlap counter against the lesson's printed figures for the same run.
  if(TARGET distlab-viewer)
    add_test(NAME lesson.16_overlap_bucketing.viewer-overlap
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/lesson16_overlap.sh $<TARGET_FILE:16_overlap_bucketing>
                     $<TARGET_FILE:distlab-viewer> ${out}/lesson16-overlap)
    set_tests_properties(lesson.16_overlap_bucketing.viewer-overlap PROPERTIES TIMEOUT 120 LABELS "lesson;viewer")
  endif()
  add_test(NAME usage.16.sweep COMMAND bash ${expect_failure} 2 10 "--sweep: an empty bucket size"
           -- $<TARGET_FILE:16_overlap_bucketing> --sweep 0,,4K --no-trace)
  set_tests_properties(usage.16.sweep PROPERTIES LABELS lesson)
endif()

# Lesson 17: ring attention's output and every gradient equal unsplit float64 attention for N = 1,
# 2, 4 with and without --causal (zig-zag), the causal mask on contiguous blocks, uneven chunks
# (N = 3, 5 with a --seq no chunk count divides), and under mpiexec -n 2 --causal; every run checks
# its bytes, steps and score elements against the formulas; too short a sequence is one sentence.
if(TARGET 17_context_parallel)
  set(l17 17_context_parallel)
  foreach(n 1 2 4)
    distlab_lesson_test(lesson.${l17}.n${n} ${l17} verified ${n} 0 --ranks ${n})
    distlab_lesson_test(lesson.${l17}.causal-n${n} ${l17} verified ${n} 0 --ranks ${n} --causal)
    distlab_lesson_test(lesson.${l17}.causal-contiguous-n${n} ${l17} verified ${n} 0 --ranks ${n} --causal
                        --split contiguous)
  endforeach()
  distlab_lesson_test(lesson.${l17}.zigzag-n4 ${l17} verified 4 0 --ranks 4 --split zigzag)
  distlab_lesson_test(lesson.${l17}.causal-n3-seq31 ${l17} verified 3 0 --ranks 3 --causal --seq 31 --heads 3
                      --head-dim 5)
  distlab_lesson_test(lesson.${l17}.causal-n5-seq10 ${l17} verified 5 0 --ranks 5 --causal --seq 10 --seed 7)
  distlab_lesson_test(lesson.${l17}.causal-n4-seq256 ${l17} verified 4 0 --ranks 4 --causal --seq 256 --heads 1
                      --head-dim 64)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l17}.mpi2-causal ${l17} verified 2 2 --causal)
  endif()
  add_test(NAME usage.17.seq COMMAND bash ${expect_failure} 2 10 "--seq 6 cannot be cut into the 8 chunks of 4 ranks"
           -- $<TARGET_FILE:${l17}> --causal --seq 6 --no-trace)
  set_tests_properties(usage.17.seq PROPERTIES LABELS lesson)
endif()

# The mutation sweep's list still applies to the code, three of its mutations are killed, and a
# survivor fails the sweep (tests/mutate_smoke.sh; the whole sweep is scripts/mutate.sh, not CI's).
if(TARGET 03_reduce_broadcast)
  add_test(NAME mutate.smoke COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mutate_smoke.sh ${CMAKE_BINARY_DIR}
                                     ${CMAKE_BINARY_DIR}/mutate-smoke)
  set_tests_properties(mutate.smoke PROPERTIES LABELS lesson TIMEOUT 900 COST 40)
endif()

# --break: every lesson's classic bugs, each caught by the lesson's own checks (tests/breaks.sh
# holds the table of variants and the check that must fail for each), and one under mpiexec,
# where every process switches the bug on from its own arguments.
if(TARGET 03_reduce_broadcast)
  add_test(NAME lesson.breaks COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/breaks.sh $<TARGET_FILE_DIR:03_reduce_broadcast>
                                   ${CMAKE_SOURCE_DIR}/README.md)
  set_tests_properties(lesson.breaks PROPERTIES TIMEOUT 600 LABELS lesson COST 50)
  if(DISTLAB_HAVE_MPI)
    add_test(NAME lesson.breaks.mpi3 COMMAND bash ${expect_failure} 1 60
             "check failed on r0: reduce: the root holds the sum of every rank's input"
             "--break reduce-forget-root: caught" "FAILED \\(.* 3 ranks, mpi"
             -- ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 $<TARGET_FILE:03_reduce_broadcast>
             --break reduce-forget-root --no-trace)
    set_tests_properties(lesson.breaks.mpi3 PROPERTIES ENVIRONMENT "${mpi_env}" RUN_SERIAL ON LABELS "lesson;mpi")
  endif()
endif()

# Every lesson's default run fits 100 columns and ends with its verdict (tests/output_width.sh).
if(TARGET 00_why_distributed)
  add_test(NAME lesson.output-width COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/output_width.sh $<TARGET_FILE_DIR:00_why_distributed>)
  set_tests_properties(lesson.output-width PROPERTIES TIMEOUT 900 LABELS lesson RUN_SERIAL ON)
endif()

# Lesson 18 (expert parallelism): every token's choice against the float64 gates' top k; Y, dX,
# the router's and every expert's gradients against the float64 MoE on one device with the same
# routing, for N = 1, 2, 4, top-1 and top-2, both gatings, by both
# all-to-alls, under mpiexec -n 2 as well (each run also checks the capacity rule and every
# all-to-all's bytes from the trace); experts that do not split over the ranks, or a top-k past
# them, are one sentence.
if(TARGET 18_expert_parallel)
  set(l18 18_expert_parallel)
  foreach(n 1 2 4)
    foreach(k 1 2)
      distlab_lesson_test(lesson.${l18}.n${n}-top${k} ${l18} verified ${n} 0 --ranks ${n} --top-k ${k})
    endforeach()
  endforeach()
  distlab_lesson_test(lesson.${l18}.bruck-n5-top2 ${l18} verified 5 0 --ranks 5 --top-k 2 --alltoall bruck)
  # Many drops (C = 0.5, 3 experts a rank, an odd T) and none (C = 8).
  distlab_lesson_test(lesson.${l18}.n3-e9-c0.5 ${l18} verified 3 0 --ranks 3 --experts 9 --capacity-factor 0.5
                      --tokens 17 --top-k 2)
  distlab_lesson_test(lesson.${l18}.n4-c8 ${l18} verified 4 0 --ranks 4 --capacity-factor 8 --alltoall bruck)
  # The chosen gates renormalised (GShard's top-2, Mixtral's top-k softmax), with drops and without.
  distlab_lesson_test(lesson.${l18}.n4-top2-gating-topk ${l18} verified 4 0 --ranks 4 --top-k 2 --gating topk)
  distlab_lesson_test(lesson.${l18}.n3-top3-gating-topk-c0.5 ${l18} verified 3 0 --ranks 3 --experts 9 --top-k 3
                      --gating topk --capacity-factor 0.5 --tokens 17)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l18}.mpi2 ${l18} verified 2 2)
    distlab_lesson_test(lesson.${l18}.mpi2-top2-bruck ${l18} verified 2 2 --top-k 2 --alltoall bruck)
  endif()
  add_test(NAME usage.18.experts-split COMMAND bash ${expect_failure} 2 10 "--experts 6 do not split over 4 ranks"
           -- $<TARGET_FILE:${l18}> --ranks 4 --experts 6 --no-trace)
  add_test(NAME usage.18.top-k COMMAND bash ${expect_failure} 2 10 "--top-k 9 is more than the 8 experts"
           -- $<TARGET_FILE:${l18}> --ranks 4 --top-k 9 --no-trace)
  # A layer no machine holds is refused before it starts; the plan behind that, held to what the
  # process takes (tests/memory_plan.sh, as the other lessons' memory.* runs).
  add_test(NAME usage.18.huge-shape COMMAND bash ${expect_failure} 2 30
           "needs about .* but .* is available; use a smaller --tokens, --hidden, --ffn or --experts"
           -- $<TARGET_FILE:${l18}> --tokens 16384 --hidden 4096 --ffn 16384 --no-trace)
  set_tests_properties(usage.18.experts-split usage.18.top-k usage.18.huge-shape PROPERTIES LABELS lesson)
  add_test(NAME memory.${l18} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memory_plan.sh $<TARGET_FILE:${l18}>
           --ranks 4 --tokens 1024 --hidden 256 --ffn 1024)
  set_tests_properties(memory.${l18} PROPERTIES LABELS "lesson;memory" TIMEOUT 120)
  # 40 settings drawn from a fixed seed (ranks 1-8 and 64, experts, top-k, capacity, sizes, both
  # all-to-alls): every one must verify (tests/property_sweep.sh).
  add_test(NAME property.${l18} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/property_sweep.sh 18 $<TARGET_FILE:${l18}>
                                        2026 40)
  set_tests_properties(property.${l18} PROPERTIES TIMEOUT 600 LABELS "lesson;property" COST 100)
endif()

# Lesson 19: each recompute setting on 1, 2 and 4 ranks (tp 1; tp 2; 2 replicas of tp 2), tp 4,
# with and without sequence parallelism, an odd shape on tp 3, under mpiexec; bad input in one
# sentence; its memory plan held to the process's growth.
if(TARGET 19_activations_recompute)
  set(l19 19_activations_recompute)
  foreach(rc none selective full)
    foreach(n 1 2 4)
      distlab_lesson_test(lesson.${l19}.n${n}-${rc} ${l19} verified ${n} 0 --ranks ${n} --recompute ${rc})
    endforeach()
  endforeach()
  distlab_lesson_test(lesson.${l19}.tp4-full ${l19} verified 4 0 --ranks 4 --tp 4 --recompute full)
  # Sequence parallelism: each setting on tp 2, 2 replicas of tp 2, tp 4.
  foreach(rc none selective full)
    distlab_lesson_test(lesson.${l19}.sp-n2-${rc} ${l19} verified 2 0 --ranks 2 --sequence-parallel --recompute ${rc})
  endforeach()
  distlab_lesson_test(lesson.${l19}.sp-n4-selective ${l19} verified 4 0 --ranks 4 --sequence-parallel --recompute selective)
  distlab_lesson_test(lesson.${l19}.sp-tp4-full ${l19} verified 4 0 --ranks 4 --tp 4 --sequence-parallel --recompute full)
  distlab_lesson_test(lesson.${l19}.tp3-odd-selective ${l19} verified 3 0 --ranks 3 --tp 3 --heads 3 --d 12
                      --context 7 --batch 3 --layers 1 --recompute selective)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l19}.mpi2-full ${l19} verified 2 2 --recompute full)
    distlab_lesson_test(lesson.${l19}.mpi2-sp-full ${l19} verified 2 2 --sequence-parallel --recompute full)
  endif()
  add_test(NAME usage.19.heads-tp COMMAND bash ${expect_failure} 2 10 "the 4 heads must divide over --tp 3"
           -- $<TARGET_FILE:${l19}> --ranks 3 --tp 3 --no-trace)
  add_test(NAME usage.19.tp-ranks COMMAND bash ${expect_failure} 2 10 "--tp 3 does not divide the 4 ranks"
           -- $<TARGET_FILE:${l19}> --ranks 4 --tp 3 --no-trace)
  add_test(NAME usage.19.sp-tokens COMMAND bash ${expect_failure} 2 10 "7 tokens do not split into 2 equal parts"
           -- $<TARGET_FILE:${l19}> --ranks 2 --sequence-parallel --context 7 --batch 1 --no-trace)
  add_test(NAME usage.19.recompute COMMAND bash ${expect_failure} 2 10 "--recompute: bogus not in"
           -- $<TARGET_FILE:${l19}> --recompute bogus --no-trace)
  add_test(NAME usage.19.huge-shape COMMAND bash ${expect_failure} 2 30
           "needs about .* but .* is available; use a smaller --d, --layers, --context or --batch"
           -- $<TARGET_FILE:${l19}> --d 4096 --context 1024 --batch 1024 --no-trace)
  set_tests_properties(usage.19.heads-tp usage.19.tp-ranks usage.19.sp-tokens usage.19.recompute usage.19.huge-shape
                       PROPERTIES LABELS lesson)
  add_test(NAME memory.${l19} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/memory_plan.sh $<TARGET_FILE:${l19}>
           --ranks 2 --d 256 --layers 2 --context 256 --batch 8)
  set_tests_properties(memory.${l19} PROPERTIES LABELS "lesson;memory" TIMEOUT 120)
  # 40 settings drawn from a fixed seed (ranks 1-8 and 64, tp a divisor of them, heads, widths,
  # layers, contexts, batches, each recompute setting, sequence parallel or not): every one must
  # verify (tests/property_sweep.sh).
  add_test(NAME property.${l19} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/property_sweep.sh 19 $<TARGET_FILE:${l19}>
                                        2026 40)
  set_tests_properties(property.${l19} PROPERTIES TIMEOUT 600 LABELS "lesson;property" COST 100)
endif()

# Lesson 20: one recipe on 1 rank over 4 micro-batches, all five on 3 ranks without accumulation,
# fp8 at another seed and shape, fp16 from a scale that overflows its first steps, 2 MPI ranks;
# its inputs refused with a sentence.
if(TARGET 20_mixed_precision)
  set(l20 20_mixed_precision)
  distlab_lesson_test(lesson.${l20}.n1-fp16-m4 ${l20} verified 1 0 --ranks 1 --recipe fp16 --micro-batches 4)
  distlab_lesson_test(lesson.${l20}.n3-m1 ${l20} verified 3 0 --ranks 3 --micro-batches 1 --steps 8)
  distlab_lesson_test(lesson.${l20}.fp8-seed7 ${l20} verified 2 0 --seed 7 --recipe fp8 --batch 100 --width 24 --layers 3)
  distlab_lesson_test(lesson.${l20}.fp16-overflowing ${l20} verified 2 0 --recipe fp16 --initial-scale-power 32 --steps 8)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l20}.mpi2-bf16 ${l20} verified 2 2 --recipe bf16)
  endif()
  add_test(NAME usage.20.recipe COMMAND bash ${expect_failure} 2 10 "--recipe: bogus not in"
           -- $<TARGET_FILE:${l20}> --recipe bogus --no-trace)
  add_test(NAME usage.20.batch COMMAND bash ${expect_failure} 2 10 "--batch 3 leaves some of 2 ranks x 2 micro-batches no sample"
           -- $<TARGET_FILE:${l20}> --batch 3 --no-trace)
  set_tests_properties(usage.20.recipe usage.20.batch PROPERTIES LABELS usage)
endif()

# Lesson 21: every algorithm on 2 ranks with one element, on 6 with uneven chunks, PAT with a
# staging buffer of one chunk (N - 1 steps) and of N/2 (log2 N), one call, as processes under
# mpirun through shared memory; --device cuda, --sweep as processes and a bad --algo refused.
set(l21 21_symmetric_memory)
if(TARGET ${l21})
  distlab_lesson_test(lesson.${l21}.n2-one ${l21} verified 2 0 --ranks 2 --size 1)
  distlab_lesson_test(lesson.${l21}.n6-uneven ${l21} verified 6 0 --ranks 6 --size 1001 --calls 3)
  distlab_lesson_test(lesson.${l21}.pat-b1-n7 ${l21} verified 7 0 --ranks 7 --algo pat --pat-buffer 1 --size 999)
  distlab_lesson_test(lesson.${l21}.pat-b4-n8 ${l21} verified 8 0 --ranks 8 --algo pat --pat-buffer 4)
  distlab_lesson_test(lesson.${l21}.calls1 ${l21} verified 3 0 --ranks 3 --calls 1 --algo one_shot_ll --algo switch)
  add_test(NAME lesson.${l21}.pat-steps COMMAND bash ${expect_failure} 0 60
           "steps 7 = sum of ceil\\(c_k / B\\)" -- $<TARGET_FILE:${l21}> --ranks 8 --algo pat --pat-buffer 1 --no-trace)
  set_tests_properties(lesson.${l21}.pat-steps PROPERTIES LABELS lesson)
  if(DISTLAB_HAVE_MPI)
    distlab_lesson_test(lesson.${l21}.mpi4-shm ${l21} verified 4 4 --transport shm)
  endif()
  # --sweep's path, whatever this machine's cores: the table, the fits and the crossovers printed;
  # its check, made only with a core per rank, is a measurement (the run may say FAILED for it
  # alone, never for any other check).
  add_test(NAME lesson.${l21}.sweep COMMAND bash -c
           "out=$(\"$1\" --ranks 4 --algo one_shot --sweep --no-trace 2>&1); rc=$?; echo \"$out\"
            grep -q 'one_shot -> two_shot: model' <<<\"$out\" || exit 1
            ((rc == 0)) && exit 0
            ((rc == 1)) && [[ $(grep -c '^check failed' <<<\"$out\") == 1 ]] &&
              grep -q '^check failed on r0: sweep: one-shot -> two-shot crosses' <<<\"$out\""
           sweep $<TARGET_FILE:${l21}>)
  set_tests_properties(lesson.${l21}.sweep PROPERTIES LABELS lesson TIMEOUT 120)
  add_test(NAME usage.21.cuda COMMAND bash ${expect_failure} 2 10 "lesson 21's windows are host shared memory|--device cuda: (no CUDA device answers|this build has no CUDA support)"
           -- $<TARGET_FILE:${l21}> --device cuda --no-trace)
  add_test(NAME usage.21.algo COMMAND bash ${expect_failure} 2 10 "--algo: bogus not in"
           -- $<TARGET_FILE:${l21}> --algo bogus --no-trace)
  set_tests_properties(usage.21.cuda usage.21.algo PROPERTIES LABELS usage)
endif()
