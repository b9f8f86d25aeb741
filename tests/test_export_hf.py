"""tools/export_hf.py: the Hugging Face GPT-2 layout, checked with and without transformers.

Without transformers, the written tensors are read back and run through a NumPy GPT-2
written here from Hugging Face's modeling_gpt2 conventions (Conv1D x @ W + b, c_attn split
into q, k, v, gelu_new, tied lm_head), independent of microgpt's reference; with it,
GPT2LMHeadModel.from_pretrained loads the directory and its logits are compared.
"""
import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import TOL_F32_MODEL, assert_close
from safetensors.numpy import load_file

from microgpt import GPT, get_config
from microgpt.checkpoint import save_checkpoint
from microgpt.optim import AdamW, AdamWConfig
from microgpt.tokenizer import BPETokenizer, ByteTokenizer

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "export_hf.py"
spec = importlib.util.spec_from_file_location("export_hf", SCRIPT)
export_hf = importlib.util.module_from_spec(spec)
spec.loader.exec_module(export_hf)

CFG = get_config("microgpt", vocab_size=300, n_layer=2, d_model=24, n_head=3, context=12)


def trained_looking_model(cfg, seed=0):
    """Every parameter a fresh draw (LayerNorm weights and biases too), so a swapped or
    transposed tensor shows."""
    model = GPT(cfg, seed=seed)
    rng = np.random.default_rng(seed)
    model.load_state_dict({name: (rng.standard_normal(t.shape) * (0.3 if t.ndim == 2 else 1.0)
                                  + (1.0 if name.endswith("weight") and t.ndim == 1 else 0.0)
                                  ).astype(np.float32)
                           for name, t in model.state_dict().items()})
    return model


def checkpoint(tmp_path, tokenizer, cfg=CFG):
    model = trained_looking_model(cfg)
    save_checkpoint(tmp_path / "run", model, AdamW(model, AdamWConfig()).state_dict(), tokenizer,
                    {"step": 3})
    return model, tmp_path / "run"


def hf_gpt2_logits(directory, ids):
    """GPT2LMHeadModel's forward in eval mode, in float64, from the exported files alone."""
    cfg = json.loads((directory / "config.json").read_text())
    w = {k: v.astype(np.float64) for k, v in load_file(directory / "model.safetensors").items()}
    assert cfg["activation_function"] == "gelu_new" and cfg["tie_word_embeddings"]
    H, C, eps = cfg["n_head"], cfg["n_embd"], cfg["layer_norm_epsilon"]
    D, T = C // H, len(ids)

    def layer_norm(x, name):
        mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + eps) * w[name + ".weight"] + w[name + ".bias"]

    def conv1d(x, name):                                  # transformers.pytorch_utils.Conv1D
        return x @ w[name + ".weight"] + w[name + ".bias"]

    def gelu_new(x):
        return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))

    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:T]
    for i in range(cfg["n_layer"]):
        h = f"transformer.h.{i}."
        q, k, v = np.split(conv1d(layer_norm(x, h + "ln_1"), h + "attn.c_attn"), 3, axis=-1)
        q, k, v = (t.reshape(T, H, D).transpose(1, 0, 2) for t in (q, k, v))
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(D)
        scores[:, np.triu(np.ones((T, T), bool), 1)] = np.finfo(np.float64).min
        p = np.exp(scores - scores.max(-1, keepdims=True))
        y = (p / p.sum(-1, keepdims=True) @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + conv1d(y, h + "attn.c_proj")
        x = x + conv1d(gelu_new(conv1d(layer_norm(x, h + "ln_2"), h + "mlp.c_fc")),
                       h + "mlp.c_proj")
    return layer_norm(x, "transformer.ln_f") @ w["transformer.wte.weight"].T


def test_the_tensors_are_gpt2s_names_shapes_and_orientation(tmp_path):
    model, run = checkpoint(tmp_path, ByteTokenizer())
    out = tmp_path / "hf"
    assert export_hf.main([str(run), str(out)]) == 0
    tensors = load_file(out / "model.safetensors")
    C, L = CFG.d_model, CFG.n_layer
    want = {"transformer.wte.weight": (CFG.vocab_size, C), "transformer.wpe.weight": (CFG.context, C),
            "transformer.ln_f.weight": (C,), "transformer.ln_f.bias": (C,)}
    for i in range(L):
        h = f"transformer.h.{i}."
        want.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,), h + "ln_2.weight": (C,),
                     h + "ln_2.bias": (C,), h + "attn.c_attn.weight": (C, 3 * C),
                     h + "attn.c_attn.bias": (3 * C,), h + "attn.c_proj.weight": (C, C),
                     h + "attn.c_proj.bias": (C,), h + "mlp.c_fc.weight": (C, 4 * C),
                     h + "mlp.c_fc.bias": (4 * C,), h + "mlp.c_proj.weight": (4 * C, C),
                     h + "mlp.c_proj.bias": (C,)})
    assert {k: v.shape for k, v in tensors.items()} == want
    state = model.state_dict()
    np.testing.assert_array_equal(tensors["transformer.h.1.attn.c_attn.weight"],
                                  state["h.1.attn.w_qkv"])
    np.testing.assert_array_equal(tensors["transformer.h.0.mlp.c_proj.weight"],
                                  state["h.0.mlp.w_proj"])
    assert all(not v.any() for k, v in tensors.items() if k.endswith("bias") and "ln" not in k)
    config = json.loads((out / "config.json").read_text())
    assert (config["n_layer"], config["n_head"], config["n_embd"], config["n_positions"],
            config["vocab_size"]) == (L, CFG.n_head, C, CFG.context, CFG.vocab_size)
    assert not (out / "tokenizer.json").exists()     # bytes: no tokenizer to export


def test_gpt2s_forward_on_the_export_gives_our_logits(tmp_path):
    model, run = checkpoint(tmp_path, ByteTokenizer())
    export_hf.export(run, tmp_path / "hf")
    ids = np.random.default_rng(1).integers(0, CFG.vocab_size, CFG.context)
    assert_close(model.forward(ids[None])[0], hf_gpt2_logits(tmp_path / "hf", ids),
                 TOL_F32_MODEL, "GPT-2 conventions on the exported tensors")


def test_a_bpe_tokenizer_goes_along(tmp_path):
    tokenizer = BPETokenizer.train(["def f(x):\n    return x + 1\n"] * 50, 300)
    _, run = checkpoint(tmp_path, tokenizer)
    out = tmp_path / "hf"
    export_hf.export(run, out)
    from tokenizers import Tokenizer
    assert Tokenizer.from_file(str(out / "tokenizer.json")).encode("return x").ids == \
        tokenizer.encode("return x")
    config = json.loads((out / "config.json").read_text())
    assert config["eos_token_id"] == tokenizer.eot_id
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|endoftext|>"


def test_transformers_loads_the_export_and_agrees(tmp_path):
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install '.[hf]')")
    import torch
    model, run = checkpoint(tmp_path, ByteTokenizer())
    export_hf.export(run, tmp_path / "hf")
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "hf").eval()
    ids = np.random.default_rng(2).integers(0, CFG.vocab_size, (2, CFG.context))
    with torch.no_grad():
        logits = hf(torch.from_numpy(ids)).logits.numpy()
    assert_close(logits, model.forward(ids), TOL_F32_MODEL, "transformers against microgpt")


@pytest.mark.parametrize("make_out, message", [
    (lambda d: (d / "hf").mkdir() or (d / "hf" / "x").write_text("x"),
     "exists and is not an empty directory"),
    (lambda d: (d / "hf").write_text("x"), "exists and is not an empty directory"),
])
def test_a_used_out_is_refused_in_one_line(tmp_path, capsys, make_out, message):
    _, run = checkpoint(tmp_path, ByteTokenizer())
    make_out(tmp_path)
    assert export_hf.main([str(run), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


def test_a_missing_run_is_one_line_and_writes_nothing(tmp_path, capsys):
    assert export_hf.main([str(tmp_path / "nothing"), str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not exist" in err
    assert list(tmp_path.iterdir()) == []
