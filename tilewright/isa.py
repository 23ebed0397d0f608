"""The instruction-set spec: every field of every instruction, declared once.

Instructions are frozen dataclasses; each field carries its bit width (a
number, or a function of :class:`~tilewright.config.HwConfig`) and a
description in its metadata. Everything else is derived from those
declarations: bit positions (fields are packed from bit 0 in declaration
order, after the common header), the encoder and decoder, the assembler
(:mod:`tilewright.asm`), the Amaranth layouts the RTL decodes with, the
functional simulator's decoder and the tables in ``docs/isa.md``.

An instruction is 128 bits, stored little-endian in 16 bytes. A micro-op is
``(dst, src, wgt)``: an accumulator index, an input-or-accumulator index and
a weight index, packed the same way into 32 or 64 bits.
"""

import dataclasses
import enum
import functools
from dataclasses import dataclass
from typing import ClassVar

__all__ = [
    "INSN_BITS", "INSN_BYTES", "Opcode", "MemType", "AluOp", "Stream", "Queue", "ErrorCode",
    "IsaError", "IllegalInstruction", "Instruction", "Load", "Store", "Gemm", "Alu", "Finish",
    "Uop", "FieldLayout", "Format", "instruction_format", "uop_format", "INSTRUCTION_TYPES",
    "encode", "decode", "encode_program", "decode_program", "validate", "fetch_error", "stream_of",
    "queue_of", "illegal_flags", "dram_end", "padded_rows", "padded_cols", "moves_nothing", "LOAD_STREAMS",
    "STORE_MEMORY_TYPES", "DEP_FLAGS", "config_problem", "uop_bits", "instruction_layouts", "uop_layout",
    "ERROR_BITS", "PROGRAM_ALIGN",
]

INSN_BITS = 128
INSN_BYTES = INSN_BITS // 8
#: Hosts place a program's instructions at a multiple of this many bytes, a beat of the widest DRAM bus (512
#: bits): a program starts a beat on every config. (The fetch stream and fsim need only ``INSN_BYTES``.)
PROGRAM_ALIGN = 64


class Opcode(enum.IntEnum):
    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class MemType(enum.IntEnum):
    """Memory a LOAD or STORE moves; also the unit of its DRAM address."""
    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC8 = 5   # int8 in DRAM, sign-extended into ACC

    @property
    def buffer(self):
        """Name of the SRAM this memory type targets (``"acc"`` for ACC8)."""
        return {MemType.ACC8: "acc"}.get(self, self.name.lower())

    @property
    def dram_elem(self):
        """Name of the DRAM element this memory type is counted in."""
        return self.name.lower()


class AluOp(enum.IntEnum):
    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3   # arithmetic; a negative amount shifts left
    MUL = 4   # low acc_width bits of the product


class Stream(enum.IntEnum):
    LOAD = 0
    COMPUTE = 1
    STORE = 2


class Queue(enum.IntEnum):
    """The four dependency-token queues, named producer→consumer."""
    L2C = 0   # load → compute (RAW: data loaded)
    C2L = 1   # compute → load (WAR: inp/wgt buffer free again)
    C2S = 2   # compute → store (RAW: out written)
    S2C = 3   # store → compute (WAR: out buffer drained)


class ErrorCode(enum.IntEnum):
    """Status the accelerator (and fsim) reports when a run stops."""
    NONE = 0
    ILLEGAL_OPCODE = 1        # fetch: opcode not in :class:`Opcode`
    ILLEGAL_MEMORY_TYPE = 2   # fetch: memory type not valid for LOAD/STORE
    ILLEGAL_ALU_OP = 3        # fetch: ALU opcode not in :class:`AluOp`
    ILLEGAL_DEPENDENCY = 4    # fetch: a dependency flag names no queue of the stream
    SRAM_RANGE = 5            # LOAD/STORE: SRAM region outside its buffer
    UOP_RANGE = 6             # GEMM/ALU: micro-op range outside the uop buffer or reversed
    INDEX_RANGE = 7           # GEMM/ALU: a loop addresses outside acc/inp/wgt
    BUS_ERROR = 8             # DRAM access outside memory (an AXI error response)
    DEADLOCK = 9              # every stream waits and no instruction can move
    PROTOCOL = 10             # FINISH with tokens left or other streams not drained
    RESERVED_BITS = 11        # fetch: a bit beyond the instruction's fields is set
    STORE_OVER_PROGRAM = 12   # STORE: DRAM rows reaching into the running program's instructions


#: Bits of an error code, in the hardware's error ports and the status register.
ERROR_BITS = max(ErrorCode).bit_length()


class IsaError(ValueError):
    """A value that the instruction set cannot represent."""


class IllegalInstruction(IsaError):
    """A well-formed word that no unit may execute; carries an :class:`ErrorCode`."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = ErrorCode(code)


# -- field declarations ------------------------------------------------------

def _field(width, doc, *, signed=False, default=0):
    return dataclasses.field(default=default, metadata={"width": width, "doc": doc, "signed": signed})


def _flag(doc, width=1):
    return _field(width, doc, default=False)


def _requant(width):
    """The width of a requantizing STORE's field: ``width`` bits on a config that builds the requantizer
    (``requant_store``), none on one that does not (the field then always holds its default)."""
    return lambda cfg: width if cfg.requant_store else 0


# Fixed ISA widths (the rest follow buffer depths).
DRAM_ADDR_BITS = 32
SIZE_BITS = 16
PAD_BITS = 4
LOOP_BITS = 14
IMM_BITS = 16
SHIFT_BITS = 5
OPCODE_BITS = 3


def _acc_bits(cfg):
    return cfg.index_bits("acc")


def _src_bits(cfg):
    return cfg.src_index_bits


def _wgt_bits(cfg):
    return cfg.index_bits("wgt")


def _uop_bits(cfg):
    return cfg.index_bits("uop")


def _sram_bits(cfg):
    return max(cfg.index_bits(mem) for mem in ("uop", "inp", "wgt", "acc"))


@dataclass(frozen=True)
class Instruction:
    """Common header: opcode (from the class) and four dependency flags.

    "prev" and "next" are relative to the executing stream (load → compute →
    store). Pops block before execution; pushes happen after completion.
    """
    OPCODE: ClassVar[Opcode]
    MNEMONIC: ClassVar[str]

    pop_prev: bool = _flag("wait for a token from the previous stage")
    pop_next: bool = _flag("wait for a token from the next stage")
    push_prev: bool = _flag("send a token to the previous stage when done")
    push_next: bool = _flag("send a token to the next stage when done")

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    @property
    def stream(self):
        return stream_of(self)


def dram_end(insn):
    """One past the last DRAM element a LOAD or STORE moves: ``dram_base + (y_size-1)·x_stride + x_size``.

    ``insn`` is an instruction or an Amaranth view of one: the RTL computes
    the same expression in gates.
    """
    return insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size


def padded_rows(load):
    """Rows a LOAD writes into SRAM: ``y_pad0 + y_size + y_pad1`` (an instruction or a view of one)."""
    return load.y_pad0 + load.y_size + load.y_pad1


def padded_cols(load):
    """Entries per row a LOAD writes into SRAM: ``x_pad0 + x_size + x_pad1``."""
    return load.x_pad0 + load.x_size + load.x_pad1


def moves_nothing(mem):
    """A LOAD or STORE of no rows or no elements per row (an instruction or a view of one)."""
    return (mem.x_size == 0) | (mem.y_size == 0)


@dataclass(frozen=True)
class _Mem(Instruction):
    memory_type: MemType = _field(3, "memory moved (MemType); also the unit of dram_base and x_stride",
                                  default=MemType.INP)
    sram_base: int = _field(_sram_bits, "first SRAM entry written (LOAD) or read (STORE)")
    dram_base: int = _field(DRAM_ADDR_BITS, "DRAM address in elements of memory_type")
    y_size: int = _field(SIZE_BITS, "rows moved")
    x_size: int = _field(SIZE_BITS, "elements per row; 0 moves nothing (flags only)")
    x_stride: int = _field(SIZE_BITS, "DRAM elements between row starts")

    @property
    def moves_nothing(self):
        return bool(moves_nothing(self))


@dataclass(frozen=True)
class Load(_Mem):
    """DRAM → SRAM, 2D strided, with zero padding.

    Writes ``sram_rows × sram_cols`` consecutive SRAM entries from
    ``sram_base``; data row ``r`` comes from DRAM elements
    ``dram_base + r·x_stride + [0, x_size)``.
    """
    OPCODE: ClassVar[Opcode] = Opcode.LOAD
    MNEMONIC: ClassVar[str] = "load"
    y_pad0: int = _field(PAD_BITS, "zero rows written before the data")
    y_pad1: int = _field(PAD_BITS, "zero rows written after the data")
    x_pad0: int = _field(PAD_BITS, "zero elements written before each row")
    x_pad1: int = _field(PAD_BITS, "zero elements written after each row")

    @property
    def sram_rows(self):
        return padded_rows(self)

    @property
    def sram_cols(self):
        return padded_cols(self)

    @property
    def sram_extent(self):
        """SRAM entries written: the padded rectangle (0 when nothing moves)."""
        return 0 if self.moves_nothing else self.sram_rows * self.sram_cols


@dataclass(frozen=True)
class Store(_Mem):
    """SRAM → DRAM, 2D strided: ``y_size × x_size`` consecutive entries from ``sram_base``.

    Plain, it writes OUT entries. With ``requant`` it reads the accumulators
    instead and writes ``clip(((acc + bias) · mul) >> shift, lo, hi)`` narrowed
    to the output width (``lo`` 0 with ``relu``; ``bias`` the store stream's
    bias register with the ``bias`` flag, else 0): the requantizing epilogue
    on the store path, concurrent with compute. With ``set_bias`` it moves
    nothing and loads the bias register from ``acc[sram_base]`` instead
    (the register is zero at the start of a run). A config without
    ``requant_store`` has none of these fields: their bits are reserved.

    Per channel (a config with ``per_channel_store``): a ``set_bias`` STORE
    with ``requant`` loads the scale register instead of the bias register
    (zero at the start of a run too), and ``mul = 0`` (which would zero
    every output) selects it: ``clip((acc · scale + bias) >> shift, lo, hi)``,
    the multiply before the bias as the per-channel epilogue has it.
    """
    OPCODE: ClassVar[Opcode] = Opcode.STORE
    MNEMONIC: ClassVar[str] = "store"
    memory_type: MemType = _field(3, "memory moved (only OUT)", default=MemType.OUT)
    requant: bool = _flag("read ACC and requantize on the way out", _requant(1))
    relu: bool = _flag("requantize: clip below at 0 instead of the output minimum", _requant(1))
    shift: int = _field(_requant(SHIFT_BITS), "requantize: arithmetic right shift after the multiply")
    mul: int = _field(_requant(IMM_BITS), "requantize: multiplier (the low acc_width bits of acc · mul are kept; "
                      "0: the scale register's, per lane, with per_channel_store)",
                      signed=True, default=1)
    bias: bool = _flag("requantize: add the bias register to the accumulators first", _requant(1))
    set_bias: bool = _flag("load the bias register (with requant and per_channel_store: the scale register) from "
                           "acc[sram_base]; nothing is stored", _requant(1))

    @property
    def moves_nothing(self):
        return self.set_bias or super().moves_nothing

    @property
    def sram_extent(self):
        """SRAM entries read (0 when nothing moves; see ``set_bias`` for the bias register's entry)."""
        return 0 if self.moves_nothing else self.y_size * self.x_size


@dataclass(frozen=True)
class _Loop(Instruction):
    uop_bgn: int = _field(_uop_bits, "first micro-op")
    uop_end: int = _field(lambda cfg: _uop_bits(cfg) + 1, "one past the last micro-op")
    iter_out: int = _field(LOOP_BITS, "outer loop count")
    iter_in: int = _field(LOOP_BITS, "inner loop count")
    dst_factor_out: int = _field(_acc_bits, "acc index step per outer iteration")
    dst_factor_in: int = _field(_acc_bits, "acc index step per inner iteration")
    src_factor_out: int = _field(_src_bits, "src index step per outer iteration")
    src_factor_in: int = _field(_src_bits, "src index step per inner iteration")

    @property
    def uop_count(self):
        """Micro-ops this instruction executes."""
        return self.iter_out * self.iter_in * max(0, self.uop_end - self.uop_bgn)


@dataclass(frozen=True)
class Gemm(_Loop):
    """``for o, i, u: acc[dst] += inp[src] · wgt[w]ᵀ``.

    With ``reset``, ``acc[dst] = 0``; with ``overwrite``, ``acc[dst] =
    inp[src] · wgt[w]ᵀ`` (the first step of a reduction, so that no separate
    reset pass over the accumulators is needed). Indices are the micro-op's
    plus ``o·factor_out + i·factor_in``.
    """
    OPCODE: ClassVar[Opcode] = Opcode.GEMM
    MNEMONIC: ClassVar[str] = "gemm"
    wgt_factor_out: int = _field(_wgt_bits, "wgt index step per outer iteration")
    wgt_factor_in: int = _field(_wgt_bits, "wgt index step per inner iteration")
    reset: bool = _flag("write zero instead of accumulating")
    overwrite: bool = _flag("write the product instead of adding it (reset wins)")


@dataclass(frozen=True)
class Alu(_Loop):
    """``for o, i, u: acc[dst] = op(acc[dst], imm if use_imm else acc[src])``."""
    OPCODE: ClassVar[Opcode] = Opcode.ALU
    MNEMONIC: ClassVar[str] = "alu"
    alu_op: AluOp = _field(3, "operation (AluOp)", default=AluOp.MIN)
    use_imm: bool = _flag("use the immediate instead of acc[src]")
    imm: int = _field(IMM_BITS, "signed immediate, sign-extended to acc_width", signed=True)


@dataclass(frozen=True)
class Finish(Instruction):
    """Ends the run and raises done (compute stream)."""
    OPCODE: ClassVar[Opcode] = Opcode.FINISH
    MNEMONIC: ClassVar[str] = "finish"


INSTRUCTION_TYPES = {cls.OPCODE: cls for cls in (Load, Store, Gemm, Finish, Alu)}


@dataclass(frozen=True)
class Uop:
    """One micro-op: acc index, inp (GEMM) or acc (ALU) index, wgt index."""
    dst: int = _field(_acc_bits, "accumulator index")
    src: int = _field(_src_bits, "input index (GEMM) or accumulator index (ALU)")
    wgt: int = _field(_wgt_bits, "weight index")


# -- formats -----------------------------------------------------------------

@dataclass(frozen=True)
class FieldLayout:
    """Where one field sits in a word."""
    name: str
    offset: int
    width: int
    signed: bool
    doc: str

    @property
    def msb(self):
        return self.offset + self.width - 1

    @property
    def min(self):
        return -(1 << (self.width - 1)) if self.signed else 0

    @property
    def max(self):
        return (1 << (self.width - 1)) - 1 if self.signed else (1 << self.width) - 1


class Format:
    """The bit layout of one instruction type (or the micro-op) under one config.

    A field of no bits under the config (an option it does not build) is not in ``fields``: its value
    is always its default (``absent``), and any other value cannot be encoded.
    """

    def __init__(self, cls, cfg, *, total_bits):
        self.cls, self.cfg, self.total_bits = cls, cfg, total_bits
        self.name = cls.OPCODE.name if issubclass(cls, Instruction) else "UOP"
        decls = [("opcode", OPCODE_BITS, False, "instruction opcode (Opcode)", int)] \
            if issubclass(cls, Instruction) else []
        self.absent = {}        # name -> default
        for f in dataclasses.fields(cls):
            width = f.metadata["width"]
            width = width(cfg) if callable(width) else width
            if width:
                decls.append((f.name, width, f.metadata["signed"], f.metadata["doc"], f.type))
            else:
                self.absent[f.name] = f.default
        self.fields, offset, self._plan = [], 0, []
        for name, width, signed, doc, kind in decls:
            self.fields.append(FieldLayout(name, offset, width, signed, doc))
            if name != "opcode":
                self._plan.append((name, offset, (1 << width) - 1, 1 << width if signed else 0, kind))
            offset += width
        self.used_bits = offset
        self.by_name = {f.name: f for f in self.fields}
        #: The bits no field uses (they follow the fields); a legal word has them all zero.
        self.reserved_mask = ((1 << total_bits) - 1) & ~((1 << offset) - 1)

    def __repr__(self):
        return f"Format({self.name}, {self.used_bits}/{self.total_bits} bits)"

    def check(self, obj):
        """Raise :class:`IsaError` naming the first field whose value does not fit."""
        for f in self.fields[1:] if self.fields[0].name == "opcode" else self.fields:
            value = getattr(obj, f.name)
            if not isinstance(value, int):
                raise IsaError(f"{self.name} field {f.name}={value!r} is not an integer")
            if not f.min <= value <= f.max:
                raise IsaError(f"{self.name} field {f.name}={value} out of range "
                               f"[{f.min}, {f.max}] ({f.width} bits, config {self.cfg.name!r})")
        for name, default in self.absent.items():
            if getattr(obj, name) != default:
                raise IsaError(f"{self.name} field {name}={getattr(obj, name)!r} does not exist on config "
                               f"{self.cfg.name!r} (it keeps its default, {default!r})")

    def pack(self, obj):
        self.check(obj)
        word = 0
        for f in self.fields:
            value = obj.OPCODE if f.name == "opcode" else getattr(obj, f.name)
            word |= (int(value) & ((1 << f.width) - 1)) << f.offset
        return word

    def unpack(self, word):
        """The instruction (or micro-op) in ``word``.

        Enum fields outside their enum stay plain ints, so an illegal memory
        type or ALU op reaches :func:`fetch_error` as hardware would see it.
        """
        values = dict(self.absent)
        for name, offset, mask, wrap, kind in self._plan:
            value = (word >> offset) & mask
            if wrap and value >= wrap >> 1:
                value -= wrap
            if kind is bool:
                value = bool(value)
            elif kind is not int and value in kind._value2member_map_:
                value = kind(value)
            values[name] = value
        return self.cls(**values)


@functools.lru_cache(maxsize=None)
def instruction_format(cls_or_opcode, cfg):
    """:class:`Format` of an instruction class (or opcode) under ``cfg``."""
    cls = INSTRUCTION_TYPES[Opcode(cls_or_opcode)] if isinstance(cls_or_opcode, int) else cls_or_opcode
    return Format(cls, cfg, total_bits=INSN_BITS)


@functools.lru_cache(maxsize=None)
def uop_format(cfg):
    return Format(Uop, cfg, total_bits=cfg.uop_bits_stored)


def uop_bits(cfg):
    """Bits of one micro-op's fields under ``cfg`` (stored padded to 32 or 64)."""
    return Format(Uop, cfg, total_bits=64).used_bits


def config_problem(cfg):
    """Why ``cfg`` cannot encode some instruction or micro-op (a message), or None.

    :class:`~tilewright.config.HwConfig` raises it as a ``ConfigError``; this
    module reads configs but never imports the config module.
    """
    for fmt in [Format(cls, cfg, total_bits=INSN_BITS) for cls in INSTRUCTION_TYPES.values()]:
        if fmt.used_bits > fmt.total_bits:
            widths = ", ".join(f"{f.name} {f.width}" for f in fmt.fields if f.width > 1)
            return (f"the {fmt.name} instruction needs {fmt.used_bits} bits, more than "
                    f"{fmt.total_bits} ({widths}); shrink the buffers")
    if uop_bits(cfg) > 64:
        return f"a micro-op needs {uop_bits(cfg)} bits, more than 64; shrink the buffers"
    return None


# -- encode / decode ---------------------------------------------------------

def encode(insn, cfg):
    """16 little-endian bytes of ``insn``; :class:`IsaError` if a field does not fit."""
    return instruction_format(type(insn), cfg).pack(insn).to_bytes(INSN_BYTES, "little")


def decode(data, cfg):
    """The instruction in 16 bytes (or a 128-bit int).

    Raises :class:`IllegalInstruction` for an unknown opcode
    (``ILLEGAL_OPCODE``), then for a set bit beyond the instruction's fields
    (``RESERVED_BITS``), as fetch checks them; see :meth:`Format.unpack` for
    illegal enum values.
    """
    word = int.from_bytes(data, "little") if isinstance(data, (bytes, bytearray, memoryview)) else data
    opcode = word & ((1 << OPCODE_BITS) - 1)
    if opcode not in INSTRUCTION_TYPES:
        raise IllegalInstruction(ErrorCode.ILLEGAL_OPCODE, f"illegal opcode {opcode}")
    fmt = instruction_format(opcode, cfg)
    if word & fmt.reserved_mask:
        raise IllegalInstruction(ErrorCode.RESERVED_BITS,
                                 f"{fmt.name}: reserved bit {(word & fmt.reserved_mask).bit_length() - 1} is set "
                                 f"(bits {fmt.used_bits}-{fmt.total_bits - 1} must be zero)")
    return fmt.unpack(word)


def encode_program(insns, cfg):
    return b"".join(encode(insn, cfg) for insn in insns)


def decode_program(data, cfg):
    if len(data) % INSN_BYTES:
        raise IsaError(f"instruction stream of {len(data)} bytes is not a multiple of {INSN_BYTES}")
    return [decode(data[i:i + INSN_BYTES], cfg) for i in range(0, len(data), INSN_BYTES)]


def validate(insn, cfg):
    """Raise :class:`IsaError` if ``insn`` cannot be encoded or cannot legally be fetched."""
    instruction_format(type(insn), cfg).check(insn)
    problem = fetch_error(insn)
    if problem:
        raise IllegalInstruction(*problem)


# -- streams and queues ------------------------------------------------------

#: The stream a LOAD of each memory type runs in; a LOAD of any other type is illegal.
LOAD_STREAMS = {MemType.INP: Stream.LOAD, MemType.WGT: Stream.LOAD, MemType.UOP: Stream.COMPUTE,
                MemType.ACC: Stream.COMPUTE, MemType.ACC8: Stream.COMPUTE}

#: The memory types a STORE may move (it runs in the store stream).
STORE_MEMORY_TYPES = (MemType.OUT,)

#: Dependency flag names in header order.
DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")

#: The queue each dependency flag uses, per stream (None: the flag is illegal there).
_QUEUES = {
    Stream.LOAD: {"pop_prev": None, "pop_next": Queue.C2L, "push_prev": None, "push_next": Queue.L2C},
    Stream.COMPUTE: {"pop_prev": Queue.L2C, "pop_next": Queue.S2C,
                     "push_prev": Queue.C2L, "push_next": Queue.C2S},
    Stream.STORE: {"pop_prev": Queue.C2S, "pop_next": None, "push_prev": Queue.S2C, "push_next": None},
}


def stream_of(insn):
    """The stream executing ``insn``, or None if its memory type routes nowhere."""
    if isinstance(insn, Load):
        return LOAD_STREAMS.get(insn.memory_type)
    if isinstance(insn, Store):
        return Stream.STORE if insn.memory_type in STORE_MEMORY_TYPES else None
    return Stream.COMPUTE


def queue_of(stream, flag):
    """The token queue ``flag`` (e.g. ``"pop_prev"``) uses in ``stream``, or None."""
    return _QUEUES[Stream(stream)][flag]


def illegal_flags(stream):
    """The dependency flags that name no queue of ``stream`` (fetch rejects them)."""
    return [flag for flag in DEP_FLAGS if queue_of(stream, flag) is None]


def fetch_error(insn):
    """``(ErrorCode, message)`` if fetch must reject ``insn``, else None."""
    kind = insn.OPCODE.name
    if isinstance(insn, (Load, Store)) and stream_of(insn) is None:
        allowed = ", ".join(m.name for m in (STORE_MEMORY_TYPES if isinstance(insn, Store) else LOAD_STREAMS))
        name = getattr(insn.memory_type, "name", insn.memory_type)
        return ErrorCode.ILLEGAL_MEMORY_TYPE, f"{kind} cannot move memory type {name} (allowed: {allowed})"
    if isinstance(insn, Alu) and insn.alu_op not in AluOp._value2member_map_:
        return ErrorCode.ILLEGAL_ALU_OP, f"illegal ALU opcode {int(insn.alu_op)}"
    stream = stream_of(insn)
    for flag in illegal_flags(stream):
        if getattr(insn, flag):
            return (ErrorCode.ILLEGAL_DEPENDENCY,
                    f"{kind} runs in the {stream.name.lower()} stream, which has no {flag} queue")
    return None


# -- Amaranth layouts --------------------------------------------------------

def _layout(fmt):
    from amaranth.hdl import signed, unsigned
    from amaranth.lib import data
    members = {f.name: (signed if f.signed else unsigned)(f.width) for f in fmt.fields}
    if fmt.used_bits < fmt.total_bits:
        members["reserved"] = unsigned(fmt.total_bits - fmt.used_bits)
    return data.StructLayout(members)


def instruction_layouts(cfg):
    """``{Opcode: data.StructLayout}`` (128 bits each), plus ``"header"`` for the common bits.

    Every layout starts with the same opcode and dependency-flag fields, so
    the header layout decodes any instruction word.
    """
    layouts = {op: _layout(instruction_format(op, cfg)) for op in INSTRUCTION_TYPES}
    layouts["header"] = _layout(instruction_format(Finish, cfg))
    return layouts


def uop_layout(cfg):
    """``data.StructLayout`` of a stored micro-op (``cfg.uop_bits_stored`` bits)."""
    return _layout(uop_format(cfg))
