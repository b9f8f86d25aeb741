#!/bin/bash
# The convergence runs' token shards at $1 (train.bin, val.bin, tokenizer.json): the
# Python standard library through the trainer's own BPE at a vocabulary of 4096,
# exactly as `python -m microgpt.train --vocab-size 4096` caches them (8,514,862 train and
# 866,666 validation tokens, from Python 3.11's and 3.12's alike), packed as $2 for the calls.
set -e
dst=$1; cache=$(mktemp -d)
python3 - "$cache" <<'PY'
import sys
from microgpt.data import load_tokens
data = load_tokens(None, None, 4096, sys.argv[1])
print(f"{data.source}: {sum(map(len, data.train)):,} train, {sum(map(len, data.val)):,} val tokens")
PY
mkdir -p "$dst"
cp "$cache"/tokens/*/train.bin "$cache"/tokens/*/val.bin "$cache"/tokenizers/*/tokenizer.json "$dst"/
[ -n "$2" ] && tar -C "$(dirname "$dst")" -cJf "$2" "$(basename "$dst")"
rm -rf "$cache"; ls -la "$dst"
