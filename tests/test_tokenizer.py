"""Tokenizers: decode(encode(s)) == s for any Unicode string, files, checkpoint references."""
import json

import pytest
from hypothesis import given, settings, strategies as st

from microgpt.errors import UserError
from microgpt.tokenizer import (EOT, MIN_BPE_VOCAB, BPETokenizer, ByteTokenizer, TokenIds,
                                tokenizer_from_reference)

# Encoding is microseconds: many examples cost nothing.
ROUND_TRIP = settings(settings.get_profile("cpu"), max_examples=300)

CORPUS = [
    "def add(a, b):\n    return a + b\n",
    "class Point:\n    def __init__(self, x, y):\n        self.x, self.y = x, y\n",
    "Grüße aus Köln, 日本語のテキスト, emoji 🐍🚀 and tabs\tand\r\nCRLF.\n",
    "for i in range(10):\n    print(i, i * i)  # squares\n",
] * 20


@pytest.fixture(scope="module")
def bpe():
    return BPETokenizer.train(CORPUS, 400)


@ROUND_TRIP
@given(st.text())
def test_bytes_round_trip(text):
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode(text)
    assert all(0 <= i < 256 for i in ids)
    assert tokenizer.decode(ids) == text


@ROUND_TRIP
@given(text=st.text())
def test_bpe_round_trip(bpe, text):
    ids = bpe.encode(text)
    assert all(0 <= i < bpe.vocab_size for i in ids)
    assert bpe.decode(ids) == text


@ROUND_TRIP
@given(texts=st.lists(st.text(), max_size=4))
def test_bpe_batch_encoding_matches_single(bpe, texts):
    assert bpe.encode_batch(texts) == [bpe.encode(t) for t in texts]


def test_bpe_learns_merges_up_to_the_vocab_size(bpe):
    assert MIN_BPE_VOCAB < bpe.vocab_size <= 400
    text = "def add(a, b):\n    return a + b\n"
    assert len(bpe.encode(text)) < len(text.encode()) / 2


def test_end_of_text_is_one_token_and_survives_decoding(bpe):
    ids = bpe.encode(f"a{EOT}b")
    assert bpe.eot_id in ids
    assert bpe.start_ids == (bpe.eot_id,)
    assert bpe.decode(ids) == f"a{EOT}b"


def test_decoding_invalid_utf8_replaces_instead_of_failing():
    assert ByteTokenizer().decode([0x61, 0xFF, 0x62]) == "a\ufffdb"


def test_saved_bpe_encodes_the_same(bpe, tmp_path):
    bpe.save(tmp_path / "tokenizer.json")
    loaded = BPETokenizer.from_file(tmp_path / "tokenizer.json")
    assert loaded.fingerprint == bpe.fingerprint
    assert loaded.encode(CORPUS[2]) == bpe.encode(CORPUS[2])


def test_reference_finds_the_same_tokenizer(bpe, tmp_path):
    bpe.save(tmp_path / "tokenizer.json")
    assert tokenizer_from_reference(bpe.reference(), tmp_path).fingerprint == bpe.fingerprint
    assert isinstance(tokenizer_from_reference(ByteTokenizer().reference(), tmp_path),
                      ByteTokenizer)
    assert tokenizer_from_reference(TokenIds(50257).reference(), tmp_path).vocab_size == 50257


def test_reference_refuses_a_changed_tokenizer(bpe, tmp_path):
    other = BPETokenizer.train(CORPUS[:4], 300)
    other.save(tmp_path / "tokenizer.json")
    with pytest.raises(UserError, match="hash differs"):
        tokenizer_from_reference(bpe.reference(), tmp_path)


def test_reference_refuses_a_missing_tokenizer(bpe, tmp_path):
    with pytest.raises(UserError, match="lacks its tokenizer"):
        tokenizer_from_reference(bpe.reference(), tmp_path)


@pytest.mark.parametrize("vocab_size", [0, 256, 65537])
def test_bpe_vocab_size_out_of_range(vocab_size):
    with pytest.raises(UserError, match="vocabulary must hold"):
        BPETokenizer.train(CORPUS, vocab_size)


def test_not_a_tokenizer_file(tmp_path):
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(UserError, match="not a tokenizers JSON file"):
        BPETokenizer.from_file(path)


def test_token_ids_parse_and_print():
    ids = TokenIds(100)
    assert ids.encode(" 1 22\n3 ") == [1, 22, 3]
    assert ids.decode([1, 22, 3]) == "1 22 3"
    with pytest.raises(UserError, match="token ids"):
        ids.encode("hello")
    with pytest.raises(UserError, match=r"\[0, 100\)"):
        ids.encode("100")


@pytest.mark.parametrize("reference, message", [
    ({"kind": "bpe"}, "tokenizer file None"),
    ({"kind": "bpe", "file": "tokenizer.json"}, "hash None"),
    ({"kind": "bpe", "file": "../tokenizer.json", "sha256": "0"}, "'../tokenizer.json'"),
    ({"kind": "bpe", "file": "/etc/passwd", "sha256": "0"}, "'/etc/passwd'"),
    ({"kind": "ids"}, "token-id vocabulary None"),
    ({"kind": "ids", "vocab_size": "many"}, "token-id vocabulary 'many'"),
])
def test_a_tampered_reference_is_one_line(tmp_path, reference, message):
    with pytest.raises(UserError, match="state.json is damaged") as info:
        tokenizer_from_reference(reference, tmp_path)
    assert message in str(info.value)
