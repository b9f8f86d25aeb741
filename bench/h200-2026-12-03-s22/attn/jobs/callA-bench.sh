#!/bin/bash
# call A (attn, <= 80 s, alone on the GPU): 1) the routed defaults (statistics in 128-byte
# slots: +512 bytes a dk/dv stage) at the shapes beside cuDNN and flash SDPA, one
# process (graph-replayed, best of 5); 2) the forward's tiles (new: a producer warpgroup
# donating its registers, setmaxnreg) beside cuDNN and flash SDPA, one process; 3) ncu
# of the wgmma forward at andrea-120m (one launch, --set full, clocks left alone), its SASS source page (the inner loop's
# instruction mix) and details.
S=bench/h200-2026-12-03-s21/attn
date -u | tee $OUT/bench_date.txt
timeout 28 python3 $S/time_attn.py --reps 5 --variants S --shapes 120m 4096 d128 12m 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_attn.log
timeout 24 python3 bench/h200-2026-12-03-s22/attn/time_fwd.py --reps 5 2>&1 \
  | grep -v "Warning\|warn(" | tee $OUT/time_fwd.log
timeout 18 ncu --clock-control none --kernel-name regex:hopper_attention_forward --launch-skip 2 \
  --launch-count 1 --set full --import-source no -f -o $OUT/fwd_120m \
  python3 bench/h200-2026-12-03-s22/attn/fwd_ncu.py 120m > $OUT/ncu_run.log 2>&1
echo "ncu rc $?" >> $OUT/ncu_run.log
timeout 4 ncu --import $OUT/fwd_120m.ncu-rep --page details --print-details all > $OUT/fwd_120m_details.txt 2>&1
timeout 4 ncu --import $OUT/fwd_120m.ncu-rep --page source --print-source sass --csv > $OUT/fwd_120m_sass.csv 2>&1
tail -3 $OUT/ncu_run.log; wc -l $OUT/fwd_120m_*.txt $OUT/fwd_120m_*.csv
