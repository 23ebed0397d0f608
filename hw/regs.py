"""The AXI4-Lite register file: control, status, program address, counters.

:data:`REGISTERS` is the one register map: the RTL, the runtime drivers and
``docs/registers.md`` (generated, checked by a test) all read it.
"""

from dataclasses import dataclass

from amaranth import Module, Signal, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tilewright.isa import ERROR_BITS, ErrorCode

from .axi import RESP_OKAY, AxiLiteSignature

__all__ = ["Register", "REGISTERS", "COUNTERS", "built_counters", "RegisterFile", "ADDR_WIDTH", "register_table",
           "STATUS_FIELDS", "STATUS_LAYOUT", "Status", "CONTROL_START"]

ADDR_WIDTH = 8

#: The ``control`` bit that starts a run.
CONTROL_START_BIT = 0
CONTROL_START = 1 << CONTROL_START_BIT

#: Fields of the ``status`` register: name -> (lowest bit, width).
STATUS_FIELDS = {"busy": (0, 1), "done": (1, 1), "error": (8, ERROR_BITS)}

#: The ``status`` register as an Amaranth layout (bits no field names read 0).
STATUS_LAYOUT = data.FlexibleLayout(32, {name: data.Field(unsigned(width), lsb)
                                         for name, (lsb, width) in STATUS_FIELDS.items()})


@dataclass(frozen=True)
class Status:
    """The ``status`` register, decoded: what a host driver or harness reads after a run."""
    busy: bool
    done: bool
    error: int       # an :class:`~tilewright.isa.ErrorCode` value

    @classmethod
    def decode(cls, word):
        values = {name: (word >> lsb) & ((1 << width) - 1) for name, (lsb, width) in STATUS_FIELDS.items()}
        return cls(busy=bool(values["busy"]), done=bool(values["done"]), error=values["error"])

    def encode(self):
        """The register word (the inverse of :meth:`decode`)."""
        return sum(int(getattr(self, name)) << lsb for name, (lsb, _) in STATUS_FIELDS.items())


def _status_doc():
    bits = [f"bit {lsb} {name}" if width == 1 else f"bits {lsb + width - 1}:{lsb} {name} code ({ErrorCode.__name__})"
            for name, (lsb, width) in STATUS_FIELDS.items()]
    return ", ".join(bits)


@dataclass(frozen=True)
class Register:
    name: str
    offset: int
    access: str      # "rw", "r", "w"
    doc: str


_CONTROL = [
    Register("control", 0x00, "w", f"bit {CONTROL_START_BIT}: start a run (clears status and counters; "
                                   f"ignored while one is busy)"),
    Register("status", 0x04, "r", _status_doc()),
    Register("insn_addr", 0x08, "rw", "byte address of the first instruction"),
    Register("insn_count", 0x0C, "rw", "number of instructions"),
    Register("error_index", 0x10, "r", "index of the instruction that stopped the run with an error"),
    Register("fingerprint", 0x14, "r", "the config fingerprint's first 32 bits (its first 8 hex digits)"),
]

#: Counters of the last run, all 32 bits wide (wrapping), from 0x20 up.
COUNTERS = [
    ("cycles", "cycles from start to done"),
    ("gemm_busy", "cycles a GEMM instruction was executing"),
    ("alu_busy", "cycles an ALU instruction was executing"),
    ("load_busy", "cycles the load stream's DMA was executing"),
    ("store_busy", "cycles the store stream's DMA was executing"),
    ("load_wait_c2l", "cycles load waited for a c2l token"),
    ("load_wait_l2c", "cycles load waited for room in l2c"),
    ("compute_wait_l2c", "cycles compute waited for an l2c token"),
    ("compute_wait_s2c", "cycles compute waited for an s2c token"),
    ("compute_wait_c2l", "cycles compute waited for room in c2l"),
    ("compute_wait_c2s", "cycles compute waited for room in c2s"),
    ("store_wait_c2s", "cycles store waited for a c2s token"),
    ("store_wait_s2c", "cycles store waited for room in s2c"),
    ("read_insn", "DRAM bytes read as instructions"),
    ("read_uop", "DRAM bytes read by LOAD UOP"),
    ("read_inp", "DRAM bytes read by LOAD INP"),
    ("read_wgt", "DRAM bytes read by LOAD WGT"),
    ("read_acc", "DRAM bytes read by LOAD ACC"),
    ("read_acc8", "DRAM bytes read by LOAD ACC8"),
    ("write_out", "DRAM bytes written by STORE"),
    ("gemm_uops", "GEMM micro-ops executed (reset included)"),
    ("alu_uops", "ALU micro-ops executed"),
    ("insns_load", "instructions retired by the load stream"),
    ("insns_compute", "instructions retired by the compute stream"),
    ("insns_store", "instructions retired by the store stream"),
]



def built_counters(cfg):
    """Names of the counters ``cfg`` builds: all of :data:`COUNTERS`, or ``cycles`` alone without
    ``perf_counters`` (the others then read 0)."""
    return [name for name, _ in COUNTERS if cfg.perf_counters or name == "cycles"]


REGISTERS = _CONTROL + [Register(name, 0x20 + 4 * k, "r", doc) for k, (name, doc) in enumerate(COUNTERS)]


def register_table():
    """Markdown table of :data:`REGISTERS`."""
    rows = ["| offset | name | access | meaning |", "|---|---|---|---|"]
    rows += [f"| 0x{r.offset:02X} | `{r.name}` | {r.access} | {r.doc} |" for r in REGISTERS]
    return "\n".join(rows) + "\n"


class RegisterFile(wiring.Component):
    """AXI4-Lite subordinate over :data:`REGISTERS`.

    Members
    -------
    bus : In(AxiLiteSignature)
    start : Out(1)
        One-cycle pulse on a write of 1 to ``control`` bit 0.
    insn_addr, insn_count : Out(32)
    status, error_index, fingerprint : In(32)
    counters : In(32) each, named as in :data:`COUNTERS`

    ``direct`` (for a slow clock) writes a register in the cycle AW and W are taken, from the bus (no
    registers for the request, and B a cycle sooner), and answers a read from one multiplexer of every
    register in the cycle after AR (no registered groups: R two cycles sooner).
    """

    def __init__(self, *, direct=False):
        self.direct = direct
        members = {"bus": In(AxiLiteSignature(addr_width=ADDR_WIDTH)), "start": Out(1),
                   "insn_addr": Out(32), "insn_count": Out(32),
                   "status": In(32), "error_index": In(32), "fingerprint": In(32)}
        members.update({name: In(32) for name, _ in COUNTERS})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        # Writes: take AW and W together into registers, apply them the cycle after, then answer on B (the
        # manager's handshake reached the registers' enables through the address's decode: on the 85F at
        # 100 MHz the host bridge's state did, 11.1 ns).
        b_pending, w_due = Signal(), Signal()          # (w_due: the write is applied this cycle)
        take_write = bus.awvalid & bus.wvalid & ~b_pending
        if not self.direct:      # (not while the last write is applied)
            take_write &= ~w_due
        starts = bus.wdata[CONTROL_START_BIT] & bus.wstrb[CONTROL_START_BIT // 8]
        m.d.comb += [bus.awready.eq(take_write), bus.wready.eq(take_write), bus.bvalid.eq(b_pending),
                     bus.bresp.eq(RESP_OKAY)]
        with m.If(bus.bvalid & bus.bready):
            m.d.sync += b_pending.eq(0)
        if self.direct:
            w_offset, w_data, w_starts = bus.awaddr[2:], bus.wdata, starts
            m.d.comb += w_due.eq(take_write)
        else:
            w_offset = Signal(len(bus.awaddr) - 2, reset_less=True)
            w_data = Signal.like(bus.wdata, reset_less=True)
            w_starts = Signal(reset_less=True)
            m.d.sync += w_due.eq(take_write)
            with m.If(take_write):
                m.d.sync += [w_offset.eq(bus.awaddr[2:]), w_data.eq(bus.wdata), w_starts.eq(starts)]
        with m.If(w_due):
            m.d.sync += b_pending.eq(1)
            with m.Switch(w_offset):
                for reg in REGISTERS:
                    if "w" not in reg.access:
                        continue
                    with m.Case(reg.offset >> 2):
                        if reg.name == "control":
                            m.d.comb += self.start.eq(w_starts)
                        else:           # insn_addr, insn_count
                            m.d.sync += getattr(self, reg.name).eq(w_data)
        readable = [reg for reg in REGISTERS if "r" in reg.access]
        r_pending = Signal()
        m.d.comb += [bus.rvalid.eq(r_pending), bus.rresp.eq(RESP_OKAY)]
        with m.If(bus.rvalid & bus.rready):
            m.d.sync += r_pending.eq(0)
        if self.direct:
            m.d.comb += bus.arready.eq(~r_pending)
            with m.If(bus.arvalid & bus.arready):
                m.d.sync += [r_pending.eq(1), bus.rdata.eq(0)]
                with m.Switch(bus.araddr[2:]):
                    for reg in readable:
                        with m.Case(reg.offset >> 2):
                            m.d.sync += bus.rdata.eq(getattr(self, reg.name))
            return m
        # Reads: one register per request, chosen in two registered steps (the 30 readable registers
        # sit all over the die, beside the counters and the datapath they read: one multiplexer of them
        # all was 13-14 ns on the 85F). The request's address is registered as it is taken; then each
        # group of four registers is narrowed to one, then the groups to the answer, given the cycle
        # after (a register nobody reads answers 0).
        r_offset = Signal(len(bus.araddr) - 2, reset_less=True)
        r_step = Signal(range(3))       # 1: narrowing each group, 2: choosing among them
        groups = {}
        for reg in readable:
            groups.setdefault(reg.offset >> 4, []).append(reg)
        narrowed = {g: Signal(32, name=f"r_group_{g}", reset_less=True) for g in groups}
        m.d.comb += bus.arready.eq((r_step == 0) & ~r_pending)
        with m.If(bus.arvalid & bus.arready):
            m.d.sync += [r_step.eq(1), r_offset.eq(bus.araddr[2:])]
        with m.If(r_step == 1):
            m.d.sync += r_step.eq(2)
            for g, regs in groups.items():
                m.d.sync += narrowed[g].eq(0)
                with m.Switch(r_offset[:2]):
                    for reg in regs:
                        with m.Case((reg.offset >> 2) & 3):
                            m.d.sync += narrowed[g].eq(getattr(self, reg.name))
        with m.If(r_step == 2):
            m.d.sync += [r_step.eq(0), r_pending.eq(1), bus.rdata.eq(0)]
            with m.Switch(r_offset[2:]):
                for g in groups:
                    with m.Case(g):
                        m.d.sync += bus.rdata.eq(narrowed[g])
        return m
