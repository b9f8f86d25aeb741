#!/bin/bash
# Two runs of the trainer from one seed with --deterministic: whether the final checkpoints'
# parameters and AdamW moments are the same bits (cmp of model.safetensors and
# optimizer.safetensors; session 19's same_bits.sh at any config). Logs into $OUT, the
# checkpoints under /tmp.
#   bash same_bits_runs.sh CONFIG BATCH STEPS SECONDS_A_RUN [TRAINER FLAGS...]
CONFIG=$1 BATCH=$2 STEPS=$3 LIMIT=$4
shift 4
for run in 1 2; do
  dir=/tmp/samebits/$CONFIG-$run
  rm -rf $dir
  timeout $LIMIT python3 -m microgpt.train --config $CONFIG --data $DATA \
    --tokenizer $DATA/tokenizer.json --steps $STEPS --batch-size $BATCH --seed 0 \
    --deterministic --eval-every 0 --eval-batches 4 --sample-every 0 --log-every 50 \
    --out $dir "$@" > $OUT/samebits-$CONFIG-$run.log 2>&1
  echo "$CONFIG run $run: rc $?" | tee -a $OUT/samebits.txt
done
for f in model.safetensors optimizer.safetensors; do
  x=$(ls /tmp/samebits/$CONFIG-1/ckpt-*/$f 2>/dev/null)
  y=$(ls /tmp/samebits/$CONFIG-2/ckpt-*/$f 2>/dev/null)
  if [ -n "$x" ] && [ -n "$y" ] && cmp -s $x $y; then r=same; else r=DIFFERENT; fi
  echo "$CONFIG $* $f: $r ($(sha256sum $x $y 2>/dev/null | cut -c1-16 | tr '\n' ' '))" \
    | tee -a $OUT/samebits.txt
done
