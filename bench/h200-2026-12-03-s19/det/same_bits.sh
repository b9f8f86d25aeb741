#!/bin/bash
# Two 200-step runs of andrea-12m (B 64 x 256, bf16) from seed 0 with --deterministic, and
# two without: whether the final checkpoints' parameters and AdamW moments are the same
# bits (cmp of model.safetensors and optimizer.safetensors). Logs into $OUT, the
# checkpoints under /tmp.   bash same_bits.sh [SECONDS A RUN] [FLAGS: --deterministic, default]
D=$DATA; [ -f $D/tokenizer.json ] || D=$DATA/data
LIMIT=${1:-40}
shift
for flag in ${@:---deterministic default}; do
  [ "$flag" = default ] && flag=""
  for run in 1 2; do
    dir=/tmp/samebits/${flag:-default}-$run
    rm -rf $dir
    timeout $LIMIT python3 -m microgpt.train --config andrea-12m --data $D \
      --tokenizer $D/tokenizer.json --steps 200 --batch-size 64 --seed 0 $flag \
      --eval-every 0 --eval-batches 4 --sample-every 0 --log-every 50 --out $dir \
      > $OUT/samebits${flag:-default}-$run.log 2>&1
    echo "run ${flag:-default} $run: rc $?" | tee -a $OUT/samebits.txt
  done
  a=/tmp/samebits/${flag:-default}-1; b=/tmp/samebits/${flag:-default}-2
  for f in model.safetensors optimizer.safetensors; do
    x=$(ls $a/ckpt-*/$f 2>/dev/null); y=$(ls $b/ckpt-*/$f 2>/dev/null)
    if [ -n "$x" ] && [ -n "$y" ] && cmp -s $x $y; then r=same; else r=DIFFERENT; fi
    echo "${flag:-default} $f: $r ($(sha256sum $x $y 2>/dev/null | cut -c1-16 | tr '\n' ' '))" \
      | tee -a $OUT/samebits.txt
  done
done
