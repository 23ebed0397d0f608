"""The ISA spec: layouts, encode/decode, validation, streams, Amaranth layouts."""

import pytest
from hypothesis import given, settings

from tilewright import PRESETS, isa
from tilewright.isa import (Alu, AluOp, ErrorCode, Finish, Gemm, IllegalInstruction, IsaError, Load,
                            MemType, Queue, Store, Stream, Uop)

from .strategies import instructions, uops
from .words import ILLEGAL_OPCODES, get_field, opcode_only, with_reserved_bit

CONFIGS = list(PRESETS.values())


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_formats_fit_and_share_the_header(cfg):
    header = [(f.name, f.offset, f.width) for f in isa.instruction_format(Finish, cfg).fields]
    assert [h[0] for h in header] == ["opcode", "pop_prev", "pop_next", "push_prev", "push_next"]
    for op in isa.INSTRUCTION_TYPES:
        fmt = isa.instruction_format(op, cfg)
        assert fmt.used_bits <= isa.INSN_BITS
        assert [(f.name, f.offset, f.width) for f in fmt.fields[:5]] == header
        ends = [f.offset + f.width for f in fmt.fields]
        assert [f.offset for f in fmt.fields] == [0] + ends[:-1]    # packed from bit 0, no gaps or overlaps
    assert isa.uop_format(cfg).used_bits == cfg.uop_bits <= cfg.uop_bits_stored


def test_default_widths_follow_depths():
    cfg = PRESETS["default"]
    gemm = isa.instruction_format(Gemm, cfg).by_name
    assert (gemm["uop_bgn"].width, gemm["uop_end"].width) == (13, 14)
    assert (gemm["dst_factor_out"].width, gemm["src_factor_in"].width, gemm["wgt_factor_in"].width) == (11, 11, 10)
    uop = isa.uop_format(cfg).by_name
    assert [(uop[n].offset, uop[n].width) for n in ("dst", "src", "wgt")] == [(0, 11), (11, 11), (22, 10)]
    assert isa.instruction_format(Alu, cfg).by_name["imm"].signed


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_encode_decode_round_trip(cfg):
    @settings(max_examples=300, deadline=None)
    @given(instructions(cfg))
    def check(insn):
        data = isa.encode(insn, cfg)
        assert len(data) == isa.INSN_BYTES
        back = isa.decode(data, cfg)
        assert back == insn and type(back) is type(insn)
        assert isa.encode(back, cfg) == data
    check()


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_uop_round_trip(cfg):
    fmt = isa.uop_format(cfg)

    @settings(max_examples=100, deadline=None)
    @given(uops(cfg))
    def check(u):
        word = fmt.pack(u)
        assert word < 1 << cfg.uop_bits
        assert fmt.unpack(word) == u
    check()


def test_encoding_is_little_endian_bit_exact():
    cfg = PRESETS["default"]
    data = isa.encode(Alu(alu_op=AluOp.SHR, use_imm=True, imm=-2, push_next=True), cfg)
    word = int.from_bytes(data, "little")
    alu = isa.instruction_format(Alu, cfg).by_name
    assert get_field(word, alu["opcode"]) == isa.Opcode.ALU
    assert get_field(word, alu["push_next"]) == 1
    assert get_field(word, alu["alu_op"]) == AluOp.SHR
    assert get_field(word, alu["imm"]) == (1 << alu["imm"].width) - 2      # -2, two's complement


@pytest.mark.parametrize("insn, message", [
    (Load(sram_base=1 << 13), r"^LOAD field sram_base=8192 out of range \[0, 8191\] \(13 bits, config 'default'\)$"),
    (Alu(imm=40000), r"^ALU field imm=40000 out of range \[-32768, 32767\]"),
    (Gemm(iter_out=-1), r"^GEMM field iter_out=-1 out of range"),
    (Store(dram_base=1 << 32), r"^STORE field dram_base=4294967296 out of range"),
    (Load(x_size=1.5), r"^LOAD field x_size=1.5 is not an integer$"),
])
def test_encode_rejects_out_of_range(insn, message):
    with pytest.raises(IsaError, match=message):
        isa.encode(insn, PRESETS["default"])


def test_decode_illegal_words():
    cfg = PRESETS["tiny"]
    assert ILLEGAL_OPCODES
    for opcode in ILLEGAL_OPCODES:
        with pytest.raises(IllegalInstruction, match=f"illegal opcode {opcode}") as e:
            isa.decode(opcode_only(opcode), cfg)
        assert e.value.code == ErrorCode.ILLEGAL_OPCODE
    raw = isa.decode(isa.encode(Load(memory_type=7), cfg), cfg)
    assert raw.memory_type == 7 and not isinstance(raw.memory_type, MemType)
    assert isa.fetch_error(raw)[0] == ErrorCode.ILLEGAL_MEMORY_TYPE
    with pytest.raises(IsaError, match=f"not a multiple of {isa.INSN_BYTES}"):
        isa.decode_program(bytes(isa.INSN_BYTES + 4), cfg)


@pytest.mark.parametrize("insn", [Load(memory_type=MemType.INP, x_size=3), Store(), Gemm(uop_end=2), Alu(), Finish()],
                         ids=lambda i: type(i).__name__)
@pytest.mark.parametrize("highest", [False, True], ids=["lowest", "highest"])
def test_a_set_reserved_bit_is_illegal(insn, highest):
    """Every bit after an instruction's last field must be 0: decode (and so fsim and disasm) say which bit."""
    cfg = PRESETS["tiny"]
    word = with_reserved_bit(insn, cfg, highest=highest)
    fmt = isa.instruction_format(type(insn), cfg)
    bit = fmt.total_bits - 1 if highest else fmt.used_bits
    with pytest.raises(IllegalInstruction, match=f"reserved bit {bit} is set") as e:
        isa.decode(word, cfg)
    assert e.value.code == ErrorCode.RESERVED_BITS
    assert isa.decode(word & ~fmt.reserved_mask, cfg) == insn


@pytest.mark.parametrize("insn, code", [
    (Load(memory_type=MemType.OUT), ErrorCode.ILLEGAL_MEMORY_TYPE),
    (Store(memory_type=MemType.INP), ErrorCode.ILLEGAL_MEMORY_TYPE),
    (Alu(alu_op=6), ErrorCode.ILLEGAL_ALU_OP),
    (Load(memory_type=MemType.INP, pop_prev=True), ErrorCode.ILLEGAL_DEPENDENCY),
    (Load(memory_type=MemType.WGT, push_prev=True), ErrorCode.ILLEGAL_DEPENDENCY),
    (Store(pop_next=True), ErrorCode.ILLEGAL_DEPENDENCY),
    (Store(push_next=True), ErrorCode.ILLEGAL_DEPENDENCY),
])
def test_fetch_errors(insn, code):
    assert isa.fetch_error(insn)[0] == code
    with pytest.raises(IllegalInstruction) as e:
        isa.validate(insn, PRESETS["small"])
    assert e.value.code == code


def test_streams_and_queues():
    assert Load(memory_type=MemType.INP).stream == Stream.LOAD
    assert Load(memory_type=MemType.WGT).stream == Stream.LOAD
    for mt in (MemType.UOP, MemType.ACC, MemType.ACC8):
        assert Load(memory_type=mt).stream == Stream.COMPUTE
    assert Gemm().stream == Alu().stream == Finish().stream == Stream.COMPUTE
    assert Store().stream == Stream.STORE
    assert isa.queue_of(Stream.LOAD, "push_next") == isa.queue_of(Stream.COMPUTE, "pop_prev") == Queue.L2C
    assert isa.queue_of(Stream.COMPUTE, "push_prev") == isa.queue_of(Stream.LOAD, "pop_next") == Queue.C2L
    assert isa.queue_of(Stream.COMPUTE, "push_next") == isa.queue_of(Stream.STORE, "pop_prev") == Queue.C2S
    assert isa.queue_of(Stream.STORE, "push_prev") == isa.queue_of(Stream.COMPUTE, "pop_next") == Queue.S2C


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_amaranth_layouts_match_the_spec(cfg):
    from amaranth.lib import data

    layouts = isa.instruction_layouts(cfg)
    for op, layout in layouts.items():
        assert layout.size == isa.INSN_BITS
        fmt = isa.instruction_format(isa.Finish if op == "header" else op, cfg)
        for f in fmt.fields:
            assert layout[f.name].offset == f.offset and layout[f.name].shape.width == f.width
    # A word encoded by the spec reads back field by field through the layout.
    insn = Gemm(reset=True, uop_bgn=3, uop_end=9, iter_out=2, iter_in=5, dst_factor_out=1, wgt_factor_in=2)
    word = int.from_bytes(isa.encode(insn, cfg), "little")
    view = data.Const(layouts[isa.Opcode.GEMM], word)
    for name in ("uop_bgn", "uop_end", "iter_out", "iter_in", "dst_factor_out", "wgt_factor_in", "reset"):
        assert view[name] == int(getattr(insn, name))
    uop = isa.uop_layout(cfg)
    assert uop.size == cfg.uop_bits_stored
    u = Uop(dst=cfg.depth("acc") - 1, src=1, wgt=cfg.depth("wgt") - 1)
    view = data.Const(uop, isa.uop_format(cfg).pack(u))
    assert (view.dst, view.src, view.wgt) == (u.dst, u.src, u.wgt)
