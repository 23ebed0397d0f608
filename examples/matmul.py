"""Hand-scheduled ISA programs: a blocked, requantized int8 matrix multiply.

This is the program the demo, the fsim benchmark and the tests run. It is
written directly against the ISA, with virtual threads done by hand:
consecutive load/compute steps alternate between ``threads`` regions of the
inp and wgt buffers and consecutive output tiles between ``threads`` regions
of acc/out, and dependency tokens let the load stream run up to ``threads``
steps ahead of compute.

Layouts in DRAM (``b`` = batch, ``BI``/``BO`` = block_in/block_out):

* A (M×K) as INP elements ``[M/b][K/BI]`` of ``b×BI``;
* B (N×K, one row per output column) as WGT elements ``[N/BO][K/BI]`` of ``BO×BI``;
* C (M×N) as OUT elements ``[M/b][N/BO]`` of ``b×BO``.
"""

import itertools
from dataclasses import dataclass

import numpy as np

from tilewright.builder import ProgramBuilder
from tilewright.config import load_config
from tilewright.isa import Alu, AluOp, Gemm, Load, MemType, Store, Stream, Uop, uop_format

__all__ = ["BlockedMatmul", "pack_rows", "unpack_rows"]


def pack_rows(x, rows, cols):
    """(R·rows × C·cols) matrix → array of ``rows×cols`` blocks in ``[R][C]`` order."""
    R, C = x.shape[0] // rows, x.shape[1] // cols
    return np.ascontiguousarray(x.reshape(R, rows, C, cols).transpose(0, 2, 1, 3))


def unpack_rows(blocks):
    """Inverse of :func:`pack_rows`: ``[R][C]`` blocks of ``rows×cols`` → matrix."""
    R, C, rows, cols = blocks.shape
    return blocks.transpose(0, 2, 1, 3).reshape(R * rows, C * cols)


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class _Tiles:
    m: int   # output rows per tile, in batch blocks
    n: int   # output columns per tile, in block_out blocks
    k: int   # reduction per step, in block_in blocks


class BlockedMatmul:
    """``C = clip((A·Bᵀ · mul) >> shift, lo, hi)`` as one ISA program.

    ``A`` is M×K, ``B`` is N×K, both signed of the input/weight width; the
    product accumulates in ``acc_width`` (wrapping), is multiplied by ``mul``
    and shifted right arithmetically by ``shift`` in the ALU, and clipped to
    the output range (``lo`` is 0 with ``relu``).

    Parameters
    ----------
    config : HwConfig or str
    M, K, N : int
        Multiples of batch, block_in and block_out.
    threads : int
        Virtual threads (buffer regions); 1 runs load and compute in lockstep.
    tiles : (m, n, k) or None
        Tile sizes in blocks; chosen to fill the buffers when None.
    """

    def __init__(self, config, M, K, N, *, threads=2, tiles=None, mul=1, shift=0, relu=False):
        c = self.cfg = load_config(config)
        for name, size, block in (("M", M, c.batch), ("K", K, c.block_in), ("N", N, c.block_out)):
            if size <= 0 or size % block:
                raise ValueError(f"{name}={size} must be a positive multiple of {block}")
        if threads < 1:
            raise ValueError(f"threads={threads} must be at least 1")
        self.M, self.K, self.N, self.threads = M, K, N, threads
        self.mul, self.shift, self.relu = mul, shift, relu
        self.blocks = (M // c.batch, K // c.block_in, N // c.block_out)
        self.tiles = _Tiles(*tiles) if tiles else self._choose_tiles()
        self._check_tiles()
        # DRAM segments, in bytes from the base address; each is aligned to its element.
        MB, KB, NB = self.blocks
        sizes = {"uop": len(self.uops()) * c.elem_bytes("uop"), "inp": MB * KB * c.elem_bytes("inp"),
                 "wgt": NB * KB * c.elem_bytes("wgt"), "out": MB * NB * c.elem_bytes("out")}
        self.segments, offset = {}, 0
        for name, size in sizes.items():
            align = c.elem_bytes(name)
            offset = -(-offset // align) * align
            self.segments[name] = (offset, size)
            offset += size
        self.dram_bytes = offset
        self.alignment = max(c.elem_bytes(m) for m in sizes)

    # -- tiling --------------------------------------------------------------

    def _region(self, buffer):
        return self.cfg.depth(buffer) // self.threads

    def _fits(self, t):
        T = self.threads
        return (t.m * t.k <= self._region("inp") and t.n * t.k <= self._region("wgt")
                and t.m * t.n <= self._region("acc") and T * T * t.k + T <= self.cfg.uop_depth)

    def _choose_tiles(self):
        MB, KB, NB = self.blocks
        options = [_Tiles(m, n, k) for m, n, k in
                   itertools.product(_divisors(MB), _divisors(NB), _divisors(KB))]
        options = [t for t in options if self._fits(t)]
        if not options:
            raise ValueError(f"no tiling of {self.M}x{self.K}x{self.N} fits config "
                             f"{self.cfg.name!r} with {self.threads} threads")
        return max(options, key=lambda t: (t.m * t.n * t.k, t.k))

    def _check_tiles(self):
        t, (MB, KB, NB) = self.tiles, self.blocks
        if MB % t.m or NB % t.n or KB % t.k:
            raise ValueError(f"tiles {t} do not divide the {MB}x{KB}x{NB} blocks")
        if not self._fits(t):
            raise ValueError(f"tiles {t} do not fit config {self.cfg.name!r} "
                             f"with {self.threads} threads")

    # -- micro-ops -----------------------------------------------------------

    def _uop_index(self):
        """``{(inp/wgt region, acc region): first uop of its GEMM kernel}`` and ALU uops."""
        T, t = self.threads, self.tiles
        gemm = {(h, a): (h * T + a) * t.k for h in range(T) for a in range(T)}
        alu = {a: T * T * t.k + a for a in range(T)}
        return gemm, alu

    def uops(self):
        """Every micro-op of the program, in uop-buffer order."""
        T, t = self.threads, self.tiles
        inp, wgt, acc = (self._region(b) for b in ("inp", "wgt", "acc"))
        gemm = [Uop(dst=a * acc, src=h * inp + k, wgt=h * wgt + k)
                for h in range(T) for a in range(T) for k in range(t.k)]
        return gemm + [Uop(dst=a * acc) for a in range(T)]

    # -- the program ---------------------------------------------------------

    def instructions(self, base):
        """The program for data placed at byte address ``base`` (see :meth:`segments`)."""
        c, T, t = self.cfg, self.threads, self.tiles
        MB, KB, NB = self.blocks
        elem = {name: (base + off) // c.elem_bytes(name) for name, (off, _) in self.segments.items()}
        inp_r, wgt_r, acc_r = (self._region(b) for b in ("inp", "wgt", "acc"))
        gemm_uop, alu_uop = self._uop_index()
        S = Stream
        b = ProgramBuilder()
        n_uops = len(self.uops())
        b.emit(Load(memory_type=MemType.UOP, dram_base=elem["uop"], y_size=1, x_size=n_uops,
                    x_stride=n_uops))
        tiles_mn = [(mt, nt) for nt in range(NB // t.n) for mt in range(MB // t.m)]
        steps = [(j, kt) for j in range(len(tiles_mn)) for kt in range(KB // t.k)]
        held = [dict(inp=None, wgt=None) for _ in range(T)]      # what each region holds
        lo = 0 if self.relu else -(1 << (c.out_width - 1))
        hi = (1 << (c.out_width - 1)) - 1
        epilogue = [(AluOp.MUL, self.mul)] * (self.mul != 1) + [(AluOp.SHR, self.shift)] * (self.shift != 0)
        epilogue += [(AluOp.MAX, lo), (AluOp.MIN, hi)]
        for s, (j, kt) in enumerate(steps):
            mt, nt = tiles_mn[j]
            h, a = s % T, j % T
            # Load stream: wait until compute is done with region h, then fill it.
            if s >= T:
                b.pop(S.COMPUTE, S.LOAD)
            if held[h]["inp"] != (mt, kt):
                b.emit(Load(memory_type=MemType.INP, sram_base=h * inp_r,
                            dram_base=elem["inp"] + mt * t.m * KB + kt * t.k,
                            y_size=t.m, x_size=t.k, x_stride=KB))
                held[h]["inp"] = (mt, kt)
            if held[h]["wgt"] != (nt, kt):
                b.emit(Load(memory_type=MemType.WGT, sram_base=h * wgt_r,
                            dram_base=elem["wgt"] + nt * t.n * KB + kt * t.k,
                            y_size=t.n, x_size=t.k, x_stride=KB))
                held[h]["wgt"] = (nt, kt)
            b.push(S.LOAD, S.COMPUTE)
            # Compute stream.
            b.pop(S.LOAD, S.COMPUTE)
            loops = dict(iter_out=t.m, iter_in=t.n, dst_factor_out=t.n, dst_factor_in=1)
            if kt == 0:
                if j >= T:   # the out region must be drained by the store of tile j - T
                    b.pop(S.STORE, S.COMPUTE)
                first = gemm_uop[h, a]
                b.emit(Gemm(reset=True, uop_bgn=first, uop_end=first + 1, **loops))
            b.emit(Gemm(uop_bgn=gemm_uop[h, a], uop_end=gemm_uop[h, a] + t.k,
                        src_factor_out=t.k, wgt_factor_in=t.k, **loops))
            if s + T < len(steps):
                b.push(S.COMPUTE, S.LOAD)
            if kt == KB // t.k - 1:
                for op, imm in epilogue:
                    b.emit(Alu(alu_op=op, use_imm=True, imm=imm, uop_bgn=alu_uop[a],
                               uop_end=alu_uop[a] + 1, **loops))
                b.push(S.COMPUTE, S.STORE)
                b.pop(S.COMPUTE, S.STORE)
                b.emit(Store(memory_type=MemType.OUT, sram_base=a * acc_r,
                             dram_base=elem["out"] + mt * t.m * NB + nt * t.n,
                             y_size=t.m, x_size=t.n, x_stride=NB))
                if j + T < len(tiles_mn) or j == len(tiles_mn) - 1:
                    b.push(S.STORE, S.COMPUTE)   # reuse of region a, or the final drain
        b.pop(S.STORE, S.COMPUTE)
        return b.finish()

    # -- data ----------------------------------------------------------------

    def pack(self, A, B):
        """``{segment: bytes}`` for the uop, inp and wgt segments."""
        c = self.cfg
        A, B = np.asarray(A), np.asarray(B)
        if A.shape != (self.M, self.K) or B.shape != (self.N, self.K):
            raise ValueError(f"expected A {self.M}x{self.K} and B {self.N}x{self.K}, "
                             f"got {A.shape} and {B.shape}")
        fmt = uop_format(c)
        words = np.array([fmt.pack(u) for u in self.uops()], dtype=f"<u{c.elem_bytes('uop')}")
        return {"uop": words.tobytes(),
                "inp": pack_rows(A, c.batch, c.block_in).astype(f"<i{c.inp_width // 8}").tobytes(),
                "wgt": pack_rows(B, c.block_out, c.block_in).astype(f"<i{c.wgt_width // 8}").tobytes()}

    def unpack(self, out):
        """C (M×N) from the bytes of the out segment."""
        c = self.cfg
        MB, _, NB = self.blocks
        blocks = np.frombuffer(out, dtype=f"<i{c.out_width // 8}").reshape(MB, NB, c.batch, c.block_out)
        return unpack_rows(blocks)

    def run(self, device, A, B):
        """Place the data in ``device.dram``, run, and return ``(C, stats)``.

        ``device`` is anything with a :class:`~tilewright.sim.Dram`-like
        ``dram`` and a ``run(instructions)`` method (the functional simulator).
        """
        base = device.dram.alloc(self.dram_bytes, align=max(64, self.alignment))
        try:
            for name, data in self.pack(A, B).items():
                device.dram.write(base + self.segments[name][0], data)
            stats = device.run(self.instructions(base))
            off, size = self.segments["out"]
            return self.unpack(device.dram.read(base + off, size).tobytes()), stats
        finally:
            device.dram.free(base)
