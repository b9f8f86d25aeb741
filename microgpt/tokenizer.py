"""Tokenizers: byte-level BPE trained with the `tokenizers` library, raw bytes, or bare ids.

All three answer the same small interface: ``encode(text) -> list[int]``,
``encode_batch(texts)``, ``decode(ids) -> str``, ``vocab_size``, ``eot_id`` (the document
separator, or None), ``start_ids`` (what an unprompted sample starts from) and
``reference()``, the dict a checkpoint's state.json keeps to find the tokenizer again.

Byte-level BPE maps every UTF-8 byte to a token before merging, so any Unicode string
encodes and decodes back to itself. Decoding arbitrary ids (a sample from the model) can
produce invalid UTF-8; those bytes decode to U+FFFD instead of failing.
"""
import hashlib
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from microgpt.errors import UserError

EOT = "<|endoftext|>"
TOKENIZER_FILE = "tokenizer.json"
MIN_BPE_VOCAB = 257          # the 256 byte tokens and <|endoftext|>
MAX_VOCAB = 65536            # token shards store uint16


class ByteTokenizer:
    """Raw UTF-8 bytes: vocabulary 256, nothing to train, no document separator."""
    kind = "bytes"
    vocab_size = 256
    eot_id = None
    start_ids = (ord("\n"),)
    fingerprint = "bytes"

    def encode(self, text):
        return list(text.encode("utf-8"))

    def encode_batch(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        return bytes(list(ids)).decode("utf-8", errors="replace")   # list: numpy ids too

    def reference(self):
        return {"kind": self.kind}


class BPETokenizer:
    """Byte-level BPE (GPT-2's pre-tokenizer regex) with <|endoftext|> as a special token."""
    kind = "bpe"

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self.vocab_size = tokenizer.get_vocab_size()
        self.eot_id = tokenizer.token_to_id(EOT)
        self.start_ids = (self.eot_id,) if self.eot_id is not None else (0,)
        self.json = tokenizer.to_str()
        self.fingerprint = hashlib.sha256(self.json.encode("utf-8")).hexdigest()

    @classmethod
    def train(cls, texts, vocab_size):
        """Learn merges from texts (a list of str) until the vocabulary holds vocab_size
        tokens, or until no pair is left to merge on a small corpus."""
        if not MIN_BPE_VOCAB <= vocab_size <= MAX_VOCAB:
            raise UserError(f"a BPE vocabulary must hold {MIN_BPE_VOCAB} to {MAX_VOCAB} tokens, "
                            f"got {vocab_size}; pass --vocab-size in that range")
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tokenizer.train_from_iterator(texts, trainer)
        return cls(tokenizer)

    @classmethod
    def from_file(cls, path):
        try:
            tokenizer = Tokenizer.from_file(str(path))
        except Exception as err:   # the Rust side raises a bare Exception on bad JSON
            raise UserError(f"{path} is not a tokenizers JSON file ({_first_line(err)}); "
                            "pass a tokenizer.json saved by the tokenizers library") from None
        if tokenizer.get_vocab_size() > MAX_VOCAB:
            raise UserError(f"{path} has {tokenizer.get_vocab_size()} tokens, more than the "
                            f"{MAX_VOCAB} that uint16 token shards can hold")
        return cls(tokenizer)

    def save(self, path):
        Path(path).write_text(self.json, encoding="utf-8")

    def encode(self, text):
        return self._tokenizer.encode(text).ids

    def encode_batch(self, texts):
        return [e.ids for e in self._tokenizer.encode_batch_fast(texts)]

    def decode(self, ids):
        return self._tokenizer.decode(list(ids), skip_special_tokens=False)

    def reference(self):
        return {"kind": self.kind, "file": TOKENIZER_FILE, "sha256": self.fingerprint}


class TokenIds:
    """No tokenizer (token shards given without one): text is token ids separated by spaces."""
    kind = "ids"
    eot_id = None
    start_ids = (0,)
    fingerprint = "ids"

    def __init__(self, vocab_size):
        self.vocab_size = vocab_size

    def encode(self, text):
        try:
            ids = [int(word) for word in text.split()]
        except ValueError:
            raise UserError("without a tokenizer a prompt is token ids separated by spaces, "
                            f"got {text!r}") from None
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise UserError(f"prompt token ids must lie in [0, {self.vocab_size})")
        return ids

    def decode(self, ids):
        return " ".join(str(i) for i in ids)

    def reference(self):
        return {"kind": self.kind, "vocab_size": self.vocab_size}


def tokenizer_from_reference(reference, directory):
    """The tokenizer a checkpoint's state.json refers to; a BPE tokenizer's file lies in
    directory and must still have the recorded hash."""
    kind = reference.get("kind")
    if kind == "bytes":
        return ByteTokenizer()
    if kind == "ids":
        vocab_size = reference.get("vocab_size")
        if not (type(vocab_size) is int and vocab_size > 0):
            raise _damaged(directory, f"token-id vocabulary {vocab_size!r}")
        return TokenIds(vocab_size)
    if kind == "bpe":
        name, sha256 = reference.get("file"), reference.get("sha256")
        # the file lies inside the checkpoint: a name, never a path that leads elsewhere
        if not (isinstance(name, str) and isinstance(sha256, str) and name == Path(name).name
                and name not in ("", ".", "..")):
            raise _damaged(directory, f"tokenizer file {name!r} or hash {sha256!r}")
        path = Path(directory) / name
        if not path.is_file():
            raise UserError(f"checkpoint {directory} lacks its tokenizer {name}; "
                            "copy it back or train a new run")
        tokenizer = BPETokenizer.from_file(path)
        if tokenizer.fingerprint != sha256:
            raise UserError(f"{path} is not the tokenizer this checkpoint was trained with "
                            "(its hash differs); restore the original file")
        return tokenizer
    raise UserError(f"checkpoint {directory} names an unknown tokenizer kind {kind!r}")


def _damaged(directory, what):
    return UserError(f"checkpoint {directory}: state.json is damaged ({what}); "
                     "use another checkpoint")


def _first_line(err):
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__
