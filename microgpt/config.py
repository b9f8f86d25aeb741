"""Model configurations: the ANDREA family and the tiny `microgpt` demo config."""
from dataclasses import dataclass, fields


class ConfigError(ValueError):
    """A config that cannot describe a GPT; the message names the field."""


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    d_model: int
    n_head: int
    context: int      # the longest sequence; wpe has this many rows
    vocab_size: int

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"config field {f.name} must be a positive integer, "
                                  f"got {value!r}")
        if self.d_model % self.n_head:
            raise ConfigError(f"config field d_model ({self.d_model}) must be divisible by "
                              f"n_head ({self.n_head})")

    @property
    def head_dim(self):
        return self.d_model // self.n_head


# vocab_size None means "from the tokenizer": get_config needs it as an override.
CONFIGS = {
    "microgpt":    dict(n_layer=1,  d_model=16,  n_head=4,  context=16,   vocab_size=None),
    "andrea-12m":  dict(n_layer=6,  d_model=384, n_head=12, context=256,  vocab_size=4096),
    "andrea-120m": dict(n_layer=12, d_model=768, n_head=12, context=1024, vocab_size=50304),
}


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
    """The inverse of dataclasses.asdict, for config.json in a checkpoint."""
    known = {f.name for f in fields(GPTConfig)}
    missing = known - set(d)
    if missing:
        raise ConfigError(f"config is missing field(s) {', '.join(sorted(missing))}")
    return GPTConfig(**{k: d[k] for k in known})

