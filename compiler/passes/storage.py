"""Storage planning: place every on-chip buffer in its SRAM, replicas included.

A buffer allocated inside a virtual-thread loop gets one replica per
thread. Buffers of one scope are laid out one after another; a plan that
needs more entries than the SRAM has fails with the buffer, the bytes needed
and the capacity.
"""

from .. import ir
from ..schedule import ScheduleError

__all__ = ["StorageError", "plan_storage", "SCOPE_MEMORY"]

#: Loop-IR scope -> HwConfig memory name.
SCOPE_MEMORY = {"inp": "inp", "wgt": "wgt", "acc": "acc"}


class StorageError(ScheduleError):
    """Buffers do not fit their SRAM."""


def plan_storage(func, cfg):
    """Set ``offset`` and ``replicas`` of every on-chip buffer of ``func`` (returned unchanged)."""
    placed = {scope: [] for scope in SCOPE_MEMORY}

    def visit(stmt, threads):
        if isinstance(stmt, ir.For):
            visit(stmt.body, threads * (stmt.extent if stmt.kind == "vthread" else 1))
        elif isinstance(stmt, ir.Allocate):
            buf = stmt.buffer
            if buf.scope not in SCOPE_MEMORY:
                raise StorageError(f"{buf.name}: unknown scope {buf.scope!r}")
            buf.replicas = threads
            placed[buf.scope].append(buf)
            visit(stmt.body, threads)
        elif isinstance(stmt, (ir.Attr,)):
            visit(stmt.body, threads)
        elif isinstance(stmt, ir.Seq):
            for s in stmt.body:
                visit(s, threads)

    visit(func.body, 1)
    for scope, buffers in placed.items():
        mem = SCOPE_MEMORY[scope]
        depth, elem = cfg.depth(mem), cfg.elem_bytes(mem)
        offset = 0
        for buf in buffers:
            buf.offset = offset
            offset += buf.elements * buf.replicas
        if offset > depth:
            parts = ", ".join(f"{b.name} {b.elements * elem} B" + (f" × {b.replicas} threads" if b.replicas > 1 else "")
                              for b in buffers)
            raise StorageError(f"the {scope} buffer needs {offset * elem} bytes ({parts}) but has "
                               f"{depth * elem} bytes; use smaller tiles or fewer virtual threads")
    return func
