"""On-chip memory standing in for DRAM: an AXI4 subordinate for the accelerator, a byte port for the host.

One single-ported RAM (one read or one write per cycle, so it maps onto
iCE40 SPRAM as well as block RAM; behind the input register, banks of its
byte lanes with an address each) serves one AXI burst at a time, reads
and writes taking turns, one beat per cycle. The host port is served only
between bursts; the bridge uses it while no run is busy. Beats beyond the
memory answer ``SLVERR`` (reads return zero, writes are dropped), as the
simulation DRAM models do.
"""

from amaranth import C, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, fifo, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In

from tilewright.hw.axi import RESP_OKAY, RESP_SLVERR, AxiSignature
from tilewright.hw.pipe import pipe, replicas
from tilewright.hw.register_slice import AxiRegisterSlice, slice_channel

from .bridge import HostPortSignature

__all__ = ["OnChipMemory", "READ_LATENCY", "harness_timing"]

#: Cycles from a read burst's address accepted to its first beat, without the input register.
READ_LATENCY = 2


def harness_timing(*, ram_style=None, input_register=False, register_slice=False):
    """How an :class:`OnChipMemory` of this layout (its keywords) answers the accelerator, as the RTL
    harness models a DRAM (:class:`~tilewright.sim.fast.DramTiming`): one burst at a time, a beat a cycle,
    a read's first :data:`READ_LATENCY` cycles after its address (where the RAM lies, ``ram_style``, changes
    nothing). Through the input register and the register slice it takes longer, and the harness has no
    model of that: a ValueError."""
    from tilewright.sim.fast import DramTiming
    if input_register or register_slice:
        raise ValueError("the harness models the on-chip memory without its input register and register slice")
    return DramTiming(latency=READ_LATENCY, one_burst=True)


class OnChipMemory(wiring.Component):
    """``size`` bytes of RAM, ``data_width`` bits per word.

    ``ram_style`` becomes the RAM's Yosys attribute: ``"huge"`` puts it in
    iCE40 SPRAM (which cannot be initialised, so the build drops the
    all-zero initial contents: such a memory powers up undefined, and the
    host writes every byte a program reads).

    ``input_register`` puts a register between the control logic and the
    RAM's address, data and enables, and a second one after its read data,
    two cycles of latency per access: on a large part the RAM is dozens of
    block RAMs spread over the die, and their pins should see flip-flops
    placed beside them, not logic far away: the RAM is then cut
    into a bank per byte lane, each with its own copy of the
    address register, so no flip-flop drives all of them. (Yosys maps iCE40
    SPRAM only with its inputs driven the plain way, and a 24 MHz part
    does not need the register.) Without it the RAM's output, held by its
    read enable, is the beat waiting for R: no FIFO, no data registers.

    ``register_slice`` joins the AXI port through an
    :class:`~tilewright.hw.register_slice.AxiRegisterSlice` and the host's
    requests through a skid buffer: a cycle more each way, and no path from
    the accelerator's or the bridge's logic into the memory's.

    Members
    -------
    axi : In(AxiSignature)
        The accelerator's DRAM port (INCR bursts of full-width beats).
    host : In(HostPortSignature)
    """

    def __init__(self, *, size, data_width, addr_width=32, id_width=1, ram_style=None, input_register=False,
                 register_slice=False):
        if size % (data_width // 8):
            raise ValueError(f"memory size {size} is not a whole number of {data_width}-bit words")
        self.size, self.data_width, self.ram_style = size, data_width, ram_style
        self.input_register, self.register_slice = input_register, register_slice
        #: With ``input_register``, read beats that may wait for R: one per cycle from a read's request to
        #: its entering the FIFO, plus two (one for the cycle `room` is late by), so that a burst streams
        #: one beat per cycle. (Without, the RAM's output is the beat waiting for R.)
        self.r_fifo_depth = 7
        super().__init__({"axi": In(AxiSignature(addr_width=addr_width, data_width=data_width, id_width=id_width)),
                          "host": In(HostPortSignature())})

    def elaborate(self, platform):
        m = Module()
        word_bytes = self.data_width // 8
        shift = word_bytes.bit_length() - 1
        depth = self.size // word_bytes
        # What the control logic asks of the RAM this cycle (single-ported: one address), straight or
        # through the input register. Through the register the RAM reads its address every cycle (the
        # tags below say which reads count): Yosys makes a read enable a multiplexer after every block
        # RAM, whose one enable also serves its writes. iCE40 SPRAM maps only with the read enable.
        # Through the register the RAM is also cut into banks of its bytes, each with a copy of the
        # register: on the 85F the address register alone reached all 64 block RAMs, a row apart, and a
        # copy for each of four banks still reached its 16 in 10.7-11.3 ns at 100 MHz. So a bank per
        # byte lane: on a 64-bit bus eight, of 8 block RAMs each there.
        banks = word_bytes if self.input_register else 1
        ram_addr, read_en = Signal(range(depth), name="ram_addr"), Signal(name="read_en")
        write_data, write_en = Signal(self.data_width, name="write_data"), Signal(word_bytes, name="write_en")
        read_data = []
        bank_addrs = replicas(m, ram_addr, "ram_addr", banks) if self.input_register else None
        for k in range(banks):
            ram = Memory(shape=self.data_width // banks, depth=depth, init=[],
                         attrs={"ram_style": self.ram_style} if self.ram_style else None)
            m.submodules["ram" if banks == 1 else f"ram_{k}"] = ram
            ram_read, ram_write = ram.read_port(), ram.write_port(granularity=8)
            lanes = slice(k * word_bytes // banks, (k + 1) * word_bytes // banks)
            if self.input_register:
                m.d.sync += [ram_write.data.eq(write_data.word_select(k, len(ram_write.data))),
                             ram_write.en.eq(write_en[lanes])]
                m.d.comb += [ram_read.addr.eq(bank_addrs[k]), ram_write.addr.eq(bank_addrs[k]), ram_read.en.eq(1)]
            else:
                m.d.comb += [ram_read.addr.eq(ram_addr), ram_write.addr.eq(ram_addr), ram_write.data.eq(write_data),
                             ram_write.en.eq(write_en), ram_read.en.eq(read_en)]
            read_data.append(ram_read.data)
        axi, host = self.axi, self.host
        if self.register_slice:
            m.submodules.axi_slice = axi_slice = AxiRegisterSlice(
                addr_width=len(axi.araddr), data_width=self.data_width, id_width=len(axi.arid))
            wiring.connect(m, wiring.flipped(self.axi), axi_slice.s)
            axi = axi_slice.m
            host = HostPortSignature().flip().create(path=("host_sliced",))
            slice_channel(m, "host_slice", self.host, host, payload=("addr", "write", "wdata"))
            m.d.comb += [self.host.rvalid.eq(host.rvalid), self.host.rdata.eq(host.rdata)]

        tags = data.StructLayout({"axi": 1, "host": 1, "last": 1, "error": 1, "id": len(axi.arid)})
        requested = Signal(tags)             # the read asked for this cycle
        host_byte = Signal(range(word_bytes))
        if self.input_register:
            room, host_free = self._read_fifo(m, axi, host, requested, tags, Cat(read_data), host_byte)
        else:
            # -- read data: the RAM's output is R's beat -----------------------------------------
            # Held there (the read enable off) until R takes it, the next beat read as it does: one a
            # cycle, and no register or FIFO for the data (on a small part each of their flip-flops
            # takes a logic cell of its own). The tags say what the output holds; a host read waits
            # until no beat does.
            beat = Signal(tags)
            word = Cat(read_data)
            m.d.sync += beat.host.eq(requested.host)
            with m.If(requested.axi):
                m.d.sync += beat.eq(requested)
            with m.Elif(axi.rready):
                m.d.sync += beat.axi.eq(0)
            m.d.comb += [axi.rvalid.eq(beat.axi), axi.rdata.eq(Mux(beat.error, 0, word)),
                         axi.rresp.eq(Mux(beat.error, RESP_SLVERR, RESP_OKAY)), axi.rlast.eq(beat.last),
                         axi.rid.eq(beat.id),
                         host.rvalid.eq(beat.host), host.rdata.eq(word.word_select(host_byte, 8))]
            room, host_free = ~beat.axi | axi.rready, ~beat.axi

        # -- one burst at a time ---------------------------------------------------------
        addr = Signal(len(axi.araddr) - shift + 1)      # word index of the next beat
        beats = Signal(9)            # beats left
        more = Signal()              # beats != 0, kept beside it
        burst_id = Signal.like(axi.arid)
        write_error = Signal()
        prefer_write = Signal()      # reads and writes take turns between bursts
        in_range = addr < depth

        # The RAM's address is the burst's but in IDLE, the host's there whether it asks or not: what the
        # RAM reads or writes is decided by the enables and tags (the host's request in the choice reached
        # the address copies through 10.6 ns on the 85F at 100 MHz).
        m.d.comb += [axi.bid.eq(burst_id), axi.bresp.eq(Mux(write_error, RESP_SLVERR, RESP_OKAY)), read_en.eq(0),
                     ram_addr.eq(addr[:len(ram_addr)])]
        m.d.comb += requested.eq(0)
        with m.FSM() as fsm:
            with m.State("IDLE"):
                host_asks = host.valid & host_free
                take_read = axi.arvalid & ~(prefer_write & axi.awvalid) & ~host_asks
                take_write = axi.awvalid & ~take_read & ~host_asks
                m.d.comb += [axi.arready.eq(take_read), axi.awready.eq(take_write), ram_addr.eq(host.addr >> shift)]
                with m.If(take_read):
                    m.d.sync += [addr.eq(axi.araddr >> shift), beats.eq(axi.arlen + 1), burst_id.eq(axi.arid),
                                 more.eq(1), prefer_write.eq(1)]
                    m.next = "READ"
                with m.Elif(take_write):
                    m.d.sync += [addr.eq(axi.awaddr >> shift), beats.eq(axi.awlen + 1), burst_id.eq(axi.awid),
                                 write_error.eq(0), prefer_write.eq(0)]
                    m.next = "WRITE"
                with m.Elif(host_asks):
                    m.d.comb += [host.ready.eq(1), read_en.eq(~host.write),
                                 write_en.eq(Mux(host.write, Const(1, word_bytes) << host.addr[:shift], 0)),
                                 requested.host.eq(~host.write)]
                    m.d.sync += host_byte.eq(host.addr[:shift])
            with m.State("READ"):
                advance = room & more
                m.d.comb += read_en.eq(advance)
                with m.If(advance):
                    m.d.comb += [requested.axi.eq(1), requested.error.eq(~in_range), requested.last.eq(beats == 1),
                                 requested.id.eq(burst_id)]
                    m.d.sync += [addr.eq(addr + 1), beats.eq(beats - 1), more.eq(beats != 1)]
                with m.If(~more):           # (its last beats still wait for R)
                    m.next = "IDLE"
            with m.State("WRITE"):
                m.d.comb += [axi.wready.eq(1),
                             write_en.eq(Mux(axi.wvalid & in_range, axi.wstrb, 0))]
                with m.If(axi.wvalid):
                    m.d.sync += [addr.eq(addr + 1), write_error.eq(write_error | ~in_range)]
                    with m.If(axi.wlast):
                        m.next = "RESPOND"
            with m.State("RESPOND"):
                m.d.comb += axi.bvalid.eq(1)
                with m.If(axi.bready):
                    m.next = "IDLE"
        # What a write would write, by the state alone (the enables decide whether it does): the burst's
        # data in WRITE, else the host's (with the host's request in the choice and 0 otherwise, the state
        # reached the block RAMs' data registers through 11.1 ns on the 85F at 100 MHz).
        m.d.comb += write_data.eq(Mux(fsm.ongoing("WRITE"), axi.wdata, host.wdata.replicate(word_bytes)))
        return m

    def _read_fifo(self, m, axi, host, requested, tags, ram_data, host_byte):
        """The read path through registers and a FIFO (``input_register``): returns (whether a beat may
        be read, whether the host may read)."""
        # The RAM's output is registered before anything uses it and R is fed from a small FIFO, so
        # neither the R handshake nor the accelerator's logic lies on a path through the RAM (spread
        # over dozens of block RAMs, those paths are long). A beat is read only when the FIFO has room
        # for it and every beat already on its way.
        issued = Signal(tags)                # what the RAM's output holds this cycle
        loaded = Signal(tags)                # what `word` holds
        word = Signal(self.data_width)
        # A register on each side of the RAM: the output's placed by its block RAMs, `word` by the
        # logic that reads it (on the 85F at 100 MHz a block RAM's 5.6 ns clock-to-out and the route
        # to one register between them took 11.4 ns).
        pending = Signal(tags)               # a read in the input register
        landed = Signal(tags)                # what the output register holds
        m.d.sync += [pending.eq(requested), issued.eq(pending), landed.eq(issued), loaded.eq(landed),
                     word.eq(pipe(m, ram_data, "ram_data", data=True))]
        in_flight = [pending.axi, issued.axi, landed.axi, loaded.axi]
        m.submodules.beats_out = out = fifo.SyncFIFO(width=self.data_width + tags.size, depth=self.r_fifo_depth)
        out_tags = data.View(tags, out.r_data[self.data_width:])
        m.d.comb += [
            out.w_data.eq(Cat(word, loaded)), out.w_en.eq(loaded.axi),
            axi.rvalid.eq(out.r_rdy), out.r_en.eq(axi.rready),
            axi.rdata.eq(Mux(out_tags.error, 0, out.r_data[:self.data_width])),
            axi.rresp.eq(Mux(out_tags.error, RESP_SLVERR, RESP_OKAY)),
            axi.rlast.eq(out_tags.last), axi.rid.eq(out_tags.id),
            host.rvalid.eq(loaded.host), host.rdata.eq(word.word_select(host_byte, 8)),
        ]
        # A register, a cycle late and so with room for the beat read then too (a cycle adds at most one
        # beat): on the 85F at 100 MHz its sum and compare reached the burst's address and count enables.
        return pipe(m, out.level + sum(in_flight) + 1 < self.r_fifo_depth, "room"), C(1)
