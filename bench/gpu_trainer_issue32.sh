# issue 32 on the H200: the step variants' tokens/s (the targets), then the GPU profile of
# the new tests. Run from the repository root with PYTHONPATH set.
set -o pipefail
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "import torch, transformers, numba; print(torch.__version__, transformers.__version__, numba.__version__)" | tee -a $OUT/gpu.txt
timeout 80 python3 tools/step_variants.py --out $OUT/STEP_VARIANTS.md --reps 10 2>&1 | tee $OUT/variants.log
export MICROGPT_TEST_DEVICE=gpu MICROGPT_GPU_EXAMPLES=2
timeout 25 python3 -m pytest -q -p no:cacheprovider tests/test_export_hf.py -k transformers 2>&1 | tail -5 | tee $OUT/tests_hf.log
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_kernels_optim.py::test_bias_backward tests/test_kernels_gemm.py::test_a_bias_is_added_to_every_row tests/test_kernels_gemm_bf16.py::test_a_bias_is_added_to_every_row_once tests/test_kernels_crossentropy.py::test_the_tokens_of_a_padded_vocabulary tests/test_kernels_gemm.py::test_the_mlp_up_projection_adds_its_bias_before_the_gelu 2>&1 | tail -8 | tee $OUT/tests_kernels.log
MICROGPT_TEST_SHAPES=small timeout 40 python3 -m pytest -q -p no:cacheprovider tests/test_cuda_model.py::test_captured_steps_match_reference 2>&1 | tail -5 | tee $OUT/tests_model.log
