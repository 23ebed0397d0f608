"""ALU lowering, and folding the loops around GEMM and ALU operations.

:func:`lower_alu` turns an ``alu``-marked elementwise nest on an accumulator
buffer into ALU operations. The stored value must be a chain of operations
applied to the element itself, in place: ``((acc + bias) · m) >> s``
clipped by ``min``/``max`` becomes ADD (vector), MUL, SHR, MAX and MIN,
each over the whole nest (elementwise operations commute across elements,
so the nest can be split per operation).

:func:`fold_loops` then fits each GEMM/ALU operation and the loops directly
around it into one instruction: the two largest loops whose index steps are
non-negative become ``iter_out``/``iter_in``, the others are unrolled into
micro-ops.
"""

import dataclasses
import itertools
import math

from tilewright.isa import IMM_BITS, SHIFT_BITS, AluOp
from tilewright.semantics import out_range

from .. import ir
from ..expr import Binary, Const, Load, Var, as_expr, evaluate, free_vars, linear, simplify, strip_casts, substitute
from ..schedule import ScheduleError

__all__ = ["AluLoweringError", "lower_alu", "fold_loops", "fuse_requant"]

_OPS = {"+": AluOp.ADD, "*": AluOp.MUL, "min": AluOp.MIN, "max": AluOp.MAX, ">>": AluOp.SHR}
_COMMUTATIVE = {"+", "*", "min", "max"}
IMM_MIN, IMM_MAX = -(1 << (IMM_BITS - 1)), (1 << (IMM_BITS - 1)) - 1


class AluLoweringError(ScheduleError):
    """An epilogue the ALU cannot compute in place."""


def _is_target(e, target):
    return isinstance(e, Load) and e.source is target.source and ir.same_indices(e.indices, target.indices)


def _mentions(e, buffer):
    if isinstance(e, Load):
        return e.source is buffer or any(_mentions(i, buffer) for i in e.indices)
    return any(_mentions(getattr(e, a), buffer) for a in ("a", "b", "value", "cond", "then", "otherwise")
               if hasattr(e, a))


def _chain(e, target, name):
    """``[(AluOp, operand)]`` applying which to ``target`` in order yields ``e``."""
    e = strip_casts(e)
    if _is_target(e, target):
        return []
    if not (isinstance(e, Binary) and e.op in ("+", "-", "*", ">>", "<<", "min", "max")):
        raise AluLoweringError(f"{name}: the ALU cannot compute {e}")
    inner, operand = strip_casts(e.a), strip_casts(e.b)
    if not _mentions(inner, target.source):
        if e.op not in _COMMUTATIVE:
            raise AluLoweringError(f"{name}: {e} must apply to the accumulator on its left")
        inner, operand = operand, inner
    if _mentions(operand, target.source):
        raise AluLoweringError(f"{name}: {e} uses the accumulator on both sides; the ALU works in place")
    if isinstance(operand, Const):
        value = operand.value
        op = {"-": AluOp.ADD, "<<": AluOp.SHR}.get(e.op, _OPS.get(e.op))
        if e.op in ("-", "<<"):
            value = -value
        if not IMM_MIN <= value <= IMM_MAX:
            raise AluLoweringError(f"{name}: immediate {value} does not fit the ALU's {IMM_BITS}-bit immediate")
        return _chain(inner, target, name) + [(op, value)]
    if e.op in ("-", "<<", ">>"):
        raise AluLoweringError(f"{name}: {e.op} takes an immediate operand on the ALU")
    if not (isinstance(operand, Load) and operand.source.scope == "acc"):
        raise AluLoweringError(f"{name}: vector operands must be accumulator buffers, found {operand}")
    return _chain(inner, target, name) + [(_OPS[e.op], operand)]


def lower_alu(func, cfg):
    def rewrite(node):
        if isinstance(node, ir.Attr) and node.key == "pragma" and node.value == "alu":
            return _nest_to_alu(node.body)
        return None
    return func.with_body(ir.transform(func.body, rewrite))


def _nest_to_alu(nest):
    loops, node = ir.loop_nest(nest)
    if not isinstance(node, ir.Store) or node.buffer.scope != "acc":
        raise AluLoweringError(f"an alu nest must store one accumulator element, found:\n{node}")
    acc = node.buffer
    extents = dict(loops)
    elem = node.indices[-2:]
    if not all(isinstance(v, Var) and extents.get(v) == n for v, n in zip(elem, acc.shape[-2:])):
        raise AluLoweringError(f"{acc.name}: the ALU works on whole elements; loop over both element "
                               f"dimensions innermost")
    target = Load(acc, node.indices)
    steps = _chain(node.value, target, acc.name)
    if not steps:
        raise AluLoweringError(f"{acc.name}: nothing to compute")
    outer = [(v, n) for v, n in loops if v not in elem]
    nests = []
    for op, operand in steps:
        if isinstance(operand, Load):
            if any(i is not e for i, e in zip(operand.indices[-2:], elem)):
                raise AluLoweringError(f"{operand.source.name}: vector operand must be indexed "
                                       f"[.., b, o] like the accumulator")
            alu = ir.Alu(op, acc, [ir.Uop(acc.elem_index(node.indices), operand.source.elem_index(operand.indices))],
                         src=operand.source)
        else:
            alu = ir.Alu(op, acc, [ir.Uop(acc.elem_index(node.indices))], imm=operand)
        for v, n in reversed(outer):
            alu = ir.For(v, n, alu)
        nests.append(alu)
    return ir.seq(nests)


def _leaf(stmt, kind):
    """The single ``kind`` operation inside a perfect loop nest, or None."""
    leaf = ir.loop_nest(stmt)[1]
    return leaf if isinstance(leaf, kind) else None


def _nest_elements(stmt):
    """Elements a loop nest around one GEMM/ALU touches: its loop extents times its micro-ops."""
    loops, leaf = ir.loop_nest(stmt)
    return math.prod(n for _, n in loops) * len(leaf.uops)


def fuse_requant(func, cfg):
    """Move a requantizing ALU tail (bias, MUL, SHR, then a clip to the output range) into the STORE.

    When the last ALU operations on a buffer before the DMA store that drains
    it are ``[MUL m] [SHR s]`` and ``MIN hi``/``MAX lo`` with ``hi`` the
    largest output value and ``lo`` 0 or the smallest, and nothing reads the
    buffer after the store, the store requantizes on the way out instead:
    the store stream does that work concurrently with compute. A vector ADD
    before them whose operand is one element per store (a bias broadcast
    over the tile) moves into the store too (ADDs commute, so it may sit
    before other vector ADDs, such as a residual). On a config with
    ``per_channel_store``, a vector MUL by one element per store (a
    per-channel scale) right before that bias ADD, or before the tail when
    there is no bias, moves into the store as well: ``clip((acc · scale +
    bias) >> shift)``. A config without the requantizing STORE
    (``requant_store``) keeps the ALU operations.
    """
    if not cfg.requant_store:
        return func
    lo, hi = out_range(cfg.out_width)

    def fuse(seq):
        body, changed, i = list(seq.body), False, 0
        while i < len(body):
            dma = _leaf(body[i], ir.Dma)
            fused = _requant_tail(body, i, dma, lo, hi, cfg.per_channel_store) if dma is not None else None
            if fused:
                requant, used, store = fused
                body[i] = _replace_leaf(store, lambda d: dataclasses.replace(d, requant=requant))
                for k in sorted(used, reverse=True):
                    del body[k]
                i -= len(used)
                changed = True
            i += 1
        return ir.seq(body) if changed else None

    def rewrite(node):
        return fuse(node) if isinstance(node, ir.Seq) else None
    return func.with_body(ir.transform(func.body, rewrite))


def _requant_tail(body, i, dma, lo, hi, per_channel):
    """``(Requant, indices of the ALU statements it replaces, store nest)`` if ``body[i]`` can requantize what
    precedes it (the store nest is split into one store per row when that lets it add the bias, and with
    ``per_channel`` multiply by the scale)."""
    buf = dma.sram
    if dma.direction != "store" or dma.requant or any(buf in ir.uses(s)[1] for s in body[i + 1:]):
        return None
    tail = []
    for stmt in reversed(body[:i]):
        alu = _leaf(stmt, ir.Alu)
        if alu is None or alu.acc is not buf or alu.imm is None or _nest_elements(stmt) != buf.elements:
            break
        tail.insert(0, (alu.op, alu.imm))
    clip = dict(tail[-2:])
    if len(tail) < 2 or set(clip) != {AluOp.MIN, AluOp.MAX} or clip[AluOp.MIN] != hi \
            or clip[AluOp.MAX] not in (0, lo):
        return None
    rest, mul, shift = tail[:-2], 1, 0
    if rest and rest[-1][0] == AluOp.SHR and 0 <= rest[-1][1] < (1 << SHIFT_BITS):     # the STORE's shift field
        shift = rest.pop()[1]
    if rest and rest[-1][0] == AluOp.MUL and not (per_channel and rest[-1][1] == 0):    # (mul 0: the scale's)
        mul = rest.pop()[1]
    used = list(range(i - (len(tail) - len(rest)), i))
    requant = ir.Requant(mul, shift, clip[AluOp.MAX] == 0)
    if rest:            # something left between the vector operations and the fused tail
        return requant, used, body[i]

    def vector(k, op):
        alu = _leaf(body[k], ir.Alu) if k >= 0 else None
        return alu is not None and alu.acc is buf and alu.op == op and alu.imm is None \
            and _nest_elements(body[k]) == buf.elements
    adds = []           # the vector ADDs right before the tail, nearest first
    while vector(used[0] - 1 - len(adds), AluOp.ADD):
        adds.append(used[0] - 1 - len(adds))
    # Per channel: (acc · scale + bias) >> shift, with at most the bias between the scale's MUL and the tail.
    mul_at = used[0] - 1 - len(adds)
    if per_channel and mul == 1 and len(adds) <= 1 and vector(mul_at, AluOp.MUL):
        for store in _store_splits(body[i]):
            scale = _operand_index(body[mul_at], store)
            bias = _operand_index(body[adds[0]], store) if adds else None
            if scale is not None and (bias is not None or not adds):
                fused = dataclasses.replace(requant, mul=0, scale=_leaf(body[mul_at], ir.Alu).src, scale_index=scale)
                if adds:
                    fused = dataclasses.replace(fused, bias=_leaf(body[adds[0]], ir.Alu).src, bias_index=bias)
                return fused, [mul_at] + adds + used, store
    for k in adds:
        for store in _store_splits(body[i]):
            index = _operand_index(body[k], store)
            if index is not None:
                bias = _leaf(body[k], ir.Alu).src
                return dataclasses.replace(requant, bias=bias, bias_index=index), [k] + used, store
    return requant, used, body[i]


def _store_splits(store):
    """The store nest, then finer versions of it: one DMA per row, then per equal piece of a row.

    A tile's output channel blocks lie in different rows, or in pieces of one
    row when the tile spans whole image rows; each piece can then add its own
    bias element.
    """
    yield store
    dma = _leaf(store, ir.Dma)
    rows, cols = simplify(as_expr(dma.y_size)), simplify(as_expr(dma.x_size))
    if not (isinstance(rows, Const) and isinstance(cols, Const)):
        return
    if rows.value > 1:
        r = Var(f"{dma.sram.name}.row")
        store = _replace_leaf(store, lambda d: ir.For(r, rows.value, dataclasses.replace(
            d, sram_index=d.sram_index + r * d.x_size, dram_index=d.dram_index + r * d.x_stride, y_size=1)))
        yield store
    for piece in range(cols.value // 2, 7, -1):        # pieces of at least 8 entries
        if cols.value % piece == 0:
            p = Var(f"{dma.sram.name}.piece")
            yield _replace_leaf(store, lambda d: ir.For(p, cols.value // piece, dataclasses.replace(
                d, sram_index=d.sram_index + p * piece, dram_index=d.dram_index + p * piece, x_size=piece,
                x_stride=piece)))


def _operand_index(add, store):
    """The operand element (an expression of the store's loops, and of loops around the tile when the operand
    is held for more than one tile) with which ALU nest ``add`` (a vector ADD or MUL) combines every element a
    store iteration reads, or None when it is not one element per store iteration."""
    add_loops, alu = ir.loop_nest(add)
    store_loops, dma = ir.loop_nest(store)
    dst, src = as_expr(alu.uops[0].dst), as_expr(alu.uops[0].src)
    first, count = as_expr(dma.sram_index), as_expr(dma.y_size) * as_expr(dma.x_size)
    # (an operand held for a whole layer is indexed by loops around the tile's, too: that part is fixed here)
    add_vars = {v for v, _ in add_loops}
    fixed = simplify(substitute(src, {v: 0 for v in add_vars}))
    src = simplify(src - fixed)
    if len(alu.uops) != 1 or alu.loops or not (free_vars(dst) | free_vars(src)) <= add_vars \
            or not (free_vars(first) | free_vars(count)) <= {v for v, _ in store_loops}:
        return None
    operand = {}                # accumulator element -> operand element
    for values in itertools.product(*(range(n) for _, n in add_loops)):
        env = dict(zip([v for v, _ in add_loops], values))
        operand[evaluate(dst, env)] = evaluate(src, env)
    index = {}                  # store iteration -> operand element
    for values in itertools.product(*(range(n) for _, n in store_loops)):
        env = dict(zip([v for v, _ in store_loops], values))
        start = evaluate(first, env)
        seen = {operand.get(e) for e in range(start, start + evaluate(count, env))}
        if len(seen) != 1 or None in seen:
            return None
        index[values] = seen.pop()
    # The operand element as an affine function of the store's loop variables, checked everywhere.
    zero = (0,) * len(store_loops)
    steps = [index[tuple(int(j == k) for j in range(len(store_loops)))] - index[zero] if n > 1 else 0
             for k, (_, n) in enumerate(store_loops)]
    if any(sum(s * x for s, x in zip(steps, values)) + index[zero] != b for values, b in index.items()):
        return None
    expr = Const(index[zero]) + fixed
    for (v, _), s in zip(store_loops, steps):
        expr = expr + v * s
    return simplify(expr)


def _replace_leaf(stmt, fn):
    if isinstance(stmt, ir.For):
        return ir.For(stmt.var, stmt.extent, _replace_leaf(stmt.body, fn), stmt.kind)
    return fn(stmt)


def fold_loops(func, cfg, max_uops=None):
    """Fold the loops around each GEMM/ALU into it (two as hardware loops, the rest as micro-ops)."""
    limit = max_uops or cfg.uop_depth

    def fold(stmt):
        if isinstance(stmt, ir.For) and stmt.kind == "serial":
            loops, op = ir.loop_nest(stmt, "serial")
            if isinstance(op, (ir.Gemm, ir.Alu)) and not op.loops:
                return _fold(op, loops, limit)
            return ir.For(stmt.var, stmt.extent, fold(stmt.body), stmt.kind)
        if isinstance(stmt, ir.For):
            return ir.For(stmt.var, stmt.extent, fold(stmt.body), stmt.kind)
        if isinstance(stmt, ir.Seq):
            return ir.seq([fold(s) for s in stmt.body])
        if isinstance(stmt, (ir.Allocate, ir.Attr)):
            return type(stmt)(*(fold(getattr(stmt, f)) if f == "body" else getattr(stmt, f)
                                for f in stmt.__dataclass_fields__))
        return stmt
    return func.with_body(fold(func.body))


def _steps(op, var):
    """Index steps of ``var`` in every micro-op field, or None if one is not affine."""
    steps = set()
    for u in op.uops:
        for field in ("dst", "src", "wgt"):
            form = linear(simplify(getattr(u, field))) if not isinstance(getattr(u, field), int) else ({}, 0)
            if form is None:
                return None
            steps.add((field, form[0].get(var, 0)))
    return steps


def _fold(op, loops, max_uops):
    candidates = []
    for v, n in loops:
        steps = _steps(op, v)
        if steps is not None and all(c >= 0 for _, c in steps) and len({f for f, _ in steps}) == len(steps):
            candidates.append((n, -loops.index((v, n)), v))
    folded = {v for _, _, v in sorted(candidates, reverse=True)[:2]}
    kept = [(v, n) for v, n in loops if v in folded]
    unrolled = [(v, n) for v, n in loops if v not in folded]
    count = len(op.uops)
    for _, n in unrolled:
        count *= n
    if count > max_uops:
        raise ScheduleError(f"{op.acc.name}: {count} micro-ops in one instruction exceed the uop buffer "
                            f"({max_uops}); use smaller tiles")
    uops = []
    for values in itertools.product(*(range(n) for _, n in unrolled)):
        env = {v: k for (v, _), k in zip(unrolled, values)}
        for u in op.uops:
            uops.append(ir.Uop(*(simplify(substitute(getattr(u, f), env)) if not isinstance(getattr(u, f), int)
                                 else getattr(u, f) for f in ("dst", "src", "wgt"))))
    return dataclasses.replace(op, uops=uops, loops=kept)
