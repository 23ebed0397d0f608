"""The compiler passes, in pipeline order (see :mod:`tilewright.compiler.build`)."""

from .alu import fold_loops, fuse_requant, lower_alu
from .codegen import codegen
from .dma import inject_dma
from .overwrite import fuse_reset
from .storage import plan_storage
from .tensorize import tensorize
from .vthread import inject_virtual_threads

__all__ = ["plan_storage", "inject_dma", "tensorize", "lower_alu", "fuse_requant", "fold_loops", "fuse_reset",
           "inject_virtual_threads",
           "codegen"]
