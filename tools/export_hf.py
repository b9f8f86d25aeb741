#!/usr/bin/env python3
"""Export a checkpoint to the Hugging Face GPT-2 layout.

    python tools/export_hf.py runs/NAME hf/NAME
    python -c "from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained('hf/NAME')"

RUN is a run directory (its latest checkpoint) or a checkpoint directory; OUT must not
exist or be empty. OUT receives config.json (a GPT2Config), model.safetensors and, for a
BPE tokenizer, tokenizer.json with tokenizer_config.json, so AutoTokenizer loads it too.

The two models are the same function: GPT-2's Conv1D computes x @ W + b with W stored
(in, out), the orientation of our weights, so every matrix is written as it is; our
fused QKV columns (Q, K, V, head h at h*D in each) are the order GPT-2 splits c_attn's
output in. Our linear layers have no biases: theirs are written as zeros. The LM head is
tied to wte in both (tie_word_embeddings), so no lm_head tensor is written; the GELU is
the tanh approximation, GPT-2's "gelu_new"; LayerNorm eps is 1e-5 in both.
"""
import json
import sys
from pathlib import Path

import numpy as np
from safetensors.numpy import save

from microgpt.checkpoint import atomic_directory, load_checkpoint
from microgpt.cli import ArgumentParser, run_cli
from microgpt.errors import UserError
from microgpt.reference import LN_EPS
from microgpt.tokenizer import EOT

PROG = "export_hf.py"
# our name in a block -> GPT-2's, for the matrices (their bias is zeros of the out width)
MATRICES = {"attn.w_qkv": "attn.c_attn", "attn.w_o": "attn.c_proj",
            "mlp.w_fc": "mlp.c_fc", "mlp.w_proj": "mlp.c_proj"}
NORMS = ("ln_1", "ln_2")


def hf_tensors(params, cfg):
    """Our state_dict -> GPT2LMHeadModel's tensors (without the tied lm_head)."""
    out = {"transformer.wte.weight": params["wte"], "transformer.wpe.weight": params["wpe"],
           "transformer.ln_f.weight": params["ln_f.weight"],
           "transformer.ln_f.bias": params["ln_f.bias"]}
    for i in range(cfg.n_layer):
        ours, theirs = f"h.{i}.", f"transformer.h.{i}."
        for norm in NORMS:
            for part in ("weight", "bias"):
                out[f"{theirs}{norm}.{part}"] = params[f"{ours}{norm}.{part}"]
        for name, hf_name in MATRICES.items():
            w = params[ours + name]
            out[f"{theirs}{hf_name}.weight"] = w                  # Conv1D: (in, out), as ours
            out[f"{theirs}{hf_name}.bias"] = np.zeros(w.shape[1], np.float32)
    return {k: np.ascontiguousarray(v, np.float32) for k, v in out.items()}


def hf_config(cfg, tokenizer):
    eot = getattr(tokenizer, "eot_id", None)
    return {
        "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "vocab_size": cfg.vocab_size, "n_positions": cfg.context, "n_ctx": cfg.context,
        "n_embd": cfg.d_model, "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_inner": None,
        "activation_function": "gelu_new", "layer_norm_epsilon": LN_EPS,
        "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0,
        "initializer_range": 0.02, "scale_attn_weights": True,
        "scale_attn_by_inverse_layer_idx": False, "reorder_and_upcast_attn": False,
        "tie_word_embeddings": True, "bos_token_id": eot, "eos_token_id": eot,
        "torch_dtype": "float32",
    }


def export(run, out):
    """Write the Hugging Face directory of run's checkpoint at out -> the checkpoint's path."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory; pass a new OUT")
    ckpt = load_checkpoint(run, optimizer=False)
    tensors = hf_tensors(ckpt.params, ckpt.config)
    try:
        with atomic_directory(out) as tmp:
            (tmp / "model.safetensors").write_bytes(save(tensors, metadata={"format": "pt"}))
            (tmp / "config.json").write_text(
                json.dumps(hf_config(ckpt.config, ckpt.tokenizer), indent=2) + "\n")
            if ckpt.tokenizer.kind == "bpe":
                ckpt.tokenizer.save(tmp / "tokenizer.json")
                eot = EOT if ckpt.tokenizer.eot_id is not None else None
                (tmp / "tokenizer_config.json").write_text(json.dumps(
                    {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": eot,
                     "eos_token": eot, "model_max_length": ckpt.config.context}, indent=2)
                    + "\n")
    except OSError as err:
        raise UserError(f"cannot write {out} ({err.strerror}); pass a writable OUT") from None
    return ckpt.path


def run(argv):
    p = ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    p.add_argument("run", metavar="RUN", help="a run directory or a checkpoint directory")
    p.add_argument("out", metavar="OUT", help="the directory to write (new or empty)")
    args = p.parse_args(argv)
    path = export(args.run, args.out)
    print(f"exported {path} to {args.out} (GPT2LMHeadModel.from_pretrained({args.out!r}))")
    return 0


def main(argv=None):
    return run_cli(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
