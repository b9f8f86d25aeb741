# session 22, call C (lead, serial, alone on the GPU): the step against torch.compile on main,
# one process a geometry (a report is written at the end of its run), the headline first
T0=$(date +%s)
at() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/lead.log"; }
clean() { grep -v "Warning\|warn(" ; }
cp .devtree/jobs/_lead/commit.txt "$OUT/"
for g in andrea-120m andrea-120m-t4096 andrea-12m; do
  timeout 100 python3 tools/bench.py --only steps --bf16-only --reps 5 --steps-geometries $g \
    --out "$OUT/steps-$g.md" 2>&1 | clean | tail -20 > "$OUT/steps-$g.log"; at "steps $g"
done
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$OUT/lead.log"
