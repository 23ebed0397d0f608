"""Every pass preserves what the program computes: the loop IR is run after each one.

Small conv2d and dense programs on the tiny preset go through the pipeline
step by step; the reference interpreter runs the IR after lowering and after
every pass, and each result must equal the numpy computation. The final
program must equal it too, on the functional simulator.
"""

import re

import numpy as np
import pytest

from tilewright import PRESETS
from tilewright.isa import Load, MemType
from tilewright.compiler import build, check, ir, lower_to_ir
from tilewright.compiler.build import PIPELINE
from tilewright.compiler.interp import run_ir
from tilewright.compiler.ops import Conv2dSpec, ConvTiles, DenseSpec, DenseTiles, conv2d, dense
from tilewright.compiler.expr import Var, as_expr
from tilewright.compiler.passes.overwrite import fuse_reset
from tilewright.compiler.passes.storage import StorageError
from tilewright.runtime import get_device

TINY = PRESETS["tiny"]


def _epilogue(acc, mul, shift, relu):
    v = ((acc + 2**31) % 2**32) - 2**31
    v = ((v * mul + 2**31) % 2**32) - 2**31
    return np.clip(v >> shift, 0 if relu else -128, 127)


def conv_case(rng, residual):
    spec = Conv2dSpec(1, 8, 5, 6, 8, (3, 3), 1, 1, bias=True, residual=residual, mul=5, shift=7, relu=True)
    x = rng.integers(-128, 128, (1, 2, 5, 6, 1, 4))
    w = rng.integers(-128, 128, (2, 2, 3, 3, 4, 4))
    b = rng.integers(-2000, 2000, (2, 1, 4))
    r = rng.integers(-128, 128, (1, 2, 5, 6, 1, 4))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0), (0, 0)))
    acc = np.zeros((1, 2, 5, 6, 1, 4), dtype=np.int64)
    for kh in range(3):
        for kw in range(3):
            acc += np.einsum("ncyxbi,ocpi->noyxbp", xp[:, :, kh:kh + 5, kw:kw + 6], w[:, :, kh, kw])
    acc += b[None, :, None, None]
    if residual:
        acc += r
    inputs = {"data": x, "weight": w, "bias": b} | ({"residual": r} if residual else {})
    return spec, inputs, _epilogue(acc, 5, 7, True)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("residual", [False, True])
def test_conv2d_through_every_pass(threads, residual):
    rng = np.random.default_rng(threads + 2 * residual)
    spec, inputs, expected = conv_case(rng, residual)
    tiles = ConvTiles(out_channels=1, rows=5, cols=3, in_channels=1, threads=threads)
    seen = []

    def dump(name, func):
        out = run_ir(func, inputs)["out"]
        np.testing.assert_array_equal(out, expected, err_msg=f"after {name}")
        seen.append(name)

    s, _, _ = conv2d(spec, TINY, tiles=tiles)
    func = lower_to_ir(s, TINY, dump=dump)
    assert seen == ["lower"] + [name for name, _ in PIPELINE]
    assert "gemm" in str(func) and "dma.load" in str(func) and "requant(" in str(func)
    assert "gemm.reset" not in str(func) and re.search(r"gemm conv(\[0\])? = data_pad", str(func))  # fuse_reset
    s, _, _ = conv2d(spec, TINY, tiles=tiles)
    program = build(s, TINY)
    check(program)
    outputs, _ = get_device("fsim", TINY).run_program(program, inputs)
    np.testing.assert_array_equal(outputs["out"], expected)


@pytest.mark.parametrize("epilogue", ["scale", "scaled_residual", "residual_mul"])
def test_wide_epilogues_through_every_pass(epilogue):
    """Per-channel scales (fused into the STORE on ``tiny``), a residual before the scale, and a residual times a
    factor too wide for its int8 type: the accumulators hold the residual at their own width after every pass."""
    rng = np.random.default_rng(7)
    spec = Conv2dSpec(1, 8, 5, 6, 8, (3, 3), 1, 1, bias=True, shift=9, relu=True, scale=epilogue != "residual_mul",
                      residual=epilogue != "scale", residual_scale=epilogue == "scaled_residual",
                      scaled_residual=epilogue == "scaled_residual", residual_mul=300 if epilogue == "residual_mul" else 1)
    spec_in, inputs, _ = conv_case(rng, True)
    x, w, b, r = (inputs[k] for k in ("data", "weight", "bias", "residual"))
    scale, r_scale = rng.integers(1, 4000, (2, 1, 4)), rng.integers(128, 3000, (2, 1, 4))
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0), (0, 0)))
    acc = sum(np.einsum("ncyxbi,ocpi->noyxbp", xp[:, :, kh:kh + 5, kw:kw + 6], w[:, :, kh, kw])
              for kh in range(3) for kw in range(3))
    if epilogue == "scaled_residual":
        acc = acc + r * r_scale[None, :, None, None]
    if spec.scale:
        acc = acc * scale[None, :, None, None]
    acc = acc + b[None, :, None, None] + (r * 300 if epilogue == "residual_mul" else 0)
    expected = _epilogue(acc, 1, 9, True)
    values = {"data": x, "weight": w, "bias": b} | ({"residual": r} if spec.residual else {}) | \
        ({"scale": scale} if spec.scale else {}) | ({"residual_scale": r_scale} if spec.residual_scale else {})
    s, _, _ = conv2d(spec, TINY, tiles=ConvTiles(out_channels=1, rows=5, cols=3, in_channels=1, threads=2))
    lower_to_ir(s, TINY, dump=lambda name, func: np.testing.assert_array_equal(run_ir(func, values)["out"], expected,
                                                                             err_msg=f"after {name}"))


def test_dense_through_every_pass():
    rng = np.random.default_rng(5)
    spec = DenseSpec(batch=3, in_features=12, out_features=8, bias=True, mul=-3, shift=2, relu=False)
    x, w, b = rng.integers(-128, 128, (3, 3, 1, 4)), rng.integers(-128, 128, (2, 3, 4, 4)), rng.integers(-99, 99, (2, 1, 4))
    acc = np.einsum("nkbi,mkoi->nmbo", x, w) + b[None]
    expected = _epilogue(acc, -3, 2, False)
    s, _, _ = dense(spec, TINY, tiles=DenseTiles(batch=1, out_features=1, in_features=1, threads=2))
    lower_to_ir(s, TINY, dump=lambda name, func: np.testing.assert_array_equal(
        run_ir(func, {"data": x, "weight": w, "bias": b})["out"], expected, err_msg=name))


def test_virtual_threads_interleave_and_replicate():
    spec, _, _ = conv_case(np.random.default_rng(0), False)
    s, _, _ = conv2d(spec, TINY, tiles=ConvTiles(1, 5, 3, 1, threads=2))
    text = str(lower_to_ir(s, TINY))
    # Thread 1's input load comes before thread 0's GEMM: load can run ahead.
    assert text.index("data_pad.inp[1]") < text.index("gemm conv[0] ")
    assert "vthread" not in text


def test_latency_hiding_order_and_reuse():
    """Each thread's loads go out as one run, a thread's bias load sits right before its own GEMMs, and a
    bias tile still in place is not loaded again for the next spatial tile."""
    spec, inputs, expected = conv_case(np.random.default_rng(4), False)
    s, _, _ = conv2d(spec, TINY, tiles=ConvTiles(1, 5, 3, 1, threads=2))
    text = str(lower_to_ir(s, TINY))
    assert text.index("dma.load inp data_pad.inp[0]") < text.index("dma.load wgt weight.wgt[1]")
    assert text.index("gemm conv[0] =") < text.index("dma.load acc bias.acc[1]") < text.index("gemm conv[1] =")
    s, _, _ = conv2d(spec, TINY, tiles=ConvTiles(1, 5, 3, 1, threads=2))
    program = build(s, TINY)
    bias_loads = [i for i in program.instructions if isinstance(i, Load) and i.memory_type == MemType.ACC]
    assert len(bias_loads) == 2                     # two threads × one channel tile, over two spatial tiles
    outputs, _ = get_device("fsim", TINY).run_program(program, inputs)
    np.testing.assert_array_equal(outputs["out"], expected)


def test_storage_error_names_buffer_bytes_and_capacity():
    spec = Conv2dSpec(1, 8, 16, 16, 8, (3, 3), 1, 1)
    s, _, _ = conv2d(spec, TINY, tiles=ConvTiles(out_channels=2, rows=8, cols=16, in_channels=2, threads=2))
    with pytest.raises(StorageError, match=r"the inp buffer needs \d+ bytes \(data_pad.inp \d+ B × 2 threads\) "
                                           r"but has 1024 bytes"):
        lower_to_ir(s, TINY)



def _reset_then_gemm(dsts, n=5):
    """``acc = 0`` over rows 0..4, then a GEMM over ``x < n`` with micro-op ``j`` writing row ``dsts[j](x)``."""
    acc = ir.Buffer("acc", (5, 1, 4), "int32", "acc")
    inp, wgt = ir.Buffer("inp", (8, 1, 4), "int8", "inp"), ir.Buffer("wgt", (3, 4, 4), "int8", "wgt")
    r, x = Var("r"), Var("x")
    reset = ir.Gemm(acc, None, None, [ir.Uop(r)], [(r, 5)], reset=True)
    gemm = ir.Gemm(acc, inp, wgt, [ir.Uop(dst(x), x + j, as_expr(j)) for j, dst in enumerate(dsts)], [(x, n)])
    return ir.Function("f", [acc, inp, wgt], ir.seq([reset, gemm]), [acc])


def test_fuse_reset_overwrites_with_the_first_micro_op():
    func = _reset_then_gemm([lambda x: x] * 3)
    fused = fuse_reset(func)
    assert "gemm.reset" not in str(fused) and "gemm acc = inp·wgt" in str(fused)
    rng = np.random.default_rng(3)
    values = {"acc": rng.integers(-99, 99, (5, 1, 4)), "inp": rng.integers(-128, 128, (8, 1, 4)),
              "wgt": rng.integers(-128, 128, (3, 4, 4))}
    np.testing.assert_array_equal(run_ir(fused, values)["acc"], run_ir(func, values)["acc"])


@pytest.mark.parametrize("dsts, n", [([lambda x: x, lambda x: x + 1], 4),   # row 4's first write is micro-op 1's
                                     ([lambda x: x + 1], 4)],                # row 0 is reset but never written
                         ids=["first_writes_straddle_micro_ops", "reset_covers_more_rows"])
def test_fuse_reset_keeps_the_reset_when_not_exact(dsts, n):
    assert "gemm.reset" in str(fuse_reset(_reset_then_gemm(dsts, n)))


def test_tensorize_checks_operand_types(monkeypatch):
    """A nest computing the GEMM's shape on other types is not the intrinsic."""
    import dataclasses

    from tilewright.compiler import ops
    from tilewright.compiler.intrin import gemm_intrinsic
    from tilewright.compiler.passes.tensorize import TensorizeError
    wide = dataclasses.replace(PRESETS["tiny"], inp_width=16, name="tiny-i16")
    monkeypatch.setattr(ops, "gemm_intrinsic", lambda cfg: gemm_intrinsic("tiny"))   # declared for int8 inputs
    spec = DenseSpec(wide.batch, 2 * wide.block_in, wide.block_out, bias=False)
    s, _, _ = dense(spec, wide)
    with pytest.raises(TensorizeError, match="int16; the GEMM intrinsic takes int8"):
        build(s, wide)
