"""Latency hiding, part 1: virtual threads become one interleaved instruction stream.

A loop bound to ``n`` virtual threads is unrolled: every buffer allocated
inside it has ``n`` replicas (planned by storage planning) and thread ``v``
uses replica ``v``. The threads' statements are interleaved by runs: a run of
consecutive statements of one stream (a loop of loads counts as one) goes out
for thread 0, then for thread 1, and so on, and loops that hold work of more
than one stream are descended into. The loads of thread 1 then come before
the GEMMs of thread 0 in program order, and dependency tokens (inserted at
code generation from read/write analysis) let the load stream run ahead
while compute works on the other replica; no thread's work is queued behind
the other's work that waits on an earlier token. Statements that use neither
the thread variable nor a replicated buffer run once.
"""

from tilewright.isa import MemType

from .. import ir
from ..schedule import ScheduleError

__all__ = ["inject_virtual_threads"]


def inject_virtual_threads(func, cfg=None):
    def rewrite(node):
        if isinstance(node, ir.For) and node.kind == "vthread":
            return _interleave(node)
        return None
    return func.with_body(ir.transform(func.body, rewrite))


def _replica(buf, v):
    clone = ir.Buffer(f"{buf.name}[{v}]" if buf.replicas > 1 else buf.name, buf.shape, buf.dtype, buf.scope,
                      buf.tensor)
    clone.offset = buf.offset + v * buf.elements
    return clone


def _interleave(loop):
    n, vt = loop.extent, loop.var
    local = []
    ir.walk(loop.body, lambda s: local.append(s.buffer) if isinstance(s, ir.Allocate) else None)
    for b in local:
        if b.offset is None or b.replicas < n:
            raise ScheduleError(f"{b.name}: plan storage before injecting virtual threads")
    replicas = {b: [_replica(b, v) for v in range(n)] for b in local}
    local_set = set(local)

    def depends(stmt):
        variables, buffers = ir.uses(stmt)
        return vt in variables or bool(buffers & local_set)

    def thread(stmt, v):
        return ir.substitute_leaves(stmt, {vt: v}, lambda b: replicas[b][v] if b in replicas else b)

    def unit_stream(stmt):
        """The stream of a statement emitted whole per thread (a leaf, or a loop of one stream's work)."""
        if not depends(stmt) or not isinstance(stmt, (ir.For, ir.Dma, ir.Gemm, ir.Alu, ir.Store)):
            return None
        streams = _streams(stmt)
        return streams.pop() if len(streams) == 1 else None

    def weave_seq(stmts):
        # Consecutive statements of one stream go out thread by thread, as runs:
        # thread 0's input and weight loads, then thread 1's, so that thread 0's
        # next GEMM does not wait behind loads of thread 1 that wait on its GEMM.
        stmts = _sink_compute(stmts)
        out, run, run_stream = [], [], None
        for s in stmts + [None]:
            stream = unit_stream(s) if s is not None else None
            if run and stream != run_stream:
                out += [thread(r, v) for v in range(n) for r in run]
                run = []
            if stream is not None:
                run.append(s)
                run_stream = stream
            elif s is not None:
                out.append(weave(s))
        return ir.seq(out)

    def weave(stmt):
        if isinstance(stmt, ir.Seq):
            return weave_seq(stmt.body)
        if isinstance(stmt, ir.Allocate):
            return ir.Allocate(stmt.buffer, weave(stmt.body))
        if isinstance(stmt, ir.Attr):
            return ir.Attr(stmt.key, stmt.value, weave(stmt.body))
        if isinstance(stmt, ir.For):
            if stmt.kind == "vthread":
                raise ScheduleError("nested virtual-thread loops are not supported; bind one axis")
            if not depends(stmt.body):
                return stmt
            if len(_streams(stmt.body)) > 1:
                return ir.For(stmt.var, stmt.extent, weave(stmt.body))
        return ir.seq([thread(stmt, v) for v in range(n)]) if depends(stmt) else stmt

    return weave(loop.body)


def _streams(stmt):
    """The instruction streams (load, compute, store) whose work ``stmt`` holds."""
    found = set()

    def visit(s):
        if isinstance(s, ir.Dma):
            found.add("store" if s.direction == "store" else
                      "load" if s.mem in (MemType.INP, MemType.WGT) else "compute")
        elif isinstance(s, (ir.Gemm, ir.Alu, ir.Store)):
            found.add("compute")
    ir.walk(stmt, visit)
    return found


def _sink_compute(stmts):
    """Move compute-stream leaves (a tile's bias LOAD ACC) past the loads that start the block after them.

    They then join that block's GEMMs in one run of compute work, so thread 1's
    copy lands right before thread 1's GEMMs instead of in front of thread 0's
    (where it would wait for thread 1's previous stores). Only past loads whose
    buffers they do not touch.
    """
    out = list(stmts)
    for i in range(len(out) - 2, -1, -1):
        stmt, block = out[i], out[i + 1]
        if not isinstance(stmt, (ir.Dma, ir.Gemm, ir.Alu)) or _streams(stmt) != {"compute"}:
            continue
        allocs = []
        while isinstance(block, ir.Allocate):
            allocs.append(block.buffer)
            block = block.body
        if not isinstance(block, ir.Seq):
            continue
        mine = ir.uses(stmt)[1]
        j = 0
        while j < len(block.body) and _streams(block.body[j]) == {"load"} and not mine & ir.uses(block.body[j])[1]:
            j += 1
        if j == 0 or mine & set(allocs):
            continue
        inner = ir.Seq(block.body[:j] + [stmt] + block.body[j:])
        for buf in reversed(allocs):
            inner = ir.Allocate(buf, inner)
        out[i:i + 2] = [None, inner]
    return [s for s in out if s is not None]
