"""What code generation works on between unrolling and tokens: one item per instruction to be, with the
SRAM intervals it reads and writes (:class:`Access`), which the token analysis and
:mod:`.ends` (latency hiding, part 3) compare."""

from dataclasses import dataclass
from functools import cached_property

from tilewright.isa import Gemm, Stream

__all__ = ["Access", "DmaItem", "FIELDS", "LoopItem"]

C = Stream.COMPUTE


@dataclass
class Access:
    """What one instruction reads and writes: lists of (memory, lo, hi) intervals."""
    stream: Stream
    reads: list
    writes: list

    def conflicts(self, other):
        def hit(a, b):
            return any(m == n and lo <= hi2 and lo2 <= hi for m, lo, hi in a for n, lo2, hi2 in b)
        return hit(self.writes, other.reads + other.writes) or hit(self.reads, other.writes)


FIELDS = ("dst", "src", "wgt")


@dataclass(frozen=True)
class LoopItem:
    """A GEMM or ALU before its micro-ops are placed: the kernel (each micro-op's SRAM indices at
    loop position 0), the loop fields and the instruction's other fields."""
    kind: type
    kernel: tuple
    loops: dict
    fields: dict

    def instruction(self, uop_bgn, uop_end):
        return self.kind(uop_bgn=uop_bgn, uop_end=uop_end, **self.loops, **self.fields)

    @cached_property
    def access(self):
        """The SRAM intervals it reads and writes over all loop positions."""
        steps = (self.loops["iter_out"] - 1, self.loops["iter_in"] - 1)
        lo, hi = {}, {}
        for i, f in enumerate(FIELDS):
            span = steps[0] * self.loops.get(f"{f}_factor_out", 0) + steps[1] * self.loops.get(f"{f}_factor_in", 0)
            lo[f], hi[f] = min(u[i] for u in self.kernel), max(u[i] for u in self.kernel) + span
        writes = [("acc", lo["dst"], hi["dst"]), ("out", lo["dst"], hi["dst"])]
        if self.kind is Gemm:
            reads = [] if self.fields["reset"] else [("inp", lo["src"], hi["src"]), ("wgt", lo["wgt"], hi["wgt"])]
        else:
            reads = [("acc", lo["dst"], hi["dst"])]
            if not self.fields["use_imm"]:
                reads.append(("acc", lo["src"], hi["src"]))
        return Access(C, reads, writes)

    @cached_property
    def rows_written(self):
        """The accumulator rows it writes, exactly."""
        n_out, n_in = self.loops["iter_out"], self.loops["iter_in"]
        f_out, f_in = self.loops["dst_factor_out"], self.loops["dst_factor_in"]
        return {u[0] + o * f_out + i * f_in for u in self.kernel for o in range(n_out) for i in range(n_in)}

    def split_outer(self, parts):
        """The same work as ``min(parts, iter_out)`` ops over consecutive runs of outer-loop iterations, as
        even as they go (the first ones one longer)."""
        n = self.loops["iter_out"]
        parts = min(parts, n)
        sizes = [n // parts + (k < n % parts) for k in range(parts)]
        starts = [sum(sizes[:k]) for k in range(parts)]
        steps = [self.loops.get(f"{f}_factor_out", 0) for f in FIELDS]
        return [LoopItem(self.kind, tuple(tuple(x + o * step for x, step in zip(u, steps)) for u in self.kernel),
                         self.loops | {"iter_out": size}, self.fields) for o, size in zip(starts, sizes)]


@dataclass(frozen=True)
class DmaItem:
    """A LOAD or STORE with what it touches. ``reusable``: a LOAD from an input tensor, skipped when the
    same data is still in place; ``whole``: the LOAD this one is a piece of."""
    insn: object
    access: Access
    reusable: bool
    whole: "DmaItem" = None
