"""Assembler and disassembler."""

import pytest
from hypothesis import given, settings, strategies as st

from tilewright import PRESETS, isa
from tilewright.asm import AsmError, assemble, disassemble
from tilewright.isa import Alu, AluOp, Finish, Gemm, Load, MemType, Store

from .strategies import instructions

CONFIGS = list(PRESETS.values())


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_round_trip_random_programs(cfg):
    @settings(max_examples=100, deadline=None)
    @given(st.lists(instructions(cfg), max_size=12))
    def check(program):
        text = disassemble(program, cfg)
        assert assemble(text, cfg) == program
        binary = isa.encode_program(program, cfg)
        assert disassemble(binary, cfg) == text
    check()


def test_readable_listing():
    cfg = PRESETS["default"]
    program = [
        Load(memory_type=MemType.INP, dram_base=64, y_size=2, x_size=8, x_stride=8, push_next=True),
        Gemm(pop_prev=True, uop_end=4, iter_out=2, iter_in=1, dst_factor_out=1),
        Alu(alu_op=AluOp.SHR, use_imm=True, imm=-3, uop_bgn=4, uop_end=5, iter_out=2, iter_in=1),
        Store(memory_type=MemType.OUT, y_size=2, x_size=1, x_stride=1),
        Finish(),
    ]
    assert disassemble(program, cfg).splitlines() == [
        "load inp push_next dram_base=64 y_size=2 x_size=8 x_stride=8",
        "gemm pop_prev uop_end=4 iter_out=2 iter_in=1 dst_factor_out=1",
        "alu shr uop_bgn=4 uop_end=5 iter_out=2 iter_in=1 use_imm imm=-3",
        "store out y_size=2 x_size=1 x_stride=1",
        "finish",
    ]


def test_comments_hex_numbers_and_any_field_order():
    cfg = PRESETS["tiny"]
    text = """
        # a comment line
        load inp x_size=0x10 dram_base=0x40 y_size=1 push_next   ; trailing comment
        finish pop_prev
    """
    assert assemble(text, cfg) == [
        Load(memory_type=MemType.INP, dram_base=0x40, y_size=1, x_size=16, push_next=True),
        Finish(pop_prev=True),
    ]


def test_numeric_kind_for_illegal_encodings():
    cfg = PRESETS["tiny"]
    (insn,) = assemble("load 7 x_size=1", cfg)
    assert insn.memory_type == 7
    assert disassemble([insn], cfg) == "load 7 x_size=1\n"


@pytest.mark.parametrize("text, message", [
    ("jump x=1", r"^line 1: unknown mnemonic 'jump'; expected one of load, store, gemm, finish, alu$"),
    ("load", r"^line 1: load needs a memory_type first \(uop, wgt, inp, acc, out, acc8\)$"),
    ("\nalu sram_base=1", r"^line 2: alu needs a alu_op first"),
    ("gemm uop_bgn", r"^line 1: field uop_bgn needs a value \(uop_bgn=N\)$"),
    ("gemm reset=1", r"^line 1: reset is a flag; write it without a value$"),
    ("gemm iter_out=2 iter_out=3", r"^line 1: field iter_out given twice$"),
    ("gemm imm=3", r"^line 1: gemm has no field 'imm'$"),
    ("gemm iter_out=ten", r"^line 1: 'ten' is not an integer$"),
    ("gemm iter_out=20000", r"^line 1: GEMM field iter_out=20000 out of range \[0, 16383\]"),
    ("alu max imm=-40000", r"^line 1: ALU field imm=-40000 out of range"),
])
def test_errors_name_the_line(text, message):
    with pytest.raises(AsmError, match=message):
        assemble(text, PRESETS["default"])
