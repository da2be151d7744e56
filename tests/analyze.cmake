# distlab-analyze on the committed real runs (traces/torch/): the slow rank named, the table,
# the CSV's rows, the synthetic 2.x run's bandwidth, and bad input with a sentence and the
# documented exit status (1: did not load or write; 2: bad options or not a real run).
set(expect_failure ${CMAKE_CURRENT_SOURCE_DIR}/expect_failure.sh)
set(analyze $<TARGET_FILE:distlab-analyze>)
set(torch ${CMAKE_SOURCE_DIR}/traces/torch)
set(out ${CMAKE_CURRENT_BINARY_DIR}/analyze-out)
file(MAKE_DIRECTORY ${out})

add_test(NAME analyze.slow
         COMMAND bash ${expect_failure} 0 30
                 "^slowest rank: rank 3 arrived last at [0-9]+ of 20 calls"
                 "^step +collective +size +ranks +last +late +waits +transfer +algbw +busbw$"
                 "^ +2 +all-reduce #1 +\\? +4 +3 "
                 "wrote .*slow.csv \\(20 calls\\)"
                 -- ${analyze} --csv ${out}/slow.csv ${torch}/ddp4-slow)
# The CSV: a header and one row per call and rank (20 x 4), rank 3 the straggler of call 2.
add_test(NAME analyze.csv
         COMMAND bash ${expect_failure} 0 30 "^81 rows$"
                 "^step,collective,index,group,rank,arrival_us,duration_us,wait_us,last_rank,straggler,bytes,"
                 "^2,\"all-reduce\",1,\"\",3,[0-9.]+,[0-9.]+,0.000,3,1,-1,"
                 -- bash -c "'${analyze}' --csv '${out}/rows.csv' '${torch}/ddp4-slow' >/dev/null && echo \"$(wc -l < '${out}/rows.csv') rows\" && cat '${out}/rows.csv'")
add_test(NAME analyze.pt2
         COMMAND bash ${expect_failure} 0 30
                 "^ +6 +all-reduce #5 \\(group 0\\) +4.00 MiB +4 +2 +3.00 ms +9.00 ms +128.0 us +32.8 GB/s +49.2 GB/s$"
                 "^ +5 +reduce-scatter #4 \\(group 0\\) +16.0 MiB +4 +- .* 24.6 GB/s$"
                 -- ${analyze} ${torch}/pt2-comms/rank0.json ${torch}/pt2-comms/rank1.json
                    ${torch}/pt2-comms/rank2.json ${torch}/pt2-comms/rank3.json)
add_test(NAME analyze.summary
         COMMAND bash ${expect_failure} 0 30 "^real run: 2 ranks" "^per rank"
                 -- ${analyze} --summary ${torch}/ddp2)

file(WRITE ${out}/cut.json "[{\"ph\": \"X\", \"name\": \"gloo:all_reduce\", \"pid\": \"CPU functions\", \"tid\": 2, \"ts\": 5, ")
add_test(NAME analyze.bad.missing COMMAND bash ${expect_failure} 1 20 "cannot open trace .*nope.json"
         -- ${analyze} ${out}/nope.json)
add_test(NAME analyze.bad.truncated COMMAND bash ${expect_failure} 1 20 "cut.json: .*truncated"
         -- ${analyze} ${torch}/ddp2/rank0.json ${out}/cut.json)
add_test(NAME analyze.bad.lesson COMMAND bash ${expect_failure} 2 20 "02_scatter_gather.json is not a PyTorch profiler trace"
         -- ${analyze} ${CMAKE_SOURCE_DIR}/traces/examples/02_scatter_gather.json)
add_test(NAME analyze.bad.none COMMAND bash ${expect_failure} 2 20 "traces is required"
         -- ${analyze})
add_test(NAME analyze.bad.csv COMMAND bash ${expect_failure} 1 20 "cannot write ${out}/no/such/dir.csv"
         -- ${analyze} --csv ${out}/no/such/dir.csv ${torch}/ddp2)
add_test(NAME analyze.bad.empty-folder COMMAND bash ${expect_failure} 1 20 "is a folder with no .json trace"
         -- ${analyze} ${out}/empty-dir)
file(MAKE_DIRECTORY ${out}/empty-dir)
set_tests_properties(analyze.slow analyze.csv analyze.pt2 analyze.summary analyze.bad.missing
                     analyze.bad.truncated analyze.bad.lesson analyze.bad.none analyze.bad.csv
                     analyze.bad.empty-folder PROPERTIES LABELS viewer)

# The sample script end to end, where PyTorch is installed (skipped, and saying so, elsewhere).
add_test(NAME analyze.torch-samples
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torch_samples.sh ${analyze} ${out}/torch)
set_tests_properties(analyze.torch-samples PROPERTIES SKIP_RETURN_CODE 77 LABELS "viewer;torch"
                     TIMEOUT 600)
