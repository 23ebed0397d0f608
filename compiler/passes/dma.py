"""DMA injection: copy nests marked ``dma_copy`` become 2D strided DMA operations.

A copy nest moves whole elements (its two innermost buffer dimensions)
between DRAM and an SRAM buffer. The innermost loops that are contiguous in
both memories form a row (``x``); the next ones a column of rows (``y``)
with a DRAM row stride; any loops left outside stay loops around the DMA.
Zero padding written as ``select(in_bounds, src[...], 0)`` (from
``te.pad``) becomes the LOAD's pad fields: bounds on the row and column
loops turn into pad counts evaluated per tile.
"""

from tilewright.isa import MemType

from .. import ir
from ..expr import (Binary, Const, Load, Select, Var, as_expr, free_vars, linear, max_, min_, simplify,
                    strip_casts, substitute)
from ..schedule import ScheduleError

__all__ = ["DmaError", "inject_dma"]


class DmaError(ScheduleError):
    """A copy that the DMA engine cannot perform."""


def inject_dma(func, cfg):
    """Replace every ``dma_copy`` nest of ``func`` by :class:`ir.Dma` operations."""
    def rewrite(node):
        if isinstance(node, ir.Attr) and node.key == "pragma" and node.value == "dma_copy":
            return _copy_to_dma(node.body, cfg)
        return None
    return func.with_body(ir.transform(func.body, rewrite))


def _bounds(cond, loop_vars):
    """Per loop variable, (lower, upper) bounds ``lower <= v < upper`` that ``cond`` imposes."""
    terms, stack = [], [cond]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "and":
            stack += [e.a, e.b]
        else:
            terms.append(e)
    bounds = {}
    for t in terms:
        if not (isinstance(t, Binary) and t.op in ("<", "<=", ">", ">=")):
            raise DmaError(f"padding condition {t} is not a comparison")
        form = linear(t.a - t.b)
        vars_here = [v for v in (form[0] if form else {}) if v in loop_vars]
        if form is None or len(vars_here) != 1 or form[0][vars_here[0]] != 1:
            raise DmaError(f"padding condition {t} must bound one loop variable with coefficient 1")
        v = vars_here[0]
        rest = simplify(t.a - t.b - v)           # v + rest  (op)  0
        lo, hi = bounds.get(v, (None, None))
        if t.op == ">=":
            lo = simplify(-rest)
        elif t.op == ">":
            lo = simplify(1 - rest)
        elif t.op == "<":
            hi = simplify(-rest)
        else:
            hi = simplify(1 - rest)
        bounds[v] = (lo, hi)
    return bounds


def _memory(direction, sram, dram, cfg):
    if direction == "store":
        return MemType.OUT
    if sram.scope == "acc":
        return MemType.ACC if dram.dtype == f"int{cfg.acc_width}" else MemType.ACC8
    return {"inp": MemType.INP, "wgt": MemType.WGT}[sram.scope]


def _copy_to_dma(nest, cfg):
    loops, node = ir.loop_nest(nest)
    if not isinstance(node, ir.Store):
        raise DmaError(f"a dma_copy nest must end in one element copy, found:\n{node}")
    value = strip_casts(node.value)
    cond = None
    if isinstance(value, Select):
        if not (isinstance(value.otherwise, Const) and value.otherwise.value == 0):
            raise DmaError(f"only zero padding can be folded into a DMA: {value}")
        cond, value = value.cond, strip_casts(value.then)
    if not isinstance(value, Load) or not isinstance(value.source, ir.Buffer):
        raise DmaError(f"a dma_copy nest must copy one buffer element, found {node.value}")
    dst, src = node.buffer, value.source
    direction = "store" if dst.scope == "global" else "load"
    sram, dram = (dst, src) if direction == "load" else (src, dst)
    sram_idx, dram_idx = (node.indices, value.indices) if direction == "load" else (value.indices, node.indices)
    if sram.scope == dram.scope:
        raise DmaError(f"{src.name} -> {dst.name}: a DMA moves between DRAM and SRAM")
    mem = _memory(direction, sram, dram, cfg)
    # The two innermost dimensions are one element: copied whole, index for index.
    extents = dict(loops)
    elem_vars = []
    for k in (-2, -1):
        v = sram_idx[k]
        if not (isinstance(v, Var) and dram_idx[k] is v and extents.get(v) == sram.shape[k] == dram.shape[k]):
            raise DmaError(f"{src.name} -> {dst.name}: the element dimensions must be copied whole "
                           f"(got {sram_idx[k]} / {dram_idx[k]})")
        elem_vars.append(v)
    elem_bytes = dram.shape[-1] * dram.shape[-2] * int(dram.dtype[3:]) // 8
    if elem_bytes != cfg.elem_bytes(mem.dram_elem):
        raise DmaError(f"{dram.name}: elements of {list(dram.shape[-2:])} {dram.dtype} ({elem_bytes} B) "
                       f"do not match {mem.name} elements of config {cfg.name!r} "
                       f"({cfg.elem_bytes(mem.dram_elem)} B); pack the tensor for this config")
    # Loops of extent 1 move nothing, unless padding depends on them (a one-row tile at the border).
    cond_vars = free_vars(cond) if cond is not None else set()
    rest = [(v, n) for v, n in loops if v not in elem_vars and (n > 1 or v in cond_vars)]
    loop_vars = {v for v, _ in rest}
    s_form, d_form = linear(sram.elem_index(sram_idx)), linear(dram.elem_index(dram_idx))
    if s_form is None or d_form is None:
        raise DmaError(f"{src.name} -> {dst.name}: indices must be affine")
    s_coef = {v: s_form[0].get(v, 0) for v in loop_vars}
    d_coef = {v: d_form[0].get(v, 0) for v in loop_vars}
    bounds = _bounds(cond, loop_vars) if cond is not None else {}
    if bounds and direction == "store":
        raise DmaError("a STORE cannot pad")

    # x: the innermost loops contiguous in both memories (a padded loop stands alone).
    x_group, x_len = [], 1
    for v, n in reversed(rest):
        if s_coef[v] == x_len and d_coef[v] == x_len and not (x_group and (v in bounds or x_group[-1][0] in bounds)):
            x_group.append((v, n))
            x_len *= n
        else:
            break
    remaining = rest[:len(rest) - len(x_group)]
    # y: the next loops, each a whole number of rows apart in SRAM with one DRAM stride.
    y_group, y_len, stride = [], 1, None
    for v, n in reversed(remaining):
        row = x_len * y_len
        if s_coef[v] != row or (y_group and (v in bounds or y_group[-1][0] in bounds)):
            break
        if stride is None:
            stride = d_coef[v]
        elif d_coef[v] != stride * y_len:
            break
        y_group.append((v, n))
        y_len *= n
    outer = remaining[:len(remaining) - len(y_group)]
    for v in bounds:
        if v not in (x_group[0][0] if len(x_group) == 1 else None, y_group[0][0] if len(y_group) == 1 else None):
            raise DmaError(f"{src.name} -> {dst.name}: padding along {v.name}, which is not a row or "
                           f"column loop of the copy")

    def pads(group, length):
        if len(group) != 1 or group[0][0] not in bounds:
            return as_expr(0), as_expr(0)
        lo, hi = bounds[group[0][0]]
        before = as_expr(0) if lo is None else max_(0, min_(lo, length))
        after = as_expr(0) if hi is None else max_(0, min_(length - hi, length))
        return simplify(before), simplify(after)

    y_pad0, y_pad1 = pads(y_group, y_len)
    x_pad0, x_pad1 = pads(x_group, x_len)
    inner = {v: 0 for v, n in x_group + y_group + [(v, n) for v, n in loops if n == 1]}
    if any(n == 1 and v in bounds for v, n in outer):
        raise DmaError(f"{src.name} -> {dst.name}: padding along a loop that is neither row nor column")
    sram_base = simplify(substitute(sram.elem_index(sram_idx), {**inner, **{v: 0 for v in elem_vars}}))
    dram_base = simplify(substitute(dram.elem_index(dram_idx), {**inner, **{v: 0 for v in elem_vars}}))
    y_coef = d_coef[y_group[0][0]] if y_group else 0
    x_coef = 1
    dram_base = simplify(dram_base + y_pad0 * y_coef + x_pad0 * x_coef)
    dma = ir.Dma(direction, mem, sram, sram_base, dram, dram_base,
                 y_size=simplify(y_len - y_pad0 - y_pad1), x_size=simplify(x_len - x_pad0 - x_pad1),
                 x_stride=as_expr(stride if stride is not None else x_len),
                 pads=(y_pad0, y_pad1, x_pad0, x_pad1))
    for v, n in reversed(outer):
        dma = ir.For(v, n, dma)
    return dma
