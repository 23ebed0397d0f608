"""Drop accumulator resets: the first step of each reduction overwrites instead.

A reduction lowers to ``acc = 0`` (a reset GEMM, one micro-op per
accumulator row) followed by ``acc += inp · wgt``. The reset costs the
compute stream one cycle per row — a fifth of a 1×1 convolution with 64
input channels. This pass removes it: in the first accumulating GEMM that
follows, the micro-ops that write each row first become a GEMM with
``overwrite`` (``acc = inp · wgt``), the others stay accumulating.

Runs after :func:`fold_loops`, so each GEMM is one instruction-to-be: two
folded loops and a list of micro-ops. The rewrite is exact when the first
writes of every row are exactly the instances of some micro-ops (over all
loop iterations) and the reset zeroes exactly the rows the GEMM writes;
both are checked by enumeration, otherwise the reset stays. A loop that
holds the first GEMM (the reduction loop over input-channel tiles) is
peeled so that its first iteration can differ from the rest.
"""

import dataclasses
import itertools

from .. import ir
from ..expr import evaluate, free_vars

__all__ = ["fuse_reset"]


def fuse_reset(func, cfg=None):
    def rewrite(node):
        if not isinstance(node, ir.Seq):
            return None
        body, changed = list(node.body), False
        for i, stmt in enumerate(body):
            if isinstance(stmt, ir.Gemm) and stmt.reset:
                fused = _fuse_following(stmt, body[i + 1:])
                if fused is not None:
                    body[i:] = [None] + fused
                    changed = True
        return ir.seq(body) if changed else None
    return func.with_body(ir.transform(func.body, rewrite))


def _fuse_following(reset, stmts):
    """``stmts`` with their first GEMM on ``reset.acc`` split into overwrite + accumulate, or None."""
    for k, stmt in enumerate(stmts):
        if reset.acc not in ir.uses(stmt)[1]:
            continue
        replaced = _split_first(reset, stmt)
        return None if replaced is None else stmts[:k] + [replaced] + stmts[k + 1:]
    return None


def _split_first(reset, stmt):
    """``stmt`` (which holds the first use of the accumulator) rewritten, or None."""
    if isinstance(stmt, ir.Gemm):
        return _split_gemm(reset, stmt)
    if isinstance(stmt, ir.Allocate):
        inner = _split_first(reset, stmt.body)
        return None if inner is None else ir.Allocate(stmt.buffer, inner)
    if isinstance(stmt, ir.Seq):
        fused = _fuse_following(reset, stmt.body)
        return None if fused is None else ir.seq(fused)
    if isinstance(stmt, ir.For) and stmt.kind == "serial":
        first = _split_first(reset, _at(stmt.body, stmt.var, 0))
        if first is None:
            return None
        if stmt.extent == 1:
            return first
        rest = ir.For(stmt.var, stmt.extent - 1, _at(stmt.body, stmt.var, stmt.var + 1))
        return ir.seq([first, rest])
    return None


def _at(stmt, var, value):
    """``stmt`` with loop variable ``var`` replaced by ``value`` (an expression or int)."""
    return ir.substitute_leaves(stmt, {var: value})


def _split_gemm(reset, gemm):
    if gemm.reset or gemm.overwrite or gemm.acc is not reset.acc:
        return None
    reset_rows = _rows(reset)
    order = _rows(gemm)
    if reset_rows is None or order is None or set(reset_rows) != set(order):
        return None
    # Instance k is (iteration k // n, micro-op k % n); find each row's first writer.
    n = len(gemm.uops)
    first = {}
    for k, row in enumerate(order):
        first.setdefault(row, k)
    firsts = set(first.values())
    heads = {k % n for k in firsts}
    iterations = len(order) // n
    if len(firsts) != iterations * len(heads):      # some instance of a head micro-op is not a first write
        return None
    head = [u for j, u in enumerate(gemm.uops) if j in heads]
    tail = [u for j, u in enumerate(gemm.uops) if j not in heads]
    out = [dataclasses.replace(gemm, uops=head, overwrite=True)]
    if tail:
        out.append(dataclasses.replace(gemm, uops=tail))
    return ir.seq(out)


def _rows(gemm):
    """Destination rows of every instance, in execution order; None if they depend on outer loops."""
    loop_vars = {v for v, _ in gemm.loops}
    if any(not isinstance(u.dst, int) and not free_vars(u.dst) <= loop_vars for u in gemm.uops):
        return None
    rows = []
    for values in itertools.product(*(range(n) for _, n in gemm.loops)):
        env = dict(zip((v for v, _ in gemm.loops), values))
        rows.extend(u.dst if isinstance(u.dst, int) else evaluate(u.dst, env) for u in gemm.uops)
    return rows
