"""The Hugging Face GPT-2 layout, both ways: a directory as GPT2LMHeadModel.save_pretrained
writes it (config.json, model.safetensors, the tokenizer's files) to our config, tensors
and tokenizer (--init-from), and ours back to it (tools/export_hf.py).

The two models are the same function. GPT-2's Conv1D computes x @ W + b with W stored
(in, out), the orientation of our weights, so every matrix is taken as it is; c_attn's
output columns (Q, K, V, head h at h*D in each) are the order of our fused QKV. The LM
head is tied to wte in both (an lm_head tensor, where a file has one, must equal wte);
the GELU is the tanh approximation, "gelu_new"; LayerNorm eps is 1e-5 in both. GPT-2's
vocabulary of 50,257 is padded inside the model to a multiple of VOCAB_MULTIPLE (50,304)
with rows of zeros, and the padding is dropped again on the way out. Nothing is fetched:
the user points at a directory.
"""
import json
import math
import re
from pathlib import Path

import numpy as np
from safetensors import SafetensorError
from safetensors.numpy import load_file

from microgpt.config import ConfigError, GPTConfig
from microgpt.errors import UserError
from microgpt.params import BIASES
from microgpt.reference import LN_EPS
from microgpt.tokenizer import BPETokenizer

CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"
# our name in a block -> GPT-2's (the bias is the same layer's, named BIASES[ours] here)
MATRICES = {"attn.w_qkv": "attn.c_attn", "attn.w_o": "attn.c_proj",
            "mlp.w_fc": "mlp.c_fc", "mlp.w_proj": "mlp.c_proj"}
NORMS = ("ln_1", "ln_2")
# the rows of wte, and so the logits' columns, come in multiples of this (andrea-120m's
# 50,304 = 393 x 128: the GEMMs' tiles divide it)
VOCAB_MULTIPLE = 128
# what GPT2LMHeadModel's buffers add to the tensors in older files: the causal masks
MASK = re.compile(r"(^|\.)h\.\d+\.attn\.(masked_)?bias$")


def padded_vocab(n_tokens):
    return math.ceil(n_tokens / VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def hf_names(cfg):
    """Our parameter name -> GPT-2's, for every tensor of cfg (biases where cfg has them,
    theirs otherwise written as zeros by to_hf)."""
    names = {"wte": "transformer.wte.weight", "wpe": "transformer.wpe.weight",
             "ln_f.weight": "transformer.ln_f.weight", "ln_f.bias": "transformer.ln_f.bias"}
    for i in range(cfg.n_layer):
        ours, theirs = f"h.{i}.", f"transformer.h.{i}."
        for norm in NORMS:
            for part in ("weight", "bias"):
                names[f"{ours}{norm}.{part}"] = f"{theirs}{norm}.{part}"
        for name, hf_name in MATRICES.items():
            names[ours + name] = f"{theirs}{hf_name}.weight"
            names[ours + BIASES[name]] = f"{theirs}{hf_name}.bias"
    return names


def to_hf(params, cfg):
    """Our state_dict -> GPT2LMHeadModel's tensors (without the tied lm_head), the
    vocabulary's padding dropped; a bias-free model's biases are zeros."""
    out = {theirs: params[ours] for ours, theirs in hf_names(cfg).items() if ours in params}
    for i in range(cfg.n_layer):    # a bias-free model's: zeros of the layer's output width
        for weight, hf_name in MATRICES.items():
            out.setdefault(f"transformer.h.{i}.{hf_name}.bias",
                           np.zeros(params[f"h.{i}.{weight}"].shape[1], np.float32))
    out["transformer.wte.weight"] = params["wte"][:cfg.tokens]
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def hf_config(cfg, tokenizer):
    """The GPT2Config (as config.json's dict) of our config."""
    eot = getattr(tokenizer, "eot_id", None)
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg.tokens, "n_positions": cfg.context, "n_ctx": cfg.context,
        "n_embd": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "bos_token_id": eot, "eos_token_id": eot,
        "torch_dtype": "float32",
    }


# ----------------------------------------------------------------------------------
# import

def load_hf_gpt2(directory, context=None):
    """A GPT-2 directory -> (GPTConfig with bias, padded vocabulary; our state_dict; the
    tokenizer, or None where the directory has none). context shortens the model's
    (wpe's first rows), never lengthens it. Every problem is a UserError in one line."""
    directory = Path(directory)
    where = f"--init-from {directory}"
    if not directory.is_dir():
        raise UserError(f"{where} is not a directory; pass a Hugging Face GPT-2 directory "
                        f"({CONFIG_FILE} and {WEIGHTS_FILE}, as save_pretrained writes them)")
    cfg = _config(directory, where, context)
    try:
        tensors = load_file(directory / WEIGHTS_FILE)
    except FileNotFoundError:
        raise UserError(f"{where} has no {WEIGHTS_FILE}; save the model with "
                        "save_pretrained(..., safe_serialization=True)") from None
    except (SafetensorError, OSError) as err:
        raise UserError(f"{where}: {WEIGHTS_FILE} cannot be read ({err})") from None
    return cfg, from_hf(tensors, cfg, where), _tokenizer(directory, cfg)


def _config(directory, where, context):
    try:
        hf = json.loads((directory / CONFIG_FILE).read_text())
    except FileNotFoundError:
        raise UserError(f"{where} has no {CONFIG_FILE}") from None
    except (OSError, ValueError) as err:
        raise UserError(f"{where}: {CONFIG_FILE} cannot be read ({err})") from None
    if not isinstance(hf, dict) or hf.get("model_type") != "gpt2":
        raise UserError(f"{where}: {CONFIG_FILE} is not a GPT-2 config (model_type "
                        f"{hf.get('model_type') if isinstance(hf, dict) else None!r}, not 'gpt2')")
    unlike = {"activation_function": ("gelu_new",), "n_inner": (None,),
              "scale_attn_by_inverse_layer_idx": (False, None),
              "tie_word_embeddings": (True, None), "scale_attn_weights": (True, None)}
    for key, allowed in unlike.items():
        if hf.get(key, allowed[0]) not in allowed:
            raise UserError(f"{where}: {CONFIG_FILE} has {key} {hf[key]!r}, which this GPT "
                            f"does not model (only {allowed[0]!r})")
    if not math.isclose(hf.get("layer_norm_epsilon", LN_EPS), LN_EPS):
        raise UserError(f"{where}: layer_norm_epsilon {hf['layer_norm_epsilon']} is not "
                        f"{LN_EPS}, the one this GPT's LayerNorm uses")
    try:
        n_positions, n_tokens = hf["n_positions"], hf["vocab_size"]
        if context is not None and context > n_positions:
            raise UserError(f"--context {context} is longer than {where}'s {n_positions} "
                            "positions; pass at most that")
        return GPTConfig(n_layer=hf["n_layer"], d_model=hf["n_embd"], n_head=hf["n_head"],
                         context=context or n_positions, vocab_size=padded_vocab(n_tokens),
                         bias=True, n_tokens=n_tokens)
    except KeyError as err:
        raise UserError(f"{where}: {CONFIG_FILE} lacks {err.args[0]}") from None
    except (ConfigError, TypeError) as err:
        raise UserError(f"{where}: {CONFIG_FILE} describes no GPT ({err})") from None


def from_hf(tensors, cfg, where):
    """GPT2LMHeadModel's tensors (with or without the "transformer." prefix that
    save_pretrained writes) -> our state_dict for cfg, wte padded with rows of zeros."""
    tensors = {(k if k.startswith(("transformer.", "lm_head.")) else "transformer." + k): v
               for k, v in tensors.items() if not MASK.search(k)}
    head = tensors.pop("lm_head.weight", None)
    names = hf_names(cfg)
    unknown = tensors.keys() - set(names.values())
    missing = set(names.values()) - tensors.keys()
    if missing or unknown:
        raise UserError(f"{where}: {WEIGHTS_FILE} does not hold GPT-2's tensors for "
                        f"{cfg.n_layer} layers (missing {sorted(missing)[:3]}, unexpected "
                        f"{sorted(unknown)[:3]})")
    params = {}
    for ours, theirs in names.items():
        params[ours] = np.asarray(tensors[theirs], np.float32)
    wte = params["wte"]
    if head is not None and not np.array_equal(head, wte):
        raise UserError(f"{where}: its lm_head is not tied to wte, which this GPT requires")
    if wte.shape[0] != cfg.tokens:
        raise UserError(f"{where}: wte has {wte.shape[0]} rows but config.json's vocab_size "
                        f"is {cfg.tokens}")
    params["wte"] = np.concatenate([wte, np.zeros((cfg.vocab_size - cfg.tokens, wte.shape[1]),
                                                  np.float32)])
    wpe = params["wpe"]
    if wpe.shape[0] < cfg.context:
        raise UserError(f"{where}: wpe has {wpe.shape[0]} rows, fewer than {cfg.context}")
    params["wpe"] = wpe[:cfg.context]
    for name, value in params.items():
        if not np.isfinite(value).all():
            raise UserError(f"{where}: {names[name]} holds NaN or infinity")
    return params


def _tokenizer(directory, cfg):
    """The directory's tokenizer.json (a fast tokenizer's file), or None: the run then
    needs --tokenizer or token shards."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        return None
    tokenizer = BPETokenizer.from_file(path)
    if tokenizer.vocab_size > cfg.tokens:
        raise UserError(f"--init-from {directory}: tokenizer.json has {tokenizer.vocab_size} "
                        f"tokens, more than the model's {cfg.tokens}")
    return tokenizer
