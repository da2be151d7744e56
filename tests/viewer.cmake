# distlab-viewer from the command line: every example trace renders to a PNG with no display,
# and bad input (missing, empty, truncated, foreign, bad options) gives a clear message and the
# documented exit status, never a crash.
if(NOT TARGET distlab-viewer)
  return()
endif()

set(expect_failure ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.sh)
set(viewer $<TARGET_FILE:distlab-viewer>)
set(examples ${CMAKE_SOURCE_DIR}/traces/examples)
set(out ${CMAKE_CURRENT_BINARY_DIR}/viewer-out)
file(MAKE_DIRECTORY ${out})

file(GLOB example_traces ${examples}/*.json)
foreach(trace ${example_traces})
  get_filename_component(name ${trace} NAME_WE)
  add_test(NAME viewer.png.${name}
           COMMAND bash ${expect_failure} 0 30 "wrote .*${name}.png \\(800x600, step 2.50 of"
                   -- ${viewer} --png ${out}/${name}.png --step 2.5 --width 800 --height 600 ${trace})
  set_tests_properties(viewer.png.${name} PROPERTIES LABELS viewer)
  # The caption of step 1 as text, no display: a sentence, not an empty line.
  add_test(NAME viewer.describe.${name}
           COMMAND bash ${expect_failure} 0 30 "^caption: step 1 of [0-9]+( \\(training step 1 of [0-9]+\\))?(, [a-z+ -]+)?: [a-z0-9]"
                   "^in flight: " "^(shards|memory): "
                   -- ${viewer} --describe --step 1 ${trace})
  set_tests_properties(viewer.describe.${name} PROPERTIES LABELS viewer)
endforeach()

# The Schedule panel alone on lesson 11's five schedules (steps clock: the ideal schedule; measured:
# the run), and GPipe above 1F1B stacked in one panel with --compare.
foreach(name 11_pipeline_microbatching 11_pipeline_microbatching_1f1b 11_pipeline_microbatching_naive
             11_pipeline_microbatching_interleaved 11_pipeline_microbatching_zb_h1)
  add_test(NAME viewer.schedule.${name}
           COMMAND bash ${expect_failure} 0 30 "wrote .*schedule-${name}.png \\(800x600, step 3.50 of"
                   -- ${viewer} --png ${out}/schedule-${name}.png --panel schedule --step 3.5
                      --width 800 --height 600 ${examples}/${name}.json)
  add_test(NAME viewer.schedule.measured.${name}
           COMMAND bash ${expect_failure} 0 30 "wrote .*schedule-measured-${name}.png"
                   -- ${viewer} --png ${out}/schedule-measured-${name}.png --panel schedule
                      --clock measured --step 3.5 --width 800 --height 600 ${examples}/${name}.json)
  set_tests_properties(viewer.schedule.${name} viewer.schedule.measured.${name} PROPERTIES LABELS viewer)
endforeach()
add_test(NAME viewer.schedule.compare
         COMMAND bash ${expect_failure} 0 30 "wrote .*schedule-compare.png \\(1200x900"
                 -- ${viewer} --png ${out}/schedule-compare.png --panel schedule --compare --step 9.5
                    --width 1200 --height 900 ${examples}/11_pipeline_microbatching.json
                    ${examples}/11_pipeline_microbatching_1f1b.json)
# A trace of another lesson: the panel says it has no pipeline, and the frame is still written.
add_test(NAME viewer.schedule.not-a-pipeline
         COMMAND bash ${expect_failure} 0 30 "wrote .*schedule-02.png"
                 -- ${viewer} --png ${out}/schedule-02.png --panel schedule ${examples}/02_scatter_gather.json)
set_tests_properties(viewer.schedule.compare viewer.schedule.not-a-pipeline PROPERTIES LABELS viewer)
# The Splits panel: lessons 12 and 13 draw their layer (at step 0.5, inside g's all-reduce);
# a trace without otherData.splits renders and says there is nothing to show.
foreach(name 12_tensor_parallel_mlp 13_tensor_parallel_attention)
  add_test(NAME viewer.panel.splits.${name}
           COMMAND bash ${expect_failure} 0 30 "wrote .*splits-${name}.png \\(800x500, step 0.50 of"
                   -- ${viewer} --png ${out}/splits-${name}.png --panel splits --step 0.5
                      --width 800 --height 500 ${examples}/${name}.json)
  set_tests_properties(viewer.panel.splits.${name} PROPERTIES LABELS viewer)
endforeach()
add_test(NAME viewer.panel.splits.none
         COMMAND bash ${expect_failure} 0 30 "wrote .*splits-none.png"
                 "the splits panel has nothing to show: this trace declares no tensor-parallel splits"
                 -- ${viewer} --png ${out}/splits-none.png --panel splits ${examples}/02_scatter_gather.json)
set_tests_properties(viewer.panel.splits.none PROPERTIES LABELS viewer)

file(WRITE ${out}/empty.json "")
file(WRITE ${out}/truncated.json "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,")
file(WRITE ${out}/foreign.json "[{\"ph\":\"X\",\"name\":\"work\",\"pid\":7,\"tid\":3,\"ts\":5,\"dur\":10},\
{\"ph\":\"s\",\"id\":1,\"pid\":7,\"tid\":3,\"ts\":6},{\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":9,\"tid\":1,\"ts\":12}]")
add_test(NAME viewer.bad.missing COMMAND bash ${expect_failure} 1 20 "cannot open trace .*nope.json"
         "no trace loaded: nothing to draw, nothing written"
         -- ${viewer} --png ${out}/x.png ${out}/nope.json)
# Through ./distlab view too: a file that is named is the trace, whatever its name ends with.
file(WRITE ${out}/words.txt "root:x:0:0:root:/root:/bin/bash\n")
add_test(NAME viewer.bad.not-a-trace-front COMMAND bash ${expect_failure} 1 20 "words.txt: the trace is not a JSON"
         "nothing written"
         -- env DISTLAB_NO_DEPS=1 DISTLAB_BUILD_DIR=${CMAKE_BINARY_DIR} bash ${CMAKE_SOURCE_DIR}/distlab
            view --png ${out}/words-front.png ${out}/words.txt)
# A file that is no trace at all: exit 1 and no picture (an empty one would pass for a drawing).
file(WRITE ${out}/words.json "root:x:0:0:root:/root:/bin/bash\n")
add_test(NAME viewer.bad.not-a-trace COMMAND bash ${expect_failure} 1 20 "not a JSON object or array"
         "nothing written" "no picture"
         -- bash -c "rm -f ${out}/words.png; ${viewer} --png ${out}/words.png ${out}/words.json; rc=\$?; [[ -e ${out}/words.png ]] || echo 'no picture'; exit \$rc")
add_test(NAME viewer.bad.empty COMMAND bash ${expect_failure} 1 20 "the trace is empty"
         -- ${viewer} --png ${out}/empty-out.png ${out}/empty.json)
add_test(NAME viewer.bad.truncated COMMAND bash ${expect_failure} 1 20 "not valid JSON.*truncated"
         -- ${viewer} --png ${out}/truncated-out.png ${out}/truncated.json)
add_test(NAME viewer.foreign COMMAND bash ${expect_failure} 0 20 "wrote .*foreign-out.png"
         -- ${viewer} --png ${out}/foreign-out.png ${out}/foreign.json)
add_test(NAME viewer.bad.panel COMMAND bash ${expect_failure} 2 20 "--panel nope is not a panel; use .*stats, memory-compare, schedule or splits"
         -- ${viewer} --png ${out}/x.png --panel nope ${examples}/02_scatter_gather.json)
add_test(NAME viewer.bad.no-display COMMAND env -u DISPLAY -u WAYLAND_DISPLAY
         bash ${expect_failure} 2 20 "no display" -- ${viewer} ${examples}/02_scatter_gather.json)
# The frames of an animation (scripts/make-animations.sh): N PNGs over the whole playback.
add_test(NAME viewer.png-sequence COMMAND bash ${expect_failure} 0 60
         "wrote 3 frames .*seq-000.png .. .*seq-002.png \\(320x200"
         -- ${viewer} --png ${out}/seq.png --png-sequence 3 --width 320 --height 200
            ${examples}/02_scatter_gather.json)
add_test(NAME viewer.bad.png-sequence-step COMMAND bash ${expect_failure} 2 20
         "--png-sequence needs --png FILE and runs over the whole playback"
         -- ${viewer} --png ${out}/seq.png --png-sequence 3 --step 1 ${examples}/02_scatter_gather.json)
set_tests_properties(viewer.png-sequence viewer.bad.png-sequence-step PROPERTIES LABELS viewer)
add_test(NAME viewer.describe.bad.missing COMMAND bash ${expect_failure} 1 20 "cannot open trace .*nope.json"
         -- ${viewer} --describe --step 1 ${out}/nope.json)
add_test(NAME viewer.describe.bad.no-trace COMMAND bash ${expect_failure} 2 20 "need a trace file"
         -- ${viewer} --describe --step 1)
add_test(NAME viewer.describe.bad.with-png COMMAND bash ${expect_failure} 2 20 "excludes"
         -- ${viewer} --describe --png ${out}/x.png ${examples}/02_scatter_gather.json)
add_test(NAME viewer.describe.bad.step COMMAND bash ${expect_failure} 2 20 "--step"
         -- ${viewer} --describe --step two ${examples}/02_scatter_gather.json)
add_test(NAME viewer.describe.foreign COMMAND bash ${expect_failure} 0 20
         "^caption: " "shards: this trace declares no buffers" "memory: this trace has no memory ledger"
         -- ${viewer} --describe ${out}/foreign.json)
# A panel with nothing to show still renders when asked for by name (it says why).
add_test(NAME viewer.png.shards-without-buffers COMMAND bash ${expect_failure} 0 30 "wrote .*shards-none.png"
         -- ${viewer} --png ${out}/shards-none.png --panel shards --width 640 --height 360
            ${examples}/11_pipeline_microbatching.json)
add_test(NAME viewer.bench-frames COMMAND bash ${expect_failure} 0 60 "frame build over 20 frames"
         -- ${viewer} --bench-frames 20 ${examples}/06_allreduce_sequential_ring_parallel.json)
# The lessons' own pictures: ZeRO's stages side by side from several traces (any subset, one
# line naming the stages found), and the parameter server's star.
add_test(NAME viewer.png.memory-compare COMMAND bash ${expect_failure} 0 30
         "memory-compare: baseline DP, P_os, P_os\\+g, P_os\\+g\\+p"
         -- ${viewer} --png ${out}/memory-compare.png --panel memory-compare ${examples}/08_zero1.json
            ${examples}/09_zero2.json ${examples}/10_zero3_fsdp.json)
add_test(NAME viewer.png.memory-compare-subset COMMAND bash ${expect_failure} 0 30
         "memory-compare: baseline DP, P_os, P_os\\+g\\+p$" "05_parameter_server: not a ZeRO"
         -- ${viewer} --png ${out}/memory-compare-subset.png --panel memory-compare
            ${examples}/10_zero3_fsdp.json ${examples}/08_zero1.json ${examples}/05_parameter_server.json)
add_test(NAME viewer.bad.png-many COMMAND bash ${expect_failure} 2 20 "--png renders one trace"
         -- ${viewer} --png ${out}/x.png ${examples}/08_zero1.json ${examples}/09_zero2.json
            ${examples}/10_zero3_fsdp.json)
add_test(NAME viewer.png.parameter-server COMMAND bash ${expect_failure} 0 30
         "wrote .*parameter-server.png \\(800x800, step 3.00 of"
         -- ${viewer} --png ${out}/parameter-server.png --panel topology --step 3 --width 800
            --height 800 ${examples}/05_parameter_server.json)
set_tests_properties(viewer.png.memory-compare viewer.png.memory-compare-subset viewer.bad.png-many
                     viewer.png.parameter-server PROPERTIES LABELS viewer)

# The interactive path (GLFW window, OpenGL 3.3 core) under a virtual X server.
find_program(XVFB_RUN xvfb-run)
if(XVFB_RUN)
  add_test(NAME viewer.window.xvfb COMMAND bash ${expect_failure} 0 60 "closed after 30 frames"
           -- ${XVFB_RUN} -a -s "-screen 0 1280x720x24" ${viewer} --frames 30 --compare
              ${examples}/06_allreduce_sequential_ring_parallel.json ${examples}/07_recursive_halving.json)
  set_tests_properties(viewer.window.xvfb PROPERTIES LABELS viewer)
endif()

set_tests_properties(viewer.bad.missing viewer.bad.empty viewer.bad.truncated viewer.foreign viewer.bad.panel
                     viewer.bad.no-display viewer.bench-frames viewer.describe.bad.missing
                     viewer.describe.bad.no-trace viewer.describe.bad.with-png viewer.describe.bad.step
                     viewer.describe.foreign viewer.png.shards-without-buffers PROPERTIES LABELS viewer)

# Real runs (viewer/model/pytorch_trace.hpp): PyTorch profiler traces, one per rank, in a folder
# or given one after another, open as one run; the slow-rank sample's straggler is named in the
# window's PNG run and in --describe (distlab-analyze: tests/analyze.cmake).
set(torch ${CMAKE_SOURCE_DIR}/traces/torch)
add_test(NAME viewer.torch.png.ddp4
         COMMAND bash ${expect_failure} 0 30 "wrote .*torch-ddp4.png \\(800x600, step 6.00 of 20"
                 -- ${viewer} --png ${out}/torch-ddp4.png --step 6 --width 800 --height 600 ${torch}/ddp4/)
add_test(NAME viewer.torch.png.files
         COMMAND bash ${expect_failure} 0 30 "wrote .*torch-ddp2.png \\(800x600, step 2.00 of 20"
                 -- ${viewer} --png ${out}/torch-ddp2.png --step 2 --width 800 --height 600
                    ${torch}/ddp2/rank0.json ${torch}/ddp2/rank1.json)
add_test(NAME viewer.torch.describe.slow
         COMMAND bash ${expect_failure} 0 30
                 "^caption: step 2 of 20, all-reduce: all-reduce #1: rank 3 arrives last"
                 "^  r3: arrives \\+[0-9.]+ ms, waits 0.0 us, in the call [0-9.]+ ms \\(last in\\)$"
                 "^slowest rank: rank 3 arrived last at [0-9]+ of 20 calls"
                 "^clocks: aligned on matched collectives' ends"
                 "ranks in the order the files were given"
                 -- ${viewer} --describe --step 2 ${torch}/ddp4-slow)
add_test(NAME viewer.torch.describe.pt2
         COMMAND bash ${expect_failure} 0 30
                 "^  all-reduce #5 \\(group 0\\): 4.00 MiB, last rank 2 \\(late 3.00 ms\\).*busbw 49.2 GB/s"
                 "ranks from each file's distributedInfo; collectives from \".*NCCL kernels\""
                 -- ${viewer} --describe ${torch}/pt2-comms)
set_tests_properties(viewer.torch.png.ddp4 viewer.torch.png.files viewer.torch.describe.slow
                     viewer.torch.describe.pt2 PROPERTIES LABELS viewer)
# The real traces others recorded, opened in place (../shared/real-traces beside the checkout;
# skipped, saying so, without it): Megatron-LM's 8 ranks described at its first call, HTA's
# gzipped rank drawn.
set(real ${CMAKE_SOURCE_DIR}/../shared/real-traces)
add_test(NAME viewer.real.describe.megatron
         COMMAND bash ${expect_failure} 0 60
                 "^caption: step 1 of 92, all-reduce: all-reduce #0 \\(group 8-rank #0\\): rank 0 arrives last.*64.0 MiB \\(shapes of c10d::allreduce and nccl:all_reduce\\), busbw [0-9.]+ GB/s; forward, ProfilerStep#3$"
                 "^  forward +84 calls"
                 -- bash -c "test -d '${real}' || { echo 'skipped: no ${real}'; exit 77; }; exec '${viewer}' --describe --step 1 '${real}/astrasim-megatron-tp8'")
add_test(NAME viewer.real.png.hta-gz
         COMMAND bash ${expect_failure} 0 60 "wrote .*real-hta.png \\(800x600, step 3.00 of 21"
                 -- bash -c "test -d '${real}' || { echo 'skipped: no ${real}'; exit 77; }; exec '${viewer}' --png '${out}/real-hta.png' --step 3 --width 800 --height 600 '${real}/hta-single-rank'")
set_tests_properties(viewer.real.describe.megatron viewer.real.png.hta-gz PROPERTIES
                     SKIP_RETURN_CODE 77 LABELS viewer)
