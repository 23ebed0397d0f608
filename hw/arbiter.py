"""Sharing one AXI4 read channel among several readers."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .axi import AxiReadSignature

__all__ = ["ReadArbiter", "next_in_turn"]


def next_in_turn(requests, last):
    """The requester to serve next: the first one set in ``requests`` after ``last`` round the circle
    (``last`` itself when it is the only one; an index of ``len(requests)`` bits)."""
    count = len(requests)
    order = [(last + 1 + k) % count for k in range(count)]
    choice = order[-1]
    for candidate in reversed(order[:-1]):
        choice = Mux(requests.bit_select(candidate, 1), candidate, choice)
    return choice


class ReadArbiter(wiring.Component):
    """Round-robin AR arbitration, or one client (``first``) served before the others; R beats routed
    back by ID.

    The compute stream's loader is ``first`` in the accelerator: its LOADs (micro-ops, a tile's bias)
    are small, and the compute stream waits on them; memory answers in order, so each would otherwise
    queue behind the load stream's transfers.

    Client ``k`` gets ARID ``k``. AXI keeps responses of one ID in order, and
    every client accepts its own beats without waiting on another client, so
    interleaved responses can never deadlock. A granted request stays
    selected until the address handshake (AR must not change while valid).

    Members
    -------
    c0 … c{n-1} : In(AxiReadSignature)
        The clients' read channels (ID width 1, ID ignored).
    bus : Out(AxiReadSignature)
        The shared channel, ID width ``max(1, log2 n)``.
    """

    @staticmethod
    def id_bits(count):
        """ARID width the shared channel of ``count`` clients needs."""
        return max(1, (count - 1).bit_length())

    def __init__(self, *, count, addr_width, data_width, first=None):
        self.count, self.first = count, first
        self.id_width = self.id_bits(count)
        #: The client last served in turn (``first`` goes ahead without taking a turn); the formal
        #: harness reads it.
        self.turn = Signal(range(count), init=0 if first is None else (first + 1) % count)
        members = {f"c{k}": In(AxiReadSignature(addr_width=addr_width, data_width=data_width))
                   for k in range(count)}
        members["bus"] = Out(AxiReadSignature(addr_width=addr_width, data_width=data_width,
                                              id_width=self.id_width))
        super().__init__(members)

    def clients(self):
        return [getattr(self, f"c{k}") for k in range(self.count)]

    @staticmethod
    def _holds(bus):
        """The grant stays while its request waits: AR must not change while valid."""
        return bus.arvalid & ~bus.arready

    def _after(self, grant, k):
        """The client ``k`` places after ``grant`` in the rotation."""
        return Mux(grant + k >= self.count, grant + k - self.count, grant + k)

    def elaborate(self, platform):
        m = Module()
        clients, bus = self.clients(), self.bus
        grant = Signal(range(self.count))
        # Hold the grant while its request waits; otherwise move to the next requester.
        requests = Signal(self.count)
        m.d.comb += requests.eq(Cat(c.arvalid for c in clients))
        with m.If(~self._holds(bus)):
            # The nearest requester after the one last served in turn wins (later m.If overrides earlier) ...
            for k in reversed(range(1, self.count + 1)):
                candidate = Signal(range(self.count), name=f"candidate_{k}")
                m.d.comb += candidate.eq(self._after(self.turn, k))
                with m.If(requests.bit_select(candidate, 1)):
                    m.d.sync += [grant.eq(candidate), self.turn.eq(candidate)]
            if self.first is not None:      # ... unless `first` asks: it goes ahead, and the turn stays
                with m.If(requests[self.first]):
                    m.d.sync += [grant.eq(self.first), self.turn.eq(self.turn)]
        with m.Switch(grant):
            for k, c in enumerate(clients):
                with m.Case(k):
                    m.d.comb += [bus.arid.eq(k), bus.araddr.eq(c.araddr), bus.arlen.eq(c.arlen),
                                 bus.arsize.eq(c.arsize), bus.arburst.eq(c.arburst),
                                 bus.arvalid.eq(c.arvalid), c.arready.eq(bus.arready)]
        if platform == "formal":
            served_in_turn = grant == self.turn
            m.d.comb += Assert((grant < self.count) & (self.turn < self.count)
                               & (served_in_turn if self.first is None else
                                  (served_in_turn | (grant == self.first)) & (self.turn != self.first)))
        for k, c in enumerate(clients):
            mine = bus.rid == k
            m.d.comb += [c.rid.eq(0), c.rdata.eq(bus.rdata), c.rresp.eq(bus.rresp), c.rlast.eq(bus.rlast),
                         c.rvalid.eq(bus.rvalid & mine)]
            with m.If(mine):
                m.d.comb += bus.rready.eq(c.rready)
        return m
