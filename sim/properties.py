"""The hardware's safety properties, each a formal harness proved by k-induction.

A harness wraps components with every input free (the environment may do
anything) except what an assumption says it promises, and asserts its
property in every cycle. :func:`formal_properties` lists the four for a
config; :func:`prove_property` proves one (SymbiYosys, see
:mod:`tilewright.sim.formal`):

``dma_bounds``
    Every burst the DMA asks for lies inside the transfer's rows (rounded
    out to bus words) and crosses no 4 KiB boundary. The property and the
    invariants that make it inductive are the burst splitters' own, under
    ``platform == "formal"`` (:mod:`tilewright.hw.dma`); the address channel
    registers exactly the bursts the splitter produces.
``axi_stable``
    The DMA's AXI valid and payload stay unchanged until ready (AR, AW, W); with the writer's own
    assertions under ``platform == "formal"``: no more responses due than bursts may be outstanding,
    and its ``busy`` (a register set a cycle ahead) never low while anything is left to do.
``arbiter_fair``
    The read arbiter grants one requester at a time, passes its request
    through unchanged, and a waiting requester is granted before ``count``
    requests of the others go by.
``tokens_pushed_first``
    A stream's sequencer never pops a dependency token that has not been
    pushed.

Each is proved in seconds at the config's own bus width, burst logic and the
accelerator's 32-bit addresses, and each fails on a deliberately broken
variant (``tests/hw/test_properties.py``).
"""

import functools
from dataclasses import dataclass

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert, Assume
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.hw.arbiter import ReadArbiter
from tilewright.hw.dma import RowReader, RowWriter, _BurstSplitter, _LeanBurstSplitter
from tilewright.hw.sequencer import Sequencer
from tilewright.hw.token_queue import TokenQueue
from tilewright.hw.top import AXI_ADDR_WIDTH as ADDR_WIDTH, READ_CLIENTS, read_first

from .formal import prove

__all__ = ["FormalProperty", "formal_properties", "prove_property", "AxiStability", "ArbiterFairness",
           "TokensPushedFirst"]


def _holds_until_ready(m, name, valid, ready, payload, *, check=Assert):
    """AXI's rule for one channel: once ``valid`` is up without ``ready``, it and ``payload`` hold.

    ``check`` is :class:`Assert` for a channel the design drives, :class:`Assume` for one its
    environment drives.
    """
    payload = Cat(*payload)
    waiting = Signal(name=f"{name}_waiting")
    past = Signal(len(payload), name=f"{name}_past")
    m.d.sync += [waiting.eq(valid & ~ready), past.eq(payload)]
    with m.If(waiting):
        m.d.comb += [check(valid, f"{name}: valid holds until ready"),
                     check(payload == past, f"{name}: payload holds until ready")]


class _Harness(wiring.Component):
    """A component whose ports are those of the parts it checks, so every input of every part is free."""

    def __init__(self, **parts):
        self.parts = parts
        super().__init__({name: Out(part.signature) for name, part in parts.items()})

    def elaborate(self, platform):
        m = Module()
        for name, part in self.parts.items():
            m.submodules[name] = part
            wiring.connect(m, wiring.flipped(getattr(self, name)), part)
        self.check(m)
        return m

    def check(self, m):
        raise NotImplementedError


class AxiStability(_Harness):
    """The DMA's ``"reader"`` (AR) or ``"writer"`` (AW and W): valid and payload hold until ready."""

    def __init__(self, part, *, data_width, elem_bytes, lean, timing_registers=True, addr_width=ADDR_WIDTH):
        options = {"lean": lean, "timing_registers": timing_registers}
        if part == "reader":
            super().__init__(reader=RowReader(addr_width=addr_width, data_width=data_width, **options))
        else:
            super().__init__(writer=RowWriter(addr_width=addr_width, data_width=data_width, elem_bytes=elem_bytes,
                                              **options))

    def check(self, m):
        if "reader" in self.parts:
            r = self.parts["reader"].axi
            _holds_until_ready(m, "AR", r.arvalid, r.arready, (r.arid, r.araddr, r.arlen, r.arsize, r.arburst))
        else:
            w = self.parts["writer"].axi
            _holds_until_ready(m, "AW", w.awvalid, w.awready, (w.awid, w.awaddr, w.awlen, w.awsize, w.awburst))
            _holds_until_ready(m, "W", w.wvalid, w.wready, (w.wdata, w.wstrb, w.wlast))
            # (without its timing registers W sends the element offered: W holds as the elements do)
            elements = self.parts["writer"].elements
            _holds_until_ready(m, "elements", elements.valid, elements.ready, (elements.payload,), check=Assume)


class ArbiterFairness(_Harness):
    """The read arbiter between ``count`` requesters that keep AXI's rules and a bus that answers when it likes.

    A ghost counter per requester counts the others' requests accepted while
    it waits; with the rotation steps the grant still needs to reach it, that
    never exceeds ``count - 1``, which bounds the wait and makes the bound inductive.
    With a ``first`` client, that one is granted at the first choice after it
    asks, and the others are bounded the same way among themselves (the
    first's grants not counted, and the rotation read from the arbiter's turn).
    """

    def __init__(self, *, count=len(READ_CLIENTS), addr_width=ADDR_WIDTH, data_width=32, arbiter=ReadArbiter,
                 first=None):
        self.count, self.first = count, first
        super().__init__(arbiter=arbiter(count=count, addr_width=addr_width, data_width=data_width, first=first))

    def check(self, m):
        arb = self.parts["arbiter"]
        n, bus, clients = self.count, arb.bus, arb.clients()
        accepted = bus.arvalid & bus.arready
        _holds_until_ready(m, "bus.AR", bus.arvalid, bus.arready, (bus.arid, bus.araddr, bus.arlen, bus.arsize,
                                                                   bus.arburst))
        for k, c in enumerate(clients):
            _holds_until_ready(m, f"c{k}.AR", c.arvalid, c.arready, (c.araddr, c.arlen, c.arsize, c.arburst),
                               check=Assume)
            others = [d.arready for j, d in enumerate(clients) if j != k]
            with m.If(bus.arid == k):
                m.d.comb += Assert((bus.arvalid == c.arvalid) & (bus.araddr == c.araddr) & (bus.arlen == c.arlen)
                                   & (c.arready == bus.arready), "the granted request passes through unchanged")
            with m.Else():
                m.d.comb += Assert(~c.arready, "only the granted requester sees ready")
            m.d.comb += Assert(~(c.arready & Cat(*others).any()), "one requester granted at a time")

            # Requests of the others accepted while this one waits (with a `first` client, of the others
            # but `first`, which goes ahead of everyone and is counted only while it waits itself).
            passed_over = Signal(range(2 * n), name=f"c{k}_passed_over")
            counted = accepted if self.first is None or k == self.first else accepted & (bus.arid != self.first)
            with m.If(~c.arvalid | c.arready):
                m.d.sync += passed_over.eq(0)
            with m.Elif(counted):
                m.d.sync += passed_over.eq(passed_over + 1)
            if k == self.first:
                with m.If(c.arvalid):
                    m.d.comb += Assert((passed_over == 0) | ((passed_over == 1) & (bus.arid == k)),
                                       f"requester {k} goes first")
                continue
            if self.first is None:
                to_go = Mux(bus.arid <= k, k - bus.arid, k + n - bus.arid)
                with m.If(c.arvalid):
                    m.d.comb += Assert(passed_over + to_go <= n - 1, f"requester {k} is granted before {n} others")
                continue
            # With `first`: the others take turns. `to_go` counts those (`first` takes no turn) from the one
            # last served in turn to this one, all of them if this one was: it asks afresh; `pending`, a
            # request in turn on the bus, which will be accepted without the turn moving.
            turn, others_in_turn = arb.turn, n - 1
            steps = Mux(turn <= k, k - turn, k + n - turn)
            to_first = Mux(turn <= self.first, self.first - turn, self.first + n - turn)
            to_go = Mux(turn == k, Mux(bus.arid == k, 0, others_in_turn),
                        steps - ((to_first != 0) & (to_first < steps)))
            pending = bus.arvalid & (bus.arid == turn) & (turn != k)
            with m.If(c.arvalid):
                m.d.comb += Assert(passed_over + to_go + pending <= others_in_turn,
                                   f"requester {k} is granted before {others_in_turn} others but the first")


class TokensPushedFirst(wiring.Component):
    """A sequencer fed by two token queues (from its previous and next stream) that others fill freely.

    A ghost count per queue of the tokens pushed minus those the sequencer
    popped must never go below zero, and equals what the queue holds. The
    instructions (but for a stream's one rule: an instruction offered stays
    until it is taken), the executor and the queues the sequencer pushes into
    are free, but for a queue's one rule: it loses room only to a push.
    """

    def __init__(self, *, cfg, depth=2, sequencer=Sequencer):
        self.depth = depth
        self.seq = sequencer(insn_layout=isa.instruction_layouts(cfg)["header"])
        super().__init__({"cmd": In(self.seq.cmd.signature.flip()), "done": In(1), "error": In(isa.ERROR_BITS),
                          "halt": In(1), "supply": In(2), "room": In(2)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.seq = seq = self.seq
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        m.d.comb += [seq.done.eq(self.done), seq.error.eq(self.error), seq.halt.eq(self.halt)]
        offered = Signal()
        last = Signal.like(self.cmd.payload)
        m.d.sync += [offered.eq(self.cmd.valid & ~self.cmd.ready), last.eq(self.cmd.payload)]
        with m.If(offered):
            m.d.comb += Assume(self.cmd.valid & (self.cmd.payload.as_value() == last.as_value()))
        for k, side in enumerate(("prev", "next")):
            port = getattr(seq, side)
            m.submodules[side] = queue = TokenQueue(depth=self.depth)
            m.d.comb += [queue.push.eq(self.supply[k]), queue.pop.eq(port.pop), port.pop_ready.eq(queue.pop_ready),
                         port.push_ready.eq(self.room[k])]
            had_room, pushed_into = Signal(name=f"{side}_had_room"), Signal(name=f"{side}_pushed_into")
            m.d.sync += [had_room.eq(self.room[k]), pushed_into.eq(port.push)]
            with m.If(had_room & ~pushed_into):
                m.d.comb += Assume(self.room[k])
            held = Signal(range(-1, self.depth + 2), name=f"{side}_tokens")
            pushed = self.supply[k] & (held < self.depth)
            m.d.sync += held.eq(held + pushed - port.pop)
            m.d.comb += [Assert(~port.pop | (held > 0), f"{side}: no token popped before it is pushed"),
                         Assert(held >= 0), Assert(held == queue.count),
                         *queue.invariants()]       # (proven in tests/hw/test_token_queue.py)
        return m


@dataclass(frozen=True)
class FormalProperty:
    """One property of one config: its name, what it says, and how to build its harness."""
    name: str
    says: str
    harnesses: tuple         # ((label, design factory), ...): the property holds when every one is proved


def formal_properties(cfg):
    """The four properties for ``cfg`` (its bus width, burst logic and store element size)."""
    bus_bytes = cfg.dram_bus_width // 8
    splitter = _LeanBurstSplitter if cfg.lean else _BurstSplitter
    out_bytes = cfg.elem_bytes("out")
    return [
        FormalProperty("dma_bounds", "the DMA never leaves a transfer's rows nor crosses 4 KiB in a burst",
                       (("splitter", lambda: splitter(addr_width=ADDR_WIDTH, bus_bytes=bus_bytes)),)),
        FormalProperty("axi_stable", "AXI valid and payload hold until ready (AR, AW, W)",
                       tuple((part, functools.partial(AxiStability, part, data_width=cfg.dram_bus_width,
                                                      elem_bytes=out_bytes, lean=cfg.lean,
                                                      timing_registers=not cfg.slow_clock))
                             for part in ("reader", "writer"))),
        FormalProperty("arbiter_fair", "the read arbiter grants one at a time, the compute stream's loads "
                       "first, and serves the others in turn",
                       (("arbiter", lambda: ArbiterFairness(data_width=cfg.dram_bus_width, first=read_first(cfg))),)),
        FormalProperty("tokens_pushed_first", "no stream pops a dependency token before it is pushed",
                       (("sequencer", lambda: TokensPushedFirst(cfg=cfg)),)),
    ]


def prove_property(prop, *, workdir, depth=3, mode="prove"):
    """Prove every harness of ``prop`` by k-induction (or check it to ``depth`` from reset, ``mode="bmc"``).

    Raises :class:`~tilewright.sim.formal.FormalError` naming the failed assertions.
    """
    for label, design in prop.harnesses:
        prove(design(), workdir=f"{workdir}/{prop.name}", name=f"{prop.name}_{label}", depth=depth, mode=mode)
