"""A reference interpreter for the loop IR, before and after every pass.

Slow (Python loops per element) and meant for small shapes in tests: it
runs any stage of the pipeline, from freshly lowered loops to the nests of
DMA, GEMM and ALU operations, with the ISA's integer semantics, so each pass
can be checked to preserve what the program computes.
"""

import numpy as np

from tilewright.semantics import alu as alu_op, requantize, wrap

from . import ir
from .expr import Binary, Cast, Const, Load, Select, Var, evaluate
from .te import DTYPE_BITS

__all__ = ["run_ir"]


def _value(e, env, arrays):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, Load):
        idx = tuple(_value(i, env, arrays) for i in e.indices)
        return int(arrays[e.source][idx])
    if isinstance(e, Cast):
        return wrap(_value(e.value, env, arrays), DTYPE_BITS[e.dtype])
    if isinstance(e, Select):
        return _value(e.then if _value(e.cond, env, arrays) else e.otherwise, env, arrays)
    if isinstance(e, Binary):
        return evaluate(Binary(e.op, Const(_value(e.a, env, arrays)), Const(_value(e.b, env, arrays))), {})
    raise TypeError(f"cannot interpret {e}")


def _elements(array):
    return array.reshape((-1,) + array.shape[-2:])


def _exec(stmt, env, arrays):
    if isinstance(stmt, ir.Seq):
        for s in stmt.body:
            _exec(s, env, arrays)
    elif isinstance(stmt, ir.For):
        for k in range(stmt.extent):
            env[stmt.var] = k
            _exec(stmt.body, env, arrays)
        env.pop(stmt.var, None)
    elif isinstance(stmt, ir.Allocate):
        _exec(stmt.body, env, arrays)
    elif isinstance(stmt, ir.Attr):
        _exec(stmt.body, env, arrays)
    elif isinstance(stmt, ir.Store):
        idx = tuple(_value(i, env, arrays) for i in stmt.indices)
        arrays[stmt.buffer][idx] = wrap(_value(stmt.value, env, arrays), _bits(stmt.buffer, arrays))
    elif isinstance(stmt, ir.Dma):
        _dma(stmt, env, arrays)
    elif isinstance(stmt, ir.Gemm):
        _loop_uops(stmt, env, lambda u, e: _gemm_uop(stmt, u, e, arrays))
    elif isinstance(stmt, ir.Alu):
        _loop_uops(stmt, env, lambda u, e: _alu_uop(stmt, u, e, arrays))
    else:
        raise TypeError(f"cannot interpret {stmt!r}")


def _dma(d, env, arrays):
    v = {name: evaluate(getattr(d, name), env) if not isinstance(getattr(d, name), int) else getattr(d, name)
         for name in ("sram_index", "dram_index", "y_size", "x_size", "x_stride")}
    pads = [evaluate(p, env) if not isinstance(p, int) else p for p in d.pads]
    sram, dram = _elements(arrays[d.sram]), _elements(arrays[d.dram])
    if v["x_size"] == 0 or v["y_size"] == 0:
        return
    rows, cols = pads[0] + v["y_size"] + pads[1], pads[2] + v["x_size"] + pads[3]
    for r in range(rows):
        for c in range(cols):
            s = v["sram_index"] + r * cols + c if d.direction == "load" else v["sram_index"] + r * v["x_size"] + c
            inside = pads[0] <= r < pads[0] + v["y_size"] and pads[2] <= c < pads[2] + v["x_size"]
            if d.direction == "load":
                src = v["dram_index"] + (r - pads[0]) * v["x_stride"] + (c - pads[2])
                sram[s] = dram[src] if inside else 0
            elif inside:
                dst = v["dram_index"] + r * v["x_stride"] + c
                value = sram[s]
                if d.requant:
                    q = d.requant
                    bias = 0 if q.bias is None else _elements(arrays[q.bias])[evaluate(q.bias_index, env)]
                    scale = None if q.scale is None else _elements(arrays[q.scale])[evaluate(q.scale_index, env)]
                    value = requantize(value, q.mul, q.shift, q.relu, acc_width=DTYPE_BITS[d.sram.dtype],
                                       out_width=DTYPE_BITS[d.dram.dtype], bias=bias, scale=scale)
                dram[dst] = wrap(value, DTYPE_BITS[d.dram.dtype])


def _loop_uops(op, env, fn):
    def rec(k):
        if k == len(op.loops):
            for u in op.uops:
                fn(u, env)
            return
        var, extent = op.loops[k]
        for i in range(extent):
            env[var] = i
            rec(k + 1)
        env.pop(var, None)
    rec(0)


def _gemm_uop(g, u, env, arrays):
    acc = _elements(arrays[g.acc])
    d = evaluate(u.dst, env)
    if g.reset:
        acc[d] = 0
        return
    x = _elements(arrays[g.inp])[evaluate(u.src, env)]
    w = _elements(arrays[g.wgt])[evaluate(u.wgt, env)]
    acc[d] = wrap((0 if g.overwrite else acc[d]) + x @ w.T, DTYPE_BITS[g.acc.dtype])


def _alu_uop(a, u, env, arrays):
    acc = _elements(arrays[a.acc])
    d = evaluate(u.dst, env)
    b = a.imm if a.imm is not None else _elements(arrays[a.src])[evaluate(u.src, env)]
    acc[d] = alu_op(a.op, acc[d], b, _bits(a.acc, arrays))


def _bits(buffer, arrays):
    """The width ``buffer``'s values wrap at: an accumulator buffer of a narrower tensor (an int8 residual loaded
    for the epilogue) holds accumulator-wide values on chip."""
    return arrays.acc_bits if buffer.scope == "acc" else DTYPE_BITS[buffer.dtype]


class _Memory(dict):
    """Arrays per buffer; an on-chip buffer (or a per-thread replica) starts as zeros on first use.
    ``acc_bits``: the accumulators' width (the widest accumulator buffer's type)."""

    def __init__(self, arrays, acc_bits):
        super().__init__(arrays)
        self.acc_bits = acc_bits

    def __missing__(self, buffer):
        self[buffer] = np.zeros(buffer.shape, dtype=np.int64)
        return self[buffer]


def run_ir(func, values):
    """Execute ``func``; ``values`` maps its tensors (or their names) to arrays; returns every global array.

    Parameters not given start as zeros.
    """
    by_name = {b.name: b for b in func.params}
    acc_bits = max((DTYPE_BITS[b.dtype] for b in ir.uses(func.body)[1] if b.scope == "acc"), default=32)
    arrays = _Memory({b: np.zeros(b.shape, dtype=np.int64) for b in func.params}, acc_bits)
    for key, array in values.items():
        buf = func.buffer(key) if not isinstance(key, str) else by_name[key]
        arrays[buf] = np.asarray(array, dtype=np.int64).copy()
    _exec(func.body, {}, arrays)
    return {b.name: arrays[b] for b in func.params}
