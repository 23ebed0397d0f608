"""Schedules: how the loops of each tensor expression are ordered, tiled and placed.

A :class:`Schedule` holds one :class:`Stage` per operation. Stage
primitives follow TVM's: :meth:`Stage.split`, :meth:`~Stage.tile`,
:meth:`~Stage.reorder`, :meth:`~Stage.fuse`, :meth:`~Stage.compute_at`,
:meth:`~Stage.set_scope`, :meth:`~Stage.bind` (to virtual threads),
:meth:`~Stage.tensorize` and :meth:`~Stage.pragma`; schedule-level
:meth:`Schedule.cache_read` and :meth:`Schedule.cache_write` add copy
stages into an on-chip scope. Splits must divide their axis: every tile of
a stage then has the same shape, so one instruction pattern serves them all.
"""

from dataclasses import dataclass

from .expr import Load, Reduce, map_loads, substitute
from .te import ComputeOp, IterVar, PlaceholderOp, Tensor, TEError, _tensors_in

__all__ = ["ScheduleError", "Schedule", "Stage", "create_schedule", "SCOPES"]

#: On-chip scopes and the SRAM each maps to ("global" is DRAM).
SCOPES = ("global", "inp", "wgt", "acc")


class ScheduleError(ValueError):
    """A schedule primitive applied where it cannot be."""


@dataclass(frozen=True)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int


@dataclass(frozen=True)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


class Stage:
    """The schedule of one operation."""

    def __init__(self, tensor):
        self.tensor, self.op = tensor, tensor.op
        self.is_placeholder = isinstance(self.op, PlaceholderOp)
        self.root = [] if self.is_placeholder else self.op.axes + self.op.reduce_axes
        self.leaf = list(self.root)
        self.relations = []
        self.attach = None          # (stage, IterVar) after compute_at
        self.scope = "global"
        self.pragmas = {}           # IterVar -> pragma name ("dma_copy", "alu")
        self.tensorized = {}        # IterVar -> intrinsic
        self.vthreads = []          # IterVars bound to virtual threads
        self.inline = False

    @property
    def name(self):
        return self.tensor.name

    def __repr__(self):
        return f"Stage({self.name}, leaf=[{', '.join(iv.name for iv in self.leaf)}])"

    def _check(self, iv):
        if iv not in self.leaf:
            names = ", ".join(v.name for v in self.leaf)
            raise ScheduleError(f"{self.name}: {getattr(iv, 'name', iv)} is not a current loop ({names})")

    def split(self, iv, factor=None, nparts=None):
        """Split ``iv`` into ``(outer, inner)`` with ``inner`` of ``factor`` (or ``outer`` of ``nparts``)."""
        self._check(iv)
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"{self.name}.split({iv.name}): give exactly one of factor, nparts")
        factor = factor if factor is not None else iv.extent // nparts if nparts else 0
        if not factor or iv.extent % factor:
            raise ScheduleError(f"{self.name}.split({iv.name}): {factor if factor else nparts} does not "
                                f"divide the extent {iv.extent}")
        outer = IterVar(iv.extent // factor, f"{iv.name}.outer", iv.kind)
        inner = IterVar(factor, f"{iv.name}.inner", iv.kind)
        self.relations.append(Split(iv, outer, inner, factor))
        k = self.leaf.index(iv)
        self.leaf[k:k + 1] = [outer, inner]
        return outer, inner

    def tile(self, x, y, x_factor, y_factor):
        """Split ``x`` and ``y`` and order them ``x.outer, y.outer, x.inner, y.inner``."""
        xo, xi = self.split(x, x_factor)
        yo, yi = self.split(y, y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def reorder(self, *ivs):
        """Put ``ivs`` in this order, in the positions they occupy together."""
        for iv in ivs:
            self._check(iv)
        if len(set(ivs)) != len(ivs):
            raise ScheduleError(f"{self.name}.reorder: an axis is listed twice")
        slots = sorted(self.leaf.index(iv) for iv in ivs)
        for slot, iv in zip(slots, ivs):
            self.leaf[slot] = iv

    def fuse(self, outer, inner):
        """One loop over ``outer × inner`` (adjacent, outer first)."""
        self._check(outer)
        self._check(inner)
        k = self.leaf.index(outer)
        if self.leaf.index(inner) != k + 1:
            raise ScheduleError(f"{self.name}.fuse: {outer.name} and {inner.name} are not adjacent")
        if outer.kind != inner.kind:
            raise ScheduleError(f"{self.name}.fuse: cannot fuse a spatial and a reduction axis")
        fused = IterVar(outer.extent * inner.extent, f"{outer.name}.{inner.name}.fused", outer.kind)
        self.relations.append(Fuse(outer, inner, fused))
        self.leaf[k:k + 2] = [fused]
        return fused

    def compute_at(self, stage, iv):
        """Compute this stage inside ``stage``'s loop ``iv``, only the region one iteration needs."""
        stage._check(iv)
        self.attach = (stage, iv)

    def compute_inline(self):
        """Substitute this stage's body into its readers (e.g. padding folded into a copy)."""
        if self.is_placeholder:
            raise ScheduleError(f"cannot inline placeholder {self.name}")
        if self.op.reduce_axes:
            raise ScheduleError(f"cannot inline reduction {self.name}")
        self.inline = True

    def set_scope(self, scope):
        if scope not in SCOPES:
            raise ScheduleError(f"{self.name}: unknown scope {scope!r} (use {', '.join(SCOPES)})")
        self.scope = scope

    def bind(self, iv, thread):
        """Bind ``iv`` to virtual threads: its iterations interleave, with buffers per thread."""
        self._check(iv)
        if thread != "vthread":
            raise ScheduleError(f"{self.name}.bind: only 'vthread' is supported, not {thread!r}")
        if iv.kind != "spatial":
            raise ScheduleError(f"{self.name}.bind: {iv.name} is a reduction axis")
        self.vthreads.append(iv)

    def pragma(self, iv, name):
        """Mark the loop nest from ``iv`` inward: ``"dma_copy"`` (a copy becomes DMA) or ``"alu"``."""
        self._check(iv)
        if name not in ("dma_copy", "alu"):
            raise ScheduleError(f"{self.name}.pragma: unknown pragma {name!r}")
        self.pragmas[iv] = name

    def tensorize(self, iv, intrinsic):
        """Replace the loop nest from ``iv`` inward by ``intrinsic`` (checked when lowering)."""
        self._check(iv)
        self.tensorized[iv] = intrinsic

    # -- relations -----------------------------------------------------------------

    def root_values(self, leaf_values):
        """Root-axis values (Var → expr) from leaf-loop values (IterVar → expr)."""
        values = dict(leaf_values)
        for rel in reversed(self.relations):
            if isinstance(rel, Split):
                values[rel.parent] = values[rel.outer] * rel.factor + values[rel.inner]
            else:
                values[rel.outer] = values[rel.fused] // rel.inner.extent
                values[rel.inner] = values[rel.fused] % rel.inner.extent
        return {iv: values[iv] for iv in self.root}

    def rebase(self, extents):
        """Give the root axes new extents (the region an attached stage computes) and redo splits."""
        for iv in self.root:
            if iv in extents:
                iv.extent = extents[iv]
        for rel in self.relations:
            if isinstance(rel, Split):
                if rel.parent.extent % rel.factor:
                    raise ScheduleError(f"{self.name}: split of {rel.parent.name} by {rel.factor} does not "
                                        f"divide the region extent {rel.parent.extent}")
                rel.outer.extent = rel.parent.extent // rel.factor
            else:
                rel.fused.extent = rel.outer.extent * rel.inner.extent


class Schedule:
    """Stages of every operation reachable from ``outputs``, producers first."""

    def __init__(self, outputs):
        self.outputs = list(outputs)
        self.stages = []
        self._by_tensor = {}
        for t in self.outputs:
            self._visit(t)

    def _visit(self, tensor):
        if tensor in self._by_tensor:
            return
        for t in tensor.op.inputs:
            self._visit(t)
        stage = Stage(tensor)
        self._by_tensor[tensor] = stage
        self.stages.append(stage)

    def __getitem__(self, tensor):
        try:
            return self._by_tensor[tensor]
        except KeyError:
            raise ScheduleError(f"{getattr(tensor, 'name', tensor)} is not part of this schedule") from None

    def consumers(self, tensor):
        return [s for s in self.stages if not s.is_placeholder and tensor in s.op.inputs]

    def cache_read(self, tensor, scope, readers):
        """A copy of ``tensor`` in ``scope`` that ``readers`` load from instead."""
        readers = [r.op if isinstance(r, Tensor) else r for r in readers]
        name = f"{tensor.name}.{scope}"
        copy = _compute_like(tensor, name, lambda *i: tensor[i])
        stage = Stage(copy)
        stage.scope = scope
        self._by_tensor[copy] = stage
        self.stages.insert(self.stages.index(self[tensor]) + 1, stage)
        for op in readers:
            _replace_input(op, tensor, copy)
        return copy

    def cache_write(self, tensor, scope):
        """Compute ``tensor`` in ``scope`` first; ``tensor`` becomes a copy out of it.

        Call it before other primitives on ``tensor``'s stage (which is reset).
        """
        op = tensor.op
        if not isinstance(op, ComputeOp):
            raise ScheduleError(f"cannot cache_write placeholder {tensor.name}")
        name = f"{tensor.name}.{scope}"
        cache = Tensor(tensor.shape, tensor.dtype, None, name)
        axes = [IterVar(a.extent, f"{name}.{a.name.split('.')[-1]}") for a in op.axes]
        mapping = {a.var: b.var for a, b in zip(op.axes, axes)}
        body = op.body
        if isinstance(body, Reduce):
            body = Reduce(substitute(body.source, mapping), body.axes)
        else:
            body = substitute(body, mapping)
        cache.op = ComputeOp(name, axes, body, op.tag)
        op.body = Load(cache, [a.var for a in op.axes])
        op.reduce_axes, op.inputs, op.tag = [], (cache,), "copy"
        cache_stage = Stage(cache)
        cache_stage.scope = scope
        k = self.stages.index(self[tensor])
        self.stages[k] = self._by_tensor[tensor] = Stage(tensor)     # a plain copy now
        self.stages.insert(k, cache_stage)
        self._by_tensor[cache] = cache_stage
        return cache


def _compute_like(tensor, name, fcompute):
    from .te import compute
    return compute(tensor.shape, fcompute, name, dtype=tensor.dtype, tag="copy")


def _replace_input(op, old, new):
    if old not in op.inputs:
        raise ScheduleError(f"{op.name} does not read {old.name}")
    op.body = map_loads(op.body, lambda load: Load(new, load.indices) if load.source is old else load)
    op.inputs = tuple(_tensors_in(op.body))


def create_schedule(outputs):
    """A default schedule (every stage a root loop nest in DRAM) for ``outputs``."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    for t in outputs:
        if isinstance(t.op, PlaceholderOp):
            raise TEError(f"{t.name} is a placeholder; schedule a computation")
    return Schedule(outputs)
