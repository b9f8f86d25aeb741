# call A, beside nothing else: generation's kernels on the GPU (never run there at real
# shapes), and the GPT-2-XL geometry's cold start (fills its kernel cache for the warm runs).
XL="--config andrea-120m --n-layer 48 --d-model 1600 --n-head 25 --vocab-size 4096 --batch-size 4 --data $DATA --tokenizer $DATA/tokenizer.json --steps 3 --cache-dir /tmp/mgs"
(MICROGPT_TEST_KERNEL_CACHE=$MICROGPT_CACHE_DIR/kernels MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=6 timeout 190 python3 -m pytest -n 6 -q -x \
   tests/test_kernels_decode.py tests/test_kernels_skinny.py tests/test_kernels_sampling.py \
   tests/test_generate.py 2>&1 | tail -40 > $OUT/gen-tests.log; echo "gen tests rc ${PIPESTATUS[0]}" >> $OUT/gen-tests.log) &
timeout 190 python3 tools/startup_time.py --runs cold --out $OUT/startup-xl-cold.md \
   --title "GPT-2-XL geometry, cold, beside the generation tests (CPU shared)" -- $XL > $OUT/startup-xl-cold.log 2>&1
echo "xl cold rc $?" >> $OUT/startup-xl-cold.log
wait
