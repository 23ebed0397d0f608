"""The ``fpga`` runtime backend: the :class:`~tilewright.runtime.device.Device` API over a board's link.

Programs, tensors and results move through the host bridge's MEM_WRITE /
MEM_READ requests; a run is started and watched through the accelerator's
registers (:data:`tilewright.hw.regs.REGISTERS`), and its stats are the
accelerator's own counters, read over the link.
"""

import numpy as np

from tilewright.hw.regs import CONTROL_START, REGISTERS, Status, built_counters
from tilewright.isa import ErrorCode
from tilewright.runtime.device import Device, DeviceError, counter_stats
from tilewright.sim import Dram
from tilewright.sim.dram import DramError

from . import protocol
from .link import Link

__all__ = ["FpgaDevice"]
_OFFSET = {r.name: r.offset for r in REGISTERS}


class FpgaDevice(Device):
    """A board running the Tilewright SoC, on serial ``port``.

    The board must run a bitstream built for this device's config: its
    fingerprint is checked when the link opens. Memory is the board's
    on-chip memory (its size comes from the board).
    """

    backend = "fpga"

    def __init__(self, config, *, port, baud=protocol.DEFAULT_BAUD, run_timeout=600.0):
        super().__init__(config)
        self.link = Link(port, baud=baud)
        info = self.link.info()
        if info.version != protocol.VERSION:
            raise DeviceError(f"{port} speaks host-link protocol version {info.version}; this tool speaks "
                              f"{protocol.VERSION}: rebuild the bitstream with this version")
        if info.fingerprint == protocol.LINK_TEST_FINGERPRINT:
            raise DeviceError(f"{port} runs the link-test bitstream, which has no accelerator: load a bitstream "
                              f"built for {self.cfg.name} (tilewright fpga build --config {self.cfg.name})")
        if info.fingerprint != self.cfg.fingerprint:
            raise DeviceError(f"{port} runs a bitstream for config fingerprint {info.fingerprint}, not "
                              f"{self.cfg.name} ({self.cfg.fingerprint}): compile for the board's config or "
                              f"load a bitstream built for this one")
        self.info, self.run_timeout = info, run_timeout
        self.dram = Dram(info.mem_bytes)        # the allocator; contents live on the board

    def alloc(self, nbytes, align=None):
        try:
            return super().alloc(nbytes, align)
        except DramError:
            raise DeviceError(f"the board's memory is too small: {nbytes} more bytes needed, {self.dram.free_bytes} of "
                              f"{self.dram.size} free") from None

    def write(self, addr, array):
        self.link.write_memory(addr, np.ascontiguousarray(array).tobytes())

    def read(self, addr, dtype, shape):
        dtype = np.dtype(dtype).newbyteorder("<")
        data = self.link.read_memory(addr, int(np.prod(shape)) * dtype.itemsize)
        return np.frombuffer(data, dtype=dtype).reshape(shape)

    def _execute(self, insn_addr, count):
        link = self.link
        link.write_register(_OFFSET["insn_addr"], insn_addr)
        link.write_register(_OFFSET["insn_count"], count)
        link.write_register(_OFFSET["control"], CONTROL_START)
        status = None

        def finished():
            nonlocal status
            status = Status.decode(link.read_register(_OFFSET["status"]))
            return status.done

        link.wait(finished, timeout=self.run_timeout)
        if status.error:
            index = link.read_register(_OFFSET["error_index"])
            raise DeviceError(f"the board stopped with {ErrorCode(status.error).name} at instruction {index}")
        return counter_stats({name: link.read_register(_OFFSET[name]) for name in built_counters(self.cfg)},
                             self.cfg)

    def close(self):
        self.link.close()
