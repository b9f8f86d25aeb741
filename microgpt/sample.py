"""Sampling from a trained model.

    python -m microgpt.sample --checkpoint runs/NAME --prompt "def " --tokens 200
"""
import sys

import numpy as np

from microgpt.checkpoint import load_checkpoint
from microgpt.cli import (DEVICES, ArgumentParser, make_backend, non_negative, positive_int,
                          run_cli)
from microgpt.errors import UserError
from microgpt.model import GPT

PROG = "microgpt.sample"


def generate(model, prompt_ids, n_tokens, *, temperature, top_k, rng, vocab_limit):
    """Extend prompt_ids by n_tokens sampled tokens -> the new ids (a list of int).

    Every step feeds the model one fixed (1, context) window, the tokens left-aligned and
    padded with zeros: causal attention keeps the padding from reaching the last real
    position, and one shape means the model allocates its buffers once. Only the first
    vocab_limit logits are eligible (the model's vocabulary may be padded beyond the
    tokenizer's). temperature 0 is greedy; top_k 0 keeps every token."""
    context = model.config.context
    ids = list(prompt_ids)
    window = np.zeros((1, context), np.int32)
    new = []
    for _ in range(n_tokens):
        recent = ids[-context:]
        window[0, :len(recent)] = recent
        with np.errstate(all="ignore"):    # overflow is reported below, in one line
            logits = model.forward(window)[0, len(recent) - 1, :vocab_limit].astype(np.float64)
        if not np.isfinite(logits).all():
            raise UserError("the model's outputs overflow to NaN or infinity: its parameters "
                            "come from a run that diverged; use an earlier checkpoint")
        if temperature == 0:
            token = int(np.argmax(logits))
        else:
            logits /= temperature
            if 0 < top_k < logits.size:
                logits[logits < np.partition(logits, -top_k)[-top_k]] = -np.inf
            p = np.exp(logits - logits.max())
            token = int(rng.choice(logits.size, p=p / p.sum()))
        ids.append(token)
        new.append(token)
    return new


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
