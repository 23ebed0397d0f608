"""fsim: token protocol, deadlock detection and every error code."""

import pytest

from tilewright import PRESETS, isa
from tilewright.builder import noop
from tilewright.isa import Alu, AluOp, ErrorCode, Finish, Gemm, Load, MemType, Queue, Store, Stream
from tilewright.sim import BudgetError, DeadlockError, ExecutionError, FunctionalSimulator, ProtocolError

from ..words import ILLEGAL_OPCODES, opcode_only

TINY = PRESETS["tiny"]
L, C, S = Stream.LOAD, Stream.COMPUTE, Stream.STORE


def run(program, cfg=TINY, **kw):
    return FunctionalSimulator(cfg, **kw).run(program)


def test_tokens_order_streams():
    program = [noop(L).replace(push_next=True), noop(C).replace(pop_prev=True, push_next=True),
               noop(S).replace(pop_prev=True, push_prev=True), Finish(pop_next=True)]
    sim = FunctionalSimulator(TINY)
    stats = sim.run(program)
    assert stats.instructions == {"load": 1, "compute": 2, "store": 1}
    assert sim.executed == [0, 1, 2, 3]
    assert stats.dram_bytes_read["insn"] == 4 * isa.INSN_BYTES


def test_deadlock_reports_each_blocked_stream():
    program = [noop(L).replace(pop_next=True, push_next=True),   # waits for compute
               noop(C).replace(pop_prev=True, push_prev=True),   # waits for load
               Finish()]
    with pytest.raises(DeadlockError) as e:
        run(program)
    err = e.value
    assert err.code == ErrorCode.DEADLOCK
    blocked = {(b.stream, b.index, b.queue, b.reason) for b in err.blocked}
    assert blocked == {(L, 0, Queue.C2L, "pop"), (C, 1, Queue.L2C, "pop")}
    assert "load stream: instruction 0 (LOAD) waits for a token on c2l" in str(err)
    assert "compute stream: instruction 1 (LOAD) waits for a token on l2c" in str(err)


def test_push_onto_full_queue_blocks():
    cfg = TINY.replace(token_queue_depth=2)
    program = [noop(C).replace(push_prev=True)] * 3 + [Finish()]
    with pytest.raises(DeadlockError) as e:
        run(program, cfg)
    (b,) = e.value.blocked
    assert (b.stream, b.index, b.queue, b.reason) == (C, 2, Queue.C2L, "push")
    assert "waits for room in c2l" in str(e.value)
    # With a consumer the same pushes drain through the depth-2 queue.
    consumer = [noop(L).replace(pop_next=True)] * 2 + [noop(L).replace(pop_next=True, push_next=True)]
    run([noop(C).replace(push_prev=True)] * 3 + consumer + [Finish(pop_prev=True)], cfg)


def test_fetch_stall_on_full_command_queue_is_reported():
    loads = [noop(L).replace(pop_next=True)] * 2 + [noop(L).replace(pop_next=True, push_next=True)]
    pushes = [noop(C).replace(push_prev=True)] * 3
    program = loads + pushes + [Finish(pop_prev=True)]
    run(program)                                           # queues deep enough: fine
    with pytest.raises(DeadlockError, match=r"fetch stalled at instruction 2: the load command queue is full \(2\)"):
        run(program, TINY.replace(cmd_queue_depth=2))
    # Without command queues a stream holds one instruction: the first LOAD waits for a token, the second stalls fetch.
    with pytest.raises(DeadlockError, match=r"fetch stalled at instruction 1: the load command queue is full \(1\)"):
        run(program, TINY.replace(cmd_queue_depth=0))


def test_tokens_left_over_at_finish():
    with pytest.raises(ProtocolError, match=r"instruction 1: FINISH with tokens left over: c2s=1") as e:
        run([Gemm(push_next=True), Finish()])
    assert e.value.code == ErrorCode.PROTOCOL and e.value.index == 1


def test_pop_pending_at_finish():
    with pytest.raises(ProtocolError) as e:
        run([Store(pop_prev=True), Finish()])
    assert "streams not drained: store has 1 instruction(s) pending" in str(e.value)
    (b,) = e.value.blocked
    assert (b.stream, b.index, b.queue) == (S, 0, Queue.C2S)


def test_work_not_ordered_before_finish():
    # The store is runnable but nothing orders it before FINISH.
    with pytest.raises(ProtocolError, match="store has 1 instruction"):
        run([Store(), Finish()])
    run([Store(push_prev=True), Finish(pop_next=True)])


def test_missing_finish_and_trailing_instructions():
    with pytest.raises(ProtocolError, match="the program ended without FINISH"):
        run([Gemm()])
    with pytest.raises(ProtocolError, match=r"1 instruction\(s\) after FINISH"):
        run([Finish(), Gemm()])


def test_result_does_not_depend_on_priority():
    program = [noop(L).replace(push_next=True), noop(C).replace(pop_prev=True), Finish()]
    orders = set()
    for priority in [(C, S, L), (L, C, S), (S, L, C)]:
        sim = FunctionalSimulator(TINY, priority=priority)
        sim.run(program)
        orders.add(tuple(sim.executed))
    assert orders == {(0, 1, 2)}
    with pytest.raises(ValueError, match="priority must order every stream once"):
        FunctionalSimulator(TINY, priority=(C, C, L))


def _error(program, cfg=TINY, **kw):
    with pytest.raises(ExecutionError) as e:
        run(program, cfg, **kw)
    return e.value


def test_illegal_encodings_are_rejected_at_fetch():
    cfg = TINY
    raw = isa.encode_program([Finish()], cfg)
    err = _error(opcode_only(ILLEGAL_OPCODES[0]) + raw)
    assert (err.code, err.index) == (ErrorCode.ILLEGAL_OPCODE, 0)
    assert _error([Gemm(), Load(memory_type=MemType.OUT), Finish()]).code == ErrorCode.ILLEGAL_MEMORY_TYPE
    assert _error([Store(memory_type=MemType.ACC), Finish()]).code == ErrorCode.ILLEGAL_MEMORY_TYPE
    assert _error([Alu(alu_op=5), Finish()]).code == ErrorCode.ILLEGAL_ALU_OP
    err = _error([Store(pop_next=True), Finish()])
    assert err.code == ErrorCode.ILLEGAL_DEPENDENCY and "store stream, which has no pop_next queue" in str(err)


def test_sram_range():
    depth = TINY.depth("inp")
    err = _error([Load(memory_type=MemType.UOP, sram_base=TINY.depth("uop") - 2, y_size=1, x_size=1,
                       x_pad1=2), Finish()])
    assert err.code == ErrorCode.SRAM_RANGE
    err = _error([Load(memory_type=MemType.INP, sram_base=depth - 1, y_size=1, x_size=1, x_pad0=1),
                  Load(memory_type=MemType.INP, x_size=0, push_next=True), Finish(pop_prev=True)])
    assert (err.code, err.index, err.stream) == (ErrorCode.SRAM_RANGE, 0, L)
    assert "touches inp entries [255, 257) but the buffer has 256" in str(err)
    err = _error([Store(sram_base=TINY.depth("acc") - 2, y_size=3, x_size=1, push_prev=True),
                  Finish(pop_next=True)])
    assert err.code == ErrorCode.SRAM_RANGE
    err = _error([Store(set_bias=True, sram_base=TINY.depth("acc"), push_prev=True), Finish(pop_next=True)])
    assert err.code == ErrorCode.SRAM_RANGE
    # Nothing moves when x_size is 0, so a no-op is never out of range.
    run([Load(memory_type=MemType.ACC, sram_base=depth - 1, y_size=9, x_pad0=9), Finish()])


def test_uop_and_index_range():
    assert _error([Gemm(uop_bgn=5, uop_end=3, iter_out=1, iter_in=1), Finish()]).code == ErrorCode.UOP_RANGE
    assert _error([Alu(uop_end=TINY.depth("uop") + 1), Finish()]).code == ErrorCode.UOP_RANGE
    acc = TINY.depth("acc")
    err = _error([Gemm(uop_end=1, iter_out=3, iter_in=1, dst_factor_out=acc // 2), Finish()])
    assert err.code == ErrorCode.INDEX_RANGE and "GEMM dst index reaches 256, beyond the acc buffer of 256" in str(err)
    err = _error([Gemm(uop_end=1, iter_out=1, iter_in=3, wgt_factor_in=TINY.depth("wgt") // 2), Finish()])
    assert err.code == ErrorCode.INDEX_RANGE and "wgt index reaches" in str(err)
    err = _error([Alu(uop_end=1, iter_out=2, iter_in=3, src_factor_out=acc // 2, src_factor_in=64), Finish()])
    assert err.code == ErrorCode.INDEX_RANGE and "ALU src index reaches 256, beyond the acc buffer of 256" in str(err)
    # ALU with an immediate never reads src, so its range does not matter.
    run([Alu(use_imm=True, uop_end=1, iter_out=3, iter_in=1, src_factor_out=acc // 2), Finish()])
    # A GEMM reset only writes dst.
    run([Gemm(reset=True, uop_end=1, iter_out=1, iter_in=3, src_factor_in=TINY.depth("inp") // 2), Finish()])


def test_misaligned_or_missing_program_is_a_bus_error():
    sim = FunctionalSimulator(TINY, dram_bytes=4096)
    sim.dram.write(64, isa.encode_program([Finish()], TINY))
    sim.run_dram(64, 1)
    for addr, count in ((72, 1), (4096 - 16, 2)):
        with pytest.raises(ExecutionError) as e:
            sim.run_dram(addr, count)
        assert e.value.code == ErrorCode.BUS_ERROR


def test_bus_error_and_stats_at_stop():
    err = _error([Gemm(), Load(memory_type=MemType.ACC, dram_base=4096, y_size=1, x_size=1), Finish()],
                 dram_bytes=4096)
    assert err.code == ErrorCode.BUS_ERROR and "outside memory" in str(err)
    assert err.stats.instructions["compute"] == 2


def test_a_store_reaching_into_the_program_stops_before_it_writes():
    """fsim reads the program once; the RTL fetches while it runs: a STORE into the program's own bytes
    is STORE_OVER_PROGRAM in both, before it writes. One byte of overlap at either end is enough, one
    byte away is not; a program not in DRAM (run from bytes) has nothing to guard."""
    cfg = TINY
    elem = cfg.elem_bytes("out")
    base = 64 * elem                                        # the program's first byte: element 64
    program = [noop(Stream.COMPUTE).replace(push_next=True), Store(dram_base=0, y_size=1, x_size=2, x_stride=2,
                                                                   pop_prev=True, push_prev=True),
               Finish(pop_next=True)]
    size = len(program) * isa.INSN_BYTES
    for first, stops in [(62, False), (63, True), (64 + -(-size // elem) - 1, True), (64 + -(-size // elem), False)]:
        insns = [program[0], program[1].replace(dram_base=first), program[2]]
        sim = FunctionalSimulator(cfg, dram_bytes=1 << 14)
        sim.dram.write(base, isa.encode_program(insns, cfg))
        if stops:
            with pytest.raises(ExecutionError) as e:
                sim.run_dram(base, len(insns))
            assert (e.value.code, e.value.index) == (ErrorCode.STORE_OVER_PROGRAM, 1)
            assert bytes(sim.dram.read(base, size)) == isa.encode_program(insns, cfg)
        else:
            sim.run_dram(base, len(insns))
        FunctionalSimulator(cfg, dram_bytes=1 << 14).run(insns)


def test_a_program_run_again_replays_the_same_run():
    """A program run again skips the queues and tokens (fsim keeps the order its instructions ran in): the same
    DRAM, counters and order as a fresh simulator's run, and the same error, index and counters where the
    second run fails (here the same words placed where their STORE reaches them)."""
    from tilewright.sim.fuzz import random_program
    image = random_program(TINY, 3)
    runs = []
    for sim in (FunctionalSimulator(TINY, dram_bytes=image.dram_bytes),) * 2 + (
            FunctionalSimulator(TINY, dram_bytes=image.dram_bytes),):
        sim.dram.write(0, image.dram)
        stats = sim.run_dram(image.insn_addr, image.insn_count)
        runs.append((stats.as_dict(), list(sim.executed), bytes(sim.dram.read(0, image.dram_bytes))))
    assert runs[0] == runs[1] == runs[2] and len(runs[0][1]) == image.insn_count
    base = 64 * TINY.elem_bytes("out")         # the STORE below reaches element 64 of DRAM
    program = isa.encode_program([noop(C).replace(push_next=True), Store(dram_base=63, y_size=1, x_size=2,
                                  x_stride=2, pop_prev=True, push_prev=True), Finish(pop_next=True)], TINY)
    errors = []
    sim, fresh = FunctionalSimulator(TINY, dram_bytes=1 << 14), FunctionalSimulator(TINY, dram_bytes=1 << 14)
    sim.dram.write(1024, program)
    sim.run_dram(1024, 3)                       # far from its STORE: runs, and its order is kept
    for s in (sim, fresh):
        s.dram.write(base, program)
        with pytest.raises(ExecutionError) as e:
            s.run_dram(base, 3)
        errors.append((e.value.code, e.value.index, e.value.stream, e.value.stats.as_dict(), list(s.executed)))
    assert errors[0] == errors[1] and errors[0][:2] == (ErrorCode.STORE_OVER_PROGRAM, 1)


@pytest.mark.parametrize("insn", [
    Gemm(uop_end=TINY.depth("uop"), iter_out=(1 << isa.LOOP_BITS) - 1, iter_in=(1 << isa.LOOP_BITS) - 1),
    Alu(alu_op=AluOp.SHR, uop_end=TINY.depth("uop"), iter_out=(1 << isa.LOOP_BITS) - 1,
        iter_in=(1 << isa.LOOP_BITS) - 1),
], ids=["gemm", "alu"])
def test_an_instruction_beyond_the_budget_stops_the_run_before_it_starts(insn):
    """A two-word program whose one instruction asks for 10**11 micro-ops: BUDGET at once, naming it; the
    budget can be set, and a program within it runs."""
    sim = FunctionalSimulator(TINY, dram_bytes=1 << 14)
    with pytest.raises(BudgetError) as e:
        sim.run([Gemm(uop_end=1), insn, Finish()])
    assert e.value.code is None and e.value.index == 1
    assert str(e.value).startswith("BUDGET: instruction 1: ") and "max_ops" in str(e.value)
    with pytest.raises(BudgetError):
        FunctionalSimulator(TINY, dram_bytes=1 << 14, max_ops=3).run([Gemm(uop_end=1, iter_out=4, iter_in=1), Finish()])
    FunctionalSimulator(TINY, dram_bytes=1 << 14, max_ops=5).run([Gemm(uop_end=1, iter_out=4, iter_in=1), Finish()])
    with pytest.raises(ValueError, match="max_ops must be a positive integer"):
        FunctionalSimulator(TINY, max_ops=0)


def test_long_alu_chains_cost_each_micro_op_once():
    """ALU micro-ops that reuse destinations and read each other's (the waves a vector op must be cut into)
    are found in one pass when the vectorised search would take many rounds: the same waves."""
    import numpy as np
    from tilewright.sim import fsim
    rng = np.random.default_rng(3)
    for _ in range(30):
        dst, src = rng.integers(0, 6, 60), rng.integers(0, 6, 60)
        for s in (src, None):
            levels = fsim._chain_levels(dst, s)
            waves = fsim._alu_waves(dst, s)
            assert [list(w) for w in np.split(np.argsort(levels, kind="stable"),
                                              np.flatnonzero(np.diff(np.sort(levels))) + 1)] == \
                   [list(np.arange(len(dst))[w]) for w in waves]
