"""The queue behind the command queues and the fetch buffer: its head is a flip-flop register.

Their heads feed decode logic directly, so the head must not come out of a
block RAM (an ECP5 DP16KD's clock-to-out is 5.6 ns of a 10 ns cycle: the
command queues' instruction fields reached the store's multipliers that
way). A queue of up to :data:`LUTRAM_DEPTH` entries is built like
Amaranth's ``SyncFIFOBuffered`` on a memory marked for LUT RAM where the
device has it (ECP5; Gowin chooses its shadow SRAM by itself), whose read
register is then a fabric register; a deeper one keeps all but two entries
in a block RAM read from flip-flops alone, the next entry in a register
ahead of the head, and the head (``_block_ram``; one cycle more from write
to head). The attribute changes the mapping only: simulation and
every device behave alike.

On the Gowin (``registered_head=False``, chosen by the platform) the head
is the LUT RAM's asynchronous read instead: a first-word-fall-through FIFO
one cycle quicker from write to head. A Gowin flip-flop fed by anything
but its own slice's LUT costs a LUT site of its own, and the registered
heads of the command queues and the fetch buffer were 550 of them; its
board clock (27 MHz) leaves the decode logic time to read the RAM.

A queue given a ``decode`` function also presents ``r_decoded``, always
``decode(r_data)``. Where the head is a register after the LUT RAM's
asynchronous read (the ECP5), the entry next in line waits in a register
behind the head, and its decoding is registered beside the head as it
moves in: whatever acts on the head (the fetch unit's dispatch pops it)
starts from flip-flops, not from decode logic, and the decoding too.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from .dsp import is_ecp5, is_gowin
from .sram import never_reads_while_written

__all__ = ["HeadRegisteredFIFO", "LUTRAM_DEPTH", "head_registered_on"]

#: The deepest queue kept in LUT RAM.
LUTRAM_DEPTH = 64


def head_registered_on(platform):
    """Whether a :class:`HeadRegisteredFIFO` built for ``platform`` registers its head by default (all but
    the Gowin: see above)."""
    return not is_gowin(platform)


def _advanced(pointer, depth):
    """``pointer + 1`` modulo ``depth``."""
    if depth == 1:
        return 0
    return pointer + 1 if depth & (depth - 1) == 0 else Mux(pointer == depth - 1, 0, pointer + 1)


class HeadRegisteredFIFO(wiring.Component):
    """``depth`` entries of ``width`` bits whose ``r_data`` is a register (but on the Gowin, see above).

    The ports are those of Amaranth's FIFOs (``w_data``, ``w_en``, ``w_rdy``,
    ``r_data``, ``r_en``, ``r_rdy``, ``level``), and ``behind``: an entry
    waits behind the head (``level > r_rdy``), from flags rather than the
    sum that makes ``level``. With ``lanes > 1`` an entry is written a lane
    (``width / lanes`` bits, lowest first) at a time, into the memory itself
    (its write port's granularity): ``w_data`` is one lane,
    each ``w_en`` writes the next, and the entry enters the queue with its
    last lane (``w_rdy``: there is room for a whole entry). ``depth`` is then
    at most :data:`LUTRAM_DEPTH`. ``written`` pulses as an entry enters.

    ``decode`` (an entry's value to one of ``decoded_width`` bits) adds
    ``r_decoded``, ``decode(r_data)`` (see above). ``lutram`` chooses whether
    the memory is LUT RAM read asynchronously (default: on the ECP5).

    ``pop_copies`` (``n``) adds ``r_en_copies``, ``n`` bits the reader keeps
    each equal to ``r_en`` (registers of its own, placed apart): where the
    head is a fabric register loaded on a pop (a queue without ``decode``,
    not a block RAM's read register or a fall-through read), it is loaded
    in ``n`` slices, each on its copy, so that no one net enables the whole
    head.
    """

    def __init__(self, *, width, depth, registered_head=None, lanes=1, decode=None, decoded_width=0,
                 lutram=None, pop_copies=0):
        if depth < 2:
            raise ValueError(f"HeadRegisteredFIFO depth must be at least 2, not {depth}")
        if width % lanes or (lanes > 1 and depth > LUTRAM_DEPTH):
            raise ValueError(f"{lanes} lanes need a width they divide ({width}) and a depth up to {LUTRAM_DEPTH}")
        self.width, self.depth, self.lanes = width, depth, lanes
        self.registered_head = registered_head       # None: all but the Gowin
        self.lutram = lutram                         # None: the ECP5 (LUT RAM read asynchronously)
        self.decode = decode
        self.pop_copies = pop_copies
        members = {"w_data": In(width // lanes), "w_en": In(1), "w_rdy": Out(1), "written": Out(1),
                   "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1), "level": Out(range(depth + 1)),
                   "behind": Out(1)}
        if decode is not None:
            members["r_decoded"] = Out(decoded_width)
        if pop_copies:
            members["r_en_copies"] = In(pop_copies)
        super().__init__(members)

    def _head_slices(self):
        """The head's slices, each with the pop it loads on: one per copy of ``r_en`` (``pop_copies``),
        else the whole head on ``r_en``. Returns ``(bits, pop, copy)`` per slice, ``copy`` its number."""
        if not self.pop_copies:
            return [(slice(0, self.width), self.r_en, None)]
        bounds = [self.width * k // self.pop_copies for k in range(self.pop_copies + 1)]
        return [(slice(bounds[k], bounds[k + 1]), self.r_en_copies[k], k) for k in range(self.pop_copies)]

    def _decoded(self, m, entry, *, load=None):
        """``r_decoded`` from ``entry``: ``decode(entry)``, or with ``load`` a register taking it then."""
        if self.decode is None:
            return
        if load is None:
            m.d.comb += self.r_decoded.eq(self.decode(entry))
            return
        decoded = Signal.like(self.r_decoded, reset_less=True)      # (read only beside r_rdy)
        with m.If(load):
            m.d.sync += decoded.eq(self.decode(entry))
        m.d.comb += self.r_decoded.eq(decoded)

    def _writer(self, m, storage, produce):
        """The memory's write port at entry ``produce``; returns the condition that completes an entry.

        The free entry at ``produce`` (its lane) is written every cycle there is room, whatever ``w_en``
        says: it joins the queue only as ``produce`` moves past it, on ``w_en``, whose write is the last.
        So the writer's handshake reaches the pointers and counts alone, not the enables of every bit
        (on the 85F at 100 MHz fetch's dispatch reached a command queue's 160 through it, 12.1 ns).
        """
        w_port = storage.write_port(granularity=self.width // self.lanes)
        m.d.comb += [w_port.addr.eq(produce), w_port.data.eq(self.w_data.replicate(self.lanes))]
        if self.lanes == 1:
            m.d.comb += [w_port.en.eq(self.w_rdy), self.written.eq(self.w_en & self.w_rdy)]
            return self.written
        lane = Signal(range(self.lanes))
        last = lane == self.lanes - 1
        m.d.comb += [w_port.en.eq(Mux(self.w_rdy, 1 << lane, 0)),
                     self.written.eq(self.w_en & self.w_rdy & last)]
        with m.If(self.w_en & self.w_rdy):
            m.d.sync += lane.eq(Mux(last, 0, lane + 1))
        return self.written

    def elaborate(self, platform):
        m = Module()
        if self.depth > LUTRAM_DEPTH:
            return self._block_ram(m)

        registered = self.registered_head if self.registered_head is not None else head_registered_on(platform)
        if not registered:
            return self._fall_through(m)

        # As SyncFIFOBuffered: a memory of depth - 1 entries whose read register is the head (in LUT RAM:
        # a register after its asynchronous read, and the decoding's register beside it).
        lutram = self.lutram if self.lutram is not None else is_ecp5(platform)
        if lutram and self.decode is not None and self.depth >= 3:
            return self._decoded_behind(m)
        r_port, stored, any_stored, consumed = self._ring(m, self.depth - 1, lutram=lutram)
        def reads(pop):     # (the memory's oldest entry into the head, on `pop` or a copy of it)
            return any_stored & (~self.r_rdy | pop)
        read_inner = reads(self.r_en)
        consumed(read_inner)
        m.d.comb += [self.level.eq(stored + self.r_rdy), self.behind.eq(any_stored)]
        if lutram:
            head = Signal(self.width, reset_less=True)
            for bits, pop, _ in self._head_slices():
                with m.If(reads(pop)):
                    m.d.sync += head[bits].eq(r_port.data[bits])
            m.d.comb += self.r_data.eq(head)
            self._decoded(m, r_port.data, load=read_inner)
        else:
            m.d.comb += [r_port.en.eq(read_inner), self.r_data.eq(r_port.data)]
            self._decoded(m, r_port.data)
        with m.If(read_inner):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(self.r_en):
            m.d.sync += self.r_rdy.eq(0)
        return m

    def _ring(self, m, depth, *, lutram):
        """The memory of ``depth`` entries behind a registered head, with its write side (``w_rdy`` and
        the write pointer) and its read pointer. Returns ``(r_port, stored, any_stored, consumed)``, where
        ``any_stored`` is ``stored != 0`` as a register and ``consumed(read)`` (called once) moves the read
        pointer and the count on the cycles ``read`` holds. A LUT RAM is read asynchronously; otherwise the
        read is synchronous, and of a stored entry only (writes fill a free one)."""
        m.submodules.storage = storage = Memory(shape=self.width, depth=depth, init=[],
                                                attrs={"ram_style": "distributed"} if lutram else None)
        r_port = storage.read_port(domain="comb" if lutram else "sync")
        produce, consume = Signal(range(depth)), Signal(range(depth))
        stored = Signal(range(depth + 1))
        room = Signal(init=1)       # stored != depth, a register: the writer's whole dispatch waits on it
        any_stored = Signal()       # stored != 0, a register: the reads and `behind` start from it
        write = self._writer(m, storage, produce)
        if not lutram:
            never_reads_while_written(storage)
        m.d.comb += [self.w_rdy.eq(room), r_port.addr.eq(consume)]
        with m.If(write):
            m.d.sync += produce.eq(_advanced(produce, depth))

        def consumed(read):
            with m.If(read):
                m.d.sync += consume.eq(_advanced(consume, depth))
            # (full next from two compares of the count made beside `write` and `read`, which come late:
            # on the 85F at 100 MHz the dispatch reached `room` through the sum, 11.1 ns; a write needs room)
            fills = write & ~read & (stored == depth - 1)
            stays_full = ~read & (stored == depth)
            empties = read & ~write & (stored == 1)
            stays_empty = ~write & ~any_stored
            m.d.sync += [stored.eq(stored + write - read), room.eq(~(fills | stays_full)),
                         any_stored.eq(~(empties | stays_empty))]
        return r_port, stored, any_stored, consumed

    def _decoded_behind(self, m):
        """LUT RAM of ``depth - 2`` entries, a register ``behind`` the head, and the head with its decoding.

        The decoding is done on ``behind`` (a flip-flop register) as it moves into the head, not on the
        LUT RAM's asynchronous read: on the 85F at 100 MHz the read of a 128-bit entry, spread over 32
        LUT RAMs, and the decoding after it took 13.6 ns. From write to head it takes a cycle more.
        ``behind`` is refilled only once empty, from flip-flops alone, and so is the head: a pop (``r_en``,
        which comes from the dispatch) empties the head and reaches no further (on the 85F at 100 MHz the
        pop reached ``behind``'s 128 enables and the LUT RAM's read side, 11.4-11.7 ns, then the head's,
        10.3-11.9 ns). Entries then leave an entry every two cycles, as the block RAM queues' do; the
        streams take far fewer.
        """
        r_port, stored, any_stored, consumed = self._ring(m, self.depth - 2, lutram=True)
        behind = Signal(self.width, reset_less=True)       # (not the port `self.behind`)
        behind_valid = Signal()
        head = Signal(self.width, reset_less=True)
        head_free = ~self.r_rdy | self.r_en
        moves = behind_valid & ~self.r_rdy                  # `behind` into the head
        read = any_stored & ~behind_valid       # the LUT RAM's oldest entry into `behind`
        consumed(read)
        m.d.comb += [self.r_data.eq(head), self.level.eq(stored + behind_valid + self.r_rdy),
                     self.behind.eq(any_stored | behind_valid)]
        self._decoded(m, behind, load=moves)
        with m.If(read):
            m.d.sync += [behind.eq(r_port.data), behind_valid.eq(1)]
        with m.Elif(moves):
            m.d.sync += behind_valid.eq(0)
        with m.If(moves):
            m.d.sync += [head.eq(behind), self.r_rdy.eq(1)]
        with m.Elif(head_free):
            m.d.sync += self.r_rdy.eq(0)
        return m

    def _block_ram(self, m):
        """``depth - 2`` entries in a block RAM, one ``ahead`` of the head in a register, and the head.

        The block RAM's read is issued from flip-flops alone (entries stored, none in ``ahead`` or on
        its way): a pop (``r_en``, which comes from a stream's sequencer) moves ``ahead``, or the entry
        arriving, into the head, and reaches no further. (On the 85F at 100 MHz the pop reached the
        block RAMs' enables, spread along a row, through the queue's own read logic.) One read is in
        flight at a time, an entry every two cycles, while a stream takes an instruction every three
        at most; from write to head it takes three cycles, as before. A full queue takes a write two
        cycles after a pop (a block RAM entry is freed as it is read, into ``ahead``), one later than
        before.
        """
        r_port, stored, any_stored, consumed = self._ring(m, self.depth - 2, lutram=False)
        ahead = Signal(self.width, reset_less=True)
        ahead_valid = Signal()
        arriving = Signal()                     # the entry read last cycle is on `r_port.data`
        head = Signal(self.width, reset_less=True)
        # (`ahead` is empty when an entry arrives: a read is issued only then, and only an arrival fills it)
        issue = any_stored & ~ahead_valid & ~arriving
        head_free = ~self.r_rdy | self.r_en

        def loads(pop, valid):      # (the head, or a slice of it, takes an entry: on `pop` or a copy of it)
            return (~self.r_rdy | pop) & (valid | arriving)
        load = loads(self.r_en, ahead_valid)
        consumed(issue)
        m.d.comb += [r_port.en.eq(issue), self.r_data.eq(head),
                     self.level.eq(stored + arriving + ahead_valid + self.r_rdy),
                     self.behind.eq(any_stored | arriving | ahead_valid)]
        self._decoded(m, Mux(ahead_valid, ahead, r_port.data), load=load)
        m.d.sync += arriving.eq(issue)
        with m.If(load):
            m.d.sync += self.r_rdy.eq(1)
        with m.Elif(head_free):
            m.d.sync += self.r_rdy.eq(0)
        # Each slice of the head takes `ahead` or the entry arriving as its own copy of `ahead_valid` says
        # (on the 85F at 100 MHz the one register choosing for all 160 bits took 11 ns), and each slice of
        # `ahead` takes the block RAM's output while that copy says it is empty, so every entry arriving,
        # wanted or not: its enables are flip-flops beside it, not the pop (and not `arriving`, which
        # reached all 160 through 10.6 ns).
        valids = [ahead_valid]
        for bits, pop, copy in self._head_slices():
            valid = ahead_valid
            if copy is not None:
                valid = Signal(name=f"ahead_valid_replica{copy}")
                valids.append(valid)
            with m.If(~valid):
                m.d.sync += ahead[bits].eq(r_port.data[bits])
            with m.If(loads(pop, valid)):
                m.d.sync += head[bits].eq(Mux(valid, ahead[bits], r_port.data[bits]))
        for valid in valids:
            with m.If(load):
                m.d.sync += valid.eq(0)
            with m.If(arriving & ~head_free):
                m.d.sync += valid.eq(1)
        return m

    def _fall_through(self, m):
        """All ``depth`` entries in the memory; the head is its asynchronous read at the oldest entry."""
        m.submodules.storage = storage = Memory(shape=self.width, depth=self.depth, init=[])
        r_port = storage.read_port(domain="comb")
        produce, consume = Signal(range(self.depth)), Signal(range(self.depth))
        write, read = self._writer(m, storage, produce), self.r_en & self.r_rdy
        m.d.comb += [self.w_rdy.eq(self.level != self.depth), self.r_rdy.eq(self.level != 0),
                     self.behind.eq(self.level > 1), r_port.addr.eq(consume), self.r_data.eq(r_port.data)]
        self._decoded(m, r_port.data)
        with m.If(write):
            m.d.sync += produce.eq(_advanced(produce, self.depth))
        with m.If(read):
            m.d.sync += consume.eq(_advanced(consume, self.depth))
        m.d.sync += self.level.eq(self.level + write - read)
        return m
