"""ReadArbiter: several AXI read managers sharing one bus, against an interleaving subordinate.

Each client is a testbench playing an AXI read manager; the subordinate is
:class:`~tests.hw.test_dma.AxiSubordinate` with ``interleave=True`` (beats of
different IDs interleaved out of order, in order per ID), which also checks
the shared bus follows AXI (AR held unchanged until ARREADY, legal bursts). A
monitor checks the routing combinationally at every clock edge; each client
compares what it received with the model's memory.
"""

import random
from collections import deque
from itertools import pairwise

import pytest
from amaranth.sim import Simulator

from tilewright.hw.arbiter import ReadArbiter

from .test_dma import MEM_BYTES, AxiSubordinate, EdgeCounter

ADDR_WIDTH, DATA_WIDTH = 32, 32
BUS_BYTES = DATA_WIDTH // 8


def random_reads(rng, count):
    """``count`` legal INCR reads ``(addr, beats)``: aligned, 1–16 beats, within one 4 KiB page."""
    reads = []
    while len(reads) < count:
        beats = rng.randint(1, 16)
        addr = BUS_BYTES * rng.randrange(MEM_BYTES // BUS_BYTES - beats)
        if addr // 4096 == (addr + beats * BUS_BYTES - 1) // 4096:
            reads.append((addr, beats))
    return reads


def expected_beats(memory, reads):
    """``(rdata, rlast)`` of every beat of ``reads``, in order, sliced from ``memory``."""
    return [(int.from_bytes(memory[addr + i * BUS_BYTES:addr + (i + 1) * BUS_BYTES], "little"), i == beats - 1)
            for addr, beats in reads for i in range(beats)]


class Client:
    """An AXI read manager on one arbiter port.

    Issues ``reads`` in order, one AR at a time: after a random gap (``issue``
    is the chance per cycle of raising ARVALID) it holds ARVALID and the
    address until ARREADY. Takes R beats with RREADY high at random
    (``ready``), and low throughout the cycles in ``stall``. Records the edge
    at which each request was first seen valid and the edge of its handshake.
    """

    def __init__(self, port, reads, rng, *, issue=0.5, ready=0.7, stall=range(0)):
        self.port, self.reads, self.rng = port, list(reads), rng
        self.issue, self.ready, self.stall = issue, ready, stall
        self.received = []          # (rdata, rlast) per beat
        self.waits = []             # (first edge valid, handshake edge) per request

    def testbench(self):
        """An async function for ``Simulator.add_testbench``."""
        async def testbench(ctx):
            await self.run(ctx)
        return testbench

    async def run(self, ctx, *, deadline=20_000):
        port, rng, clock = self.port, self.rng, EdgeCounter()
        beats_due = sum(beats for _, beats in self.reads)
        to_issue = deque(self.reads)
        current, first_edge = None, None
        ctx.set(port.arsize, BUS_BYTES.bit_length() - 1)
        ctx.set(port.arburst, 1)
        while to_issue or current or len(self.received) < beats_due:
            assert clock.edge < deadline, \
                f"client stuck: {len(self.received)}/{beats_due} beats, {len(to_issue)} reads not issued"
            if current is None and to_issue and rng.random() < self.issue:
                current, first_edge = to_issue.popleft(), None
                ctx.set(port.araddr, current[0])
                ctx.set(port.arlen, current[1] - 1)
            ctx.set(port.arvalid, current is not None)
            rready = clock.edge + 1 not in self.stall and rng.random() < self.ready
            ctx.set(port.rready, rready)
            arready, rvalid, rdata, rlast, rresp = await clock.tick(
                ctx, port.arready, port.rvalid, port.rdata, port.rlast, port.rresp)
            if current is not None:
                first_edge = clock.edge if first_edge is None else first_edge
                if arready:
                    self.waits.append((first_edge, clock.edge))
                    current = None
            if rvalid and rready:
                assert rresp == 0
                self.received.append((rdata, rlast))
        ctx.set(port.arvalid, 0)
        ctx.set(port.rready, 0)


class RoutingMonitor:
    """Checks, at every clock edge, that the shared bus carries exactly one client's AR, tagged
    with its index; that a client sees its AR taken exactly when the bus takes it; and that each
    R beat reaches only the client named by RID, whose RREADY alone drives the bus's.

    ``blocked[k]`` counts the edges at which a beat for client ``k`` waited for its RREADY."""

    def __init__(self, dut):
        self.dut = dut
        self.blocked = [0] * dut.count

    async def process(self, ctx):
        clients, bus = self.dut.clients(), self.dut.bus
        signals = [bus.arvalid, bus.arid, bus.araddr, bus.arlen, bus.arready,
                   bus.rvalid, bus.rid, bus.rdata, bus.rlast, bus.rready]
        for c in clients:
            signals += [c.arvalid, c.araddr, c.arlen, c.arready, c.rvalid, c.rdata, c.rlast, c.rready]
        while True:
            _, _, *values = await ctx.tick().sample(*signals)
            arvalid, arid, araddr, arlen, arready, rvalid, rid, rdata, rlast, rready = values[:10]
            views = [values[10 + 8 * k:18 + 8 * k] for k in range(len(clients))]
            if arvalid:
                assert arid < len(clients), f"ARID {arid} names no client"
                c_arvalid, c_araddr, c_arlen, *_ = views[arid]
                assert (c_arvalid, c_araddr, c_arlen) == (1, araddr, arlen), \
                    f"bus AR (id {arid}, {araddr:#x}, len {arlen}) is not client {arid}'s request"
            for k, (c_arvalid, _, _, c_arready, c_rvalid, c_rdata, c_rlast, c_rready) in enumerate(views):
                taken = bool(arvalid and arready and arid == k)
                assert bool(c_arvalid and c_arready) == taken, \
                    f"client {k} AR handshake {bool(c_arvalid and c_arready)}, bus handshake for it {taken}"
                assert c_rvalid == (rvalid and rid == k), f"client {k} sees RVALID={c_rvalid} for RID {rid}"
                if c_rvalid:
                    assert (c_rdata, c_rlast) == (rdata, rlast)
                    assert rready == c_rready, f"bus RREADY={rready} but client {k} (RID) has {c_rready}"
            if rvalid and not rready:
                self.blocked[rid] += 1


def simulate(clients_reads, *, seed, model_ready=0.7, model_valid=0.7, issue=0.5, ready=0.7, stalls=None,
             first=None, watch=None):
    """Runs one client per entry of ``clients_reads`` (client ``first`` served first); returns (memory,
    model, monitor, clients). ``watch(ctx, dut)`` is one more async process."""
    rng = random.Random(seed)
    memory = bytearray(rng.randbytes(MEM_BYTES))
    dut = ReadArbiter(count=len(clients_reads), addr_width=ADDR_WIDTH, data_width=DATA_WIDTH, first=first)
    model = AxiSubordinate(memory, bus_bytes=BUS_BYTES, rng=random.Random(seed + 1), ready=model_ready,
                           valid=model_valid, interleave=True)
    stalls = stalls or {}
    clients = [Client(port, reads, random.Random(seed + 2 + k), issue=issue, ready=ready,
                      stall=stalls.get(k, range(0)))
               for k, (port, reads) in enumerate(zip(dut.clients(), clients_reads))]

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_process(model.read_process(dut.bus))
    monitor = RoutingMonitor(dut)
    sim.add_process(monitor.process)
    for client in clients:
        sim.add_testbench(client.testbench())
    if watch is not None:
        async def process(ctx):
            await watch(ctx, dut)
        sim.add_process(process)
    sim.run()
    return memory, model, monitor, clients


def check_data(memory, clients):
    for k, client in enumerate(clients):
        want = expected_beats(memory, client.reads)
        assert len(client.received) == len(want), f"client {k}: {len(client.received)} beats, expected {len(want)}"
        for i, (got, expected) in enumerate(zip(client.received, want)):
            assert got == expected, f"client {k} beat {i}: (rdata, rlast) {got}, expected {expected}"


def interleavings(model):
    """How often the next R beat belonged to another ID while a burst was unfinished, and how
    often a burst finished before an older burst of another ID."""
    beats = model.r_beats
    switches = sum(1 for (_, a, last), (_, b, _) in pairwise(beats) if a != b and not last)
    bursts = model.requests
    overtaken = sum(1 for i, older in enumerate(bursts) for newer in bursts[i + 1:]
                    if newer.id != older.id and newer.finished < older.finished)
    return switches, overtaken


@pytest.mark.parametrize("count", [3, 4, 5, 6])
@pytest.mark.parametrize("model_ready", [0.3, 0.9])
def test_each_client_gets_its_own_data(count, model_ready):
    """Random reads from every client, responses interleaved across IDs: each client receives
    exactly its own beats, in order; the model sees the AR held while ARREADY is low."""
    rng = random.Random(count * 10 + int(model_ready * 10))
    reads = [random_reads(rng, rng.randint(3, 6)) for _ in range(count)]
    memory, model, _, clients = simulate(reads, seed=rng.randrange(1 << 30), model_ready=model_ready)
    check_data(memory, clients)
    # The stimulus did what it is for: ARs waited, beats interleaved, bursts were overtaken.
    switches, overtaken = interleavings(model)
    assert model.channels["AR"].waits > 0 and switches > 0 and overtaken > 0


@pytest.mark.parametrize("count", [3, 6])
def test_stalled_client_does_not_disturb_others(count):
    """Client 0 holds RREADY low for 300 cycles, client 1 for another stretch: the bus waits
    on the presented beat, but nobody receives another's data and everything completes."""
    rng = random.Random(count)
    reads = [random_reads(rng, 6) for _ in range(count)]
    memory, _, monitor, clients = simulate(reads, seed=count, issue=0.9,
                                           stalls={0: range(300), 1: range(100, 250)})
    check_data(memory, clients)
    assert monitor.blocked[0] > 100 and monitor.blocked[1] > 10


@pytest.mark.parametrize("count", [3, 4, 5, 6])
def test_no_starvation(count):
    """Every client requests continuously: each request is granted after at most ``count - 1``
    grants to other clients (round robin), counted from the edge it was first presented."""
    rng = random.Random(100 + count)
    reads = [random_reads(rng, 8) for _ in range(count)]
    _, model, _, clients = simulate(reads, seed=count, issue=1, ready=1, model_ready=0.5, model_valid=1)
    grants = [(burst.edge, burst.id) for burst in model.requests]
    for k, client in enumerate(clients):
        assert len(client.waits) == len(client.reads)
        for first, granted in client.waits:
            others = sum(1 for edge, id in grants if first <= edge < granted and id != k)
            assert others <= count - 1, \
                f"client {k} waited from edge {first} to {granted} while others got {others} grants"


@pytest.mark.parametrize("first", [0, 2])
def test_first_client_is_served_next(first):
    """A ``first`` client (the compute stream's loader) is granted at the first choice after it asks:
    no other client's request reaches the bus newly while it was waiting; the others still share the
    rest round robin, and everyone gets their own data."""
    overtaken = []              # edges at which another client's AR newly reached the bus while `first` waited
    served = [0]

    async def watch(ctx, dut):
        clients, bus = dut.clients(), dut.bus
        before = None
        async for _, _, arvalid, arid, arready, waiting in ctx.tick().sample(
                bus.arvalid, bus.arid, bus.arready, clients[first].arvalid):
            if arvalid and arid == first and arready:
                served[0] += 1
            if before is not None:
                b_arvalid, b_arid, b_arready, b_waiting = before
                held = b_arvalid and not b_arready
                newly = arvalid and not (b_arvalid and b_arid == arid and not b_arready)
                if newly and arid != first and b_waiting and not held and not (b_arvalid and b_arid == first):
                    overtaken.append(arid)
            before = (arvalid, arid, arready, waiting)

    rng = random.Random(11 + first)
    reads = [random_reads(rng, 30) for _ in range(3)]
    memory, _, _, clients = simulate(reads, seed=5, issue=0.6, ready=1, model_ready=0.4, model_valid=1,
                                     first=first, watch=watch)
    check_data(memory, clients)
    assert served[0] == 30 and not overtaken, overtaken
