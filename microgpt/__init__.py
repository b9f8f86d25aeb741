"""microgpt: a from-scratch GPT training engine on NumPy and numba.cuda."""
from microgpt.config import ConfigError, GPTConfig, get_config
from microgpt.model import GPT

__all__ = ["GPT", "GPTConfig", "ConfigError", "get_config"]
__version__ = "0.1.0"
