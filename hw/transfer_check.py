"""The range checks a LOAD or STORE passes before anything moves, spread over a few cycles.

They run once per instruction, so a few cycles of latency cost nothing,
while doing them in one cycle (two multiplies, three carry chains) was the
longest path of the whole accelerator. One multiplier, registered at both
ends, serves both products.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ERROR_BITS, ErrorCode

__all__ = ["TransferCheck"]

#: Most rows or columns a LOAD writes: the padding on both sides plus the data.
MAX_EXTENT = 2 * ((1 << isa.PAD_BITS) - 1) + (1 << isa.SIZE_BITS)


class TransferCheck(wiring.Component):
    """Is an SRAM rectangle inside its buffer, and are the DRAM rows on the bus?

    ``error`` is ``SRAM_RANGE`` when ``sram_base + rows·cols > depth``,
    else ``BUS_ERROR`` when the last DRAM element, ``dram_base + (y_size-1)·x_stride
    + x_size`` (one past it), exceeds ``dram_limit``, else 0 — the
    order in which the functional simulator checks them. The inputs must
    stay stable from ``start`` until ``done``; ``y_size`` is at least 1.

    Parameters
    ----------
    sram_bits : int
        Width of the instructions' ``sram_base`` field.

    Members
    -------
    start : In(1)
        Begin checking (one-cycle pulse).
    sram_base, rows, cols, depth : In
        The SRAM rectangle and the buffer's depth in entries.
    dram_base, x_size, y_size, x_stride : In
        The DRAM rows, in elements.
    dram_limit : In(DRAM_ADDR_BITS + 1)
        Elements on the bus.
    done : Out(1)
        One-cycle pulse, :data:`LATENCY` cycles after ``start``.
    error : Out(ERROR_BITS)
        Valid with ``done``.
    extent : Out
        ``rows·cols``, valid with ``done``.
    """

    #: Cycles from ``start`` to ``done``.
    LATENCY = 5

    def __init__(self, *, sram_bits):
        self.product_bits = 2 * MAX_EXTENT.bit_length()
        super().__init__({
            "start": In(1),
            "sram_base": In(sram_bits), "rows": In(range(MAX_EXTENT)), "cols": In(range(MAX_EXTENT)),
            "depth": In(sram_bits + 1),
            "dram_base": In(isa.DRAM_ADDR_BITS), "x_size": In(isa.SIZE_BITS), "y_size": In(isa.SIZE_BITS),
            "x_stride": In(isa.SIZE_BITS), "dram_limit": In(isa.DRAM_ADDR_BITS + 1),
            "done": Out(1), "error": Out(ERROR_BITS), "extent": Out(self.product_bits),
        })

    def elaborate(self, platform):
        m = Module()
        step = Signal(self.LATENCY)          # one-hot: which cycle of the check this is
        m.d.sync += step.eq(step[:-1] << 1)
        with m.If(self.start):
            m.d.sync += step.eq(1)

        # Data registers, read only in the step after the one that sets them: no reset.
        a = Signal(range(MAX_EXTENT), reset_less=True)
        b = Signal(range(MAX_EXTENT), reset_less=True)
        product = Signal(self.product_bits, reset_less=True)
        m.d.sync += product.eq(a * b)
        dram_last = Signal(isa.DRAM_ADDR_BITS + 1, reset_less=True)      # dram_base + x_size
        sram_end = Signal(self.product_bits + 1, reset_less=True)
        dram_end = Signal(isa.DRAM_ADDR_BITS + 2, reset_less=True)
        with m.If(self.start):              # cycle 0: the rectangle's size into the multiplier
            m.d.sync += [a.eq(self.rows), b.eq(self.cols), dram_last.eq(self.dram_base + self.x_size)]
        with m.If(step[0]):                 # cycle 1: product = rows·cols; the DRAM span next
            m.d.sync += [a.eq(self.y_size - 1), b.eq(self.x_stride)]
        with m.If(step[1]):                 # cycle 2: the rectangle's end; product = (y_size-1)·x_stride
            m.d.sync += [self.extent.eq(product), sram_end.eq(self.sram_base + product)]
        with m.If(step[2]):                 # cycle 3: one past the last DRAM element
            m.d.sync += dram_end.eq(dram_last + product)
        sram_bad = Signal()
        bus_bad = Signal()
        with m.If(step[3]):                 # cycle 4: the comparisons
            m.d.sync += [sram_bad.eq(sram_end > self.depth), bus_bad.eq(dram_end > self.dram_limit)]
        m.d.comb += [self.done.eq(step[4]),
                     self.error.eq(Mux(sram_bad, ErrorCode.SRAM_RANGE, Mux(bus_bad, ErrorCode.BUS_ERROR, 0)))]
        return m
