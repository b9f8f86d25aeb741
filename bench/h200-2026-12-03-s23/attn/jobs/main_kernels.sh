#!/bin/bash
# main_kernels/ for ab.py: main's wgmma forward and backward at 319bf2d, their relative
# imports made absolute (run from the worktree; the output is never committed)
D=bench/h200-2026-12-03-s23/attn/main_kernels
mkdir -p $D
for f in hopper hopper_backward; do
  git show 319bf2d:kernels/attention/$f.py | sed -e 's/^from \.\.\([a-z_.]*\) import/from microgpt.kernels.\1 import/' \
    -e 's/^from \.hopper import/from main_hopper import/' -e 's/^from \. import/from microgpt.kernels.attention import/' \
    -e 's/^from \.\([a-z_]*\) import/from microgpt.kernels.attention.\1 import/' \
    -e 's/^    from \.\([a-z_]*\) import/    from microgpt.kernels.attention.\1 import/' \
    -e 's/importlib.import_module("..gemm.launch", __package__)/importlib.import_module("microgpt.kernels.gemm.launch")/' > $D/main_$f.py
done
