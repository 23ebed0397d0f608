"""A FIFO whose head is a flip-flop register: for queues whose head feeds logic.

Amaranth's ``SyncFIFOBuffered`` reads its head straight out of its memory,
so when that memory becomes block RAM every consumer of the head pays the
RAM's clock-to-out first (5.6 ns of a 10 ns cycle on the ECP5): the
command queues' instruction fields reached the store's multipliers that
way. Here the head is copied into a register as it leaves the memory.
"""

from amaranth import Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["RegisteredFIFO"]


class RegisteredFIFO(wiring.Component):
    """``depth`` entries of ``width`` bits: a ``SyncFIFOBuffered`` of ``depth - 1`` and a head register.

    The ports are those of Amaranth's FIFOs (``w_data``, ``w_en``, ``w_rdy``,
    ``r_data``, ``r_en``, ``r_rdy``, ``level``); ``r_data`` comes from a
    register. A write reaches the head two cycles after it is accepted.
    """

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"RegisteredFIFO depth must be at least 2, not {depth}")
        self.width, self.depth = width, depth
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.inner = inner = fifo.SyncFIFOBuffered(width=self.width, depth=self.depth - 1)
        head = Signal(self.width, reset_less=True)      # read only while r_rdy
        load = inner.r_rdy & (~self.r_rdy | self.r_en)
        m.d.comb += [inner.w_data.eq(self.w_data), inner.w_en.eq(self.w_en), self.w_rdy.eq(inner.w_rdy),
                     inner.r_en.eq(load), self.r_data.eq(head), self.level.eq(inner.level + self.r_rdy)]
        with m.If(load):
            m.d.sync += [head.eq(inner.r_data), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m
