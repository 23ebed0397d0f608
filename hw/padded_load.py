"""LOADs of a stream: 2D DMA reads into zero-padded SRAM rectangles."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ERROR_BITS, ErrorCode, MemType

from .arbiter import next_in_turn
from .dma import ElementPacker, ReadClient
from .dsp import is_small_fpga
from .pipe import pipe, replicas
from .register_slice import SkidBuffer
from .sram import acc_loads_by_lane, load_granularity, rows_per_entry, sram_addr_bits, sram_shape
from .transfer_check import MAX_EXTENT, TransferCheck

__all__ = ["PaddedLoad", "LoadRequest", "LoadShare", "one_of"]


def one_of(selected, values):
    """The value whose ``selected`` bit is set (one-hot select: an AND-OR, no priority chain)."""
    result = 0
    for bit, value in zip(selected, values):
        result = result | Mux(bit, value, 0)
    return result


class LoadRequest(wiring.Signature):
    """A stream's side of a LOAD executor: the instruction, a start pulse, and the outcome.

    ``insn`` stays stable from the cycle before ``start`` until ``done``; ``error`` and
    ``bytes_read`` are valid with ``done`` and, for ``bytes_read``, until
    the next ``start``.
    """

    def __init__(self, cfg):
        super().__init__({"insn": Out(isa.instruction_layouts(cfg)[isa.Opcode.LOAD]), "start": Out(1),
                          "done": In(1), "error": In(ERROR_BITS), "bytes_read": In(32)})


class PaddedLoad(wiring.Component):
    """Executes the LOADs of one stream, whatever their memory type.

    Writes ``(y_pad0 + y_size + y_pad1) × (x_pad0 + x_size + x_pad1)``
    consecutive SRAM entries from ``sram_base``, one per cycle (an entry of
    several rows, a row per cycle: a weight entry's ``block_out`` with
    ``wgt_rows_by_lane``, an accumulator entry's lanes with ``acc_rows_by_lane``):
    zeros in the padding, DRAM elements in the data rectangle (row ``r`` from element
    ``dram_base + r·x_stride``). A rectangle that leaves the buffer stops
    with ``SRAM_RANGE`` before anything moves; a DRAM address beyond the bus
    or an error response ends with ``BUS_ERROR``.

    A stream runs one instruction at a time, so its memory types share the
    checks, the address arithmetic and the reader; only the element
    packers (one per element size) and the write ports (one per buffer) are
    separate. With ``lean`` the load and compute streams share one
    (through :class:`LoadShare`), and it shares its reader with fetch.

    Parameters
    ----------
    cfg : HwConfig
    memory_types : sequence of MemType
        What this unit loads. Each type's DRAM element
        (``memory_type.dram_elem``) and SRAM buffer (``memory_type.buffer``)
        size everything else; ACC8 elements are sign-extended into ACC
        entries, every other type is copied bit for bit.

    Members
    -------
    request : In(LoadRequest)
        The instruction (its memory type one of ``memory_types``) and its outcome.
    write_<buffer> : In(WritePort.Signature)
        One SRAM write port per buffer the memory types target.
    read : Out(ReadClient)
        The :class:`~.dma.RowReader` its transfers go to (a command waits until it is taken).
    """

    def __init__(self, cfg, memory_types, *, addr_width):
        self.memory_types = tuple(memory_types)
        self.elem_bytes = {mt: cfg.elem_bytes(mt.dram_elem) for mt in self.memory_types}
        self.depth = {mt: cfg.depth(mt.buffer) for mt in self.memory_types}
        self.buffers = sorted({mt.buffer for mt in self.memory_types})
        self.index_bits = max(cfg.index_bits(b) for b in self.buffers)
        self.cfg = cfg
        self.acc_lanes = cfg.lanes("acc")
        self.lean = cfg.lean
        self.addr_width, self.data_width = addr_width, cfg.dram_bus_width
        members = {
            "request": In(LoadRequest(cfg)),
            "read": Out(ReadClient(addr_width=addr_width, data_width=self.data_width)),
        }
        for b in self.buffers:
            members[f"write_{b}"] = In(WritePort.Signature(addr_width=sram_addr_bits(cfg, b),
                                                            shape=sram_shape(cfg, b),
                                                            granularity=load_granularity(cfg, b)))
        super().__init__(members)

    def _entry(self, memory_type, data):
        """What ``data`` (whole DRAM elements of ``memory_type``, or a bus-wide slice of one) becomes in
        SRAM: ACC8's bytes sign-extended to accumulators, every other type bit for bit."""
        if memory_type != MemType.ACC8:
            return data
        width = self.acc_lanes[1]
        return Cat(Cat(data[8 * k:8 * k + 8], data[8 * k + 7].replicate(width - 8)) for k in range(len(data) // 8))

    def elaborate(self, platform):
        m = Module()
        request = self.request
        insn, types = request.insn, self.memory_types
        B = self.data_width // 8
        reader = self.read
        shifts = [self.elem_bytes[mt].bit_length() - 1 for mt in types]
        # (the bus holds at most 2**(addr_width - shift) elements of a type)
        m.submodules.check = check = TransferCheck(sram_bits=len(insn.sram_base), serial=self.lean,
                                                   limit_bits=self.addr_width - min(shifts),
                                                   compact=self.cfg.slow_clock)

        # The instruction's memory type, one-hot, and what it implies: a register computed every cycle (the
        # instruction is stable from the cycle before the start; a shared loader's comes from a register
        # of the load share, far from the checks and the command it chooses among: 10.3-11.6 ns on the 85F).
        selected = pipe(m, Cat(insn.memory_type == mt for mt in types), "selected", data=True)
        # The same, registered as the LOAD starts: the paths that move beats and write entries decode a
        # register of their own, not the instruction (which a shared loader selects among streams).
        moving = Signal.like(selected, reset_less=True)
        # What an entry is written from: a DRAM element, or a bus-wide slice of one (`slices` of them), or
        # with `acc_loads_by_lane` an ACC8 element's bytes, a lane each, from its beat (a beat each: the bus
        # is one accumulator wide), taken as its last byte is written.
        by_lane = {mt: mt == MemType.ACC8 and acc_loads_by_lane(self.cfg) for mt in types}
        # An entry of several rows (`wgt_rows_by_lane`: a WGT entry's `block_out`, a beat each; `acc_rows_by_lane`:
        # an ACC or ACC8 entry's lanes, its slices or its bytes) is written a row a write, a padded one too (zeros).
        by_rows = {mt: rows_per_entry(self.cfg, mt.buffer) > 1 for mt in types}
        slices = [self.acc_lanes[0] if by_lane[mt] else max(1, self.elem_bytes[mt] // B) for mt in types]

        def per_type(values, one_hot=selected):
            return one_of(one_hot, values)

        def uses(predicate):
            return Cat(moving[k] for k, mt in enumerate(types) if predicate(mt)).any()

        # Elements smaller than a beat come through a packer (one per size), several per beat; a beat of a
        # larger element is one slice of its SRAM entry and is written as it arrives.
        packers = {}
        for E in sorted({E for E in self.elem_bytes.values() if E < B}):
            packers[E] = m.submodules[f"packer_{E}"] = ElementPacker(elem_bytes=E, bus_bytes=B)
            m.d.comb += [packers[E].beats.payload.eq(reader.beats.payload),
                         packers[E].beats.valid.eq(reader.beats.valid & uses(lambda mt: self.elem_bytes[mt] == E))]
            with m.If(uses(lambda mt: self.elem_bytes[mt] == E)):
                m.d.comb += reader.beats.ready.eq(packers[E].beats.ready)
        direct = uses(lambda mt: self.elem_bytes[mt] >= B)
        sources = [(packers[E].elements.valid, packers[E].elements.payload) if E < B
                   else (reader.beats.valid, reader.beats.payload.data) for E in (self.elem_bytes[mt] for mt in types)]
        element_valid = per_type([valid for valid, _ in sources], moving)
        word = per_type([payload for _, payload in sources], moving)     # an element (below a beat) or a beat
        taking = Signal()           # the walk takes the element this cycle
        skid = self.lean and not self.cfg.slow_clock
        if skid:
            # A lean loader's walk takes its elements from a skid buffer: whether an entry is done, which
            # steps the walk's counters and flags, starts from flip-flops, not from the choice among the
            # sources by memory type (on the 85F at 100 MHz, 12-13 ns into those enables), and the sources
            # see a flip-flop's `ready`. A LOAD's data comes a cycle later.
            m.submodules.element_buffer = buffer = SkidBuffer(B * 8)
            m.d.comb += [buffer.i_valid.eq(element_valid), buffer.i_payload.eq(word), buffer.o_ready.eq(taking)]
            element_valid, word = buffer.o_valid, buffer.o_payload

        # The padded sizes, registers computed every cycle from the instruction, which is stable a cycle
        # before the start (on the 85F at 100 MHz their adders lay between the instruction and the range
        # check's operands, 11 ns)
        rows = Signal(range(MAX_EXTENT), reset_less=True)
        cols = Signal(range(MAX_EXTENT), reset_less=True)
        m.d.sync += [rows.eq(isa.padded_rows(insn)), cols.eq(isa.padded_cols(insn))]
        m.d.comb += [
            check.sram_base.eq(insn.sram_base), check.rows.eq(rows), check.cols.eq(cols),
            check.depth.eq(per_type([self.depth[mt] for mt in types])),
            check.dram_base.eq(insn.dram_base), check.x_size.eq(insn.x_size), check.y_size.eq(insn.y_size),
            check.x_stride.eq(insn.x_stride),
            check.dram_limit.eq(per_type([(1 << self.addr_width) >> s for s in shifts])),
        ]

        # The walk over the padded rectangle: row r, column c, and beside them whether each is inside
        # the data. The flags change where a counter meets a bound registered at start, so the write
        # path compares counters with registers only (no adders, no ordered compares).
        # (all set when an instruction starts and read only while it runs: no reset)
        # The walk runs only once the check has passed: its rows·cols entries fit the buffer, so every row and
        # column index, bound and count of elements below is as narrow as an entry's index (and a bit).
        walk_bits = self.index_bits + 1
        r, c = Signal(walk_bits, reset_less=True), Signal(walk_bits, reset_less=True)
        row_in, col_in = (Signal(reset_less=True, name=n) for n in ("row_in", "col_in"))
        bound = {name: Signal(walk_bits, name=name, reset_less=True)
                 for name in ("r_enter", "r_leave", "r_penult", "c_enter", "c_leave", "c_penult")}
        # Whether r (c) is the last row (column), kept beside it: the end of a row or of the rectangle is
        # then a flag, not a compare, on the path that steps the walk.
        r_last, c_last, single_col = (Signal(reset_less=True, name=n) for n in ("r_last", "c_last", "single_col"))
        starts = {"r": insn.y_pad0 == 0, "c": insn.x_pad0 == 0}     # the first row (column) is data
        addr = Signal(self.index_bits + 1, reset_less=True)
        part = Signal(range(max(*slices, 2)), reset_less=True)  # the slice the next beat fills (unused: whole entries)
        # Whether (r, c) is data, a flag of its own set beside row_in and col_in: `row_in & col_in` was a
        # LUT more on the path from the walk's flags into its enables (10.1-10.9 ns on the 85F at 100 MHz).
        in_data = Signal(reset_less=True)
        last_entry = r_last & c_last
        # Whether `part` is its type's last slice, a flag kept beside it (set at the start, stepped with it):
        # the choice by `moving` among compares lay on the path that steps the walk (10.5 ns on the 85F).
        # (one_part: the type's entries are of one slice)
        last_part, one_part = (Signal(reset_less=True, name=n) for n in ("last_part", "one_part"))
        part_penult = Signal.like(part, reset_less=True)                            # the type's slices - 2

        # A LOAD of no elements, decided at the start (retiring it is then a register, not two compares of
        # the instruction's sizes on the path into the command queues).
        # (a register computed every cycle, as the padded sizes: it decides whether the check starts)
        nothing_now = pipe(m, isa.moves_nothing(insn), "nothing_now", data=True)
        nothing = Signal(reset_less=True)

        def advanced(counter, inside, axis):
            """The counter's flag after it steps past ``counter``: data from pad0 on, padding from pad0 + size on."""
            return Mux(counter == bound[f"{axis}_enter"], 1, Mux(counter == bound[f"{axis}_leave"], 0, inside))
        # The walk is on (the WRITE state): padding is written, data as it arrives. A flip-flop of its own,
        # not a decode of the state: it enables every register of the walk (on the 85F at 100 MHz, 10.9-11.3
        # ns from the state to their enables).
        writing = Signal()
        write_now = writing & (~in_data | element_valid)
        steps_part = write_now & in_data        # (the slice or byte written is done: the next one's turn)
        entry_done = write_now & (~in_data | last_part)
        if any(by_rows.values()):               # (a padded entry of rows written a row at a time too)
            in_rows = uses(lambda mt: by_rows[mt])
            steps_part = write_now & (in_data | in_rows)
            entry_done = write_now & ((~in_data & ~in_rows) | last_part)
        elements = Signal(walk_bits, reset_less=True)       # DRAM elements written so far
        beat_done = in_data             # (the walk is done with the element or beat it writes from)
        if any(by_lane.values()):       # (an ACC8 beat by lane stays until its last byte is written)
            beat_done = in_data & (~uses(lambda mt: by_lane[mt]) | last_part)
        m.d.comb += taking.eq(write_now & beat_done)
        packed_ready, direct_ready = (buffer.i_ready,) * 2 if skid else (taking, writing & beat_done)
        for packer in packers.values():
            m.d.comb += packer.elements.ready.eq(packed_ready)
        with m.If(direct):
            m.d.comb += reader.beats.ready.eq(direct_ready)

        # Writes leave through registers: the SRAMs (spread over many block RAMs) see no logic but the choice
        # of the memory type, by a registered one-hot. Each buffer has a copy of the address of its own (one
        # register reached the block RAMs of them all, on the 85F at 100 MHz 11.5-11.8 ns), but on the small
        # FPGAs, whose flip-flops are scarce.
        w_en = Signal()
        w_selected = Signal.like(selected, reset_less=True)
        copies = 1 if is_small_fpga(platform) else len(self.buffers)
        w_addrs = replicas(m, addr, "w_addr", copies, data=True)
        w_word = Signal(B * 8, reset_less=True)        # the element or beat (whatever it is in the padding)
        w_part = Signal.like(part, reset_less=True)
        w_whole = Signal(reset_less=True)              # the whole entry (padding, or an element that fits a beat)
        m.d.sync += [w_en.eq(write_now), w_selected.eq(moving), w_part.eq(part), w_word.eq(word),
                     w_whole.eq(~in_data | one_part)]

        def written(mt):
            """What a write of a slice (or with `acc_loads_by_lane` a byte's lane) of ``mt`` carries."""
            return self._entry(mt, w_word.word_select(w_part, 8) if by_lane[mt] else w_word)
        for n, b in enumerate(self.buffers):
            port = getattr(self, f"write_{b}")
            port_slices = len(port.en)
            mine = [k for k, mt in enumerate(types) if mt.buffer == b]
            # Each buffer's data comes from `w_word` by a register of its own, the type of the data written,
            # one-hot among the buffer's types, or none in the padding: the data is then 0. (`in_data` chose
            # every bit of `w_word` before, on the path that steps the walk, 12-13 ns on the 85F at 100 MHz;
            # one register choosing for every buffer, spread far apart, took 10.9 ns.)
            w_from = Signal(len(mine), name=f"w_from_{b}", reset_less=True)
            m.d.sync += w_from.eq(Cat(moving[k] & in_data for k in mine))
            row_bits = len(port.addr) - self.cfg.index_bits(b)     # (an entry of rows: its slice's row)
            if row_bits:            # (a row a write, `wgt_rows_by_lane`, `acc_rows_by_lane`: the address picks it)
                row_data = [written(types[k]) for k in mine]
                m.d.comb += [port.addr.eq(Cat(w_part[:row_bits], w_addrs[n % copies])),
                             port.data.eq(one_of(w_from, row_data)),
                             port.en.eq(w_en & Cat(w_selected[k] for k in mine).any())]
                continue
            datas, masks = [], []
            for k in mine:
                mt = types[k]
                E = self.elem_bytes[mt]
                if E <= B and not by_lane[mt]:       # whole elements: one entry a write
                    datas.append(self._entry(mt, w_word[:E * 8]))
                    masks.append((1 << port_slices) - 1)
                else:            # slices: the beat (or the byte's lane) goes to every slice, the mask picks one
                    entry = written(mt)
                    datas.append(entry.replicate(len(port.data.as_value()) // len(entry)))
                    per_slice = port_slices // slices[k]
                    masks.append(Mux(w_whole, (1 << port_slices) - 1, ((1 << per_slice) - 1) << (w_part * per_slice)))
            m.d.comb += [port.addr.eq(w_addrs[n % copies]), port.data.eq(one_of(w_from, datas)),
                         port.en.eq(Mux(w_en, one_of(Cat(w_selected[k] for k in mine), masks), 0))]

        # The reader's command, in bytes. Except on the small FPGAs from registers computed every cycle, like
        # `rows` and `cols` (it is asked for after the check, many cycles after the start): on the 85F at
        # 100 MHz the choice by memory type lay between the instruction and the reader share's register
        # of the held command, 11.1 ns.
        command = {"addr": per_type([insn.dram_base << s for s in shifts]),
                   "row_bytes": per_type([insn.x_size << s for s in shifts]),
                   "stride": per_type([insn.x_stride << s for s in shifts]), "rows": insn.y_size}
        for name, value in command.items():
            if not is_small_fpga(platform):
                value = pipe(m, value, f"command_{name}", data=True)
            m.d.comb += reader.cmd.payload[name].eq(value)
        m.d.comb += request.bytes_read.eq(per_type([elements << s for s in shifts], moving))
        reader_idle = pipe(m, ~reader.busy, "reader_idle")
        # With `lean` (the boards' configs) the outcome leaves through registers, a cycle after the FSM decides
        # it: `done` reaches the streams' sequencers through the load share and, through a fault, the run's
        # halt (on the 85F at 100 MHz, 10-10.4 ns from the state). It costs a LOAD a cycle.
        finished, outcome = Signal(), Signal(ERROR_BITS)        # (the FSM's decision)
        if self.lean:
            m.d.comb += [request.done.eq(pipe(m, finished, "done")), request.error.eq(pipe(m, outcome, "error"))]
        else:
            m.d.comb += [request.done.eq(finished), request.error.eq(outcome)]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(request.start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If(nothing):
                    m.d.comb += finished.eq(1)
                    m.next = "IDLE"
                with m.Elif(check.done & check.failed):
                    m.d.comb += [finished.eq(1), outcome.eq(check.error)]
                    m.next = "IDLE"
                with m.Elif(check.done):
                    m.d.comb += reader.cmd.valid.eq(1)
                    with m.If(reader.cmd.ready):
                        m.d.sync += writing.eq(1)
                        m.next = "WRITE"
                    with m.Else():
                        m.next = "ASK"
            with m.State("ASK"):        # a shared reader is serving another unit
                m.d.comb += reader.cmd.valid.eq(1)
                with m.If(reader.cmd.ready):
                    m.d.sync += writing.eq(1)
                    m.next = "WRITE"
            with m.State("WRITE"):
                with m.If(steps_part):
                    m.d.sync += [part.eq(Mux(last_part, 0, part + 1)),
                                 last_part.eq(Mux(last_part, one_part, part == part_penult))]
                with m.If(entry_done):
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(c_last):
                        next_row_in = advanced(r, row_in, "r")
                        m.d.sync += [c.eq(0), c_last.eq(single_col), col_in.eq(starts["c"]),
                                     r.eq(r + 1), r_last.eq(r == bound["r_penult"]), row_in.eq(next_row_in),
                                     in_data.eq(next_row_in & starts["c"])]
                    with m.Else():
                        next_col_in = advanced(c, col_in, "c")
                        m.d.sync += [c.eq(c + 1), c_last.eq(c == bound["c_penult"]), col_in.eq(next_col_in),
                                     in_data.eq(row_in & next_col_in)]
                    with m.If(in_data):
                        m.d.sync += elements.eq(elements + 1)
                    with m.If(last_entry):
                        m.d.sync += writing.eq(0)
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # Every element has been written (the last write lands this cycle); wait until the reader
                # has retired its bursts, as seen a cycle before (`busy` falls once, as the transfer ends, and
                # stays down until the next command): on the 85F at 100 MHz the burst splitter's state reached
                # the compute stream's sequencer and the run's halt through `done` (12.5 ns).
                with m.If(reader_idle):
                    m.d.comb += [finished.eq(1), outcome.eq(Mux(reader.error, ErrorCode.BUS_ERROR, 0))]
                    m.next = "IDLE"
        # A start comes only in IDLE (after the previous LOAD's `done`), so what it loads is loaded on the
        # start alone, not on a decode of the state too (on the 85F at 100 MHz, 9.6-10.2 ns from the state
        # to those enables and resets). (After the walk's steps, which it then overrides: before them, it
        # put its multiplexer behind theirs, 12-13 ns from the walk's flags.)
        with m.If(request.start):
            m.d.sync += [r.eq(0), c.eq(0), addr.eq(insn.sram_base), elements.eq(0), part.eq(0),
                         row_in.eq(starts["r"]), col_in.eq(starts["c"]), in_data.eq(starts["r"] & starts["c"]),
                         moving.eq(selected),
                         part_penult.eq(per_type([max(n - 2, 0) for n in slices]))]
            m.d.sync += [flag.eq(per_type([n == 1 for n in slices])) for flag in (last_part, one_part)]
            for axis, pad0, size in (("r", insn.y_pad0, insn.y_size), ("c", insn.x_pad0, insn.x_size)):
                # pad0 - 1 wraps to all ones when pad0 is 0: a value the counter never reaches
                m.d.sync += [bound[f"{axis}_enter"].eq(pad0 - 1), bound[f"{axis}_leave"].eq(pad0 + size - 1)]
            # (rows - 2 wraps to all ones for one row: a value r never reaches)
            m.d.sync += [bound["r_penult"].eq(rows - 2), bound["c_penult"].eq(cols - 2),
                         r_last.eq(rows == 1), c_last.eq(cols == 1), single_col.eq(cols == 1)]
            # A LOAD that moves nothing retires at once: it must not start the check, which would
            # still be busy (and deaf to the next LOAD's start) when the next LOAD comes.
            m.d.comb += check.start.eq(~nothing_now)
            m.d.sync += nothing.eq(nothing_now)
        return m


class LoadShare(wiring.Component):
    """One :class:`PaddedLoad` for several streams: their LOADs take turns.

    A client's ``start`` is remembered until the loader is free; clients
    waiting together are served in turn, the one served longest ago first.
    A LOAD never waits on a token once started, so a stream waiting here
    waits only for the other stream's LOAD to finish. ``bytes_read`` is
    kept per client until its next ``start``.

    Members
    -------
    clients : In(LoadRequest) each, ``client_<k>``
    loader : Out(LoadRequest)
    """

    def __init__(self, cfg, *, count=2):
        self.count = count
        members = {f"client_{k}": In(LoadRequest(cfg)) for k in range(count)}
        members["loader"] = Out(LoadRequest(cfg))
        super().__init__(members)

    def clients(self):
        return [getattr(self, f"client_{k}") for k in range(self.count)]

    def elaborate(self, platform):
        m = Module()
        clients, loader = self.clients(), self.loader
        pending = Signal(self.count)
        served = Signal(range(self.count))       # the client the loader runs (or ran last)
        busy = Signal()
        # Whether the loader runs client k's LOAD, a flip-flop per client: `busy` also enables the
        # instruction register below, and from it a client's `done` reached its sequencer's state, halt
        # and fault registers through 10.8-11.5 ns on the 85F at 100 MHz.
        running = Signal(self.count)
        for k, client in enumerate(clients):
            with m.If(client.start):
                m.d.sync += pending[k].eq(1)
            bytes_read = Signal(32, name=f"bytes_read_{k}", reset_less=True)
            mine = running[k]
            m.d.comb += [client.done.eq(mine & loader.done), client.error.eq(Mux(mine, loader.error, 0)),
                         client.bytes_read.eq(bytes_read)]
            with m.If(mine & loader.done):
                m.d.sync += bytes_read.eq(loader.bytes_read)
        with m.If(busy & loader.done):
            m.d.sync += [busy.eq(0), running.eq(0), pending.bit_select(served, 1).eq(0)]
        # The loader starts two cycles after the grant: the insn is the client's from the cycle after it.
        kick = Signal()
        m.d.sync += kick.eq(0)
        m.d.comb += loader.start.eq(pipe(m, kick, "kicked"))
        grant, choice = ~busy & pending.any(), next_in_turn(pending, served)
        with m.If(grant):
            m.d.sync += [busy.eq(1), served.eq(choice), kick.eq(1), running.eq(1 << choice)]
        insns = [c.insn for c in clients]
        if is_small_fpga(platform):
            m.d.comb += loader.insn.eq(one_of([served == k for k in range(self.count)], insns))
        else:
            # Elsewhere from a register loaded until the grant (a client holds its insn from start to done):
            # every cycle of the loader depends on the instruction, and on a large FPGA the clients' insn
            # registers sit in their streams, far from it. The same cycles either way. (It follows the
            # client next in turn while the loader is free, and holds from the grant: its enables are a
            # flip-flop's, not the grant's.)
            insn = Signal.like(loader.insn, reset_less=True)
            m.d.comb += loader.insn.eq(insn)
            with m.If(~busy):
                m.d.sync += insn.eq(one_of([choice == k for k in range(self.count)], insns))
        return m
