"""Integer expressions shared by tensor expressions and the loop IR.

Nodes are immutable; Python operators build them (``a + 1``, ``a * b``,
``a >> 3``, ``a < n``). ``min_``/``max_``/``select``/``cast`` cover the
rest. :func:`evaluate` computes a value under an environment of variable
values, :func:`substitute` replaces variables, :func:`linear` gives the
affine form ``Σ cᵥ·v + k`` of an expression when it has one, and
:func:`simplify` folds constants and normalises affine expressions so that
printed IR stays readable.
"""

import itertools

__all__ = ["Expr", "Var", "Const", "Binary", "Cast", "Select", "Load", "Reduce", "as_expr", "const",
           "min_", "max_", "select", "cast", "all_of", "evaluate", "substitute", "linear", "simplify",
           "free_vars", "interval", "map_loads", "strip_casts"]

_counter = itertools.count()


class Expr:
    """Base class; subclasses are small frozen records."""

    __slots__ = ()

    def _bin(self, op, other, swap=False):
        a, b = self, as_expr(other)
        return Binary(op, b, a) if swap else Binary(op, a, b)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __floordiv__(self, o): return self._bin("//", o)
    def __mod__(self, o): return self._bin("%", o)
    def __lshift__(self, o): return self._bin("<<", o)
    def __rshift__(self, o): return self._bin(">>", o)
    def __neg__(self): return Binary("-", Const(0), self)
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __and__(self, o): return self._bin("and", o)

    def astype(self, dtype):
        return Cast(dtype, self)

    def __repr__(self):
        return _render(self)

    __str__ = __repr__

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def __bool__(self):
        raise TypeError(f"an expression has no truth value ({self}); use evaluate()")


class Var(Expr):
    """A loop or index variable, compared by identity."""

    __slots__ = ("name", "uid")

    def __init__(self, name):
        self.name, self.uid = name, next(_counter)


class Const(Expr):
    __slots__ = ("value",)

    def __init__(self, value):
        if not isinstance(value, int) or isinstance(value, bool):
            value = int(value)
        self.value = value


class Binary(Expr):
    """``a op b`` for op in + - * // % << >> min max < <= > >= == and."""

    __slots__ = ("op", "a", "b")

    def __init__(self, op, a, b):
        self.op, self.a, self.b = op, a, b


class Cast(Expr):
    __slots__ = ("dtype", "value")

    def __init__(self, dtype, value):
        self.dtype, self.value = dtype, as_expr(value)


def strip_casts(e):
    """``e`` without the casts wrapped around it (the passes match on the value underneath)."""
    while isinstance(e, Cast):
        e = e.value
    return e


class Select(Expr):
    """``then`` if ``cond`` else ``otherwise``."""

    __slots__ = ("cond", "then", "otherwise")

    def __init__(self, cond, then, otherwise):
        self.cond, self.then, self.otherwise = as_expr(cond), as_expr(then), as_expr(otherwise)


class Load(Expr):
    """``source[indices]``; ``source`` is a tensor (TE) or a buffer (loop IR)."""

    __slots__ = ("source", "indices")

    def __init__(self, source, indices):
        self.source, self.indices = source, tuple(as_expr(i) for i in indices)


class Reduce(Expr):
    """Sum of ``source`` over the reduction iteration variables ``axes``."""

    __slots__ = ("source", "axes")

    def __init__(self, source, axes):
        self.source, self.axes = as_expr(source), tuple(axes)


def as_expr(x):
    if isinstance(x, Expr):
        return x
    if hasattr(x, "var"):           # an IterVar
        return x.var
    return Const(x)


def const(x):
    return Const(x)


def min_(a, b):
    return Binary("min", as_expr(a), as_expr(b))


def max_(a, b):
    return Binary("max", as_expr(a), as_expr(b))


def select(cond, then, otherwise):
    return Select(cond, then, otherwise)


def cast(dtype, value):
    return Cast(dtype, value)


def all_of(conds):
    conds = [as_expr(c) for c in conds]
    if not conds:
        return Const(1)
    out = conds[0]
    for c in conds[1:]:
        out = Binary("and", out, c)
    return out


# -- evaluation ----------------------------------------------------------------

_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,
    "<<": lambda a, b: a << b, ">>": lambda a, b: a >> b if b >= 0 else a << -b,
    "min": min, "max": max,
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b), ">": lambda a, b: int(a > b),
    ">=": lambda a, b: int(a >= b), "==": lambda a, b: int(a == b), "and": lambda a, b: int(bool(a and b)),
}


def evaluate(e, env):
    """The integer value of ``e`` with variables from ``env`` (Var → int); no loads."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        try:
            return env[e]
        except KeyError:
            raise KeyError(f"variable {e.name} has no value") from None
    if isinstance(e, Binary):
        return _OPS[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Select):
        return evaluate(e.then, env) if evaluate(e.cond, env) else evaluate(e.otherwise, env)
    if isinstance(e, Cast):
        return evaluate(e.value, env)
    raise TypeError(f"cannot evaluate {e}")


def substitute(e, mapping):
    """``e`` with variables replaced (mapping Var → Expr or int); loads keep their sources."""
    if not mapping:
        return e
    if isinstance(e, Var):
        return as_expr(mapping[e]) if e in mapping else e
    if isinstance(e, Const):
        return e
    if isinstance(e, Binary):
        a, b = substitute(e.a, mapping), substitute(e.b, mapping)
        return e if a is e.a and b is e.b else Binary(e.op, a, b)
    if isinstance(e, Cast):
        return Cast(e.dtype, substitute(e.value, mapping))
    if isinstance(e, Select):
        return Select(substitute(e.cond, mapping), substitute(e.then, mapping), substitute(e.otherwise, mapping))
    if isinstance(e, Load):
        return Load(e.source, [substitute(i, mapping) for i in e.indices])
    if isinstance(e, Reduce):
        return Reduce(substitute(e.source, mapping), e.axes)
    raise TypeError(f"cannot substitute in {e!r}")


def map_loads(e, fn):
    """``e`` with every :class:`Load` ``l`` (innermost first) replaced by ``fn(l)``."""
    if isinstance(e, Load):
        return fn(Load(e.source, [map_loads(i, fn) for i in e.indices]))
    if isinstance(e, Binary):
        return Binary(e.op, map_loads(e.a, fn), map_loads(e.b, fn))
    if isinstance(e, Cast):
        return Cast(e.dtype, map_loads(e.value, fn))
    if isinstance(e, Select):
        return Select(map_loads(e.cond, fn), map_loads(e.then, fn), map_loads(e.otherwise, fn))
    if isinstance(e, Reduce):
        return Reduce(map_loads(e.source, fn), e.axes)
    return e


def free_vars(e, out=None):
    """The set of variables ``e`` uses."""
    out = set() if out is None else out
    if isinstance(e, Var):
        out.add(e)
    elif isinstance(e, Binary):
        free_vars(e.a, out)
        free_vars(e.b, out)
    elif isinstance(e, Cast):
        free_vars(e.value, out)
    elif isinstance(e, Select):
        for x in (e.cond, e.then, e.otherwise):
            free_vars(x, out)
    elif isinstance(e, Load):
        for i in e.indices:
            free_vars(i, out)
    elif isinstance(e, Reduce):
        free_vars(e.source, out)
    return out


# -- affine forms ----------------------------------------------------------------

def linear(e):
    """``({var: coeff}, const)`` if ``e`` is affine in its variables, else None."""
    if isinstance(e, Const):
        return {}, e.value
    if isinstance(e, Var):
        return {e: 1}, 0
    if isinstance(e, Cast):
        return linear(e.value)
    if isinstance(e, Binary) and e.op in ("+", "-", "*", "<<"):
        a, b = linear(e.a), linear(e.b)
        if a is None or b is None:
            return None
        if e.op in ("+", "-"):
            sign = 1 if e.op == "+" else -1
            coeffs = dict(a[0])
            for v, c in b[0].items():
                coeffs[v] = coeffs.get(v, 0) + sign * c
            return {v: c for v, c in coeffs.items() if c}, a[1] + sign * b[1]
        if e.op == "<<":
            if b[0]:
                return None
            return {v: c << b[1] for v, c in a[0].items()}, a[1] << b[1]
        if a[0] and b[0]:
            return None
        (coeffs, k), scale = (a, b[1]) if not b[0] else (b, a[1])
        return {v: c * scale for v, c in coeffs.items() if c * scale}, k * scale
    return None


def _from_linear(coeffs, k):
    terms = sorted(coeffs.items(), key=lambda vc: vc[0].uid)
    out = None
    for v, c in terms:
        term = v if c == 1 else Binary("*", v, Const(c))
        out = term if out is None else Binary("+", out, term)
    if out is None:
        return Const(k)
    return Binary("+", out, Const(k)) if k else out


def simplify(e):
    """Constant folding and canonical affine forms (for readable IR and cheap evaluation)."""
    form = linear(e)
    if form is not None and not isinstance(e, Cast):
        return _from_linear(*form)
    if isinstance(e, Binary):
        a, b = simplify(e.a), simplify(e.b)
        if isinstance(a, Const) and isinstance(b, Const):
            return Const(_OPS[e.op](a.value, b.value))
        out = Binary(e.op, a, b)
        form = linear(out)
        return _from_linear(*form) if form is not None else out
    if isinstance(e, Select):
        c = simplify(e.cond)
        if isinstance(c, Const):
            return simplify(e.then if c.value else e.otherwise)
        return Select(c, simplify(e.then), simplify(e.otherwise))
    if isinstance(e, Cast):
        return Cast(e.dtype, simplify(e.value))
    if isinstance(e, Load):
        return Load(e.source, [simplify(i) for i in e.indices])
    return e


def interval(e, ranges):
    """``(lo, hi)`` bounds of ``e`` with each Var in ``ranges`` (Var → (lo, hi)) free; None if unknown."""
    if isinstance(e, Const):
        return e.value, e.value
    if isinstance(e, Var):
        return ranges.get(e)
    if isinstance(e, Cast):
        return interval(e.value, ranges)
    if isinstance(e, Binary):
        a, b = interval(e.a, ranges), interval(e.b, ranges)
        if a is None or b is None:
            return None
        if e.op in ("+", "-", "*", "min", "max"):
            f = _OPS[e.op]
            vals = [f(x, y) for x in a for y in b]
            return min(vals), max(vals)
        if e.op in ("//", ">>", "<<") and b[0] == b[1] and b[0] >= 0 and (e.op != "//" or b[0] > 0):
            f = _OPS[e.op]
            return f(a[0], b[0]), f(a[1], b[0])
        if e.op == "%" and b[0] == b[1] and b[0] > 0:
            if a[0] // b[0] == a[1] // b[0]:
                return a[0] % b[0], a[1] % b[0]
            return 0, b[0] - 1
    return None


# -- printing ------------------------------------------------------------------

_PREC = {"and": 1, "<": 2, "<=": 2, ">": 2, ">=": 2, "==": 2, "<<": 3, ">>": 3, "+": 4, "-": 4,
         "*": 5, "//": 5, "%": 5}


def _render(e, parent=0):
    if isinstance(e, Const):
        return str(e.value)
    if isinstance(e, Var):
        return e.name
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({_render(e.a)}, {_render(e.b)})"
        p = _PREC[e.op]
        if e.op == "+" and isinstance(e.b, Const) and e.b.value < 0:
            text = f"{_render(e.a, p)} - {-e.b.value}"
        else:
            text = f"{_render(e.a, p)} {e.op} {_render(e.b, p + 1)}"
        return f"({text})" if p < parent else text
    if isinstance(e, Cast):
        return f"{e.dtype}({_render(e.value)})"
    if isinstance(e, Select):
        return f"select({_render(e.cond)}, {_render(e.then)}, {_render(e.otherwise)})"
    if isinstance(e, Load):
        return f"{e.source.name}[{', '.join(_render(i) for i in e.indices)}]"
    if isinstance(e, Reduce):
        return f"sum({_render(e.source)}, axis=[{', '.join(a.name for a in e.axes)}])"
    return object.__repr__(e)
