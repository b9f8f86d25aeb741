#!/bin/bash
# session 26's first call (gemm, issue 28). (1) The lead's call-A checks, which call A did
# not run: the cross-entropy's staged launch at 16 chunks a thread on the GPU (Hypothesis,
# GPU profile) and under compute-sanitizer (memcheck, racecheck: s24's sanitize.py).
# (2) tuning.TALL_COPIER_TILE (192 x 192, three computing warpgroups and a copier) against
# float64: the GEMM tests' walk and step-product cases with it, tile_check.py's drawn
# cases and the LM head's shapes; under memcheck and racecheck. (3) The head sweep and the
# step A/B once each (every candidate checked against torch.mm; the kernel caches filled
# for bench.sh). Each part under its own timeout, in the background.
D=bench/2026-12-06-s26/gemm
S24=bench/h200-2026-12-04-s24/gemm
clean() { grep --line-buffered -v "Warning\|warn(" ; }
rc() { echo "== rc $1" ; }
{ echo "tree: $(cat commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/test.log
export MICROGPT_TEST_KERNEL_CACHE=$HOME/.cache/microgpt/kernels
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4 timeout -k 3 130 python3 -m pytest -v \
    -p no:cacheprovider tests/test_kernels_crossentropy.py 2>&1 | clean > $OUT/test_ce.log
  rc ${PIPESTATUS[0]} >> $OUT/test_ce.log ) &
( timeout -k 3 70 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $S24/sanitize.py \
    2>&1 | clean > $OUT/memcheck_ce.log; rc ${PIPESTATUS[0]} >> $OUT/memcheck_ce.log
  timeout -k 3 70 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 \
    python3 $S24/sanitize.py 2>&1 | clean > $OUT/racecheck_ce.log
  rc ${PIPESTATUS[0]} >> $OUT/racecheck_ce.log ) &
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4 timeout -k 3 140 python3 -m pytest -v \
    -p no:cacheprovider tests/test_kernels_gemm_bf16.py -k "walk_their_tiles or 192x192" \
    2>&1 | clean > $OUT/test_gemm.log; rc ${PIPESTATUS[0]} >> $OUT/test_gemm.log ) &
( MICROGPT_TEST_DEVICE=gpu timeout -k 3 120 python3 $D/tile_check.py --cases 24 2>&1 | clean \
    > $OUT/tile_check.log; rc ${PIPESTATUS[0]} >> $OUT/tile_check.log ) &
( export MICROGPT_TEST_DEVICE=gpu
  timeout -k 3 70 compute-sanitizer --tool memcheck --error-exitcode 99 python3 $D/tile_check.py \
    --small --cases 6 2>&1 | clean > $OUT/memcheck.log; rc ${PIPESTATUS[0]} >> $OUT/memcheck.log
  timeout -k 3 65 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 99 \
    python3 $D/tile_check.py --small --cases 3 2>&1 | clean > $OUT/racecheck.log
  rc ${PIPESTATUS[0]} >> $OUT/racecheck.log ) &
( timeout -k 3 80 python3 $D/head_sweep.py --configs andrea-120m andrea-12m --rows 8192 --reps 1 \
    --blocks --json $OUT/warm_winners.json 2>&1 | clean > $OUT/warm_sweep.log
  rc ${PIPESTATUS[0]} >> $OUT/warm_sweep.log
  timeout -k 3 60 python3 $D/step_ab.py --config andrea-120m --winners $OUT/warm_winners.json \
    --rounds 1 --steps 2 2>&1 | clean > $OUT/warm_step_ab.log
  rc ${PIPESTATUS[0]} >> $OUT/warm_step_ab.log ) &
( timeout -k 3 110 python3 $D/head_sweep.py --configs andrea-120m --rows 0 --step-products \
    --tiles tall_copier --reps 1 2>&1 | clean > $OUT/warm_tall_copier.log
  rc ${PIPESTATUS[0]} >> $OUT/warm_tall_copier.log ) &
wait
for f in test_ce memcheck_ce racecheck_ce test_gemm tile_check memcheck racecheck warm_sweep warm_step_ab warm_tall_copier; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|FAIL|WRONG|SUMMARY|refused|Error|ok$|== rc" \
    $OUT/$f.log | tail -n 30
done 2>&1 | tee -a $OUT/test.log
tail -n 12 $OUT/warm_step_ab.log | tee -a $OUT/test.log
