"""Fetch against an in-testbench AXI read model and ``tilewright.isa`` as the decoder oracle.

One testbench process per simulation plays every part around Fetch, cycle
by cycle: the AXI subordinate (a bytearray; AR requests queue up, R beats
follow in order, ``rvalid`` held until taken), the three command queues
(``ready`` from a per-stream policy) and the host (``start``, ``halt``). It
sets all inputs first and only then samples the outputs, so every handshake
it records is the one the clock edge sees.

The oracle for a word is ``isa.decode`` (``ILLEGAL_OPCODE``) followed by
``isa.fetch_error``; legal words go to the stream ``isa.stream_of`` names.
"""

import dataclasses
import random

import pytest
from amaranth import Module, ResetInserter, Signal
from amaranth.sim import Simulator

from tilewright import PRESETS, isa
from tilewright.hw.axi import BOUNDARY_BYTES, BURST_INCR
from tilewright.hw.dma import RowReader, attach_reader
from tilewright.hw.fetch import Fetch
from tilewright.isa import Alu, AluOp, Finish, Gemm, Load, MemType, Store, Stream

from ..words import ILLEGAL_OPCODES, with_opcode, with_reserved_bit

TINY = PRESETS["tiny"]
STREAMS = {Stream.LOAD: "load", Stream.COMPUTE: "compute", Stream.STORE: "store"}
LOAD_TYPES = [MemType.UOP, MemType.WGT, MemType.INP, MemType.ACC, MemType.ACC8]


# -- instruction words ---------------------------------------------------------------

def _random_fields(rng, cls, cfg):
    values = {}
    for f in isa.instruction_format(cls, cfg).fields:
        if f.name == "opcode" or f.name in isa.DEP_FLAGS:
            continue
        values[f.name] = bool(rng.getrandbits(1)) if f.width == 1 and not f.signed else rng.randint(f.min, f.max)
    return values


def random_legal(rng, cfg=TINY):
    """A random instruction fetch must accept: legal enums, only the flags its stream has."""
    cls = rng.choice([Load, Load, Store, Gemm, Alu, Finish])
    values = _random_fields(rng, cls, cfg)
    if cls is Load:
        values["memory_type"] = rng.choice(LOAD_TYPES)
    elif cls is Store:
        values["memory_type"] = MemType.OUT
    elif cls is Alu:
        values["alu_op"] = rng.choice(list(AluOp))
    insn = cls(**values)
    flags = {f: bool(rng.getrandbits(1)) and isa.queue_of(insn.stream, f) is not None for f in isa.DEP_FLAGS}
    insn = insn.replace(**flags)
    assert isa.fetch_error(insn) is None
    return insn


ILLEGAL = {
    **{f"opcode {op}": lambda rng, op=op: with_opcode(word_of(random_legal(rng)), op) for op in ILLEGAL_OPCODES},
    "load OUT": lambda rng: Load(memory_type=MemType.OUT, sram_base=3),
    "load type 6": lambda rng: Load(memory_type=6, push_next=True),
    "load type 7": lambda rng: Load(memory_type=7, x_size=4, y_size=2),
    "store UOP": lambda rng: Store(memory_type=MemType.UOP),
    "store INP": lambda rng: Store(memory_type=MemType.INP, pop_prev=True),
    "store ACC": lambda rng: Store(memory_type=MemType.ACC),
    "store ACC8": lambda rng: Store(memory_type=MemType.ACC8),
    "store type 7": lambda rng: Store(memory_type=7),
    "alu op 5": lambda rng: Alu(alu_op=5, use_imm=True, imm=-1),
    "alu op 6": lambda rng: Alu(alu_op=6),
    "alu op 7": lambda rng: Alu(alu_op=7, pop_prev=True, push_next=True),
    "load INP pop_prev": lambda rng: Load(memory_type=MemType.INP, pop_prev=True),
    "load WGT push_prev": lambda rng: Load(memory_type=MemType.WGT, push_prev=True, push_next=True),
    "store pop_next": lambda rng: Store(pop_next=True, pop_prev=True),
    "store push_next": lambda rng: Store(push_next=True),
    # The first problem in fetch_error's order wins.
    "bad type and flag": lambda rng: Load(memory_type=7, pop_prev=True),
    # reserved bits come right after the opcode: before a bad memory type or flag
    "reserved bit and bad type": lambda rng: with_reserved_bit(Load(memory_type=7, pop_prev=True)),
    "reserved bit gemm": lambda rng: with_reserved_bit(Gemm(uop_end=3, iter_in=2)),
    "reserved bit finish (highest)": lambda rng: with_reserved_bit(Finish(push_prev=True), highest=True),
}


def word_of(insn, cfg=TINY):
    """The 128-bit word of an instruction (or a word already)."""
    return insn if isinstance(insn, int) else int.from_bytes(isa.encode(insn, cfg), "little")


def oracle(word, cfg=TINY):
    """``(stream, None)`` for a legal word, ``(None, ErrorCode)`` for an illegal one."""
    try:
        insn = isa.decode(word, cfg)
    except isa.IllegalInstruction as e:
        return None, e.code
    problem = isa.fetch_error(insn)
    return (None, problem[0]) if problem else (insn.stream, None)


# -- the bench ------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    dispatched: dict            # stream -> [(index, word)] in order
    order: list                 # indices in dispatch order, all streams
    faults: list                # (cycle, error, index) of every fault pulse
    done_cycle: int | None      # first cycle with done high
    final_index: int
    stalled_cycles: int
    requests: list              # (addr, bytes) of every AR
    r_stalls: list              # cycles a first beat was offered but not taken


def run_fetch(words, *, base=0x200, ready=None, halt=None, seed=0, cfg=TINY, after=60, max_cycles=20000,
              mem_bytes=1 << 14, addr_width=32):
    """Fetch ``words`` placed at byte address ``base``; returns an :class:`Outcome`.

    ``ready[stream](cycle, rng)`` and ``halt(cycle)`` shape the traffic (by
    default every queue is ready 70 % of cycles and halt is low). The bench
    stops ``after`` cycles past the fault or past ``done`` with every word
    dispatched. It asserts the AXI rules Fetch relies on and promises: INCR
    bursts of full bus words, no 4 KiB crossing, reads only inside the
    program, and ``rready`` never low in the middle of a burst (Fetch never
    stalls the shared read channel; the model answers as early as the cycle
    after AR, when the reader may not yet take the first beat).
    """
    rng = random.Random(seed)
    B = cfg.bus_bytes
    mem = bytearray(rng.getrandbits(8) for _ in range(mem_bytes))
    for k, w in enumerate(words):
        mem[base + 16 * k:base + 16 * (k + 1)] = word_of(w, cfg).to_bytes(16, "little")
    ready = {s: (ready or {}).get(s, lambda cycle, rng: rng.random() < 0.7) for s in Stream}
    halt = halt or (lambda cycle: False)
    dut = Fetch(cfg, addr_width=addr_width)
    reader = RowReader(addr_width=addr_width, data_width=cfg.dram_bus_width, lean=cfg.lean)
    top = Module()
    restart = Signal()          # the run's reset, in the cycle before start (as the accelerator's)
    top.submodules.fetch, top.submodules.reader = ResetInserter(restart)(dut), reader
    attach_reader(top, dut.read, reader)
    axi = reader.axi
    queues = {s: getattr(dut, STREAMS[s]) for s in Stream}
    out = Outcome({s: [] for s in Stream}, [], [], None, 0, 0, [], [])

    async def bench(ctx):
        bursts = []            # [addr, beats left, beats]
        offering = False
        ctx.set(dut.addr, base)
        ctx.set(dut.count, len(words))
        await ctx.tick()            # (stable from two cycles before start)
        ctx.set(restart, 1)
        await ctx.tick()
        ctx.set(restart, 0)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        stop_at = None
        for cycle in range(1, max_cycles):
            # -- drive every input ------------------------------------------------
            ctx.set(axi.arready, rng.random() < 0.7)
            if not offering and bursts and rng.random() < 0.8:
                offering = True
            ctx.set(axi.rvalid, offering)
            if offering:
                addr, left, _ = bursts[0]
                ctx.set(axi.rdata, int.from_bytes(mem[addr:addr + B], "little"))
                ctx.set(axi.rlast, left == 1)
                ctx.set(axi.rresp, 0)
            readies = {s: bool(ready[s](cycle, rng)) for s in Stream}
            for s in Stream:
                ctx.set(queues[s].ready, readies[s])
            halted = halt(cycle)
            ctx.set(dut.halt, halted)
            # -- sample what the edge will see ---------------------------------
            if ctx.get(axi.arvalid) and ctx.get(axi.arready):
                addr, beats = ctx.get(axi.araddr), ctx.get(axi.arlen) + 1
                assert ctx.get(axi.arburst) == BURST_INCR and ctx.get(axi.arsize) == B.bit_length() - 1
                assert addr % B == 0 and addr // BOUNDARY_BYTES == (addr + beats * B - 1) // BOUNDARY_BYTES
                assert base // B * B <= addr and addr + beats * B <= -(-(base + 16 * len(words)) // B) * B, \
                    "read outside the bus words holding the program"
                out.requests.append((addr, beats * B))
                bursts.append([addr, beats, beats])
            if offering and not ctx.get(axi.rready):
                beat = bursts[0][2] - bursts[0][1]
                # A beat of several instructions takes a cycle per instruction.
                assert beat == 0 or B > isa.INSN_BYTES, f"cycle {cycle}: fetch stalls the read channel at beat {beat}"
                out.r_stalls.append(cycle)
            elif offering:
                bursts[0][0] += B
                bursts[0][1] -= 1
                if bursts[0][1] == 0:
                    bursts.pop(0)
                offering = False
            if bursts:
                assert ctx.get(dut.busy), f"cycle {cycle}: a read is in flight but busy is low"
            valid = {s: ctx.get(queues[s].valid) for s in Stream}
            assert sum(valid.values()) <= 1, "one instruction at a time"
            for s in Stream:
                if valid[s] and halted:
                    raise AssertionError(f"cycle {cycle}: {STREAMS[s]} valid while halted")
                if valid[s] and readies[s]:
                    payload = ctx.get(queues[s].payload)
                    out.dispatched[s].append((payload.index, payload.insn))
                    out.order.append(payload.index)
                    assert ctx.get(dut.dispatched)
            if not any(valid[s] and readies[s] for s in Stream):
                assert not ctx.get(dut.dispatched)
            if ctx.get(dut.fault):
                out.faults.append((cycle, ctx.get(dut.error), ctx.get(dut.index)))
                assert not halted
            else:
                assert ctx.get(dut.error) == 0
            out.stalled_cycles += ctx.get(dut.stalled)
            if ctx.get(dut.done) and out.done_cycle is None:
                out.done_cycle = cycle
            if stop_at is None and (out.faults or (out.done_cycle is not None and not bursts)):
                stop_at = cycle + after
            if cycle == stop_at:
                out.final_index = ctx.get(dut.index)
                return
            await ctx.tick()
        raise AssertionError(f"fetch neither finished nor faulted in {max_cycles} cycles")

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return out


def check_outcome(words, out, cfg=TINY):
    """Everything before the first illegal word reached its stream in order with its index; then the fault."""
    verdicts = [oracle(word_of(w, cfg), cfg) for w in words]
    first_bad = next((k for k, (_, err) in enumerate(verdicts) if err is not None), None)
    legal = range(len(words) if first_bad is None else first_bad)
    for s in Stream:
        expected = [(k, word_of(words[k], cfg)) for k in legal if verdicts[k][0] == s]
        assert out.dispatched[s] == expected, f"{STREAMS[s]} stream"
    assert out.order == list(legal), "dispatch in program order"
    if first_bad is None:
        assert out.faults == []
        assert out.done_cycle is not None and out.final_index == len(words)
    else:
        assert [(err, index) for _, err, index in out.faults] == [(verdicts[first_bad][1], first_bad)], \
            "one fault pulse with the oracle's code and the illegal word's index"
        assert out.done_cycle is None


# -- tests -------------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(8))
def test_legal_programs_reach_their_streams(seed):
    """Random legal programs (several 16-instruction chunks) reach the right queues, in order, with indices.

    The program sits just below a 4 KiB boundary for odd seeds, and the
    command queues accept at random; ``done`` rises once all are dispatched.
    """
    rng = random.Random(seed)
    words = [random_legal(rng) for _ in range(rng.randint(30, 60))]
    base = 0x1000 - 16 * rng.randint(1, 20) if seed % 2 else 16 * rng.randint(0, 40)
    out = run_fetch(words, base=base, seed=seed)
    check_outcome(words, out)
    assert {s for s in Stream if out.dispatched[s]} == set(Stream)


@pytest.mark.parametrize("config", ["small", "default"])
@pytest.mark.parametrize("seed", range(2))
def test_wider_buses(config, seed):
    """With 64- and 128-bit buses (two beats or one per instruction) routing, order and faults are the same.

    The second seed holds the compute queue for 200 cycles and puts an
    illegal word after the first chunk.
    """
    cfg = PRESETS[config]
    rng = random.Random(seed)
    words = [word_of(random_legal(rng, cfg), cfg) for _ in range(rng.randint(30, 70))]
    ready = None
    if seed:
        words.insert(rng.randint(17, 29), word_of(Alu(alu_op=5), cfg))
        ready = {Stream.COMPUTE: lambda cycle, rng: cycle > 200}
    out = run_fetch(words, base=0x1000 - 16 * 9, seed=seed, cfg=cfg, ready=ready)
    check_outcome(words, out, cfg)


W256 = PRESETS["default"].replace(name="w256", dram_bus_width=256)


@pytest.mark.parametrize("cfg, base", [(TINY, 0x210), (PRESETS["small"], 0x1FF0), (PRESETS["default"], 0x210),
                                       (W256, 0x210), (W256, 0x1FF0)], ids=lambda v: v.name if hasattr(v, "name") else hex(v))
def test_program_at_any_instruction_boundary(cfg, base):
    """A program at any 16-byte-aligned address (not aligned to a wider bus) is fetched correctly.

    With a 256-bit bus two instructions share a beat and the first one may
    start in its upper half.
    """
    rng = random.Random(base)
    words = [word_of(random_legal(rng, cfg), cfg) for _ in range(40)]
    check_outcome(words, run_fetch(words, base=base, seed=base, cfg=cfg), cfg)


@pytest.mark.parametrize("config, base", [("tiny", 0x202), ("small", 0x204), ("default", 0x208)])
def test_unaligned_program_address_is_a_bus_error(config, base):
    """A program not on a 16-byte boundary stops at once with BUS_ERROR, as fsim.run_dram does."""
    cfg = PRESETS[config]
    rng = random.Random(0)
    words = [word_of(random_legal(rng, cfg), cfg) for _ in range(20)]
    out = run_fetch(words, base=base, seed=0, cfg=cfg)
    assert [(err, index) for _, err, index in out.faults][:1] == [(isa.ErrorCode.BUS_ERROR, 0)]
    assert out.order == []


@pytest.mark.parametrize("past_end", [0, 1, 7])
def test_program_beyond_the_bus_is_a_bus_error(past_end):
    """On a 14-bit bus a program ending at 16 KiB runs; one reaching ``past_end`` instructions further stops
    at once with BUS_ERROR, nothing read (as fsim.run_dram with a 16 KiB DRAM)."""
    rng = random.Random(past_end)
    words = [random_legal(rng) for _ in range(20)]
    out = run_fetch(words, base=(1 << 14) - 16 * (20 - past_end), seed=past_end, addr_width=14, mem_bytes=1 << 15)
    if past_end:
        assert [(err, index) for _, err, index in out.faults][:1] == [(isa.ErrorCode.BUS_ERROR, 0)]
        assert out.order == []
    else:
        check_outcome(words, out)


@pytest.mark.parametrize("kind", ILLEGAL, ids=ILLEGAL.keys())
def test_illegal_instruction_faults(kind):
    """The first illegal word raises ``fault`` with fetch_error's code and its index; nothing after it leaves.

    A legal prefix (crossing a chunk for some kinds) is dispatched first,
    and a second illegal word later in the program must not be reported.
    """
    rng = random.Random(kind)
    prefix = [random_legal(rng) for _ in range(rng.randint(0, 20))]
    bad = ILLEGAL[kind](rng)
    assert oracle(word_of(bad))[1] is not None
    words = prefix + [bad] + [random_legal(rng) for _ in range(5)] + [ILLEGAL[f"opcode {ILLEGAL_OPCODES[-1]}"](rng)]
    check_outcome(words, run_fetch(words, seed=len(prefix)))


@pytest.mark.parametrize("kind", [f"opcode {ILLEGAL_OPCODES[0]}", "store ACC", "alu op 7", "store push_next"])
def test_illegal_first_word(kind):
    """An illegal word at index 0 faults with index 0 and nothing is dispatched."""
    rng = random.Random(kind)
    words = [ILLEGAL[kind](rng)] + [random_legal(rng) for _ in range(20)]
    out = run_fetch(words, seed=1)
    check_outcome(words, out)
    assert out.faults[0][2] == 0 and out.order == []


@pytest.mark.parametrize("seed", range(6))
def test_random_words(seed):
    """Arbitrary instruction words (any opcode, any field) are judged exactly as the isa oracle judges them."""
    rng = random.Random(seed)
    for trial in range(4):
        words = []
        while len(words) < 40:
            w = rng.getrandbits(isa.INSN_BITS)
            words.append(w)
            if oracle(w)[1] is not None and rng.random() < 0.6:
                break
        check_outcome(words, run_fetch(words, seed=seed * 10 + trial))


@pytest.mark.parametrize("stream", list(Stream), ids=lambda s: s.name.lower())
def test_back_pressure(stream):
    """A queue held not-ready stalls dispatch in order: nothing lost, nothing reordered, nothing skipped.

    While the head instruction waits for the held queue no other stream gets
    anything (``stalled`` rises once the buffer has read ahead), reading
    goes on without ever stalling R, and every instruction arrives once the
    queue is released.
    """
    rng = random.Random(int(stream))
    words = [random_legal(rng) for _ in range(50)]
    words[3] = {Stream.LOAD: Load(memory_type=MemType.INP), Stream.COMPUTE: Finish(),
                Stream.STORE: Store()}[stream]
    release = 400
    ready = {stream: lambda cycle, rng: cycle >= release and rng.random() < 0.5}
    out = run_fetch(words, ready=ready, seed=int(stream))
    check_outcome(words, out)
    assert out.stalled_cycles > 100, "fetch reports the stall"
    assert len(out.r_stalls) <= len(out.requests), "R is never held up beyond a burst's first beat"
    # The held stream's first instruction is at index ≤ 3, so at most 3 left before the release.
    assert out.done_cycle > release


def test_halt_stops_dispatch():
    """With ``halt`` high nothing is dispatched and no fault is raised; afterwards fetch resumes in order."""
    rng = random.Random(9)
    words = [random_legal(rng) for _ in range(30)] + [ILLEGAL["alu op 6"](rng)]
    halted = lambda cycle: 20 <= cycle < 300 or 330 <= cycle < 600     # noqa: E731
    out = run_fetch(words, halt=halted, ready={s: lambda c, r: True for s in Stream})
    check_outcome(words, out)
    assert out.faults[0][0] >= 600


def test_empty_program():
    """``count = 0``: done at once, no read request, nothing dispatched."""
    out = run_fetch([])
    check_outcome([], out)
    assert out.done_cycle == 1 and out.requests == []
