"""The Hugging Face GPT-2 layout (microgpt/hf_gpt2.py): tools/export_hf.py writes it and
--init-from reads it, checked with and without transformers.

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
from safetensors.numpy import load_file, save_file

from microgpt import GPT, get_config, train
from microgpt.checkpoint import load_checkpoint, save_checkpoint
from microgpt.errors import UserError
from microgpt.hf_gpt2 import load_hf_gpt2, padded_vocab
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
    assert cfg["activation_function"] == "gelu_new" and cfg.get("tie_word_embeddings", True)
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
    want = {"transformer.wte.weight": (CFG.vocab_size, C),
            "transformer.wpe.weight": (CFG.context, C),
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


# ----------------------------------------------------------------------------------
# --init-from: a GPT-2 directory written here as GPT2LMHeadModel.save_pretrained would

GPT2_LAYERS, GPT2_HEADS, GPT2_WIDTH, GPT2_POSITIONS = 2, 3, 24, 16
TEXT = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n"] * 40


def gpt2_directory(path, seed=0, masks=False):
    """config.json, model.safetensors (random weights, biases too, under the names and in
    the (in, out) Conv1D orientation transformers writes; with masks, the causal-mask
    buffers older versions saved) and a BPE tokenizer.json (280 tokens) -> the tensors and
    the tokenizer."""
    rng = np.random.default_rng(seed)
    tokenizer = BPETokenizer.train(TEXT, 300)
    V, C, L = tokenizer.vocab_size, GPT2_WIDTH, GPT2_LAYERS
    shapes = {"wte.weight": (V, C), "wpe.weight": (GPT2_POSITIONS, C), "ln_f.weight": (C,),
              "ln_f.bias": (C,)}
    for i in range(L):
        shapes.update({f"h.{i}.{name}": shape for name, shape in {
            "ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
            "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C),
            "attn.c_proj.bias": (C,), "ln_2.weight": (C,), "ln_2.bias": (C,),
            "mlp.c_fc.weight": (C, 4 * C), "mlp.c_fc.bias": (4 * C,),
            "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}.items()})
    tensors = {"transformer." + name: (rng.standard_normal(shape) * (0.3 if len(shape) == 2
                                                                     else 0.5)
                                       + (1.0 if name.endswith("ln_1.weight") else 0.0)
                                       ).astype(np.float32)
               for name, shape in shapes.items()}
    written = dict(tensors)
    if masks:
        for i in range(L):
            written[f"transformer.h.{i}.attn.bias"] = np.tril(np.ones(
                (1, 1, GPT2_POSITIONS, GPT2_POSITIONS), np.float32))
    path.mkdir()
    save_file(written, path / "model.safetensors", metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps({
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": V,
        "n_positions": GPT2_POSITIONS, "n_embd": C, "n_layer": L, "n_head": GPT2_HEADS,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "n_inner": None}))
    tokenizer.save(path / "tokenizer.json")
    return tensors, tokenizer


@pytest.mark.parametrize("masks", [False, True])
def test_an_imported_gpt2_gives_gpt2s_logits(tmp_path, masks):
    """Imported, the directory is our model: a padded vocabulary (280 tokens in 384 rows)
    whose logits in use are the independent NumPy GPT-2's on the same files."""
    _, tokenizer = gpt2_directory(tmp_path / "gpt2", masks=masks)
    cfg, params, imported_tokenizer = load_hf_gpt2(tmp_path / "gpt2")
    V = tokenizer.vocab_size        # 280: the merges run out on this text before 300
    assert cfg.bias and (cfg.tokens, cfg.vocab_size) == (V, padded_vocab(V)) == (V, 384)
    assert imported_tokenizer.fingerprint == tokenizer.fingerprint
    model = GPT(cfg)
    model.load_state_dict(params)
    ids = np.random.default_rng(3).integers(0, cfg.tokens, GPT2_POSITIONS)
    logits = model.forward(ids[None])[0]
    assert_close(logits[:, :cfg.tokens], hf_gpt2_logits(tmp_path / "gpt2", ids),
                 TOL_F32_MODEL, "microgpt on an imported GPT-2")
    assert not logits[:, cfg.tokens:].any()          # the padding's rows of wte are 0


def test_export_of_an_import_reproduces_every_tensor(tmp_path):
    tensors, tokenizer = gpt2_directory(tmp_path / "gpt2")
    cfg, params, _ = load_hf_gpt2(tmp_path / "gpt2")
    model = GPT(cfg)
    model.load_state_dict(params)
    save_checkpoint(tmp_path / "run", model, AdamW(model, AdamWConfig()).state_dict(), tokenizer,
                    {"step": 0})
    export_hf.export(tmp_path / "run", tmp_path / "out")
    back = load_file(tmp_path / "out" / "model.safetensors")
    assert back.keys() == tensors.keys()
    for name, value in tensors.items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["vocab_size"], config["n_positions"]) == (cfg.tokens, GPT2_POSITIONS)


def test_fine_tuning_from_a_gpt2_directory(tmp_path, capsys):
    """python -m microgpt.train --init-from DIR: the directory's model and tokenizer train
    on the user's text, shortened by --context, and the run exports like any other."""
    _, tokenizer = gpt2_directory(tmp_path / "gpt2")
    V = tokenizer.vocab_size
    corpus = tmp_path / "mine.py"
    corpus.write_text("".join(TEXT) * 5)
    out = tmp_path / "run"
    argv = ["--init-from", tmp_path / "gpt2", "--data", corpus, "--context", 8, "--steps", 3,
            "--batch-size", 2, "--eval-batches", 1, "--sample-every", 0, "--lr", 1e-4,
            "--cache-dir", tmp_path / "cache", "--out", out]
    assert train.main([str(a) for a in argv]) == 0
    log = capsys.readouterr().out
    assert f"n_layer 2, d_model 24, n_head 3, context 8, vocab_size 384, bias True, " \
           f"n_tokens {V}" in log
    ckpt = load_checkpoint(out)
    assert ckpt.config.bias and ckpt.state["args"]["init_from"] == str(tmp_path / "gpt2")
    assert not ckpt.params["wte"][V:].any()          # the padding took no gradient
    export_hf.export(out, tmp_path / "hf")
    assert load_file(tmp_path / "hf" / "model.safetensors")["transformer.wte.weight"].shape \
        == (V, GPT2_WIDTH)


@pytest.mark.parametrize("damage, extra, message", [
    (lambda d: (d / "config.json").unlink(), [], "has no config.json"),
    (lambda d: (d / "model.safetensors").unlink(), [], "has no model.safetensors"),
    (lambda d: (d / "config.json").write_text('{"model_type": "llama"}'), [],
     "is not a GPT-2 config"),
    (lambda d: (d / "tokenizer.json").unlink(), [], "has no tokenizer.json; pass --tokenizer"),
    (lambda d: None, ["--n-layer", "4"], "--n-layer and --init-from"),
    (lambda d: None, ["--context", "32"], "--context 32 is longer than"),
    (lambda d: None, ["--tokenizer", "bytes"], "brings its tokenizer"),
])
def test_a_bad_init_from_is_one_line(tmp_path, capsys, damage, extra, message):
    gpt2_directory(tmp_path / "gpt2")
    damage(tmp_path / "gpt2")
    corpus = tmp_path / "mine.py"
    corpus.write_text("".join(TEXT))
    status = train.main([str(a) for a in ["--init-from", tmp_path / "gpt2", "--data", corpus,
                                          "--cache-dir", tmp_path / "cache", "--out",
                                          tmp_path / "run", *extra]])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "run").exists()


def test_transformers_agrees_on_an_imported_gpt2(tmp_path):
    transformers = pytest.importorskip(
        "transformers", reason="transformers is not installed (pip install '.[hf]')")
    import torch
    gpt2_directory(tmp_path / "gpt2")
    cfg, params, _ = load_hf_gpt2(tmp_path / "gpt2")
    model = GPT(cfg)
    model.load_state_dict(params)
    hf = transformers.GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2").eval()
    ids = np.random.default_rng(4).integers(0, cfg.tokens, (2, GPT2_POSITIONS))
    with torch.no_grad():
        logits = hf(torch.from_numpy(ids)).logits.numpy()
    assert_close(logits, model.forward(ids)[..., :cfg.tokens], TOL_F32_MODEL,
                 "transformers against microgpt on an imported GPT-2")
