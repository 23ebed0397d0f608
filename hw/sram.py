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
    c = cfg
    if mem == "uop":
        return isa.uop_layout(c)
    lanes, width = {"inp": (c.batch * c.block_in, c.inp_width),
                    "wgt": (c.block_out * c.block_in, c.wgt_width),
                    "acc": (c.batch * c.block_out, c.acc_width),
                    "out": (c.batch * c.block_out, c.out_width)}[mem]
    return data.ArrayLayout(signed(width), lanes)

