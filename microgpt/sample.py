"""Sampling from a trained model (microgpt.generate: a KV cache).

    python -m microgpt.sample --checkpoint runs/NAME --prompt "def " --tokens 200
"""
import sys

import numpy as np

from microgpt.checkpoint import load_checkpoint
from microgpt.cli import (DEVICES, ArgumentParser, make_backend, non_negative, positive_int,
                          run_cli)
from microgpt.errors import UserError
from microgpt.generate import generate
from microgpt.model import GPT

PROG = "microgpt.sample"


def sample_text(model, tokenizer, prompt, n_tokens, *, temperature=0.8, top_k=40, seed=0):
    """The prompt and its continuation as text; no prompt starts a new document."""
    prompt_ids = list(tokenizer.encode(prompt) if prompt else tokenizer.start_ids)
    if not prompt_ids:
        raise UserError("the prompt encodes to no tokens; pass a longer --prompt")
    new = generate(model, prompt_ids, n_tokens, temperature=temperature, top_k=top_k,
                   rng=np.random.default_rng(seed),
                   vocab_limit=min(tokenizer.vocab_size, model.config.vocab_size))
    # decoded together, so a character split between prompt and continuation survives
    return tokenizer.decode(prompt_ids + new) if prompt else tokenizer.decode(new)


def parse_args(argv):
    p = ArgumentParser(prog=PROG, description="Generate text from a microgpt checkpoint.")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="a checkpoint directory, or a run directory (its latest checkpoint)")
    p.add_argument("--prompt", default="", help="text to continue (default: a new document)")
    p.add_argument("--tokens", type=positive_int, default=200, metavar="N",
                   help="tokens to generate (default: 200)")
    p.add_argument("--temperature", type=non_negative(float), default=0.8, metavar="T",
                   help="softmax temperature; 0 is greedy decoding (default: 0.8)")
    p.add_argument("--top-k", type=non_negative(int), default=40, metavar="K",
                   help="sample among the k likeliest tokens; 0 for all (default: 40)")
    p.add_argument("--seed", type=non_negative(int), default=0, metavar="N",
                   help="the sampling seed (default: 0)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="cpu runs NumPy, cuda the GPU kernels; auto takes a GPU if there is one "
                   "(default: auto)")
    args = p.parse_args(argv)
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as err:   # argv bytes that are not UTF-8 arrive as surrogates
        byte = ord(args.prompt[err.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else "a character"
        p.error(f"--prompt is not UTF-8 text ({shown} at position {err.start}); "
                "pass UTF-8 text")
    return args


def run(argv):
    args = parse_args(argv)
    ckpt = load_checkpoint(args.checkpoint, optimizer=False)
    model = GPT(ckpt.config, backend=make_backend(args.device))
    model.load_state_dict(ckpt.params)
    print(sample_text(model, ckpt.tokenizer, args.prompt, args.tokens,
                      temperature=args.temperature, top_k=args.top_k, seed=args.seed))
    return 0


def main(argv=None):
    return run_cli(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
