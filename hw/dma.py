"""2D strided DMA over AXI4: rows of bytes in, rows of bytes out.

A transfer is ``rows`` rows of ``row_bytes`` bytes; row ``r`` starts at byte
``addr + r·stride``. Rows are split into INCR bursts aligned to the bus, at
most 256 beats long and never crossing a 4 KiB boundary. Address requests
run ahead of the data by up to ``outstanding`` bursts, so long transfers
keep the data channel busy every cycle (one known exception: writes of
elements narrower than the bus run at slots/(slots+1) elements per cycle).

* :class:`RowReader` issues AR requests and tags each R beat with the byte
  range ``[lo, hi)`` that belongs to the transfer.
* :class:`ElementPacker` turns tagged beats into elements of ``elem_bytes``.
* :class:`RowWriter` issues AW requests, packs elements into W beats with
  byte strobes and waits for every B response.

Both split rows into the fewest legal bursts; with ``lean`` (small FPGAs,
``HwConfig.lean``) into bursts of at most :data:`LEAN_BURST_BEATS` beats
that never cross an aligned block of that many, in a fraction of the logic.

Addresses are element-aligned (the ISA counts DRAM in elements), so an
element never straddles a beat when it is smaller than one, and elements
larger than a beat start on a beat boundary.
"""

from amaranth import C, Cat, Const, Module, Mux, Signal
from amaranth.hdl import Assert, Assume
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from . import axi as axi_spec
from .axi import (BOUNDARY_BYTES, BURST_INCR, MAX_BURST_BEATS, RESP_OKAY, AxiReadSignature,
                  AxiWriteSignature)
from .dsp import is_small_fpga
from .pipe import pipe
from .register_slice import SkidBuffer

__all__ = ["TransferLayout", "BeatLayout", "ReadClient", "RowReader", "ReaderShare", "attach_reader", "ElementPacker",
           "RowWriter", "LEAN_BURST_BEATS"]

#: Rows of a transfer command (the ISA's 16-bit ``y_size``).
ROWS_BITS = 16

BOUNDARY_SHIFT = BOUNDARY_BYTES.bit_length() - 1

#: The longest burst of a lean transfer (``lean`` readers and writers), and the aligned block none crosses.
LEAN_BURST_BEATS = 16


def TransferLayout(addr_width):
    """Payload of a transfer command: ``addr``, ``row_bytes``, ``stride``, ``rows``.

    Byte fields are ``addr_width + 1`` bits: the units check every transfer
    against the bus before starting it, so its addresses, one-past-the-end
    included, are at most ``2**addr_width`` (a stride only matters when
    there is a next row, which then lies on the bus too).
    """
    bits = addr_width + 1
    return data.StructLayout({"addr": bits, "row_bytes": bits, "stride": bits, "rows": ROWS_BITS})


def BeatLayout(data_width):
    """Payload of a read beat: ``data`` (one bus word), ``lo``/``hi`` (the transfer's bytes within it)
    and ``last`` (the transfer's final beat)."""
    bus_bytes = data_width // 8
    return data.StructLayout({"data": data_width, "lo": range(bus_bytes), "hi": range(1, bus_bytes + 1), "last": 1})


class ReadClient(wiring.Signature):
    """A unit's side of a :class:`RowReader` (its own, or one it shares through :class:`ReaderShare`):
    transfers out (``cmd``), their beats in, and the reader's ``busy`` and ``error`` as it sees them."""

    def __init__(self, *, addr_width, data_width):
        super().__init__({"cmd": Out(stream.Signature(TransferLayout(addr_width))),
                          "beats": In(stream.Signature(BeatLayout(data_width))),
                          "busy": In(1), "error": In(1)})


def attach_reader(m, client, reader):
    """Serve ``client`` (an ``Out(ReadClient)`` port) with ``reader`` (a :class:`RowReader`)."""
    wiring.connect(m, client.cmd, reader.cmd)
    wiring.connect(m, reader.beats, client.beats)
    m.d.comb += [client.busy.eq(reader.busy), client.error.eq(reader.error)]


def _burst_layout(bus_bytes):
    return data.StructLayout({"beats": range(1, MAX_BURST_BEATS + 1), "lo": range(bus_bytes),
                              "hi": range(1, bus_bytes + 1), "last": 1})


def _address_channel(m, axi, prefix, split, pending, bus_bytes, *, room=1, skid=True):
    """Drive AXI's AR or AW channel (``prefix`` "ar"/"aw") with the splitter's bursts: ID 0, INCR bursts
    of whole bus words. A burst passes a :class:`~.register_slice.SkidBuffer` (its length comes from
    compares and carry chains, and the channel fans out to an arbiter and beyond; the splitter's
    ``ready`` is then a flip-flop's, not the arbiter's grant, which on the 85F at 100 MHz reached every
    register of the splitter) and its descriptor enters ``pending`` as its address is accepted, so
    data never runs ahead of the address. ``room`` holds bursts back; without ``skid`` the bursts go
    straight to the channel. Returns whether a burst is not yet sent."""
    ch = {name: getattr(axi, prefix + name) for name in ("id", "addr", "len", "size", "burst", "valid", "ready")}
    request = Cat(split.request.payload.as_value(), split.burst.payload.as_value())
    addr = Signal.like(split.request.payload.addr, name=f"{prefix}_addr")
    beats = Signal.like(split.request.payload.beats, name=f"{prefix}_beats")
    descriptor = Signal.like(split.burst.payload, name=f"{prefix}_burst")
    sendable = pending.w_rdy & room
    if skid:
        m.submodules[f"{prefix}_held"] = held = SkidBuffer(len(request))
        m.d.comb += [held.i_payload.eq(request), held.i_valid.eq(split.request.valid),
                     split.request.ready.eq(held.i_ready), split.burst.ready.eq(held.i_ready),
                     Cat(addr, beats, descriptor).eq(held.o_payload), held.o_ready.eq(ch["ready"] & sendable)]
        offered = held.o_valid
    else:
        # Straight to the channel: the splitter offers a burst only while it could be sent (the
        # descriptor's `ready`), so the channel's `valid` does not wait on its `ready`.
        m.d.comb += [Cat(addr, beats, descriptor).eq(request), split.burst.ready.eq(sendable),
                     split.request.ready.eq(ch["ready"])]
        offered = split.request.valid
    m.d.comb += [ch["id"].eq(0), ch["addr"].eq(addr), ch["len"].eq(beats - 1),
                 ch["size"].eq(bus_bytes.bit_length() - 1), ch["burst"].eq(BURST_INCR),
                 ch["valid"].eq(offered & sendable),
                 pending.w_data.eq(descriptor), pending.w_en.eq(ch["valid"] & ch["ready"])]
    return offered         # (a skid register holds a burst only behind the output's)


class _Splitter(wiring.Component):
    """The ports every burst splitter has: a transfer command in; per burst, an address ``request`` and
    a ``burst`` descriptor out (produced together); ``busy`` while a transfer is being split."""

    def __init__(self, *, addr_width, bus_bytes):
        self.bus_bytes = bus_bytes
        self.bits = addr_width + 1
        super().__init__({
            "cmd": In(stream.Signature(TransferLayout(addr_width))),
            "request": Out(stream.Signature(data.StructLayout({"addr": self.bits,
                                                               "beats": range(1, MAX_BURST_BEATS + 1)}))),
            "burst": Out(stream.Signature(_burst_layout(bus_bytes))),
            "busy": Out(1),
        })

    def _prove_bursts_in_range(self, m, *, loaded, active, row_addr, stride, row_bytes, rows_left, row_done):
        """Under ``platform == "formal"``: every burst lies inside the transfer's bytes and crosses no 4 KiB boundary.

        Ghost copies of the command follow the rows independently of the splitter's own registers: a
        burst of row ``i`` must lie within ``[addr + i·stride, + row_bytes)`` rounded out to bus words,
        with ``i < rows``. The environment's one promise is the units' check: every row lies on the bus.
        ``loaded``: a command is latched; ``active``: bursts may leave.
        """
        B, bits, shift = self.bus_bytes, self.bits, self.bus_bytes.bit_length() - 1
        page = axi_spec.BOUNDARY_BYTES.bit_length() - 1           # (AXI's rule itself, not this module's copy)
        ghost_row = Signal(bits + 1)        # wide: a row past the bus cannot wrap back onto it
        ghost_stride, ghost_bytes = Signal(bits), Signal(bits)
        ghost_rows = Signal(ROWS_BITS)
        p, req = self.cmd.payload, self.request.payload
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += [ghost_row.eq(p.addr), ghost_stride.eq(p.stride), ghost_bytes.eq(p.row_bytes),
                         ghost_rows.eq(p.rows)]
        with m.If(self.request.valid & self.request.ready & row_done):
            m.d.sync += [ghost_row.eq(ghost_row + ghost_stride), ghost_rows.eq(ghost_rows - 1)]
        end = ghost_row + ghost_bytes
        burst_end = req.addr + req.beats * B        # one past the burst's last byte
        m.d.comb += Assume(~loaded | (rows_left == 0) | (row_bytes == 0) | (end <= 2 ** (bits - 1)))
        with m.If(self.request.valid):
            m.d.comb += [
                Assert(ghost_rows != 0, "a burst belongs to one of the transfer's rows"),
                Assert(req.addr[:shift] == 0 if shift else 1, "bursts start on a bus word"),
                Assert(req.addr >= (ghost_row >> shift) << shift, "a burst starts inside its row"),
                Assert(burst_end - B < end, "a burst ends inside its row"),
                Assert(req.addr[page:] == (burst_end - 1)[page:], "no burst crosses 4 KiB"),
                Assert((req.beats >= 1) & (req.beats <= MAX_BURST_BEATS)),
            ]
        with m.If(loaded):
            m.d.comb += [Assert(row_addr == ghost_row), Assert(stride == ghost_stride),
                         Assert(row_bytes == ghost_bytes), Assert(rows_left == ghost_rows)]
        with m.If(active):
            m.d.comb += [Assert(rows_left != 0), Assert(row_bytes != 0)]


class _BurstSplitter(_Splitter):
    """Splits a transfer into bursts: an address request and a descriptor per burst.

    ``request`` carries the aligned burst address and beat count; ``burst``
    carries the same count with the first beat's starting byte (``lo``), the
    last beat's end byte (``hi``) and whether it ends the transfer. Both are
    produced together, one burst per cycle at most.

    Timing: a burst's length is the least of three registered counts (beats
    to the row's end, to the next 4 KiB boundary, and the AXI limit); the
    next state for either outcome is computed beside the compares that pick
    it, so no adder waits for a compare. Everything a new row needs (its
    address, its beat count) is ready while the row before it is split; a
    command is latched, then spends two cycles in set-up. ``max_beats`` lowers the AXI limit.
    """

    def __init__(self, *, addr_width, bus_bytes, max_beats=MAX_BURST_BEATS):
        self.max_beats = max_beats
        super().__init__(addr_width=addr_width, bus_bytes=bus_bytes)

    def elaborate(self, platform):
        m = Module()
        B = self.bus_bytes
        shift = B.bit_length() - 1
        bits = self.bits
        page_beats = BOUNDARY_BYTES // B
        limit = min(self.max_beats, page_beats)

        # The transfer's registers are set by its command and read only while it runs: no reset.
        row_addr = Signal(bits, reset_less=True)           # start of the current row
        next_row = Signal(bits, reset_less=True)           # row_addr + stride
        start = Signal(bits, reset_less=True)              # next byte to request in this row (bus-aligned after the first burst)
        stride = Signal(bits, reset_less=True)
        rows_left = Signal(ROWS_BITS, reset_less=True)
        # A row of R bytes starting at byte offset `low` in a bus word spans
        # ceil((low + R) / B) beats: `row_beats` or one more when low + R_lo >= B.
        row_beats = Signal(bits - shift + 1, reset_less=True)
        row_beats_1 = Signal(bits - shift + 1, reset_less=True)
        bytes_lo = Signal(shift + 1, reset_less=True)      # (R + B - 1) mod B
        last_lo = Signal(range(B), reset_less=True)        # (R - 1) mod B
        to_end = Signal(bits - shift + 1, reset_less=True)              # beats from start to the row's end
        to_boundary = Signal(range(1, page_beats + 1), reset_less=True)  # beats from start to the next 4 KiB boundary
        row_bytes = Signal(bits, reset_less=True)
        setup = Signal()                  # the command is latched: compute the row's beat counts
        counts = Signal()                 # then the first row's counts
        active = Signal()

        def beats_of_row(addr):
            return Mux(addr[:shift] + bytes_lo >= B, row_beats_1, row_beats) if shift else row_beats

        def beats_to_boundary(addr):
            return page_beats - addr[shift:BOUNDARY_SHIFT]

        beats = Signal(range(1, MAX_BURST_BEATS + 1))
        last_in_row = Signal()
        stops_at_boundary = Signal()      # a burst that does not end its row ends at the boundary, else at the limit
        m.d.comb += [
            last_in_row.eq((to_end <= to_boundary) & (to_end <= limit)),
            stops_at_boundary.eq(to_boundary <= limit),
            beats.eq(Mux(last_in_row, to_end, Mux(stops_at_boundary, to_boundary, limit))),
        ]
        aligned = start & ~(B - 1)
        last = last_in_row & (rows_left == 1)
        hi_last = Signal(range(1, B + 1))
        m.d.comb += hi_last.eq((row_addr[:shift] + last_lo)[:shift] + 1 if shift else 1)

        m.d.comb += [
            self.busy.eq(active | setup | counts),
            self.cmd.ready.eq(~active & ~setup & ~counts),
            self.request.payload.addr.eq(aligned),
            self.request.payload.beats.eq(beats),
            self.burst.payload.beats.eq(beats),
            self.burst.payload.lo.eq(start[:shift] if shift else 0),
            self.burst.payload.hi.eq(Mux(last_in_row, hi_last, B)),
            self.burst.payload.last.eq(last),
        ]
        # Request and descriptor leave together: valid on both, advance when both are taken.
        m.d.comb += [
            self.request.valid.eq(active & self.burst.ready),
            self.burst.valid.eq(active & self.request.ready),
        ]
        # Set-up takes two cycles after the command is latched: the row's beat
        # counts from its length, then the first row's counts from those.
        with m.If(self.cmd.valid & self.cmd.ready):
            p = self.cmd.payload
            m.d.sync += [row_addr.eq(p.addr), start.eq(p.addr), rows_left.eq(p.rows), stride.eq(p.stride),
                         row_bytes.eq(p.row_bytes), setup.eq(1)]
        with m.If(setup):      # an empty transfer ends here
            m.d.sync += [setup.eq(0), counts.eq((rows_left != 0) & (row_bytes != 0)), next_row.eq(row_addr + stride),
                         row_beats.eq((row_bytes + B - 1) >> shift), row_beats_1.eq((row_bytes + 2 * B - 1) >> shift),
                         bytes_lo.eq((row_bytes + B - 1)[:shift] if shift else 0),
                         last_lo.eq((row_bytes - 1)[:shift] if shift else 0)]
        with m.If(counts):
            m.d.sync += [counts.eq(0), active.eq(1),
                         to_end.eq(beats_of_row(row_addr)), to_boundary.eq(beats_to_boundary(row_addr))]
        with m.If(self.request.valid & self.request.ready):
            with m.If(~last_in_row):
                # Both possible next starts are computed alongside the compares that choose between them.
                next_boundary = ((start >> BOUNDARY_SHIFT) + 1) << BOUNDARY_SHIFT
                with m.If(stops_at_boundary):
                    m.d.sync += [start.eq(next_boundary), to_end.eq(to_end - to_boundary),
                                 to_boundary.eq(page_beats)]
                with m.Else():
                    m.d.sync += [start.eq(aligned + limit * B), to_end.eq(to_end - limit),
                                 to_boundary.eq(to_boundary - limit)]
            with m.Elif(rows_left != 1):
                m.d.sync += [row_addr.eq(next_row), start.eq(next_row), next_row.eq(next_row + stride),
                             rows_left.eq(rows_left - 1),
                             to_end.eq(beats_of_row(next_row)), to_boundary.eq(beats_to_boundary(next_row))]
            with m.Else():
                m.d.sync += [rows_left.eq(0), active.eq(0)]

        if platform == "formal":
            self._prove_bursts_in_range(m, loaded=setup | counts | active, active=counts | active, row_addr=row_addr,
                                        stride=stride, row_bytes=row_bytes, rows_left=rows_left, row_done=last_in_row)
            with m.If(setup):
                m.d.comb += [Assert(start == row_addr), Assert(~counts & ~active)]
            with m.If(counts | active):
                m.d.comb += [
                    Assert(next_row == (row_addr + stride)[:bits]),
                    Assert(row_beats == (row_bytes + B - 1) >> shift),
                    Assert(row_beats_1 == (row_bytes + 2 * B - 1) >> shift),
                    Assert(bytes_lo == ((row_bytes + B - 1)[:shift] if shift else 0)),
                    Assert(last_lo == ((row_bytes - 1)[:shift] if shift else 0)),
                ]
            with m.If(counts):
                m.d.comb += [Assert(start == row_addr), Assert(~active)]
            with m.If(active):
                m.d.comb += [
                    Assert(start >= row_addr),
                    Assert((start == row_addr) | ((start[:shift] == 0) if shift else 1)),
                    Assert(to_end == ((row_addr + row_bytes + B - 1) >> shift) - (start >> shift)),
                    Assert(to_end != 0),
                    Assert(to_boundary == page_beats - start[shift:BOUNDARY_SHIFT]),
                ]
        return m


def compact_row_arithmetic(platform):
    """Whether a lean splitter built for ``platform`` computes each row's end and the next row's address
    as it needs them (the small FPGAs: fewer LUTs) rather than ahead in registers (a faster clock)."""
    return is_small_fpga(platform)


class _LeanBurstSplitter(_Splitter):
    """:class:`_BurstSplitter`'s ports, in a fraction of its logic, for slow clocks and small FPGAs.

    Bursts end where a row does or at the next block of :data:`LEAN_BURST_BEATS` beats, aligned: no
    burst crosses 4 KiB or exceeds 256 beats, but a long row takes more, shorter bursts. A burst's
    length comes from a subtraction in the cycle it leaves, and whether it ends its row from a compare
    registered the cycle before: bursts leave two cycles apart at least, and a command spends a cycle
    in set-up and one more before its first burst. Except on the small FPGAs (:func:`compact_row_arithmetic`), every address the next
    burst needs is one addition of registers: the next row and its last byte are kept in registers,
    each stepped by the stride as a row starts, so a row's end only chooses among registers. The two
    forms take the same cycles.
    """

    def elaborate(self, platform):
        m = Module()
        B, bits = self.bus_bytes, self.bits
        shift = B.bit_length() - 1
        block = LEAN_BURST_BEATS.bit_length() - 1
        compact = compact_row_arithmetic(platform)
        # (set by the command, read only while it runs: no reset)
        start = Signal(bits, reset_less=True)       # next byte to request in this row
        row_addr = Signal(bits, reset_less=True)
        stride = Signal(bits, reset_less=True)
        row_bytes = Signal(bits, reset_less=True)
        rows_left = Signal(ROWS_BITS, reset_less=True)
        setup = Signal()
        active = Signal()
        if compact:
            row_end = Signal(bits, reset_less=True)         # one past the row's last byte
            row_last = (row_end - 1)[:bits]
        else:
            row_last = Signal(bits, reset_less=True)        # the row's last byte
            next_row = Signal(bits, reset_less=True)        # row_addr + stride, ready before the row ends
            next_last = Signal(bits, reset_less=True)       # next_row + row_span: its last byte
            row_span = Signal(bits, reset_less=True)        # row_bytes - 1

        beat = start[shift:]                               # the burst's first beat
        final_beat = row_last[shift:]                      # the row's last beat
        block_end = beat | ((1 << block) - 1)              # the last beat of the aligned block
        # Whether the burst ends the row (the row's last beat lies in the burst's block, `start` never
        # being past it) is a register, compared a cycle after `start` or the row moves: it chooses the
        # burst's length and every register's next value (on the 85F at 100 MHz the compare, the length
        # and those choices took 13 ns). `settled` says it is current; a burst leaves only then, so
        # bursts are two cycles apart at least (a burst of one beat is the only one that loses by it).
        last_in_row = Signal()
        settled = Signal()
        # (and, registered as settled says, whether the row is the last: a flip-flop, not a compare of the
        # row count, in front of the next row's registers' enables)
        final_row = Signal()
        m.d.sync += [last_in_row.eq(final_beat[block:] == beat[block:]), final_row.eq(rows_left == 1),
                     settled.eq(1)]
        last_beat = Mux(last_in_row, final_beat, block_end)
        beats = (last_beat - beat + 1)[:block + 1]
        m.d.comb += [
            self.busy.eq(active | setup),
            self.cmd.ready.eq(~active & ~setup),
            self.request.payload.addr.eq(beat << shift),
            self.request.payload.beats.eq(beats),
            self.burst.payload.beats.eq(beats),
            self.burst.payload.lo.eq(start[:shift] if shift else 0),
            self.burst.payload.hi.eq(Mux(last_in_row, row_last[:shift] + 1 if shift else 1, B)),
            self.burst.payload.last.eq(last_in_row & final_row),
            self.request.valid.eq(active & settled & self.burst.ready),
            self.burst.valid.eq(active & settled & self.request.ready),
        ]
        with m.If(setup | (self.request.valid & self.request.ready)):
            m.d.sync += settled.eq(0)
        # Idle, the registers take the command's fields whether it is offered or not: their enables then
        # come from flip-flops, not from the client's decision to go (on the 85F at 100 MHz the store's
        # range check reached them through it, 11.4 ns).
        with m.If(self.cmd.ready):
            p = self.cmd.payload
            m.d.sync += [row_addr.eq(p.addr), start.eq(p.addr), stride.eq(p.stride), row_bytes.eq(p.row_bytes),
                         rows_left.eq(p.rows)]
            m.d.sync += row_end.eq(p.addr + p.row_bytes) if compact else row_span.eq(p.row_bytes - 1)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += setup.eq(1)
        with m.If(setup):          # an empty transfer ends here
            m.d.sync += [setup.eq(0), active.eq((rows_left != 0) & (row_bytes != 0))]
            if not compact:
                m.d.sync += [row_last.eq(row_addr + row_span), next_row.eq(row_addr + stride),
                             next_last.eq(row_addr + stride + row_span)]
        with m.If(self.request.valid & self.request.ready):
            with m.If(~last_in_row):
                m.d.sync += start.eq((block_end + 1) << shift)      # (the burst ended at its block's end)
            with m.Elif(~final_row):
                if compact:
                    following = row_addr + stride
                    m.d.sync += [row_addr.eq(following), start.eq(following), row_end.eq(following + row_bytes)]
                else:
                    m.d.sync += [row_addr.eq(next_row), start.eq(next_row), next_row.eq(next_row + stride),
                                 row_last.eq(next_last), next_last.eq(next_last + stride)]
                m.d.sync += rows_left.eq(rows_left - 1)
            with m.Else():
                m.d.sync += [rows_left.eq(0), active.eq(0)]

        if platform == "formal":
            self._prove_bursts_in_range(m, loaded=setup | active, active=active, row_addr=row_addr, stride=stride,
                                        row_bytes=row_bytes, rows_left=rows_left, row_done=last_in_row)
            if compact:
                with m.If(setup | active):
                    m.d.comb += Assert(row_end == (row_addr + row_bytes)[:bits])
            with m.If(setup):
                m.d.comb += [Assert(start == row_addr), Assert(~active)]
            with m.If(active):
                m.d.comb += [Assert(start >= row_addr), Assert(start < row_end if compact else start <= row_last),
                             Assert((start == row_addr) | ((start[:shift] == 0) if shift else 1))]
                with m.If(settled):
                    m.d.comb += [Assert(last_in_row == (final_beat <= block_end)),
                                 Assert(final_row == (rows_left == 1))]
                if not compact:
                    m.d.comb += [Assert(row_span == (row_bytes - 1)[:bits]),
                                 Assert(row_last == (row_addr + row_span)[:bits]),
                                 Assert(next_row == (row_addr + stride)[:bits]),
                                 Assert(next_last == (next_row + row_span)[:bits])]
        return m


class RowReader(wiring.Component):
    """Reads a 2D transfer and emits its data beats tagged with their valid bytes, in bursts of at most
    ``max_beats`` beats (AXI's 256 unless asked for fewer; ``lean``: :data:`LEAN_BURST_BEATS`), up to
    ``outstanding`` of them in flight. ``timing_registers`` false leaves out the skid buffers on AR and
    (``lean``) on the beats handed out.

    Members
    -------
    cmd : In(stream.Signature(TransferLayout(addr_width)))
        One transfer; accepted when idle.
    beats : Out(stream.Signature(...))
        ``data`` (one bus word), ``lo``/``hi`` (the transfer's bytes within it)
        and ``last`` (the transfer's final beat).
    axi : Out(AxiReadSignature)
        The read channels.
    busy : Out(1)
        A transfer is in progress (requests or data outstanding).
    error : Out(1)
        A read response of the current transfer was not OKAY.
    """

    def __init__(self, *, addr_width, data_width, outstanding=4, lean=False, max_beats=MAX_BURST_BEATS,
                 timing_registers=True):
        self.bus_bytes = data_width // 8
        self.addr_width = addr_width
        self.outstanding = outstanding
        self.lean, self.max_beats, self.timing_registers = lean, max_beats, timing_registers
        super().__init__({
            "cmd": In(stream.Signature(TransferLayout(addr_width))),
            "beats": Out(stream.Signature(BeatLayout(data_width))),
            "axi": Out(AxiReadSignature(addr_width=addr_width, data_width=data_width)),
            "busy": Out(1),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B = self.bus_bytes
        m.submodules.split = split = (
            _LeanBurstSplitter(addr_width=self.addr_width, bus_bytes=B) if self.lean else
            _BurstSplitter(addr_width=self.addr_width, bus_bytes=B, max_beats=self.max_beats))
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(
            width=len(split.burst.payload.as_value()), depth=self.outstanding)
        wiring.connect(m, wiring.flipped(self.cmd), split.cmd)
        unsent = _address_channel(m, self.axi, "ar", split, pending, B, skid=self.timing_registers)
        burst = data.View(_burst_layout(B), pending.r_data)
        beat = Signal(range(MAX_BURST_BEATS))
        first = beat == 0
        final = beat == burst.beats - 1
        # A lean reader (one for several units, on a board) hands its beats out through a skid buffer:
        # `rready` is then a flip-flop's, not the end of a client's logic deciding whether it takes a
        # beat (on the 85F at 100 MHz the loader's reached the memory's R register through it, 14.4 ns).
        beats = stream.Signature(BeatLayout(B * 8)).create(path=("beats_in",))
        if self.lean and self.timing_registers:
            m.submodules.beat_buffer = buffer = SkidBuffer(len(beats.payload.as_value()))
            m.d.comb += [buffer.i_valid.eq(beats.valid), buffer.i_payload.eq(beats.payload),
                         beats.ready.eq(buffer.i_ready), self.beats.valid.eq(buffer.o_valid),
                         self.beats.payload.eq(buffer.o_payload), buffer.o_ready.eq(self.beats.ready)]
            handed_out = buffer.o_valid
        else:
            m.d.comb += [self.beats.valid.eq(beats.valid), self.beats.payload.eq(beats.payload),
                         beats.ready.eq(self.beats.ready)]
            handed_out = C(0)
        m.d.comb += [
            beats.payload.data.eq(self.axi.rdata),
            beats.payload.lo.eq(Mux(first, burst.lo, 0)),
            beats.payload.hi.eq(Mux(final, burst.hi, B)),
            beats.payload.last.eq(final & burst.last),
            beats.valid.eq(self.axi.rvalid & pending.r_rdy),
            self.axi.rready.eq(beats.ready & pending.r_rdy),
            pending.r_en.eq(self.axi.rvalid & self.axi.rready & final),
        ]
        # Busy while splitting, and, from a register (a cycle late as a transfer ends), while a burst is
        # unsent, has beats due or a beat waits in the buffer: the reader's clients end their instructions
        # on it, and on the 85F at 100 MHz the pending count reached the streams' and the fault registers
        # through them.
        in_flight = pipe(m, split.busy | unsent | (pending.level != 0) | handed_out, "in_flight")
        m.d.comb += self.busy.eq(split.busy | in_flight)
        with m.If(self.axi.rvalid & self.axi.rready):
            m.d.sync += beat.eq(Mux(final, 0, beat + 1))
            with m.If(self.axi.rresp != RESP_OKAY):
                m.d.sync += self.error.eq(1)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += self.error.eq(0)
        return m


class ReaderShare(wiring.Component):
    """One :class:`RowReader` for several units: their transfers take turns, whole.

    A client's command is taken into a register while the slot is free,
    even while the reader serves another, and the reader takes it from
    there once idle: the clients' request logic ends in flip-flops, not in
    the reader's (on the 85F at 100 MHz the fetch unit's and the loader's
    requests reached the burst splitter's registers through the choice
    among them). The slot's turn passes from client to client each cycle it
    is free, so a client's ``ready`` is a flip-flop's, not a function of the
    other clients' requests (on the 85F the loader's request reached the
    fetch unit's address registers through it). A command that finds the
    share idle waits a cycle or two; one that waits behind another client's
    transfer loses nothing. Its client then
    owns the reader, its beats, ``busy`` and ``error``, until the reader is
    idle again. A client's ``error`` stays until its next command, as the
    reader's does. Every client must take its beats without waiting on
    another client (fetch asks only for what its buffer has room for, a LOAD
    writes its SRAM), so a transfer always finishes and no client starves.

    Members
    -------
    client_<k> : In(ReadClient) each
    reader : Out(ReadClient)
    """

    def __init__(self, *, count, addr_width, data_width):
        self.count = count
        members = {f"client_{k}": In(ReadClient(addr_width=addr_width, data_width=data_width)) for k in range(count)}
        members["reader"] = Out(ReadClient(addr_width=addr_width, data_width=data_width))
        super().__init__(members)

    def clients(self):
        return [getattr(self, f"client_{k}") for k in range(self.count)]

    def elaborate(self, platform):
        m = Module()
        clients, reader = self.clients(), self.reader
        held = Signal()                         # a command waits in `command`
        command = Signal.like(reader.cmd.payload, reset_less=True)
        turn = Signal(range(self.count))        # the client whose command the slot takes next
        # The client whose command is held: the turn moves on as it takes one and stays while held.
        held_for = [held & (turn == (k + 1) % self.count) for k in range(self.count)]
        owner = Signal(self.count)              # one-hot: the client the reader serves (or served last)
        running = Signal()                      # a transfer of the owner's is in the reader
        with m.If(~held):
            m.d.sync += turn.eq(Mux(turn == self.count - 1, 0, turn + 1))
            with m.Switch(turn):
                for k, client in enumerate(clients):
                    with m.Case(k):
                        # (the command is taken whether the client asks or not, and held only if it does: a
                        # client's `valid`, from its state, reached every bit's enable, 10.4 ns on the 85F at
                        # 100 MHz; only `held` depends on it now)
                        m.d.comb += client.cmd.ready.eq(1)
                        m.d.sync += [held.eq(client.cmd.valid), command.eq(client.cmd.payload)]
        m.d.comb += [reader.cmd.valid.eq(held & ~running), reader.cmd.payload.eq(command)]
        with m.If(reader.cmd.valid & reader.cmd.ready):
            m.d.sync += [held.eq(0), owner.eq(Cat(held_for)), running.eq(1)]
        with m.Elif(running & ~reader.busy):     # (a reader is busy from the cycle after it takes a command)
            m.d.sync += running.eq(0)
        for k, client in enumerate(clients):
            # The owner changes only while the reader is idle, so no beat or busy of another's is out: they
            # follow the one-hot flip-flop alone. (The reader's error stays after its transfer, until it
            # takes the next command: that of a running transfer only is the owner's.)
            mine = owner[k]
            failed = Signal(name=f"failed_{k}")
            fails = running & mine & reader.error
            with m.If(fails):
                m.d.sync += failed.eq(1)
            with m.If(client.cmd.valid & client.cmd.ready):
                m.d.sync += failed.eq(0)
            m.d.comb += [client.beats.payload.eq(reader.beats.payload),
                         client.beats.valid.eq(mine & reader.beats.valid),
                         client.busy.eq((mine & reader.busy) | held_for[k]),
                         client.error.eq(failed | fails)]
            with m.If(mine):
                m.d.comb += reader.beats.ready.eq(client.beats.ready)
        return m


class ElementPacker(wiring.Component):
    """Tagged beats in, elements of ``elem_bytes`` out, in order.

    An element larger than a beat is gathered from consecutive whole beats;
    a beat holding several elements yields them one per cycle, from ``lo``
    to ``hi``.
    """

    def __init__(self, *, elem_bytes, bus_bytes):
        self.elem_bytes, self.bus_bytes = elem_bytes, bus_bytes
        super().__init__({
            "beats": In(stream.Signature(BeatLayout(bus_bytes * 8))),
            "elements": Out(stream.Signature(elem_bytes * 8)),
        })

    def elaborate(self, platform):
        m = Module()
        E, B = self.elem_bytes, self.bus_bytes
        out = self.elements
        if E >= B:
            n = E // B
            parts = Signal(E * 8 - B * 8, reset_less=True) if n > 1 else None
            count = Signal(range(n))
            with m.If(out.valid & out.ready):
                m.d.sync += out.valid.eq(0)
            m.d.comb += self.beats.ready.eq(~out.valid | out.ready)
            with m.If(self.beats.valid & self.beats.ready):
                word = self.beats.payload.data
                if n == 1:
                    m.d.sync += [out.payload.eq(word), out.valid.eq(1)]
                else:
                    # Little-endian: the first beat holds the element's low bytes.
                    m.d.sync += parts.eq(Cat(parts[B * 8:], word))
                    with m.If(count == n - 1):
                        m.d.sync += [out.payload.eq(Cat(parts, word)), out.valid.eq(1), count.eq(0)]
                    with m.Else():
                        m.d.sync += count.eq(count + 1)
        else:
            slots = B // E
            word = Signal(B * 8, reset_less=True)
            slot = Signal(range(slots))
            stop = Signal(range(slots + 1))
            full = Signal()                      # a beat is held
            shift = E.bit_length() - 1
            last_slot = slot + 1 == stop
            taken = out.valid & out.ready
            m.d.comb += [
                out.payload.eq(word.word_select(slot, E * 8)),
                out.valid.eq(full),
                # The next beat may arrive in the cycle the last element leaves.
                self.beats.ready.eq(~full | (taken & last_slot)),
            ]
            with m.If(taken):
                with m.If(last_slot):
                    m.d.sync += full.eq(0)
                with m.Else():
                    m.d.sync += slot.eq(slot + 1)
            with m.If(self.beats.valid & self.beats.ready):
                m.d.sync += [word.eq(self.beats.payload.data), slot.eq(self.beats.payload.lo >> shift),
                             stop.eq(self.beats.payload.hi >> shift), full.eq(1)]
        return m


class RowWriter(wiring.Component):
    """Writes a 2D transfer from a stream of elements; ``busy`` until every B response is in.

    Members
    -------
    cmd : In(stream.Signature(TransferLayout(addr_width)))
    elements : In(stream.Signature(elem_bytes * 8))
        Exactly ``rows·row_bytes / elem_bytes`` elements, in order.
    axi : Out(AxiWriteSignature)
    busy : Out(1)
    error : Out(1)
        A write response of the current transfer was not OKAY.

    ``timing_registers`` false leaves out AW's skid buffer and, for elements of a beat or more, the
    register an element waits in for W: W's data is then the element offered, which must hold until it
    is taken (as a stream's payload does).
    """

    def __init__(self, *, addr_width, data_width, elem_bytes, outstanding=4, lean=False, timing_registers=True):
        self.bus_bytes = data_width // 8
        self.addr_width = addr_width
        self.elem_bytes = elem_bytes
        self.outstanding = outstanding
        self.lean, self.timing_registers = lean, timing_registers
        super().__init__({
            "cmd": In(stream.Signature(TransferLayout(addr_width))),
            "elements": In(stream.Signature(elem_bytes * 8)),
            "axi": Out(AxiWriteSignature(addr_width=addr_width, data_width=data_width)),
            "busy": Out(1),
            "error": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        B, E = self.bus_bytes, self.elem_bytes
        splitter = _LeanBurstSplitter if self.lean else _BurstSplitter
        m.submodules.split = split = splitter(addr_width=self.addr_width, bus_bytes=B)
        m.submodules.pending = pending = fifo.SyncFIFOBuffered(
            width=len(split.burst.payload.as_value()), depth=self.outstanding)
        wiring.connect(m, wiring.flipped(self.cmd), split.cmd)
        # Responses still to come: bursts whose address has been sent.
        responses = Signal(range(2 * self.outstanding + 2))
        aw_sent = self.axi.awvalid & self.axi.awready
        b_taken = self.axi.bvalid & self.axi.bready
        m.d.sync += responses.eq(responses + aw_sent - b_taken)
        unsent = _address_channel(m, self.axi, "aw", split, pending, B, room=responses < self.outstanding,
                                  skid=self.timing_registers)
        # `busy` is a flip-flop, set a cycle ahead: the STORE's drain took the OR of these into its state,
        # 10.4-10.8 ns on the 85F at 100 MHz. Whatever is busy now leaves something busy next cycle (a
        # burst split is unsent or pending, a pending burst's address went first so its response is due),
        # but for the last response, taken now: so the writer is idle next cycle exactly when nothing but
        # at most that response is left and no command is taken. That needs AXI's order (a response
        # comes after its burst's last beat) and a transfer of a burst at least (the STORE sends no empty
        # one); otherwise `busy` only stays a cycle longer. The test bench checks the cycle it drops,
        # the formal property (`axi_stable`) that it never drops early.
        sending = split.busy | unsent | (pending.level != 0)     # (all but the responses)
        idle_next = (~(self.cmd.valid & self.cmd.ready) & ~sending
                     & ((responses == 0) | ((responses == 1) & b_taken)))
        m.d.sync += self.busy.eq(~idle_next)
        if platform == "formal":
            # (the subordinate answers only bursts it accepted)
            m.d.comb += [Assume(~self.axi.bvalid | (responses != 0)), Assert(responses <= self.outstanding),
                         Assert(self.busy | ~(sending | (responses != 0)), "busy never drops early")]
        m.d.comb += self.axi.bready.eq(1)
        with m.If(b_taken & (self.axi.bresp != RESP_OKAY)):
            m.d.sync += self.error.eq(1)
        with m.If(self.cmd.valid & self.cmd.ready):
            m.d.sync += self.error.eq(0)

        burst = data.View(_burst_layout(B), pending.r_data)
        beat = Signal(range(MAX_BURST_BEATS))
        first = beat == 0
        final = beat == burst.beats - 1
        lo = Mux(first, burst.lo, 0)
        hi = Mux(final, burst.hi, B)
        send = self.axi.wvalid & self.axi.wready
        m.d.comb += [self.axi.wlast.eq(final), pending.r_en.eq(send & final)]
        with m.If(send):
            m.d.sync += beat.eq(Mux(final, 0, beat + 1))

        if E >= B:
            n = E // B
            part = Signal(range(n)) if n > 1 else Const(0)
            last_part = (part == n - 1) if n > 1 else Const(1)
            if n > 1:
                with m.If(send & ~last_part):
                    m.d.sync += part.eq(part + 1)
            if self.timing_registers:
                held = Signal(E * 8, reset_less=True)
                have = Signal()
                m.d.comb += [
                    self.axi.wvalid.eq(have & pending.r_rdy),
                    # The next element may arrive in the cycle the last part goes out.
                    self.elements.ready.eq(~have | (send & last_part)),
                ]
                with m.If(send & last_part):
                    m.d.sync += have.eq(0)
                with m.If(self.elements.valid & self.elements.ready):
                    m.d.sync += [held.eq(self.elements.payload), have.eq(1)]
                    if n > 1:
                        m.d.sync += part.eq(0)
            else:       # (the element holds until its last part is sent)
                held = self.elements.payload
                m.d.comb += [self.axi.wvalid.eq(self.elements.valid & pending.r_rdy),
                             self.elements.ready.eq(send & last_part)]
                if n > 1:
                    with m.If(send & last_part):
                        m.d.sync += part.eq(0)
            m.d.comb += [self.axi.wdata.eq(held.word_select(part, B * 8) if n > 1 else held),
                         self.axi.wstrb.eq(2 ** B - 1)]
        else:
            slots = B // E
            shift = E.bit_length() - 1
            word = Signal(B * 8, reset_less=True)
            strobe = Signal(slots)
            slot = Signal(range(slots + 1))      # next slot to fill in this beat
            filled = Signal()                    # the beat is complete and waits for W
            start_slot = lo >> shift
            stop_slot = hi >> shift
            current = Mux(slot < start_slot, start_slot, slot)
            m.d.comb += [
                self.axi.wdata.eq(word),
                self.axi.wstrb.eq(Cat(s.replicate(E) for s in strobe)),
                self.axi.wvalid.eq(filled),
                self.elements.ready.eq(~filled & pending.r_rdy),
            ]
            with m.If(self.elements.valid & self.elements.ready):
                m.d.sync += [word.word_select(current, E * 8).eq(self.elements.payload),
                             strobe.bit_select(current, 1).eq(1)]
                with m.If(current + 1 == stop_slot):
                    m.d.sync += [filled.eq(1), slot.eq(0)]
                with m.Else():
                    m.d.sync += slot.eq(current + 1)
            with m.If(send):
                m.d.sync += [filled.eq(0), strobe.eq(0)]
            if platform == "formal":
                m.d.comb += Assert(~filled | pending.r_rdy)     # a complete beat has its burst
        return m
