"""Shapes of the accelerator's SRAMs, derived from the config."""

from amaranth import signed
from amaranth.lib import data

from tilewright import isa

__all__ = ["sram_shape", "load_slices", "load_granularity"]


def sram_shape(cfg, mem):
    """Entry shape of SRAM ``mem``: lanes of signed integers (``uop``: the micro-op layout).

    Lanes are ordered as in DRAM: inp ``b·block_in + k``, wgt ``o·block_in + k``,
    acc and out ``b·block_out + o``.
    """
    if mem == "uop":
        return isa.uop_layout(cfg)
    lanes, width = cfg.lanes(mem)
    return data.ArrayLayout(signed(width), lanes)



def load_slices(cfg, mem):
    """How many beats a LOAD writes one entry of SRAM ``mem`` in: one per bus-wide slice of its widest DRAM
    element (ACC's 32-bit form for the accumulators), 1 when an element fits a beat. Micro-op entries are
    always written whole."""
    if mem == "uop":
        return 1
    return max(1, cfg.elem_bytes(mem) // cfg.bus_bytes)


def load_granularity(cfg, mem):
    """The granularity, in lanes, of the write port LOADs fill SRAM ``mem`` through (None: whole entries)."""
    slices = load_slices(cfg, mem)
    return None if slices == 1 else cfg.lanes(mem)[0] // slices
