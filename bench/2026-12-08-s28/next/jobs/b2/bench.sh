#!/bin/bash
echo "tree at $(cat commit.txt)"; nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader
timeout 75 python3 bench/2026-12-06-s26/attn/ab.py --reps 5 --shapes 120m d128 4096 --variants main this this:kv2d this:dq2 this:fold 2>&1 | grep -v "Warning\|warn("
