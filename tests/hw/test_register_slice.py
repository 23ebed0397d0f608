"""SkidBuffer in the Amaranth simulator: every beat through once and in order under random stalls, one beat
per cycle when nothing stalls, and no combinational path from one side's signals to the other's."""

import random

import pytest
from amaranth.sim import Simulator

from tilewright.hw.register_slice import SkidBuffer

WIDTH = 12


def run_skid(*, seed, beats, valid_rate, ready_rate):
    """Offer ``beats`` random payloads (the source holds each until taken) to a sink that is ready at
    random; returns (sent, received, cycles, whether the outputs ever moved within a cycle)."""
    dut = SkidBuffer(WIDTH)
    rng = random.Random(seed)
    sent = [rng.getrandbits(WIDTH) for _ in range(beats)]
    received, result = [], {"combinational": False, "cycles": 0}

    async def bench(ctx):
        k = cycles = 0
        offering = False
        while len(received) < beats:
            if not offering and k < beats and rng.random() < valid_rate:
                offering = True
            ctx.set(dut.i_valid, offering)
            ctx.set(dut.i_payload, sent[k] if offering else 0)
            before = (ctx.get(dut.i_ready), ctx.get(dut.o_valid), ctx.get(dut.o_payload))
            ready = rng.random() < ready_rate
            ctx.set(dut.o_ready, ready)
            await ctx.delay(1e-9)
            # Inputs changed this cycle; registered outputs must not have.
            if (ctx.get(dut.i_ready), ctx.get(dut.o_valid), ctx.get(dut.o_payload)) != before:
                result["combinational"] = True
            if ready and ctx.get(dut.o_valid):
                received.append(ctx.get(dut.o_payload))
            if offering and ctx.get(dut.i_ready):
                offering, k = False, k + 1
            await ctx.tick()
            cycles += 1
            assert cycles < 20 * beats + 10, "the buffer stopped moving"
        result["cycles"] = cycles

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return sent, received, result["cycles"], result["combinational"]


@pytest.mark.parametrize("valid_rate,ready_rate", [(1.0, 0.3), (0.5, 0.5), (0.3, 1.0), (1.0, 0.8)])
def test_every_beat_arrives_once_in_order(valid_rate, ready_rate):
    sent, received, _, combinational = run_skid(seed=int(10 * valid_rate + ready_rate * 100), beats=300,
                                                valid_rate=valid_rate, ready_rate=ready_rate)
    assert received == sent
    assert not combinational


def test_one_beat_per_cycle_without_stalls():
    """An always-valid source into an always-ready sink: n beats in n cycles plus the one of latency."""
    for beats in (1, 50):
        sent, received, cycles, _ = run_skid(seed=beats, beats=beats, valid_rate=1.0, ready_rate=1.0)
        assert received == sent and cycles == beats + 1
