# session 24 (lead, alone on the GPU): the step, microgpt bf16 captured against torch.compile
# bf16 in one process a geometry, on main (commit.txt)
T0=$(date +%s)
git log -1 --format=%h 2>/dev/null > "$OUT/commit.txt"; cat .devtree/jobs/_lead/commit.txt >> "$OUT/commit.txt" 2>/dev/null
for g in ${GEOMS:-gpt2-medium gpt2-xl}; do
  timeout ${STEP_S:-90} python3 tools/bench.py --only steps --bf16-only --reps 5 --steps-geometries $g \
    --steps-runs ours_bf16_graph torch_compile --out "$OUT/steps-$g.md" 2>&1 \
    | grep -v "Warning\|warn(" | tail -20 > "$OUT/steps-$g.log"
  echo "=== $(( $(date +%s) - T0 )) s: steps $g rc ${PIPESTATUS[0]}" | tee -a "$OUT/lead.log"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$OUT/lead.log"
