#!/bin/bash
# session 23, call A (helper det, beside the other helpers' tests; limit 140 s):
# tools/converge.py's CPU test with torch (the report's mean-curve criterion through the
# tool itself, before the lead's call B runs it), then the GEMM's ordered property tests
# that did not finish in session 22's calls (the persistent kernel in turns and by parts,
# at real shapes; 2 examples each, compiling from an empty cache takes most of the time),
# verbose so that a cut still shows which passed.
echo "tree at $(cat bench/h200-2026-12-03-s23/det/commit.txt 2>/dev/null)" > $OUT/test.log
timeout -k 3 55 python3 -m pytest -v -p no:cacheprovider tests/test_converge.py \
  tests/test_converge_report.py 2>&1 | grep -v "Warning\|warn(" | tee $OUT/test_converge.log
echo "test_converge rc ${PIPESTATUS[0]}" | tee -a $OUT/test.log
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
timeout -k 3 75 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_gemm_bf16.py \
  -k "persistent_ordered_split_k or add_parts_adds or gives_the_same_bits_every_run" 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/test_ordered.log
echo "test_ordered rc ${PIPESTATUS[0]}" | tee -a $OUT/test.log
