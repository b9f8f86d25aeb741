"""microgpt: a from-scratch GPT training engine on NumPy and numba.cuda.

The names below load on first use, so that importing a submodule (microgpt.kernels.gemm,
say) loads that submodule alone and not the model.
"""
import importlib

__all__ = ["GPT", "GPTConfig", "ConfigError", "get_config"]
__version__ = "0.1.0"
_HOMES = {"GPT": "microgpt.model", "GPTConfig": "microgpt.config",
          "ConfigError": "microgpt.config", "get_config": "microgpt.config"}


def __getattr__(name):
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'microgpt' has no attribute {name!r}")
