"""cocotb bench: runs a batch of programs on the Verilated accelerator.

Launched by :func:`tilewright.sim.rtl.run_programs` (jobs and results are
pickles named by ``TW_JOBS`` / ``TW_RESULTS``). DRAM is a cocotbext-axi RAM
model whose accesses beyond the DRAM size answer SLVERR; registers are
driven by cocotbext-axi's AXI-Lite master. Python only wakes every
``POLL_CYCLES`` cycles while a program runs.

A job's :class:`~tilewright.sim.rtl.Faults` add back-pressure and latency
on every DRAM channel (the models' pause generators), SLVERR answers to
random accesses, host register writes during the run, and a reset in its
middle. A job that times out is followed by a reset (the accelerator
ignores a start while a run is busy).
"""

import os
import pickle
import random

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRamRead, AxiRamWrite

from tilewright.hw.regs import CONTROL_START, COUNTERS, REGISTERS
from tilewright.sim.rtl import RunResult

POLL_CYCLES = 64
OFFSETS = {r.name: r.offset for r in REGISTERS}


class _Bounded:
    """Accesses past the end of memory fail (the model then answers SLVERR), and so, when a job injects
    errors, do some others (``errors``: a random.Random, a rate and a count)."""
    errors = None

    def _check(self, address, length):
        if address + length > self.size:
            raise IndexError(f"DRAM access {address:#x}+{length} beyond {self.size:#x}")
        if self.errors is not None and self.errors["rng"].random() < self.errors["rate"]:
            self.errors["count"] += 1
            raise IOError(f"injected error at {address:#x}")

    async def _read(self, address, length):
        self._check(address, length)
        return self.read(address, length)

    async def _write(self, address, data):
        self._check(address, len(data))
        self.write(address, data)


class BoundedRamRead(_Bounded, AxiRamRead):
    pass


class BoundedRamWrite(_Bounded, AxiRamWrite):
    pass


@cocotb.test()
async def run_jobs(dut):
    spec = pickle.loads(open(os.environ["TW_JOBS"], "rb").read())
    size = spec["dram_bytes"]
    memory = bytearray(size)
    cocotb.start_soon(Clock(dut.clk, 10, unit="ns").start())
    bus = AxiBus.from_prefix(dut, "m_axi_")
    reader = BoundedRamRead(bus.read, dut.clk, dut.rst, size=size, mem=memory)
    writer = BoundedRamWrite(bus.write, dut.clk, dut.rst, size=size, mem=memory)
    channels = [reader.ar_channel, reader.r_channel, writer.aw_channel, writer.w_channel, writer.b_channel]
    regs = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil_"), dut.clk, dut.rst)
    for name in ("cocotb.top.m_axi", "cocotb.top.s_axil"):
        cocotb.log.getChild(name.split(".", 1)[1]).setLevel("WARNING")
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)

    results = []
    for job in spec["jobs"]:
        memory[:] = job.dram.ljust(size, b"\0")
        await regs.write_dword(OFFSETS["insn_addr"], job.insn_addr)
        await regs.write_dword(OFFSETS["insn_count"], job.insn_count)
        faults, was_reset = job.faults, []
        if faults is not None:
            rng = random.Random(faults.seed)
            errors = {"rng": random.Random(faults.seed + 1), "rate": faults.error_rate, "count": 0}
            reader.errors = writer.errors = errors if faults.error_rate else None
            if faults.pause:
                for channel in channels:
                    channel.set_pause_generator(_pauses(random.Random(rng.random()), faults.pause))
        await regs.write_dword(OFFSETS["control"], CONTROL_START)
        writes = None
        if faults is not None:
            if faults.register_writes:
                writes = cocotb.start_soon(_host_writes(dut, regs, faults.register_writes))
            if faults.reset_at is not None:
                cocotb.start_soon(_reset_after(dut, faults.reset_at, was_reset))
        waited = 0
        while not int(dut.irq.value) and waited < job.max_cycles and not was_reset:
            await ClockCycles(dut.clk, POLL_CYCLES)
            waited += POLL_CYCLES
        if writes is not None and not was_reset:
            await writes            # (the next job's registers are written after these)
        for channel in channels:
            channel.set_pause_generator(None)
            channel.pause = False       # (stopping the generator leaves the last value in place)
        injected = reader.errors["count"] if reader.errors else 0
        reader.errors = writer.errors = None
        status = await regs.read_dword(OFFSETS["status"])
        counters = {name: await regs.read_dword(OFFSETS[name]) for name, _ in COUNTERS}
        timed_out = not int(dut.irq.value) and not was_reset
        results.append(RunResult(status=status, error_index=await regs.read_dword(OFFSETS["error_index"]),
                                 cycles=waited, timed_out=timed_out, counters=counters, dram=bytes(memory),
                                 injected_errors=injected, reset=bool(was_reset)))
        if timed_out:       # (a start is ignored while a run is busy: the next job starts from a reset)
            await _reset_after(dut, 0, [])
    with open(os.environ["TW_RESULTS"], "wb") as f:
        pickle.dump(results, f)


def _pauses(rng, chance):
    """A pause generator: each cycle, paused with probability ``chance``."""
    while True:
        yield rng.random() < chance


async def _host_writes(dut, regs, writes):
    """The host writing registers at given cycles of a run."""
    now = 0
    for cycle, name, value in sorted(writes):
        if cycle > now:
            await ClockCycles(dut.clk, cycle - now)
            now = cycle
        await regs.write_dword(OFFSETS[name], value)


async def _reset_after(dut, cycles, was_reset):
    """Reset the accelerator ``cycles`` into a run, for four cycles."""
    await ClockCycles(dut.clk, cycles)
    dut.rst.value = 1
    await ClockCycles(dut.clk, 4)
    dut.rst.value = 0
    await ClockCycles(dut.clk, 2)
    was_reset.append(True)
