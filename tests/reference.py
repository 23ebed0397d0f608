"""A deliberately naive reference interpreter for the Tilewright ISA.

Written from ``docs/isa.md`` alone, independently of the functional simulator
and of ``tilewright.semantics``: it executes a program strictly in program
order (dependency flags are ignored, so programs must be sequentially valid),
one micro-op at a time, with explicit Python loops and Python integers. Speed
is not a goal; being obviously correct is.

Only the instruction dataclasses and enums of ``tilewright.isa`` and the
buffer geometry of :class:`~tilewright.config.HwConfig` are used.
"""

import numpy as np

from tilewright.isa import INSN_BYTES, Alu, AluOp, Finish, Gemm, Load, MemType, Store

__all__ = ["ReferenceDram", "ReferenceMachine", "to_signed", "shift_right", "alu_apply"]


# -- integer semantics (docs/isa.md, "Integer semantics") -------------------

def to_signed(value, bits):
    """The low ``bits`` bits of ``value`` read as a two's-complement number."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


def shift_right(a, b, width):
    """SHR: arithmetic right shift by ``b``; a negative ``b`` shifts left, wrapped."""
    if b >= 0:
        return a >> min(b, width - 1)        # Python's >> rounds toward minus infinity
    if -b >= width:
        return 0
    return to_signed(a << -b, width)


def alu_apply(op, a, b, width):
    """One ALU operation on signed ``width``-bit values ``a`` (destination) and ``b``."""
    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.ADD:
        return to_signed(a + b, width)
    if op == AluOp.SHR:
        return shift_right(a, b, width)
    if op == AluOp.MUL:
        return to_signed(a * b, width)
    raise ValueError(f"unknown ALU op {op!r}")


# -- DRAM --------------------------------------------------------------------

class ReferenceDram:
    """``size`` zero bytes addressed from 0."""

    def __init__(self, size):
        self.data = bytearray(size)

    def _check(self, addr, n):
        if addr < 0 or addr + n > len(self.data):
            raise IndexError(f"DRAM access [{addr}, {addr + n}) outside {len(self.data)} bytes")

    def read(self, addr, n):
        """``n`` bytes from ``addr`` as a uint8 numpy array."""
        self._check(addr, n)
        return np.frombuffer(bytes(self.data[addr:addr + n]), dtype=np.uint8).copy()

    def write(self, addr, data):
        """Store bytes (or a numpy array, taken as its little-endian bytes) at ``addr``."""
        if isinstance(data, np.ndarray):
            data = np.ascontiguousarray(data)
            data = data.astype(data.dtype.newbyteorder("<")).tobytes()
        data = bytes(data)
        self._check(addr, len(data))
        self.data[addr:addr + len(data)] = data


def decode_values(raw, bits):
    """Little-endian two's-complement integers of ``bits`` bits packed in ``raw``."""
    step = bits // 8
    return [int.from_bytes(bytes(raw[k:k + step]), "little", signed=True)
            for k in range(0, len(raw), step)]


def encode_values(values, bits):
    """Inverse of :func:`decode_values` (values are wrapped to ``bits``)."""
    step = bits // 8
    return b"".join((int(v) & ((1 << bits) - 1)).to_bytes(step, "little") for v in values)


# -- the machine -------------------------------------------------------------

def _stream(insn):
    """Stream name of ``insn`` for the per-stream instruction counter (docs/isa.md table)."""
    if isinstance(insn, Load) and insn.memory_type in (MemType.INP, MemType.WGT):
        return "load"
    if isinstance(insn, Store):
        return "store"
    return "compute"


class ReferenceMachine:
    """DRAM plus the five SRAMs, executing instructions one by one.

    SRAMs: ``uop`` is a list of ``(dst, src, wgt)`` tuples; ``inp``, ``wgt``,
    ``acc`` and ``out`` are int64 arrays of shape ``(depth, batch, block_in)``,
    ``(depth, block_out, block_in)``, ``(depth, batch, block_out)`` and
    ``(depth, batch, block_out)``.
    """

    def __init__(self, cfg, dram_bytes=1 << 16):
        self.cfg = c = cfg
        self.dram = ReferenceDram(dram_bytes)
        self.uop = [(0, 0, 0)] * c.depth("uop")
        self.inp = np.zeros((c.depth("inp"), c.batch, c.block_in), dtype=np.int64)
        self.wgt = np.zeros((c.depth("wgt"), c.block_out, c.block_in), dtype=np.int64)
        self.acc = np.zeros((c.depth("acc"), c.batch, c.block_out), dtype=np.int64)
        self.out = np.zeros((c.depth("acc"), c.batch, c.block_out), dtype=np.int64)
        # Micro-op fields, packed from bit 0: dst (acc index), src, wgt.
        self.uop_fields = [c.index_bits("acc"), c.src_index_bits, c.index_bits("wgt")]
        uop_bits = sum(self.uop_fields)
        # DRAM element of each memory type: (bits per value, values per element).
        self.elem = {
            "inp": (c.inp_width, c.batch * c.block_in),
            "wgt": (c.wgt_width, c.block_out * c.block_in),
            "acc": (c.acc_width, c.batch * c.block_out),
            "acc8": (8, c.batch * c.block_out),
            "out": (c.out_width, c.batch * c.block_out),
            "uop": (32 if uop_bits <= 32 else 64, 1),
        }
        self.stats = self._fresh_stats()

    # -- DRAM convenience ------------------------------------------------------

    def read(self, addr, n):
        return self.dram.read(addr, n)

    def write(self, addr, data):
        self.dram.write(addr, data)

    def elem_bytes(self, kind):
        bits, count = self.elem[kind]
        return bits * count // 8

    # -- helpers ---------------------------------------------------------------

    @staticmethod
    def _fresh_stats():
        return {
            "dram_bytes_read": dict.fromkeys(("insn", "uop", "inp", "wgt", "acc", "acc8"), 0),
            "dram_bytes_written": {"out": 0},
            "gemm_uops": 0,
            "alu_uops": 0,
            "instructions": dict.fromkeys(("load", "compute", "store"), 0),
        }

    def unpack_uop(self, word):
        """``(dst, src, wgt)`` of a stored micro-op word."""
        fields = []
        for width in self.uop_fields:
            fields.append(word & ((1 << width) - 1))
            word >>= width
        return tuple(fields)

    def read_element(self, kind, index):
        """DRAM element ``index`` of kind ``kind`` (a micro-op tuple or a flat value list)."""
        nbytes = self.elem_bytes(kind)
        raw = self.dram.read(index * nbytes, nbytes)
        if kind == "uop":
            return self.unpack_uop(int.from_bytes(bytes(raw), "little"))
        return decode_values(raw, self.elem[kind][0])

    def set_entry(self, buffer, index, values):
        """Write SRAM entry ``index`` of ``buffer`` from a flat value list (or a uop)."""
        if buffer == "uop":
            self.uop[index] = tuple(values)
            return
        sram = getattr(self, buffer)
        entry = sram[index]                 # raises IndexError when out of range
        flat = list(values)
        assert len(flat) == entry.size
        sram[index] = np.array(flat, dtype=np.int64).reshape(entry.shape)

    def zero_entry(self, buffer):
        if buffer == "uop":
            return (0, 0, 0)
        return [0] * getattr(self, buffer)[0].size

    # -- execution -------------------------------------------------------------

    def run(self, program):
        """Execute ``program`` (which must end with FINISH); return the counters."""
        assert program and isinstance(program[-1], Finish), "programs end with FINISH"
        self.stats = self._fresh_stats()
        self.bias = [0] * (self.cfg.batch * self.cfg.block_out)
        self.scale = [0] * (self.cfg.batch * self.cfg.block_out)     # the scale register (per_channel_store)
        for insn in program:
            self.stats["dram_bytes_read"]["insn"] += INSN_BYTES
            self.stats["instructions"][_stream(insn)] += 1
            if isinstance(insn, Finish):
                break
            if isinstance(insn, Load):
                self.load(insn)
            elif isinstance(insn, Store):
                self.store(insn)
            elif isinstance(insn, Gemm):
                self.gemm(insn)
            elif isinstance(insn, Alu):
                self.alu(insn)
            else:
                raise TypeError(f"unknown instruction {insn!r}")
        return self.stats

    def load(self, insn):
        kind = insn.memory_type.name.lower()                 # DRAM element kind
        buffer = "acc" if kind == "acc8" else kind           # SRAM written
        if insn.x_size == 0 or insn.y_size == 0:
            return
        rows = insn.y_pad0 + insn.y_size + insn.y_pad1
        cols = insn.x_pad0 + insn.x_size + insn.x_pad1
        for r in range(rows):
            for c in range(cols):
                data_r, data_c = r - insn.y_pad0, c - insn.x_pad0
                if 0 <= data_r < insn.y_size and 0 <= data_c < insn.x_size:
                    values = self.read_element(kind, insn.dram_base + data_r * insn.x_stride + data_c)
                else:
                    values = self.zero_entry(buffer)
                self.set_entry(buffer, insn.sram_base + r * cols + c, values)
        self.stats["dram_bytes_read"][kind] += insn.y_size * insn.x_size * self.elem_bytes(kind)

    def store(self, insn):
        assert insn.memory_type == MemType.OUT
        if insn.set_bias:
            assert insn.sram_base < len(self.acc), "set_bias beyond the accumulators"
            if insn.requant and self.cfg.per_channel_store:
                self.scale = self.acc[insn.sram_base].flatten().tolist()
            else:
                self.bias = self.acc[insn.sram_base].flatten().tolist()
            return
        if insn.x_size == 0 or insn.y_size == 0:
            return
        nbytes = self.elem_bytes("out")
        for r in range(insn.y_size):
            for c in range(insn.x_size):
                index = insn.sram_base + r * insn.x_size + c
                if insn.requant:        # docs/isa.md: clip(((acc + bias) · mul) >> shift, lo, hi), wrapped
                    hi = (1 << (self.cfg.out_width - 1)) - 1
                    lo = 0 if insn.relu else -hi - 1
                    bias = self.bias if insn.bias else [0] * len(self.bias)
                    w = self.cfg.acc_width
                    accs = self.acc[index].flatten().tolist()
                    if insn.mul == 0 and self.cfg.per_channel_store:
                        # per channel: clip((acc · scale + bias) >> shift, lo, hi), wrapped
                        sums = [to_signed(to_signed(v * k, w) + b, w) for v, k, b in zip(accs, self.scale, bias)]
                    else:
                        sums = [to_signed(to_signed(v + b, w) * insn.mul, w) for v, b in zip(accs, bias)]
                    values = [min(max(v >> insn.shift, lo), hi) for v in sums]
                else:
                    values = self.out[index].flatten().tolist()
                raw = encode_values(values, self.cfg.out_width)
                self.dram.write((insn.dram_base + r * insn.x_stride + c) * nbytes, raw)
        self.stats["dram_bytes_written"]["out"] += insn.y_size * insn.x_size * nbytes

    def _loop(self, insn):
        """Yield ``(o, i, (d, s, w))`` in GEMM/ALU nesting order."""
        for o in range(insn.iter_out):
            for i in range(insn.iter_in):
                for u in range(insn.uop_bgn, insn.uop_end):
                    yield o, i, self.uop[u]

    def _write_result(self, dst):
        """Narrow ``acc[dst]`` into ``out[dst]``."""
        for b in range(self.cfg.batch):
            for n in range(self.cfg.block_out):
                self.out[dst, b, n] = to_signed(int(self.acc[dst, b, n]), self.cfg.out_width)

    def gemm(self, insn):
        c = self.cfg
        for o, i, (d, s, w) in self._loop(insn):
            dst = d + o * insn.dst_factor_out + i * insn.dst_factor_in
            src = s + o * insn.src_factor_out + i * insn.src_factor_in
            wgt = w + o * insn.wgt_factor_out + i * insn.wgt_factor_in
            self.acc[dst]                                   # range check only
            for b in range(c.batch):
                for n in range(c.block_out):
                    if insn.reset:
                        value = 0
                    else:
                        value = 0 if insn.overwrite else int(self.acc[dst, b, n])
                        for k in range(c.block_in):
                            value += int(self.inp[src, b, k]) * int(self.wgt[wgt, n, k])
                    self.acc[dst, b, n] = to_signed(value, c.acc_width)
            self._write_result(dst)
            self.stats["gemm_uops"] += 1

    def alu(self, insn):
        c = self.cfg
        for o, i, (d, s, _) in self._loop(insn):
            dst = d + o * insn.dst_factor_out + i * insn.dst_factor_in
            src = s + o * insn.src_factor_out + i * insn.src_factor_in
            for b in range(c.batch):
                for n in range(c.block_out):
                    a = int(self.acc[dst, b, n])
                    operand = to_signed(insn.imm, c.acc_width) if insn.use_imm else int(self.acc[src, b, n])
                    self.acc[dst, b, n] = alu_apply(insn.alu_op, a, operand, c.acc_width)
            self._write_result(dst)
            self.stats["alu_uops"] += 1
