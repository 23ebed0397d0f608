"""RegisterFile driven by a minimal AXI4-Lite manager written in the testbench.

:class:`AxiLiteManager` respects the handshake rules from the manager's
side (AW and W offered independently and dropped after their own handshake,
``bready``/``rready`` held low at random) and checks the subordinate's: a
response, once valid, stays valid with stable data until taken, and is OKAY.
Handshakes are judged on values sampled at the clock edge
(``ctx.tick().sample``), so several manager processes can share the bus.
"""

import random

import pytest
from amaranth.sim import Simulator

from tilewright.hw.axi import LITE_DATA_WIDTH
from tilewright.hw.regs import ADDR_WIDTH, CONTROL_START, CONTROL_START_BIT, COUNTERS, REGISTERS, RegisterFile

BY_NAME = {r.name: r for r in REGISTERS}
READ_ONLY = [r for r in REGISTERS if r.access == "r"]
CONTROL, INSN_ADDR, INSN_COUNT = (BY_NAME[n].offset for n in ("control", "insn_addr", "insn_count"))
WORD_BYTES = LITE_DATA_WIDTH // 8
#: Word offsets of the register space that no register maps: they read 0 and ignore writes.
HOLES = [o for o in range(0, 1 << ADDR_WIDTH, WORD_BYTES) if o not in {r.offset for r in REGISTERS}]
ALL_ONES = (1 << LITE_DATA_WIDTH) - 1
ALL_LANES = (1 << WORD_BYTES) - 1
START_LANE = 1 << (CONTROL_START_BIT // 8)         # the byte strobe of the start bit's lane


class AxiLiteManager:
    """One AXI4-Lite manager on ``bus``; ``stall`` is the chance a cycle holds a valid or ready low.

    With ``stall=0`` requests leave in the cycle after the previous
    response: back-to-back traffic. ``write`` returns the number of
    ``start`` pulses seen from its first offer to its response.
    """

    def __init__(self, dut, rng, *, stall=0.0):
        self.dut, self.bus, self.rng, self.stall = dut, dut.bus, rng, stall

    def _go(self):
        return self.rng.random() >= self.stall

    async def write(self, ctx, addr, data, strb=ALL_LANES):
        bus = self.bus
        ctx.set(bus.awaddr, addr)
        ctx.set(bus.awprot, 0)
        ctx.set(bus.wdata, data)
        ctx.set(bus.wstrb, strb)
        aw_pending = w_pending = True
        starts = 0
        aw = w = False
        while aw_pending or w_pending:
            # A valid, once raised, stays up until its handshake.
            aw, w = aw_pending and (aw or self._go()), w_pending and (w or self._go())
            ctx.set(bus.awvalid, aw)
            ctx.set(bus.wvalid, w)
            _, _, awready, wready, start = await ctx.tick().sample(bus.awready, bus.wready, self.dut.start)
            starts += start
            aw_pending &= not (aw and awready)
            w_pending &= not (w and wready)
        ctx.set(bus.awvalid, 0)
        ctx.set(bus.wvalid, 0)
        held = None
        while True:
            ready = self._go()
            ctx.set(bus.bready, ready)
            _, _, bvalid, bresp, start = await ctx.tick().sample(bus.bvalid, bus.bresp, self.dut.start)
            starts += start
            if held is not None:
                assert bvalid and bresp == held, "B response withdrawn or changed before bready"
            if bvalid:
                assert bresp == 0, "OKAY"
                held = bresp
                if ready:
                    break
        ctx.set(bus.bready, 0)
        return starts

    async def read(self, ctx, addr):
        bus = self.bus
        ctx.set(bus.araddr, addr)
        ctx.set(bus.arprot, 0)
        valid = False
        while True:
            valid = valid or self._go()
            ctx.set(bus.arvalid, valid)
            _, _, arready = await ctx.tick().sample(bus.arready)
            if valid and arready:
                break
        ctx.set(bus.arvalid, 0)
        held = None
        while True:
            ready = self._go()
            ctx.set(bus.rready, ready)
            _, _, rvalid, rdata, rresp = await ctx.tick().sample(bus.rvalid, bus.rdata, bus.rresp)
            if held is not None:
                assert rvalid and (rdata, rresp) == held, "R response withdrawn or changed before rready"
            if rvalid:
                assert rresp == 0, "OKAY"
                held = (rdata, rresp)
                if ready:
                    break
        ctx.set(bus.rready, 0)
        return held[0]


def simulate(*benches, dut=None):
    """Run ``bench(ctx, dut)`` coroutines as testbenches; also count every ``start`` pulse.

    Returns the cycles (edges) at which ``start`` was high.
    """
    dut = dut or RegisterFile()
    starts, cycle = [], [0]

    async def monitor(ctx):
        async for _, _, start in ctx.tick().sample(dut.start):
            if start:
                starts.append(cycle[0])
            cycle[0] += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    for bench in benches:
        async def run(ctx, bench=bench):
            await bench(ctx, dut)
        sim.add_testbench(run)
    sim.add_testbench(monitor, background=True)
    sim.run()
    return starts


def drive_inputs(ctx, dut, rng):
    """Random values on every read-only register input; returns ``{name: value}``."""
    values = {r.name: rng.getrandbits(LITE_DATA_WIDTH) for r in READ_ONLY}
    for name, value in values.items():
        ctx.set(getattr(dut, name), value)
    return values


# -- tests ------------------------------------------------------------------------

@pytest.mark.parametrize("direct", [False, True], ids=["", "direct"])
@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_program_registers_read_back(stall, direct):
    """Writes to ``insn_addr``/``insn_count`` drive those outputs and read back; other writes leave them alone
    (with the write's request registered, or ``direct``)."""
    rng = random.Random(int(stall * 10))

    async def bench(ctx, dut):
        m = AxiLiteManager(dut, rng, stall=stall)
        expected = {INSN_ADDR: 0, INSN_COUNT: 0}
        for _ in range(30):
            offset = rng.choice([INSN_ADDR, INSN_COUNT])
            value = rng.choice([rng.getrandbits(LITE_DATA_WIDTH), 0, ALL_ONES])
            assert await m.write(ctx, offset, value) == 0
            expected[offset] = value
            assert ctx.get(dut.insn_addr) == expected[INSN_ADDR]
            assert ctx.get(dut.insn_count) == expected[INSN_COUNT]
            for reg in (INSN_ADDR, INSN_COUNT):
                assert await m.read(ctx, reg) == expected[reg]
        # Writing a read-only register or an unmapped offset changes neither.
        for r in READ_ONLY + [BY_NAME["control"]]:
            await m.write(ctx, r.offset, ALL_ONES & ~CONTROL_START)
        for offset in HOLES:
            await m.write(ctx, offset, ALL_ONES)
        for reg in (INSN_ADDR, INSN_COUNT):
            assert await m.read(ctx, reg) == expected[reg]

    assert simulate(bench, dut=RegisterFile(direct=direct)) == []


@pytest.mark.parametrize("direct", [False, True], ids=["", "direct"])
def test_start_pulses_once_per_write_of_one(direct):
    """``start`` is high for exactly one cycle per write with the start bit set (its lane strobed) to ``control``.

    Writes of 0, of the start bit without its byte strobe, and of the start
    bit to any other register or a hole start nothing; the pulse does not
    repeat while the B response waits for ``bready``.
    """
    rng = random.Random(1)
    start = CONTROL_START
    cases = [(CONTROL, start, ALL_LANES, 1), (CONTROL, 0, ALL_LANES, 0), (CONTROL, start | start << 1, ALL_LANES, 1),
             (CONTROL, ALL_ONES & ~start, ALL_LANES, 0), (CONTROL, start, ALL_LANES & ~START_LANE, 0),
             (CONTROL, start, START_LANE, 1),
             (INSN_ADDR, start, ALL_LANES, 0), (INSN_COUNT, start, ALL_LANES, 0),
             (BY_NAME["status"].offset, start, ALL_LANES, 0), (BY_NAME[COUNTERS[0][0]].offset, start, ALL_LANES, 0),
             (HOLES[0], start, ALL_LANES, 0), (CONTROL, ALL_ONES, ALL_LANES, 1)]
    seen = []

    async def bench(ctx, dut):
        for stall in (0.0, 0.7):
            m = AxiLiteManager(dut, rng, stall=stall)
            for offset, data, strb, _ in cases:
                seen.append(await m.write(ctx, offset, data, strb))
            for _ in range(10):
                seen.append(await m.write(ctx, CONTROL, CONTROL_START))

    starts = simulate(bench, dut=RegisterFile(direct=direct))
    expected = ([pulses for *_, pulses in cases] + [1] * 10) * 2
    assert seen == expected
    assert len(starts) == sum(expected), "no start outside those writes"


@pytest.mark.parametrize("direct", [False, True], ids=["", "direct"])
@pytest.mark.parametrize("stall", [0.0, 0.5])
def test_read_only_registers_return_their_inputs(stall, direct):
    """Every readable register of REGISTERS returns the value on its input; ``control`` and holes read 0
    (from registered groups, or ``direct`` from one multiplexer)."""
    rng = random.Random(7 + int(stall * 10))

    async def bench(ctx, dut):
        m = AxiLiteManager(dut, rng, stall=stall)
        for _ in range(3):
            values = drive_inputs(ctx, dut, rng)
            for r in rng.sample(READ_ONLY, len(READ_ONLY)):
                assert await m.read(ctx, r.offset) == values[r.name], r.name
                # Byte offsets within the word address the same register.
                assert await m.read(ctx, r.offset | rng.randrange(WORD_BYTES)) == values[r.name], r.name
            assert await m.read(ctx, CONTROL) == 0
            for offset in HOLES:
                assert await m.read(ctx, offset) == 0, hex(offset)

    assert {r.name for r in READ_ONLY} == {"status", "error_index", "fingerprint"} | {n for n, _ in COUNTERS}
    assert HOLES, "the register space has unmapped words"
    simulate(bench, dut=RegisterFile(direct=direct))


def test_back_to_back_mixed_traffic():
    """Reads and writes issued back to back (no idle cycle) return the latest write and the current inputs."""
    rng = random.Random(3)

    async def bench(ctx, dut):
        m = AxiLiteManager(dut, rng)
        regs = {INSN_ADDR: 0, INSN_COUNT: 0}
        values = drive_inputs(ctx, dut, rng)
        for _ in range(150):
            op = rng.random()
            if op < 0.35:
                offset = rng.choice(list(regs))
                regs[offset] = rng.getrandbits(32)
                assert await m.write(ctx, offset, regs[offset]) == 0
            elif op < 0.55:
                offset = rng.choice(list(regs))
                assert await m.read(ctx, offset) == regs[offset]
            elif op < 0.9:
                r = rng.choice(READ_ONLY)
                assert await m.read(ctx, r.offset) == values[r.name]
            else:
                values = drive_inputs(ctx, dut, rng)

    simulate(bench)


@pytest.mark.parametrize("direct", [False, True], ids=["", "direct"])
@pytest.mark.parametrize("stall", [0.0, 0.6])
def test_concurrent_reader_and_writer(stall, direct):
    """A reader and a writer share the bus at once: every read is right and every control write starts once."""
    rng_w, rng_r = random.Random(11), random.Random(12)
    written = []
    pulses = []

    async def writer(ctx, dut):
        m = AxiLiteManager(dut, rng_w, stall=stall)
        for _ in range(60):
            offset = rng_w.choice([INSN_ADDR, INSN_COUNT, CONTROL])
            value = rng_w.getrandbits(LITE_DATA_WIDTH)
            pulses.append((await m.write(ctx, offset, value), offset == CONTROL and value & CONTROL_START))
            written.append((offset, value))

    async def reader(ctx, dut):
        m = AxiLiteManager(dut, rng_r, stall=stall)
        values = drive_inputs(ctx, dut, rng_r)
        for _ in range(80):
            r = rng_r.choice(READ_ONLY)
            assert await m.read(ctx, r.offset) == values[r.name]

    starts = simulate(writer, reader, dut=RegisterFile(direct=direct))
    assert [got for got, _ in pulses] == [int(bool(want)) for _, want in pulses]
    assert len(starts) == sum(got for got, _ in pulses)
