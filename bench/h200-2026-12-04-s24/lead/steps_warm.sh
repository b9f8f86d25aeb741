# session 24 (lead, beside the helpers' tests): compile what steps.sh times (microgpt's
# kernels into the kernel cache, torch.compile's inductor cache), one rep, figures discarded
T0=$(date +%s)
for g in ${GEOMS:-gpt2-medium gpt2-xl}; do
  timeout ${WARM_S:-130} python3 tools/bench.py --only steps --bf16-only --reps 1 --steps-geometries $g \
    --steps-runs ours_bf16_graph torch_compile --out "$OUT/warm-$g.md" > "$OUT/warm-$g.log" 2>&1
  echo "=== $(( $(date +%s) - T0 )) s: warm $g rc $?" | tee -a "$OUT/lead.log"
done
