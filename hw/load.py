"""The load stream: LOAD INP and LOAD WGT into the input and weight SRAMs (through a :class:`PaddedLoad`)."""

from amaranth import Module, Mux
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import MemType

from .padded_load import LoadRequest
from .sequencer import CommandSignature, Sequencer, TokenPort

__all__ = ["LoadUnit"]


class LoadUnit(wiring.Component):
    """The sequencer of LOAD INP and LOAD WGT; a :class:`PaddedLoad` outside executes them.

    Members
    -------
    cmd : In(CommandSignature())
    next : Out(TokenPort)        (c2l pops, l2c pushes)
    dma : Out(LoadRequest)
    halt : In(1)
    fault, error, index : the sequencer's fault report
    busy, blocked, retired, dma_busy, wait_pop_next, wait_push_next : status for counters
    bytes_inp, bytes_wgt : Out(32), valid with ``retired``
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "cmd": In(CommandSignature()),
            "next": Out(TokenPort()),
            "dma": Out(LoadRequest(cfg)),
            "halt": In(1),
            "fault": Out(1), "error": Out(isa.ERROR_BITS), "index": Out(32), "started": Out(1),
            "busy": Out(1), "blocked": Out(1), "retired": Out(1), "dma_busy": Out(1),
            "wait_pop_next": Out(1), "wait_push_next": Out(1),
            "bytes_inp": Out(32), "bytes_wgt": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        layouts = isa.instruction_layouts(c)
        m.submodules.seq = seq = Sequencer(insn_layout=layouts["header"])
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        wiring.connect(m, seq.next, wiring.flipped(self.next))
        dma = self.dma

        load = data.View(layouts[isa.Opcode.LOAD], seq.insn.as_value())
        is_wgt = load.memory_type == MemType.WGT
        m.d.comb += [
            dma.insn.eq(seq.insn.as_value()), dma.start.eq(seq.start),
            seq.done.eq(dma.done),
            seq.error.eq(dma.error),
            seq.halt.eq(self.halt),
            self.fault.eq(seq.fault), self.error.eq(Mux(seq.fault, dma.error, 0)),
            self.index.eq(seq.index), self.started.eq(seq.start),
            self.busy.eq(seq.busy), self.blocked.eq(seq.blocked), self.retired.eq(seq.retired),
            self.dma_busy.eq(seq.executing),
            self.wait_pop_next.eq(seq.wait_pop_next), self.wait_push_next.eq(seq.wait_push_next),
            self.bytes_inp.eq(Mux(~is_wgt & seq.retired, dma.bytes_read, 0)),
            self.bytes_wgt.eq(Mux(is_wgt & seq.retired, dma.bytes_read, 0)),
        ]
        return m
