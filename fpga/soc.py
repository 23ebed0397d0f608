"""The system on the board: accelerator, on-chip memory and the host bridge on a UART.

:class:`SocCore` is everything that does not depend on the board (the
simulated board Verilates exactly this); :class:`BoardTop` adds the
board's clock plan, its UART pins and LEDs.
"""

from amaranth import ClockDomain, Module
from amaranth.lib import io, wiring
from amaranth.lib.wiring import In, Out

from tilewright.hw.axi import forward
from tilewright.hw.regs import RegisterFile
from tilewright.hw.register_slice import SkidBuffer
from tilewright.hw.top import AXI_ID_WIDTH, Accelerator

from . import protocol
from .bridge import HostBridge
from .memory import OnChipMemory
from .uart import UartRx, UartTx

__all__ = ["SocCore", "BoardTop", "LINK_TEST", "LINK_TEST_BUS_BITS"]

#: The name a link-test build goes by (``cfg=None``: the SoC without the accelerator).
LINK_TEST = "link-test"
#: The memory's bus width in a link-test build.
LINK_TEST_BUS_BITS = 32


class SocCore(wiring.Component):
    """Accelerator + on-chip memory + UART host bridge.

    Parameters
    ----------
    cfg : HwConfig or None
        None builds the link test: the register file with nothing behind it
        (status reads idle, a start does nothing) in place of the accelerator,
        and INFO reports :data:`~tilewright.fpga.protocol.LINK_TEST_FINGERPRINT` — a board's link and memory checked
        in a bitstream that builds in a minute (``tilewright fpga build
        --link-test``, ``tilewright fpga check``).
    mem_bytes : int
        On-chip memory standing in for DRAM.
    divisor : int
        Clock cycles per UART bit.
    clock_hz : int
        The clock frequency (reported to the host).
    mem_options : dict
        The on-chip memory's layout: :class:`~tilewright.fpga.memory.OnChipMemory` keywords
        (``ram_style``, ``input_register``; a board's :attr:`~tilewright.fpga.boards.Board.memory_options`).

    Members
    -------
    uart_rx : In(1), uart_tx : Out(1)
    busy : Out(1)
        A run is in progress.
    idle : Out(1)
        No run, no request in progress and nothing on the UART: a simulation may sleep.
    """

    def __init__(self, cfg, *, mem_bytes, divisor, clock_hz, mem_options=None):
        self.cfg, self.mem_bytes, self.divisor, self.clock_hz = cfg, mem_bytes, divisor, clock_hz
        self.mem_options = mem_options or {}
        super().__init__({"uart_rx": In(1, init=1), "uart_tx": Out(1, init=1), "busy": Out(1), "idle": Out(1)})

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        # Addresses as wide as the memory: the DMA arithmetic shrinks, and an access beyond it is the
        # same BUS_ERROR, found before anything moves (as fsim finds it).
        addr_width = (self.mem_bytes - 1).bit_length()
        m.submodules.memory = mem = OnChipMemory(
            size=self.mem_bytes, data_width=cfg.dram_bus_width if cfg else LINK_TEST_BUS_BITS,
            addr_width=addr_width, id_width=AXI_ID_WIDTH, **self.mem_options)
        m.submodules.bridge = bridge = HostBridge(
            fingerprint=cfg.fingerprint if cfg else protocol.LINK_TEST_FINGERPRINT, mem_bytes=self.mem_bytes,
            clock_hz=self.clock_hz, idle_timeout=protocol.IDLE_TIMEOUT_BITS * self.divisor)
        m.submodules.rx = rx = UartRx(self.divisor)
        m.submodules.tx = tx = UartTx(self.divisor)
        if cfg is not None:
            m.submodules.accelerator = acc = Accelerator(cfg, addr_width=addr_width)
            forward(m, acc.m_axi, mem.axi)
            wiring.connect(m, bridge.regs, acc.s_axil)
            m.d.comb += [bridge.run_busy.eq(acc.busy), self.busy.eq(acc.busy)]
        else:       # (the memory's AXI port stays idle; busy stays low)
            m.submodules.regs = regs = RegisterFile()
            wiring.connect(m, bridge.regs, regs.bus)
        wiring.connect(m, bridge.mem, mem.host)
        wiring.connect(m, rx.data, bridge.rx)
        # The reply's bytes reach the UART through a buffer: the bridge's state chose the byte and its
        # valid for the transmitter's registers (on the 85F at 100 MHz, 11.2 ns); a byte takes
        # 10 bit times to send anyway.
        m.submodules.tx_buffer = tx_buffer = SkidBuffer(8)
        m.d.comb += [tx_buffer.i_valid.eq(bridge.tx.valid), tx_buffer.i_payload.eq(bridge.tx.payload),
                     bridge.tx.ready.eq(tx_buffer.i_ready),
                     tx.data.valid.eq(tx_buffer.o_valid), tx.data.payload.eq(tx_buffer.o_payload),
                     tx_buffer.o_ready.eq(tx.data.ready)]
        m.d.comb += [rx.rx.eq(self.uart_rx), self.uart_tx.eq(tx.tx),
                     self.idle.eq(~self.busy & bridge.idle & ~tx_buffer.o_valid & ~tx.busy & ~rx.data.valid)]
        return m


class BoardTop(wiring.Component):
    """The SoC on a board: clock plan, UART pins, and an LED lit while a run is busy.

    Parameters
    ----------
    board : :class:`tilewright.fpga.boards.Board`
    cfg : HwConfig or None
        None: the link test (see :class:`SocCore`).
    freq_hz : int
        The accelerator clock; the board's PLL makes it from the board clock.
    """

    def __init__(self, board, cfg, *, freq_hz, baud):
        from .uart import divisor_for
        self.board, self.cfg, self.freq_hz = board, cfg, freq_hz
        self.divisor = divisor_for(freq_hz, baud)
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.domains.sync = ClockDomain("sync")
        self.board.clock_plan(m, platform, self.freq_hz)
        uart = platform.request("uart", 0, dir="-")
        m.submodules.uart_rx = rx = io.Buffer("i", uart.rx)
        m.submodules.uart_tx = tx = io.Buffer("o", uart.tx)
        m.submodules.led = led = io.Buffer("o", platform.request("led", 0, dir="-"))
        m.submodules.soc = soc = SocCore(self.cfg, mem_bytes=self.board.mem_bytes, divisor=self.divisor,
                                         clock_hz=self.freq_hz, mem_options=self.board.memory_options)
        m.d.comb += [soc.uart_rx.eq(rx.i), tx.o.eq(soc.uart_tx), led.o.eq(soc.busy)]
        return m

