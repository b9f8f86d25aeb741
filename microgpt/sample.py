"""Sampling from a trained model (microgpt.generate: a KV cache, decoding on the device).

    python -m microgpt.sample --checkpoint runs/NAME --prompt "def " --tokens 200
    python -m microgpt.sample --checkpoint runs/NAME --prompts prompts.txt --num-samples 4

One sample streams to the terminal token by token; several (each prompt of --prompts,
one per line, times --num-samples) decode as one batch, each printed whole as it ends,
in order, under a header naming its prompt and sample.
"""
import sys

from microgpt.activations import PRECISIONS
from microgpt.checkpoint import load_checkpoint
from microgpt.cli import (DEVICES, ArgumentParser, choose_precision, make_backend,
                          non_negative, positive_int, run_cli)
from microgpt.errors import UserError
from microgpt.generate import Sampling, generate
from microgpt.model import GPT

PROG = "microgpt.sample"


class TextStream:
    """Tokens -> text as they come: the text of all the tokens so far is decoded again and
    its new end written, held back while it ends in a character still being completed
    (a multi-byte character split across tokens decodes to U+FFFD until its last byte)."""

    def __init__(self, tokenizer, ids, write):
        self.tokenizer, self.ids, self.write = tokenizer, list(ids), write
        self.shown = len(tokenizer.decode(self.ids)) if self.ids else 0

    def add(self, token):
        self.ids.append(token)
        text = self.tokenizer.decode(self.ids)
        end = len(text.rstrip("\ufffd"))
        if end > self.shown:
            self.write(text[self.shown:end])
            self.shown = end

    def finish(self):
        text = self.tokenizer.decode(self.ids)
        self.write(text[self.shown:])
        self.shown = len(text)


def prompt_ids(tokenizer, prompt):
    """The ids a sample continues: the prompt's, or the tokenizer's start of a document."""
    ids = list(tokenizer.encode(prompt) if prompt else tokenizer.start_ids)
    if not ids:
        raise UserError("the prompt encodes to no tokens; pass a longer --prompt")
    return ids


def sample_text(model, tokenizer, prompt, n_tokens, *, temperature=0.8, top_k=40, top_p=1.0,
                seed=0, stop_id=None, write=None):
    """The prompt and its continuation as text (no prompt starts a new document, which is
    not shown); write(text), if given, receives the continuation as it comes."""
    ids = prompt_ids(tokenizer, prompt)
    shown = ids if prompt else []
    stream = TextStream(tokenizer, shown, write or (lambda text: None))
    sampling = _limited(Sampling(temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                                 stop_id=stop_id), tokenizer, model)
    new = generate(model, [ids], n_tokens, sampling, on_token=lambda b, t: stream.add(t))[0]
    stream.finish()
    # decoded together, so a character split between prompt and continuation survives
    return tokenizer.decode(shown + new)


def sample_texts(model, tokenizer, prompts, n_tokens, sampling=Sampling(), *,
                 num_samples=1, on_done=None):
    """num_samples continuations of each prompt, one batch -> their texts, prompt by prompt;
    on_done(i, text), if given, is called with each in order as soon as it and those
    before it have ended."""
    ids = [prompt_ids(tokenizer, p) for p in prompts for _ in range(num_samples)]
    shown = [ids[i] if prompts[i // num_samples] else [] for i in range(len(ids))]
    new = [[] for _ in ids]
    ended, reported = [False] * len(ids), [0]

    def on_token(b, token):
        new[b].append(token)
        if len(new[b]) == n_tokens or token == sampling.stop_id:
            ended[b] = True
        while on_done and reported[0] < len(ids) and ended[reported[0]]:
            i = reported[0]
            on_done(i, tokenizer.decode(shown[i] + new[i]))
            reported[0] += 1
    generate(model, ids, n_tokens, _limited(sampling, tokenizer, model), on_token=on_token)
    return [tokenizer.decode(s + n) for s, n in zip(shown, new)]


def _limited(sampling, tokenizer, model):
    """sampling with the eligible logits cut to the tokenizer's vocabulary."""
    from dataclasses import replace
    return replace(sampling, vocab_limit=min(tokenizer.vocab_size, model.config.vocab_size))


def parse_args(argv):
    p = ArgumentParser(prog=PROG, description="Generate text from a microgpt checkpoint.")
    p.add_argument("--checkpoint", required=True, metavar="DIR",
                   help="a checkpoint directory, or a run directory (its latest checkpoint)")
    p.add_argument("--prompt", default="", help="text to continue (default: a new document)")
    p.add_argument("--prompts", metavar="FILE",
                   help="a UTF-8 text file of prompts, one per line (an empty line starts a "
                   "new document); all decode as one batch")
    p.add_argument("--num-samples", type=positive_int, default=1, metavar="N",
                   help="samples of each prompt, decoded as one batch (default: 1)")
    p.add_argument("--tokens", type=positive_int, default=200, metavar="N",
                   help="tokens to generate per sample (default: 200)")
    p.add_argument("--temperature", type=non_negative(float), default=0.8, metavar="T",
                   help="softmax temperature; 0 is greedy decoding (default: 0.8)")
    p.add_argument("--top-k", type=non_negative(int), default=40, metavar="K",
                   help="sample among the k likeliest tokens; 0 for all (default: 40)")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P",
                   help="then among the likeliest tokens whose probabilities sum to P, in "
                   "(0, 1]; 1 for all (default: 1)")
    p.add_argument("--stop", choices=("eot", "none"), default="eot",
                   help="eot ends a sample at the tokenizer's end of document, if it has "
                   "one; none runs every sample to --tokens (default: eot)")
    p.add_argument("--seed", type=non_negative(int), default=0, metavar="N",
                   help="the sampling seed (default: 0)")
    p.add_argument("--device", choices=DEVICES, default="auto",
                   help="cpu runs NumPy, cuda the GPU kernels; auto takes a GPU if there is one "
                   "(default: auto)")
    p.add_argument("--precision", choices=PRECISIONS,
                   help="the weights and KV cache in bf16 or fp32 (default: bf16 on a GPU "
                   "with bf16 tensor cores, else fp32)")
    args = p.parse_args(argv)
    if not 0 < args.top_p <= 1:
        p.error(f"--top-p must lie in (0, 1], got {args.top_p}")
    if args.prompts and args.prompt:
        p.error("--prompt and --prompts both given; pass one")
    try:
        args.prompt.encode("utf-8")
    except UnicodeEncodeError as err:   # argv bytes that are not UTF-8 arrive as surrogates
        byte = ord(args.prompt[err.start]) - 0xDC00
        shown = f"byte 0x{byte:02x}" if 0x80 <= byte <= 0xFF else "a character"
        p.error(f"--prompt is not UTF-8 text ({shown} at position {err.start}); "
                "pass UTF-8 text")
    return args


def read_prompts(path):
    """The prompts of a --prompts file, one per line."""
    try:
        with open(path, encoding="utf-8") as f:
            prompts = f.read().splitlines()
    except OSError as err:
        raise UserError(f"--prompts {path}: cannot read it ({err.strerror}); pass a "
                        "readable text file") from None
    except UnicodeDecodeError as err:
        raise UserError(f"--prompts {path}: not UTF-8 text (byte {err.start}); pass a UTF-8 "
                        "text file") from None
    if not prompts:
        raise UserError(f"--prompts {path}: the file holds no prompts; pass one per line")
    return prompts


def run(argv):
    args = parse_args(argv)
    prompts = read_prompts(args.prompts) if args.prompts else [args.prompt]
    ckpt = load_checkpoint(args.checkpoint, optimizer=False)
    backend = make_backend(args.device)
    model = GPT(ckpt.config, backend=backend,
                precision=choose_precision(args.precision, backend, ckpt.config))
    model.load_state_dict(ckpt.params)
    tokenizer = ckpt.tokenizer
    sampling = Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        seed=args.seed,
                        stop_id=tokenizer.eot_id if args.stop == "eot" else None)
    out = sys.stdout
    if len(prompts) == 1 and args.num_samples == 1:
        if prompts[0]:
            out.write(prompts[0])
        sample_text(model, tokenizer, prompts[0], args.tokens, temperature=args.temperature,
                    top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                    stop_id=sampling.stop_id, write=lambda text: (out.write(text), out.flush()))
        out.write("\n")
        return 0

    def show(i, text):
        prompt, sample = divmod(i, args.num_samples)
        out.write(f"--- prompt {prompt + 1}, sample {sample + 1} ---\n{text}\n")
        out.flush()
    sample_texts(model, tokenizer, prompts, args.tokens, sampling,
                 num_samples=args.num_samples, on_done=show)
    return 0


def main(argv=None):
    return run_cli(PROG, run, argv)


if __name__ == "__main__":
    sys.exit(main())
