"""Code generation: the loop IR becomes a :class:`~tilewright.compiler.program.Program`.

1. Remaining loops are unrolled; every DMA, GEMM and ALU operation becomes
   one instruction with concrete fields (the two folded loops become
   ``iter_out``/``iter_in`` and their index steps the factors).
   Latency hiding, part 3 (:mod:`.ends`): the first and last tiles'
   GEMMs, and the first tile's loads, in pieces.
2. Micro-op kernels are deduplicated and placed in the uop buffer: all at
   once when they fit, else in a ring reloaded before use.
3. Latency hiding, part 2: dependency tokens from read/write analysis. Each
   instruction's SRAM reads and writes are intervals; when an instruction
   conflicts (RAW, WAR or WAW) with instructions of a neighbouring stream not
   yet ordered before it, a token is pushed by the last of those conflicting
   instructions (not by everything that stream has been given) and popped
   before this one. FINISH waits for the last load and store the same way.
   Only conflicts create tokens, so replicated (virtual-thread) buffers let
   load run ahead of compute.
   A LOAD of input data that is still in place (same source, same SRAM
   interval, nothing written there since) is dropped.
4. The DRAM image: one aligned segment per tensor, the micro-op words, and
   zeros for fully padded tiles.
"""

from collections import Counter

import numpy as np

from tilewright import isa
from tilewright.builder import ProgramBuilder
from tilewright.isa import Alu, Gemm, Load, MemType, Store, Stream

from .. import ir
from ..expr import evaluate
from ..program import Program, Segment, segment_align
from ..schedule import ScheduleError
from .ends import pipeline_ends
from .items import FIELDS, Access, DmaItem, LoopItem

__all__ = ["CodegenError", "codegen"]

L, C, S = Stream.LOAD, Stream.COMPUTE, Stream.STORE
_NEIGHBOURS = {L: (C,), C: (L, S), S: (C,)}


class CodegenError(ScheduleError):
    """An operation whose fields do not fit the instruction set."""


def _value(e, env):
    return e if isinstance(e, int) else evaluate(e, env)


class _Emitter:
    def __init__(self, func, cfg):
        self.func, self.cfg = func, cfg
        self.items = []              # _Dma and LoopItem in program order, before uop placement
        self.zero_elems = {}         # MemType -> elements of zeros needed

    # -- 1. flatten --------------------------------------------------------------------

    def flatten(self, stmt, env):
        if isinstance(stmt, ir.Seq):
            for s in stmt.body:
                self.flatten(s, env)
        elif isinstance(stmt, ir.For):
            if stmt.kind != "serial":
                raise CodegenError(f"loop {stmt.var.name} is still a {stmt.kind} loop; inject virtual threads first")
            for k in range(stmt.extent):
                env[stmt.var] = k
                self.flatten(stmt.body, env)
            del env[stmt.var]
        elif isinstance(stmt, (ir.Allocate, ir.Attr)):
            if isinstance(stmt, ir.Attr):
                raise CodegenError(f"unlowered {stmt.key} mark ({stmt.value}); a pass is missing")
            self.flatten(stmt.body, env)
        elif isinstance(stmt, ir.Dma):
            self.items += self.dma(stmt, env)
        elif isinstance(stmt, (ir.Gemm, ir.Alu)):
            self.items.append(self.loop_op(stmt, env))
        elif isinstance(stmt, ir.Store):
            raise CodegenError(f"{stmt.buffer.name}: an element-wise store is left that no pass turned into "
                               f"DMA, GEMM or ALU (mark it with a pragma or tensorize)")
        else:
            raise CodegenError(f"cannot generate code for {stmt!r}")

    def dma(self, d, env):
        """The :class:`DmaItem` items of one DMA (a biased or scaled store loads its registers first: set_bias
        STOREs, the scale's with requant)."""
        v = {f: _value(getattr(d, f), env) for f in ("sram_index", "dram_index", "y_size", "x_size", "x_stride")}
        pads = [_value(p, env) for p in d.pads]
        sram = d.sram.offset + v["sram_index"]
        seg = self.func_segment(d.dram)
        elem = self.cfg.elem_bytes(d.mem.dram_elem)
        dram = seg // elem + v["dram_index"]
        y, x, stride = v["y_size"], v["x_size"], v["x_stride"]
        if d.direction == "store":
            q, fields, out = d.requant, {}, []
            if q:
                if q.scale is None and q.mul == 0 and self.cfg.per_channel_store:
                    raise CodegenError("a requantizing store with mul 0 would multiply by the scale register on "
                                       "this config (per_channel_store); fuse_requant keeps such a MUL on the ALU")
                # (mul = 0 selects the scale register, which a set_bias STORE with requant loads)
                fields = dict(requant=True, mul=q.mul, shift=q.shift, relu=q.relu, bias=q.bias is not None)
                for buffer, index, scale in ((q.scale, q.scale_index, True), (q.bias, q.bias_index, False)):
                    if buffer is not None:
                        entry = buffer.offset + _value(index, env)
                        out.append(DmaItem(Store(set_bias=True, requant=scale, sram_base=entry),
                                           Access(S, [("acc", entry, entry)], []), False))
            insn = Store(memory_type=MemType.OUT, sram_base=sram, dram_base=dram, y_size=y, x_size=x,
                         x_stride=stride, **fields)
            # A requantizing store reads the accumulators, a plain one the narrowed copies.
            return out + [DmaItem(insn, Access(S, [("acc" if q else "out", sram, sram + y * x - 1)], []), False)]
        rows, cols = pads[0] + y + pads[1], pads[2] + x + pads[3]
        if y <= 0 or x <= 0:     # the whole tile is padding: read zeros, one row over and over
            self.zero_elems[d.mem] = max(self.zero_elems.get(d.mem, 0), cols)
            insn = Load(memory_type=d.mem, sram_base=sram, dram_base=("zero", d.mem), y_size=rows, x_size=cols,
                        x_stride=0)
        else:
            insn = Load(memory_type=d.mem, sram_base=sram, dram_base=dram, y_size=y, x_size=x, x_stride=stride,
                        y_pad0=pads[0], y_pad1=pads[1], x_pad0=pads[2], x_pad1=pads[3])
        scope = {MemType.INP: "inp", MemType.WGT: "wgt"}.get(d.mem, "acc")
        stream = L if d.mem in (MemType.INP, MemType.WGT) else C
        # A load from an input tensor can be skipped when the same data is still in place.
        return [DmaItem(insn, Access(stream, [], [(scope, sram, sram + rows * cols - 1)]),
                        d.dram not in self.func.outputs)]

    def loop_op(self, op, env):
        """The :class:`LoopItem` of a GEMM/ALU with concrete values."""
        folded = [v for v, _ in op.loops]
        extents = [n for _, n in op.loops]
        base_env = {**env, **{v: 0 for v in folded}}
        offsets = {"dst": op.acc.offset}
        if isinstance(op, ir.Gemm):
            offsets.update(src=op.inp.offset if op.inp else 0, wgt=op.wgt.offset if op.wgt else 0)
        else:
            offsets.update(src=op.src.offset if op.src else 0, wgt=0)
        kernel = []
        for u in op.uops:
            kernel.append(tuple(_value(getattr(u, f), base_env) + (offsets[f] if getattr(u, f) is not None else 0)
                                for f in FIELDS))
        if isinstance(op, ir.Alu) and op.imm is not None:
            kernel = [(d, 0, 0) for d, _, _ in kernel]
        if isinstance(op, ir.Gemm) and op.reset:
            kernel = [(d, 0, 0) for d, _, _ in kernel]
        factors = []
        for v in folded:
            step = {f: _value(getattr(op.uops[0], f), {**base_env, v: 1}) - _value(getattr(op.uops[0], f), base_env)
                    for f in FIELDS}
            factors.append(step)
        while len(factors) < 2:
            factors.insert(0, {"dst": 0, "src": 0, "wgt": 0})
            extents.insert(0, 1)
        (n_out, n_in), (f_out, f_in) = extents, factors
        loops = dict(iter_out=n_out, iter_in=n_in, dst_factor_out=f_out["dst"], dst_factor_in=f_in["dst"],
                     src_factor_out=f_out["src"], src_factor_in=f_in["src"])
        if isinstance(op, ir.Gemm):
            loops.update(wgt_factor_out=f_out["wgt"], wgt_factor_in=f_in["wgt"])
            item = LoopItem(Gemm, tuple(kernel), loops, dict(reset=op.reset, overwrite=op.overwrite))
        else:
            item = LoopItem(Alu, tuple(kernel), loops, dict(alu_op=op.op, use_imm=op.imm is not None,
                                                            imm=op.imm if op.imm is not None else 0))
        return item

    def func_segment(self, buf):
        return self.segments[buf.name].offset

    # -- 4. DRAM image -------------------------------------------------------------------

    def layout(self):
        self.segments, offset = {}, 0
        for b in self.func.params:
            nbytes = int(np.prod(b.shape)) * int(b.dtype[3:]) // 8
            role = "output" if b in self.func.outputs else "input"
            self.segments[b.name] = Segment(b.name, offset, nbytes, role, tuple(b.shape), b.dtype)
            offset += self.aligned(nbytes)
        return offset

    def aligned(self, nbytes):
        """``nbytes`` rounded up to the config's segment alignment."""
        align = segment_align(self.cfg)
        return -(-nbytes // align) * align

    # -- 2, 3. micro-ops, tokens, instructions -------------------------------------------------

    def emit(self):
        cfg = self.cfg
        offset = self.layout()
        self.flatten(self.func.body, {})
        self.items = pipeline_ends(self.items, self.cfg)
        # Micro-op words: each distinct kernel once, in first-use order.
        kernels = list(dict.fromkeys(item.kernel for item in self.items if isinstance(item, LoopItem)))
        uop_fmt = isa.uop_format(cfg)
        words, dram_pos = [], {}
        for k in kernels:
            dram_pos[k] = len(words)
            words += [uop_fmt.pack(isa.Uop(dst=d, src=s, wgt=w)) for d, s, w in k]
        uop_bytes = cfg.elem_bytes("uop")
        uop_seg = Segment("uops", offset, max(1, len(words)) * uop_bytes, "uop")
        offset += self.aligned(uop_seg.nbytes)
        self.segments["uops"] = uop_seg
        for mem, count in self.zero_elems.items():
            nbytes = count * cfg.elem_bytes(mem.dram_elem)
            self.segments[f"zero_{mem.name.lower()}"] = Segment(f"zero_{mem.name.lower()}", offset, nbytes, "zero")
            offset += self.aligned(nbytes)
        for k in kernels:
            if len(k) > cfg.uop_depth:
                raise CodegenError(f"a micro-op kernel of {len(k)} exceeds the uop buffer ({cfg.uop_depth})")

        b = ProgramBuilder()
        # Per producer → consumer pair: producer instructions not yet known to be done
        # before the consumer's next instruction, as (index, access).
        uncovered = {(p, c): [] for c, ps in _NEIGHBOURS.items() for p in ps}

        # SRAM interval -> the input LOAD that filled it, while nothing else has written there.
        in_place = {}

        def sync_and_emit(insn, access):
            for w in access.writes:
                for key in [k for k in in_place if k[0] == w[0] and k[1] <= w[2] and w[1] <= k[2]]:
                    del in_place[key]
            c = access.stream
            for p in _NEIGHBOURS[c]:
                pending = uncovered[(p, c)]
                hits = [k for k, a in pending if access.conflicts(a)]
                if hits:
                    # Wait for the last conflicting instruction only, not for all of p.
                    pushed = b.push_after(p, c, max(hits))
                    b.pop(p, c)
                    uncovered[(p, c)] = [(k, a) for k, a in pending if k > pushed]
            k = b.emit(insn)
            for other in _NEIGHBOURS[c]:
                uncovered[(c, other)].append((k, access))

        # Resident micro-op kernels: all at once when they fit, else a ring.
        total = len(words)
        resident, ring = {}, 0
        if total <= cfg.uop_depth:
            if total:
                b.emit(Load(memory_type=MemType.UOP, sram_base=0, dram_base=uop_seg.offset // uop_bytes,
                            y_size=1, x_size=total, x_stride=total))
            resident = {k: dram_pos[k] for k in kernels}
        pieces_left = Counter(id(item.whole) for item in self.items if isinstance(item, DmaItem) and item.whole)
        for item in self.items:
            if isinstance(item, DmaItem):
                insn, access = item.insn, item.access
                if isinstance(insn.dram_base, tuple):
                    seg = self.segments[f"zero_{insn.dram_base[1].name.lower()}"]
                    insn = insn.replace(dram_base=seg.offset // cfg.elem_bytes(insn.memory_type.dram_elem))
                if not (item.reusable and in_place.get(access.writes[0]) == insn):
                    sync_and_emit(insn, access)   # (else, e.g., a bias tile reloaded for the next spatial tile)
                    if item.reusable:
                        in_place[access.writes[0]] = insn
                if item.whole is not None:      # all pieces in: the whole LOAD is in place
                    pieces_left[id(item.whole)] -= 1
                    if item.reusable and not pieces_left[id(item.whole)]:
                        in_place[item.whole.access.writes[0]] = item.whole.insn
                continue
            kernel, access = item.kernel, item.access
            if kernel not in resident:
                if ring + len(kernel) > cfg.uop_depth:
                    ring = 0
                lo, hi = ring, ring + len(kernel)
                resident = {k: p for k, p in resident.items() if p + len(k) <= lo or p >= hi}
                b.emit(Load(memory_type=MemType.UOP, sram_base=lo,
                            dram_base=uop_seg.offset // uop_bytes + dram_pos[kernel],
                            y_size=1, x_size=len(kernel), x_stride=len(kernel)))
                resident[kernel] = lo
                ring = hi
            start = resident[kernel]
            sync_and_emit(item.instruction(start, start + len(kernel)), access)
        for p in (L, S):         # FINISH waits for the last load and store
            if uncovered[(p, C)]:
                b.push_after(p, C, max(k for k, _ in uncovered[(p, C)]))
                b.pop(p, C)
        instructions = b.finish()
        for insn in instructions:
            try:
                isa.instruction_format(type(insn), cfg).check(insn)
            except isa.IsaError as e:
                raise CodegenError(f"{e}: the schedule needs a field the ISA cannot hold; use smaller tiles") from None
        uop_words = np.array(words, dtype=f"<u{uop_bytes}")
        return Program(self.func.name, cfg, instructions, self.segments, uop_words, offset)


def codegen(func, cfg):
    """Instructions, micro-ops and DRAM layout of a fully lowered ``func``."""
    return _Emitter(func, cfg).emit()
