"""The configs of docs/design.md's table, overrides, and errors that name the offending field."""
import dataclasses

import pytest

from microgpt.config import CONFIGS, ConfigError, GPTConfig, config_from_dict, get_config

# docs/design.md's table: n_layer, d_model, n_head, head_dim, context, vocab
DESIGN_TABLE = {
    "microgpt":    (1, 16, 4, 4, 16, None),
    "andrea-12m":  (6, 384, 12, 32, 256, 4096),
    "andrea-120m": (12, 768, 12, 64, 1024, 50304),
    "microgpt-cpu": (1, 128, 4, 32, 128, None),     # the trainer's run with no arguments
}
SIZE_FIELDS = ["n_layer", "d_model", "n_head", "context", "vocab_size", "n_tokens"]


@pytest.mark.parametrize("name", DESIGN_TABLE)
def test_configs_match_the_design_table(name):
    n_layer, d_model, n_head, head_dim, context, vocab = DESIGN_TABLE[name]
    cfg = get_config(name, vocab_size=256) if vocab is None else get_config(name)
    assert (cfg.n_layer, cfg.d_model, cfg.n_head, cfg.head_dim, cfg.context) == \
        (n_layer, d_model, n_head, head_dim, context)
    assert cfg.vocab_size == (256 if vocab is None else vocab)


def test_there_are_exactly_the_four_configs():
    assert set(CONFIGS) == set(DESIGN_TABLE)


def test_overrides_replace_only_the_named_fields():
    base = get_config("andrea-12m")
    cfg = get_config("andrea-12m", n_layer=2, context=64)
    assert (cfg.n_layer, cfg.context) == (2, 64)
    assert (cfg.d_model, cfg.n_head, cfg.vocab_size) == (base.d_model, base.n_head, base.vocab_size)


def test_a_none_override_keeps_the_default():
    """Command-line options left unset arrive as None and must not erase the config's value."""
    assert get_config("andrea-12m", vocab_size=None).vocab_size == 4096


def test_configs_are_frozen():
    cfg = get_config("andrea-12m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.n_layer = 3


def test_d_model_not_divisible_by_n_head_names_both_fields():
    with pytest.raises(ConfigError, match=r"d_model \(100\).*n_head \(12\)"):
        get_config("andrea-12m", d_model=100)


@pytest.mark.parametrize("field", SIZE_FIELDS)
@pytest.mark.parametrize("bad", [0, -3, 2.0, True, "8"])
def test_non_positive_or_non_integer_sizes_name_the_field(field, bad):
    with pytest.raises(ConfigError, match=rf"config field {field} must be a positive integer"):
        get_config("andrea-12m", **{field: bad})


def test_unknown_config_name_lists_the_choices():
    with pytest.raises(ConfigError, match=r"unknown config 'gpt-5'.*andrea-120m"):
        get_config("gpt-5")


def test_unknown_field_is_named():
    with pytest.raises(ConfigError, match="unknown config field.*n_layers"):
        get_config("andrea-12m", n_layers=4)


def test_microgpt_needs_a_vocab_size():
    with pytest.raises(ConfigError, match="vocab_size"):
        get_config("microgpt")


def test_config_dict_round_trip_and_missing_field():
    cfg = get_config("microgpt", vocab_size=300)
    assert config_from_dict(dataclasses.asdict(cfg)) == cfg
    partial = dataclasses.asdict(cfg)
    del partial["context"]
    with pytest.raises(ConfigError, match="missing field.*context"):
        config_from_dict(partial)


def test_a_config_without_the_later_fields_reads_as_bias_free_and_unpadded():
    """config.json of a checkpoint written before bias and n_tokens existed."""
    cfg = get_config("microgpt", vocab_size=300)
    old = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in ("bias", "n_tokens")}
    assert config_from_dict(old) == cfg and not cfg.bias and cfg.tokens == 300


@pytest.mark.parametrize("fields, message", [
    (dict(bias=1), "bias must be true or false"),
    (dict(n_tokens=301), r"n_tokens \(301\) must be at most vocab_size \(300\)"),
])
def test_bad_bias_and_n_tokens(fields, message):
    with pytest.raises(ConfigError, match=message):
        get_config("microgpt", vocab_size=300, **fields)
