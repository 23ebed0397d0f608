"""HeadRegisteredFIFO against a deque, in each of its builds (LUT RAM sized, block RAM sized, and the Gowin's
first-word fall-through)."""

import collections
import random

import pytest
from amaranth import Cat
from amaranth.sim import Simulator

from tilewright.hw.fifo import LUTRAM_DEPTH, HeadRegisteredFIFO


def _simulate(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


def _decode(word):
    """Some function of an entry for ``r_decoded`` to hold: its two bytes XORed, and whether it is odd."""
    return Cat(word[:8] ^ word[8:16], word[0])


def _decoded(value):
    return ((value & 0xFF) ^ (value >> 8)) | (value & 1) << 8


@pytest.mark.parametrize("registered_head,lutram", [(True, True), (True, False), (False, None)],
                         ids=["registered-lutram", "registered", "fall-through"])
@pytest.mark.parametrize("depth", [2, 3, 17, LUTRAM_DEPTH + 1])
def test_matches_a_deque(depth, registered_head, lutram):
    """The entries come out in order, and ``r_decoded`` is the head's decoding (from the register behind
    the head where a LUT RAM is read asynchronously and the queue is 3 or more deep, or after the head in
    the other builds)."""
    dut = HeadRegisteredFIFO(width=16, depth=depth, registered_head=registered_head, lutram=lutram,
                             decode=_decode, decoded_width=9)
    _check_against_deque(dut, depth, registered_head)


@pytest.mark.parametrize("lutram", [True, False], ids=["lutram", "block-ram-read"])
@pytest.mark.parametrize("depth", [2, 17, LUTRAM_DEPTH + 1])
def test_head_loaded_in_slices_on_copies_of_the_pop(depth, lutram):
    """With ``pop_copies`` the head (a register after LUT RAM, or after the block RAM's ``ahead``) is loaded
    in slices, each on its copy of ``r_en``: driven with copies equal to it, the queue is as without."""
    dut = HeadRegisteredFIFO(width=16, depth=depth, registered_head=True, lutram=lutram, pop_copies=3)
    _check_against_deque(dut, depth, True, copies=3)


def _check_against_deque(dut, depth, registered_head, *, copies=0):
    """1,500 cycles of random writes and pops (``r_en_copies`` following ``r_en``) against a deque."""
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
            if copies:
                ctx.set(dut.r_en_copies, (1 << copies) - 1 if r_en else 0)
            w_rdy, r_rdy, r_data, level = ctx.get(dut.w_rdy), ctx.get(dut.r_rdy), ctx.get(dut.r_data), ctx.get(dut.level)
            assert level == len(model) and level <= depth
            assert ctx.get(dut.behind) == (level > r_rdy)
            # (the registered builds and the block RAM's, which frees an entry as it moves ahead, may lag)
            assert w_rdy == (len(model) < depth) or registered_head or depth > LUTRAM_DEPTH
            assert not w_rdy or len(model) < depth     # never accepts beyond its depth
            if r_rdy:
                assert r_data == model[0]
                assert dut.decode is None or ctx.get(dut.r_decoded) == _decoded(r_data)
            if r_en and r_rdy:
                seen.append(model.popleft())
            if w_en and w_rdy:
                model.append(value)
                value += 1
            await ctx.tick()
        assert len(seen) > 300

    _simulate(dut, bench)
    assert seen == list(range(len(seen)))


@pytest.mark.parametrize("registered_head", [True, False], ids=["registered", "fall-through"])
@pytest.mark.parametrize("lanes", [2, 4])
def test_entries_written_a_lane_at_a_time(lanes, registered_head):
    """Each w_en writes the next lane (lowest first); an entry enters with its last lane, and only then."""
    lane_bits = 8
    dut = HeadRegisteredFIFO(width=lanes * lane_bits, depth=5, registered_head=registered_head, lanes=lanes)
    rng = random.Random(lanes)
    model, seen = collections.deque(), []

    async def bench(ctx):
        entry, lane = rng.getrandbits(lanes * lane_bits), 0
        for _ in range(2000):
            w_en, r_en = rng.random() < 0.7, rng.random() < 0.25
            ctx.set(dut.w_data, (entry >> (lane * lane_bits)) & 0xFF)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.r_en, r_en)
            w_rdy, r_rdy = ctx.get(dut.w_rdy), ctx.get(dut.r_rdy)
            assert ctx.get(dut.level) == len(model)
            assert ctx.get(dut.behind) == (len(model) > r_rdy)
            assert ctx.get(dut.written) == (w_en and w_rdy and lane == lanes - 1)
            if r_rdy:
                assert ctx.get(dut.r_data) == model[0]
            if r_en and r_rdy:
                seen.append(model.popleft())
            if w_en and w_rdy:
                lane += 1
                if lane == lanes:
                    model.append(entry)
                    entry, lane = rng.getrandbits(lanes * lane_bits), 0
            await ctx.tick()
        assert len(seen) > 100

    _simulate(dut, bench)
