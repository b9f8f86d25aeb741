"""Data: llm.c shards, text corpora, the 90/10 split, the token cache, the batch loader."""
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra.numpy import arrays

from microgpt import data
from microgpt.data import (HEADER_BYTES, SHARD_MAGIC, BatchLoader, Corpus, TokenData,
                           encode_documents, load_tokens, read_shard, split_documents,
                           stdlib_corpus, tokens_signature, unigram_entropy, write_shard)
from microgpt.errors import UserError
from microgpt.tokenizer import EOT, BPETokenizer, ByteTokenizer

CPU = settings(settings.get_profile("cpu"))


def shard_bytes(tokens, magic=SHARD_MAGIC, version=1, count=None):
    header = np.zeros(256, "<i4")
    header[:3] = magic, version, len(tokens) if count is None else count
    return header.tobytes() + np.asarray(tokens, "<u2").tobytes()


def write_docs(directory, docs):
    directory.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(docs):
        (directory / f"doc{i:03d}.txt").write_text(text, encoding="utf-8")
    return directory


def random_docs(rng, n_docs, words_per_doc=60):
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "ünïcode", "🐍"]
    return [" ".join(rng.choice(words, words_per_doc)) + "\n" for _ in range(n_docs)]


# ----------------------------------------------------------------------------------
# shards

@CPU
@given(tokens=arrays(np.uint16, st.integers(0, 3000)))
def test_shard_round_trip(tmp_path_factory, tokens):
    path = tmp_path_factory.mktemp("shard") / "t.bin"
    write_shard(path, tokens)
    assert path.read_bytes() == shard_bytes(tokens)     # byte for byte llm.c's layout
    np.testing.assert_array_equal(read_shard(path), tokens)


@pytest.mark.parametrize("content, message", [
    (shard_bytes([1, 2, 3], magic=1234), "not an llm.c token shard"),
    (shard_bytes([1, 2, 3], version=2), "version 2"),
    (shard_bytes([1, 2, 3], count=4), "truncated or damaged"),
    (shard_bytes([1, 2, 3])[:-1], "truncated or damaged"),
    (shard_bytes([1, 2, 3]) + b"\0\0", "truncated or damaged"),
    (shard_bytes([])[:100], "too short"),
])
def test_bad_shards(tmp_path, content, message):
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    with pytest.raises(UserError, match=message):
        read_shard(path)


def test_shard_directory_uses_val_names(tmp_path):
    rng = np.random.default_rng()
    train = [rng.integers(0, 500, 300) for _ in range(2)]
    val = rng.integers(0, 500, 100)
    write_shard(tmp_path / "x_train_000001.bin", train[0])
    write_shard(tmp_path / "x_train_000002.bin", train[1])
    write_shard(tmp_path / "x_val_000000.bin", val)
    tokens = load_tokens(str(tmp_path), None, 512, tmp_path / "cache")
    assert [list(t) for t in tokens.train] == [list(t) for t in train]
    assert [list(t) for t in tokens.val] == [list(val)]
    assert tokens.tokenizer is None
    assert not (tmp_path / "cache").exists()      # shards are used in place


def test_shards_without_val(tmp_path):
    rng = np.random.default_rng()
    one = rng.integers(0, 500, 1000)
    write_shard(tmp_path / "one.bin", one)
    tokens = load_tokens(str(tmp_path / "one.bin"), None, 512, tmp_path / "cache")
    assert len(tokens.train[0]) == 900 and len(tokens.val[0]) == 100
    np.testing.assert_array_equal(np.concatenate([tokens.train[0], tokens.val[0]]), one)
    write_shard(tmp_path / "two.bin", one[:50])
    tokens = load_tokens(str(tmp_path), None, 512, tmp_path / "cache")
    assert len(tokens.train) == 1 and len(tokens.val[0]) == 50   # the last shard validates


def test_only_val_shards(tmp_path):
    write_shard(tmp_path / "val.bin", np.arange(100))
    with pytest.raises(UserError, match="only validation shards"):
        load_tokens(str(tmp_path), None, 512, tmp_path / "cache")


# ----------------------------------------------------------------------------------
# text corpora

def test_stdlib_corpus_is_the_standard_library():
    corpus = stdlib_corpus()
    names = {p.relative_to(corpus.root).as_posix() for p in corpus.files}
    assert len(names) > 500 and "os.py" in names and "json/decoder.py" in names
    assert not any("site-packages" in n for n in names)
    assert corpus.fingerprint() == stdlib_corpus().fingerprint()


def test_directory_corpus_skips_hidden_and_empty_files(tmp_path):
    write_docs(tmp_path / "c", ["one\n", "two\n"])
    (tmp_path / "c" / ".hidden").write_bytes(b"\xff\xfe binary")
    (tmp_path / "c" / ".git").mkdir()
    (tmp_path / "c" / ".git" / "index").write_bytes(b"\x00\xff")
    (tmp_path / "c" / "empty.txt").write_text("")
    files = tuple(data.visible_files(tmp_path / "c"))
    assert [p.name for p in files] == ["doc000.txt", "doc001.txt", "empty.txt"]
    assert Corpus("c", tmp_path / "c", files).documents() == ["one\n", "two\n"]


def test_fingerprint_follows_content(tmp_path):
    write_docs(tmp_path, ["one\n", "two\n"])
    corpus = Corpus("c", tmp_path, tuple(data.visible_files(tmp_path)))
    before = corpus.fingerprint()
    (tmp_path / "doc001.txt").write_text("two, longer\n")
    assert corpus.fingerprint() != before


@CPU
@given(n_docs=st.integers(2, 60))
def test_split_is_90_10_by_document(n_docs):
    docs = [f"document {i}\n" for i in range(n_docs)]
    train, val = split_documents(docs)
    assert len(val) == max(1, round(n_docs / 10))
    assert sorted(train + val) == sorted(docs)
    assert split_documents(docs) == (train, val)            # deterministic


@CPU
@given(lines=st.lists(st.text(alphabet=st.characters(exclude_characters="\n")), min_size=1))
def test_split_of_one_document_cuts_at_a_line(lines):
    text = "\n".join(lines)
    (train,), (val,) = split_documents([text])
    assert train + val == text
    ninety_percent = int(len(text) * 0.9)
    if "\n" in text[:ninety_percent]:
        assert train.endswith("\n") and len(train) <= ninety_percent


def test_documents_are_separated_by_end_of_text():
    bpe = BPETokenizer.train(["abc abd abe\n"] * 10, 300)
    tokens = encode_documents(bpe, ["abc\n", "abd\n"])
    assert tokens.dtype == np.uint16
    assert list(tokens).count(bpe.eot_id) == 2 and tokens[0] == bpe.eot_id
    assert bpe.decode(tokens) == f"{EOT}abc\n{EOT}abd\n"
    assert list(encode_documents(ByteTokenizer(), ["ab", "c"])) == [97, 98, 99]


def test_bytes_tokens_hold_the_documents(tmp_path):
    docs = random_docs(np.random.default_rng(), 20)
    write_docs(tmp_path / "c", docs)
    tokens = load_tokens(str(tmp_path / "c"), ByteTokenizer(), 256, tmp_path / "cache")
    train_docs, val_docs = split_documents(docs)
    assert ByteTokenizer().decode(tokens.train[0]) == "".join(train_docs)
    assert ByteTokenizer().decode(tokens.val[0]) == "".join(val_docs)


def test_cache_is_reused_until_the_corpus_changes(tmp_path, monkeypatch):
    write_docs(tmp_path / "c", random_docs(np.random.default_rng(), 20))
    first = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    assert first.tokenizer.vocab_size <= 300
    assert not list((tmp_path / "cache").rglob("*.tmp"))

    def fail(*args):
        raise AssertionError("the cache should have been used")
    monkeypatch.setattr(BPETokenizer, "train", fail)
    monkeypatch.setattr(data, "encode_documents", fail)
    again = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    assert again.tokenizer.fingerprint == first.tokenizer.fingerprint
    np.testing.assert_array_equal(again.train[0], first.train[0])
    np.testing.assert_array_equal(again.val[0], first.val[0])

    (tmp_path / "c" / "doc000.txt").write_text("a changed document\n")
    with pytest.raises(AssertionError, match="cache should have been used"):
        load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")


def test_cache_is_keyed_on_the_tokenizer(tmp_path):
    write_docs(tmp_path / "c", random_docs(np.random.default_rng(), 20))
    as_bytes = load_tokens(str(tmp_path / "c"), ByteTokenizer(), 256, tmp_path / "cache")
    as_bpe = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    assert len(as_bpe.train[0]) < len(as_bytes.train[0])
    assert len(list((tmp_path / "cache" / "tokens").iterdir())) == 2


def file_with(content):
    def make(directory):
        (directory / "f.txt").write_bytes(content)
        return directory / "f.txt"
    return make


@pytest.mark.parametrize("make, message", [
    (lambda d: d / "missing", "does not exist"),
    (lambda d: d, "holds no files"),
    (lambda d: write_docs(d / "c", ["", ""]), "is empty"),
    (file_with(b""), "is empty"),
    (file_with(b"text\n\xff\xd8\xff\xe0 jpeg"), "not UTF-8"),
])
def test_bad_corpus(tmp_path, make, message):
    (tmp_path / "in").mkdir()
    path = make(tmp_path / "in")
    with pytest.raises(UserError, match=message):
        load_tokens(str(path), ByteTokenizer(), 256, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.bin"))


def test_unwritable_cache(tmp_path):
    write_docs(tmp_path / "c", ["some text\n"] * 3)
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(UserError, match="cannot write the cache"):
        load_tokens(str(tmp_path / "c"), ByteTokenizer(), 256, tmp_path / "file" / "cache")


# ----------------------------------------------------------------------------------
# batches

@CPU
@given(lengths=st.lists(st.integers(0, 200), min_size=1, max_size=4), B=st.integers(1, 6),
       T=st.integers(1, 16), seed=st.integers(0, 2**32))
def test_batches_are_windows_of_the_data(lengths, B, T, seed):
    rng = np.random.default_rng(seed)
    shards = [rng.integers(0, 1000, n).astype(np.uint16) for n in lengths]
    if all(n <= T for n in lengths):
        with pytest.raises(UserError, match="fewer than one context"):
            BatchLoader(shards, B, T, 1000, seed)
        return
    loader = BatchLoader(shards, B, T, 1000, seed)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (B, T) and x.dtype == y.dtype == np.int32
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])
    for row_x, row_y in zip(x, y):
        window = np.append(row_x, row_y[-1])
        assert any(any(np.array_equal(s[o:o + T + 1], window) for o in range(len(s) - T))
                   for s in shards)


def test_loader_state_resumes_the_same_batches():
    rng = np.random.default_rng()
    shards = [rng.integers(0, 1000, n).astype(np.uint16) for n in (500, 80)]
    loader = BatchLoader(shards, 4, 8, 1000, seed=7)
    loader.next_batch()
    state = loader.state_dict()
    expected = [loader.next_batch() for _ in range(3)]
    resumed = BatchLoader(shards, 4, 8, 1000, seed=123)
    resumed.load_state_dict(state)
    for (x, y), (x2, y2) in zip(expected, [resumed.next_batch() for _ in range(3)]):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)


def test_fixed_batches_are_fixed_and_spread():
    tokens = np.arange(1000, dtype=np.uint16)
    loader = BatchLoader([tokens], 2, 10, 1000, seed=0)
    first = loader.fixed_batches(3)
    loader.next_batch()
    again = loader.fixed_batches(3)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, again))
    starts = [int(x[r, 0]) for x, _ in first for r in range(2)]
    assert starts[0] == 0 and starts[-1] == 1000 - 11       # the first and last window


@CPU
@given(lengths=st.lists(st.integers(0, 120), min_size=1, max_size=4), B=st.integers(1, 5),
       T=st.integers(1, 12), seed=st.integers(0, 2**32))
def test_whole_split_scores_every_token_once(lengths, B, T, seed):
    """Each shard's tokens 1 .. n*T are the targets, in order, once each (n = (len - 1) // T,
    the windows that fit); the inputs are the targets shifted back by one."""
    rng = np.random.default_rng(seed)
    shards = [rng.integers(0, 1000, n).astype(np.uint16) for n in lengths]
    if all(n <= T for n in lengths):
        return      # the loader refuses the split (test_batches_are_windows_of_the_data)
    batches = BatchLoader(shards, B, T, 1000, seed).whole_split()
    assert all(len(x) == B for x, _ in batches[:-1]) and 0 < len(batches[-1][0]) <= B
    targets = np.concatenate([y for _, y in batches]).ravel()
    inputs = np.concatenate([x for x, _ in batches]).ravel()
    expected = [s[1:1 + (len(s) - 1) // T * T] for s in shards if len(s) > T]
    np.testing.assert_array_equal(targets, np.concatenate(expected))
    np.testing.assert_array_equal(inputs, np.concatenate(
        [s[:(len(s) - 1) // T * T] for s in shards if len(s) > T]))


def test_whole_split_mean_loss_is_the_mean_over_its_tokens():
    """mean_loss over whole_split's batches (the last one short) through the model's
    evaluate, against the mean of every window's per-token losses computed directly from
    the reference's logits in float64."""
    from microgpt import GPT, get_config
    from microgpt import reference as ref

    rng = np.random.default_rng()
    cfg = get_config("microgpt", vocab_size=50)
    shards = [rng.integers(0, 50, n).astype(np.uint16) for n in (200, 90)]
    batches = BatchLoader(shards, 4, 16, 50, seed=0).whole_split()
    assert len(batches[-1][0]) < 4          # 12 + 5 windows: a short last batch
    model = GPT(cfg, backend="numpy", seed=int(rng.integers(1000)))
    got = data.mean_loss(batches, model.evaluate)
    model64 = GPT(cfg, backend="numpy", dtype=np.float64)
    model64.load_state_dict(model.state_dict())
    losses = [ref.crossentropy_forward(model64.forward(x).reshape(-1, 50), y.ravel())[0]
              for x, y in batches]
    direct = np.concatenate(losses).mean()
    assert abs(got - direct) <= 1e-5 * direct


def test_token_beyond_the_vocabulary():
    loader = BatchLoader([np.full(100, 600, np.uint16)], 2, 8, 512, seed=0)
    with pytest.raises(UserError, match="token id 600.*--vocab-size 601"):
        loader.next_batch()


def test_unigram_entropy():
    k = 37
    tokens = np.tile(np.arange(k, dtype=np.uint16), 50)
    assert unigram_entropy([tokens[:500], tokens[500:]], 64) == pytest.approx(np.log(k))
    assert unigram_entropy([np.full(10, 3, np.uint16)], 8) == 0.0


def test_read_shard_maps_instead_of_reading(tmp_path):
    write_shard(tmp_path / "big.bin", np.arange(50000) % 65536)
    tokens = read_shard(tmp_path / "big.bin")
    assert isinstance(tokens, np.memmap) and tokens.offset == HEADER_BYTES
    assert os.path.getsize(tmp_path / "big.bin") == HEADER_BYTES + 2 * 50000


@pytest.mark.parametrize("damage", [
    lambda entry: (entry / "train.bin").write_bytes(b"\0" * 100),             # truncated
    lambda entry: (entry / "val.bin").unlink(),                                # half removed
    lambda entry: (entry / "train.bin").write_bytes(shard_bytes([1, 2, 60000])),  # not BPE ids
])
def test_a_damaged_token_cache_is_rebuilt(tmp_path, capsys, damage):
    write_docs(tmp_path / "c", random_docs(np.random.default_rng(), 20))
    first = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    expected = np.array(first.train[0]), np.array(first.val[0])    # off the memory map
    (entry,) = (tmp_path / "cache" / "tokens").iterdir()
    damage(entry)
    again = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    np.testing.assert_array_equal(again.train[0], expected[0])
    np.testing.assert_array_equal(again.val[0], expected[1])
    assert f"the cache entry {entry} is damaged; building it again" in capsys.readouterr().out


def test_a_damaged_cached_tokenizer_is_rebuilt(tmp_path, capsys):
    write_docs(tmp_path / "c", random_docs(np.random.default_rng(), 20))
    first = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    (entry,) = (tmp_path / "cache" / "tokenizers").iterdir()
    (entry / "tokenizer.json").write_text('{"truncated": ')
    again = load_tokens(str(tmp_path / "c"), None, 300, tmp_path / "cache")
    assert again.tokenizer.fingerprint == first.tokenizer.fingerprint
    assert "is damaged; building it again" in capsys.readouterr().out


def test_tokens_signature_follows_the_tokens():
    rng = np.random.default_rng()
    train = [rng.integers(0, 500, 3000).astype(np.uint16)]
    val = [rng.integers(0, 500, 300).astype(np.uint16)]
    signature = tokens_signature(TokenData(train, val, None, ""))
    assert tokens_signature(TokenData([train[0].copy()], [val[0].copy()], None, "")) == signature
    changed = train[0].copy()
    changed[1234] += 1
    assert tokens_signature(TokenData([changed], val, None, "")) != signature
    assert tokens_signature(TokenData(val, train, None, "")) != signature    # the split counts
    assert tokens_signature(TokenData(train, [val[0][:-1]], None, "")) != signature


def test_unreadable_and_special_files(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UserError, match="is a FIFO; pass a UTF-8 text file"):
        load_tokens(str(tmp_path / "fifo"), ByteTokenizer(), 256, tmp_path / "cache")
    if os.geteuid() == 0:
        return        # root reads any file
    write_docs(tmp_path / "c", ["some text\n"] * 3)
    (tmp_path / "c" / "doc001.txt").chmod(0)
    with pytest.raises(UserError, match="cannot read .*doc001.txt .Permission denied"):
        load_tokens(str(tmp_path / "c"), ByteTokenizer(), 256, tmp_path / "cache")
    write_shard(tmp_path / "shard.bin", np.arange(100))
    (tmp_path / "shard.bin").chmod(0)
    with pytest.raises(UserError, match="cannot read the token shard .*Permission denied"):
        read_shard(tmp_path / "shard.bin")
