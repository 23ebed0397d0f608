"""On-chip memory standing in for DRAM: an AXI4 subordinate for the accelerator, a byte port for the host.

One single-ported RAM (one read or one write per cycle, so it maps onto
iCE40 SPRAM as well as block RAM) serves one AXI burst at a time, reads
and writes taking turns, one beat per cycle. The host port is served only
between bursts; the bridge uses it while no run is busy. Beats beyond the
memory answer ``SLVERR`` (reads return zero, writes are dropped), as the
simulation DRAM models do.
"""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from tilewright.hw.axi import RESP_OKAY, RESP_SLVERR, AxiSignature

from .bridge import HostPortSignature

__all__ = ["OnChipMemory"]


class OnChipMemory(wiring.Component):
    """``size`` bytes of RAM, ``data_width`` bits per word.

    ``ram_style`` becomes the RAM's Yosys attribute: ``"huge"`` puts it in
    iCE40 SPRAM (which cannot be initialised, so the build drops the
    all-zero initial contents: such a memory powers up undefined, and the
    host writes every byte a program reads).

    Members
    -------
    axi : In(AxiSignature)
        The accelerator's DRAM port (INCR bursts of full-width beats).
    host : In(HostPortSignature)
    """

    def __init__(self, *, size, data_width, addr_width=32, id_width=1, ram_style=None):
        if size % (data_width // 8):
            raise ValueError(f"memory size {size} is not a whole number of {data_width}-bit words")
        self.size, self.data_width, self.ram_style = size, data_width, ram_style
        super().__init__({"axi": In(AxiSignature(addr_width=addr_width, data_width=data_width, id_width=id_width)),
                          "host": In(HostPortSignature())})

    def elaborate(self, platform):
        m = Module()
        word_bytes = self.data_width // 8
        shift = word_bytes.bit_length() - 1
        depth = self.size // word_bytes
        m.submodules.ram = ram = Memory(shape=self.data_width, depth=depth, init=[],
                                        attrs={"ram_style": self.ram_style} if self.ram_style else None)
        read = ram.read_port()
        write = ram.write_port(granularity=8)
        axi, host = self.axi, self.host
        m.d.comb += write.addr.eq(read.addr)           # single-ported: one address

        # -- one burst at a time ---------------------------------------------------------
        addr = Signal(32)            # word index of the next beat
        beats = Signal(9)            # beats left
        burst_id = Signal.like(axi.arid)
        write_error = Signal()
        prefer_write = Signal()      # reads and writes take turns between bursts
        r_valid = Signal()           # a read beat is on R
        r_error = Signal()
        in_range = addr < depth
        host_byte = Signal(range(word_bytes))

        m.d.comb += [axi.rid.eq(burst_id), axi.bid.eq(burst_id), axi.rvalid.eq(r_valid),
                     axi.rdata.eq(Mux(r_error, 0, read.data)), axi.rresp.eq(Mux(r_error, RESP_SLVERR, RESP_OKAY)),
                     axi.bresp.eq(Mux(write_error, RESP_SLVERR, RESP_OKAY)),
                     read.en.eq(0)]
        with m.If(axi.rvalid & axi.rready):
            m.d.sync += r_valid.eq(0)
        with m.If(host.rvalid):
            m.d.sync += host.rvalid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                take_read = axi.arvalid & ~(prefer_write & axi.awvalid) & ~host.valid
                take_write = axi.awvalid & ~take_read & ~host.valid
                m.d.comb += [axi.arready.eq(take_read), axi.awready.eq(take_write)]
                with m.If(take_read):
                    m.d.sync += [addr.eq(axi.araddr >> shift), beats.eq(axi.arlen + 1), burst_id.eq(axi.arid),
                                 prefer_write.eq(1)]
                    m.next = "READ"
                with m.Elif(take_write):
                    m.d.sync += [addr.eq(axi.awaddr >> shift), beats.eq(axi.awlen + 1), burst_id.eq(axi.awid),
                                 write_error.eq(0), prefer_write.eq(0)]
                    m.next = "WRITE"
                with m.Elif(host.valid):
                    m.d.comb += [host.ready.eq(1), read.addr.eq(host.addr >> shift), read.en.eq(~host.write),
                                 write.data.eq(host.wdata.replicate(word_bytes)),
                                 write.en.eq(Mux(host.write, Const(1, word_bytes) << host.addr[:shift], 0))]
                    m.d.sync += [host.rvalid.eq(~host.write), host_byte.eq(host.addr[:shift])]
            with m.State("READ"):
                # The next beat is read while the previous one leaves (the port holds it while R waits).
                advance = (~r_valid | axi.rready) & (beats != 0)
                m.d.comb += [read.addr.eq(addr[:len(read.addr)]), read.en.eq(advance)]
                with m.If(advance):
                    m.d.sync += [r_valid.eq(1), r_error.eq(~in_range), addr.eq(addr + 1), beats.eq(beats - 1),
                                 axi.rlast.eq(beats == 1)]
                with m.If((beats == 0) & (~r_valid | axi.rready)):
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.comb += [axi.wready.eq(1), read.addr.eq(addr[:len(read.addr)]), write.data.eq(axi.wdata),
                             write.en.eq(Mux(axi.wvalid & in_range, axi.wstrb, 0))]
                with m.If(axi.wvalid):
                    m.d.sync += [addr.eq(addr + 1), write_error.eq(write_error | ~in_range)]
                    with m.If(axi.wlast):
                        m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += axi.bvalid.eq(1)
                with m.If(axi.bready):
                    m.next = "IDLE"
        m.d.comb += host.rdata.eq(read.data.word_select(host_byte, 8))
        return m
