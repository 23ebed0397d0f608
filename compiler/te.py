"""Tensor expressions: placeholders and computations over index spaces.

Example (a matrix product with a requantizing epilogue)::

    A = te.placeholder((M, K), "int8", "A")
    B = te.placeholder((N, K), "int8", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[j, k].astype("int32"), [k]),
                   "C", dtype="int32")
    D = te.compute((M, N), lambda i, j: C[i, j] >> 4, "D", dtype="int32")

A compute's body is an expression of its axes (``IterVar``s); a reduction
is a :func:`sum` at the top of the body. :func:`pad` makes a zero-padded
view whose padding the compiler folds into DMA loads.
"""

import inspect

from .expr import Expr, Load, Reduce, Var, all_of, as_expr, select

__all__ = ["IterVar", "Tensor", "PlaceholderOp", "ComputeOp", "placeholder", "compute", "reduce_axis",
           "sum", "pad", "TEError"]

DTYPE_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


class TEError(ValueError):
    """A malformed tensor expression."""


class IterVar:
    """An iteration axis: a variable ranging over ``[0, extent)``.

    ``kind`` is ``"spatial"`` (an output axis) or ``"reduce"``.
    """

    def __init__(self, extent, name, kind="spatial"):
        if not isinstance(extent, int) or extent < 1:
            raise TEError(f"axis {name} needs a positive integer extent, not {extent!r}")
        self.extent, self.name, self.kind = extent, name, kind
        self.var = Var(name)

    def __repr__(self):
        return f"IterVar({self.name}, {self.extent}, {self.kind})"

    # Arithmetic on an axis is arithmetic on its variable.
    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o
    def __lt__(self, o): return self.var < o
    def __ge__(self, o): return self.var >= o


class Tensor:
    """The output of an operation: ``shape``, ``dtype`` and indexing into a :class:`Load`."""

    def __init__(self, shape, dtype, op, name):
        if dtype not in DTYPE_BITS:
            raise TEError(f"tensor {name}: unsupported dtype {dtype!r} (use {', '.join(DTYPE_BITS)})")
        self.shape, self.dtype, self.op, self.name = tuple(shape), dtype, op, name

    @property
    def ndim(self):
        return len(self.shape)

    def __getitem__(self, indices):
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise TEError(f"{self.name} has {self.ndim} dimensions, indexed with {len(indices)}")
        return Load(self, [as_expr(i) for i in indices])

    def __repr__(self):
        return f"Tensor({self.name}, {self.shape}, {self.dtype})"


class PlaceholderOp:
    """An input in DRAM."""

    def __init__(self, name):
        self.name = name
        self.inputs = ()


class ComputeOp:
    """``output[axes] = body``; ``reduce_axes`` are the axes a top-level :func:`sum` runs over."""

    def __init__(self, name, axes, body, tag=""):
        self.name, self.axes, self.body, self.tag = name, list(axes), body, tag
        self.reduce_axes = list(body.axes) if isinstance(body, Reduce) else []
        self.inputs = tuple(_tensors_in(body))


def _tensors_in(e, seen=None):
    """Tensors loaded by ``e``, in first-use order."""
    seen = [] if seen is None else seen
    if isinstance(e, Load):
        if isinstance(e.source, Tensor) and e.source not in seen:
            seen.append(e.source)
        for i in e.indices:
            _tensors_in(i, seen)
    elif isinstance(e, Expr):
        for attr in ("a", "b", "value", "cond", "then", "otherwise", "source"):
            child = getattr(e, attr, None)
            if isinstance(child, Expr):
                _tensors_in(child, seen)
    return seen


def placeholder(shape, dtype="int8", name="placeholder"):
    """An input tensor of ``shape`` and ``dtype``."""
    return Tensor(shape, dtype, PlaceholderOp(name), name)


def reduce_axis(extent, name="k"):
    """A reduction axis over ``[0, extent)``."""
    return IterVar(extent, name, "reduce")


def sum(expr, axis):  # noqa: A001 - mirrors te.sum
    """Sum of ``expr`` over the reduction axes ``axis``."""
    axes = list(axis) if isinstance(axis, (list, tuple)) else [axis]
    for a in axes:
        if not isinstance(a, IterVar) or a.kind != "reduce":
            raise TEError(f"sum() needs reduce axes, got {a!r}")
    return Reduce(as_expr(expr), axes)


def compute(shape, fcompute, name="compute", dtype="int32", tag=""):
    """A tensor whose element at ``indices`` is ``fcompute(*indices)``."""
    params = inspect.signature(fcompute).parameters.values()
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    names = [p.name for p in params if p.kind != p.VAR_POSITIONAL]
    if variadic:
        names = [f"i{k}" for k in range(len(shape))]
    elif len(names) != len(shape):
        raise TEError(f"{name}: fcompute takes {len(names)} indices for a {len(shape)}-d shape")
    axes = [IterVar(extent, f"{name}.{n}") for extent, n in zip(shape, names)]
    body = as_expr(fcompute(*axes))
    if isinstance(body, Reduce):
        _check_reduce_only_at_top(body.source, name)
    else:
        _check_reduce_only_at_top(body, name)
    op = ComputeOp(name, axes, body, tag)
    return Tensor(shape, dtype, op, name)


def _check_reduce_only_at_top(e, name):
    if isinstance(e, Reduce):
        raise TEError(f"{name}: a sum() must be the whole body, not part of it")
    for attr in ("a", "b", "value", "cond", "then", "otherwise"):
        child = getattr(e, attr, None)
        if isinstance(child, Expr):
            _check_reduce_only_at_top(child, name)


def pad(tensor, before, after, name=None):
    """``tensor`` with zeros added before/after each dimension (tag ``"pad"``)."""
    if len(before) != tensor.ndim or len(after) != tensor.ndim:
        raise TEError(f"pad of {tensor.name}: give one amount per dimension ({tensor.ndim})")
    shape = [n + b + a for n, b, a in zip(tensor.shape, before, after)]

    def body(*idx):
        inside = [i >= b for i, b in zip(idx, before) if b] + \
                 [i < b + n for i, b, n, a in zip(idx, before, tensor.shape, after) if a]
        value = tensor[tuple(i - b for i, b in zip(idx, before))]
        return select(all_of(inside), value, 0) if inside else value

    return compute(shape, body, name or f"{tensor.name}_pad", dtype=tensor.dtype, tag="pad")
