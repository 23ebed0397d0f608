"""Lowering: a schedule becomes a loop nest over buffers.

Each root stage becomes a loop nest over its leaf axes; a stage computed at
``(stage, axis)`` is placed at the start of that loop's body, computing
only the region its consumers read in one iteration (bound inference on
affine index expressions), into a buffer of that region's shape allocated
there. Reductions get an init nest (write 0) before the first reduction
loop. Pragmas, tensorize marks and virtual-thread bindings become
:class:`~tilewright.compiler.ir.Attr` marks and loop kinds for the passes.

An epilogue stage in the accumulator scope that reads one accumulator
tensor element by element, and is that tensor's only reader, is computed in
place (it shares the buffer): the ALU works in place.
"""

import random
from collections import defaultdict

from . import ir

from .expr import Load, Reduce, as_expr, evaluate, free_vars, interval, linear, map_loads, simplify, substitute
from .schedule import ScheduleError
from .te import PlaceholderOp

__all__ = ["LowerError", "lower"]


class LowerError(ScheduleError):
    """A schedule that cannot be lowered (names the stage and the reason)."""


class _Lowering:
    def __init__(self, sch):
        self.sch = sch
        self.children = defaultdict(list)
        for st in sch.stages:
            if st.attach:
                self.children[(st.attach[0], st.attach[1])].append(st)
        # Stages that only copy inputs (cache reads) go first at their loop: they depend on no
        # sibling, and loading a tile's bias before its GEMMs lets the tile's store start as soon
        # as its last GEMM is done.
        for children in self.children.values():
            children.sort(key=lambda st: not all(isinstance(t.op, PlaceholderOp) for t in st.op.inputs))
        self.inlined = {st.tensor for st in sch.stages if getattr(st, "inline", False)}
        self.offsets = {}        # stage -> [start expr per output axis]
        self.buffers = {}        # tensor -> Buffer
        for st in sch.stages:
            if st.is_placeholder or (st.attach is None and st.scope == "global" and st.tensor not in self.inlined):
                self.buffers[st.tensor] = ir.Buffer(st.name, st.tensor.shape, st.tensor.dtype, "global", st.tensor)

    def run(self):
        roots = [s for s in self.sch.stages
                 if not s.is_placeholder and s.attach is None and s.tensor not in self.inlined]
        for s in roots:
            if s.scope != "global":
                raise LowerError(f"{s.name} is in scope {s.scope!r} but not computed at any loop; "
                                 f"use compute_at")
            self.offsets[s] = [as_expr(0)] * len(s.op.axes)
        body = ir.seq([self.nest(s) for s in roots])
        params = [b for b in self.buffers.values() if b.scope == "global"]
        outputs = [self.buffers[t] for t in self.sch.outputs]
        params = [b for b in params if b not in outputs] + outputs
        return ir.Function(self.sch.outputs[0].name, params, body, outputs)

    # -- one stage -------------------------------------------------------------------

    def absolute_roots(self, stage):
        """Root axis var -> absolute coordinate, in terms of the stage's leaf loop variables."""
        local = stage.root_values({iv: iv.var for iv in stage.leaf})
        env = {}
        for k, iv in enumerate(stage.op.axes):
            env[iv.var] = self.offsets[stage][k] + local[iv]
        for iv in stage.op.reduce_axes:
            env[iv.var] = local[iv]
        return env

    def map_body(self, expr, env):
        """``expr`` with the stage's axes made absolute and loads pointed at buffers."""
        def to_buffer(load):
            tensor = load.source
            if tensor in self.inlined:
                op = tensor.op
                inner = substitute(op.body, {a.var: i for a, i in zip(op.axes, load.indices)})
                return map_loads(inner, to_buffer)
            buf = self.buffers.get(tensor)
            if buf is None:
                raise LowerError(f"{tensor.name} is read before it has a buffer (compute it at an "
                                 f"enclosing loop, or make it a root stage)")
            idx = load.indices
            if buf.scope != "global":
                idx = [i - s for i, s in zip(idx, self.offsets[self.sch[tensor]])]
            return Load(buf, [simplify(i) for i in idx])
        return map_loads(substitute(expr, env), to_buffer)

    def nest(self, stage):
        op = stage.op
        # Regions (and buffers) of everything computed inside this stage come first: the body reads them.
        # Inner loops first: a stage computed at an outer loop may be read by one computed further in.
        for position in reversed(range(len(stage.leaf))):
            iv = stage.leaf[position]
            children = self.children.get((stage, iv), [])
            inner = [c for later in stage.leaf[position + 1:] for c in self.children.get((stage, later), [])]
            consumers = {child: self.infer_region(child, stage, iv, children + inner)
                         for child in reversed(children)}     # readers before what they read
            for child in children:                               # buffers of producers first
                shape = tuple(child.op.axes[k].extent for k in range(len(child.op.axes)))
                self.buffers[child.tensor] = self.buffer_for(child, shape, consumers[child])
        env = self.absolute_roots(stage)
        out = self.buffers[stage.tensor]
        store_idx = [simplify(env[iv.var] - (self.offsets[stage][k] if out.scope != "global" else 0))
                     for k, iv in enumerate(op.axes)]
        body = op.body
        if isinstance(body, Reduce):
            update = ir.Store(out, store_idx, Load(out, store_idx) + self.map_body(body.source, env))
            init = ir.Store(out, store_idx, as_expr(0))
            first = next(k for k, iv in enumerate(stage.leaf) if iv.kind == "reduce")
            inner = stage.leaf[first:]
            spatial_inner = [iv for iv in inner if iv.kind == "spatial"]
            tail = ir.seq([self.loops(stage, spatial_inner, init, attach_children=False),
                           self.loops(stage, inner, update)])
            return self.loops(stage, stage.leaf[:first], tail)
        return self.loops(stage, stage.leaf, ir.Store(out, store_idx, self.map_body(body, env)))

    def loops(self, stage, ivs, body, attach_children=True):
        for iv in reversed(ivs):
            if attach_children:
                body = self.place_children(stage, iv, body)
            body = ir.For(iv.var, iv.extent, body, "vthread" if iv in stage.vthreads else "serial")
            if iv in stage.pragmas:
                body = ir.Attr("pragma", stage.pragmas[iv], body)
            if iv in stage.tensorized:
                body = ir.Attr("tensorize", stage.tensorized[iv], body)
        return body

    # -- attached stages -------------------------------------------------------------

    def place_children(self, stage, iv, body):
        children = self.children.get((stage, iv), [])
        if not children:
            return body
        nests = [self.nest(child) for child in children]
        body = ir.seq(nests + [body])
        for child in reversed(children):
            buf = self.buffers[child.tensor]
            if buf.scope != "global" and buf.tensor is child.tensor:
                body = ir.Allocate(buf, body)
        return body

    def infer_region(self, producer, stage, iv, siblings):
        """Start and extent of each output axis of ``producer`` that one iteration of ``iv`` needs."""
        ranges = []
        consumers = [c for c in [stage] + list(siblings) if not c.is_placeholder and producer.tensor in
                     self.reads(c)]
        if not consumers:
            raise LowerError(f"{producer.name} is computed at {stage.name}.{iv.name}, but nothing there "
                             f"reads it")
        for consumer in consumers:
            if consumer is stage:
                free = stage.leaf[stage.leaf.index(iv) + 1:]
            else:       # (one computed at a loop inside `iv` reads along the loops between, too)
                between = stage.leaf[stage.leaf.index(iv) + 1:stage.leaf.index(consumer.attach[1]) + 1]
                free = between + consumer.leaf
            free_ranges = {v.var: v.extent for v in free}
            env = self.absolute_roots(consumer)
            for load in self.loads_of(consumer, producer.tensor):
                dims = [self.index_range(simplify(substitute(index, env)), free_ranges, producer, consumer)
                        for index in load.indices]
                ranges.append(dims)
        region = []
        for k in range(len(producer.op.axes)):
            fixed = ranges[0][k][0]
            if any(r[k][0] != fixed for r in ranges):
                raise LowerError(f"{producer.name}: readers need regions at different places along "
                                 f"axis {k}")
            lo = min(r[k][1] for r in ranges)
            hi = max(r[k][1] + r[k][2] for r in ranges)
            start = simplify(sum((v * c for v, c in fixed.items()), as_expr(lo)))
            region.append((start, hi - lo + 1))
        self.offsets[producer] = [start for start, _ in region]
        producer.rebase({ax: extent for ax, (_, extent) in zip(producer.op.axes, region)})
        return consumers

    @staticmethod
    def index_range(index, free_ranges, producer, consumer):
        """``(fixed terms, start, span)``: ``index`` = fixed + [start, start + span] over the free loops.

        Affine indices are split exactly. Others (from ``fuse``) must separate into a part of the
        fixed loops and a part of the free ones; the free part's bounds then come from interval
        arithmetic.
        """
        form = linear(index)
        if form is not None:
            coeffs, start = form
            span, fixed = 0, {}
            for var, c in coeffs.items():
                if var in free_ranges:
                    lo, hi = sorted((0, c * (free_ranges[var] - 1)))
                    start += lo
                    span += hi - lo
                else:
                    fixed[var] = c
            return fixed, start, span
        others = free_vars(index) - set(free_ranges)
        zero_free = simplify(substitute(index, {v: 0 for v in free_ranges}))
        free_part = simplify(substitute(index, {v: 0 for v in others}))
        base = evaluate(substitute(free_part, {v: 0 for v in free_ranges}), {})
        rng = random.Random(0)
        for _ in range(8):          # index = zero_free + (free_part - base), checked on samples
            env = {v: rng.randrange(-50, 50) for v in others} | {v: rng.randrange(n) for v, n in free_ranges.items()}
            if evaluate(index, env) != evaluate(zero_free, env) + evaluate(free_part, env) - base:
                break
        else:
            bounds = interval(free_part, {v: (0, n - 1) for v, n in free_ranges.items()})
            fixed_form = linear(zero_free)
            if bounds is not None and fixed_form is not None:
                fixed, const = fixed_form
                return fixed, const + bounds[0] - base, bounds[1] - bounds[0]
        raise LowerError(f"cannot infer the region of {producer.name} read by {consumer.name}: "
                         f"index {index} is neither affine nor separable")

    def buffer_for(self, producer, shape, consumers):
        t = producer.tensor
        if producer.scope == "global":
            return self.buffers.setdefault(t, ir.Buffer(t.name, t.shape, t.dtype, "global", t))
        # In place: an accumulator stage computes into the buffer of the first accumulator tensor it
        # reads element by element, when it is that tensor's only reader and covers the same region.
        if producer.scope == "acc":
            for src in t.op.inputs:
                if src not in self.buffers or self.buffers[src].scope != "acc":
                    continue
                elementwise = all(len(ld.indices) == len(t.op.axes) and
                                  all(i is a.var for i, a in zip(ld.indices, t.op.axes))
                                  for ld in self.loads_of(producer, src))
                only_reader = [s for s in self.sch.stages if not s.is_placeholder and src in s.op.inputs] \
                    == [producer]
                same_region = self.buffers[src].shape == shape and ir.same_indices(
                    self.offsets[self.sch[src]], self.offsets[producer])
                if elementwise and only_reader and same_region:
                    return self.buffers[src]
        return ir.Buffer(t.name, shape, t.dtype, producer.scope, t)

    def reads(self, stage):
        """Tensors ``stage`` reads, looking through inlined stages."""
        out = []
        for t in stage.op.inputs:
            if t in self.inlined:
                out.extend(self.reads(self.sch[t]))
            else:
                out.append(t)
        return out

    def loads_of(self, stage, tensor):
        """Loads of ``tensor`` in ``stage``'s body (through inlined stages), in the stage's axes."""
        found = []

        def visit(load):
            if load.source is tensor:
                found.append(load)
            elif load.source in self.inlined:
                op = load.source.op
                inner = substitute(op.body, {a.var: i for a, i in zip(op.axes, load.indices)})
                map_loads(inner, visit)
            return load
        body = stage.op.body
        map_loads(body.source if isinstance(body, Reduce) else body, visit)
        return found


def lower(sch):
    """The loop nest of schedule ``sch`` as an :class:`ir.Function`."""
    return _Lowering(sch).run()
