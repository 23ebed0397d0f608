"""The host link's parts in Amaranth's simulator: the CRC network against the protocol's
table-driven CRC (itself checked against the CRC-16/CCITT-FALSE catalogue value), and the UART
transmitter looped into the receiver."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.sim import Simulator

from tilewright.fpga import protocol
from tilewright.fpga.bridge import crc16_next
from tilewright.fpga.uart import UartRx, UartTx, divisor_for


def test_crc_matches_the_catalogue_check_value():
    # The catalogue's check value: CRC of the ASCII digits 1..9.
    assert protocol.crc16(b"123456789") == 0x29B1


def test_crc_network_equals_the_table():
    crc, byte, out = Signal(16), Signal(8), Signal(16)
    m = Module()
    m.d.comb += out.eq(crc16_next(crc, byte))
    rng = random.Random(1)
    sim = Simulator(m)

    async def bench(ctx):
        for _ in range(300):
            c, b = rng.randrange(1 << 16), rng.randrange(256)
            ctx.set(crc, c)
            ctx.set(byte, b)
            assert ctx.get(out) == protocol.crc16([b], c)

    sim.add_testbench(bench)
    sim.run()


def test_request_frame_layout():
    frame = protocol.request(protocol.Command.REG_READ, b"\x14")
    assert frame[0] == protocol.REQUEST_SYNC and frame[1] == protocol.Command.REG_READ
    assert int.from_bytes(frame[2:4], "little") == 1 and frame[4] == 0x14
    assert int.from_bytes(frame[5:], "little") == protocol.crc16(frame[1:5])


@pytest.mark.parametrize("divisor", [4, 7])
def test_uart_loopback(divisor):
    m = Module()
    m.submodules.tx = tx = UartTx(divisor)
    m.submodules.rx = rx = UartRx(divisor)
    m.d.comb += rx.rx.eq(tx.tx)
    payload = [random.Random(divisor).randrange(256) for _ in range(20)]
    received = []
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def send(ctx):
        for b in payload:
            ctx.set(tx.data.payload, b)
            ctx.set(tx.data.valid, 1)
            await ctx.tick().until(tx.data.ready)
        ctx.set(tx.data.valid, 0)

    async def receive(ctx):
        ctx.set(rx.data.ready, 1)
        while len(received) < len(payload):
            await ctx.tick()
            if ctx.get(rx.data.valid):
                received.append(ctx.get(rx.data.payload))

    sim.add_testbench(send)
    sim.add_testbench(receive)
    sim.run_until(1e-6 * divisor * 10 * (len(payload) + 4))
    assert received == payload


def test_uart_drops_a_frame_without_stop_bit():
    divisor = 4
    m = Module()
    m.submodules.rx = rx = UartRx(divisor)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    got = []

    async def bench(ctx):
        ctx.set(rx.data.ready, 1)
        # start bit, 0x55, then a low stop bit (a break), then a good frame with 0xA3
        bits = [0] + [(0x55 >> k) & 1 for k in range(8)] + [0] + [1] * 3
        bits += [0] + [(0xA3 >> k) & 1 for k in range(8)] + [1] * 3
        for bit in bits:
            ctx.set(rx.rx, bit)
            for _ in range(divisor):
                await ctx.tick()
                if ctx.get(rx.data.valid):
                    got.append(ctx.get(rx.data.payload))

    sim.add_testbench(bench)
    sim.run()
    assert got == [0xA3]


def test_divisor_for():
    assert divisor_for(24_000_000, 1_000_000) == 24
    with pytest.raises(ValueError, match="at least 4"):
        divisor_for(12_000_000, 4_000_000)
    with pytest.raises(ValueError, match="off by"):
        divisor_for(10_000_000, 1_500_000)
