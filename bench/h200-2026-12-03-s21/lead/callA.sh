# session 21, call A: main at HEAD (persistent GEMMs routed, attention backward on mma.sync)
T0=$(date +%s); left() { echo $(( ${LEAD_S:-440} - $(date +%s) + T0 )); }
at() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/lead.log"; }
clean() { grep -v "Warning\|warn(" ; }
# 1. the wgmma backward's GPU property test, every example named before it runs (the last
#    "Trying example" before a crash is the culprit)
MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=6 timeout 100 python3 -m pytest -q -x -s -p no:warnings \
  -p no:cacheprovider --hypothesis-verbosity=verbose tests/test_kernels_attention_hopper_backward.py \
  > "$OUT/pytest_hbwd.full.log" 2>&1; echo "rc $?" >> "$OUT/pytest_hbwd.full.log"
tail -60 "$OUT/pytest_hbwd.full.log" > "$OUT/pytest_hbwd.log"; at "hbwd test: $(tail -1 $OUT/pytest_hbwd.full.log)"
# 2. start-up on a fresh machine (the driver's JIT cache empty too: nothing ran GEMMs yet)
timeout 90 python3 tools/startup_time.py --runs fresh warm warm --out "$OUT/startup.md" -- \
  --config andrea-120m --steps 3 --cache-dir /tmp/su 2>&1 | clean | tail -25 > "$OUT/startup.log"; at startup
# 3. the step against torch.compile
timeout 200 python3 tools/bench.py --only steps --bf16-only --reps 10 \
  --steps-geometries andrea-120m andrea-12m andrea-120m-t4096 --out "$OUT/steps.md" 2>&1 | clean | tail -30 > "$OUT/steps.log"; at steps
# 4. --deterministic's cost on text, with the persistent GEMMs routed
(cd bench/h200-2026-12-03-s20/det && timeout 70 python3 det_cost.py 10 3 4096 "$DATA/train.bin" 2>&1 | clean | tail -15) > "$OUT/det_cost.log"; at det_cost
# 5. generation: the bench's own section with the landed defaults
[ "$(left)" -gt 45 ] && { timeout 45 python3 tools/bench.py --only generate --out "$OUT/generate.md" 2>&1 | clean | tail -20 > "$OUT/generate.log"; at generate; }
# 6. the big geometries, if time is left
[ "$(left)" -gt 60 ] && { timeout "$(left)" python3 tools/bench.py --only steps --bf16-only --reps 5 \
  --steps-geometries gpt2-medium gpt2-xl --out "$OUT/steps_big.md" 2>&1 | clean | tail -30 > "$OUT/steps_big.log"; at steps_big; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$OUT/lead.log"
