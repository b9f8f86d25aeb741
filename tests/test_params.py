"""The parameter init (microgpt/params.py): threaded, chunked, and the same values for a seed.

The chunk is made small here so that chunks begin and end inside the parameters, and a
parameter takes values from several streams: what the default chunk (4M elements) does in
the large configs."""
import math

import numpy as np
import pytest

from microgpt.config import GPTConfig
from microgpt.params import ParamLayout, init_params

CFG = GPTConfig(n_layer=3, d_model=48, n_head=4, context=32, vocab_size=300)
CHUNK = 1000


def test_the_values_do_not_depend_on_the_threads():
    layout = ParamLayout(CFG)
    one = init_params(CFG, layout, 5, threads=1, chunk=CHUNK)
    assert layout.n_decay > 20 * CHUNK
    for threads in (2, 7):
        np.testing.assert_array_equal(init_params(CFG, layout, 5, threads=threads, chunk=CHUNK),
                                      one)


def test_each_chunk_is_a_stream_of_its_own_and_each_seed_too():
    layout = ParamLayout(CFG)
    flat = init_params(CFG, layout, 5, chunk=CHUNK)
    wte = flat[:CFG.vocab_size * CFG.d_model]           # one std: chunks compare as drawn
    chunks = wte[:len(wte) // CHUNK * CHUNK].reshape(-1, CHUNK)
    assert len(chunks) > 3
    assert len({c.tobytes() for c in chunks}) == len(chunks)
    assert not np.isin(chunks[1], chunks[0]).any()
    other = init_params(CFG, layout, 6, chunk=CHUNK)
    assert not np.isin(other[:CHUNK], flat[:CHUNK]).any()


def test_every_matrix_is_gpt2s_normal_across_chunk_boundaries():
    layout = ParamLayout(CFG)
    views = layout.views(init_params(CFG, layout, 5, chunk=CHUNK))
    for s in layout.specs:
        value = views[s.name]
        if s.group == "norm":
            np.testing.assert_array_equal(value, 1.0 if s.name.endswith("weight") else 0.0)
            continue
        std = 0.02 / (math.sqrt(2 * CFG.n_layer) if s.name.endswith(("attn.w_o", "mlp.w_proj"))
                      else 1)
        assert value.dtype == np.float32
        assert value.std() == pytest.approx(std, rel=0.06), s.name
        assert abs(value.mean()) < 0.1 * std, s.name
        # normal, not uniform: the share within one std
        assert np.mean(np.abs(value) < std) == pytest.approx(0.683, abs=0.03), s.name
