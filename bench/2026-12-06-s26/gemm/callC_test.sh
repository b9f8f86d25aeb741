#!/bin/bash
# session 26's second call (gemm, issue 28) on the branch with TALL_COPIER_TILE reverted:
# the cross-entropy's staged launch on the GPU again (this tree's hash), the persistent
# tiles' walk and the routing; then both configs' step profiles and torch.compile's step
# once each, to fill the kernel and inductor caches for bench.sh.
S24=bench/h200-2026-12-04-s24/gemm
clean() { grep --line-buffered -v "Warning\|warn(" ; }
rc() { echo "== rc $1" ; }
{ echo "tree: $(cat commit.txt)"; date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader; } | tee $OUT/test.log
export MICROGPT_TEST_KERNEL_CACHE=$HOME/.cache/microgpt/kernels
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4 timeout -k 3 130 python3 -m pytest -v \
    -p no:cacheprovider tests/test_kernels_crossentropy.py -k "staged or default_block" \
    2>&1 | clean > $OUT/test_ce.log; rc ${PIPESTATUS[0]} >> $OUT/test_ce.log ) &
( MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=4 timeout -k 3 130 python3 -m pytest -v \
    -p no:cacheprovider tests/test_kernels_gemm_bf16.py \
    -k "walk_their_tiles or routes or asks_for_persistent or ordered_split_k_takes" \
    2>&1 | clean > $OUT/test_gemm.log; rc ${PIPESTATUS[0]} >> $OUT/test_gemm.log ) &
( timeout -k 3 140 python3 tools/profile_step.py --config andrea-120m --batch-size 16 --seq-len 1024 \
    --precision bf16 --out $OUT/warm_profile_120m.md 2>&1 | clean > $OUT/warm_profile_120m.log
  rc ${PIPESTATUS[0]} >> $OUT/warm_profile_120m.log ) &
( timeout -k 3 140 python3 tools/profile_step.py --config andrea-12m --batch-size 64 --seq-len 256 \
    --precision bf16 --out $OUT/warm_profile_12m.md 2>&1 | clean > $OUT/warm_profile_12m.log
  rc ${PIPESTATUS[0]} >> $OUT/warm_profile_12m.log ) &
( timeout -k 3 140 python3 $S24/torch_profile.py --geometries andrea-12m andrea-120m --steps 1 \
    2>&1 | clean > $OUT/warm_torch.log; rc ${PIPESTATUS[0]} >> $OUT/warm_torch.log ) &
wait
for f in test_ce test_gemm warm_profile_120m warm_profile_12m warm_torch; do
  echo "== $f"; grep -E "PASSED|FAILED|ERROR|passed|failed|captured step|Error|== rc" $OUT/$f.log | tail -n 20
done 2>&1 | tee -a $OUT/test.log
