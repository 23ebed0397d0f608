"""Building instruction streams with dependency tokens.

:class:`ProgramBuilder` appends instructions in program order and turns
"stream A must finish what it has issued before stream B goes on" into the
dependency flags of the ISA: :meth:`~ProgramBuilder.push` marks the last
instruction of the producing stream, :meth:`~ProgramBuilder.pop` folds a
pending pop into the consuming stream's next instruction. Where a flag is
already taken, a no-op instruction of that stream carries the token (an
instruction whose ``x_size`` is 0 moves nothing).
"""

from .isa import Finish, Load, MemType, Stream, Store, queue_of

__all__ = ["ProgramBuilder", "noop"]


def noop(stream):
    """An instruction of ``stream`` that does nothing but carry dependency flags."""
    return {Stream.LOAD: Load(memory_type=MemType.INP),
            Stream.COMPUTE: Load(memory_type=MemType.UOP),
            Stream.STORE: Store(memory_type=MemType.OUT)}[Stream(stream)]


def _flag(kind, src, dst):
    """The flag name a ``kind`` ("pop"/"push") between streams src → dst uses on the acting side."""
    acting, other = (dst, src) if kind == "pop" else (src, dst)
    side = "next" if other > acting else "prev"
    flag = f"{kind}_{side}"
    if abs(src - dst) != 1 or queue_of(acting, flag) is None:
        raise ValueError(f"no token queue from {Stream(src).name} to {Stream(dst).name}")
    return flag


class ProgramBuilder:
    """Accumulates one program (a list of instructions) in fetch order."""

    def __init__(self):
        self.instructions = []
        self._last = {}                                  # stream -> index of its last instruction
        self._pending = {s: set() for s in Stream}       # pop flags for a stream's next instruction
        self._last_push = {}                             # (src, dst) -> index of the last push

    def emit(self, insn):
        """Append ``insn``, carrying the pops pending for its stream; returns its index."""
        stream = insn.stream
        pending = self._pending[stream]
        if pending:
            insn = insn.replace(**dict.fromkeys(pending, True))
            pending.clear()
        self.instructions.append(insn)
        self._last[stream] = len(self.instructions) - 1
        return self._last[stream]

    def push(self, src, dst):
        """Send a token src → dst once everything ``src`` has been given so far is done."""
        src = Stream(src)
        if self._pending[src]:       # a pending pop must take effect first: a no-op of its own
            return self.push_after(src, dst, len(self.instructions))
        return self.push_after(src, dst, self._last.get(src, len(self.instructions)))

    def push_after(self, src, dst, index):
        """Send a token src → dst once ``src``'s instruction at ``index`` (or its first one after) is done.

        Tokens of a queue are consumed in order, so the push goes on the first
        instruction of ``src`` at or after ``index`` that comes after the
        queue's previous push and has the flag free; past the end, a no-op
        carries it. Returns the index of the instruction that pushes.
        """
        src, dst = Stream(src), Stream(dst)
        flag = _flag("push", src, dst)
        start = max(index, self._last_push.get((src, dst), -1) + 1)
        for k in range(start, len(self.instructions)):
            insn = self.instructions[k]
            if insn.stream == src and not getattr(insn, flag):
                break
        else:
            k = self.emit(noop(src))
        self.instructions[k] = self.instructions[k].replace(**{flag: True})
        self._last_push[(src, dst)] = k
        return k

    def pop(self, src, dst):
        """Make ``dst``'s next instruction wait for a token from ``src``."""
        flag = _flag("pop", src, dst)
        pending = self._pending[Stream(dst)]
        if flag in pending:
            self.emit(noop(dst))
        pending.add(flag)

    def finish(self):
        """Append FINISH (with any pops pending for compute) and return the instruction list."""
        self.emit(Finish())
        for stream, pending in self._pending.items():
            if pending:
                raise ValueError(f"pops pending for the {stream.name.lower()} stream at FINISH: "
                                 f"{', '.join(sorted(pending))}")
        return self.instructions
