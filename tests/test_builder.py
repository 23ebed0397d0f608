"""ProgramBuilder: dependency flags from push/pop calls."""

import pytest

from tilewright.builder import ProgramBuilder, noop
from tilewright.isa import Finish, Gemm, Load, MemType, Store, Stream

L, C, S = Stream.LOAD, Stream.COMPUTE, Stream.STORE


def test_push_marks_last_instruction_and_pop_folds_into_next():
    b = ProgramBuilder()
    b.emit(Load(memory_type=MemType.INP, x_size=1, y_size=1))
    b.push(L, C)
    b.pop(L, C)
    b.emit(Gemm())
    b.push(C, S)
    b.pop(C, S)
    b.emit(Store(x_size=1, y_size=1))
    b.push(S, C)
    b.pop(S, C)
    program = b.finish()
    assert program[0].push_next and program[1].pop_prev and program[1].push_next
    assert program[2].pop_prev and program[2].push_prev
    assert program[3] == Finish(pop_next=True)


def test_taken_flags_and_repeated_pops_use_noops():
    b = ProgramBuilder()
    b.push(L, C)                       # nothing issued yet on load: a no-op carries it
    b.push(L, C)                       # flag already taken: another no-op
    b.pop(L, C)
    b.pop(L, C)                        # second pending pop of the same queue: no-op first
    program = b.finish()
    assert program[:2] == [noop(L).replace(push_next=True)] * 2
    assert program[2] == noop(C).replace(pop_prev=True)
    assert program[3] == Finish(pop_prev=True)


def test_push_after_pending_pop_waits_for_it():
    b = ProgramBuilder()
    b.emit(Store(x_size=1, y_size=1))
    b.pop(C, S)                        # the store stream must wait before it signals
    b.push(S, C)
    program = b.finish()
    assert program[0] == Store(x_size=1, y_size=1)
    assert program[1] == noop(S).replace(pop_prev=True, push_prev=True)


def test_pending_pop_for_other_stream_at_finish_is_an_error():
    b = ProgramBuilder()
    b.pop(C, S)
    with pytest.raises(ValueError, match="pops pending for the store stream at FINISH: pop_prev"):
        b.finish()


def test_no_queue_between_load_and_store():
    with pytest.raises(ValueError, match="no token queue from LOAD to STORE"):
        ProgramBuilder().push(L, S)


def test_push_after_waits_for_one_instruction_not_the_whole_stream():
    b = ProgramBuilder()
    first = b.emit(Gemm())
    b.emit(Gemm(reset=True))
    b.emit(noop(L))
    assert b.push_after(C, L, first) == first           # the first GEMM pushes, not the last
    assert b.push_after(C, L, first) == 1               # tokens stay in order: the next one pushes
    assert b.push_after(C, L, first) == 3               # none left: a no-op at the end
    for _ in range(3):
        b.pop(C, L)
        b.emit(noop(L))
    program = b.finish()
    assert [bool(i.push_prev) for i in program[:4]] == [True, True, False, True]
    assert sum(bool(i.pop_next) for i in program) == 3
