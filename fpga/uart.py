"""An 8N1 UART: a receiver and a transmitter as byte streams.

Both count ``divisor`` clock cycles per bit (``clock_hz / baud``, at least 4).
The receiver synchronises its pin through two flip-flops, finds the middle
of the start bit and samples every following bit there; a frame whose stop
bit is low is dropped (a break or a baud mismatch), never delivered, and
the receiver waits for the line to go high before it looks for a start bit.
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.cdc import FFSynchronizer
from amaranth.lib.wiring import In, Out

__all__ = ["UartRx", "UartTx", "divisor_for"]


def divisor_for(clock_hz, baud):
    """Clock cycles per bit for ``baud`` at ``clock_hz``; raises ValueError when the error exceeds 2 %."""
    divisor = round(clock_hz / baud)
    if divisor < 4:
        raise ValueError(f"{baud} baud needs at least 4 clock cycles per bit; {clock_hz / 1e6:g} MHz gives {divisor}")
    error = abs(clock_hz / divisor - baud) / baud
    if error > 0.02:
        raise ValueError(f"{baud} baud from {clock_hz / 1e6:g} MHz is off by {100 * error:.1f} % (more than 2 %)")
    return divisor


class UartRx(wiring.Component):
    """Receiver.

    Members
    -------
    rx : In(1)
        The line (idle high).
    data : Out(stream.Signature(8))
        Received bytes. The consumer must take each byte within one byte
        time; a byte not taken by then is replaced by the next one.
    """

    def __init__(self, divisor):
        if divisor < 4:
            raise ValueError(f"divisor {divisor} is below 4 clock cycles per bit")
        self.divisor = divisor
        super().__init__({"rx": In(1, init=1), "data": Out(stream.Signature(8))})

    def elaborate(self, platform):
        m = Module()
        rx = Signal(init=1)
        m.submodules.sync = FFSynchronizer(self.rx, rx, init=1)
        timer = Signal(range(self.divisor * 3 // 2 + 1))
        bits = Signal(8)
        count = Signal(range(9))
        with m.If(self.data.ready):
            m.d.sync += self.data.valid.eq(0)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(~rx):
                    # From the falling edge to the middle of data bit 0: one and a half bits.
                    m.d.sync += [timer.eq(self.divisor * 3 // 2 - 1), count.eq(0)]
                    m.next = "DATA"
            with m.State("DATA"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    m.d.sync += [timer.eq(self.divisor - 1), bits.eq(Cat(bits[1:], rx)),
                                 count.eq(count + 1)]
                    with m.If(count == 7):
                        m.next = "STOP"
            with m.State("STOP"):
                m.d.sync += timer.eq(timer - 1)
                with m.If(timer == 0):
                    with m.If(rx):
                        m.d.sync += [self.data.payload.eq(bits), self.data.valid.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        m.next = "BREAK"
            with m.State("BREAK"):
                # A framing error: wait for the line to go idle before looking for a start bit.
                with m.If(rx):
                    m.next = "IDLE"
        return m


class UartTx(wiring.Component):
    """Transmitter.

    Members
    -------
    data : In(stream.Signature(8))
        Bytes to send; each is taken when its start bit begins.
    tx : Out(1)
        The line (idle high).
    busy : Out(1)
        A byte is on the line.
    """

    def __init__(self, divisor):
        if divisor < 4:
            raise ValueError(f"divisor {divisor} is below 4 clock cycles per bit")
        self.divisor = divisor
        super().__init__({"data": In(stream.Signature(8)), "tx": Out(1, init=1), "busy": Out(1)})

    def elaborate(self, platform):
        m = Module()
        timer = Signal(range(self.divisor))
        frame = Signal(10, init=0x3FF)        # stop, 8 data bits, start; shifted out LSB first
        left = Signal(range(11))
        m.d.comb += [self.tx.eq(frame[0]), self.busy.eq(left != 0),
                     self.data.ready.eq(left == 0)]
        with m.If(self.data.valid & self.data.ready):
            m.d.sync += [frame.eq((1 << 9) | (self.data.payload << 1)), left.eq(10), timer.eq(self.divisor - 1)]
        with m.Elif(left != 0):
            m.d.sync += timer.eq(timer - 1)
            with m.If(timer == 0):
                m.d.sync += [timer.eq(self.divisor - 1), frame.eq((frame >> 1) | (1 << 9)), left.eq(left - 1)]
        return m
