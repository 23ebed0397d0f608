"""A blocked int8 matmul + requantize written against the ISA with virtual threads."""

import numpy as np
import pytest

from tilewright import PRESETS
from tilewright.isa import Gemm, Load, MemType, Stream
from tilewright.examples.matmul import BlockedMatmul
from tilewright.sim import FunctionalSimulator


def reference(A, B, *, acc_width, mul, shift, relu, out_width=8):
    """numpy in arbitrary-precision Python ints, reduced to the accumulator width."""
    mod = 1 << acc_width
    acc = A.astype(object) @ B.astype(object).T
    acc = (acc % mod + mod) % mod
    acc = np.where(acc >= mod // 2, acc - mod, acc)
    acc = (acc * mul) % mod
    acc = np.where(acc >= mod // 2, acc - mod, acc)
    acc = np.array([[v >> shift for v in row] for row in acc], dtype=object)
    hi = (1 << (out_width - 1)) - 1
    return np.clip(acc, 0 if relu else -hi - 1, hi).astype(np.int64)


CASES = [  # config, (M, K, N), tiles in blocks (m, n, k)
    ("tiny", (12, 24, 16), (2, 1, 2)),
    ("small", (24, 64, 40), (4, 1, 2)),
    ("default", (32, 128, 64), (8, 2, 4)),
]


@pytest.mark.parametrize("config, shape, tiles", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_matches_numpy_with_any_number_of_threads(config, shape, tiles, threads):
    cfg = PRESETS[config]
    M, K, N = shape
    rng = np.random.default_rng(threads)
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (N, K), dtype=np.int8)
    kernel = BlockedMatmul(cfg, M, K, N, threads=threads, tiles=tiles, mul=7, shift=9, relu=threads == 2)
    C, stats = kernel.run(FunctionalSimulator(cfg), A, B)
    expected = reference(A, B, acc_width=cfg.acc_width, mul=7, shift=9, relu=threads == 2)
    np.testing.assert_array_equal(C, expected)
    steps = (M // cfg.batch // tiles[0]) * (N // cfg.block_out // tiles[1]) * (K // cfg.block_in // tiles[2])
    assert stats.gemm_uops == (M // cfg.batch) * (N // cfg.block_out) * (K // cfg.block_in + 1)  # + resets
    assert stats.dram_bytes_written["out"] == M * N
    assert stats.instructions["load"] >= steps


def test_accumulator_wraps_around():
    """All-extreme inputs overflow a 16-bit accumulator; the result must wrap, not saturate."""
    cfg = PRESETS["tiny"].replace(acc_width=16)
    A = np.full((4, 64), -128, dtype=np.int8)
    B = np.full((4, 64), -128, dtype=np.int8)
    kernel = BlockedMatmul(cfg, 4, 64, 4, threads=2, tiles=(1, 1, 4))
    C, _ = kernel.run(FunctionalSimulator(cfg), A, B)
    np.testing.assert_array_equal(C, reference(A, B, acc_width=16, mul=1, shift=0, relu=False))
    assert (C == 0).all()       # 64 · 2^14 = 2^20 ≡ 0 (mod 2^16)


def _loads_before_first_accumulate(kernel, base, sim):
    program = kernel.instructions(base)
    first_gemm = next(i for i in sim.executed if isinstance(program[i], Gemm) and not program[i].reset)
    done = sim.executed[:sim.executed.index(first_gemm)]
    return sum(1 for i in done if program[i].stream == Stream.LOAD and program[i].push_next)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_tokens_let_load_run_threads_steps_ahead(threads):
    """With load given priority, it fills every region before compute's first GEMM, and no more."""
    cfg = PRESETS["small"]
    kernel = BlockedMatmul(cfg, 16, 64, 32, threads=threads, tiles=(2, 1, 2))
    sim = FunctionalSimulator(cfg, priority=(Stream.LOAD, Stream.COMPUTE, Stream.STORE))
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (16, 64), dtype=np.int8)
    B = rng.integers(-128, 128, (32, 64), dtype=np.int8)
    C, _ = kernel.run(sim, A, B)
    np.testing.assert_array_equal(C, reference(A, B, acc_width=32, mul=1, shift=0, relu=False))
    # Instruction order and flags do not depend on the base address.
    assert _loads_before_first_accumulate(kernel, 0, sim) == threads


def test_double_buffering_uses_separate_regions():
    kernel = BlockedMatmul("small", 16, 64, 32, threads=2, tiles=(2, 1, 2))
    program = kernel.instructions(0)
    inp_bases = {i.sram_base for i in program if isinstance(i, Load) and i.memory_type == MemType.INP}
    assert inp_bases == {0, PRESETS["small"].depth("inp") // 2}


@pytest.mark.parametrize("args, message", [
    (dict(M=0, K=64, N=32), r"^M=0 must be a positive multiple of 1$"),
    (dict(M=16, K=64, N=30), r"^N=30 must be a positive multiple of 8$"),
    (dict(M=16, K=60, N=32), r"^K=60 must be a positive multiple of 8$"),
    (dict(M=16, K=64, N=32, tiles=(3, 1, 1)), r"do not divide"),
    (dict(M=4096, K=1024, N=512, tiles=(4096, 64, 128)), r"do not fit config 'small'"),
    (dict(M=16, K=64, N=32, threads=0), r"threads=0 must be at least 1"),
])
def test_bad_shapes(args, message):
    args = {"M": 16, "K": 64, "N": 32, **args}
    with pytest.raises(ValueError, match=message):
        BlockedMatmul("small", args.pop("M"), args.pop("K"), args.pop("N"), **args)
