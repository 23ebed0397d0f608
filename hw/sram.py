"""Shapes of the accelerator's SRAMs, derived from the config."""

import math

from amaranth import Cat, signed
from amaranth.lib import data

from tilewright import isa

__all__ = ["sram_shape", "sram_rows", "sram_addr_bits", "rows_per_entry", "wgt_rows_by_lane", "acc_rows_by_lane",
           "load_slices", "load_granularity", "alu_granularity", "acc_granularity", "acc_loads_by_lane", "widened", "never_reads_while_written",
           "NO_RW_CHECK"]

#: The memory attribute :func:`never_reads_while_written` sets (Yosys's name for the same promise).
NO_RW_CHECK = "no_rw_check"


def wgt_rows_by_lane(cfg):
    """Whether the weights' SRAM holds an output lane's weights a row, ``block_out`` rows an entry (row
    ``entry·block_out + o``): with the serial core, which reads a lane's weights a cycle, where a bus
    beat is one such row, so that a LOAD writes a beat a row. The core then needs no multiplexer to
    pick a lane's weights from the entry, and the rows are as narrow as a beat (in fewer block RAMs:
    a block RAM is at most 16 bits wide on the iCE40, however shallow)."""
    return cfg.serial_core and cfg.block_out > 1 and cfg.dram_bus_width == cfg.block_in * cfg.wgt_width


def acc_rows_by_lane(cfg):
    """Whether the accumulators' SRAM holds one lane a row, an entry's lanes in consecutive rows (row
    ``entry·lanes + lane``): where LOADs write them a lane at a time anyway (:func:`acc_loads_by_lane`)
    and no STORE reads whole entries (no ``requant_store``). The serial core then reads and writes the
    lane it works on by its address, with no multiplexer to pick it from an entry or enables to pick
    it in one (the block RAMs are as many: a 32-bit row is two of them at any depth up to 256)."""
    return acc_loads_by_lane(cfg) and not cfg.requant_store and cfg.lanes("acc")[0] > 1


def rows_per_entry(cfg, mem):
    """Rows of SRAM ``mem`` an entry takes: ``block_out`` for the weights with :func:`wgt_rows_by_lane`, the
    entry's lanes for the accumulators with :func:`acc_rows_by_lane`, else 1."""
    if mem == "wgt" and wgt_rows_by_lane(cfg):
        return cfg.block_out
    if mem == "acc" and acc_rows_by_lane(cfg):
        return cfg.lanes("acc")[0]
    return 1


def sram_shape(cfg, mem):
    """Row shape of SRAM ``mem``: lanes of signed integers (``uop``: the micro-op layout).

    Lanes are ordered as in DRAM: inp ``b·block_in + k``, wgt ``o·block_in + k``,
    acc and out ``b·block_out + o``. A row is an entry, or with :func:`wgt_rows_by_lane` a weight
    entry's ``block_in`` lanes of one ``o``, or with :func:`acc_rows_by_lane` one accumulator lane.
    """
    if mem == "uop":
        return isa.uop_layout(cfg)
    lanes, width = cfg.lanes(mem)
    return data.ArrayLayout(signed(width), lanes // rows_per_entry(cfg, mem))


def sram_rows(cfg, mem):
    """Rows of SRAM ``mem``: its entries, or several rows an entry (:func:`wgt_rows_by_lane`,
    :func:`acc_rows_by_lane`)."""
    return cfg.depth(mem) * rows_per_entry(cfg, mem)


def sram_addr_bits(cfg, mem):
    """Bits of a row address of SRAM ``mem``: an entry's index, or with several rows an entry the entry's
    index above the bits of its row (``o`` with :func:`wgt_rows_by_lane`, the lane with
    :func:`acc_rows_by_lane`)."""
    return cfg.index_bits(mem) + (rows_per_entry(cfg, mem) - 1).bit_length()



def load_slices(cfg, mem):
    """How many beats a LOAD writes one entry of SRAM ``mem`` in: one per bus-wide slice of its widest DRAM
    element (ACC's 32-bit form for the accumulators), 1 when an element fits a beat. Micro-op entries are
    always written whole."""
    if mem == "uop":
        return 1
    return max(1, cfg.elem_bytes(mem) // cfg.bus_bytes)


def load_granularity(cfg, mem):
    """The granularity, in lanes, of the write port LOADs fill SRAM ``mem`` through (None: whole rows)."""
    if rows_per_entry(cfg, mem) > 1:
        return None             # (a beat a row)
    slices = load_slices(cfg, mem)
    return None if slices == 1 else cfg.lanes(mem)[0] // slices


def alu_granularity(cfg):
    """The granularity, in lanes, of the ALU's writes into ACC and OUT entries: ``vector_width`` when it
    takes several passes over an entry (writing each slice as it is computed), else None (whole entries)."""
    return cfg.vector_width if cfg.vector_passes > 1 else None


def acc_granularity(cfg):
    """The granularity, in lanes, of the accumulator SRAM's write port: fine enough for a LOAD's slices and
    the ALU's (None: whole entries)."""
    if acc_rows_by_lane(cfg):
        return None             # (a lane a row)
    lanes = cfg.lanes("acc")[0]
    granularity = math.gcd(load_granularity(cfg, "acc") or lanes, alu_granularity(cfg) or lanes)
    return None if granularity == lanes else granularity


def acc_loads_by_lane(cfg):
    """Whether LOADs write the accumulators a lane at a time, the lane's value on every lane of the write
    data: with the serial core (which writes its results so) when a bus beat is one accumulator lane and
    holds a whole ACC8 element. An ACC beat is then one lane already; an ACC8 element's bytes go each into
    its lane from their beat, a cycle apart. The accumulators' write data is then one lane wide, the
    LOAD's or the core's, not a whole entry's."""
    return (cfg.serial_core and cfg.dram_bus_width == cfg.acc_width
            and cfg.elem_bytes("acc8") <= cfg.bus_bytes)


def widened(en, factor):
    """A write-enable mask at a ``factor`` times finer granularity: each bit repeated ``factor`` times."""
    return Cat(bit.replicate(factor) for bit in en)


def never_reads_while_written(memory):
    """Mark ``memory`` (one write port, one synchronous read port, not transparent) as never reading, in a cycle whose
    read is used, the entry it writes in that cycle: what the read returns then does not matter.

    A FIFO guarantees it itself (it reads stored entries only); a stream's own SRAMs hold one
    instruction at a time; for the SRAMs the streams share, programs that keep the dependency
    protocol do (the tokens keep a stream off the rows another is writing; nothing in the hardware
    enforces them, and a racy program then reads an undefined value on the FPGA). Simulation keeps
    Amaranth's semantics (the old entry is read); the FPGA builds (``tilewright.fpga.build.RW_UNCHECKED``) tell
    Yosys that the read is then undefined, so a block RAM needs no flip-flops and multiplexers to
    return the old entry on a collision its two ports do not define (on the 85F's ``slim``, over a
    thousand flip-flops and a LUT level after the weights' block RAMs). Returns ``memory``."""
    reads, writes = memory.read_ports, memory.write_ports
    if len(reads) != 1 or len(writes) != 1 or reads[0].transparent_for or reads[0].domain == "comb":
        raise ValueError("never_reads_while_written: a memory with one write port and one synchronous, "
                         "non-transparent read port (its ports are made before it is marked; an "
                         "asynchronous read has no collision to leave undefined)")
    memory.attrs[NO_RW_CHECK] = 1
    return memory
