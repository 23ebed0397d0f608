"""Constrained-random programs with a valid token protocol.

A program is a sequence of *steps*; step ``j`` belongs to virtual thread
``t = j mod T`` and uses only region ``t`` of the inp, wgt and acc/out
SRAMs. Each step has a load block (random padded LOADs of INP and WGT), a
compute block (random LOAD UOP / ACC / ACC8, GEMM and ALU instructions whose
indices stay inside the region) and a store block (a random STORE out of
the region, requantizing accumulators now and then, with a bias row latched
by ``set_bias`` or left from an earlier store, and on a config with
``per_channel_store`` now and then per channel, by a scale row latched the
same way). Tokens order exactly what conflicts: load → compute and
compute → store (RAW), compute → load and store → compute (WAR on a
region's reuse ``T`` steps later). Blocks are emitted in a random order
consistent with those dependencies, so the streams interleave differently
from seed to seed, and no fetch order can deadlock: every instruction that
waits for a token comes after its producer in program order.

The result is deterministic on any correct implementation: fsim and the RTL
must leave identical DRAM and counters. With ``over_program``, one STORE is
aimed into the program's own instructions: both must stop with
``STORE_OVER_PROGRAM`` at that STORE, having written nothing of it.
"""

import dataclasses
import random
from dataclasses import dataclass, field

import numpy as np

from tilewright import isa
from tilewright.asm import disassemble
from tilewright.builder import ProgramBuilder
from tilewright.isa import Alu, AluOp, Gemm, Load, MemType, Store, Stream, Uop

from .dram import Dram

__all__ = ["ProgramImage", "random_program", "program_image", "store_over_program", "clearing_program"]


@dataclass
class ProgramImage:
    """A self-contained program: a DRAM image holding its data and its instructions."""
    cfg: object
    seed: int
    dram: bytes
    dram_bytes: int
    insn_addr: int
    binary: bytes = field(repr=False)
    threads: int = 1

    @property
    def insn_count(self):
        return len(self.binary) // isa.INSN_BYTES

    def listing(self):
        """Assembly of the program, one numbered line per instruction (raw hex if illegal)."""
        lines = []
        for k in range(self.insn_count):
            word = self.binary[k * isa.INSN_BYTES:(k + 1) * isa.INSN_BYTES]
            try:
                text = disassemble(word, self.cfg).strip()
            except isa.IsaError:
                text = f".word 0x{int.from_bytes(word, 'little'):032x}"
            lines.append(f"{k:4d}: {text}")
        return "\n".join(lines)


def program_image(cfg, program, *, dram=None, dram_bytes=1 << 16, seed=0, threads=1):
    """Place ``program`` (instructions or encoded bytes) after the data already in ``dram``."""
    dram = dram or Dram(dram_bytes)
    binary = program if isinstance(program, (bytes, bytearray)) else isa.encode_program(program, cfg)
    insn_addr = dram.alloc(len(binary), align=isa.PROGRAM_ALIGN)
    dram.write(insn_addr, binary)
    return ProgramImage(cfg=cfg, seed=seed, dram=dram.data.tobytes(), dram_bytes=dram.size,
                        insn_addr=insn_addr, binary=bytes(binary), threads=threads)


class _Generator:
    def __init__(self, cfg, seed, dram_bytes, steps, threads):
        self.cfg, self.rng = cfg, random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.seed, self.dram_bytes = seed, dram_bytes
        self.threads = threads or self.rng.choice([1, 2, 3])
        self.steps = steps or self.rng.randint(1, 6)
        self.dram = Dram(dram_bytes)
        c = cfg
        # DRAM areas of random data to load from, and one to store into.
        self.areas = {}
        for mem, elems in (("inp", 96), ("wgt", 48), ("acc", 48), ("acc8", 48), ("uop", 256), ("out", 128)):
            size = elems * c.elem_bytes(mem)
            addr = self.dram.alloc(size, align=max(64, c.elem_bytes(mem)))
            self.areas[mem] = (addr // c.elem_bytes(mem), elems)
            if mem not in ("uop", "out"):
                self.dram.write(addr, self.np_rng.integers(0, 256, size, dtype=np.uint8))
        self.uop_cursor = 0                       # next free element of the uop area
        self.uop_format = isa.uop_format(c)

    def field_value(self, cls, name):
        """A uniformly random value of field ``name`` of ``cls``, over the field's whole range."""
        f = isa.instruction_format(cls, self.cfg).by_name[name]
        return self.rng.randint(f.min, f.max)

    def region(self, mem, t):
        size = self.cfg.depth(mem) // self.threads
        return t * size, size

    # -- LOAD / STORE ------------------------------------------------------------

    def rect(self, room, *, pads=True):
        """(rows, cols, pads) of a random rectangle of at most ``room`` entries."""
        r = self.rng
        while True:
            y, x = r.randint(1, 4), r.randint(1, 6)
            p = [r.choice([0, 0, 1, 2, 3]) for _ in range(4)] if pads else [0, 0, 0, 0]
            if (p[0] + y + p[1]) * (p[2] + x + p[3]) <= room:
                return y, x, p
            if room < 2:
                return 1, 1, [0, 0, 0, 0]

    def load(self, mem, region, memory_type=None):
        base, size = region
        y, x, (py0, py1, px0, px1) = self.rect(size)
        extent = (py0 + y + py1) * (px0 + x + px1)
        sram = base + self.rng.randint(0, size - extent)
        area, elems = self.areas[mem]
        stride = self.rng.choice([x, x, x + self.rng.randint(0, 3), 0 if y == 1 else x])
        last_start = elems - ((y - 1) * stride + x)
        dram = area + self.rng.randint(0, max(0, last_start))
        return Load(memory_type=memory_type or MemType[mem.upper()], sram_base=sram, dram_base=dram,
                    y_size=y, x_size=x, x_stride=stride, y_pad0=py0, y_pad1=py1, x_pad0=px0, x_pad1=px1)

    def store(self, region):
        base, size = region
        y, x, _ = self.rect(size, pads=False)
        area, elems = self.areas["out"]
        stride = self.rng.choice([x, x + self.rng.randint(1, 3), max(1, x - 1)])
        dram = area + self.rng.randint(0, max(0, elems - ((y - 1) * stride + x)))
        requant, insns = {}, []
        r = self.rng
        if self.cfg.requant_store and r.random() < 0.4:     # requantize accumulators on the way out
            mul = r.choice([1, r.randint(-9, 9), self.field_value(Store, "mul")])
            requant = dict(requant=True, relu=r.random() < 0.5, shift=self.field_value(Store, "shift"), mul=mul,
                           bias=r.random() < 0.6)
            if requant["bias"] and self.rng.random() < 0.7:     # else the register from an earlier store
                insns.append(Store(set_bias=True, sram_base=base + self.rng.randint(0, size - 1)))
            if self.cfg.per_channel_store and r.random() < 0.5:     # per channel: the scale register's lanes
                requant["mul"] = 0
                if r.random() < 0.7:
                    insns.append(Store(set_bias=True, requant=True, sram_base=base + r.randint(0, size - 1)))
        return insns + [Store(memory_type=MemType.OUT, sram_base=base + self.rng.randint(0, size - y * x),
                              dram_base=dram, y_size=y, x_size=x, x_stride=stride, **requant)]

    # -- GEMM / ALU ----------------------------------------------------------------

    def loops(self, regions):
        """Loop counts, per-index factors and micro-ops whose indices stay inside ``regions``."""
        r = self.rng
        iter_out, iter_in = r.choice([1, 1, 2, 3, 0]), r.choice([1, 2, 3, 4])
        n_uops = r.randint(1, 4)
        factors, uops = {}, {name: [] for name in regions}
        for name, (base, size) in regions.items():
            while True:
                f_out, f_in = r.randint(0, 3), r.randint(0, 3)
                reach = max(0, iter_out - 1) * f_out + max(0, iter_in - 1) * f_in
                if reach < size:
                    break
            factors[name] = (f_out, f_in)
            uops[name] = [base + r.randint(0, size - 1 - reach) for _ in range(n_uops)]
        # Repeat a destination sometimes: reductions within one instruction.
        if n_uops > 1 and r.random() < 0.3:
            uops["dst"][1] = uops["dst"][0]
        micro = [Uop(dst=uops["dst"][k], src=uops.get("src", [0] * n_uops)[k],
                     wgt=uops.get("wgt", [0] * n_uops)[k]) for k in range(n_uops)]
        fields = dict(iter_out=iter_out, iter_in=iter_in)
        for name, (f_out, f_in) in factors.items():
            fields[f"{name}_factor_out"], fields[f"{name}_factor_in"] = f_out, f_in
        return micro, fields

    def load_uops(self, uops):
        """A LOAD UOP placing ``uops`` at a random uop-SRAM offset; returns (insn, first index)."""
        area, elems = self.areas["uop"]
        # Every step's micro-ops get their own DRAM: at most 6 steps × 3 instructions × 4 uops fit.
        assert self.uop_cursor + len(uops) <= elems, "uop area too small"
        words = np.array([self.uop_format.pack(u) for u in uops], dtype=f"<u{self.cfg.elem_bytes('uop')}")
        self.dram.write((area + self.uop_cursor) * self.cfg.elem_bytes("uop"), words)
        sram = self.rng.randint(0, self.cfg.uop_depth - len(uops))
        insn = Load(memory_type=MemType.UOP, sram_base=sram, dram_base=area + self.uop_cursor,
                    y_size=1, x_size=len(uops), x_stride=len(uops))
        self.uop_cursor += len(uops)
        return insn, sram

    def gemm(self, t):
        acc, inp, wgt = self.region("acc", t), self.region("inp", t), self.region("wgt", t)
        uops, fields = self.loops({"dst": acc, "src": inp, "wgt": wgt})
        load, first = self.load_uops(uops)
        mode = self.rng.choice(["reset", "overwrite", "accumulate", "accumulate"])
        return [load, Gemm(reset=mode == "reset", overwrite=mode == "overwrite", uop_bgn=first,
                           uop_end=first + len(uops), **fields)]

    def alu(self, t):
        r = self.rng
        acc = self.region("acc", t)
        use_imm = r.random() < 0.5
        uops, fields = self.loops({"dst": acc} if use_imm else {"dst": acc, "src": acc})
        load, first = self.load_uops(uops)
        op = r.choice(list(AluOp))
        if op == AluOp.SHR:     # amounts past the accumulator width saturate: reach past them both ways
            imm = r.randint(-self.cfg.acc_width - 8, self.cfg.acc_width + 8)
        else:
            imm = r.choice([r.randint(-8, 8), self.field_value(Alu, "imm")])
        return [load, Alu(alu_op=op, use_imm=use_imm, imm=imm if use_imm else 0,
                          uop_bgn=first, uop_end=first + len(uops), **fields)]

    # -- blocks and their order ----------------------------------------------------

    def blocks(self):
        r, T, n = self.rng, self.threads, self.steps
        blocks = {}
        for j in range(n):
            t = j % T
            loads = [self.load(mem, self.region(mem, t)) for mem in ("inp", "wgt") if r.random() < 0.85]
            compute = []
            for _ in range(r.randint(1, 3)):
                kind = r.choice(["gemm", "gemm", "alu", "alu", "acc", "acc8"])
                if kind in ("acc", "acc8"):
                    compute.append(self.load(kind, self.region("acc", t), MemType[kind.upper()]))
                else:
                    compute.extend(getattr(self, kind)(t))
            blocks[("load", j)] = loads
            blocks[("compute", j)] = compute
            blocks[("store", j)] = self.store(self.region("out", t)) if r.random() < 0.9 else []
        return blocks

    def order(self):
        """A random topological order of the blocks under the token dependencies."""
        T, n = self.threads, self.steps
        deps = {}
        for j in range(n):
            deps[("load", j)] = {("load", j - 1), ("compute", j - T)}
            deps[("compute", j)] = {("compute", j - 1), ("load", j), ("store", j - T)}
            deps[("store", j)] = {("store", j - 1), ("compute", j)}
        deps = {b: {d for d in ds if d[1] >= 0} for b, ds in deps.items()}
        done, order = set(), []
        while len(order) < len(deps):
            ready = sorted(b for b, ds in deps.items() if b not in done and ds <= done)
            pick = self.rng.choice(ready)
            done.add(pick)
            order.append(pick)
        return order

    def program(self):
        T, n = self.threads, self.steps
        S = Stream
        blocks, b = self.blocks(), ProgramBuilder()
        for kind, j in self.order():
            if kind == "load":
                if j >= T:
                    b.pop(S.COMPUTE, S.LOAD)
                for insn in blocks[kind, j]:
                    b.emit(insn)
                b.push(S.LOAD, S.COMPUTE)
            elif kind == "compute":
                b.pop(S.LOAD, S.COMPUTE)
                if j >= T:
                    b.pop(S.STORE, S.COMPUTE)
                for insn in blocks[kind, j]:
                    b.emit(insn)
                if j + T < n:
                    b.push(S.COMPUTE, S.LOAD)
                b.push(S.COMPUTE, S.STORE)
            else:
                b.pop(S.COMPUTE, S.STORE)
                for insn in blocks[kind, j]:
                    b.emit(insn)
                if j + T < n or j == n - 1:
                    b.push(S.STORE, S.COMPUTE)
        b.pop(S.STORE, S.COMPUTE)
        return b.finish()


def random_program(cfg, seed, *, dram_bytes=1 << 16, steps=None, threads=None, over_program=False):
    """A :class:`ProgramImage` for ``cfg``, fully determined by ``seed`` (see the module docstring)."""
    g = _Generator(cfg, seed, dram_bytes, steps, threads)
    image = program_image(cfg, g.program(), dram=g.dram, seed=seed, threads=g.threads)
    return store_over_program(image, seed) if over_program else image


def clearing_program(cfg, *, dram_bytes=1 << 16):
    """A :class:`ProgramImage` that zeroes every SRAM (uop, inp, wgt, acc and out) from a zero DRAM row: run
    before a program, it makes the program's outcome independent of what ran before (after a run cut
    short by a fault, say), on fsim and the RTL alike."""
    b, row = ProgramBuilder(), 16               # each buffer loaded as rows of `row` entries, all one DRAM row
    dram = Dram(dram_bytes)
    widest = max(cfg.elem_bytes(m) for m in ("inp", "wgt", "uop"))
    zeros = dram.alloc(row * widest, align=widest)
    for mem in (MemType.INP, MemType.WGT):
        b.emit(Load(memory_type=mem, dram_base=zeros // cfg.elem_bytes(mem.dram_elem),
                    y_size=cfg.depth(mem.buffer) // row, x_size=row, x_stride=0))
    b.push(Stream.LOAD, Stream.COMPUTE)
    b.pop(Stream.LOAD, Stream.COMPUTE)
    b.emit(Load(memory_type=MemType.UOP, dram_base=zeros // cfg.elem_bytes("uop"), y_size=cfg.uop_depth // row,
                x_size=row, x_stride=0))
    acc = cfg.acc_depth
    b.emit(Alu(alu_op=AluOp.MUL, use_imm=True, imm=0, uop_end=1, iter_out=acc // row, iter_in=row,
               dst_factor_out=row, dst_factor_in=1))          # (acc and out, from micro-op 0 = (0, 0, 0))
    return program_image(cfg, b.finish(), dram=dram)


def store_over_program(image, seed):
    """``image`` with one of its STOREs (chosen by ``seed``) writing from an element of its own instructions
    on; the program keeps its length and place."""
    cfg = image.cfg
    insns = isa.decode_program(image.binary, cfg)
    stores = [k for k, insn in enumerate(insns) if isinstance(insn, Store) and not insn.moves_nothing]
    if not stores:
        return image
    rng = random.Random(seed)
    elem = cfg.elem_bytes("out")
    first, end = image.insn_addr // elem, -(-(image.insn_addr + len(image.binary)) // elem)
    k = rng.choice(stores)
    insns[k] = insns[k].replace(dram_base=rng.randrange(first, end))
    binary = isa.encode_program(insns, cfg)
    dram = bytearray(image.dram)
    dram[image.insn_addr:image.insn_addr + len(binary)] = binary
    return dataclasses.replace(image, dram=bytes(dram), binary=binary)
