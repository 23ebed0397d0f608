"""Tilewright: an open hardware/software co-design kit for deep-learning accelerators."""

from .config import PRESETS, ConfigError, HwConfig, load_config

__version__ = "0.1.0"
__all__ = ["HwConfig", "PRESETS", "ConfigError", "load_config", "__version__"]
