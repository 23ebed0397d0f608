"""Hardware intrinsics the compiler maps loop nests onto, declared from the config.

The GEMM intrinsic is the reference computation of one micro-op,
``acc[b, o] += Σₖ inp[b, k] · wgt[o, k]`` over a ``batch × block_out ×
block_in`` nest, with operand types from :class:`~tilewright.config.HwConfig`.
:func:`~tilewright.compiler.passes.tensorize` checks that a marked loop nest
computes exactly this before replacing it; nothing is trusted.
"""

from dataclasses import dataclass

from tilewright.config import load_config

__all__ = ["GemmIntrinsic", "gemm_intrinsic"]


def _dtype(bits):
    return f"int{bits}"


@dataclass(frozen=True)
class GemmIntrinsic:
    """Shape and types of the GEMM micro-op of one config."""
    batch: int
    block_in: int
    block_out: int
    inp_dtype: str
    wgt_dtype: str
    acc_dtype: str
    name: str = "gemm"

    @property
    def loop_extents(self):
        """Extents of the (batch, out, in) loops the intrinsic replaces."""
        return self.batch, self.block_out, self.block_in



def gemm_intrinsic(config="default"):
    """The :class:`GemmIntrinsic` of ``config`` (a preset, TOML path or HwConfig)."""
    c = load_config(config)
    return GemmIntrinsic(c.batch, c.block_in, c.block_out, _dtype(c.inp_width), _dtype(c.wgt_width),
                         _dtype(c.acc_width))
