"""The in-order instruction sequencer every stream shares.

A stream takes its next instruction from its command queue, pops the
dependency tokens the instruction asks for (waiting while a queue is
empty), lets an executor run it, then pushes tokens (waiting while a queue
is full). Executors see only ``start`` / ``done`` / ``error``. The
instruction stays at the head of the command queue (in the FIFO's output
register, no copy) until it retires or faults, and only then is it taken.
"""

from amaranth import Cat, Module, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from tilewright.isa import ERROR_BITS, INSN_BITS

from .pipe import replicas

__all__ = ["CommandLayout", "CommandSignature", "POP_COPIES", "TokenPort", "Sequencer"]

INDEX_BITS = 32

#: The registered copies of a stream's pop (see :class:`CommandSignature`).
POP_COPIES = 4


def CommandLayout():
    """A command-queue entry: the instruction word and its index in the program."""
    return data.StructLayout({"insn": INSN_BITS, "index": INDEX_BITS})


class CommandSignature(wiring.Signature):
    """A command queue's read side, as its stream takes instructions from it.

    A stream of :func:`CommandLayout` (``payload``, ``valid``, ``ready``),
    and ``ready_copies``: :data:`POP_COPIES` registers, each equal to
    ``ready`` every cycle, that each enable a slice of the queue's head
    register (the pop is a decode of the sequencer's state: on the 85F at
    100 MHz it reached the head's 160 enables through 5.9 ns of routing,
    10.6-12.7 ns in all).
    """

    def __init__(self):
        super().__init__({"payload": Out(CommandLayout()), "valid": Out(1), "ready": In(1),
                          "ready_copies": In(POP_COPIES)})


class TokenPort(wiring.Signature):
    """One side of a token queue as a stream sees it: ``pop``/``push`` and readiness."""

    def __init__(self):
        super().__init__({"pop": Out(1), "pop_ready": In(1), "push": Out(1), "push_ready": In(1)})


class Sequencer(wiring.Component):
    """Pops, starts, waits, pushes: one instruction at a time.

    Members
    -------
    cmd : In(CommandSignature())
    insn : Out(header layout)
        The current instruction (whole word): the head of ``cmd``, stable from
        ``start`` to ``done``.
    index : Out(32)
        Its index in the program.
    start : Out(1)
        One-cycle pulse: the executor begins ``insn``.
    done : In(1)
        The executor has finished (with ``error``, 0 for none).
    error : In(ERROR_BITS)
    ready : In(1, init=1)
        The executor can take ``insn`` (checked before ``start``).
    released : In(1)
        The executor can no longer fail ``insn`` and has read all it reads (see above).
    prev, next : Out(TokenPort())
        The token queues towards the previous and next stage (unused ones
        are left unconnected: their ``*_ready`` inputs stay 0, and the
        fetch stage rejects instructions that would use them).
    halt : In(1)
        Stop taking instructions (after an error elsewhere).
    fault : Out(1)
        One-cycle pulse: the executor reported ``error`` for ``index`` (which leaves the queue a cycle later).
    blocked : Out(1)
        Waiting for a token or room, or idle with nothing queued.
    busy : Out(1)
        An instruction is between being taken and retiring.
    executing : Out(1)
        The executor is running the instruction.
    wait_pop_prev, wait_pop_next, wait_push_prev, wait_push_next : Out(1)
        This cycle is spent waiting on that queue.
    retired : Out(1)
        One-cycle pulse: an instruction completed without error.
    """

    def __init__(self, *, insn_layout):
        self.insn_layout = insn_layout
        super().__init__({
            "cmd": In(CommandSignature()),
            "insn": Out(insn_layout),
            "index": Out(INDEX_BITS),
            "start": Out(1),
            "done": In(1),
            "error": In(ERROR_BITS),
            "ready": In(1, init=1),
            "released": In(1),
            "prev": Out(TokenPort()),
            "next": Out(TokenPort()),
            "halt": In(1),
            "fault": Out(1),
            "blocked": Out(1),
            "busy": Out(1),
            "executing": Out(1),
            "wait_pop_prev": Out(1), "wait_pop_next": Out(1),
            "wait_push_prev": Out(1), "wait_push_next": Out(1),
            "retired": Out(1),
        })

    def _tokens_ready(self, h):
        """Every token ``h`` pops is there: a stream never pops a token that was not pushed."""
        return (~h.pop_prev | self.prev.pop_ready) & (~h.pop_next | self.next.pop_ready)

    def _room(self, push_prev, push_next):
        """Every queue pushed into (as ``push_prev``/``push_next`` say) has room."""
        return (~push_prev | self.prev.push_ready) & (~push_next | self.next.push_ready)

    def elaborate(self, platform):
        m = Module()
        h = self.insn
        pops_ready = self._tokens_ready(h)
        # Whether the instruction may start is registered, a cycle old: `start` reaches every register an
        # executor loads from the instruction (on the 85F at 100 MHz the head's token bits reached the
        # compute core's through it, 11.5 ns). A stale yes is still true: only this stream pops the
        # tokens it waits for and starts its executor (`ready` falls only as it starts), and the head
        # does not change between IDLE and the start. A stale no costs a cycle.
        may_start = Signal()
        m.d.sync += may_start.eq(pops_ready & self.ready)
        # PUSH reads the push flags from registers of its own, taken during EXECUTE: the pop as it retires
        # depends on them, and the head's flags lay far from the token queues (on the 85F at 100 MHz, 11 ns).
        push_prev, push_next = Signal(), Signal()
        pushes_ready = self._room(push_prev, push_next)
        # Whether PUSH may push, registered like `may_start` and from the head's flags (stable while the
        # instruction runs): it takes the instruction off its queue, whose head register loads on it (on
        # the 85F at 100 MHz the push flags reached that register's enables, 12.7 ns). A stale yes is still
        # true: only this stream's own push takes room away. A stale no costs a cycle.
        may_push = Signal()
        room = self._room(h.push_prev, h.push_next)
        m.d.sync += may_push.eq(room)
        m.d.comb += [self.insn.eq(self.cmd.payload.insn), self.index.eq(self.cmd.payload.index)]
        # The pop's registered copies (`cmd.ready_copies`), from the state entered next: the pop is PUSH
        # with `may_push`, whose next value is the room now, or DROP.
        enters_push, enters_drop = Signal(), Signal()
        pop_next = (enters_push & room) | enters_drop
        m.d.comb += self.cmd.ready_copies.eq(Cat(replicas(m, pop_next, "pop", POP_COPIES)))
        with m.FSM() as fsm:
            with m.State("IDLE"):
                m.d.comb += self.blocked.eq(~self.cmd.valid)
                with m.If(self.cmd.valid & ~self.halt):
                    m.next = "POP"
            with m.State("POP"):
                m.d.comb += [
                    self.busy.eq(1),
                    self.blocked.eq(~pops_ready),
                    self.wait_pop_prev.eq(h.pop_prev & ~self.prev.pop_ready),
                    self.wait_pop_next.eq(h.pop_next & ~self.next.pop_ready),
                ]
                with m.If(may_start & ~self.halt):
                    m.d.comb += [self.prev.pop.eq(h.pop_prev), self.next.pop.eq(h.pop_next), self.start.eq(1)]
                    m.next = "EXECUTE"
            with m.State("EXECUTE"):
                m.d.comb += [self.busy.eq(1), self.executing.eq(1)]
                m.d.sync += [push_prev.eq(h.push_prev), push_next.eq(h.push_next)]
                with m.If(self.done):
                    with m.If(self.error != 0):
                        m.d.comb += [self.fault.eq(1), enters_drop.eq(1)]
                        m.next = "DROP"
                    with m.Else():
                        m.d.comb += enters_push.eq(1)
                        m.next = "PUSH"
                with m.Elif(self.released & ~h.push_next):
                    m.d.comb += enters_push.eq(1)
                    m.next = "PUSH"
            with m.State("DROP"):
                # A faulted instruction leaves its queue the cycle after the fault: what takes it is then a
                # register, not the executor's error logic, in front of the queue's read side and head.
                m.d.comb += [self.busy.eq(1), self.cmd.ready.eq(1)]
                m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += [
                    self.busy.eq(1),
                    self.blocked.eq(~pushes_ready),
                    self.wait_push_prev.eq(push_prev & ~self.prev.push_ready),
                    self.wait_push_next.eq(push_next & ~self.next.push_ready),
                ]
                with m.If(may_push):
                    m.d.comb += [self.prev.push.eq(push_prev), self.next.push.eq(push_next),
                                 self.retired.eq(1), self.cmd.ready.eq(1)]
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += enters_push.eq(1)
        if platform == "formal":        # (what makes the stale `may_start` and `may_push` safe, for the induction)
            m.d.comb += Assert(self.cmd.ready_copies == self.cmd.ready.replicate(POP_COPIES))
            with m.If(~fsm.ongoing("IDLE")):
                m.d.comb += Assert(self.cmd.valid)
            with m.If(fsm.ongoing("POP") & may_start):
                m.d.comb += Assert(pops_ready)
            with m.If(fsm.ongoing("PUSH")):
                m.d.comb += [Assert(push_prev == h.push_prev), Assert(push_next == h.push_next)]
                with m.If(may_push):
                    m.d.comb += Assert(pushes_ready)
        return m
