"""One LOAD of one memory type: a 2D DMA read into a zero-padded SRAM rectangle."""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ERROR_BITS, ErrorCode

from .axi import AxiReadSignature
from .dma import ElementPacker, RowReader
from .sram import sram_shape

__all__ = ["PaddedLoad"]


class PaddedLoad(wiring.Component):
    """Executes LOAD instructions of one memory type.

    Writes ``(y_pad0 + y_size + y_pad1) × (x_pad0 + x_size + x_pad1)``
    consecutive SRAM entries from ``sram_base``, one per cycle: zeros in the
    padding, DRAM elements in the data rectangle (row ``r`` from element
    ``dram_base + r·x_stride``). A rectangle that leaves the buffer stops
    with ``SRAM_RANGE`` before anything moves; a DRAM address beyond the bus
    or an error response ends with ``BUS_ERROR``.

    Parameters
    ----------
    cfg : HwConfig
    memory_type : MemType
        What this unit loads: its DRAM element (``memory_type.dram_elem``)
        and the SRAM it writes (``memory_type.buffer``) size everything else.
    convert : callable or None
        Maps a DRAM element (``elem_bytes·8`` bits) to an entry (e.g. sign
        extension for ACC8); plain bit copy if None.

    Members
    -------
    start : In(1)
        Begin the instruction presented on ``insn`` (one-cycle pulse).
    insn : In(insn_layout)
    done : Out(1)
        One-cycle pulse when the instruction has finished.
    error : Out(ERROR_BITS)
        Error code, valid with ``done`` (0 = none).
    bytes_read : Out(32)
        DRAM bytes the last instruction read, valid with ``done``.
    write : In(WritePort.Signature)
        The SRAM write port this unit drives.
    axi : Out(AxiReadSignature)
    """

    def __init__(self, cfg, memory_type, *, addr_width, convert=None):
        buffer = memory_type.buffer
        self.insn_layout = isa.instruction_layouts(cfg)[isa.Opcode.LOAD]
        self.elem_bytes, self.depth = cfg.elem_bytes(memory_type.dram_elem), cfg.depth(buffer)
        entry_shape, data_width = sram_shape(cfg, buffer), cfg.dram_bus_width
        self.addr_width, self.data_width, self.convert = addr_width, data_width, convert
        self.entry_shape = entry_shape
        super().__init__({
            "start": In(1),
            "insn": In(self.insn_layout),
            "done": Out(1),
            "error": Out(ERROR_BITS),
            "bytes_read": Out(32),
            "write": In(WritePort.Signature(addr_width=cfg.index_bits(buffer), shape=entry_shape)),
            "axi": Out(AxiReadSignature(addr_width=addr_width, data_width=data_width)),
        })

    def elaborate(self, platform):
        m = Module()
        E = self.elem_bytes
        shift = E.bit_length() - 1
        m.submodules.reader = reader = RowReader(addr_width=self.addr_width, data_width=self.data_width)
        m.submodules.packer = packer = ElementPacker(elem_bytes=E, bus_bytes=self.data_width // 8)
        wiring.connect(m, reader.beats, packer.beats)
        wiring.connect(m, reader.axi, wiring.flipped(self.axi))

        insn = Signal(self.insn_layout)
        padded = 2 * ((1 << isa.PAD_BITS) - 1) + (1 << isa.SIZE_BITS)    # the most rows or columns a LOAD writes
        rows = Signal(range(padded))
        cols = Signal(range(padded))
        extent = Signal(2 * len(rows))
        m.d.comb += [rows.eq(isa.padded_rows(insn)), cols.eq(isa.padded_cols(insn)), extent.eq(rows * cols)]
        dram_end = Signal(64)      # one past the last DRAM byte touched
        m.d.comb += dram_end.eq(isa.dram_end(insn) << shift)

        r = Signal.like(rows)
        c = Signal.like(cols)
        addr = Signal(len(self.write.addr) + 1)
        in_data = ((r >= insn.y_pad0) & (r < insn.y_pad0 + insn.y_size)
                   & (c >= insn.x_pad0) & (c < insn.x_pad0 + insn.x_size))
        element = packer.elements.payload if self.convert is None else self.convert(packer.elements.payload)
        last_entry = (r == rows - 1) & (c == cols - 1)
        write_now = Signal()

        m.d.comb += [
            self.write.addr.eq(addr),
            self.write.data.eq(Mux(in_data, element, 0)),
            self.write.en.eq(write_now),
            reader.cmd.payload.addr.eq(insn.dram_base << shift),
            reader.cmd.payload.row_bytes.eq(insn.x_size << shift),
            reader.cmd.payload.stride.eq(insn.x_stride << shift),
            reader.cmd.payload.rows.eq(insn.y_size),
            self.bytes_read.eq((insn.x_size * insn.y_size) << shift),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [insn.eq(self.insn), r.eq(0), c.eq(0)]
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += addr.eq(insn.sram_base)
                with m.If((insn.x_size == 0) | (insn.y_size == 0)):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                with m.Elif(insn.sram_base + extent > self.depth):
                    m.d.comb += [self.done.eq(1), self.error.eq(ErrorCode.SRAM_RANGE)]
                    m.next = "IDLE"
                with m.Elif(dram_end > (1 << self.addr_width)):
                    m.d.comb += [self.done.eq(1), self.error.eq(ErrorCode.BUS_ERROR)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += reader.cmd.valid.eq(1)
                    m.next = "WRITE"
            with m.State("WRITE"):
                m.d.comb += [write_now.eq(~in_data | packer.elements.valid),
                             packer.elements.ready.eq(in_data)]
                with m.If(write_now):
                    m.d.sync += addr.eq(addr + 1)
                    with m.If(c == cols - 1):
                        m.d.sync += [c.eq(0), r.eq(r + 1)]
                    with m.Else():
                        m.d.sync += c.eq(c + 1)
                    with m.If(last_entry):
                        m.next = "DRAIN"
            with m.State("DRAIN"):
                # Every element has been written; wait until the reader has retired its bursts.
                with m.If(~reader.busy):
                    m.d.comb += [self.done.eq(1), self.error.eq(Mux(reader.error, ErrorCode.BUS_ERROR, 0))]
                    m.next = "IDLE"
        return m
