#!/bin/bash
# mem, call C (135 s, beside the other helpers' tests): (1) the kernels of the GPT-2
# geometries' bf16 steps, kept and recomputed, compiled into the trainer's kernel cache that
# tools/bench.py reads in this call's bench (warm.py: a one-layer model of each geometry);
# (2) torch.compile's peak memory at gpt2-medium and gpt2-xl (max_memory_allocated: its own
# allocations, whatever else runs on the device; its tokens/s here mean nothing);
# (3) the trainer with --recompute on at andrea-12m, 30 steps (its log line, its loss);
# (4) bw.py's cross-entropy and LayerNorm backward rows, compiled into the same cache
# (--reps 1: the bench's run times them alone)
date -u > $OUT/test_date.txt
export OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2
T="timeout -s INT 130"
clean() { grep -v "NumbaPerformanceWarning\|warn(errors\|^$"; }
($T python3 bench/h200-2026-12-03-s23/mem/warm.py --geometries gpt2-xl 2>&1 | clean > $OUT/warm_xl.log) &
($T python3 bench/h200-2026-12-03-s23/mem/warm.py --geometries gpt2-medium 2>&1 | clean > $OUT/warm_medium.log) &
for g in gpt2-medium gpt2-xl; do
  ($T python3 tools/bench.py --only steps --bf16-only --reps 4 --steps-geometries $g \
     --steps-runs torch_compile --out $OUT/torch_compile_$g.md 2>&1 | clean | tail -5 \
     > $OUT/torch_compile_$g.log) &
done
($T python3 -m microgpt.train --config andrea-12m --data "$DATA" --tokenizer "$DATA/tokenizer.json" \
   --steps 30 --batch-size 64 --recompute on --eval-every 0 --sample-every 0 --checkpoint-every 0 \
   --log-every 10 --out /tmp/mem_recompute_run 2>&1 | clean | tail -12 > $OUT/train_recompute.log) &
($T python3 bench/h200-2026-12-03-s23/mem/bw.py --geometries andrea-12m andrea-120m --reps 1 \
   --only crossentropy layernorm_backward 2>&1 | clean > $OUT/bw_warm.log) &
wait
tail -n 6 $OUT/*.log
