"""fsim vs RTL on the same programs: DRAM, error codes and shared counters must agree.

Used by the test suite (``tests/hw/test_rtl_system.py``) and by ``make fuzz``.
A mismatch is reported with the seed, the program listing and the first
differing DRAM address.
"""

from dataclasses import dataclass

import numpy as np

from tilewright.hw.regs import built_counters
from tilewright.isa import ErrorCode

from .fsim import BudgetError, FunctionalSimulator, SimError
from .rtl import Job, run_programs

__all__ = ["Outcome", "fsim_outcomes", "compare", "Mismatch", "differential_results", "run_differential",
           "SHARED_COUNTERS"]

#: RunStats field -> RTL counter register.
SHARED_COUNTERS = {
    ("dram_bytes_read", "insn"): "read_insn", ("dram_bytes_read", "uop"): "read_uop",
    ("dram_bytes_read", "inp"): "read_inp", ("dram_bytes_read", "wgt"): "read_wgt",
    ("dram_bytes_read", "acc"): "read_acc", ("dram_bytes_read", "acc8"): "read_acc8",
    ("dram_bytes_written", "out"): "write_out",
    ("gemm_uops", None): "gemm_uops", ("alu_uops", None): "alu_uops",
    ("instructions", "load"): "insns_load", ("instructions", "compute"): "insns_compute",
    ("instructions", "store"): "insns_store",
}


@dataclass
class Outcome:
    """What one run left: DRAM image, error code, counters (None after an error)."""
    dram: bytes
    error: int
    counters: dict


def fsim_outcomes(cfg, programs, *, dram_bytes):
    """Run ``programs`` one after another on one fsim (SRAMs persist, as on the RTL)."""
    sim = FunctionalSimulator(cfg, dram_bytes=dram_bytes)
    built = set(built_counters(cfg))
    outcomes = []
    for p in programs:
        sim.dram.data[:] = np.frombuffer(p.dram.ljust(dram_bytes, b"\0"), dtype=np.uint8)
        try:
            stats = sim.run_dram(p.insn_addr, p.insn_count)
            error, counters = ErrorCode.NONE, {}
            for (field, key), name in SHARED_COUNTERS.items():
                if name in built:
                    value = getattr(stats, field)
                    counters[name] = value[key] if key else value
        except BudgetError:
            raise           # (fsim's own limit: no outcome the RTL could be compared with)
        except SimError as e:
            error, counters = e.code, None
        outcomes.append(Outcome(sim.dram.data.tobytes(), int(error), counters))
    return outcomes


class Mismatch(AssertionError):
    pass


def compare(program, expected, result):
    """Raise :class:`Mismatch` describing the first difference between fsim and RTL."""
    where = f"seed {program.seed} on {program.cfg.name} ({program.threads} threads)"
    if result.timed_out:
        raise Mismatch(f"{where}: the RTL did not finish\n{program.listing()}")
    if result.error != expected.error:
        raise Mismatch(f"{where}: error code fsim {ErrorCode(expected.error).name}, RTL "
                       f"{ErrorCode(result.error).name if result.error in ErrorCode._value2member_map_ else result.error}"
                       f" (RTL index {result.error_index})\n{program.listing()}")
    if expected.error:
        return
    a = np.frombuffer(expected.dram, np.uint8)
    b = np.frombuffer(result.dram, np.uint8)
    diff = np.flatnonzero(a != b)
    if diff.size:
        k = int(diff[0])
        raise Mismatch(f"{where}: DRAM differs at {diff.size} bytes, first at {k:#x}: fsim {a[k]:#04x}, "
                       f"RTL {b[k]:#04x}\n{program.listing()}")
    wrong = {n: (v, result.counters[n]) for n, v in expected.counters.items() if result.counters[n] != v}
    if wrong:
        raise Mismatch(f"{where}: counters differ (fsim, RTL): {wrong}\n{program.listing()}")


def differential_results(cfg, programs, *, dram_bytes, max_cycles=200_000):
    """Run ``programs`` on fsim and RTL (one after another on each, SRAMs persisting).

    Returns ``[(rtl_result, mismatch), ...]``, ``mismatch`` a :class:`Mismatch` or None.
    """
    programs = list(programs)
    expected = fsim_outcomes(cfg, programs, dram_bytes=dram_bytes)
    jobs = [Job(dram=p.dram, insn_addr=p.insn_addr, insn_count=p.insn_count, max_cycles=max_cycles)
            for p in programs]
    results = run_programs(cfg, jobs, dram_bytes=dram_bytes)
    checked = []
    for program, exp, res in zip(programs, expected, results):
        try:
            compare(program, exp, res)
            checked.append((res, None))
        except Mismatch as e:
            checked.append((res, e))
    return checked


def run_differential(cfg, programs, *, dram_bytes, max_cycles=200_000):
    """Run ``programs`` on fsim and RTL; returns the RTL results (raises the first :class:`Mismatch`)."""
    checked = differential_results(cfg, programs, dram_bytes=dram_bytes, max_cycles=max_cycles)
    for _, mismatch in checked:
        if mismatch:
            raise mismatch
    return [result for result, _ in checked]
