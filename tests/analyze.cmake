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
                 "^step +collective +size +ranks +last +late +waits +transfer +algbw +busbw +phase +size from; notes$"
                 "^ +2 +all-reduce #1 +\\? +4/4 +3 .* backward +size unknown$"
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
                 "^ +6 +all-reduce #5 \\(group 0\\) +4.00 MiB +4/4 +2 +3.00 ms +9.00 ms +128.0 us +32.8 GB/s +49.2 GB/s +other +comms args$"
                 "^ +5 +reduce-scatter #4 \\(group 0\\) +16.0 MiB +4/4 +- .* 24.6 GB/s +other +comms args$"
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
add_test(NAME analyze.bad.empty-folder COMMAND bash ${expect_failure} 1 20 "is a folder with no .json or .json.gz trace"
         -- ${analyze} ${out}/empty-dir)
file(MAKE_DIRECTORY ${out}/empty-dir)
set_tests_properties(analyze.slow analyze.csv analyze.pt2 analyze.summary analyze.bad.missing
                     analyze.bad.truncated analyze.bad.lesson analyze.bad.none analyze.bad.csv
                     analyze.bad.empty-folder PROPERTIES LABELS viewer)

# Gzipped files (tensorboard_trace_handler(use_gzip=True)): the 2.x run gzipped into a folder
# of *.pt.trace.json.gz, read as the plain files are.
add_test(NAME analyze.gz
         COMMAND bash ${expect_failure} 0 30
                 "^ +6 +all-reduce #5 \\(group 0\\) +4.00 MiB +4/4 +2 +3.00 ms"
                 -- bash -c "rm -rf '${out}/gz' && mkdir -p '${out}/gz' && for r in 0 1 2 3; do gzip -c '${torch}/pt2-comms/rank'$r'.json' > '${out}/gz/host_'$r'.1700000000.pt.trace.json.gz'; done && '${analyze}' '${out}/gz'")
set_tests_properties(analyze.gz PROPERTIES LABELS viewer)

# The real traces others recorded, read in place (../shared/real-traces beside the checkout;
# skipped, and saying so, without it): Megatron-LM's 8 ranks with every all-reduce's size
# from its shapes, bandwidth and phase; HTA's gzipped rank with its comms args.
set(real ${CMAKE_SOURCE_DIR}/../shared/real-traces)
add_test(NAME analyze.real.megatron
         COMMAND bash ${expect_failure} 0 60
                 "^ +1 +all-reduce #0 \\(group 8-rank #0\\) +64.0 MiB +8/8 .* GB/s +[0-9.]+ GB/s +forward +shapes of c10d::allreduce and nccl:all_reduce$"
                 "^sizes: [0-9]+ of [0-9]+ calls have them"
                 "^  forward +84 calls"
                 -- bash -c "test -d '${real}' || { echo 'skipped: no ${real}'; exit 77; }; exec '${analyze}' '${real}/astrasim-megatron-tp8'")
add_test(NAME analyze.real.hta-gz
         COMMAND bash ${expect_failure} 0 60 "^sizes: 21 of 21 calls have them: 21 from comms args$"
                 "^  backward +15 calls"
                 -- bash -c "test -d '${real}' || { echo 'skipped: no ${real}'; exit 77; }; exec '${analyze}' --summary '${real}/hta-single-rank'")
set_tests_properties(analyze.real.megatron analyze.real.hta-gz PROPERTIES SKIP_RETURN_CODE 77
                     LABELS viewer)

# The sample script end to end, where PyTorch is installed (skipped, and saying so, elsewhere).
add_test(NAME analyze.torch-samples
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/torch_samples.sh ${analyze} ${out}/torch)
set_tests_properties(analyze.torch-samples PROPERTIES SKIP_RETURN_CODE 77 LABELS "viewer;torch"
                     TIMEOUT 600)
