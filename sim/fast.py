"""The accelerator in Verilator with a C++ harness: long runs without Python per cycle.

:func:`build_harness` compiles ``sim/harness.cpp`` against the Verilated
design (cached per config, design and harness hash, like the cocotb
builds). :class:`FastSim` drives the resulting process: DRAM images in and
out, runs with cycle counts, hardware counters and optional instruction
timelines. Verification stays with cocotb and cocotbext-axi
(:mod:`tilewright.sim.rtl`); this harness is for speed.
"""

import hashlib
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .rtl import BUILD_ARGS, RtlError, _verilator_env, cache_dir, verilog_source

__all__ = ["build_harness", "FastSim", "FastRun", "HARNESS"]

HARNESS = Path(__file__).with_name("harness.cpp")


def _register_defines():
    """The register offsets the harness uses, as -D flags from the one register map."""
    from tilewright.hw.regs import COUNTERS, REGISTERS
    offset = {r.name: r.offset for r in REGISTERS}
    names = ("control", "status", "insn_addr", "insn_count", "error_index")
    return " ".join([f"-DREG_{n.upper()}={offset[n]:#x}" for n in names] + [f"-DREG_COUNTERS={offset[COUNTERS[0][0]]:#x}"])


def build_harness(cfg):
    """Path to the harness executable for ``cfg`` (built on first use)."""
    text = verilog_source(cfg)
    source = HARNESS.read_text()
    digest = hashlib.sha256(text.encode() + source.encode() + " ".join(BUILD_ARGS).encode()
                            + _register_defines().encode()).hexdigest()[:16]
    build_dir = cache_dir() / f"fast-{cfg.tag}-{cfg.fingerprint[:8]}-{digest}"
    exe = build_dir / "obj_dir" / "tw_harness"
    if exe.exists():
        return exe
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "top.v").write_text(text)
    _verilator_env()
    cmd = ["verilator", "--cc", "--exe", "--build", "-j", str(os.cpu_count() or 2), *BUILD_ARGS,
           "--top-module", "top", "top.v", str(HARNESS), "-CFLAGS", f"-DBUS_BYTES={cfg.bus_bytes} {_register_defines()} -O2",
           "--Mdir", "obj_dir", "-o", "tw_harness"]
    log = build_dir / "build.log"
    with open(log, "w") as f:
        proc = subprocess.run(cmd, cwd=build_dir, stdout=f, stderr=subprocess.STDOUT)
    if proc.returncode != 0 or not exe.exists():
        tail = log.read_text()[-3000:]
        raise RtlError(f"building the Verilator harness for {cfg.name} failed (log {log}):\n{tail}")
    return exe


@dataclass
class FastRun:
    status: int
    error: int
    error_index: int
    cycles: int
    timed_out: bool
    counters: dict

    @property
    def done(self):
        return bool(self.status & 2)


class FastSim:
    """One harness process: DRAM of ``dram_bytes``, SRAMs persisting across runs."""

    def __init__(self, cfg, *, dram_bytes, latency=16):
        from tilewright.hw.regs import COUNTERS
        self.cfg, self.dram_bytes = cfg, dram_bytes
        self.counter_names = [name for name, _ in COUNTERS]
        exe = build_harness(cfg)
        self.proc = subprocess.Popen([str(exe)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
        self.tmp = tempfile.TemporaryDirectory(prefix="tw-fast-")
        self._call(f"mem {dram_bytes} {len(self.counter_names)}")
        self._call(f"latency {latency}")

    def _call(self, line):
        if self.proc.poll() is not None:
            raise RtlError(f"the harness exited (code {self.proc.returncode})")
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().strip()
        if not reply.startswith("ok"):
            raise RtlError(f"harness: {line.split()[0]}: {reply or 'no answer'}")
        return reply.split()[1:]

    def write(self, addr, data):
        path = Path(self.tmp.name) / "in.bin"
        path.write_bytes(bytes(data))
        self._call(f"write {addr} {path}")

    def read(self, addr, nbytes):
        path = Path(self.tmp.name) / "out.bin"
        self._call(f"read {addr} {nbytes} {path}")
        return path.read_bytes()

    def run(self, insn_addr, count, *, max_cycles=2_000_000_000, trace=None):
        """Run ``count`` instructions at ``insn_addr``; ``trace`` is a path for the instruction timeline."""
        fields = self._call(f"run {insn_addr} {count} {max_cycles}" + (f" {trace}" if trace else ""))
        status, index, cycles, timed_out, *counters = (int(v) for v in fields)
        return FastRun(status, (status >> 8) & 0xF, index, cycles, bool(timed_out),
                       dict(zip(self.counter_names, counters)))

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.tmp.cleanup()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
