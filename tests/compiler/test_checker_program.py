"""The program checker rejects unsafe programs; programs save, load and refuse the wrong config."""

import dataclasses

import numpy as np
import pytest

from tilewright import PRESETS
from tilewright.builder import noop
from tilewright.compiler import CheckError, Program, ProgramError, build, check
from tilewright.compiler.ops import DenseSpec, dense
from tilewright.isa import Alu, Finish, Gemm, Load, MemType, Store, Stream
from tilewright.runtime import get_device

TINY = PRESETS["tiny"]
L, C, S = Stream.LOAD, Stream.COMPUTE, Stream.STORE


@pytest.fixture(scope="module")
def program():
    s, _, _ = dense(DenseSpec(batch=2, in_features=8, out_features=8, bias=True, shift=1), TINY)
    return build(s, TINY)


def variant(program, instructions):
    return dataclasses.replace(program, instructions=instructions)


def test_compiled_programs_pass(program):
    report = check(program)
    assert report.instructions == len(program.instructions)
    assert sum(report.tokens.values()) > 0
    cfg = program.config
    assert 0 < max(report.max_tokens.values()) <= cfg.token_queue_depth
    assert all(report.max_tokens[q] <= n for q, n in report.tokens.items())


def test_unbalanced_tokens(program):
    bad = variant(program, [noop(L).replace(push_next=True), Finish()])
    with pytest.raises(CheckError, match="queue l2c: 1 pushes but 0 pops"):
        check(bad)


def test_deadlock_is_found(program):
    bad = variant(program, [noop(L).replace(pop_next=True, push_next=True),
                            noop(C).replace(pop_prev=True, push_prev=True), Finish()])
    with pytest.raises(CheckError, match="the streams can deadlock"):
        check(bad)


def test_token_queue_capacity_counts(program):
    cfg = TINY.replace(token_queue_depth=2, name="shallow")
    pushes = [noop(C).replace(push_prev=True)] * 3
    pops = [noop(L).replace(pop_next=True)] * 2 + [noop(L).replace(pop_next=True, push_next=True)]
    fine = dataclasses.replace(program, config=cfg, instructions=pops + pushes + [Finish(pop_prev=True)])
    check(fine)       # loads drain the queue as compute fills it
    blocked = dataclasses.replace(program, config=cfg.replace(cmd_queue_depth=2),
                                  instructions=pops + pushes + [Finish(pop_prev=True)])
    with pytest.raises(CheckError, match="deadlock"):
        check(blocked)


def test_finish_before_other_streams(program):
    bad = variant(program, [Store(x_size=1, y_size=1), Finish()])
    with pytest.raises(CheckError, match="FINISH \\(instruction 1\\) is not the last"):
        check(bad)


@pytest.mark.parametrize("insn, message", [
    (Load(memory_type=MemType.INP, sram_base=TINY.depth("inp") - 1, y_size=1, x_size=2, x_stride=2),
     "SRAM inp"),
    (Load(memory_type=MemType.ACC, dram_base=1 << 20, y_size=1, x_size=1, x_stride=1), "beyond the program image"),
    (Gemm(uop_bgn=3, uop_end=2), "outside the uop buffer"),
    (Alu(uop_bgn=0, uop_end=1, iter_out=3, iter_in=1, dst_factor_out=TINY.depth("acc") // 2), "dst index reaches"),
])
def test_ranges(program, insn, message):
    stream = insn.stream
    body = [insn] if stream == C else [insn.replace(push_next=True)]
    finish = Finish() if stream == C else Finish(pop_prev=True)
    with pytest.raises(CheckError, match=message):
        check(variant(program, body + [finish]))


def test_save_load_round_trip(program, tmp_path):
    path = tmp_path / "dense.twp"
    program.save(path)
    back = Program.load(path, TINY)
    assert back.instructions == program.instructions
    assert back.segments == program.segments
    np.testing.assert_array_equal(back.uop_words, program.uop_words)
    rng = np.random.default_rng(0)
    inputs = {"data": rng.integers(-128, 128, (2, 2, 1, 4)), "weight": rng.integers(-128, 128, (2, 2, 4, 4)),
              "bias": rng.integers(-50, 50, (2, 1, 4))}
    device = get_device("fsim", TINY)
    np.testing.assert_array_equal(device.run_program(back, inputs)[0]["out"],
                                  device.run_program(program, inputs)[0]["out"])


def test_load_errors(program, tmp_path):
    path = tmp_path / "p.twp"
    program.save(path)
    with pytest.raises(ProgramError, match="compiled for config tiny .* not small"):
        Program.load(path, "small")
    broken = tmp_path / "broken.twp"
    broken.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ProgramError, match="not a tilewright program"):
        Program.load(broken)
    with pytest.raises(ProgramError, match="not a tilewright program"):
        Program.load(tmp_path / "missing.twp")


def test_device_refuses_other_config(program):
    from tilewright.runtime import DeviceError
    with pytest.raises(DeviceError, match="compiled for config tiny"):
        get_device("fsim", "small").run_program(program, {})
    with pytest.raises(DeviceError, match="needs input\\(s\\) data, weight, bias"):
        get_device("fsim", TINY).run_program(program, {})
