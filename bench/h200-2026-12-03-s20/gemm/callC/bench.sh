#!/bin/bash
# gemm, call C (<= 50 s): every step product captured with the launcher's defaults (routed
# to the copier / ping-pong tiles) beside the wgmma tiles (the policy before) and cuBLAS
P=bench/h200-2026-12-03-s20/gemm/probe.py
date -u > $OUT/bench_date.txt
VARIANTS=default,wgmma REPS=5 timeout 33 python3 $P time andrea-120m andrea-12m 2>&1 | grep -v "Warning\|warn(" | tee $OUT/time.log
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section WarpStateStats --section InstructionStats --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters"
left=$((47 - SECONDS)); [ $left -gt 8 ] && timeout $left $NCU --profile-from-start off --clock-control none $S -f -o $OUT/ncu_lmdw \
  python3 $P ncu "LM head dW" andrea-120m copier torch 2>&1 | tail -6 | tee $OUT/ncu.log
