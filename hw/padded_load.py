"""LOADs of a stream: 2D DMA reads into zero-padded SRAM rectangles."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ERROR_BITS, ErrorCode, MemType

from .axi import AxiReadSignature
from .dma import ElementPacker, RowReader
from .sram import sram_shape
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

    ``insn`` stays stable from ``start`` until ``done``; ``error`` and
    ``bytes_read`` are valid with ``done`` and, for ``bytes_read``, until
    the next ``start``.
    """

    def __init__(self, cfg):
        super().__init__({"insn": Out(isa.instruction_layouts(cfg)[isa.Opcode.LOAD]), "start": Out(1),
                          "done": In(1), "error": In(ERROR_BITS), "bytes_read": In(32)})


class PaddedLoad(wiring.Component):
    """Executes the LOADs of one stream, whatever their memory type.

    Writes ``(y_pad0 + y_size + y_pad1) × (x_pad0 + x_size + x_pad1)``
    consecutive SRAM entries from ``sram_base``, one per cycle: zeros in the
    padding, DRAM elements in the data rectangle (row ``r`` from element
    ``dram_base + r·x_stride``). A rectangle that leaves the buffer stops
    with ``SRAM_RANGE`` before anything moves; a DRAM address beyond the bus
    or an error response ends with ``BUS_ERROR``.

    A stream runs one instruction at a time, so its memory types share the
    checks, the address arithmetic and the AXI reader; only the element
    packers (one per element size) and the write ports (one per buffer) are
    separate. With ``lean`` the load and compute streams share one
    (through :class:`LoadShare`).

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
    axi : Out(AxiReadSignature)
    """

    def __init__(self, cfg, memory_types, *, addr_width):
        self.memory_types = tuple(memory_types)
        self.elem_bytes = {mt: cfg.elem_bytes(mt.dram_elem) for mt in self.memory_types}
        self.depth = {mt: cfg.depth(mt.buffer) for mt in self.memory_types}
        self.buffers = sorted({mt.buffer for mt in self.memory_types})
        self.index_bits = max(cfg.index_bits(b) for b in self.buffers)
        self.acc_lanes = cfg.lanes("acc")
        self.lean = cfg.lean
        self.addr_width, self.data_width = addr_width, cfg.dram_bus_width
        members = {
            "request": In(LoadRequest(cfg)),
            "axi": Out(AxiReadSignature(addr_width=addr_width, data_width=self.data_width)),
        }
        for b in self.buffers:
            members[f"write_{b}"] = In(WritePort.Signature(addr_width=cfg.index_bits(b), shape=sram_shape(cfg, b)))
        super().__init__(members)

    def _entry(self, memory_type, element):
        """The SRAM entry a DRAM element of ``memory_type`` becomes (ACC8: each byte sign-extended)."""
        if memory_type != MemType.ACC8:
            return element
        count, width = self.acc_lanes
        return Cat(Cat(element[8 * k:8 * k + 8], element[8 * k + 7].replicate(width - 8)) for k in range(count))

    def elaborate(self, platform):
        m = Module()
        request = self.request
        insn, types = request.insn, self.memory_types
        m.submodules.reader = reader = RowReader(addr_width=self.addr_width, data_width=self.data_width)
        m.submodules.check = check = TransferCheck(sram_bits=len(insn.sram_base), serial=self.lean)
        wiring.connect(m, reader.axi, wiring.flipped(self.axi))

        # The instruction's memory type, one-hot, and what it implies.
        selected = Cat(insn.memory_type == mt for mt in types)
        shifts = [self.elem_bytes[mt].bit_length() - 1 for mt in types]

        def per_type(values):
            return one_of(selected, values)

        # One packer per element size; the reader's beats go to the one in use.
        packers = {}
        for E in sorted(set(self.elem_bytes.values())):
            packers[E] = m.submodules[f"packer_{E}"] = ElementPacker(elem_bytes=E, bus_bytes=self.data_width // 8)
            uses = Cat(selected[k] for k, mt in enumerate(types) if self.elem_bytes[mt] == E).any()
            m.d.comb += [packers[E].beats.payload.eq(reader.beats.payload),
                         packers[E].beats.valid.eq(reader.beats.valid & uses)]
            with m.If(uses):
                m.d.comb += reader.beats.ready.eq(packers[E].beats.ready)
        element_valid = per_type([packers[self.elem_bytes[mt]].elements.valid for mt in types])

        rows = Signal(range(MAX_EXTENT))
        cols = Signal(range(MAX_EXTENT))
        m.d.comb += [rows.eq(isa.padded_rows(insn)), cols.eq(isa.padded_cols(insn))]
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
        r, c = Signal.like(rows, reset_less=True), Signal.like(cols, reset_less=True)
        row_in, col_in = Signal(reset_less=True), Signal(reset_less=True)
        bound = {name: Signal.like(rows, name=name, reset_less=True)
                 for name in ("r_enter", "r_leave", "r_last", "c_enter", "c_leave", "c_last")}
        starts = {"r": insn.y_pad0 == 0, "c": insn.x_pad0 == 0}     # the first row (column) is data
        addr = Signal(self.index_bits + 1, reset_less=True)
        in_data = row_in & col_in
        last_entry = (r == bound["r_last"]) & (c == bound["c_last"])

        def advanced(counter, inside, axis):
            """The counter's flag after it steps past ``counter``: data from pad0 on, padding from pad0 + size on."""
            return Mux(counter == bound[f"{axis}_enter"], 1, Mux(counter == bound[f"{axis}_leave"], 0, inside))
        write_now = Signal()
        elements = Signal(2 * isa.SIZE_BITS, reset_less=True)       # DRAM elements written so far
        for E, packer in packers.items():
            m.d.comb += packer.elements.ready.eq(write_now & in_data)
        for b in self.buffers:
            port = getattr(self, f"write_{b}")
            entries = [self._entry(mt, packers[self.elem_bytes[mt]].elements.payload) for mt in types]
            targets = Cat(selected[k] for k, mt in enumerate(types) if mt.buffer == b)
            m.d.comb += [port.addr.eq(addr), port.en.eq(write_now & targets.any()),
                         port.data.eq(Mux(in_data, per_type([e if mt.buffer == b else 0
                                                             for e, mt in zip(entries, types)]), 0))]

        m.d.comb += [
            reader.cmd.payload.addr.eq(per_type([insn.dram_base << s for s in shifts])),
            reader.cmd.payload.row_bytes.eq(per_type([insn.x_size << s for s in shifts])),
            reader.cmd.payload.stride.eq(per_type([insn.x_stride << s for s in shifts])),
            reader.cmd.payload.rows.eq(insn.y_size),
            request.bytes_read.eq(per_type([elements << s for s in shifts])),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(request.start):
                    m.d.sync += [r.eq(0), c.eq(0), addr.eq(insn.sram_base), elements.eq(0),
                                 row_in.eq(starts["r"]), col_in.eq(starts["c"])]
                    for axis, pad0, size in (("r", insn.y_pad0, insn.y_size), ("c", insn.x_pad0, insn.x_size)):
                        # pad0 - 1 wraps to all ones when pad0 is 0: a value the counter never reaches
                        m.d.sync += [bound[f"{axis}_enter"].eq(pad0 - 1), bound[f"{axis}_leave"].eq(pad0 + size - 1)]
                    m.d.sync += [bound["r_last"].eq(rows - 1), bound["c_last"].eq(cols - 1)]
                    m.d.comb += check.start.eq(1)
                    m.next = "CHECK"
            with m.State("CHECK"):
                with m.If((insn.x_size == 0) | (insn.y_size == 0)):
                    m.d.comb += request.done.eq(1)
                    m.next = "IDLE"
                with m.Elif(check.done & (check.error != 0)):
                    m.d.comb += [request.done.eq(1), request.error.eq(check.error)]
                    m.next = "IDLE"
                with m.Elif(check.done):
                    m.d.comb += reader.cmd.valid.eq(1)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += write_now.eq(~in_data | element_valid)
                with m.If(write_now):
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(c == bound["c_last"]):
                        m.d.sync += [c.eq(0), col_in.eq(starts["c"]), r.eq(r + 1), row_in.eq(advanced(r, row_in, "r"))]
                    with m.Else():
                        m.d.sync += [c.eq(c + 1), col_in.eq(advanced(c, col_in, "c"))]
                    with m.If(in_data):
                        m.d.sync += elements.eq(elements + 1)
                    with m.If(last_entry):
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # Every element has been written; wait until the reader has retired its bursts.
                with m.If(~reader.busy):
                    m.d.comb += [request.done.eq(1), request.error.eq(Mux(reader.error, ErrorCode.BUS_ERROR, 0))]
                    m.next = "IDLE"
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
        for k, client in enumerate(clients):
            with m.If(client.start):
                m.d.sync += pending[k].eq(1)
            bytes_read = Signal(32, name=f"bytes_read_{k}", reset_less=True)
            mine = busy & (served == k)
            m.d.comb += [client.done.eq(mine & loader.done), client.error.eq(Mux(mine, loader.error, 0)),
                         client.bytes_read.eq(bytes_read)]
            with m.If(mine & loader.done):
                m.d.sync += bytes_read.eq(loader.bytes_read)
        m.d.comb += loader.insn.eq(one_of([served == k for k in range(self.count)], [c.insn for c in clients]))
        with m.If(busy & loader.done):
            m.d.sync += [busy.eq(0), pending.bit_select(served, 1).eq(0)]
        kick = Signal()         # the loader starts the cycle after the grant, once `served` selects its insn
        m.d.sync += kick.eq(0)
        m.d.comb += loader.start.eq(kick)
        with m.If(~busy & pending.any()):
            # the next waiting client after the one served last, round the circle
            order = [(served + 1 + k) % self.count for k in range(self.count)]
            choice = order[-1]
            for candidate in reversed(order[:-1]):
                choice = Mux(pending.bit_select(candidate, 1), candidate, choice)
            m.d.sync += [busy.eq(1), served.eq(choice), kick.eq(1)]
        return m
