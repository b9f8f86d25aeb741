#!/usr/bin/env python3
"""Export a checkpoint to the Hugging Face GPT-2 layout.

    python tools/export_hf.py runs/NAME hf/NAME
    python -c "from transformers import GPT2LMHeadModel; GPT2LMHeadModel.from_pretrained('hf/NAME')"

RUN is a run directory (its latest checkpoint) or a checkpoint directory; OUT must not
exist or be empty. OUT receives config.json (a GPT2Config), model.safetensors and, for a
BPE tokenizer, tokenizer.json with tokenizer_config.json, so AutoTokenizer loads it too.

The layout, and why the two models are the same function, is microgpt.hf_gpt2's: every
matrix as it is, the biases (zeros for a bias-free model), the vocabulary's padding
dropped, the LM head tied. --init-from reads such a directory back.
"""
import json
import sys
from pathlib import Path

from safetensors.numpy import save

from microgpt.checkpoint import atomic_directory, load_checkpoint
from microgpt.cli import ArgumentParser, run_cli
from microgpt.errors import UserError
from microgpt.hf_gpt2 import CONFIG_FILE, WEIGHTS_FILE, hf_config, to_hf
from microgpt.tokenizer import EOT

PROG = "export_hf.py"


def export(run, out):
    """Write the Hugging Face directory of run's checkpoint at out -> the checkpoint's path."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"{out} exists and is not an empty directory; pass a new OUT")
    ckpt = load_checkpoint(run, optimizer=False)
    tensors = to_hf(ckpt.params, ckpt.config)
    try:
        with atomic_directory(out) as tmp:
            (tmp / WEIGHTS_FILE).write_bytes(save(tensors, metadata={"format": "pt"}))
            (tmp / CONFIG_FILE).write_text(
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
