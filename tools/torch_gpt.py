"""The PyTorch reference GPT: the architecture of microgpt's model (pre-LN, bias-free
linears, tied head) in torch.nn, for the whole-step benchmark (tools/benchmarks/steps.py)
and the convergence comparison (tools/converge.py)."""


def torch_gpt(cfg, device="cuda"):
    """A PyTorch GPT of the same architecture: pre-LN, bias-free linears, tied head."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            C = cfg.d_model
            self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
            self.w_qkv = nn.Linear(C, 3 * C, bias=False)
            self.w_o = nn.Linear(C, C, bias=False)
            self.w_fc = nn.Linear(C, 4 * C, bias=False)
            self.w_proj = nn.Linear(4 * C, C, bias=False)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = self.w_qkv(self.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, cfg.n_head, -1).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.w_o(y.transpose(1, 2).reshape(B, T, C))
            return x + self.w_proj(F.gelu(self.w_fc(self.ln_2(x)), approximate="tanh"))

    class TorchGPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
            self.wpe = nn.Embedding(cfg.context, cfg.d_model)
            self.h = nn.ModuleList(Block() for _ in range(cfg.n_layer))
            self.ln_f = nn.LayerNorm(cfg.d_model)

        def forward(self, idx, targets):
            x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
            for block in self.h:
                x = block(x)
            logits = self.ln_f(x) @ self.wte.weight.T
            return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    return TorchGPT().to(device)


def training_step(model, idx, targets, *, compiled, autocast=True):
    """One training step of model as the bench times it -> step(), which returns the
    loss: bf16 autocast (unless autocast=False: float32), fused AdamW, the gradient
    clipped to norm 1; compiled: the forward under torch.compile (its first calls
    compile)."""
    import torch

    forward = torch.compile(model) if compiled else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), fused=True)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            loss = forward(idx, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()
    return step
