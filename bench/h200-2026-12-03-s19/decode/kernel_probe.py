"""A decoding step's kernels one by one, each launch's time inside a CUDA graph (20 of
it captured back to back, the fastest of 20 replays): andrea-120m at batch 1, bf16.
The skinny products at several split counts (TARGET_BLOCKS), beside an empty kernel."""
import sys, warnings
sys.path.insert(0, "tools")     # run from the repository root
import numpy as np
from numba import cuda
from numba.core.errors import NumbaPerformanceWarning
warnings.simplefilter("ignore", NumbaPerformanceWarning)
from benchmarks.timing import captured_time
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels.gemm import skinny
from microgpt.kernels import cache as kernel_cache
from microgpt.data import default_cache_dir

kernel_cache.use(default_cache_dir() / "kernels")
ops = CudaBackend()
rng = np.random.default_rng(0)
bf = lambda *s: ops.to_device(rng.integers(0x3c00, 0x3d00, s).astype(np.int32)).view(np.uint16) if False else cuda.to_device((rng.standard_normal(s).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
f32 = lambda *s: cuda.to_device(rng.standard_normal(s).astype(np.float32))

def t(label, fn):
    us = 1e3 * captured_time(lambda stream: fn(), 20, ops)
    print(f"{us:8.2f} us  {label}", flush=True)
    return us

@cuda.jit
def nothing(x):
    pass
x = f32(4)
t("empty kernel, 1 block", lambda: nothing[1, 32, ops.stream](x))
t("empty kernel, 144 x 256", lambda: nothing[144, 256, ops.stream](x))
C = 768
for K, N, outf in ((768, 2304, bf), (768, 768, f32), (768, 3072, bf), (3072, 768, f32)):
    a, b, out = bf(1, K), bf(K, N), outf(1, N)
    tiles = -(-N // skinny.MMA_COLUMNS)
    for target in (tiles, 2 * tiles, 4 * tiles, 528):
        skinny.TARGET_BLOCKS = target
        t(f"matmul 1x{K} @ {K}x{N} -> {'bf16' if outf is bf else 'f32'}, TARGET_BLOCKS {target}",
          lambda: ops.matmul(out, a, b))
    skinny.TARGET_BLOCKS = 528
pre, g = bf(1, 3072), bf(1, 3072)
a, b = bf(1, 768), bf(768, 3072)
t("matmul_gelu_forward 1x768 @ 768x3072", lambda: ops.matmul_gelu_forward(g, pre, a, b))
head_out, wte = bf(1, 50304), bf(50304, 768)
t("head 1x768 @ 50304x768^T", lambda: ops.matmul(head_out, a, wte, transpose_b=True))
mid, ln, mean, rstd, res, proj, w, bb = f32(1, C), bf(1, C), f32(1), f32(1), f32(1, C), f32(1, C), f32(C), f32(C)
t("residual_layernorm_forward 1 row", lambda: ops.residual_layernorm_forward(mid, ln, mean, rstd, res, proj, w, bb))
t("layernorm_forward 1 row", lambda: ops.layernorm_forward(ln, mean, rstd, res, w, bb))
kv = bf(1, 1024, 2 * C)
qkv, att = bf(1, 1, 3 * C), bf(1, 1, C)
from microgpt.kernels.attention import decode
for block in (128, 256):
    for pos in (0, 117, 200, 511, 1023):
        seq = cuda.to_device(np.array([[5, pos, 10, 0]], np.int32))
        t(f"attention_decode block {block} at position {pos}", lambda: decode.attention_decode(
            att, kv, qkv, seq, 12, block=block, stream=ops.stream))
kv16, qkv16, att16 = bf(16, 1024, 2 * C), bf(16, 1, 3 * C), bf(16, 1, C)
seq16 = cuda.to_device(np.array([[5, 117, 10, 0]] * 16, np.int32))
t("attention_decode batch 16 at position 117", lambda: ops.attention_decode(att16, kv16, qkv16, seq16, 12))
logits = bf(1, 50304)
seq = cuda.to_device(np.array([[5, 100, 10**6, 0]], np.int32))
reset = lambda: seq.copy_to_device(np.array([[5, 100, 10**6, 0]], np.int32))
t("sample_tokens greedy", lambda: ops.sample_tokens(seq, logits, 1024, vocab=None, temperature=0.0, top_k=0, top_p=1.0, seed=0, stop_id=-1))
reset()
t("sample_tokens T 0.8 top-k 40", lambda: ops.sample_tokens(seq, logits, 1024, vocab=None, temperature=0.8, top_k=40, top_p=1.0, seed=0, stop_id=-1))
reset()
t("sample_tokens T 0.8 top-p 0.9", lambda: ops.sample_tokens(seq, logits, 1024, vocab=None, temperature=0.8, top_k=0, top_p=0.9, seed=0, stop_id=-1))
