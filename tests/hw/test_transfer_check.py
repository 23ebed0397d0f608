"""TransferCheck in the Amaranth simulator, parallel and serial, against the checks written out in Python."""

import random

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.lib import data
from amaranth.sim import Simulator

from tilewright import PRESETS, isa
from tilewright.hw.transfer_check import MAX_EXTENT, TransferCheck, check_width, dram_base_folded
from tilewright.isa import ErrorCode

SRAM_BITS = 10


def expected(case):
    """The error the functional simulator's order of checks gives, and the extent."""
    if case["sram_base"] + case["rows"] * case["cols"] > case["depth"]:
        return ErrorCode.SRAM_RANGE
    end = case["dram_base"] + (case["y_size"] - 1) * case["x_stride"] + case["x_size"]
    if end > case["dram_limit"]:
        return ErrorCode.BUS_ERROR
    if case["dram_base"] < case["guard_hi"] and end > case["guard_lo"]:      # (a guarded check: a STORE's)
        return ErrorCode.STORE_OVER_PROGRAM
    return 0


def random_case(rng):
    big = rng.random() < 0.3        # operands near their limits, where widths matter
    return {
        "sram_base": rng.randrange(1 << SRAM_BITS), "depth": rng.randrange(1, (1 << SRAM_BITS) + 1),
        "rows": rng.randrange(MAX_EXTENT) if big else rng.randrange(1, 40),
        "cols": rng.randrange(MAX_EXTENT) if big else rng.randrange(1, 40),
        "dram_base": rng.randrange(1 << isa.DRAM_ADDR_BITS) if big else rng.randrange(1 << 16),
        "x_size": rng.randrange(1 << isa.SIZE_BITS), "y_size": rng.randrange(1, 1 << isa.SIZE_BITS),
        "x_stride": rng.randrange(1 << isa.SIZE_BITS),
        "dram_limit": rng.choice([1 << 16, 1 << 20, 1 << isa.DRAM_ADDR_BITS]),
        **_guard(rng),
    } | (_inside(rng) if rng.random() < 0.5 else {})


def _inside(rng):
    """A rectangle that fits its buffer and rows on the bus, so that the guard decides."""
    base = rng.randrange(1 << 16)
    guard_lo = max(0, base + rng.randrange(-2048, 4096))        # (around the rows: overlapping or just not)
    return {"sram_base": 0, "depth": 1 << SRAM_BITS, "rows": rng.randrange(1, 32), "cols": rng.randrange(1, 32),
            "dram_base": base, "x_size": rng.randrange(1, 64), "y_size": rng.randrange(1, 16),
            "x_stride": rng.randrange(64, 256), "dram_limit": 1 << isa.DRAM_ADDR_BITS,
            "guard_lo": guard_lo, "guard_hi": guard_lo + rng.randrange(1, 2048)}


def _guard(rng):
    """No guarded range (a LOAD), or one somewhere in the low 64 Ki elements, where the rows often are."""
    if rng.random() < 0.3:
        return {"guard_lo": 0, "guard_hi": 0}
    lo = rng.randrange(1 << 16)
    return {"guard_lo": lo, "guard_hi": lo + rng.randrange(1, 1 << 12)}


def small_bus_case(rng, limit_bits):
    """A case on a bus of at most ``2**limit_bits`` elements (a board's memory); every other operand as wide
    as the ISA allows, so that the saturating arithmetic meets values far beyond the bus."""
    case = random_case(rng)
    case["dram_limit"] = rng.choice([1 << limit_bits, 1 << (limit_bits - 2), 1000])
    if rng.random() < 0.5:
        case["dram_base"] = rng.randrange(case["dram_limit"] + 64)
        case["x_stride"], case["x_size"] = rng.randrange(1 << rng.choice([4, 8, 16])), rng.randrange(1, 300)
    lo = rng.randrange(case["dram_limit"])
    case["guard_lo"], case["guard_hi"] = lo, min(case["dram_limit"], lo + rng.randrange(1, 512))
    return case


@pytest.mark.parametrize("limit_bits", [isa.DRAM_ADDR_BITS, 14], ids=["full-width", "small-bus"])
@pytest.mark.parametrize("serial,compact,guarded", [(False, False, True), (True, False, True), (True, True, True),
                                                    (True, True, False)],
                         ids=["parallel", "serial", "compact", "compact-unguarded"])
def test_checks_match_the_reference(serial, compact, guarded, limit_bits):
    dut = TransferCheck(sram_bits=SRAM_BITS, serial=serial, guarded=guarded, limit_bits=limit_bits, compact=compact)
    rng = random.Random(5)
    cases = [random_case(rng) if limit_bits == isa.DRAM_ADDR_BITS else small_bus_case(rng, limit_bits)
             for _ in range(200)]
    if not guarded:             # (a LOAD's check: no guarded range)
        cases = [{k: v for k, v in case.items() if not k.startswith("guard_")} | {"guard_lo": 0, "guard_hi": 0}
                 for case in cases]
    latencies = run_cases(dut, cases, guarded)
    if compact:     # a cycle per bit of the multipliers and per sum or compare, at most
        assert max(latencies) <= 11 + 2 * MAX_EXTENT.bit_length()
    elif serial:    # one cycle per bit of the multipliers, at most
        assert max(latencies) <= TransferCheck.LATENCY + 2 * MAX_EXTENT.bit_length()
    else:
        assert set(latencies) == {TransferCheck.LATENCY}


def run_cases(dut, cases, guarded, *, top=None, set_dram_base=None):
    """Check each case on ``dut`` (simulating ``top``, which holds it, if given) against :func:`expected`;
    returns the cycles each took. ``set_dram_base(ctx, value)`` drives ``dram_base`` another way."""
    latencies = []

    async def bench(ctx):
        for case in cases:
            for name, value in case.items():
                if name == "dram_base" and set_dram_base:
                    set_dram_base(ctx, value)
                elif guarded or not name.startswith("guard_"):
                    ctx.set(getattr(dut, name), value)
            ctx.set(dut.start, 1)
            await ctx.tick()
            ctx.set(dut.start, 0)
            cycles = 1
            while not ctx.get(dut.done):
                await ctx.tick()
                cycles += 1
                assert cycles < 100
            assert ctx.get(dut.error) == expected(case), case
            assert ctx.get(dut.failed) == (expected(case) != 0), case
            if ctx.get(dut.error) != ErrorCode.SRAM_RANGE:
                assert ctx.get(dut.extent) == case["rows"] * case["cols"]
            latencies.append(cycles)
            await ctx.tick()

    sim = Simulator(top or dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return latencies


class _FoldedDramBase(Elaboratable):
    """A check whose ``dram_base`` comes from an instruction word through :func:`dram_base_folded`."""

    def __init__(self, check, layout, keep):
        self.check, self.layout, self.keep = check, layout, keep
        self.word = Signal(isa.INSN_BITS)

    def elaborate(self, platform):
        m = Module()
        m.submodules.check = self.check
        folded = data.View(self.layout, dram_base_folded(self.word, self.layout, self.keep))
        m.d.comb += self.check.dram_base.eq(folded.dram_base)
        return m


@pytest.mark.parametrize("opcode", [isa.Opcode.LOAD, isa.Opcode.STORE], ids=lambda op: op.name)
@pytest.mark.parametrize("wider", [0, 3], ids=["as-wide", "wider"])
def test_a_folded_dram_base_is_checked_as_the_whole_field(opcode, wider):
    """With ``slow_clock`` a LOAD or STORE is queued with ``dram_base`` folded above a width at least the
    checks' (``dram_base_folded``): a check decides every case on the folded field as on the whole one,
    the instruction's other bits random."""
    limit_bits = 14
    dut = TransferCheck(sram_bits=SRAM_BITS, serial=True, guarded=True, limit_bits=limit_bits, compact=True)
    layout = isa.instruction_layouts(PRESETS["tiny"])[opcode]
    top = _FoldedDramBase(dut, layout, check_width(sram_bits=SRAM_BITS, limit_bits=limit_bits) + wider)
    rng = random.Random(int(opcode) + wider)
    field = layout["dram_base"]

    def set_dram_base(ctx, value):
        noise = rng.getrandbits(isa.INSN_BITS) & ~(((1 << field.width) - 1) << field.offset)
        ctx.set(top.word, noise | value << field.offset)
    cases = [small_bus_case(rng, limit_bits) for _ in range(150)]
    for case in cases[::3]:         # (some far beyond the bus, a bit above the checks' width or at the top)
        case["dram_base"] = rng.choice([1 << rng.randrange(14, isa.DRAM_ADDR_BITS), (1 << isa.DRAM_ADDR_BITS) - 1,
                                        rng.randrange(1 << isa.DRAM_ADDR_BITS)])
    assert {expected(case) for case in cases} >= {0, ErrorCode.BUS_ERROR, ErrorCode.SRAM_RANGE}
    run_cases(dut, cases, True, top=top, set_dram_base=set_dram_base)
