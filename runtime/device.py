"""The device interface, and its functional-simulator backend.

A :class:`Device` owns DRAM (allocate, copy in, copy out) and runs
:class:`~tilewright.compiler.program.Program`\\ s. :meth:`Device.run_program`
places a program's image (tensors, micro-ops, zeros) and instructions in
DRAM, runs it and returns the output tensors and counters; the backends
differ only in how instructions execute.
"""

import numpy as np

from tilewright import isa
from tilewright.config import load_config
from tilewright.compiler.program import segment_align

__all__ = ["DeviceError", "Device", "FsimDevice", "RtlDevice", "get_device", "get_devices", "forget_device", "BACKENDS",
           "counter_stats"]


class DeviceError(RuntimeError):
    """A run that failed on the device (the message carries the error code)."""


class Device:
    """Common host-side logic; subclasses provide ``dram`` (the allocator), ``write``/``read`` and ``_execute``."""

    backend = None

    def __init__(self, config):
        self.cfg = load_config(config)

    # -- memory --------------------------------------------------------------------------

    def alloc(self, nbytes, align=None):
        """Device memory for ``nbytes``, aligned as the config's program images are (or to ``align``)."""
        return self.dram.alloc(nbytes, align=align or segment_align(self.cfg))

    def free(self, addr):
        self.dram.free(addr)

    def write(self, addr, array):
        self.dram.write(addr, np.ascontiguousarray(array))

    def read(self, addr, dtype, shape):
        return self.dram.read_array(addr, dtype, shape)

    # -- programs ------------------------------------------------------------------------

    def place(self, program):
        """Memory for ``program``: its image at the config's segment alignment, then its instructions at
        ``isa.PROGRAM_ALIGN`` bytes. Returns ``(base, insn_addr, binary)``, the binary encoded for ``base``;
        frees the image when the instructions do not encode or fit. (Every run places its program so; the
        co-design search asks it whether a board's memory holds a layer.)"""
        base = self.alloc(program.dram_bytes)
        try:
            binary = program.binary_at(base)
            insn_addr = self.alloc(len(binary), align=isa.PROGRAM_ALIGN)
        except BaseException:
            self.free(base)
            raise
        return base, insn_addr, binary

    def run_program(self, program, tensors):
        """Run ``program`` with input ``tensors`` (name → packed array); returns (outputs, stats)."""
        if program.fingerprint != self.cfg.fingerprint:
            raise DeviceError(f"program {program.name} was compiled for config {program.config.name} "
                              f"({program.fingerprint}), the device runs {self.cfg.name} ({self.cfg.fingerprint})")
        missing = [s.name for s in program.inputs if s.name not in tensors]
        if missing:
            raise DeviceError(f"program {program.name} needs input(s) {', '.join(missing)}")
        base, insn_addr, binary = self.place(program)
        try:
            for seg in program.segments.values():
                if seg.role == "input":
                    array = np.asarray(tensors[seg.name])
                    if array.shape != seg.shape:
                        raise DeviceError(f"input {seg.name} has shape {array.shape}, the program expects {seg.shape}")
                    self.write(base + seg.offset, array.astype(seg.dtype, copy=False))
                elif seg.role == "uop":
                    self.write(base + seg.offset, program.uop_words)
                else:
                    self.write(base + seg.offset, np.zeros(seg.nbytes, dtype=np.uint8))
            self.write(insn_addr, np.frombuffer(binary, dtype=np.uint8))
            stats = self._execute(insn_addr, len(binary) // isa.INSN_BYTES)
            outputs = {s.name: self.read(base + s.offset, s.dtype, s.shape) for s in program.outputs}
        finally:
            self.free(insn_addr)
            self.free(base)
        return outputs, stats


class RtlDevice(Device):
    """The cycle-accurate RTL in Verilator, through the C++ harness (:mod:`tilewright.sim.fast`).

    Stats add ``cycles`` and every hardware counter. Builds are cached per
    config and design. ``memory`` is how its DRAM answers (a
    :class:`~tilewright.sim.fast.DramTiming`; by default a fixed latency and
    a bus beat every cycle).
    """

    backend = "rtl"

    def __init__(self, config="default", *, dram_bytes=256 << 20, memory=None, trace=None):
        super().__init__(config)
        from tilewright.sim import Dram
        from tilewright.sim.fast import DramTiming, FastSim
        self.memory = memory or DramTiming()
        self.harness = FastSim(self.cfg, dram_bytes=dram_bytes, timing=self.memory)
        self.dram = Dram(dram_bytes)          # the allocator; contents live in the harness
        self.trace = trace                    # path for the next run's instruction timeline

    @property
    def alive(self):
        """Whether the Verilated model's harness still runs (a device whose harness died is of no use)."""
        return self.harness.alive

    def write(self, addr, array):
        self.harness.write(addr, np.ascontiguousarray(array).tobytes())

    def read(self, addr, dtype, shape):
        dtype = np.dtype(dtype).newbyteorder("<")
        return np.frombuffer(self.harness.read(addr, int(np.prod(shape)) * dtype.itemsize), dtype=dtype).reshape(shape)

    def _execute(self, insn_addr, count):
        run = self.harness.run(insn_addr, count, trace=self.trace)
        if run.timed_out:
            raise DeviceError("the RTL did not finish")
        if run.error:
            from tilewright.isa import ErrorCode
            raise DeviceError(f"the RTL stopped with {ErrorCode(run.error).name} at instruction {run.error_index}")
        return counter_stats(run.counters, self.cfg)


def counter_stats(counters, cfg):
    """A run's stats from the hardware counters (:data:`tilewright.hw.regs.COUNTERS` by name).

    Only the counters ``cfg`` builds count (:func:`~tilewright.hw.regs.built_counters`): without
    ``perf_counters`` the stats hold ``cycles`` alone.
    """
    from tilewright.hw.regs import built_counters
    c = {name: counters[name] for name in built_counters(cfg)}
    if not cfg.perf_counters:
        return {"cycles": c["cycles"], "counters": c}
    return {
        "cycles": c["cycles"], "gemm_uops": c["gemm_uops"], "alu_uops": c["alu_uops"],
        "dram_bytes_read": sum(v for k, v in c.items() if k.startswith("read_")),
        "dram_bytes_written": c["write_out"],
        "instructions": c["insns_load"] + c["insns_compute"] + c["insns_store"],
        "counters": c,
    }


class FsimDevice(Device):
    """The functional simulator as a device."""

    backend = "fsim"

    def __init__(self, config="default", *, dram_bytes=512 << 20):
        super().__init__(config)
        from tilewright.sim import FunctionalSimulator
        self.sim = FunctionalSimulator(self.cfg, dram_bytes=dram_bytes)
        self.dram = self.sim.dram

    def _execute(self, insn_addr, count):
        from tilewright.sim import SimError
        try:
            run = self.sim.run_dram(insn_addr, count)
        except SimError as e:
            raise DeviceError(f"fsim stopped: {e}") from None
        return {
            "gemm_uops": run.gemm_uops, "alu_uops": run.alu_uops,
            "dram_bytes_read": run.total_bytes_read, "dram_bytes_written": run.total_bytes_written,
            "instructions": sum(run.instructions.values()),
            "bytes_read_by_type": dict(run.dram_bytes_read), "instructions_by_stream": dict(run.instructions),
        }


def _fpga_device(config, **options):
    # The fpga floor sits above the runtime (it builds on Device): imported when first asked for.
    from tilewright.fpga.device import FpgaDevice
    return FpgaDevice(config, **options)


_DEVICES = {}
BACKENDS = {"fsim": FsimDevice, "rtl": RtlDevice, "fpga": _fpga_device}


def forget_device(backend, config, *, port=None):
    """Drop the shared devices of ``backend`` for ``config`` (the next :func:`get_device` makes a new one):
    after a simulator process died, say."""
    fingerprint = load_config(config).fingerprint
    for key in [k for k in _DEVICES if k[:3] == (backend, fingerprint, port)]:
        del _DEVICES[key]


def get_device(backend="fsim", config="default", *, port=None, memory=None):
    """A shared device of ``backend`` ("fsim", "rtl" or "fpga") for ``config``.

    The ``fpga`` backend talks to a board (or the simulated board of
    ``tilewright fpga simulate``) on serial ``port``. The ``rtl`` backend's
    DRAM answers as ``memory`` (a :class:`~tilewright.sim.fast.DramTiming`,
    a board's from :meth:`~tilewright.fpga.boards.Board.dram_timing`) if given.
    """
    return get_devices(backend, config, 1, port=port, memory=memory)[0]


def get_devices(backend, config, count, *, port=None, memory=None):
    """``count`` shared devices of ``backend`` for ``config`` that can run at the same time, from threads: each
    RTL device is a harness process of its own (the fpga backend is one board: one device). The first is
    :func:`get_device`'s."""
    cfg = load_config(config)
    if backend not in BACKENDS:
        raise DeviceError(f"unknown backend {backend!r} (available: {', '.join(BACKENDS)})")
    if (backend == "fpga") != (port is not None):
        raise DeviceError("the fpga backend needs port= (a board's serial port or a simulated board's terminal)"
                          if port is None else f"port= is for the fpga backend, not {backend}")
    if memory is not None and backend != "rtl":
        raise DeviceError(f"memory= (a DRAM timing) is for the rtl backend, not {backend}")
    if backend == "fpga" and count > 1:
        raise DeviceError("the fpga backend is one board: it runs one program at a time")
    options = {}
    if port:
        options["port"] = port
    if memory:
        options["memory"] = memory
    devices = []
    for k in range(count):
        key = (backend, cfg.fingerprint, port, memory, k)
        if key not in _DEVICES:
            _DEVICES[key] = BACKENDS[backend](cfg, **options)
        devices.append(_DEVICES[key])
    return devices
