#!/bin/bash
# session 24, call B, helper gemm's test job (beside the other helpers' tests; killed at
# 140 s): the cross-entropy's default launch now a warp a row at V 4096 (STAGED_CHUNKS 16;
# 416 threads at 50304) on the GPU (Hypothesis, GPU profile) and under compute-sanitizer
# (memcheck, racecheck: sanitize.py); meanwhile the bench's programs run once to fill the
# caches (inductor's, the kernel cache's, gemm_head.py's whole-batch LM head routing); and
# the GPT-2 XL row alone, graph and torch.compile only, each line stamped as it comes.
D=bench/h200-2026-12-04-s24/gemm
clean() { grep --line-buffered -v "Warning\|warn(" ; }
{ echo "tree: $(cat $D/commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/test.log
( export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4
  timeout -k 3 125 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_crossentropy.py \
    -k "staged or default_block or forward_backward" 2>&1 | clean > $OUT/test_ce.log ) &
( timeout -k 3 50 compute-sanitizer --tool memcheck --error-exitcode 1 python3 $D/sanitize.py \
    2>&1 | clean > $OUT/memcheck.log
  timeout -k 3 50 compute-sanitizer --tool racecheck --error-exitcode 1 python3 $D/sanitize.py \
    2>&1 | clean > $OUT/racecheck.log
  timeout -k 3 30 python3 $D/gemm_head.py --configs andrea-120m andrea-12m --reps 1 --head-only \
    2>&1 | clean > $OUT/warm_gemm_head.log ) &
( timeout -k 3 130 python3 $D/torch_profile.py --geometries andrea-12m andrea-120m --steps 1 \
    2>&1 | clean > $OUT/warm_torch.log ) &
( export T0=$(date +%s)
  timeout -k 3 132 python3 tools/bench.py --only steps --bf16-only --reps 5 --steps-geometries \
    gpt2-xl --steps-runs ours_bf16_graph torch_compile --out $OUT/steps_gpt2xl_probe.md 2>&1 \
    | clean | while IFS= read -r l; do echo "[$(( $(date +%s) - T0 )) s] $l"; done \
    > $OUT/steps_gpt2xl_probe.log ) &
wait
for f in $OUT/test_ce.log $OUT/memcheck.log $OUT/racecheck.log; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|error|ok$|WRONG|SUMMARY" $f | tail -n 30
done 2>&1 | tee -a $OUT/test.log
for f in $OUT/warm_*.log $OUT/steps_gpt2xl_probe.log; do echo "== $f"; tail -n 4 $f; done \
  | tee -a $OUT/test.log
