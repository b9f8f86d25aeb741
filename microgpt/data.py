"""Training data: the corpus, llm.c token shards, the token cache and the batch loader.

A text corpus (the Python standard library's own source by default, or --data PATH: a
UTF-8 file or a directory of them) is split 90/10 into train and val by document,
tokenized, and cached as two token shards in llm.c's format under the cache directory,
keyed on the corpus's file list, sizes and mtimes and on the tokenizer's hash, so a second
run on unchanged inputs starts at once. A BPE tokenizer trained for a corpus is cached the
same way. Shards are memory-mapped, never read whole.

llm.c's shard format: a header of 256 little-endian int32 (magic 20240520, version 1, the
token count, the rest zero), then the tokens as little-endian uint16.
"""
import functools
import hashlib
import os
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from microgpt.checkpoint import atomic_directory, remove_stale_temporaries
from microgpt.errors import UserError, file_kind
from microgpt.tokenizer import TOKENIZER_FILE, BPETokenizer

SHARD_MAGIC = 20240520
SHARD_VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
VAL_FRACTION = 0.1
SPLIT_SEED = 20240520        # the document shuffle before the split: fixed, not the run's seed
CACHE_VERSION = 1            # bump when the cached bytes would change for the same inputs
ENTROPY_SAMPLE = 1 << 24     # tokens the unigram entropy is measured on, at most
ENCODE_CHUNK = 64            # documents per call into the tokenizer
SIGNATURE_SAMPLE = 1 << 22   # tokens that tokens_signature hashes, at most


# ----------------------------------------------------------------------------------
# llm.c token shards

def write_shard(path, tokens):
    """tokens (n,) ints in [0, 65536) -> an llm.c .bin shard at path, fsynced."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(np.uint16).max):
        raise ValueError("shard tokens must lie in [0, 65536)")
    header = np.zeros(HEADER_INTS, "<i4")
    header[:3] = SHARD_MAGIC, SHARD_VERSION, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
        f.flush()
        os.fsync(f.fileno())


def read_shard(path):
    """An llm.c .bin shard -> its tokens (n,) uint16, memory-mapped read-only."""
    try:
        size = os.path.getsize(path)
        header = np.fromfile(path, "<i4", count=3)
    except OSError as err:
        raise UserError(f"cannot read the token shard {path} ({err.strerror}); make it "
                        "readable or leave it out of --data") from None
    if size < HEADER_BYTES:
        raise UserError(f"{path} is {size} bytes, too short for an llm.c token shard's "
                        f"{HEADER_BYTES}-byte header; re-create the shard")
    magic, version, count = header
    if magic != SHARD_MAGIC:
        raise UserError(f"{path} is not an llm.c token shard (magic {magic}, expected "
                        f"{SHARD_MAGIC}); pass shards written by llm.c or a text corpus")
    if version != SHARD_VERSION:
        raise UserError(f"{path} is an llm.c shard of version {version}; only version "
                        f"{SHARD_VERSION} (uint16 tokens) is supported")
    expected = HEADER_BYTES + 2 * int(count)
    if count < 0 or size != expected:
        raise UserError(f"{path} is truncated or damaged: its header promises {count} tokens "
                        f"({expected} bytes) but the file has {size} bytes; re-create the shard")
    if count == 0:
        return np.zeros(0, np.uint16)
    return np.memmap(path, "<u2", mode="r", offset=HEADER_BYTES, shape=(int(count),))


# ----------------------------------------------------------------------------------
# text corpora

@dataclass(frozen=True)
class Corpus:
    """Text files in a fixed order, one document each."""
    name: str
    root: Path
    files: tuple
    skip_undecodable: bool = False   # the stdlib ships a few deliberately non-UTF-8 tests

    def fingerprint(self):
        """A hash of the file list with sizes and mtimes: it changes when any input does."""
        # names as the file system's bytes: a name need not be UTF-8
        h = hashlib.sha256(f"{CACHE_VERSION}\n".encode() + os.fsencode(self.root) + b"\n")
        for path in self.files:
            st = path.stat()
            h.update(os.fsencode(path.relative_to(self.root))
                     + f"\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
        return h.hexdigest()

    def documents(self):
        """The non-empty files' text, in order; a file that is not UTF-8 is an error."""
        docs = []
        for path in self.files:
            try:
                raw = path.read_bytes()
            except OSError as err:
                raise UserError(f"cannot read {path} ({err.strerror}); make it readable or "
                                "leave it out of --data") from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                if self.skip_undecodable:
                    continue
                raise UserError(f"{path} is not UTF-8 text (byte {err.start} cannot be "
                                "decoded); pass text files or llm.c .bin shards") from None
            if text:
                docs.append(text)
        if not docs:
            raise UserError(f"the corpus {self.name} is empty; pass files that hold text")
        return docs


def stdlib_corpus():
    """The running interpreter's standard library sources, Lib/**/*.py (no site-packages)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    installed = {"site-packages", "dist-packages"}
    files = sorted(p for p in root.rglob("*.py")
                   if p.is_file() and not installed & set(p.relative_to(root).parts))
    return Corpus("the Python standard library", root, tuple(files), skip_undecodable=True)


def visible_files(directory):
    """Regular files under directory, sorted, skipping hidden names (.git, .DS_Store)."""
    return sorted(p for p in directory.rglob("*") if p.is_file() and not any(
        part.startswith(".") for part in p.relative_to(directory).parts))


def split_documents(docs):
    """-> (train, val) lists of str: 90/10 by document after a fixed shuffle; a corpus of
    one document is cut at a line boundary near 90% of its text."""
    if len(docs) == 1:
        text = docs[0]
        cut = int(len(text) * (1 - VAL_FRACTION))
        cut = text.rfind("\n", 0, cut) + 1 or cut
        return [text[:cut]], [text[cut:]]
    order = np.random.default_rng(SPLIT_SEED).permutation(len(docs))
    n_val = max(1, round(len(docs) * VAL_FRACTION))
    return [docs[i] for i in order[n_val:]], [docs[i] for i in order[:n_val]]


def encode_documents(tokenizer, docs):
    """-> tokens (n,) uint16, each document preceded by <|endoftext|> when the tokenizer has
    one (GPT-2's convention), so the model sees where documents begin."""
    prefix = [] if tokenizer.eot_id is None else [tokenizer.eot_id]
    parts = [np.zeros(0, np.uint16)]
    for start in range(0, len(docs), ENCODE_CHUNK):   # Python int lists are big: few at a time
        parts += [np.asarray(prefix + ids, np.uint16)
                  for ids in tokenizer.encode_batch(docs[start:start + ENCODE_CHUNK])]
    return np.concatenate(parts)


# ----------------------------------------------------------------------------------
# the token cache

@dataclass
class TokenData:
    train: list          # token arrays (n_i,) uint16, memory-mapped
    val: list
    tokenizer: object    # None only for shards given without a tokenizer
    source: str          # where the tokens came from, for the log


def default_cache_dir():
    if os.environ.get("MICROGPT_CACHE_DIR"):
        return Path(os.environ["MICROGPT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "microgpt"


def load_tokens(data, tokenizer, bpe_vocab_size, cache_dir):
    """Train and val tokens for a run.

    data: None for the standard library, else a path (text file, directory of text files,
    or llm.c .bin shards). tokenizer: a tokenizer object, or None to train byte-level BPE
    at bpe_vocab_size on the corpus (cached). Every input problem raises UserError."""
    if data is None:
        corpus = stdlib_corpus()
    else:
        path = Path(data)
        if not path.exists():
            raise UserError(f"--data {data} does not exist; pass a UTF-8 text file, a directory "
                            "of them, or llm.c .bin token shards")
        if not (path.is_file() or path.is_dir()):   # reading a FIFO would wait forever
            raise UserError(f"--data {data} is {file_kind(path)}; pass a UTF-8 text file, a "
                            "directory of them, or llm.c .bin token shards")
        shards = shard_paths(path)
        if shards:
            return _shard_tokens(shards, tokenizer, str(path))
        files = (path,) if path.is_file() else tuple(visible_files(path))
        if not files:
            raise UserError(f"--data {data} holds no files; pass a directory of text files")
        corpus = Corpus(str(path), path if path.is_dir() else path.parent, files)
    return _text_tokens(corpus, tokenizer, bpe_vocab_size, Path(cache_dir))


def shard_paths(path):
    """The llm.c shards that path names: itself if it is a .bin file, else the .bin files
    directly inside it; [] means a text corpus."""
    if path.is_dir():
        return sorted(path.glob("*.bin"))
    return [path] if path.suffix == ".bin" else []


def _shard_tokens(shards, tokenizer, source):
    """llm.c's naming: a shard whose name contains "val" is validation data. Without one,
    the last shard is validation, or the last 10% of the only one."""
    val_paths = [p for p in shards if "val" in p.name]
    train_paths = [p for p in shards if "val" not in p.name]
    if not train_paths:
        raise UserError(f"{source} holds only validation shards (names with 'val'); "
                        "add training shards")
    train = [read_shard(p) for p in train_paths]
    val = [read_shard(p) for p in val_paths]
    if not val:
        if len(train) > 1:
            val = [train.pop()]
        else:
            cut = int(len(train[0]) * (1 - VAL_FRACTION))
            train, val = [train[0][:cut]], [train[0][cut:]]
    return TokenData(train, val, tokenizer, f"token shards {source}")


def _text_tokens(corpus, tokenizer, bpe_vocab_size, cache_dir):
    fingerprint = corpus.fingerprint()
    # read and split only if the cache lacks the tokenizer or the tokens, and then once
    train_val_documents = functools.cache(lambda: split_documents(corpus.documents()))
    for kind in ("tokenizers", "tokens"):
        if (cache_dir / kind).is_dir():
            remove_stale_temporaries(cache_dir / kind)

    if tokenizer is None:
        key = _hash(fingerprint, "bpe", bpe_vocab_size)
        tokenizer_path = cache_dir / "tokenizers" / key / TOKENIZER_FILE
        tokenizer = _cached(tokenizer_path, BPETokenizer.from_file)
        if tokenizer is None:
            print(f"training a {bpe_vocab_size}-token BPE tokenizer on {corpus.name} ...",
                  flush=True)
            trained = BPETokenizer.train(train_val_documents()[0], bpe_vocab_size)
            _write_cache_dir(tokenizer_path.parent, lambda tmp: trained.save(tmp / TOKENIZER_FILE))
            tokenizer = BPETokenizer.from_file(tokenizer_path)

    token_dir = cache_dir / "tokens" / _hash(fingerprint, tokenizer.fingerprint)
    splits = _cached(token_dir, lambda d: _read_cached_splits(d, tokenizer.vocab_size))
    if splits is None:
        n = len(corpus.files)
        print(f"tokenizing {corpus.name} ({n} file{'s' if n != 1 else ''}) ...", flush=True)
        train_docs, val_docs = train_val_documents()

        def write(tmp):
            write_shard(tmp / "train.bin", encode_documents(tokenizer, train_docs))
            write_shard(tmp / "val.bin", encode_documents(tokenizer, val_docs))
        _write_cache_dir(token_dir, write)
        splits = _read_cached_splits(token_dir, tokenizer.vocab_size)
    return TokenData(*splits, tokenizer, corpus.name)


def _cached(path, read):
    """read(path) for a cache entry that exists and reads back, else None. A damaged entry
    (a disk fault, a hand edit) is only a cache miss: it is said and then rebuilt."""
    if not path.exists():
        return None
    try:
        return read(path)
    except UserError:
        print(f"the cache entry {path} is damaged; building it again", flush=True)
        return None


def _read_cached_splits(directory, vocab_size):
    """-> ([train tokens], [val tokens]) of a token cache entry, checked to be shards whose
    every token the tokenizer knows."""
    splits = [read_shard(directory / "train.bin")], [read_shard(directory / "val.bin")]
    for (tokens,) in splits:
        if tokens.size and int(tokens.max()) >= vocab_size:
            raise UserError(f"{directory} holds token id {int(tokens.max())}, beyond the "
                            f"tokenizer's {vocab_size}")
    return splits


def tokens_signature(data):
    """A short hash of a run's train and val tokens, which state.json keeps so that a resume
    on changed data is caught: the token counts, and the tokens themselves (an evenly strided
    sample of SIGNATURE_SAMPLE in all, for a large corpus: a resume must not read it all)."""
    h = hashlib.sha256()
    shards = [*data.train, None, *data.val]
    budget = max(1, SIGNATURE_SAMPLE // len(shards))
    for tokens in shards:
        if tokens is None:                  # the boundary between the splits
            h.update(b"|")
            continue
        stride = max(1, len(tokens) // budget)
        h.update(f"{len(tokens)}:".encode())
        h.update(np.ascontiguousarray(tokens[::stride], "<u2").tobytes())
    return h.hexdigest()[:24]


def _hash(*parts):
    return hashlib.sha256("\0".join(map(str, parts)).encode()).hexdigest()[:24]


def _write_cache_dir(target, fill):
    """fill(directory) writes the entry's files; they appear at target all at once."""
    try:
        with atomic_directory(target) as tmp:
            fill(tmp)
    except OSError as err:
        raise UserError(f"cannot write the cache at {target.parent} ({err.strerror}); "
                        "pass --cache-dir DIR or set MICROGPT_CACHE_DIR") from None


# ----------------------------------------------------------------------------------
# batches

class BatchLoader:
    """Training batches: B windows of T+1 tokens at random offsets across the shards.

    The state is the RNG's, so a resumed run draws exactly the batches the uninterrupted
    run would have drawn."""

    def __init__(self, shards, batch_size, seq_len, vocab_size, seed, split="training"):
        self.shards, self.B, self.T, self.vocab_size = shards, batch_size, seq_len, vocab_size
        self.windows = np.array([max(0, len(s) - seq_len) for s in shards])
        self.window_end = np.cumsum(self.windows)
        if self.window_end[-1] == 0:
            raise UserError(f"the {split} split has {sum(len(s) for s in shards)} tokens, fewer "
                            f"than one context of {seq_len + 1}; give more text (ten contexts "
                            "or more) or pass a smaller --context")
        self.rng = np.random.default_rng(seed)

    def next_batch(self):
        """-> inputs, targets: int32 (B, T), targets the inputs shifted by one token."""
        starts = self.rng.integers(0, self.window_end[-1], size=self.B)
        return self._windows_at(starts)

    def _windows_at(self, starts):
        shard = np.searchsorted(self.window_end, starts, side="right")
        offsets = starts - (self.window_end[shard] - self.windows[shard])
        rows = np.stack([self.shards[s][o:o + self.T + 1] for s, o in zip(shard, offsets)])
        if rows.max() >= self.vocab_size:
            raise UserError(f"the data holds token id {rows.max()}, beyond the model's "
                            f"vocabulary of {self.vocab_size}; pass --vocab-size {rows.max() + 1} "
                            "or more")
        rows = rows.astype(np.int32)
        return rows[:, :-1], rows[:, 1:]

    def fixed_batches(self, n_batches):
        """n_batches batches at offsets spread evenly over the data, the same every call:
        the validation set, so every evaluation measures the same tokens."""
        starts = np.linspace(0, self.window_end[-1] - 1, n_batches * self.B).astype(np.int64)
        return [self._windows_at(chunk) for chunk in starts.reshape(n_batches, self.B)]

    def whole_split(self):
        """Every token of the split scored once: the windows of T+1 tokens that tile each
        shard (a window's last token is the next one's first), in batches of B rows, the
        last batch holding the windows left over (fewer rows). A shard's tail shorter than
        a window is not scored. What --eval-batches 0 evaluates."""
        starts = np.concatenate([np.arange(0, windows, self.T) + end - windows
                                 for windows, end in zip(self.windows, self.window_end)])
        return [self._windows_at(starts[i:i + self.B]) for i in range(0, len(starts), self.B)]

    def state_dict(self):
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state):
        self.rng.bit_generator.state = state["rng"]


def mean_loss(batches, evaluate):
    """The mean loss per token over batches of (inputs, targets), evaluate(inputs, targets)
    giving one batch's mean: each batch weighs by its rows (whole_split's last one has
    fewer)."""
    rows = [len(inputs) for inputs, _ in batches]
    total = sum(float(evaluate(x, y)) * n for (x, y), n in zip(batches, rows))
    return total / sum(rows)


def unigram_entropy(shards, vocab_size):
    """The entropy (nats per token) of the token frequencies: the loss of a model that knows
    only how common each token is, the first thing a GPT learns to beat."""
    sample = np.concatenate([np.asarray(s[:ENTROPY_SAMPLE]) for s in shards])[:ENTROPY_SAMPLE]
    counts = np.bincount(sample, minlength=vocab_size)
    p = counts[counts > 0] / sample.size
    return float(-(p * np.log(p)).sum())
