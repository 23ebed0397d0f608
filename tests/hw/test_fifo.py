"""HeadRegisteredFIFO against a deque, in both of its builds (LUT RAM sized and block RAM sized)."""

import collections
import random

import pytest
from amaranth.sim import Simulator

from tilewright.hw.fifo import LUTRAM_DEPTH, HeadRegisteredFIFO


@pytest.mark.parametrize("depth", [2, 3, 17, LUTRAM_DEPTH + 1])
def test_matches_a_deque(depth):
    dut = HeadRegisteredFIFO(width=16, depth=depth)
    rng = random.Random(depth)
    model = collections.deque()
    seen = []

    async def bench(ctx):
        value = 0
        for _ in range(1500):
            w_en, r_en = rng.random() < 0.55, rng.random() < 0.5
            ctx.set(dut.w_data, value)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            w_rdy, r_rdy, r_data, level = ctx.get(dut.w_rdy), ctx.get(dut.r_rdy), ctx.get(dut.r_data), ctx.get(dut.level)
            assert level == len(model) and level <= depth
            assert not w_rdy or len(model) < depth     # never accepts beyond its depth
            if r_rdy:
                assert r_data == model[0]
            if r_en and r_rdy:
                seen.append(model.popleft())
            if w_en and w_rdy:
                model.append(value)
                value += 1
            await ctx.tick()
        assert len(seen) > 300

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == list(range(len(seen)))
