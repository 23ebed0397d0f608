"""The Sequencer against a cycle-level contract, under random and scripted traffic.

One testbench process drives the command stream, the four token-queue
readiness inputs, the executor's ``done``/``error`` and ``halt``, then
samples every output and checks it against the phase of the current
instruction, which the bench tracks from the handshakes it has seen:

* **idle** (no instruction): blocked while nothing is offered; an offered
  command moves to *pop* unless ``halt`` is high, and stays at the head of
  the queue (``cmd.ready`` low) until it leaves.
* **pop**: ``start`` (with one pop on each queue the flags name, all in the
  same cycle) exactly when, a cycle before, every named queue had a token
  and the executor was ``ready`` (what only the sequencer's own start can
  take away), and ``halt`` is low; ``wait_pop_*`` high exactly while a named queue is empty.
* **exec** (after ``start``): nothing but ``busy``/``executing`` until the
  executor's ``done``; with an error, ``fault``, then *drop*: ``busy`` and
  ``cmd.ready`` (the command leaves a cycle after its fault), then idle and
  no push ever. An instruction the executor
  ``released`` that pushes nothing to the next stage goes on to *push*
  without waiting for ``done``.
* **push**: one push on each named queue, all in the same cycle, exactly
  when every named queue has room (``retired`` and ``cmd.ready`` with it); ``wait_push_*`` high
  exactly while a named queue is full.

``insn`` and ``index`` must show the command from when it is taken until
it leaves.
"""

import dataclasses
import random

import pytest
from amaranth.sim import Simulator

from tilewright import PRESETS, isa
from tilewright.hw.sequencer import Sequencer

from ..words import field_of, get_field, set_field

TINY = PRESETS["tiny"]
FLAGS = isa.DEP_FLAGS       # pop_prev, pop_next, push_prev, push_next
OUTPUTS = ("start", "busy", "executing", "blocked", "fault", "retired",
           "wait_pop_prev", "wait_pop_next", "wait_push_prev", "wait_push_next")


def command(rng, index, **flags):
    """A random instruction word with the given (else random) dependency flags."""
    word = rng.getrandbits(isa.INSN_BITS)
    for f in FLAGS:
        word = set_field(word, field_of(f), flags.get(f, rng.random() < 0.5))
    return word, index


def flags_of(word):
    return {f: bool(get_field(word, field_of(f))) for f in FLAGS}


@dataclasses.dataclass
class Trace:
    """What the bench saw: per-cycle outputs and the events, with cycle numbers."""
    cycles: list = dataclasses.field(default_factory=list)        # dicts of inputs and outputs
    taken: list = dataclasses.field(default_factory=list)         # (cycle, index)
    started: list = dataclasses.field(default_factory=list)       # (cycle, index)
    pops: list = dataclasses.field(default_factory=list)          # (cycle, index, "prev"/"next")
    pushes: list = dataclasses.field(default_factory=list)
    faults: list = dataclasses.field(default_factory=list)        # (cycle, index)
    retired: list = dataclasses.field(default_factory=list)
    released: list = dataclasses.field(default_factory=list)     # (cycle, index): retiring before done


def random_level(p_change, p_high):
    """A readiness input that keeps its level for a while (so waits get long), then redraws it."""
    state = {"level": False}

    def level(cycle, rng):
        if rng.random() < p_change:
            state["level"] = rng.random() < p_high
        return state["level"]
    return level


def run_sequencer(commands, *, tokens=None, halt=None, exec_cycles=None, errors=None, offer=None,
                  executor_ready=None, released=None, seed=0, max_cycles=5000):
    """Run ``commands`` ((word, index) pairs) through a Sequencer while checking the contract each cycle.

    ``tokens[name](cycle, rng)`` gives ``prev_pop``, ``next_pop``, ``prev_push``
    and ``next_push`` readiness (a push readiness is a queue's room: it falls
    only after the sequencer pushes, 7 times in 10, and then comes back when
    its function says so), ``halt(cycle, rng)`` the halt input,
    ``exec_cycles(k)`` and ``errors(k)`` the executor's latency (≥ 1 cycle
    after ``start``) and error code for the k-th instruction, ``offer(cycle,
    rng)`` whether the command queue presents its next entry (once presented
    it stays valid until it leaves). Returns the :class:`Trace`; fails if not
    every command has left within ``max_cycles``.
    """
    rng = random.Random(seed)
    tokens = {name: random_level(0.3, 0.6) for name in ("prev_pop", "next_pop")} \
        | {name: lambda cycle, rng: rng.random() < 0.05 for name in ("prev_push", "next_push")} | (tokens or {})
    halt = halt or (lambda cycle, rng: False)
    exec_cycles = exec_cycles or (lambda k: rng.randint(1, 4))
    errors = errors or (lambda k: 0)
    offer = offer or (lambda cycle, rng: rng.random() < 0.7)
    executor_ready = executor_ready or always(True)
    released = released or always(False)
    dut = Sequencer(insn_layout=isa.instruction_layouts(TINY)["header"])
    trace = Trace()

    async def bench(ctx):
        phase, current, k = "idle", None, -1
        pending = list(commands)
        offered = None
        countdown = error = 0
        could_start = False         # last cycle: the offered command's tokens were there, the executor ready
        could_push = False          # last cycle: the current command's pushes had room
        room = {"prev_push": False, "next_push": False}      # last cycle's, unless a push filled the queue
        for cycle in range(max_cycles):
            # -- drive -------------------------------------------------------------
            if offered is None and pending and offer(cycle, rng):
                offered = pending.pop(0)
            ctx.set(dut.cmd.valid, offered is not None)
            if offered is not None:
                ctx.set(dut.cmd.payload, {"insn": offered[0], "index": offered[1]})
            ready = {name: bool(fn(cycle, rng)) for name, fn in tokens.items()}
            ready |= {name: True for name, kept in room.items() if kept}
            ctx.set(dut.prev.pop_ready, ready["prev_pop"])
            ctx.set(dut.next.pop_ready, ready["next_pop"])
            ctx.set(dut.prev.push_ready, ready["prev_push"])
            ctx.set(dut.next.push_ready, ready["next_push"])
            halted = bool(halt(cycle, rng))
            ctx.set(dut.halt, halted)
            # (an executor releases only an instruction it will not fail)
            can_start = bool(executor_ready(cycle, rng))
            let_go = bool(released(cycle, rng)) and not (phase == "exec" and error)
            ctx.set(dut.ready, can_start)
            ctx.set(dut.released, let_go)
            done = phase == "exec" and countdown == 0
            ctx.set(dut.done, done)
            # Outside done the error input is noise the sequencer must ignore.
            ctx.set(dut.error, error if done else rng.randrange(1 << isa.ERROR_BITS))
            # -- sample and check ------------------------------------------------
            got = {name: ctx.get(getattr(dut, name)) for name in OUTPUTS}
            got |= {"cmd_ready": ctx.get(dut.cmd.ready),
                    "pop_prev": ctx.get(dut.prev.pop), "pop_next": ctx.get(dut.next.pop),
                    "push_prev": ctx.get(dut.prev.push), "push_next": ctx.get(dut.next.push)}
            expect = dict.fromkeys(got, 0)
            flags = flags_of(current[0]) if current else dict.fromkeys(FLAGS, False)
            pops_ready = all(ready[f"{side}_pop"] or not flags[f"pop_{side}"] for side in ("prev", "next"))
            pushes_ready = all(ready[f"{side}_push"] or not flags[f"push_{side}"] for side in ("prev", "next"))
            if phase == "idle":
                expect |= {"blocked": offered is None}
            elif phase == "pop":
                go = could_start and not halted
                expect |= {"busy": 1, "blocked": not pops_ready, "start": go,
                           "pop_prev": go and flags["pop_prev"], "pop_next": go and flags["pop_next"],
                           "wait_pop_prev": flags["pop_prev"] and not ready["prev_pop"],
                           "wait_pop_next": flags["pop_next"] and not ready["next_pop"]}
            elif phase == "exec":
                expect |= {"busy": 1, "executing": 1, "fault": done and error != 0}
            elif phase == "drop":       # the faulted instruction leaves the queue a cycle after the fault
                expect |= {"busy": 1, "cmd_ready": 1}
            else:
                expect |= {"busy": 1, "blocked": not pushes_ready, "retired": could_push, "cmd_ready": could_push,
                           "push_prev": could_push and flags["push_prev"],
                           "push_next": could_push and flags["push_next"],
                           "wait_push_prev": flags["push_prev"] and not ready["prev_push"],
                           "wait_push_next": flags["push_next"] and not ready["next_push"]}
            expect = {name: int(bool(v)) for name, v in expect.items()}
            wrong = {name: (got[name], expect[name]) for name in got if got[name] != expect[name]}
            assert not wrong, f"cycle {cycle}, phase {phase}, flags {flags}, ready {ready}, " \
                              f"halt {halted}: (got, expected) {wrong}"
            if current is not None:
                assert ctx.get(dut.insn.as_value()) == current[0] and ctx.get(dut.index) == current[1], \
                    "insn and index hold the current command"
            trace.cycles.append({"phase": phase, "halt": halted, "executor_ready": can_start, **ready, **got})
            offered_flags = flags_of(offered[0]) if offered else None
            could_start = bool(offered_flags) and can_start and all(
                ready[f"{side}_pop"] or not offered_flags[f"pop_{side}"] for side in ("prev", "next"))
            could_push = bool(current) and pushes_ready
            room = {f"{side}_push": ready[f"{side}_push"] and not (got[f"push_{side}"] and rng.random() < 0.7)
                    for side in ("prev", "next")}
            # -- advance the model by what the edge sees ---------------------------
            if phase == "idle" and offered is not None and not halted:
                current, k, phase = offered, k + 1, "pop"
                trace.taken.append((cycle, current[1]))
            elif phase == "pop" and got["start"]:
                trace.started.append((cycle, current[1]))
                trace.pops += [(cycle, current[1], side) for side in ("prev", "next") if got[f"pop_{side}"]]
                phase, countdown, error = "exec", exec_cycles(k) - 1, errors(k)
                assert countdown >= 0, "the executor answers one cycle after start at the earliest"
            elif phase == "exec" and done:
                if error:
                    trace.faults.append((cycle, current[1]))
                    phase = "drop"
                else:
                    phase = "push"
            elif phase == "exec" and let_go and not flags["push_next"]:
                trace.released.append((cycle, current[1]))
                phase = "push"
            elif phase == "exec":
                countdown -= 1
            elif phase == "drop":
                phase, current, offered = "idle", None, None
            elif phase == "push" and got["retired"]:
                trace.retired.append((cycle, current[1]))
                trace.pushes += [(cycle, current[1], side) for side in ("prev", "next") if got[f"push_{side}"]]
                phase, current, offered = "idle", None, None
            if not pending and offered is None and phase == "idle":
                return
            await ctx.tick()
        raise AssertionError(f"commands left after {max_cycles} cycles (phase {phase})")

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return trace


def always(level):
    return lambda cycle, rng: level


def from_cycle(first):
    return lambda cycle, rng: cycle >= first


# -- random traffic ---------------------------------------------------------------

@pytest.mark.parametrize("seed", range(6))
def test_random_traffic_follows_the_contract(seed):
    """Random flags, token availability, executor latency, readiness and early releases, errors and halt:
    every cycle obeys the contract.

    Every command is taken once, in order; those without an error retire
    with exactly the pushes their flags name; those with one fault and push
    nothing.
    """
    rng = random.Random(seed)
    commands = [command(rng, 1000 + k) for k in range(60)]
    errors = {k: rng.choice([0, 0, 0, rng.randint(1, 15)]) for k in range(60)}
    halt = random_level(0.15, 0.25)
    executor = {} if seed % 2 else {"executor_ready": random_level(0.3, 0.7),
                                    "released": lambda cycle, rng: rng.random() < 0.3}
    trace = run_sequencer(commands, errors=errors.get, halt=halt, seed=seed, exec_cycles=lambda k: rng.randint(1, 6),
                          **executor)
    indices = [index for _, index in commands]
    assert [i for _, i in trace.taken] == indices and [i for _, i in trace.started] == indices
    assert [i for _, i in trace.faults] == [1000 + k for k in range(60) if errors[k]]
    assert [i for _, i in trace.retired] == [1000 + k for k in range(60) if not errors[k]]
    for word, index in commands:
        flags = flags_of(word)
        pushes = {side for _, i, side in trace.pushes if i == index}
        pops = {side for _, i, side in trace.pops if i == index}
        assert pops == {side for side in ("prev", "next") if flags[f"pop_{side}"]}
        if errors[index - 1000]:
            assert not pushes
        else:
            assert pushes == {side for side in ("prev", "next") if flags[f"push_{side}"]}
    # The traffic really waited on every queue and on halt.
    for name in ("wait_pop_prev", "wait_pop_next", "wait_push_prev", "wait_push_next"):
        assert sum(c[name] for c in trace.cycles) > 0, name
    assert any(c["halt"] and c["phase"] == "pop" for c in trace.cycles)
    if executor:        # ... and on the executor, which also released instructions early
        released = {i for _, i in trace.released}
        assert released and not any(flags_of(w)["push_next"] for w, i in commands if i in released)
        assert any(c["phase"] == "pop" and not c["executor_ready"] for c in trace.cycles)


# -- scripted scenarios ---------------------------------------------------------------

def test_pops_both_tokens_at_once():
    """With both pop flags the instruction waits for both queues and pops them in one cycle.

    prev has a token from cycle 5, next from cycle 15: ``wait_pop_prev`` is
    high until 5, ``wait_pop_next`` until 15, and start comes in cycle 15.
    """
    rng = random.Random(1)
    cmd = command(rng, 7, pop_prev=True, pop_next=True, push_prev=False, push_next=False)
    trace = run_sequencer([cmd], offer=always(True), exec_cycles=lambda k: 2,
                          tokens={"prev_pop": from_cycle(5), "next_pop": from_cycle(15)})
    assert trace.taken == [(0, 7)] and trace.started == [(16, 7)]      # (the readiness seen a cycle late)
    assert trace.pops == [(16, 7, "prev"), (16, 7, "next")]
    waiting = trace.cycles[1:15]
    assert [c["wait_pop_prev"] for c in waiting] == [1] * 4 + [0] * 10
    assert all(c["wait_pop_next"] and c["blocked"] for c in waiting)
    assert sum(c["start"] for c in trace.cycles) == 1


def test_pops_nothing_without_flags():
    """Without pop flags start comes the cycle after the command is taken, even with every queue empty."""
    rng = random.Random(2)
    cmd = command(rng, 3, pop_prev=False, pop_next=False, push_prev=False, push_next=False)
    trace = run_sequencer([cmd], offer=always(True), exec_cycles=lambda k: 1,
                          tokens={name: always(False) for name in ("prev_pop", "next_pop", "prev_push", "next_push")})
    assert trace.started == [(1, 3)] and trace.pops == [] and trace.pushes == []
    assert trace.retired == [(3, 3)]


def test_waits_for_done_then_pushes_when_room():
    """No push before ``done``; then both pushes in the cycle after the first with room in both queues."""
    rng = random.Random(3)
    cmd = command(rng, 0, pop_prev=False, pop_next=False, push_prev=True, push_next=True)
    trace = run_sequencer([cmd], offer=always(True), exec_cycles=lambda k: 10,
                          tokens={"prev_push": from_cycle(5), "next_push": from_cycle(20)})
    # taken 0, start 1, done in cycle 11, push phase from 12, room in both from 20, seen from 21.
    assert trace.started == [(1, 0)]
    assert all(c["executing"] for c in trace.cycles[2:12])
    assert trace.pushes == [(21, 0, "prev"), (21, 0, "next")] and trace.retired == [(21, 0)]
    assert all(c["wait_push_next"] and not c["wait_push_prev"] and c["blocked"] for c in trace.cycles[12:20])


def test_error_faults_and_skips_pushes():
    """An executor error raises ``fault`` for one cycle, pushes nothing, and the next command is taken."""
    rng = random.Random(4)
    cmds = [command(rng, 10, push_prev=True, push_next=True), command(rng, 11, push_prev=True, push_next=False)]
    everything = {name: always(True) for name in ("prev_pop", "next_pop", "prev_push", "next_push")}
    trace = run_sequencer(cmds, offer=always(True), exec_cycles=lambda k: 3, errors=[9, 0].__getitem__,
                          tokens=everything)
    assert trace.faults == [(trace.started[0][0] + 3, 10)]
    assert [(i, side) for _, i, side in trace.pushes] == [(11, "prev")]
    assert trace.retired[0][1] == 11 and sum(c["fault"] for c in trace.cycles) == 1


def test_halt_stops_taking_instructions():
    """While ``halt`` is high no command is taken and a taken one does not start; it resumes afterwards.

    The first command is taken at cycle 0 and halted before its start (halt
    from cycle 1 to 10); the second waits in the queue through a second
    halt from its would-be acceptance to cycle 30.
    """
    rng = random.Random(5)
    cmds = [command(rng, k, pop_prev=False, pop_next=False, push_prev=False, push_next=False) for k in range(2)]
    halted = lambda cycle, rng: 1 <= cycle < 10 or 13 <= cycle < 30     # noqa: E731
    trace = run_sequencer(cmds, offer=always(True), exec_cycles=lambda k: 1, halt=halted)
    assert trace.taken == [(0, 0), (30, 1)]
    assert trace.started == [(10, 0), (31, 1)]
    assert all(not c["cmd_ready"] for c in trace.cycles[13:30])


def test_idle_blocked_only_without_commands():
    """Idle, ``blocked`` is high exactly while the command queue offers nothing."""
    rng = random.Random(6)
    cmds = [command(rng, k, pop_prev=False, pop_next=False, push_prev=False, push_next=False) for k in range(3)]
    trace = run_sequencer(cmds, offer=lambda cycle, rng: cycle >= 8, exec_cycles=lambda k: 1)
    assert all(c["blocked"] and c["phase"] == "idle" for c in trace.cycles[:8])
    assert trace.taken[0] == (8, 0)
