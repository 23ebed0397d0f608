"""The queue behind the command queues and the fetch buffer: its head is a flip-flop register.

Their heads feed decode logic directly, so the head must not come out of a
block RAM (an ECP5 DP16KD's clock-to-out is 5.6 ns of a 10 ns cycle: the
command queues' instruction fields reached the store's multipliers that
way). A queue of up to :data:`LUTRAM_DEPTH` entries is built like
Amaranth's ``SyncFIFOBuffered`` on a memory marked for LUT RAM where the
device has it (ECP5; Gowin chooses its shadow SRAM by itself), whose read
register is then a fabric register; a deeper one is a block-RAM
``SyncFIFOBuffered`` followed by a head register (one cycle more from
write to head). The attribute changes the mapping only: simulation and
every device behave alike.
"""

from amaranth import Module, Signal
from amaranth.lib import fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .dsp import is_ecp5

__all__ = ["HeadRegisteredFIFO", "LUTRAM_DEPTH"]

#: The deepest queue kept in LUT RAM.
LUTRAM_DEPTH = 64


class HeadRegisteredFIFO(wiring.Component):
    """``depth`` entries of ``width`` bits whose ``r_data`` is a register.

    The ports are those of Amaranth's FIFOs (``w_data``, ``w_en``, ``w_rdy``,
    ``r_data``, ``r_en``, ``r_rdy``, ``level``).
    """

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"HeadRegisteredFIFO depth must be at least 2, not {depth}")
        self.width, self.depth = width, depth
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        if self.depth > LUTRAM_DEPTH:
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

        # As SyncFIFOBuffered: a memory of depth - 1 entries whose read register is the head.
        lutram = is_ecp5(platform)
        inner_depth = self.depth - 1
        m.submodules.storage = storage = Memory(shape=self.width, depth=inner_depth, init=[],
                                                attrs={"ram_style": "distributed"} if lutram else None)
        w_port, r_port = storage.write_port(), storage.read_port()
        produce, consume = Signal(range(inner_depth)), Signal(range(inner_depth))
        stored = Signal(range(inner_depth + 1))
        write = self.w_en & self.w_rdy
        read_inner = (stored != 0) & (~self.r_rdy | self.r_en)

        def advanced(pointer):
            return 0 if inner_depth == 1 else (pointer + 1 if inner_depth & (inner_depth - 1) == 0
                                               else (pointer + 1) % inner_depth)

        m.d.comb += [self.w_rdy.eq(stored != inner_depth), w_port.addr.eq(produce), w_port.data.eq(self.w_data),
                     w_port.en.eq(write), r_port.addr.eq(consume), r_port.en.eq(read_inner),
                     self.r_data.eq(r_port.data), self.level.eq(stored + self.r_rdy)]
        with m.If(write):
            m.d.sync += produce.eq(advanced(produce))
        with m.If(read_inner):
            m.d.sync += [consume.eq(advanced(consume)), self.r_rdy.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        m.d.sync += stored.eq(stored + write - read_inner)
        return m
