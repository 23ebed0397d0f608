"""The loop IR that lowering produces and every pass rewrites.

Structure: :class:`For`, :class:`Seq`, :class:`Allocate` (an on-chip
buffer live in its body), :class:`Store` (one element), :class:`Attr` (a
pragma or tensorize mark on a sub-nest). Passes replace sub-nests by
accelerator operations: :class:`Dma`, :class:`Gemm` and :class:`Alu`, whose
fields are expressions of the loops still around them. ``str(stmt)`` prints
a readable nest.

A :class:`Buffer` is a tensor in DRAM (``scope="global"``) or an SRAM
region (``inp``, ``wgt``, ``acc``). Its last two dimensions form one SRAM
element; the element index is the row-major index over the others.
"""

from dataclasses import dataclass, field, replace

from .expr import Expr, Var, as_expr, linear, simplify

__all__ = ["Function", "Buffer", "Stmt", "For", "Seq", "Allocate", "Store", "Attr", "Dma", "Requant", "Uop", "Gemm",
           "Alu",
           "walk", "transform", "seq", "format_ir", "map_leaf", "uses"]


class Buffer:
    """A named array in DRAM or SRAM.

    After storage planning, an SRAM buffer has ``offset`` (first SRAM element)
    and ``replicas`` (copies for virtual threads, each ``elements`` apart).
    """

    def __init__(self, name, shape, dtype, scope, tensor=None):
        self.name, self.shape, self.dtype, self.scope, self.tensor = name, tuple(shape), dtype, scope, tensor
        self.offset = None
        self.replicas = 1

    @property
    def elem_shape(self):
        return self.shape[:-2]

    @property
    def elements(self):
        n = 1
        for d in self.elem_shape:
            n *= d
        return n

    def elem_index(self, indices):
        """Element index expression of ``indices`` (all dimensions; the last two must be whole)."""
        index = 0
        for i, d in zip(indices[:-2], self.elem_shape):
            index = index * d + i
        return simplify(index if isinstance(index, Expr) else _const(index))

    def __repr__(self):
        return f"Buffer({self.name}, {self.shape}, {self.scope})"


def _const(x):
    from .expr import Const
    return Const(x)


class Stmt:
    def __str__(self):
        return format_ir(self)


@dataclass(eq=False)
class Function:
    """A lowered operator: its DRAM tensors (``params``, inputs then outputs) and its body."""
    name: str
    params: list
    body: "Stmt"
    outputs: list = field(default_factory=list)

    def buffer(self, tensor):
        for b in self.params:
            if b.tensor is tensor or b.name == getattr(tensor, "name", tensor):
                return b
        raise KeyError(f"{getattr(tensor, 'name', tensor)} is not a parameter of {self.name}")

    def with_body(self, body):
        return replace(self, body=body)

    def __str__(self):
        def sig(b):
            return f"{b.name}: {b.dtype}{list(b.shape)}"
        outs = [b for b in self.params if b in self.outputs]
        ins = [b for b in self.params if b not in self.outputs]
        head = f"def {self.name}({', '.join(sig(b) for b in ins)}) -> ({', '.join(sig(b) for b in outs)}):\n"
        return head + format_ir(self.body, 1)


@dataclass(eq=False)
class For(Stmt):
    var: Var
    extent: int
    body: Stmt
    kind: str = "serial"        # or "vthread"


@dataclass(eq=False)
class Seq(Stmt):
    body: list


@dataclass(eq=False)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(eq=False)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr


@dataclass(eq=False)
class Attr(Stmt):
    """A mark on a sub-nest: ``key`` is "pragma" (value a name) or "tensorize" (value an intrinsic)."""
    key: str
    value: object
    body: Stmt


@dataclass(eq=False)
class Dma(Stmt):
    """A 2D copy between DRAM and SRAM; every field an expression of the loops around it."""
    direction: str              # "load" or "store"
    mem: object                 # tilewright.isa.MemType
    sram: Buffer
    sram_index: Expr            # element index inside the buffer
    dram: Buffer
    dram_index: Expr            # element index inside the DRAM tensor
    y_size: Expr
    x_size: Expr
    x_stride: Expr
    pads: tuple = (0, 0, 0, 0)  # y_pad0, y_pad1, x_pad0, x_pad1
    requant: "Requant" = None   # a store that requantizes accumulators


@dataclass(frozen=True, eq=False)
class Requant:
    """A store's requantization: ``clip(((acc + bias) · mul) >> shift)`` (clipped at 0 with ``relu``), or
    per channel, with ``scale``, ``clip((acc · scale + bias) >> shift)`` (``mul`` is then 0, which selects the
    scale as the STORE's field does: docs/isa.md).

    ``bias`` is an accumulator buffer and ``bias_index`` (an expression of the
    loops around the store) the element of it added to every element the
    store reads; without ``bias`` nothing is added. ``scale`` and
    ``scale_index`` name the element that multiplies them the same way.
    """
    mul: int
    shift: int
    relu: bool
    bias: Buffer = None
    bias_index: Expr = None
    scale: Buffer = None
    scale_index: Expr = None

    def operands(self):
        """``(buffer, index)`` of the per-store elements it reads: the bias's and the scale's."""
        return [(b, i) for b, i in ((self.bias, self.bias_index), (self.scale, self.scale_index)) if b is not None]


@dataclass(eq=False)
class Uop:
    """One micro-op: element indices (expressions) into the dst, src and wgt buffers."""
    dst: Expr
    src: Expr = 0
    wgt: Expr = 0


@dataclass(eq=False)
class Gemm(Stmt):
    """``for o < iter_out, i < iter_in, u in uops: dst += src · wgtᵀ``.

    With ``reset`` dst = 0, with ``overwrite`` dst = src · wgtᵀ.

    ``loops`` holds ``(var, extent)`` of the (at most two) folded loops and the
    micro-ops' index expressions use those variables; codegen turns them into
    iter_out/iter_in and factors.
    """
    acc: Buffer
    inp: Buffer
    wgt: Buffer
    uops: list
    loops: list = field(default_factory=list)
    reset: bool = False
    overwrite: bool = False


@dataclass(eq=False)
class Alu(Stmt):
    """``dst = op(dst, imm or src)`` over folded loops and micro-ops, in the acc buffer."""
    op: object                  # tilewright.isa.AluOp
    acc: Buffer
    uops: list
    loops: list = field(default_factory=list)
    imm: object = None          # int, or None for a vector operand
    src: Buffer = None


def seq(stmts):
    stmts = [s for s in stmts if s is not None]
    flat = []
    for s in stmts:
        flat.extend(s.body if isinstance(s, Seq) else [s])
    return flat[0] if len(flat) == 1 else Seq(flat)


def loop_nest(stmt, kind=None):
    """``([(var, extent)], leaf)`` of the perfect loop nest at ``stmt``.

    The loops are the :class:`For` nodes walked through, outermost first
    (only loops of ``kind`` when it is given); ``leaf`` is the first
    statement that is not one of them (``stmt`` itself when it is not).
    """
    loops = []
    while isinstance(stmt, For) and (kind is None or stmt.kind == kind):
        loops.append((stmt.var, stmt.extent))
        stmt = stmt.body
    return loops, stmt


def same_index(a, b):
    """Whether index expressions (or ints) ``a`` and ``b`` are equal for every value of their variables.

    The same object, the same printed form, or a difference that simplifies
    to the linear constant 0; non-linear indices must match in form.
    """
    if a is b or repr(a) == repr(b):
        return True
    return linear(simplify(as_expr(a) - as_expr(b))) == ({}, 0)


def same_indices(a, b):
    """:func:`same_index` for every pair of two index lists of one length."""
    return len(a) == len(b) and all(same_index(x, y) for x, y in zip(a, b))


def walk(stmt, fn):
    """Call ``fn`` on every statement, parents first."""
    fn(stmt)
    if isinstance(stmt, (For, Allocate, Attr)):
        walk(stmt.body, fn)
    elif isinstance(stmt, Seq):
        for s in stmt.body:
            walk(s, fn)


def transform(stmt, fn):
    """Rebuild ``stmt`` bottom-up; ``fn(node)`` returns a replacement or None to keep it."""
    if isinstance(stmt, (For, Allocate, Attr)):
        body = transform(stmt.body, fn)
        if body is not stmt.body:
            stmt = replace(stmt, body=body)
    elif isinstance(stmt, Seq):
        body = [transform(s, fn) for s in stmt.body]
        if any(a is not b for a, b in zip(body, stmt.body)):
            stmt = seq(body)
    out = fn(stmt)
    return stmt if out is None else out


def substitute_leaves(stmt, mapping, buffer_fn=lambda b: b):
    """``stmt`` with loop variables replaced per ``mapping`` (and buffers by ``buffer_fn``) in every leaf."""
    from .expr import substitute

    def leaf(node):
        if isinstance(node, (Store, Dma, Gemm, Alu)):
            return map_leaf(node, lambda e: substitute(e, mapping), buffer_fn)
        return None
    return transform(stmt, leaf)


def _map_expr(e, fn, buf):
    from .expr import Load, map_loads
    if not isinstance(e, Expr):
        return e
    e = fn(e)
    return map_loads(e, lambda load: Load(buf(load.source), load.indices))


def map_leaf(stmt, expr_fn, buffer_fn=lambda b: b):
    """A leaf statement (Store, Dma, Gemm, Alu) with its expressions and buffers mapped."""
    ex = lambda e: _map_expr(e, expr_fn, buffer_fn)  # noqa: E731
    if isinstance(stmt, Store):
        return Store(buffer_fn(stmt.buffer), tuple(ex(i) for i in stmt.indices), ex(stmt.value))
    if isinstance(stmt, Dma):
        q = stmt.requant
        if q is not None and q.bias is not None:
            q = replace(q, bias=buffer_fn(q.bias), bias_index=ex(q.bias_index))
        if q is not None and q.scale is not None:
            q = replace(q, scale=buffer_fn(q.scale), scale_index=ex(q.scale_index))
        return replace(stmt, sram=buffer_fn(stmt.sram), dram=buffer_fn(stmt.dram),
                       sram_index=ex(stmt.sram_index), dram_index=ex(stmt.dram_index), y_size=ex(stmt.y_size),
                       x_size=ex(stmt.x_size), x_stride=ex(stmt.x_stride), pads=tuple(ex(p) for p in stmt.pads),
                       requant=q)
    uops = [Uop(ex(u.dst), ex(u.src), ex(u.wgt)) for u in stmt.uops]
    if isinstance(stmt, Gemm):
        return replace(stmt, acc=buffer_fn(stmt.acc), inp=stmt.inp and buffer_fn(stmt.inp),
                       wgt=stmt.wgt and buffer_fn(stmt.wgt), uops=uops)
    if isinstance(stmt, Alu):
        return replace(stmt, acc=buffer_fn(stmt.acc), src=stmt.src and buffer_fn(stmt.src), uops=uops)
    raise TypeError(f"not a leaf statement: {stmt!r}")


def uses(stmt):
    """``(variables, buffers)`` a statement tree refers to."""
    from .expr import free_vars
    variables, buffers = set(), set()

    def expr(e):
        if isinstance(e, Expr):
            free_vars(e, variables)
            from .expr import map_loads
            map_loads(e, lambda load: buffers.add(load.source) or load)

    def visit(s):
        if isinstance(s, Store):
            buffers.add(s.buffer)
            for i in s.indices:
                expr(i)
            expr(s.value)
        elif isinstance(s, Dma):
            buffers.update((s.sram, s.dram))
            for e in (s.sram_index, s.dram_index, s.y_size, s.x_size, s.x_stride, *s.pads):
                expr(e)
            for buffer, index in s.requant.operands() if s.requant is not None else []:
                buffers.add(buffer)
                expr(index)
        elif isinstance(s, (Gemm, Alu)):
            buffers.update(b for b in (s.acc, getattr(s, "inp", None), getattr(s, "wgt", None),
                                       getattr(s, "src", None)) if b is not None)
            for u in s.uops:
                for e in (u.dst, u.src, u.wgt):
                    expr(e)
    walk(stmt, visit)
    return variables, buffers


# -- printing --------------------------------------------------------------------

def _idx(buffer, index):
    return f"{buffer.name}[{simplify(index) if isinstance(index, Expr) else index}]"


def _uops(uops):
    shown = [f"({u.dst}, {u.src}, {u.wgt})" for u in uops[:3]]
    more = f", … {len(uops)} micro-ops" if len(uops) > 3 else ""
    return "[" + ", ".join(shown) + more + "]"


def format_ir(stmt, indent=0):
    pad = "  " * indent
    if isinstance(stmt, Seq):
        return "".join(format_ir(s, indent) for s in stmt.body)
    if isinstance(stmt, For):
        kind = "" if stmt.kind == "serial" else f" {stmt.kind}"
        return f"{pad}for {stmt.var.name} in range({stmt.extent}){kind}:\n" + format_ir(stmt.body, indent + 1)
    if isinstance(stmt, Allocate):
        b = stmt.buffer
        where = "" if b.offset is None else f" @ {b.offset}" + (f" ×{b.replicas}" if b.replicas > 1 else "")
        return (f"{pad}alloc {b.name}{list(b.shape)} {b.dtype} in {b.scope}{where}\n"
                + format_ir(stmt.body, indent))
    if isinstance(stmt, Store):
        idx = ", ".join(str(simplify(i)) for i in stmt.indices)
        return f"{pad}{stmt.buffer.name}[{idx}] = {simplify(stmt.value)}\n"
    if isinstance(stmt, Attr):
        value = stmt.value if isinstance(stmt.value, str) else getattr(stmt.value, "name", stmt.value)
        return f"{pad}# {stmt.key}: {value}\n" + format_ir(stmt.body, indent)
    if isinstance(stmt, Dma):
        pads = "" if all(str(p) == "0" for p in stmt.pads) else \
            " pad(" + ", ".join(str(simplify(p) if isinstance(p, Expr) else p) for p in stmt.pads) + ")"
        src, dst = (_idx(stmt.dram, stmt.dram_index), _idx(stmt.sram, stmt.sram_index))
        if stmt.direction == "store":
            src, dst = dst, src
        if stmt.requant:
            q = stmt.requant
            bias = f", bias={_idx(q.bias, q.bias_index)}" if q.bias else ""
            scale = f", scale={_idx(q.scale, q.scale_index)}" if q.scale else ""
            pads += f" requant(mul={q.mul}, shift={q.shift}{', relu' if q.relu else ''}{scale}{bias})"
        return (f"{pad}dma.{stmt.direction} {stmt.mem.name.lower()} {dst} <- {src} "
                f"y={simplify(stmt.y_size)} x={simplify(stmt.x_size)} stride={simplify(stmt.x_stride)}{pads}\n")
    if isinstance(stmt, Gemm):
        loops = " ".join(f"{v.name}<{n}" for v, n in stmt.loops)
        what = f"gemm.reset {stmt.acc.name}" if stmt.reset else \
            f"gemm {stmt.acc.name} {'=' if stmt.overwrite else '+='} {stmt.inp.name}·{stmt.wgt.name}"
        return f"{pad}{what} loops[{loops}] uops{_uops(stmt.uops)}\n"
    if isinstance(stmt, Alu):
        loops = " ".join(f"{v.name}<{n}" for v, n in stmt.loops)
        operand = f"imm={stmt.imm}" if stmt.imm is not None else f"src={stmt.src.name}"
        return f"{pad}alu.{stmt.op.name.lower()} {stmt.acc.name} {operand} loops[{loops}] uops{_uops(stmt.uops)}\n"
    return f"{pad}{stmt!r}\n"
