"""Shapes of the accelerator's SRAMs, derived from the config."""

from amaranth import signed
from amaranth.lib import data

from tilewright import isa

__all__ = ["sram_shape"]


def sram_shape(cfg, mem):
    """Entry shape of SRAM ``mem``: lanes of signed integers (``uop``: the micro-op layout).

    Lanes are ordered as in DRAM: inp ``b·block_in + k``, wgt ``o·block_in + k``,
    acc and out ``b·block_out + o``.
    """
    if mem == "uop":
        return isa.uop_layout(cfg)
    lanes, width = cfg.lanes(mem)
    return data.ArrayLayout(signed(width), lanes)

