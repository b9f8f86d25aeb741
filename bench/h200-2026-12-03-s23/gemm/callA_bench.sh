#!/bin/bash
# session 23, call A (helper gemm, alone on the GPU; <= 160 s): every captured GEMM of an
# andrea-120m and an andrea-12m step on today's routing (tuning.split_slabs' narrow copier
# included) beside cuBLAS in the same process (tools/bench.py --only gemm --gemm-captured);
# then tools/profile_step.py of the andrea-120m and andrea-12m bf16 steps (every op's share,
# the captured step's time for scale); the andrea-12m step with the GEMMs' programmatic
# launches against plain ones (step_ab.py, alternating rounds in one process).
D=bench/h200-2026-12-03-s23/gemm
date -u > $OUT/bench_date.txt
echo "tree at $(cat $D/commit.txt 2>/dev/null)" >> $OUT/bench_date.txt
clean() { grep -v "Warning\|warn(" ; }
timeout -k 2 34 python3 tools/bench.py --only gemm --gemm-captured --reps 5 --out $OUT/gemm.md 2>&1 \
  | clean | tee $OUT/gemm.log
left=$((84 - SECONDS)); [ $left -gt 10 ] && timeout -k 2 $left python3 tools/profile_step.py \
  --config andrea-120m --batch-size 16 --seq-len 1024 --precision bf16 --out $OUT/profile_120m.md \
  2>&1 | clean | tee $OUT/profile_120m.log
left=$((120 - SECONDS)); [ $left -gt 10 ] && timeout -k 2 $left python3 tools/profile_step.py \
  --config andrea-12m --batch-size 64 --seq-len 256 --precision bf16 --out $OUT/profile_12m.md \
  2>&1 | clean | tee $OUT/profile_12m.log
left=$((157 - SECONDS)); [ $left -gt 10 ] && timeout -k 2 $left python3 $D/step_ab.py \
  andrea-12m 64 256 20 3 2>&1 | clean | tee $OUT/step_ab_12m.log
echo "bench seconds $SECONDS" | tee -a $OUT/bench_date.txt
