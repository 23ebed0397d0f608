"""The simulated board: the whole SoC (not just the accelerator) in Verilator, its UART on a pseudo-terminal.

:class:`SimulatedBoard` starts ``fpga/board_sim.cpp`` on the Verilated
:class:`~tilewright.fpga.soc.SocCore` and yields the terminal's path; the
``fpga`` runtime backend opens it with pyserial as it would open a board's
USB-UART. The UART runs at :data:`SIM_DIVISOR` clock cycles per bit, so a
byte costs 10·SIM_DIVISOR simulated cycles (the terminal's baud setting
has no effect).
"""

import functools
import subprocess
from pathlib import Path

from tilewright.sim.fast import build_executable
from tilewright.sim.rtl import RtlError

__all__ = ["SimulatedBoard", "SIM_DIVISOR", "build_board"]

HARNESS = Path(__file__).with_name("board_sim.cpp")

#: Clock cycles per UART bit in the simulated board (the receiver needs at least 4).
SIM_DIVISOR = 8


@functools.lru_cache(maxsize=4)
def _soc_verilog(cfg, mem_bytes, clock_hz, mem_options):
    from amaranth.back import verilog

    from .soc import SocCore
    return verilog.convert(SocCore(cfg, mem_bytes=mem_bytes, divisor=SIM_DIVISOR, clock_hz=clock_hz,
                                   mem_options=dict(mem_options)), name="top")


def build_board(cfg, *, mem_bytes, clock_hz, mem_options=None):
    """The simulated board's executable for ``cfg`` (None: the link test, no accelerator) with
    ``mem_bytes`` of on-chip memory laid out as ``mem_options`` says (a board's
    :attr:`~tilewright.fpga.boards.Board.memory_options`; default plain), cached."""
    from .soc import LINK_TEST
    options = tuple(sorted((mem_options or {}).items()))        # (hashable, for the cache of the Verilog)
    key = f"{cfg.tag}-{cfg.fingerprint[:8]}" if cfg else LINK_TEST
    return build_executable(f"board-{key}-{mem_bytes}", _soc_verilog(cfg, mem_bytes, clock_hz, options),
                            HARNESS, {"tw_board.h": f"#pragma once\n#define UART_DIVISOR {SIM_DIVISOR}\n"},
                            what=f"the simulated board for {cfg.name if cfg else LINK_TEST}")


class SimulatedBoard:
    """A running simulated board; ``port`` is the pseudo-terminal to open. Use as a context manager.
    ``cfg`` None runs the link test (the SoC without the accelerator); ``mem_options`` as for
    :func:`build_board`."""

    def __init__(self, cfg, *, mem_bytes, clock_hz, mem_options=None):
        exe = build_board(cfg, mem_bytes=mem_bytes, clock_hz=clock_hz, mem_options=mem_options)
        self.proc = subprocess.Popen([str(exe)], stdout=subprocess.PIPE, text=True)
        self.port = self.proc.stdout.readline().strip()
        if not self.port:
            self.proc.wait()
            raise RtlError(f"the simulated board exited (code {self.proc.returncode}) without opening a terminal")

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass
