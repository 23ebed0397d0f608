"""The boards Tilewright builds for, each with its preset config, memory, link speed and clock plan.

A :class:`Board` names an ``amaranth-boards`` platform, the device's
resources (what a build may use), the on-chip memory that stands in for
DRAM, the UART baud rate and the accelerator clock it is built for by
default. :meth:`Board.clock_plan` makes the ``sync`` domain: the board
clock itself, or a PLL (ECP5 ``EHXPLLL``, iCE40 ``SB_PLL40_PAD`` on the clock pin) when
another frequency is asked for, with reset held until the PLL locks.
"""

import importlib
import math
from dataclasses import dataclass, field

from amaranth import ClockSignal, Const, Instance, Module, ResetSignal, Signal
from amaranth.lib import io

from . import protocol

__all__ = ["Board", "BOARDS", "get_board", "BoardError", "Sdram", "ecp5_pll", "ice40_pll"]


class BoardError(ValueError):
    """An unknown board or a clock it cannot make."""


# -- PLL parameter search (the devices' documented divider ranges) -----------------------------

def ecp5_pll(f_in, f_out):
    """``EHXPLLL`` dividers for ``f_out`` from ``f_in`` (MHz): ``(CLKI_DIV, CLKFB_DIV, CLKOP_DIV, f_achieved)``.

    f_pfd = f_in / CLKI_DIV in [3.125, 400]; f_vco = f_pfd · CLKFB_DIV · CLKOP_DIV
    in [400, 800]; f_out = f_vco / CLKOP_DIV. Closest output wins, then a VCO nearest 600 MHz.
    """
    best = None
    for ref in range(1, 129):
        pfd = f_in / ref
        if not 3.125 <= pfd <= 400:
            continue
        for fb in range(1, 81):
            for op in range(1, 129):
                vco = pfd * fb * op
                if not 400 <= vco <= 800:
                    continue
                key = (abs(pfd * fb - f_out), abs(vco - 600))
                if best is None or key < best[0]:
                    best = (key, (ref, fb, op, pfd * fb))
    if best is None:
        raise BoardError(f"the ECP5 PLL cannot make {f_out} MHz from {f_in} MHz")
    return best[1]


def ice40_pll(f_in, f_out):
    """``SB_PLL40`` dividers (simple feedback): ``(DIVR, DIVF, DIVQ, FILTER_RANGE, f_achieved)``.

    f_pfd = f_in / (DIVR+1) in [10, 133]; f_vco = f_pfd · (DIVF+1) in [533, 1066];
    f_out = f_vco / 2^DIVQ with DIVQ in 1..6.
    """
    best = None
    for divr in range(16):
        pfd = f_in / (divr + 1)
        if not 10 <= pfd <= 133:
            continue
        for divf in range(128):
            vco = pfd * (divf + 1)
            if not 533 <= vco <= 1066:
                continue
            for divq in range(1, 7):
                out = vco / (1 << divq)
                if best is None or abs(out - f_out) < best[0]:
                    filter_range = next((k for k, top in enumerate((17, 26, 44, 66, 101), 1) if pfd < top), 6)
                    best = (abs(out - f_out), (divr, divf, divq, filter_range, out))
    if best is None:
        raise BoardError(f"the iCE40 PLL cannot make {f_out} MHz from {f_in} MHz")
    return best[1]


def _held_reset(m, locked):
    """``sync`` reset held while ``locked`` is low and for a few cycles after.

    It leaves a flip-flop: it reaches thousands of flip-flops, and a LUT before that net was one
    more level on a path of 19 ns on the 85F at 100 MHz. (Over an ECP5 global network, through a
    ``DCCA``, nextpnr could not always route the flip-flop to the buffer: one seed of three failed.)"""
    count = Signal(4, init=15, reset_less=True)   # not reset by the reset it drives
    held = Signal(init=1, reset_less=True)
    with m.If(~locked):
        m.d.sync += count.eq(15)
    with m.Elif(count != 0):
        m.d.sync += count.eq(count - 1)
    m.d.sync += held.eq(count != 0)
    m.d.comb += ResetSignal("sync").eq(held)


@dataclass(frozen=True)
class Sdram:
    """A board's SDR SDRAM, as a controller clocked with the accelerator would serve it (datasheet figures).

    The model behind :meth:`dram_timing`: the data bus moves ``data_bits`` a
    cycle, less the share of time refresh takes (``refresh_count`` rows every
    ``refresh_ms``, each ``t_rc_ns``); a read's first word comes after the
    controller's own pipeline, a row activation (``t_rcd_ns``) and the CAS
    latency (``cas_slow`` cycles up to ``cas_slow_mhz``, else ``cas_fast``).
    Bank interleaving is assumed to hide the row changes of a stream of
    bursts (a simple controller that closes a row after each burst moves less).
    """
    part: str
    data_bits: int
    max_mhz: float
    t_rcd_ns: float
    t_rc_ns: float
    cas_slow: int
    cas_slow_mhz: float
    cas_fast: int
    refresh_count: int = 8192
    refresh_ms: float = 64
    controller_cycles: int = 4       # command queue, AXI bridge and the read data's registers

    def dram_timing(self, freq_mhz):
        """The harness's :class:`~tilewright.sim.fast.DramTiming` at an accelerator (and SDRAM) clock of
        ``freq_mhz``."""
        from tilewright.sim.fast import DramTiming
        if not 0 < freq_mhz <= self.max_mhz:
            raise BoardError(f"the {self.part} SDRAM runs at up to {self.max_mhz:g} MHz, not {freq_mhz:g}")
        cas = self.cas_slow if freq_mhz <= self.cas_slow_mhz else self.cas_fast
        latency = self.controller_cycles + math.ceil(self.t_rcd_ns * freq_mhz / 1000) + cas
        refresh_share = self.refresh_count * self.t_rc_ns * 1e-6 / self.refresh_ms
        return DramTiming(latency=latency, bytes_per_cycle=self.data_bits / 8 * (1 - refresh_share))


#: The ULX3S's SDRAM (32 MB, 16 bits; ISSI IS42S16160G-7, speed grade -7).
ULX3S_SDRAM = Sdram("IS42S16160G-7", data_bits=16, max_mhz=143, t_rcd_ns=15, t_rc_ns=60, cas_slow=2,
                    cas_slow_mhz=100, cas_fast=3)


@dataclass(frozen=True)
class Board:
    """One board.

    ``resources`` are the device's totals by kind (``LUT``, ``FF``, ``DSP``,
    ``BRAM``, ``SPRAM``, ``SSRAM``), in the units
    :data:`tilewright.fpga.build.CELLS` counts synthesised cells in (Gowin:
    DSP in 9×9 multipliers, SSRAM in 16×4 LUT RAMs).
    """
    name: str
    title: str
    family: str                  # "ecp5", "ice40", "gowin"
    platform: str                # "module:Class" in amaranth_boards
    config: str                  # the preset built by default
    freq_mhz: float              # the accelerator clock built by default
    mem_bytes: int               # on-chip memory standing in for DRAM
    baud: int
    resources: dict = field(default_factory=dict)
    mem_ram_style: str = None    # Yosys ram_style of the on-chip memory ("huge": iCE40 SPRAM)
    sdram: Sdram = None          # the board's own DRAM, if it has one (the bitstreams use on-chip memory)

    def dram_timing(self, freq_mhz=None):
        """How the board's SDRAM would answer the accelerator at ``freq_mhz`` (by default the board's
        clock), as the RTL harness's :class:`~tilewright.sim.fast.DramTiming`: what the co-design search
        measures cycles with, so that a memory-bound config is not flattered by the harness's default
        DRAM (a bus beat every cycle). A board without an SDRAM runs its programs from the on-chip
        memory the bitstream builds (:func:`tilewright.fpga.memory.harness_timing`, at any clock)."""
        if self.sdram is None:
            from .memory import harness_timing
            try:
                return harness_timing(**self.memory_options)
            except ValueError as e:
                raise BoardError(f"{self.name}: no model of its on-chip memory's timing: {e}") from None
        return self.sdram.dram_timing(self.freq_mhz if freq_mhz is None else freq_mhz)

    @property
    def memory_options(self):
        """The on-chip memory's layout on this board (:class:`~tilewright.fpga.memory.OnChipMemory` keywords).

        The ECP5 boards' memory is dozens of block RAMs spread over the die: their inputs come from a
        register, and the accelerator reaches it through a register slice. The small parts keep the
        flip-flops (iCE40 SPRAM maps only when driven the plain way, and the Tang Nano 9K's ``pico``
        does not place with them).
        """
        ecp5 = self.family == "ecp5"
        return {"ram_style": self.mem_ram_style, "input_register": ecp5, "register_slice": ecp5}

    @property
    def platform_class(self):
        module, cls = self.platform.split(":")
        return getattr(importlib.import_module(module), cls)

    @property
    def board_clock_mhz(self):
        return self.platform_class().default_clk_frequency / 1e6

    def clock_plan(self, m: Module, platform, freq_hz):
        """Drive ``sync`` at ``freq_hz`` from the board clock."""
        f_in, f_out = self.board_clock_mhz, freq_hz / 1e6
        clk_pin = platform.request(platform.default_clk, 0, dir="-")
        if self.family == "ice40" and abs(f_in - f_out) >= 1e-6:
            # The iCEBreaker's oscillator is on the UP5K's one PLL pad: the PLL takes the pin itself
            # (SB_PLL40_PAD); with an input buffer on the pin there is no place left for the PLL.
            divr, divf, divq, filter_range, _ = ice40_pll(f_in, f_out)
            locked = Signal()
            m.submodules.pll = Instance(
                "SB_PLL40_PAD", p_FEEDBACK_PATH="SIMPLE", p_DIVR=divr, p_DIVF=divf, p_DIVQ=divq,
                p_FILTER_RANGE=filter_range, i_PACKAGEPIN=clk_pin.io, i_RESETB=1, i_BYPASS=0,
                o_PLLOUTGLOBAL=ClockSignal("sync"), o_LOCK=locked)
            _held_reset(m, locked)
            return
        m.submodules.clk_in = clk_buffer = io.Buffer("i", clk_pin)
        clk_in = clk_buffer.i
        if abs(f_in - f_out) < 1e-6:
            m.d.comb += ClockSignal("sync").eq(clk_in)
            _held_reset(m, Const(1))
            return
        locked = Signal()
        if self.family == "ecp5":
            ref, fb, op, _ = ecp5_pll(f_in, f_out)
            m.submodules.pll = Instance(
                "EHXPLLL",
                a_ICP_CURRENT="12", a_LPF_RESISTOR="8", a_MFG_ENABLE_FILTEROPAMP="1", a_MFG_GMCREF_SEL="2",
                p_PLLRST_ENA="DISABLED", p_INTFB_WAKE="DISABLED", p_STDBY_ENABLE="DISABLED",
                p_DPHASE_SOURCE="DISABLED", p_OUTDIVIDER_MUXA="DIVA", p_CLKOP_ENABLE="ENABLED",
                p_CLKI_DIV=ref, p_CLKFB_DIV=fb, p_CLKOP_DIV=op, p_CLKOP_CPHASE=op // 2, p_CLKOP_FPHASE=0,
                p_FEEDBK_PATH="CLKOP",
                i_CLKI=clk_in, i_CLKFB=ClockSignal("sync"), i_RST=0, i_STDBY=0, i_PHASESEL0=0, i_PHASESEL1=0,
                i_PHASEDIR=1, i_PHASESTEP=1, i_PHASELOADREG=1, i_PLLWAKESYNC=0, i_ENCLKOP=0,
                o_CLKOP=ClockSignal("sync"), o_LOCK=locked)
        else:
            raise BoardError(f"{self.name}: no PLL plan for {self.family}; build at the board clock "
                             f"({f_in:g} MHz)")
        _held_reset(m, locked)

    def achieved_mhz(self, freq_mhz):
        """The clock the plan really makes for a requested ``freq_mhz``."""
        f_in = self.board_clock_mhz
        if abs(f_in - freq_mhz) < 1e-6:
            return f_in
        if self.family == "ecp5":
            return ecp5_pll(f_in, freq_mhz)[3]
        if self.family == "ice40":
            return ice40_pll(f_in, freq_mhz)[4]
        raise BoardError(f"{self.name}: no PLL plan for {self.family}; build at the board clock ({f_in:g} MHz)")


BOARDS = {b.name: b for b in [
    Board("ulx3s-85f", "ULX3S (LFE5U-85F, CABGA381, speed 6)", "ecp5", "amaranth_boards.ulx3s:ULX3S_85F_Platform",
          # (50 MHz from the PLL, met at seeds 1-3; asked for 100 MHz, slim's Fmax straddles it from seed to
          # seed, so `make fpga` builds that with a seed sweep: docs/fpga.md)
          config="slim", freq_mhz=50, mem_bytes=128 * 1024, baud=protocol.DEFAULT_BAUD,
          resources={"LUT": 83640, "FF": 83640, "DSP": 156, "BRAM": 208}, sdram=ULX3S_SDRAM),
    Board("ulx3s-45f", "ULX3S (LFE5U-45F, CABGA381, speed 6)", "ecp5", "amaranth_boards.ulx3s:ULX3S_45F_Platform",
          config="compact", freq_mhz=25, mem_bytes=64 * 1024, baud=protocol.DEFAULT_BAUD,
          resources={"LUT": 43848, "FF": 43848, "DSP": 72, "BRAM": 108}, sdram=ULX3S_SDRAM),
    Board("icebreaker", "iCEBreaker (iCE40UP5K, SG48)", "ice40", "amaranth_boards.icebreaker:ICEBreakerPlatform",
          config="tiny_serial", freq_mhz=24, mem_bytes=64 * 1024, baud=protocol.DEFAULT_BAUD,
          resources={"LUT": 5280, "FF": 5280, "DSP": 8, "BRAM": 30, "SPRAM": 4}, mem_ram_style="huge"),
    Board("tangnano9k", "Tang Nano 9K (GW1NR-LV9QN88PC6/I5)", "gowin",
          "amaranth_boards.tang_nano_9k:TangNano9kPlatform",
          config="pico", freq_mhz=27, mem_bytes=32 * 1024, baud=115_200,
          resources={"LUT": 8640, "FF": 6480, "DSP": 40, "BRAM": 26, "SSRAM": 270}),
]}


def get_board(name):
    try:
        return BOARDS[name]
    except KeyError:
        raise BoardError(f"unknown board {name!r}; boards: {', '.join(BOARDS)}") from None
