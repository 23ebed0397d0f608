"""LoadShare: two streams' LOADs through one loader, in turn, with each client's own instruction.

On the small FPGAs the loader reads the served client's instruction through a multiplexer; elsewhere
from a register loaded at the grant. Both forms must start the same LOADs on the same cycles with
the same instruction held until done.
"""
import random

import pytest
from amaranth.sim import Simulator

import tilewright.hw.padded_load as padded_load
from tilewright.config import load_config
from tilewright.hw.padded_load import LoadShare

CFG = load_config("slim")
LOADS_PER_CLIENT = 12


def run_share(seed):
    """Both clients issue LOADs (random instruction bits, random gaps) to a loader that takes a random
    number of cycles each. Returns the loader's starts as (cycle, instruction bits), the clients' dones
    as (cycle, client) and what each client sent, in order."""
    rng = random.Random(seed)
    dut = LoadShare(CFG)
    width = len(dut.loader.insn.as_value())
    sent = {k: [rng.getrandbits(width) for _ in range(LOADS_PER_CLIENT)] for k in range(2)}
    gaps = {k: [rng.choice([0, 0, 1, 3, 7]) for _ in range(LOADS_PER_CLIENT)] for k in range(2)}
    latencies = [rng.randint(1, 6) for _ in range(2 * LOADS_PER_CLIENT)]
    starts, dones = [], []

    async def testbench(ctx):
        # One loop per cycle: set this cycle's inputs, read the settled outputs, then step.
        ports = [dut.client_0, dut.client_1]
        nxt, wait, waiting = [0, 0], [gaps[0][0], gaps[1][0]], [False, False]
        busy, left, held = False, 0, None        # the loader: running, cycles to done, its insn
        for cycle in range(2000):
            ctx.set(dut.loader.done, busy and left == 0)
            for k, port in enumerate(ports):
                go = not waiting[k] and nxt[k] < LOADS_PER_CLIENT and wait[k] == 0
                if go:      # (held from start until done, as LoadRequest says)
                    ctx.set(port.insn.as_value(), sent[k][nxt[k]])
                ctx.set(port.start, go)
                if go:
                    waiting[k] = True
                elif not waiting[k]:
                    wait[k] -= 1
                elif ctx.get(port.done):
                    dones.append((cycle, k))
                    waiting[k], nxt[k] = False, nxt[k] + 1
                    wait[k] = gaps[k][nxt[k]] if nxt[k] < LOADS_PER_CLIENT else 0
            if busy:
                assert ctx.get(dut.loader.insn.as_value()) == held, "the instruction changed before done"
                busy, left = left > 0, left - 1
            elif ctx.get(dut.loader.start):
                held = ctx.get(dut.loader.insn.as_value())
                starts.append((cycle, held))
                busy, left = True, latencies[len(starts) - 1]
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(testbench)
    sim.run()
    return starts, dones, sent


@pytest.mark.parametrize("seed", range(3))
def test_both_forms_start_the_same_loads_with_each_clients_insn(seed, monkeypatch):
    runs = {}
    for small in (False, True):
        monkeypatch.setattr(padded_load, "is_small_fpga", lambda platform: small)
        runs[small] = run_share(seed)
    starts, dones, sent = runs[False]
    assert len(starts) == 2 * LOADS_PER_CLIENT and len(dones) == 2 * LOADS_PER_CLIENT
    # Each LOAD reaches the loader with its client's instruction, each client's in order, and its done
    # goes back to that client.
    served = [k for _, k in dones]
    for k in range(2):
        assert [insn for (_, insn), owner in zip(starts, served) if owner == k] == sent[k]
    assert runs[True] == runs[False]
