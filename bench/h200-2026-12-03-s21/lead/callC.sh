# session 21, call C: main with the helpers' landings, the step against torch.compile
T0=$(date +%s); left() { echo $(( ${LEAD_S:-240} - $(date +%s) + T0 )); }
at() { echo "=== $(( $(date +%s) - T0 )) s: $*" | tee -a "$OUT/lead.log"; }
clean() { grep -v "Warning\|warn(" ; }
cp .devtree/jobs/_lead/commit.txt "$OUT/"
timeout "$(left)" python3 tools/bench.py --only steps --bf16-only --reps 10 \
  --steps-geometries andrea-120m andrea-12m andrea-120m-t4096 --out "$OUT/steps.md" 2>&1 | clean | tail -30 > "$OUT/steps.log"; at steps
[ "$(left)" -gt 50 ] && { timeout "$(left)" python3 tools/bench.py --only generate --out "$OUT/generate.md" 2>&1 | clean | tail -20 > "$OUT/generate.log"; at generate; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >> "$OUT/lead.log"
