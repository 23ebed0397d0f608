"""The tilewright command line, run as users run it."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tilewright import PRESETS, isa
from tilewright.asm import disassemble
from tilewright.cli import main
from tilewright.isa import Alu, AluOp, Finish, Load, MemType

from .words import ILLEGAL_OPCODES, opcode_only, with_reserved_bit


def test_info_json_default():
    out = subprocess.run([sys.executable, "-m", "tilewright.cli", "info", "--config", "default", "--json"],
                         capture_output=True, text=True, check=True).stdout
    info = json.loads(out)
    assert (info["batch"], info["block_in"], info["block_out"]) == (1, 16, 16)
    assert (info["inp_width"], info["wgt_width"], info["acc_width"]) == (8, 8, 32)
    assert [info["depths"][m] for m in ("uop", "inp", "wgt", "acc")] == [8192, 2048, 1024, 2048]
    gemm = info["formats"]["GEMM"]["fields"]
    spec = isa.instruction_format(isa.Gemm, PRESETS["default"]).by_name
    assert {n: (f["offset"], f["width"]) for n, f in gemm.items()} == \
        {n: (f.offset, f.width) for n, f in spec.items()}


def test_info_text_and_toml(tmp_path, capsys):
    path = tmp_path / "wide.toml"
    path.write_text('base = "tiny"\ndram_bus_width = 64\n')
    assert main(["info", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "config wide" in out and "dram_bus_width     64" in out and "uop_end" in out


def test_asm_disasm_round_trip(tmp_path, capsys):
    cfg = PRESETS["small"]
    program = [Load(memory_type=MemType.INP, dram_base=0x20, y_size=2, x_size=4, x_stride=8, push_next=True),
               Alu(alu_op=AluOp.MAX, use_imm=True, imm=-5, pop_prev=True, uop_end=1, iter_out=1, iter_in=1),
               Finish()]
    src = tmp_path / "prog.s"
    src.write_text("# test program\n" + disassemble(program, cfg))
    assert main(["asm", str(src), "--config", "small"]) == 0
    binary = tmp_path / "prog.bin"
    assert binary.read_bytes() == isa.encode_program(program, cfg)
    capsys.readouterr()
    assert main(["disasm", str(binary), "-c", "small"]) == 0
    assert capsys.readouterr().out == disassemble(program, cfg)


@pytest.mark.parametrize("argv, message", [
    (["info", "--config", "huge"], "error: unknown config 'huge'"),
    (["asm", "{tmp}/missing.s", "-c", "tiny"], "error: cannot read {tmp}/missing.s"),
    (["asm", "{tmp}/bad.s", "-c", "tiny"], "error: {tmp}/bad.s: line 2: unknown mnemonic 'nop'"),
    (["disasm", "{tmp}/odd.bin", "-c", "tiny"], "error: {tmp}/odd.bin: instruction stream of 5 bytes"),
    (["disasm", "{tmp}/illegal.bin", "-c", "tiny"],
     f"error: {{tmp}}/illegal.bin: illegal opcode {ILLEGAL_OPCODES[-1]}"),
    (["disasm", "{tmp}/reserved.bin", "-c", "tiny"],
     f"error: {{tmp}}/reserved.bin: FINISH: reserved bit {isa.instruction_format(isa.Finish, PRESETS['tiny']).used_bits} "
     f"is set"),
])
def test_user_errors_are_one_line(tmp_path, argv, message):
    (tmp_path / "bad.s").write_text("finish\nnop\n")
    (tmp_path / "odd.bin").write_bytes(bytes(5))
    (tmp_path / "illegal.bin").write_bytes(opcode_only(ILLEGAL_OPCODES[-1]))
    (tmp_path / "reserved.bin").write_bytes(with_reserved_bit(isa.Finish()).to_bytes(isa.INSN_BYTES, "little"))
    argv = [a.format(tmp=tmp_path) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "tilewright.cli", *argv], capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stderr.startswith(message.format(tmp=tmp_path))
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_demo_passes(capsys):
    assert main(["demo", "matmul", "--config", "small", "--shape", "32", "64", "48"]) == 0
    out = capsys.readouterr().out
    assert "PASS: all 1536 outputs equal the numpy reference" in out
    assert "GEMM micro-ops" in out


def test_docs_check(capsys):
    assert main(["docs", "--check", "--root", str(Path(__file__).parent.parent)]) == 0


@pytest.mark.parametrize("count", ["0", "-5", "x"])
def test_fuzz_needs_a_positive_program_count(count, capsys):
    with pytest.raises(SystemExit) as e:
        main(["fuzz", "--config", "tiny", "-n", count])
    assert e.value.code == 2 and "is not a positive integer" in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--plot", "--roofline", "--trace"])
def test_bench_on_fsim_refuses_outputs_it_cannot_write(option, tmp_path, capsys):
    """fsim counts no cycles: a plot or a timeline would never be written, so the bench says so up front."""
    assert main(["bench", "resnet18", "--backend", "fsim", "--config", "tiny", "--layers", "C11",
                 option, str(tmp_path / "out")]) == 1
    assert "need cycle counts" in capsys.readouterr().err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv", [["fuzz", "--config", "tiny", "-n", "1", "--seed", "-3"],
                                  ["tune", "--layer", "C2", "--seed", "-1"], ["demo", "--seed", "-1"]])
def test_seeds_are_non_negative(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and "is not a non-negative integer" in capsys.readouterr().err
