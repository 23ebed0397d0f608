"""OnChipMemory in the Amaranth simulator against a bytearray: AXI bursts, the host port, back-pressure."""

import random

import pytest
from amaranth.sim import Simulator

from tilewright.fpga.memory import OnChipMemory
from tilewright.hw.axi import RESP_OKAY, RESP_SLVERR

SIZE = 4096
WIDTH = 64
WORD = WIDTH // 8
#: OnChipMemory's layouts: plain (the small FPGAs), and the ECP5's.
LAYOUTS = [{}, {"input_register": True}, {"input_register": True, "register_slice": True}]


def run_memory(script, *, seed, rready_rate=1.0, layout=None):
    """Run ``script(ctx, dut, rng, read_burst, write_burst, host_read, host_write)`` on an OnChipMemory.

    The helpers perform one transaction each and return what came back:
    ``layout``: OnChipMemory's keywords. ``read_burst(addr, beats, id)`` → list of (data, resp, last, id) per beat and
    the cycles from the address handshake to the last beat; ``write_burst(addr,
    words, strobes, id)`` → (bresp, bid); ``host_read(addr)`` → byte.
    """
    dut = OnChipMemory(size=SIZE, data_width=WIDTH, id_width=2, **(layout or {}))
    axi, host = dut.axi, dut.host
    rng = random.Random(seed)

    async def read_burst(ctx, addr, beats, id_):
        ctx.set(axi.araddr, addr)
        ctx.set(axi.arlen, beats - 1)
        ctx.set(axi.arid, id_)
        ctx.set(axi.arvalid, 1)
        await ctx.tick().until(axi.arready)
        ctx.set(axi.arvalid, 0)
        out, cycles = [], 0
        while len(out) < beats:
            ready = rng.random() < rready_rate
            ctx.set(axi.rready, ready)
            await ctx.delay(1e-9)
            if ready and ctx.get(axi.rvalid):
                out.append((ctx.get(axi.rdata), ctx.get(axi.rresp), ctx.get(axi.rlast), ctx.get(axi.rid)))
            await ctx.tick()
            cycles += 1
        ctx.set(axi.rready, 0)
        return out, cycles

    async def write_burst(ctx, addr, words, strobes, id_):
        ctx.set(axi.awaddr, addr)
        ctx.set(axi.awlen, len(words) - 1)
        ctx.set(axi.awid, id_)
        ctx.set(axi.awvalid, 1)
        await ctx.tick().until(axi.awready)
        ctx.set(axi.awvalid, 0)
        for k, (word, strobe) in enumerate(zip(words, strobes)):
            ctx.set(axi.wdata, word)
            ctx.set(axi.wstrb, strobe)
            ctx.set(axi.wlast, k == len(words) - 1)
            ctx.set(axi.wvalid, 1)
            await ctx.tick().until(axi.wready)
        ctx.set(axi.wvalid, 0)
        ctx.set(axi.bready, 1)
        await ctx.tick().until(axi.bvalid)
        resp = (ctx.get(axi.bresp), ctx.get(axi.bid))
        ctx.set(axi.bready, 0)
        return resp

    async def host_access(ctx, addr, value=None):
        ctx.set(host.addr, addr)
        ctx.set(host.write, value is not None)
        ctx.set(host.wdata, value or 0)
        ctx.set(host.valid, 1)
        await ctx.tick().until(host.ready)
        ctx.set(host.valid, 0)
        if value is None:
            while not ctx.get(host.rvalid):
                await ctx.tick()
            return ctx.get(host.rdata)

    async def bench(ctx):
        await script(ctx, rng, lambda *a: read_burst(ctx, *a), lambda *a: write_burst(ctx, *a),
                     lambda a: host_access(ctx, a), lambda a, v: host_access(ctx, a, v))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def word_of(model, addr):
    return int.from_bytes(model[addr:addr + WORD], "little")


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "+".join(layout) or "plain")
@pytest.mark.parametrize("rready_rate", [1.0, 0.4])
def test_bursts_and_host_bytes_match_a_bytearray(rready_rate, layout):
    """Random host writes, AXI write bursts with strobes and AXI read bursts (R held off at random) agree
    with a bytearray; ids, rlast and responses are right, and bursts beyond the memory answer SLVERR."""
    model = bytearray(SIZE)

    async def script(ctx, rng, read_burst, write_burst, host_read, host_write):
        for addr in rng.sample(range(SIZE), 64):
            value = rng.randrange(256)
            await host_write(addr, value)
            model[addr] = value
        for _ in range(40):
            beats = rng.randint(1, 16)
            addr = WORD * rng.randrange(SIZE // WORD - beats + 1)
            if rng.random() < 0.5:
                words = [rng.getrandbits(WIDTH) for _ in range(beats)]
                strobes = [rng.getrandbits(WORD) for _ in range(beats)]
                id_ = rng.randrange(4)
                assert await write_burst(addr, words, strobes, id_) == (RESP_OKAY, id_)
                for k, (word, strobe) in enumerate(zip(words, strobes)):
                    for b in range(WORD):
                        if strobe >> b & 1:
                            model[addr + WORD * k + b] = word >> (8 * b) & 0xFF
            else:
                id_ = rng.randrange(4)
                beats_out, _ = await read_burst(addr, beats, id_)
                assert beats_out == [(word_of(model, addr + WORD * k), RESP_OKAY, k == beats - 1, id_)
                                     for k in range(beats)]
            probe = rng.randrange(SIZE)
            assert await host_read(probe) == model[probe]
        # Four beats: two inside the memory, two beyond it.
        beats_out, _ = await read_burst(SIZE - 2 * WORD, 4, 1)
        assert [(resp, data) for data, resp, _, _ in beats_out] == [
            (RESP_OKAY, word_of(model, SIZE - 2 * WORD)), (RESP_OKAY, word_of(model, SIZE - WORD)),
            (RESP_SLVERR, 0), (RESP_SLVERR, 0)]
        # The beat inside is written, the one beyond dropped.
        assert await write_burst(SIZE - WORD, [0x1234, 2], [0xFF, 0xFF], 2) == (RESP_SLVERR, 2)
        assert [await host_read(SIZE - WORD + k) for k in range(2)] == [0x34, 0x12]

    run_memory(script, seed=int(rready_rate * 10), rready_rate=rready_rate, layout=layout)


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "+".join(layout) or "plain")
def test_a_read_burst_streams_one_beat_per_cycle(layout):
    """With R always ready a 16-beat burst's last beat leaves a fixed few cycles after its first could."""
    cycles = {}

    async def script(ctx, rng, read_burst, write_burst, host_read, host_write):
        for beats in (1, 16, 64):
            _, cycles[beats] = await read_burst(0, beats, 0)

    run_memory(script, seed=0, layout=layout)
    assert cycles[16] - cycles[1] == 15 and cycles[64] - cycles[1] == 63, cycles


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: "+".join(layout) or "plain")
def test_a_write_burst_passes_a_read_beat_waiting_for_r(layout):
    """A read burst whose beats (as many as wait without holding the memory: one where the RAM's output
    holds it) R does not take yet leaves the memory free for a write burst elsewhere; the read's beats,
    taken after it, are the words as they were, and the write landed."""
    dut = OnChipMemory(size=SIZE, data_width=WIDTH, id_width=2, **layout)
    axi = dut.axi
    words = [0x1111_0000_0000_0000 + k for k in range(4 if layout.get("input_register") else 1)]

    async def bench(ctx):
        async def handshake(valid, ready):
            ctx.set(valid, 1)
            await ctx.tick().until(ready)
            ctx.set(valid, 0)

        async def write_word(addr, word):       # a one-beat write burst
            ctx.set(axi.awaddr, addr)
            ctx.set(axi.awlen, 0)
            await handshake(axi.awvalid, axi.awready)
            ctx.set(axi.wdata, word)
            ctx.set(axi.wstrb, (1 << WORD) - 1)
            ctx.set(axi.wlast, 1)
            await handshake(axi.wvalid, axi.wready)
            ctx.set(axi.bready, 1)
            await ctx.tick().until(axi.bvalid)
            ctx.set(axi.bready, 0)
        for k, word in enumerate(words):          # the words the read will return, at 0..
            await write_word(WORD * k, word)
        ctx.set(axi.araddr, 0)
        ctx.set(axi.arlen, len(words) - 1)
        await handshake(axi.arvalid, axi.arready)     # R held off: its beats wait
        for _ in range(10):
            await ctx.tick()
        await write_word(0x800, 0xABCD)
        ctx.set(axi.rready, 1)
        got = []
        while len(got) < len(words):
            await ctx.delay(1e-9)
            if ctx.get(axi.rvalid):
                got.append(ctx.get(axi.rdata))
            await ctx.tick()
        ctx.set(axi.rready, 0)
        assert got == words
        ctx.set(axi.araddr, 0x800)
        ctx.set(axi.arlen, 0)
        await handshake(axi.arvalid, axi.arready)
        ctx.set(axi.rready, 1)
        rdata, = await ctx.tick().sample(axi.rdata).until(axi.rvalid)
        assert rdata == 0xABCD

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
