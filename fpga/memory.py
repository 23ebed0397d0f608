"""On-chip memory standing in for DRAM: an AXI4 subordinate for the accelerator, a byte port for the host.

One single-ported RAM (one read or one write per cycle, so it maps onto
iCE40 SPRAM as well as block RAM) serves one AXI burst at a time, reads
and writes taking turns, one beat per cycle. The host port is served only
between bursts; the bridge uses it while no run is busy. Beats beyond the
memory answer ``SLVERR`` (reads return zero, writes are dropped), as the
simulation DRAM models do.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
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

    #: Read beats that may wait for R: enough that a burst streams one beat per cycle.
    R_FIFO_DEPTH = 4

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

        # -- read data: RAM · register · FIFO · R ----------------------------------------------
        # The RAM's output is registered before anything uses it and R is fed from a small FIFO, so
        # neither the R handshake nor the accelerator's logic lies on a path through the RAM (spread
        # over dozens of block RAMs, those paths are long). A beat is read only when the FIFO has room
        # for it and every beat already on its way.
        tags = data.StructLayout({"axi": 1, "host": 1, "last": 1, "error": 1, "id": len(axi.arid)})
        issued = Signal(tags)                # what the RAM's output holds this cycle
        loaded = Signal(tags)                # what `word` holds
        word = Signal(self.data_width)
        m.d.sync += [loaded.eq(issued), word.eq(read.data)]
        m.submodules.beats_out = out = fifo.SyncFIFO(width=self.data_width + tags.size,
                                                     depth=self.R_FIFO_DEPTH)
        out_tags = data.View(tags, out.r_data[self.data_width:])
        m.d.comb += [
            out.w_data.eq(Cat(word, loaded)), out.w_en.eq(loaded.axi),
            axi.rvalid.eq(out.r_rdy), out.r_en.eq(axi.rready),
            axi.rdata.eq(Mux(out_tags.error, 0, out.r_data[:self.data_width])),
            axi.rresp.eq(Mux(out_tags.error, RESP_SLVERR, RESP_OKAY)),
            axi.rlast.eq(out_tags.last), axi.rid.eq(out_tags.id),
        ]
        host_byte = Signal(range(word_bytes))
        m.d.comb += [host.rvalid.eq(loaded.host), host.rdata.eq(word.word_select(host_byte, 8))]
        room = out.level + issued.axi + loaded.axi < self.R_FIFO_DEPTH

        # -- one burst at a time ---------------------------------------------------------
        addr = Signal(len(axi.araddr) - shift + 1)      # word index of the next beat
        beats = Signal(9)            # beats left
        burst_id = Signal.like(axi.arid)
        write_error = Signal()
        prefer_write = Signal()      # reads and writes take turns between bursts
        in_range = addr < depth

        m.d.comb += [axi.bid.eq(burst_id), axi.bresp.eq(Mux(write_error, RESP_SLVERR, RESP_OKAY)), read.en.eq(0)]
        m.d.sync += issued.eq(0)
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
                    m.d.sync += [issued.host.eq(~host.write), host_byte.eq(host.addr[:shift])]
            with m.State("READ"):
                advance = room & (beats != 0)
                m.d.comb += [read.addr.eq(addr[:len(read.addr)]), read.en.eq(advance)]
                with m.If(advance):
                    m.d.sync += [issued.axi.eq(1), issued.error.eq(~in_range), issued.last.eq(beats == 1),
                                 issued.id.eq(burst_id), addr.eq(addr + 1), beats.eq(beats - 1)]
                with m.If(beats == 0):      # the burst's beats follow through the FIFO
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
        return m
