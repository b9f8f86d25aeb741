"""Session 16's bias pieces at andrea-120m, each captured (20 launches a graph, best of 10):
the LayerNorm backward with and without the residual stream's bias sums (dinp_sum) against
it plus the column-sum pass it replaces; the MLP's GEMM + GELU backward with and without
b_fc's sums (gelu_bias_backward, at 2 and 4 rows in flight) against the GEMM + GELU kernel
+ bias_backward; the QKV bias's sums (bias_backward of dqkv) against what replaced them
(q's sums, and v's gradient as W_O times b_o's).
usage: python micro.py [--sweep]   (from the tree's root)"""
import sys
import numpy as np
import ml_dtypes
from numba import cuda
sys.path.insert(0, "tools")
from benchmarks.timing import captured_time
from microgpt.cuda_backend import CudaBackend
from microgpt.kernels import elementwise, gemm, layernorm, reductions

N, C = 16384, 768
ops = CudaBackend()
rng = np.random.default_rng(0)
REPS = 10


def dev_bf16(*shape):
    return cuda.to_device(rng.standard_normal(shape, np.float32).astype(ml_dtypes.bfloat16)
                          .view(np.uint16))


def dev(*shape):
    return cuda.to_device(rng.standard_normal(shape, np.float32))


def t(fn):
    return captured_time(fn, REPS, ops)


rows = []
# the LayerNorm backward as the bf16 step runs it: bf16 dout, a bf16 copy of dinp
dinp, dout, inp, copy = dev(N, C), dev_bf16(N, C), dev(N, C), dev_bf16(N, C)
w, dw, db, ds = dev(C), dev(C), dev(C), dev(C)
mean, rstd = dev(N), cuda.to_device(np.abs(rng.standard_normal(N, np.float32)) + 0.5)
ln = lambda s, **kw: layernorm.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd,
                                                  dinp_copy=copy, stream=s, **kw)
plain = t(ln)
fused = t(lambda s: ln(s, dinp_sum=ds))
sums = t(lambda s: reductions.bias_backward(ds, dinp, stream=s))
rows += [("layernorm_backward", plain, 25), ("  + bias_backward(dresid) (before)", plain + sums, 24),
         ("  with dinp_sum (now)", fused, 24)]
print(f"LN: plain {plain:.4f}, +sums {plain + sums:.4f}, fused {fused:.4f} ms "
      f"(x24: saves {24 * (plain + sums - fused):.3f} ms)", flush=True)

# the MLP's dX GEMM + GELU backward, bf16
F = 4 * C
dfc, dres, wp, pre, dbias = dev_bf16(N, F), dev_bf16(N, C), dev_bf16(F, C), dev_bf16(N, F), dev(F)
g_plain = t(lambda s: gemm.matmul_gelu_backward(dfc, dres, wp, pre, stream=s))
g_fused = t(lambda s: gemm.matmul_gelu_backward(dfc, dres, wp, pre, dbias=dbias, stream=s))
g_sums = t(lambda s: reductions.bias_backward(dbias, dfc, stream=s))
gelu = t(lambda s: elementwise.gelu_backward(dfc, dfc, pre, stream=s))
gb = {}
for unroll in (2, 4) if "--sweep" in sys.argv else (reductions.GELU_UNROLL,):
    parts = reductions.column_sum_parts(dfc, unroll=unroll, others=(dfc, pre))
    gb[unroll] = t(lambda s: reductions._column_sums(dbias, dfc, dbias, parts, s, unroll=unroll,
                                                     gelu=(dfc, pre)))
rows += [("matmul_gelu_backward", g_plain, 12), ("  + bias_backward(dfc) (before)", g_plain + g_sums, 12),
         ("  with dbias (now)", g_fused, 12)]
print(f"MLP: plain {g_plain:.4f}, +sums {g_plain + g_sums:.4f}, fused {g_fused:.4f} ms "
      f"(x12: saves {12 * (g_plain + g_sums - g_fused):.3f} ms); gelu_backward alone {gelu:.4f}, "
      + ", ".join(f"gelu_bias_backward unroll {u} {v:.4f}" for u, v in gb.items())
      + f" ({3 * N * F * 2 / min(gb.values()) / 1e9:.2f} TB/s)", flush=True)

dqkv = dev_bf16(N, 3 * C)
qkv = t(lambda s: reductions.bias_backward(dbias[:3 * C], dqkv, stream=s))
# now: q's sums (dqkv's first C columns), v's W_O times b_o's gradient, k's nothing
q_sums = t(lambda s: reductions.bias_backward(dbias[:C], dqkv[:, :C], stream=s))
w_o, out1 = dev(C, C), dev(1, C)
v_prod = t(lambda s: gemm.matmul(out1, dbias[:C].reshape(1, C), w_o, transpose_b=True,
                                 stream=s))
rows += [("bias_backward(dqkv) (before)", qkv, 12), ("bias_backward(dq) (now)", q_sums, 12),
         ("  + W_O b_o's gradient (now)", v_prod, 12)]
print(f"QKV sums {qkv:.4f} ms (x12 {12 * qkv:.3f}); now q's {q_sums:.4f} + v's product "
      f"{v_prod:.4f} (x12 saves {12 * (qkv - q_sums - v_prod):.3f})", flush=True)

print("\n| op | ms a call | calls a step | ms a step |\n|---|---:|---:|---:|")
for name, ms, calls in rows:
    print(f"| {name} | {ms:.4f} | {calls} | {ms * calls:.3f} |")
