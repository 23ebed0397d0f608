"""Tilewright: an open hardware/software co-design kit for deep-learning accelerators."""

from .config import PRESETS, ConfigError, HwConfig, load_config

__version__ = "0.1.0"
__all__ = ["HwConfig", "PRESETS", "ConfigError", "load_config", "conv2d", "dense", "__version__"]


def __getattr__(name):
    # The operators pull in the compiler and runtime; import them on first use.
    if name in ("conv2d", "dense"):
        from .runtime import api
        return getattr(api, name)
    raise AttributeError(f"module 'tilewright' has no attribute {name!r}")
