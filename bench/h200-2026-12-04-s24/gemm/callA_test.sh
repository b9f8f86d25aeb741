#!/bin/bash
# session 24, call A, helper gemm's test job (beside the other helpers' tests; killed at
# 140 s): the cross-entropy's new default launch (STAGED_CHUNKS: 128 threads at V 4096) on
# the GPU (Hypothesis, GPU profile) and under compute-sanitizer (memcheck, racecheck:
# sanitize.py); meanwhile the bench's programs run once to fill the caches (inductor's for
# torch.compile, the kernel cache for microgpt's step) so that bench.sh times, not compiles;
# and a probe of how long the GPT-2 geometries' step rows take from a cold start.
D=bench/h200-2026-12-04-s24/gemm
clean() { grep -v "Warning\|warn(" ; }
{ echo "tree: $(cat $D/commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/test.log
( export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4
  timeout -k 3 125 python3 -m pytest -v -p no:cacheprovider tests/test_kernels_crossentropy.py \
    -k "staged or default_block or forward_backward" 2>&1 | clean > $OUT/test_ce.log ) &
( timeout -k 3 60 compute-sanitizer --tool memcheck --error-exitcode 1 python3 $D/sanitize.py \
    2>&1 | clean > $OUT/memcheck.log
  timeout -k 3 60 compute-sanitizer --tool racecheck --error-exitcode 1 python3 $D/sanitize.py \
    2>&1 | clean > $OUT/racecheck.log
  timeout -k 3 15 python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-12m --reps 1 --only crossentropy \
    layernorm_backward residual_layernorm 2>&1 | clean > $OUT/warm_bw.log ) &
( timeout -k 3 130 python3 $D/torch_profile.py --geometries andrea-12m andrea-120m --steps 1 \
    2>&1 | clean > $OUT/warm_torch.log ) &
( timeout -k 3 60 python3 tools/profile_step.py --config andrea-12m --batch-size 64 --seq-len 256 \
    --precision bf16 --torch-compile 2>&1 | clean > $OUT/warm_profile_12m.log
  timeout -k 3 65 python3 tools/profile_step.py --config andrea-120m --batch-size 16 --seq-len 1024 \
    --precision bf16 2>&1 | clean > $OUT/warm_profile_120m.log ) &
# how long the GPT-2 geometries' rows take from a cold start (the lead times them in call
# C and needs them within ~150 s): each line of the bench stamped with its second
( export T0=$(date +%s)
  timeout -k 3 132 python3 tools/bench.py --only steps --bf16-only --reps 5 --steps-geometries \
    gpt2-medium gpt2-xl --out $OUT/steps_gpt2_probe.md 2>&1 | clean | while IFS= read -r l; do
    echo "[$(( $(date +%s) - T0 )) s] $l"; done > $OUT/steps_gpt2_probe.log ) &
wait
for f in $OUT/test_ce.log $OUT/memcheck.log $OUT/racecheck.log; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|error|ok$|WRONG|SUMMARY" $f | tail -n 30
done 2>&1 | tee -a $OUT/test.log
for f in $OUT/warm_*.log $OUT/steps_gpt2_probe.log; do echo "== $f"; tail -n 3 $f; done | tee -a $OUT/test.log
