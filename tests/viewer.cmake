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

file(WRITE ${out}/empty.json "")
file(WRITE ${out}/truncated.json "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":0,")
file(WRITE ${out}/foreign.json "[{\"ph\":\"X\",\"name\":\"work\",\"pid\":7,\"tid\":3,\"ts\":5,\"dur\":10},\
{\"ph\":\"s\",\"id\":1,\"pid\":7,\"tid\":3,\"ts\":6},{\"ph\":\"f\",\"bp\":\"e\",\"id\":1,\"pid\":9,\"tid\":1,\"ts\":12}]")
add_test(NAME viewer.bad.missing COMMAND bash ${expect_failure} 1 20 "cannot open trace .*nope.json"
         -- ${viewer} --png ${out}/x.png ${out}/nope.json)
add_test(NAME viewer.bad.empty COMMAND bash ${expect_failure} 1 20 "the trace is empty"
         -- ${viewer} --png ${out}/empty-out.png ${out}/empty.json)
add_test(NAME viewer.bad.truncated COMMAND bash ${expect_failure} 1 20 "not valid JSON.*truncated"
         -- ${viewer} --png ${out}/truncated-out.png ${out}/truncated.json)
add_test(NAME viewer.foreign COMMAND bash ${expect_failure} 0 20 "wrote .*foreign-out.png"
         -- ${viewer} --png ${out}/foreign-out.png ${out}/foreign.json)
add_test(NAME viewer.bad.panel COMMAND bash ${expect_failure} 2 20 "--panel nope is not a panel"
         -- ${viewer} --png ${out}/x.png --panel nope ${examples}/02_scatter_gather.json)
add_test(NAME viewer.bad.no-display COMMAND env -u DISPLAY -u WAYLAND_DISPLAY
         bash ${expect_failure} 2 20 "no display" -- ${viewer} ${examples}/02_scatter_gather.json)
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
