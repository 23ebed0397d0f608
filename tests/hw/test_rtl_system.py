"""The whole accelerator in Verilator (cocotb + cocotbext-axi) against the functional simulator."""

import numpy as np
import pytest

from tilewright import PRESETS, isa
from tilewright.builder import noop
from tilewright.isa import Alu, ErrorCode, Finish, Gemm, Load, MemType, Store, Stream
from tilewright.examples.matmul import BlockedMatmul
from tilewright.hw.regs import Status
from tilewright.sim import Dram
from tilewright.sim.differential import fsim_outcomes, run_differential
from tilewright.sim.fuzz import program_image, random_program
from tilewright.sim.rtl import Job, run_programs

from ..words import ILLEGAL_OPCODES, opcode_only, with_reserved_bit

DRAM_BYTES = 1 << 16
RANDOM_PROGRAMS = {"pico": 40, "tiny": 120, "small": 100, "slim": 30, "compact": 30, "medium": 30}


@pytest.mark.parametrize("config", list(RANDOM_PROGRAMS))
def test_random_programs_match_fsim(config):
    cfg = PRESETS[config]
    programs = [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(RANDOM_PROGRAMS[config])]
    results = run_differential(cfg, programs, dram_bytes=DRAM_BYTES)
    assert all(r.done and r.error == 0 for r in results)
    # The programs really exercise the machine: several micro-ops of each kind per program on average
    # (counted by fsim with every counter: a board preset builds only the cycle counter).
    counted = fsim_outcomes(cfg.replace(perf_counters=True), programs, dram_bytes=DRAM_BYTES)
    assert sum(o.counters["gemm_uops"] for o in counted) > 8 * len(programs)
    assert sum(o.counters["alu_uops"] for o in counted) > 8 * len(programs)
    assert {p.threads for p in programs} == {1, 2, 3}


def test_random_programs_on_a_wide_variant_without_perf_counters():
    """Batch 2, 16-bit data, 16-bit accumulators and a bus wider than most elements; without the performance
    counters it runs the same programs and only its cycle counter counts."""
    cfg = PRESETS["tiny"].replace(name="tiny_wide", batch=2, inp_width=16, wgt_width=16, out_width=16,
                                  acc_width=16, dram_bus_width=128, perf_counters=False)
    programs = [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(40)]
    results = run_differential(cfg, programs, dram_bytes=DRAM_BYTES)
    assert all(r.done and r.error == 0 for r in results)
    assert all(r.counters["cycles"] > 0 for r in results)
    assert not any(value for r in results for name, value in r.counters.items() if name != "cycles")


# Each Verilator build of a config costs a minute of `make test`: the variants below combine options. (The
# multi-pass ALU without `lean` is `tiny_b2_v2` below and test_core's; `lean` with several ALU lanes is `slim`'s.)
#: ``lean`` with one ALU lane.
LEAN_V1 = PRESETS["tiny"].replace(name="tiny_lean_v1", lean=True, vector_lanes=1)
#: The small boards' diet, the iCEBreaker's preset: no requantizer, fetch sharing the loads' reader, MUL a bit a
#: cycle, the serial core, no command queues (a stream's one instruction in a register), built for a slow clock.
PLAIN_STORE = PRESETS["tiny_serial"]


def test_random_programs_lean():
    """``lean``: the loading streams share one DMA engine, the requantizing STORE shares the ALU's
    accumulator port, the range checks are serial; the same DRAM, errors and counters (bytes per memory
    type included) as fsim."""
    programs = [random_program(LEAN_V1, seed, dram_bytes=DRAM_BYTES) for seed in range(40)]
    results = run_differential(LEAN_V1, programs, dram_bytes=DRAM_BYTES)
    assert all(r.done and r.error == 0 for r in results)
    assert sum(r.counters["read_acc"] + r.counters["read_uop"] for r in results) > 0


def test_random_programs_without_the_requantizing_store():
    """``requant_store = false`` with ``lean``, ``serial_mul``, ``serial_core``, no command queues and a slow
    clock (the small boards' diet, the iCEBreaker's preset ``tiny_serial``): no requantizer, fetch sharing the loads' reader, MUL a bit a
    cycle, GEMM and ALU a lane at a time, one instruction per stream, the STORE's elements straight from the
    output buffer; a STORE with a requantizing bit set stops both tiers with RESERVED_BITS."""
    cfg = PLAIN_STORE
    programs = [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(40)]
    requantizing = isa.encode(Store(requant=True, x_size=1, y_size=1), PRESETS["tiny"]) + isa.encode(Finish(), cfg)
    programs.append(program_image(cfg, requantizing, dram_bytes=DRAM_BYTES, seed=40))
    results = run_differential(cfg, programs, dram_bytes=DRAM_BYTES)
    assert all(r.done and r.error == 0 for r in results[:-1])
    assert results[-1].error == ErrorCode.RESERVED_BITS
    # (its STOREs wrote: counted by fsim with every counter, the preset building only the cycle counter)
    counted = fsim_outcomes(cfg.replace(perf_counters=True), programs[:-1], dram_bytes=DRAM_BYTES)
    assert sum(o.counters["write_out"] for o in counted) > 0


@pytest.mark.parametrize("cfg", [
    LEAN_V1,
    PRESETS["tiny"].replace(name="tiny_b2_v2", batch=2, vector_lanes=2, dram_bus_width=64),
], ids=lambda c: c.name)
def test_random_programs_with_narrow_vector_lanes(cfg):
    """ALU and requantizing STORE built for fewer lanes than an accumulator row: same results as fsim,
    and ALU micro-ops take ``vector_passes`` cycles each. (Seeds 40 on: ``LEAN_V1`` runs 0-39 above.)"""
    programs = [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(40, 80)]
    results = run_differential(cfg, programs, dram_bytes=DRAM_BYTES)
    assert all(r.done and r.error == 0 for r in results)
    assert all(r.counters["alu_busy"] >= cfg.vector_passes * r.counters["alu_uops"] for r in results)


def _matmul_image(cfg, M, K, N, *, threads, tiles, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (N, K), dtype=np.int8)
    kernel = BlockedMatmul(cfg, M, K, N, threads=threads, tiles=tiles, mul=5, shift=7, relu=True)
    dram = Dram(DRAM_BYTES)
    base = dram.alloc(kernel.dram_bytes, align=64)
    for name, data in kernel.pack(A, B).items():
        dram.write(base + kernel.segments[name][0], data)
    return program_image(cfg, kernel.instructions(base), dram=dram, threads=threads), kernel, base


@pytest.mark.parametrize("config, shape, tiles", [
    ("tiny", (8, 16, 8), (2, 1, 2)),
    ("small", (16, 32, 16), (4, 1, 2)),
    ("default", (16, 64, 32), (4, 1, 2)),
])
def test_blocked_matmul_matches_fsim(config, shape, tiles):
    cfg = PRESETS[config]
    programs = [_matmul_image(cfg, *shape, threads=t, tiles=tiles, seed=t)[0] for t in (1, 2)]
    if config == "default":     # smoke-test the big preset with a few random programs too
        programs += [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(8)]
    run_differential(cfg, programs, dram_bytes=DRAM_BYTES)


TINY = PRESETS["tiny"]
L, C, S = Stream.LOAD, Stream.COMPUTE, Stream.STORE

def error_programs(cfg):
    """``{ErrorCode: program}``: a program stopping with each error code on ``cfg`` (its buffers' sizes)."""
    return {
        ErrorCode.ILLEGAL_OPCODE: opcode_only(ILLEGAL_OPCODES[1]) + isa.encode_program([Finish()], cfg),
        ErrorCode.ILLEGAL_MEMORY_TYPE: [Gemm(), Load(memory_type=MemType.OUT, x_size=1, y_size=1), Finish()],
        ErrorCode.ILLEGAL_ALU_OP: [Alu(alu_op=6), Finish()],
        ErrorCode.ILLEGAL_DEPENDENCY: [Store(pop_next=True), Finish()],
        ErrorCode.SRAM_RANGE: [Load(memory_type=MemType.INP, sram_base=cfg.depth("inp") - 2, y_size=1, x_size=3,
                                    x_stride=3, push_next=True), Finish(pop_prev=True)],
        ErrorCode.UOP_RANGE: [Gemm(uop_bgn=0, uop_end=cfg.depth("uop") + 1, iter_out=1, iter_in=1), Finish()],
        ErrorCode.INDEX_RANGE: [Gemm(uop_end=1, iter_out=3, iter_in=1, dst_factor_out=cfg.depth("acc") // 2),
                                Finish()],
        ErrorCode.BUS_ERROR: [Load(memory_type=MemType.ACC, dram_base=DRAM_BYTES // cfg.elem_bytes("acc") - 1,
                                   y_size=1, x_size=2, x_stride=2), Finish()],
        ErrorCode.DEADLOCK: [noop(L).replace(pop_next=True, push_next=True),
                             noop(C).replace(pop_prev=True, push_prev=True), Finish()],
        ErrorCode.PROTOCOL: [Gemm(push_next=True), Finish()],
        ErrorCode.RESERVED_BITS: isa.encode_program([Gemm()], cfg)
        + with_reserved_bit(Alu(), cfg).to_bytes(isa.INSN_BYTES, "little") + isa.encode_program([Finish()], cfg),
    }


def test_a_store_into_the_running_program_stops_the_rtl_as_in_fsim():
    """Random programs with one STORE aimed into their own instructions: both tiers stop there with
    STORE_OVER_PROGRAM and leave the same DRAM (the instructions unchanged); a program kept clear of
    itself runs on."""
    programs = [random_program(TINY, seed, dram_bytes=DRAM_BYTES, over_program=True) for seed in range(10)]
    outcomes = fsim_outcomes(TINY, programs, dram_bytes=DRAM_BYTES)
    assert sum(o.error == ErrorCode.STORE_OVER_PROGRAM for o in outcomes) >= 8
    for program, outcome in zip(programs, outcomes):
        start = program.insn_addr
        assert outcome.dram[start:start + len(program.binary)] == program.binary
    run_differential(TINY, programs + [random_program(TINY, 10, dram_bytes=DRAM_BYTES)], dram_bytes=DRAM_BYTES)


# (the second shares one reader among fetch and the loads, whose errors must reach the unit that asked)
@pytest.mark.parametrize("cfg", [TINY, PLAIN_STORE],
                         ids=lambda c: c.name)
def test_every_error_code_stops_the_rtl_as_in_fsim(cfg):
    programs_by_code = error_programs(cfg)
    programs = [program_image(cfg, p, dram_bytes=DRAM_BYTES, seed=int(code)) for code, p in programs_by_code.items()]
    programs.append(program_image(cfg, [Gemm()], dram_bytes=DRAM_BYTES, seed=99))        # no FINISH
    programs.append(program_image(cfg, [Finish(), Gemm()], dram_bytes=DRAM_BYTES, seed=98))
    expected = [int(code) for code in programs_by_code] + [ErrorCode.PROTOCOL, ErrorCode.PROTOCOL]
    assert [o.error for o in fsim_outcomes(cfg, programs, dram_bytes=DRAM_BYTES)] == expected
    jobs = [Job(dram=p.dram, insn_addr=p.insn_addr, insn_count=p.insn_count, max_cycles=20_000) for p in programs]
    # A program that does not start on a 16-byte boundary.
    misaligned = program_image(cfg, [Finish()], dram_bytes=DRAM_BYTES)
    jobs.append(Job(dram=misaligned.dram, insn_addr=misaligned.insn_addr + 8, insn_count=1, max_cycles=20_000))
    expected.append(ErrorCode.BUS_ERROR)
    results = run_programs(cfg, jobs, dram_bytes=DRAM_BYTES)
    assert not any(r.timed_out for r in results)
    assert [r.error for r in results] == expected
    assert all(r.done and not Status.decode(r.status).busy for r in results)
    # After every error the next run starts clean: a valid program still works.
    ok = random_program(cfg, 7, dram_bytes=DRAM_BYTES)
    run_differential(cfg, programs[-1:] + [ok], dram_bytes=DRAM_BYTES)
