"""The load stream: LOAD INP and LOAD WGT into the input and weight SRAMs."""

from amaranth import Module, Mux
from amaranth.lib import data, stream, wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import MemType

from .axi import AxiReadSignature
from .padded_load import PaddedLoad
from .sequencer import CommandLayout, Sequencer, TokenPort
from .sram import sram_shape

__all__ = ["LoadUnit"]


class LoadUnit(wiring.Component):
    """Sequencer plus the :class:`PaddedLoad` for LOAD INP and LOAD WGT.

    Members
    -------
    cmd : In(stream of CommandLayout)
    next : Out(TokenPort)        (c2l pops, l2c pushes)
    inp_write, wgt_write : In(WritePort.Signature)
    axi : Out(AxiReadSignature)
    halt : In(1)
    fault, error, index : the sequencer's fault report
    busy, blocked, retired, dma_busy, wait_pop_next, wait_push_next : status for counters
    bytes_inp, bytes_wgt : Out(32), valid with ``retired``
    """

    def __init__(self, cfg, *, addr_width):
        self.cfg = cfg
        self.addr_width = addr_width
        bus = cfg.dram_bus_width
        super().__init__({
            "cmd": In(stream.Signature(CommandLayout())),
            "next": Out(TokenPort()),
            "inp_write": In(WritePort.Signature(addr_width=cfg.index_bits("inp"), shape=sram_shape(cfg, "inp"))),
            "wgt_write": In(WritePort.Signature(addr_width=cfg.index_bits("wgt"), shape=sram_shape(cfg, "wgt"))),
            "axi": Out(AxiReadSignature(addr_width=addr_width, data_width=bus)),
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
        m.submodules.loader = loader = PaddedLoad(c, (MemType.INP, MemType.WGT), addr_width=self.addr_width)
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        wiring.connect(m, seq.next, wiring.flipped(self.next))
        wiring.connect(m, loader.write_inp, wiring.flipped(self.inp_write))
        wiring.connect(m, loader.write_wgt, wiring.flipped(self.wgt_write))
        wiring.connect(m, loader.axi, wiring.flipped(self.axi))

        load = data.View(layouts[isa.Opcode.LOAD], seq.insn.as_value())
        is_wgt = load.memory_type == MemType.WGT
        m.d.comb += [
            loader.insn.eq(seq.insn.as_value()), loader.start.eq(seq.start),
            seq.done.eq(loader.done),
            seq.error.eq(loader.error),
            seq.halt.eq(self.halt),
            self.fault.eq(seq.fault), self.error.eq(Mux(seq.fault, loader.error, 0)),
            self.index.eq(seq.index), self.started.eq(seq.start),
            self.busy.eq(seq.busy), self.blocked.eq(seq.blocked), self.retired.eq(seq.retired),
            self.dma_busy.eq(seq.executing),
            self.wait_pop_next.eq(seq.wait_pop_next), self.wait_push_next.eq(seq.wait_push_next),
            self.bytes_inp.eq(Mux(~is_wgt & seq.retired, loader.bytes_read, 0)),
            self.bytes_wgt.eq(Mux(is_wgt & seq.retired, loader.bytes_read, 0)),
        ]
        return m
