#!/bin/bash
# s19-start: the recording of a bf16 step lists the kernels that the step then compiles
set -u
MICROGPT_TEST_DEVICE=gpu timeout -k 3 105 python3 -m pytest -q -x tests/test_compile_ahead.py \
    2>&1 | tee "$OUT/test_gpu.log"
