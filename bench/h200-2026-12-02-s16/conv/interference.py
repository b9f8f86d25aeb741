"""Does a model trained after another in one process step slower (issue 31's converge
fault of session 15)? microgpt's captured andrea-12m step (B 64 x 256, bf16) timed alone,
after the float32 evaluator has scored in the same process, after PyTorch eager has
trained there, and PyTorch's step before and after microgpt's second round; the GPU's
clocks and its compute processes at each phase.

    python3 interference.py DATA [STEPS]
"""
import subprocess
import sys
import time

import numpy as np

from microgpt import GPT, get_config
from microgpt.cuda_backend import CudaBackend
from microgpt.data import BatchLoader, default_cache_dir, load_tokens, mean_loss
from microgpt.kernels import cache as kernel_cache
from microgpt.optim import AdamW, AdamWConfig
from microgpt.step import Step

DATA, N = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100
B, VOCAB = 64, 4096
kernel_cache.use(default_cache_dir() / "kernels")
cfg = get_config("andrea-12m", vocab_size=VOCAB)
T = cfg.context
data = load_tokens(DATA, None, VOCAB, default_cache_dir())
loader = BatchLoader(data.train, B, T, VOCAB, 0)
backend = CudaBackend()


def gpu():
    q = subprocess.run(["nvidia-smi", "--query-gpu=clocks.sm,clocks.mem,power.draw,"
                        "temperature.gpu,utilization.gpu", "--format=csv,noheader"],
                       capture_output=True, text=True).stdout.strip()
    apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"],
                          capture_output=True, text=True).stdout.split()
    return f"[sm/mem MHz, W, C, util: {q}; {len(apps)} compute processes on the GPU]"


model = GPT(cfg, backend=backend, seed=0, precision="bf16")
step = Step(model, AdamW(model, AdamWConfig(lr=1e-3, total_steps=10**6)), B, T)
for _ in range(3):
    step.run(*loader.next_batch())
step.metrics()


def microgpt_ms(label):
    t0 = time.perf_counter()
    for n in range(N):
        step.run(*loader.next_batch())
        if n % 25 == 24:
            step.metrics()
    step.metrics()
    print(f"microgpt, {label}: {(time.perf_counter() - t0) / N * 1e3:.2f} ms a step  {gpu()}",
          flush=True)


microgpt_ms("alone")
evaluator = GPT(cfg, backend=backend, precision="fp32")
val = BatchLoader(data.val, B, T, VOCAB, 0, split="validation").whole_split()[:4]
t0 = time.perf_counter()
evaluator.load_state_dict(model.state_dict())
print(f"evaluator: {mean_loss(val, evaluator.evaluate):.4f} on {4 * B} windows, "
      f"{time.perf_counter() - t0:.1f} s (compile included)", flush=True)
microgpt_ms("after the fp32 evaluator")

t0 = time.perf_counter()
import torch  # noqa: E402
sys.path.insert(0, "tools")
from torch_gpt import torch_gpt  # noqa: E402
tmodel = torch_gpt(cfg, "cuda")
opt = torch.optim.AdamW(tmodel.parameters(), lr=1e-3, fused=True)
print(f"torch: imported and built in {time.perf_counter() - t0:.1f} s", flush=True)


def torch_ms(label, n):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        x, y = (torch.from_numpy(a).long().to("cuda") for a in loader.next_batch())
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = tmodel(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(tmodel.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    float(loss)
    print(f"PyTorch eager, {label}: {(time.perf_counter() - t0) / n * 1e3:.2f} ms a step  "
          f"{gpu()}", flush=True)


torch_ms("its first steps (cuBLAS and the allocator warming)", 10)
torch_ms("warm", N // 2)
microgpt_ms("after PyTorch trained in the process")
torch_ms("after microgpt's second round", N // 2)
microgpt_ms("last")
