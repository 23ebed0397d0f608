"""TokenQueue against a naive model, in simulation and by formal proof."""

import random

import pytest
from amaranth import Module, Signal
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.wiring import In
from amaranth.sim import Simulator

from tilewright.hw.token_queue import TokenQueue
from tilewright.sim.formal import FormalError, prove


class TokenQueueModel:
    """Deliberately naive: a Python int bounded by the capacity."""

    def __init__(self, depth):
        self.depth, self.count = depth, 0

    def step(self, push, pop):
        accept_push = push and self.count < self.depth
        accept_pop = pop and self.count > 0
        self.count += accept_push - accept_pop


@pytest.mark.parametrize("depth", [1, 2, 5, 16])
def test_matches_model_on_random_traffic(depth):
    dut = TokenQueue(depth=depth)
    model = TokenQueueModel(depth)
    rng = random.Random(depth)

    async def bench(ctx):
        for _ in range(400):
            push, pop = rng.random() < 0.55, rng.random() < 0.5
            assert ctx.get(dut.count) == model.count
            assert ctx.get(dut.push_ready) == (model.count < depth)
            assert ctx.get(dut.pop_ready) == (model.count > 0)
            ctx.set(dut.push, push)
            ctx.set(dut.pop, pop)
            await ctx.tick()
            model.step(push, pop)

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


class TokenQueueSpec(wiring.Component):
    """Formal harness: free push/pop inputs, a shadow count of accepted pushes minus pops."""

    push: In(1)
    pop: In(1)

    def __init__(self, depth, queue=TokenQueue):
        self.depth, self.queue = depth, queue
        super().__init__()

    def elaborate(self, platform):
        m = Module()
        m.submodules.dut = dut = self.queue(depth=self.depth)
        m.d.comb += [dut.push.eq(self.push), dut.pop.eq(self.pop)]
        pushes_minus_pops = Signal(range(-1, self.depth + 2))
        accepted_push = self.push & (pushes_minus_pops < self.depth)
        accepted_pop = self.pop & (pushes_minus_pops > 0)
        m.d.sync += pushes_minus_pops.eq(pushes_minus_pops + accepted_push - accepted_pop)
        m.d.comb += [
            Assert(dut.count == pushes_minus_pops, "count equals accepted pushes minus pops"),
            Assert(pushes_minus_pops >= 0, "no underflow"),
            *dut.invariants(),
        ]
        return m


@pytest.mark.parametrize("depth", [1, 3, 8, 256])
def test_formal_never_overflows_or_underflows(depth, tmp_path):
    prove(TokenQueueSpec(depth), workdir=tmp_path, name=f"token_queue_{depth}", depth=4)


class OverflowingQueue(TokenQueue):
    """A broken queue that loses its tokens on a push when full: the proof must catch it."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        with m.If(self.push & ~self.push_ready & ~self.pop):
            m.d.sync += self.count.eq(0)
        return m


def test_formal_catches_a_broken_queue(tmp_path):
    with pytest.raises(FormalError, match="FAIL|failed"):
        prove(TokenQueueSpec(2, OverflowingQueue), workdir=tmp_path, name="broken", depth=4)


def test_bad_depth():
    with pytest.raises(TypeError, match="depth must be a positive integer, not 0"):
        TokenQueue(depth=0)
