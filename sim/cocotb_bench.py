"""cocotb bench: runs a batch of programs on the Verilated accelerator.

Launched by :func:`tilewright.sim.rtl.run_programs` (jobs and results are
pickles named by ``TW_JOBS`` / ``TW_RESULTS``). DRAM is a cocotbext-axi RAM
model whose accesses beyond the DRAM size answer SLVERR; registers are
driven by cocotbext-axi's AXI-Lite master. Python only wakes every
``POLL_CYCLES`` cycles while a program runs.
"""

import os
import pickle

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRamRead, AxiRamWrite

from tilewright.hw.regs import CONTROL_START, COUNTERS, REGISTERS
from tilewright.sim.rtl import RunResult

POLL_CYCLES = 64
OFFSETS = {r.name: r.offset for r in REGISTERS}


class _Bounded:
    """Accesses past the end of memory fail (the model then answers SLVERR)."""

    def _check(self, address, length):
        if address + length > self.size:
            raise IndexError(f"DRAM access {address:#x}+{length} beyond {self.size:#x}")

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
    BoundedRamRead(bus.read, dut.clk, dut.rst, size=size, mem=memory)
    BoundedRamWrite(bus.write, dut.clk, dut.rst, size=size, mem=memory)
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
        await regs.write_dword(OFFSETS["control"], CONTROL_START)
        waited = 0
        while not int(dut.irq.value) and waited < job.max_cycles:
            await ClockCycles(dut.clk, POLL_CYCLES)
            waited += POLL_CYCLES
        status = await regs.read_dword(OFFSETS["status"])
        counters = {name: await regs.read_dword(OFFSETS[name]) for name, _ in COUNTERS}
        results.append(RunResult(status=status, error_index=await regs.read_dword(OFFSETS["error_index"]),
                                 cycles=waited, timed_out=not int(dut.irq.value), counters=counters,
                                 dram=bytes(memory)))
    with open(os.environ["TW_RESULTS"], "wb") as f:
        pickle.dump(results, f)
