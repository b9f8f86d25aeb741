"""Model configurations: the ANDREA family, the tiny `microgpt` demo config and
`microgpt-cpu`, the trainer's default."""
from dataclasses import MISSING, dataclass, fields


class ConfigError(ValueError):
    """A config that cannot describe a GPT; the message names the field."""


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    d_model: int
    n_head: int
    context: int      # the longest sequence; wpe has this many rows
    vocab_size: int   # wte's rows, the logits' columns
    # GPT-2's biases in every linear layer (c_attn, c_proj, c_fc); the LM head has none
    bias: bool = False
    # the tokens in use, the first n_tokens of vocab_size (GPT-2's 50,257 in a table padded
    # to 50,304, the kernels' multiple): the padding never wins a sample and takes no part
    # in the loss, and its rows of wte stay zero; None: all vocab_size
    n_tokens: int | None = None

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "bias":
                if not isinstance(value, bool):
                    raise ConfigError(f"config field bias must be true or false, got {value!r}")
            elif value is None and f.name == "n_tokens":
                continue
            elif isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"config field {f.name} must be a positive integer, "
                                  f"got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(f"config field d_model ({self.d_model}) must be divisible by "
                              f"n_head ({self.n_head})")
        if self.n_tokens is not None and self.n_tokens > self.vocab_size:
            raise ConfigError(f"config field n_tokens ({self.n_tokens}) must be at most "
                              f"vocab_size ({self.vocab_size})")

    @property
    def head_dim(self):
        return self.d_model // self.n_head

    @property
    def tokens(self):
        """The tokens in use: n_tokens, or every row of the vocabulary."""
        return self.vocab_size if self.n_tokens is None else self.n_tokens


# vocab_size None means "from the tokenizer": get_config needs it as an override.
CONFIGS = {
    "microgpt":    dict(n_layer=1,  d_model=16,  n_head=4,  context=16,   vocab_size=None),
    # the trainer's run with no arguments (docs/training.md measured it on two CPU cores)
    "microgpt-cpu": dict(n_layer=1, d_model=128, n_head=4,  context=128,  vocab_size=None),
    "andrea-12m":  dict(n_layer=6,  d_model=384, n_head=12, context=256,  vocab_size=4096),
    "andrea-120m": dict(n_layer=12, d_model=768, n_head=12, context=1024, vocab_size=50304),
}
DEFAULT_CONFIG = "microgpt-cpu"


def get_config(name, **overrides):
    """The named config with any field overridden, e.g. get_config("microgpt", vocab_size=256)."""
    if name not in CONFIGS:
        raise ConfigError(f"unknown config {name!r}; choose one of {', '.join(CONFIGS)}")
    unknown = set(overrides) - {f.name for f in fields(GPTConfig)}
    if unknown:
        raise ConfigError(f"unknown config field(s) {', '.join(sorted(unknown))}")
    values = {**CONFIGS[name], **{k: v for k, v in overrides.items() if v is not None}}
    if values["vocab_size"] is None:
        raise ConfigError(f"config {name!r} takes vocab_size from the tokenizer: pass vocab_size=")
    return GPTConfig(**values)


def config_from_dict(d):
    """The inverse of dataclasses.asdict, for config.json in a checkpoint (one written
    before a field with a default existed lacks it)."""
    required = {f.name for f in fields(GPTConfig) if f.default is MISSING}
    missing = required - set(d)
    if missing:
        raise ConfigError(f"config is missing field(s) {', '.join(sorted(missing))}")
    return GPTConfig(**{f.name: d[f.name] for f in fields(GPTConfig) if f.name in d})

