"""Fault injection on the RTL: a hostile bus, a busy host, a reset in the middle of a run.

Random programs run under cocotbext-axi DRAM models that pause every AXI
channel at random (back-pressure and latency), answer random accesses with
SLVERR, while the host writes registers or resets the accelerator. Every
run ends, with fsim's result or the documented error code, and touches no
DRAM but its own outputs.
"""

import os
import random

import pytest

from tilewright import PRESETS, isa
from tilewright.isa import ErrorCode, Store
from tilewright.sim.differential import compare, fsim_outcomes
from tilewright.sim.fuzz import clearing_program, random_program
from tilewright.sim.rtl import Faults, Job, run_programs

DRAM_BYTES = 1 << 16
#: Programs per preset and fault class (about 170 runs with faults on tiny, 60 on small; with 90 and 30
#: these tests took a sixth of `make test`'s time); `make fuzz` runs TW_FAULT_SCALE=10 times as
#: many, and 500 on default too (cocotb drives every cycle from Python: default's 100 runs took 11 minutes
#: of a core, small's 300 six and a half).
SCALE = int(os.environ.get("TW_FAULT_SCALE", "1"))
COUNT = {name: n * SCALE for name, n in {"tiny": 60, "small": 20, "default": 50}.items()
         if name != "default" or SCALE > 1}


def _programs(cfg, first, count):
    return [random_program(cfg, seed, dram_bytes=DRAM_BYTES) for seed in range(first, first + count)]


def _run(cfg, programs, faults):
    """``(RTL results, fsim outcomes)`` of ``programs``, each after a program that zeroes the SRAMs (so that
    none depends on how far a faulted one before it got)."""
    clear = clearing_program(cfg, dram_bytes=DRAM_BYTES)
    sequence = [q for p in programs for q in (clear, p)]
    jobs = [Job(dram=p.dram, insn_addr=p.insn_addr, insn_count=p.insn_count, max_cycles=50_000,
                faults=None if k % 2 == 0 else faults[k // 2]) for k, p in enumerate(sequence)]
    results = run_programs(cfg, jobs, dram_bytes=DRAM_BYTES)
    return results[1::2], fsim_outcomes(cfg, sequence, dram_bytes=DRAM_BYTES)[1::2]


def _outputs(program):
    """The DRAM bytes the program's STOREs may write: every row of every STORE."""
    cfg, written = program.cfg, set()
    elem = cfg.elem_bytes("out")
    for insn in isa.decode_program(program.binary, cfg):
        if isinstance(insn, Store) and not insn.moves_nothing:
            for row in range(insn.y_size):
                start = (insn.dram_base + row * insn.x_stride) * elem
                written.update(range(start, start + insn.x_size * elem))
    return written


@pytest.mark.parametrize("config", list(COUNT))
def test_back_pressure_and_latency_change_nothing_but_time(config):
    """Each AXI channel paused 30 % of cycles at random: DRAM, error codes and counters as fsim's."""
    cfg = PRESETS[config]
    programs = _programs(cfg, 1000, COUNT[config])
    results, expected = _run(cfg, programs, [Faults(seed=k, pause=0.3) for k in range(len(programs))])
    for program, exp, result in zip(programs, expected, results):
        compare(program, exp, result)


@pytest.mark.parametrize("config", list(COUNT))
def test_error_responses_stop_the_run_with_bus_error_and_nothing_else_written(config):
    """SLVERR on random bursts (and back-pressure): a run that met one ends with BUS_ERROR, never hangs, and
    leaves every DRAM byte outside its STOREs' rows as it was; one that met none is fsim's; the run after
    an error is fsim's too."""
    cfg = PRESETS[config]
    programs = _programs(cfg, 2000, COUNT[config])
    faults = [Faults(seed=k, pause=0.1, error_rate=0.02) for k in range(len(programs))]
    clean = _programs(cfg, 2999, 1)
    results, expected = _run(cfg, programs + clean, faults + [None])
    hit = 0
    for program, exp, result in zip(programs, expected, results):
        if not result.injected_errors:
            compare(program, exp, result)
            continue
        hit += 1
        assert not result.timed_out and result.done and not result.busy, program.seed
        assert result.error in (ErrorCode.BUS_ERROR, exp.error), (program.seed, result.error)
        outputs, before = _outputs(program), program.dram.ljust(DRAM_BYTES, b"\0")
        touched = [a for a in range(DRAM_BYTES) if result.dram[a] != before[a] and a not in outputs]
        assert not touched, f"seed {program.seed}: bytes written outside the outputs, from {touched[0]:#x}"
    assert hit >= len(programs) // 4           # (the faults really were injected)
    compare(clean[0], expected[-1], results[-1])


@pytest.mark.parametrize("config", ["tiny", "small"])
def test_register_writes_during_a_run_wait_for_the_next(config):
    """The host writes the instruction address and count, a counter and `control` (start) while a run is
    busy: the run goes on as started (the start is ignored) and ends as fsim's."""
    cfg = PRESETS[config]
    programs = _programs(cfg, 3000, COUNT[config] // 2)
    rng = random.Random(7)
    faults = [Faults(seed=k, pause=0.2, register_writes=(
        (rng.randrange(5, 60), "insn_addr", rng.randrange(0, DRAM_BYTES, 16)),
        (rng.randrange(5, 60), "insn_count", rng.randrange(1, 1000)),
        (rng.randrange(5, 60), "cycles", 12345),
        (rng.randrange(5, 60), "control", 1)))
        for k in range(len(programs))]
    results, expected = _run(cfg, programs, faults)
    for program, exp, result in zip(programs, expected, results):
        compare(program, exp, result)


@pytest.mark.parametrize("config", ["tiny", "small"])
def test_a_reset_in_the_middle_of_a_run_leaves_it_idle_and_the_next_run_clean(config):
    """Reset a few hundred cycles into runs (bursts in flight, streams busy): the accelerator is idle after
    it (not busy, not done, no error), and the next run, without faults, is fsim's."""
    cfg = PRESETS[config]
    programs = _programs(cfg, 4000 * SCALE, COUNT[config] // 3)
    rng = random.Random(8)
    jobs_programs, faults = [], []
    for k, program in enumerate(programs):
        jobs_programs += [program, program]
        faults += [Faults(seed=k, pause=0.2, reset_at=rng.randrange(20, 400)), None]
    results, expected = _run(cfg, jobs_programs, faults)
    for k in range(0, len(jobs_programs), 2):
        reset, after = results[k], results[k + 1]
        if reset.reset:
            assert not reset.busy and not reset.done and reset.error == 0 and not reset.timed_out
        compare(jobs_programs[k + 1], expected[k + 1], after)
    assert sum(r.reset for r in results[::2]) >= len(programs) // 2


def test_a_load_that_moves_nothing_does_not_hold_up_the_next():
    """The hang these tests found: a LOAD that moves nothing started the range check and retired at once;
    when fetch, slowed by back-pressure, delivered the next LOAD within the check's few cycles, its start
    went unheard and the load stream waited for ever (tiny, random program 2086 under these faults)."""
    cfg = PRESETS["tiny"]
    program = random_program(cfg, 2086, dram_bytes=DRAM_BYTES)
    results, expected = _run(cfg, [program], [Faults(seed=86, pause=0.1)])
    compare(program, expected[0], results[0])
