"""Latency hiding, part 3: a layer's fill and drain, shortened (on code generation's flat item list).

A layer's first GEMM waits until its whole first tile is loaded, and its
last STORE until its whole last tile is computed: with one instruction per
tile, that is a tile's worth of loading and of storing with nothing else
going on. :func:`pipeline_ends` splits the first and last tiles' GEMMs
along their outer loop, and the first tile's loads by the piece that first
reads each part, so that the dependency tokens (code generation's
read/write analysis) let each piece wait for just what it needs. It only
splits where that pays: pieces long enough to pay for an instruction each,
few micro-ops added, a first piece that waits for at most half the bytes,
a last GEMM whose first piece holds all that a STORE reads.
"""

from tilewright.isa import Gemm, Load, Stream

from .items import Access, DmaItem, LoopItem

__all__ = ["pipeline_ends"]

L, S = Stream.LOAD, Stream.STORE


#: Micro-op iterations below which a GEMM piece is not worth an instruction (up to 14 cycles of its own
#: when it pushes to the store stream), and micro-ops its pieces may add (a micro-op takes a cycle of the
#: program's first LOAD: on `small`, 3×3 layers' last GEMMs in quarters, 378 more, cost more than their
#: stores gained).
_PIECE_MIN_UOPS, _PIECES_MAX_UOPS = 64, 64


#: GEMM pieces a first tile's GEMMs are split into, and a last tile's. Measured on ResNet-18's layers
#: (`tilewright bench resnet18`): halves at the start (of 2, 3, 4, 8 and doubling runs), quarters at
#: the end (of 2, 4 and 8); each piece costs some cycles of its own.
PROLOGUE_PIECES, EPILOGUE_PIECES = 2, 4


def _splittable(op, parts):
    """Whether ``op`` is a GEMM worth splitting into ``parts``: each piece runs long enough to pay for its own
    instruction, and the pieces' micro-ops (each its own copy, loaded with the program's others before the
    first instruction computes) are few."""
    if not isinstance(op, LoopItem) or op.kind is not Gemm or op.fields["reset"]:
        return False
    n = op.loops["iter_out"]
    return (n > 1 and n // min(parts, n) * op.loops["iter_in"] * len(op.kernel) >= _PIECE_MIN_UOPS
            and (min(parts, n) - 1) * len(op.kernel) <= _PIECES_MAX_UOPS)


def pipeline_ends(items, cfg):
    """``items`` (:class:`DmaItem` and :class:`LoopItem` in program order) with the first and last
    tiles in pieces.

    Start: the GEMMs before the load stream's second run (each virtual thread's first tile) are split
    along their outer loop, runs of them that accumulate into the same rows interleaved, and the loads
    before them are split by the piece that first reads each part and ordered by first use. End: the
    last GEMM on a tile's rows is split the same way when its first piece holds all that a STORE
    reads. The work is the same.
    """
    first = next((i for i, item in enumerate(items) if isinstance(item, LoopItem)), None)
    if first is None:
        return items
    end = next((i for i in range(first, len(items)) if items[i].access.stream == L), len(items))
    tail = max(end, 1 + max((i for i, item in enumerate(items) if item.access.stream == L), default=-1))
    return _pipelined_start(items[:first], items[first:end], cfg) + items[end:tail] + _pipelined_end(items[tail:])


def _pipelined_start(head, gemms, cfg):
    """``head + gemms`` (the items before the first GEMM, and from it to the load stream's next item),
    split and reordered so that the first GEMM piece waits for part of the loads only; unchanged
    unless the first GEMM splits and so does a load."""
    if not _splittable(gemms[0], PROLOGUE_PIECES):
        return head + gemms
    pieces, origin = _split_gemms(gemms, PROLOGUE_PIECES)
    loads = _loads_by_first_use(head, pieces, origin)
    # worth a few instructions more only when the first piece waits for at most half the bytes
    if 2 * _bytes_waited(loads, pieces[0], cfg) > _bytes_waited(head, gemms[0], cfg):
        return head + gemms
    return loads + pieces


def _bytes_waited(items, op, cfg):
    """Bytes the load stream moves (in ``items``' order) before ``op`` has all it reads."""
    loads = [d for d in items if d.access.stream == L]
    last = max((k for k, d in enumerate(loads) if d.access.conflicts(op.access)), default=-1)
    return sum(d.insn.y_size * d.insn.x_size * cfg.elem_bytes(d.insn.memory_type.dram_elem) for d in loads[:last + 1])


def _pipelined_end(items):
    """``items`` (after the load stream's last) with each last GEMM on its rows split when a STORE
    after it reads only rows of its first piece."""
    out = []
    for i, item in enumerate(items):
        if not _splittable(item, EPILOGUE_PIECES) or any(
                isinstance(later, LoopItem) and later.access.conflicts(item.access) for later in items[i + 1:]):
            out.append(item)        # (not the last GEMM on its rows)
            continue
        first, *rest = pieces = item.split_outer(EPILOGUE_PIECES)
        # a STORE of the first piece's rows that no later piece holds back (tokens go by intervals)
        early = any(later.access.stream == S and _within(later.access.reads, first.rows_written)
                    and not any(later.access.conflicts(p.access) for p in rest) for later in items[i + 1:])
        out += pieces if early else [item]
    return out


def _within(reads, rows):
    """Whether ``reads`` (accumulator intervals) are all in the set ``rows``."""
    return bool(reads) and all(m == "acc" and rows.issuperset(range(lo, hi + 1)) for m, lo, hi in reads)


def _split_gemms(items, parts):
    """``items`` with each splittable GEMM split along its outer loop (runs of them interleaved), and a
    map from each piece's ``id`` to the GEMM it came from."""
    out, origin, run = [], {}, []
    for item in items + [None]:
        if _splittable(item, parts):
            run.append(item)
            continue
        if run:
            pieces = [op.split_outer(parts) for op in run]
            origin.update((id(piece), op) for op, op_pieces in zip(run, pieces) for piece in op_pieces)
            out += _interleaved(pieces)
            run = []
        if item is not None:
            out.append(item)
    return out, origin


def _interleaved(pieces):
    """Pieces ``[op][k]`` of GEMMs that accumulate into the same rows as iteration k of every op, then
    k + 1, …, so that the first rows are complete early; else (or when that would reorder two that
    conflict) op by op."""
    flat = [x for op in pieces for x in op]
    if len({len(op) for op in pieces}) != 1 or any(
            a.access.writes != b.access.writes for op in pieces[1:] for a, b in zip(pieces[0], op)):
        return flat
    order = [op[k] for k in range(len(pieces[0])) for op in pieces]
    rank = {id(x): i for i, x in enumerate(order)}
    if any(rank[id(a)] > rank[id(b)] and a.access.conflicts(b.access)
           for i, a in enumerate(flat) for b in flat[i + 1:]):
        return flat
    return order


def _loads_by_first_use(head, prologue, origin):
    """``head``, the items before the first GEMM, with its loads split by the GEMM piece (in
    ``prologue``; ``origin``: piece → GEMM) that first reads each part, and ordered by first use."""
    def first_use(access):
        return next((i for i, op in enumerate(prologue) if access.conflicts(op.access)), len(prologue))
    loads = [item for item in head if item.access.stream == L]
    rest = [item for item in head if item.access.stream != L]
    pieces = []
    for d in loads:
        use = first_use(d.access)
        op = prologue[use] if use < len(prologue) else None
        pieces += _load_pieces(d, origin.get(id(op), op), first_use) if isinstance(op, LoopItem) else [d]
    if any(a.access.conflicts(b.access) for i, a in enumerate(pieces) for b in pieces[i + 1:] + rest):
        return head             # (loads that overlap keep their order)
    return sorted(pieces, key=lambda d: first_use(d.access)) + rest


#: The GEMM loop field that steps through each memory a LOAD fills, per outer iteration.
_FACTOR_OUT = {"inp": "src_factor_out", "wgt": "wgt_factor_out"}


def _load_pieces(d, op, first_use):
    """LOAD ``d`` as runs of rows (or, for one row, of chunks of ``op``'s outer step) first read by the
    same GEMM piece."""
    insn, (mem, lo, _) = d.insn, d.access.writes[0]
    if not isinstance(insn, Load) or isinstance(insn.dram_base, tuple):
        return [d]
    if insn.y_pad0 or insn.y_pad1:
        return [d]
    if insn.y_size > 1:
        unit, n, along = insn.sram_cols, insn.y_size, "y_size"
        dram_step = insn.x_stride
    else:
        unit = op.loops[_FACTOR_OUT[mem]] if mem in _FACTOR_OUT else 0
        if insn.x_pad0 or insn.x_pad1 or not 0 < unit < insn.x_size or insn.x_size % unit:
            return [d]
        n, along, dram_step = insn.x_size // unit, "x_size", unit
    uses = [first_use(Access(L, [], [(mem, lo + k * unit, lo + (k + 1) * unit - 1)])) for k in range(n)]
    runs = [k for k in range(n) if k == 0 or uses[k] != uses[k - 1]] + [n]
    if len(runs) == 2:
        return [d]
    return [DmaItem(insn.replace(sram_base=insn.sram_base + a * unit, dram_base=insn.dram_base + a * dram_step,
                              **{along: (b - a) * (1 if along == "y_size" else unit)}),
                 Access(L, [], [(mem, lo + a * unit, lo + b * unit - 1)]), d.reusable, d)
            for a, b in zip(runs, runs[1:])]
