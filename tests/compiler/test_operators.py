"""conv2d and dense operators end to end on the functional simulator, bit-exact
against the independent numpy references in :mod:`tests.compiler.reference`.

* acceptance: every ResNet-18 conv layer and its dense layer on the default preset;
* random shapes (hypothesis) on the tiny and small presets: channel counts that
  are not block multiples, padding, strides, the whole epilogue, wrap-around and
  saturation;
* virtual threads: 1, 2 and 4 threads give identical, correct results and
  programs that pass the static checker;
* the stats counters.
"""

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import tilewright
from tilewright import PRESETS, isa
from tilewright.compiler import build, check
from tilewright.compiler.ops import (ConvTiles, Conv2dSpec, DenseSpec, DenseTiles, conv_tiles, dense_tiles,
                                     conv2d as conv2d_schedule, dense as dense_schedule)
from tilewright.runtime import get_device
from tilewright.runtime import layout

from .reference import conv2d_ref, dense_ref

STAT_KEYS = ("gemm_uops", "alu_uops", "dram_bytes_read", "dram_bytes_written", "instructions")
MUL_LIMIT = 1 << (isa.IMM_BITS - 1)      # mul is the ALU's signed immediate


def rand_i8(rng, shape):
    return rng.integers(-128, 128, size=shape, dtype=np.int8)


def rand_i32(rng, shape, limit=1 << 31):
    return rng.integers(-limit, limit, size=shape, dtype=np.int64).astype(np.int32)


# -- the reference itself ---------------------------------------------------------------

def test_reference_conv2d_against_loops():
    """The vectorised reference agrees with a plain Python loop nest (one small case, full epilogue)."""
    rng = np.random.default_rng(7)
    x, w = rand_i8(rng, (2, 3, 5, 4)), rand_i8(rng, (4, 3, 3, 3))
    b, r = rand_i32(rng, 4), rand_i8(rng, (2, 4, 3, 2))
    stride, pad, mul, shift = 2, 1, 20000, 3
    got = conv2d_ref(x, w, b, stride, pad, mul, shift, False, r)
    want = np.zeros_like(got)
    for n in range(2):
        for o in range(4):
            for y in range(3):
                for xx in range(2):
                    acc = 0
                    for c in range(3):
                        for kh in range(3):
                            for kw in range(3):
                                iy, ix = y * stride + kh - pad, xx * stride + kw - pad
                                if 0 <= iy < 5 and 0 <= ix < 4:
                                    acc += int(x[n, c, iy, ix]) * int(w[o, c, kh, kw])
                    v = (acc + int(b[o]) + int(r[n, o, y, xx]) + 2**31) % 2**32 - 2**31
                    v = (v * mul + 2**31) % 2**32 - 2**31
                    want[n, o, y, xx] = max(-128, min(127, v >> shift))
    np.testing.assert_array_equal(got, want)


def test_reference_epilogue_wraps_and_shifts_arithmetically():
    one, zero = np.ones((1, 1), np.int8), np.zeros((1, 1), np.int8)
    w = np.full((1, 1), 127, np.int8)
    # the add wraps: 127 + (2^31 - 127) = 2^31 -> -2^31; >> 31 -> -1
    assert dense_ref(one, w, np.array([2**31 - 127], np.int32), mul=1, shift=31)[0, 0] == -1
    # the shift rounds toward minus infinity: 127 * -2^15 = -4161536, >> 16 = -63.5 -> -64
    assert dense_ref(one, w, None, mul=-MUL_LIMIT, shift=16)[0, 0] == -64
    # the multiply wraps: 2^17 * 2^14 = 2^31 -> -2^31 (unwrapped it would saturate at +127)
    assert dense_ref(zero, w, np.array([2**17], np.int32), mul=2**14, shift=0)[0, 0] == -128
    assert dense_ref(zero, w, np.array([2**17], np.int32), mul=2**14, shift=0, relu=True)[0, 0] == 0
    assert dense_ref(zero, w, np.array([2**17], np.int32), mul=2**14, shift=24)[0, 0] == -128
    # no wrap just below: 2^16 * (2^15 - 1) < 2^31
    assert dense_ref(zero, w, np.array([2**16], np.int32), mul=MUL_LIMIT - 1, shift=24)[0, 0] == 127


# -- acceptance: ResNet-18 on the default preset -------------------------------------------

RESNET18_CONVS = [   # H=W, Cin, Cout, kernel, stride
    (56, 64, 64, 3, 1), (56, 64, 128, 3, 2), (56, 64, 128, 1, 2),
    (28, 128, 128, 3, 1), (28, 128, 256, 3, 2), (28, 128, 256, 1, 2),
    (14, 256, 256, 3, 1), (14, 256, 512, 3, 2), (14, 256, 512, 1, 2),
    (7, 512, 512, 3, 1),
]


def _requant_shift(reduction, mul=3):
    """A shift that maps the accumulator's spread (random int8) onto a few tens of int8 steps."""
    spread = 74.0 * 74.0 * math.sqrt(reduction) * mul       # std of a sum of products of uniform int8
    return max(0, round(math.log2(spread / 40)))


def _assert_interesting(out, relu):
    """The epilogue really did something: neither all-saturated nor constant."""
    assert len(np.unique(out)) > 50
    assert (out == 127).mean() < 0.2
    if relu:
        assert 0.2 < (out == 0).mean() < 0.8


@pytest.mark.parametrize("H,C,O,k,s", RESNET18_CONVS, ids=[f"{h}x{h}_{c}to{o}_k{k}s{s}" for h, c, o, k, s in
                                                          RESNET18_CONVS])
def test_resnet18_conv_default(H, C, O, k, s):
    rng = np.random.default_rng(H * 1000 + C + O + k + s)
    p = 1 if k == 3 else 0
    x, w = rand_i8(rng, (1, C, H, H)), rand_i8(rng, (O, C, k, k))
    mul, shift = 3, _requant_shift(C * k * k)
    bias = rand_i32(rng, O, limit=1 << (shift + 4))
    out, stats = tilewright.conv2d(x, w, bias, stride=s, padding=p, mul=mul, shift=shift, relu=True)
    ref = conv2d_ref(x, w, bias, s, p, mul, shift, True)
    OH = (H + 2 * p - k) // s + 1
    assert out.dtype == np.int8 and out.shape == (1, O, OH, OH)
    np.testing.assert_array_equal(out, ref)
    _assert_interesting(out, relu=True)
    assert stats["gemm_uops"] >= 1 * C * O * k * k * OH * OH // (16 * 16)


@pytest.mark.parametrize("batch", [1, 16])
def test_resnet18_dense_default(batch):
    rng = np.random.default_rng(batch)
    x, w = rand_i8(rng, (batch, 512)), rand_i8(rng, (1000, 512))
    mul, shift = 3, _requant_shift(512)
    bias = rand_i32(rng, 1000, limit=1 << (shift + 4))
    out, _ = tilewright.dense(x, w, bias, mul=mul, shift=shift, relu=True)
    assert out.dtype == np.int8 and out.shape == (batch, 1000)
    np.testing.assert_array_equal(out, dense_ref(x, w, bias, mul, shift, True))
    _assert_interesting(out, relu=True)


def test_resnet18_conv_with_residual_no_relu_default():
    """The block's second conv with the shortcut added before requantization."""
    rng = np.random.default_rng(11)
    x, w = rand_i8(rng, (1, 128, 28, 28)), rand_i8(rng, (128, 128, 3, 3))
    shift = _requant_shift(128 * 9, mul=5)
    bias, res = rand_i32(rng, 128, limit=1 << (shift + 4)), rand_i8(rng, (1, 128, 28, 28))
    out, _ = tilewright.conv2d(x, w, bias, stride=1, padding=1, mul=5, shift=shift, residual=res)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, bias, 1, 1, 5, shift, False, res))
    _assert_interesting(out, relu=False)


# -- random shapes on tiny and small -------------------------------------------------------

MULS = st.one_of(st.integers(-MUL_LIMIT, MUL_LIMIT - 1),
                 st.sampled_from([1, 0, -1, 2, MUL_LIMIT - 1, -MUL_LIMIT]))
SHIFTS = st.integers(0, 16)


@st.composite
def tensor_fill(draw):
    """How to fill int8 tensors: uniform, extremes only (saturation), or small values."""
    return draw(st.sampled_from(["uniform", "extreme", "small"]))


def fill_i8(rng, shape, mode):
    if mode == "extreme":
        return rng.choice(np.array([-128, 127], np.int8), size=shape)
    if mode == "small":
        return rng.integers(-3, 4, size=shape, dtype=np.int8)
    return rand_i8(rng, shape)


def fill_bias(rng, n, mode):
    if mode == "full":                 # anywhere in int32: the bias add wraps
        return rand_i32(rng, n)
    if mode == "edge":
        return rng.choice(np.array([-2**31, 2**31 - 1, 0, -1], np.int32), size=n)
    return rand_i32(rng, n, limit=1 << 12)


@st.composite
def conv_cases(draw):
    cfg = draw(st.sampled_from(["tiny", "small"]))
    N = draw(st.integers(1, 2))
    C = draw(st.integers(1, 20))
    O = draw(st.integers(1, 20))
    H = draw(st.integers(1, 12))
    W = draw(st.integers(1, 12))
    k = draw(st.integers(1, 3))
    stride = draw(st.integers(1, 2))
    padding = draw(st.integers(0, 2))
    assume(H + 2 * padding >= k and W + 2 * padding >= k)
    return dict(cfg=cfg, N=N, C=C, O=O, H=H, W=W, k=k, stride=stride, padding=padding,
                mul=draw(MULS), shift=draw(SHIFTS), relu=draw(st.booleans()),
                bias=draw(st.sampled_from([None, "small", "full", "edge"])),
                residual=draw(st.booleans()), residual_mul=draw(st.sampled_from([1, 1, 3, -2, 300, 32767])),
                residual_shift=draw(st.sampled_from([0, 0, 1, 9, 31])), scale=draw(st.sampled_from([None, "small", "full"])),
                fill=draw(tensor_fill()), seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(conv_cases())
def test_conv2d_random_shapes(case):
    rng = np.random.default_rng(case["seed"])
    N, C, O, H, W, k = (case[n] for n in "N C O H W k".split())
    s, p = case["stride"], case["padding"]
    OH, OW = (H + 2 * p - k) // s + 1, (W + 2 * p - k) // s + 1
    x = fill_i8(rng, (N, C, H, W), case["fill"])
    w = fill_i8(rng, (O, C, k, k), case["fill"])
    bias = None if case["bias"] is None else fill_bias(rng, O, case["bias"])
    res = fill_i8(rng, (N, O, OH, OW), case["fill"]) if case["residual"] else None
    scale = None if case["scale"] is None else fill_bias(rng, O, case["scale"])
    out, _ = tilewright.conv2d(x, w, bias, stride=s, padding=p, mul=case["mul"], shift=case["shift"],
                                   relu=case["relu"], residual=res, residual_mul=case["residual_mul"],
                                   residual_shift=case["residual_shift"], scale=scale, config=case["cfg"])
    assert out.dtype == np.int8 and out.shape == (N, O, OH, OW)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, bias, s, p, case["mul"], case["shift"], case["relu"], res,
                                                  case["residual_mul"], case["residual_shift"], scale))


@st.composite
def dense_cases(draw):
    return dict(cfg=draw(st.sampled_from(["tiny", "small"])), N=draw(st.integers(1, 20)), K=draw(st.integers(1, 40)),
                M=draw(st.integers(1, 40)), mul=draw(MULS), shift=draw(SHIFTS), relu=draw(st.booleans()),
                bias=draw(st.sampled_from([None, "small", "full", "edge"])), fill=draw(tensor_fill()),
                scale=draw(st.sampled_from([None, "small", "full"])), seed=draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=400, deadline=None)
@given(dense_cases())
def test_dense_random_shapes(case):
    rng = np.random.default_rng(case["seed"])
    N, K, M = case["N"], case["K"], case["M"]
    x, w = fill_i8(rng, (N, K), case["fill"]), fill_i8(rng, (M, K), case["fill"])
    bias = None if case["bias"] is None else fill_bias(rng, M, case["bias"])
    scale = None if case["scale"] is None else fill_bias(rng, M, case["scale"])
    out, _ = tilewright.dense(x, w, bias, mul=case["mul"], shift=case["shift"], relu=case["relu"], scale=scale,
                              config=case["cfg"])
    assert out.dtype == np.int8 and out.shape == (N, M)
    np.testing.assert_array_equal(out, dense_ref(x, w, bias, case["mul"], case["shift"], case["relu"], scale))


# -- explicit epilogue corner cases ------------------------------------------------------------

@pytest.mark.parametrize("config", ["tiny", "small", "default"])
def test_conv2d_wraps_in_int32(config):
    """Large mul overflows int32 in the multiply; extreme biases overflow the add: both must wrap."""
    rng = np.random.default_rng(3)
    x = np.full((1, 5, 4, 4), 127, np.int8)
    w = np.full((3, 5, 3, 3), 127, np.int8)            # acc = 127*127*45 = 725805 in the centre
    bias = np.array([2**31 - 1, -2**31, 12345], np.int32)
    res = rand_i8(rng, (1, 3, 4, 4))
    for mul in (MUL_LIMIT - 1, -MUL_LIMIT, 2963):
        for shift in (0, 7, 16):
            out, _ = tilewright.conv2d(x, w, bias, padding=1, mul=mul, shift=shift, residual=res, config=config)
            ref = conv2d_ref(x, w, bias, 1, 1, mul, shift, False, res)
            np.testing.assert_array_equal(out, ref, err_msg=f"mul={mul} shift={shift}")
            if mul == 2963 and shift == 0:
                # (725805 + 12345 + r) * 2963 > 2^31 wraps negative: the exact value would saturate at +127
                assert (out[0, 2, 1:3, 1:3] == -128).all()


@pytest.mark.parametrize("config", ["tiny", "default"])
def test_dense_wraps_and_saturates(config):
    x = np.array([[127] * 9, [-128] * 9, [1] * 9], np.int8)
    w = np.array([[127] * 9, [-128] * 9, [0] * 9, [3] * 9, [-1] * 9], np.int8)
    bias = np.array([0, 2**31 - 1, -2**31, 2**30, -7], np.int32)
    for mul, shift, relu in [(MUL_LIMIT - 1, 0, False), (MUL_LIMIT - 1, 16, True), (-MUL_LIMIT, 5, False),
                             (1, 0, False), (1, 0, True), (0, 0, False), (-1, 3, True)]:
        out, _ = tilewright.dense(x, w, bias, mul=mul, shift=shift, relu=relu, config=config)
        np.testing.assert_array_equal(out, dense_ref(x, w, bias, mul, shift, relu))


@pytest.mark.parametrize("shift", [17, 24, 31, 32, 40, 63])
def test_large_shifts(shift):
    """Shifts beyond 16 (allowed up to 63) are arithmetic: large negative values end at -1, positive at 0."""
    rng = np.random.default_rng(shift)
    x, w = rand_i8(rng, (3, 30)), rand_i8(rng, (7, 30))
    bias = np.array([2**31 - 1, -2**31, 2**30, -2**30, 5, -5, 0], np.int32)
    out, _ = tilewright.dense(x, w, bias, mul=1, shift=shift, config="tiny")
    np.testing.assert_array_equal(out, dense_ref(x, w, bias, 1, shift, False))


# -- 1x1 kernels with padding (one-row or one-column tiles at the border; once a DMA bug) ----------

PADDED_1X1 = [  # config, (N, C, H, W, O), stride, padding
    ("tiny", (1, 1, 1, 1, 1), 2, 1),
    ("tiny", (1, 3, 8, 8, 5), 2, 1),
    ("tiny", (1, 3, 11, 11, 5), 1, 1),
    ("tiny", (1, 3, 9, 9, 5), 1, 2),
    ("small", (1, 3, 12, 12, 5), 2, 2),
    ("default", (1, 3, 2, 2, 5), 2, 1),
]


@pytest.mark.parametrize("config,shape,stride,padding", PADDED_1X1,
                         ids=[f"{c}-{s}-s{st}p{p}" for c, s, st, p in PADDED_1X1])
def test_conv1x1_padded(config, shape, stride, padding):
    N, C, H, W, O = shape
    rng = np.random.default_rng(H)
    x, w, b = rand_i8(rng, (N, C, H, W)), rand_i8(rng, (O, C, 1, 1)), rand_i32(rng, O, limit=1 << 10)
    out, _ = tilewright.conv2d(x, w, b, stride=stride, padding=padding, mul=3, shift=6, config=config)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, b, stride, padding, 3, 6, False))


@pytest.mark.parametrize("tiles", [ConvTiles(1, 1, 6, 1), ConvTiles(1, 6, 1, 1)], ids=["rows1", "cols1"])
def test_conv1x1_padded_one_row_or_column_tile(tiles):
    cfg = PRESETS["tiny"]
    spec = Conv2dSpec(1, 4, 4, 4, 4, (1, 1), 1, 1, bias=False)       # output 6x6
    rng = np.random.default_rng(0)
    x, w = rand_i8(rng, (1, 4, 4, 4)), rand_i8(rng, (4, 4, 1, 1))
    _, out, _ = _run_conv(spec, cfg, tiles, x, w, None)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, None, 1, 1, 1, 0, False))


def test_conv1x1_padded_larger_tiles_work():
    """The same layer compiles and is exact with 2x2 tiles, and 3x3 kernels with one-row tiles work."""
    cfg = PRESETS["tiny"]
    rng = np.random.default_rng(0)
    x = rand_i8(rng, (1, 4, 4, 4))
    w1, w3 = rand_i8(rng, (4, 4, 1, 1)), rand_i8(rng, (4, 4, 3, 3))
    spec1 = Conv2dSpec(1, 4, 4, 4, 4, (1, 1), 1, 1, bias=False)
    _, out, _ = _run_conv(spec1, cfg, ConvTiles(1, 2, 2, 1), x, w1, None)
    np.testing.assert_array_equal(out, conv2d_ref(x, w1, None, 1, 1, 1, 0, False))
    spec3 = Conv2dSpec(1, 4, 4, 4, 4, (3, 3), 1, 1, bias=False)
    for tiles in (ConvTiles(1, 1, 4, 1), ConvTiles(1, 4, 1, 1)):
        _, out, _ = _run_conv(spec3, cfg, tiles, x, w3, None)
        np.testing.assert_array_equal(out, conv2d_ref(x, w3, None, 1, 1, 1, 0, False))


# -- virtual threads --------------------------------------------------------------------------

def _run_on_fsim(schedule, spec, cfg, tiles, tensors, b):
    """Schedule, build and check one operator, run it on fsim: (program, packed output, stats)."""
    s, _, _ = schedule(spec, cfg, tiles=tiles)
    program = build(s, cfg)
    check(program)
    if b is not None:
        tensors["bias"] = layout.pack_bias(b, cfg.batch, cfg.block_out)
    outputs, stats = get_device("fsim", cfg).run_program(program, tensors)
    return program, outputs["out"], stats


def _run_conv(spec, cfg, tiles, x, w, b, res=None):
    tensors = {"data": layout.pack_nchw(x, cfg.batch, cfg.block_in),
               "weight": layout.pack_oihw(w, cfg.block_out, cfg.block_in)}
    if res is not None:
        tensors["residual"] = layout.pack_nchw(res, cfg.batch, cfg.block_out)
    program, out, stats = _run_on_fsim(conv2d_schedule, spec, cfg, tiles, tensors, b)
    return program, layout.unpack_nchw(out, x.shape[0], w.shape[0]), stats


def _run_dense(spec, cfg, tiles, x, w, b):
    tensors = {"data": layout.pack_rows(x, cfg.batch, cfg.block_in),
               "weight": layout.pack_rows(w, cfg.block_out, cfg.block_in)}
    program, out, stats = _run_on_fsim(dense_schedule, spec, cfg, tiles, tensors, b)
    return program, layout.unpack_rows(out, x.shape[0], w.shape[0]), stats


CONV_VT_CASES = [  # config, (N, C, H, W, O, k, stride, pad), residual
    ("default", (1, 128, 28, 28, 128, 3, 1, 1), False),
    ("tiny", (1, 8, 8, 8, 16, 3, 2, 1), False),
    ("tiny", (2, 6, 8, 7, 13, 3, 1, 1), True),       # channels not block multiples, batch 2, residual
    ("small", (1, 10, 12, 12, 20, 1, 1, 0), True),
]


@pytest.mark.parametrize("config,shape,residual", CONV_VT_CASES, ids=[f"{c}-{s}" for c, s, _ in CONV_VT_CASES])
def test_conv2d_virtual_threads(config, shape, residual):
    cfg = PRESETS[config]
    N, C, H, W, O, k, stride, pad = shape
    rng = np.random.default_rng(sum(shape))
    mul, shift = 3, _requant_shift(C * k * k)
    spec = Conv2dSpec(layout.round_up(N, cfg.batch), layout.round_up(C, cfg.block_in), H, W,
                      layout.round_up(O, cfg.block_out), (k, k), stride, pad, bias=True, residual=residual,
                      mul=mul, shift=shift, relu=False)
    x, w = rand_i8(rng, (N, C, H, W)), rand_i8(rng, (O, C, k, k))
    b = rand_i32(rng, O, limit=1 << (shift + 4))
    res = rand_i8(rng, (N, O, spec.out_height, spec.out_width)) if residual else None
    ref = conv2d_ref(x, w, b, stride, pad, mul, shift, False, res)

    t4 = conv_tiles(spec, cfg, threads=4)
    OB, OHt = spec.out_channels // cfg.block_out, spec.out_height
    assert (OB // t4.out_channels) % 4 == 0 or (OHt // t4.rows) % 4 == 0
    # the same tile sizes with 1, 2 and 4 threads, plus conv_tiles' own choice for each count
    tilings = [ConvTiles(t4.out_channels, t4.rows, t4.cols, t4.in_channels, T) for T in (1, 2, 4)]
    tilings += [conv_tiles(spec, cfg, threads=T) for T in (1, 2)]
    programs = []
    for tiles in tilings:
        program, out, stats = _run_conv(spec, cfg, tiles, x, w, b, res)
        np.testing.assert_array_equal(out, ref, err_msg=f"{tiles}")
        assert stats["instructions"] == len(program.instructions)
        programs.append(program)
    # threads change the program (latency hiding), not the result
    assert programs[0].instructions != programs[2].instructions


DENSE_VT_CASES = [("default", (16, 512, 1000)), ("tiny", (8, 40, 40)), ("small", (3, 37, 61)), ("tiny", (12, 9, 3))]


@pytest.mark.parametrize("config,shape", DENSE_VT_CASES, ids=[f"{c}-{s}" for c, s in DENSE_VT_CASES])
def test_dense_virtual_threads(config, shape):
    cfg = PRESETS[config]
    N, K, M = shape
    rng = np.random.default_rng(N * K * M)
    mul, shift = 3, _requant_shift(K)
    spec = DenseSpec(layout.round_up(N, cfg.batch), layout.round_up(K, cfg.block_in), layout.round_up(M, cfg.block_out),
                     bias=True, mul=mul, shift=shift, relu=True)
    x, w, b = rand_i8(rng, (N, K)), rand_i8(rng, (M, K)), rand_i32(rng, M, limit=1 << (shift + 4))
    ref = dense_ref(x, w, b, mul, shift, True)
    t4 = dense_tiles(spec, cfg, threads=4)
    NB, MB = spec.batch // cfg.batch, spec.out_features // cfg.block_out
    assert (MB // t4.out_features) % 4 == 0 or (NB // t4.batch) % 4 == 0
    tilings = [DenseTiles(t4.batch, t4.out_features, t4.in_features, T) for T in (1, 2, 4)]
    tilings += [dense_tiles(spec, cfg, threads=T) for T in (1, 2)]
    programs = []
    for tiles in tilings:
        program, out, stats = _run_dense(spec, cfg, tiles, x, w, b)
        np.testing.assert_array_equal(out, ref, err_msg=f"{tiles}")
        assert stats["instructions"] == len(program.instructions)
        programs.append(program)
    assert programs[0].instructions != programs[2].instructions


# -- stats ----------------------------------------------------------------------------------------

STATS_CASES = [("tiny", (2, 5, 7, 6, 6, 3, 2, 1)), ("small", (1, 20, 12, 12, 9, 3, 1, 1)),
               ("default", (1, 64, 14, 14, 128, 1, 2, 0))]


@pytest.mark.parametrize("config,shape", STATS_CASES, ids=[c for c, _ in STATS_CASES])
def test_conv2d_stats(config, shape):
    cfg = PRESETS[config]
    N, C, H, W, O, k, stride, pad = shape
    rng = np.random.default_rng(5)
    x, w, b = rand_i8(rng, (N, C, H, W)), rand_i8(rng, (O, C, k, k)), rand_i32(rng, O, limit=1000)
    OH, OW = (H + 2 * pad - k) // stride + 1, (W + 2 * pad - k) // stride + 1
    res = rand_i8(rng, (N, O, OH, OW))
    out, stats = tilewright.conv2d(x, w, b, stride=stride, padding=pad, mul=3, shift=8, relu=True, residual=res,
                                   config=config)
    for key in STAT_KEYS:
        assert key in stats, key
        assert isinstance(stats[key], (int, np.integer)) and stats[key] > 0, (key, stats[key])
    Cp, Op = layout.round_up(C, cfg.block_in), layout.round_up(O, cfg.block_out)
    intrinsic = cfg.batch * cfg.block_in * cfg.block_out
    assert stats["gemm_uops"] >= N * C * O * OH * OW * k * k / intrinsic
    assert stats["gemm_uops"] >= N * Cp * Op * OH * OW * k * k // intrinsic      # padded channels are computed too
    out_entries = N * Op * OH * OW // (cfg.batch * cfg.block_out)
    # the residual on the ALU; bias, multiply, shift and clip on the store path
    assert stats["alu_uops"] == out_entries
    assert stats["dram_bytes_written"] >= out.nbytes
    assert stats["dram_bytes_written"] >= N * Op * OH * OW                        # the padded int8 output
    assert stats["dram_bytes_read"] >= Op * Cp * k * k + 4 * Op + N * Op * OH * OW  # weights, bias, residual
    assert stats["instructions"] >= 4


@pytest.mark.parametrize("config,shape", [("tiny", (3, 10, 7)), ("default", (16, 512, 1000))])
def test_dense_stats(config, shape):
    cfg = PRESETS[config]
    N, K, M = shape
    rng = np.random.default_rng(6)
    x, w, b = rand_i8(rng, (N, K)), rand_i8(rng, (M, K)), rand_i32(rng, M, limit=1000)
    out, stats = tilewright.dense(x, w, b, mul=3, shift=8, config=config)
    for key in STAT_KEYS:
        assert key in stats and (stats[key] > 0 or key == "alu_uops"), key
    Np, Kp, Mp = (layout.round_up(N, cfg.batch), layout.round_up(K, cfg.block_in), layout.round_up(M, cfg.block_out))
    assert stats["gemm_uops"] >= Np * Kp * Mp // (cfg.batch * cfg.block_in * cfg.block_out)
    # At most the bias ADD (on the store path too when a store's elements share one bias); requantization
    # always on the store path.
    assert stats["alu_uops"] <= Np * Mp // (cfg.batch * cfg.block_out)
    assert stats["dram_bytes_written"] >= out.nbytes
    assert stats["dram_bytes_read"] >= Mp * Kp + Np * Kp + 4 * Mp


def test_stats_scale_with_work():
    """Twice the output channels: twice the GEMM micro-ops, at least as many bytes."""
    rng = np.random.default_rng(9)
    x = rand_i8(rng, (1, 16, 10, 10))
    w1, w2 = rand_i8(rng, (16, 16, 3, 3)), rand_i8(rng, (32, 16, 3, 3))
    _, s1 = tilewright.conv2d(x, w1, padding=1, config="small")
    _, s2 = tilewright.conv2d(x, w2, padding=1, config="small")
    assert s2["gemm_uops"] >= 2 * (16 * 16 * 9 * 100 // 64)
    assert s2["gemm_uops"] > s1["gemm_uops"]
    assert s2["dram_bytes_written"] >= 2 * s1["dram_bytes_written"] - 64


def test_a_shifted_residual_is_one_vector_multiply():
    """``(r · mul) << shift`` becomes one ALU MUL by the vector ``mul << shift`` (the same integers modulo
    2**32): the residual's ALU micro-ops halve, the output stays the reference's."""
    rng = np.random.default_rng(5)
    x, w = rng.integers(-128, 128, (1, 16, 6, 6), np.int8), rng.integers(-128, 128, (32, 16, 3, 3), np.int8)
    res = rng.integers(-128, 128, (1, 32, 6, 6), np.int8)
    alu_uops = {}
    for r_mul, r_shift in ((300, 0), (300, 9)):
        out, stats = tilewright.conv2d(x, w, padding=1, mul=3, shift=14, residual=res, residual_mul=r_mul,
                                       residual_shift=r_shift, config="small")
        np.testing.assert_array_equal(out, conv2d_ref(x, w, None, 1, 1, 3, 14, False, res, r_mul, r_shift))
        alu_uops[r_shift] = stats["alu_uops"]
    assert alu_uops[9] == alu_uops[0]           # (one MUL each: by the immediate, by the vector)
    out, _ = tilewright.conv2d(x, w, padding=1, mul=3, shift=14, residual=res, residual_mul=12345,
                               residual_shift=20, config="small")         # (12345 << 20 wraps modulo 2**32)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, None, 1, 1, 3, 14, False, res, 12345, 20))
    spec = Conv2dSpec(1, 16, 6, 6, 32, (3, 3), 1, 1, residual=True, residual_scale=True)
    ops = [i.alu_op for i in build(conv2d_schedule(spec, "small")[0], "small").instructions if isinstance(i, isa.Alu)]
    assert isa.AluOp.SHR not in ops and isa.AluOp.MUL in ops


@pytest.mark.parametrize("backend", ["fsim", "rtl"])
def test_a_per_channel_scale_is_applied_on_the_store_path(backend):
    """With ``per_channel_store`` a per-channel conv's scale and bias both ride on the requantizing STORE
    (``mul = 0``, the scale register loaded by a set_bias STORE with requant): no ALU instruction is left;
    ``compact`` (no scale register) multiplies on the ALU. Both equal the reference."""
    rng = np.random.default_rng(11)
    x, w = rng.integers(-128, 128, (1, 16, 6, 6), np.int8), rng.integers(-128, 128, (24, 16, 3, 3), np.int8)
    bias, scale = rand_i32(rng, 24), rand_i32(rng, 24)         # (anywhere in int32: product and sum wrap)
    scale[:4] = [1, -1, 2**31 - 1, -2**31]
    spec = Conv2dSpec(1, 16, 6, 6, 32, (3, 3), 1, 1, bias=True, shift=20, relu=True, scale=True)
    for config in ("small", "compact"):
        out, _ = tilewright.conv2d(x, w, bias, padding=1, shift=20, relu=True, scale=scale, config=config,
                                   backend=backend)
        np.testing.assert_array_equal(out, conv2d_ref(x, w, bias, 1, 1, 1, 20, True, None, 1, 0, scale))
        insns = build(conv2d_schedule(spec, config)[0], config).instructions
        stores = [i for i in insns if isinstance(i, isa.Store)]
        if config == "small":
            assert not any(isinstance(i, isa.Alu) for i in insns)
            assert any(i.set_bias and i.requant for i in stores) and all(i.mul == 0 for i in stores if not i.set_bias)
        else:
            assert any(isinstance(i, isa.Alu) and i.alu_op == isa.AluOp.MUL for i in insns)
            assert not any(i.set_bias and i.requant for i in stores)


@pytest.mark.parametrize("backend", ["fsim", "rtl"])
def test_a_residual_before_the_per_channel_scale_leaves_the_scale_on_the_store(backend):
    """``scaled_residual`` (compiled models' per-channel residual layers): ``((acc + r · residual_scale) · scale +
    bias) >> shift``; the ALU only multiplies and adds the residual, the STORE scales and adds the bias."""
    from tilewright.runtime.reference import conv2d_reference
    cfg = PRESETS["small"]
    rng = np.random.default_rng(12)
    x, w = rng.integers(-128, 128, (1, 16, 6, 6), np.int8), rng.integers(-128, 128, (16, 16, 3, 3), np.int8)
    res = rng.integers(-128, 128, (1, 16, 6, 6), np.int8)
    bias, scale, r_scale = rand_i32(rng, 16), rand_i32(rng, 16, limit=1 << 12), rand_i32(rng, 16)
    spec = Conv2dSpec(1, 16, 6, 6, 16, (3, 3), 1, 1, bias=True, shift=18, scale=True, residual=True,
                      residual_scale=True, scaled_residual=True)
    program = build(conv2d_schedule(spec, cfg)[0], cfg)
    tensors = {"data": layout.pack_nchw(x, cfg.batch, cfg.block_in),
               "weight": layout.pack_oihw(w, cfg.block_out, cfg.block_in),
               "residual": layout.pack_nchw(res, cfg.batch, cfg.block_out),
               **{name: layout.pack_bias(v, cfg.batch, cfg.block_out)
                  for name, v in (("bias", bias), ("scale", scale), ("residual_scale", r_scale))}}
    out, _ = get_device(backend, cfg).run_program(program, tensors)
    np.testing.assert_array_equal(layout.unpack_nchw(out["out"], 1, 16),
                                  conv2d_reference(x, w, bias, padding=1, shift=18, residual=res, scale=scale,
                                                   residual_scale=r_scale))
    alu = sorted(i.alu_op.name for i in program.instructions if isinstance(i, isa.Alu))
    assert set(alu) == {"ADD", "MUL"} and alu.count("MUL") == alu.count("ADD")
    assert all(i.mul == 0 for i in program.instructions if isinstance(i, isa.Store) and i.requant and not i.set_bias)
    from tilewright.compiler.schedule import ScheduleError
    with pytest.raises(ScheduleError, match="scaled_residual"):
        conv2d_schedule(Conv2dSpec(1, 16, 6, 6, 16, residual=True, residual_scale=True, scaled_residual=True), cfg)


def test_residual_scale_needs_a_residual_without_its_immediates():
    from tilewright.compiler.schedule import ScheduleError
    for spec in (Conv2dSpec(1, 16, 6, 6, 16, residual_scale=True),
                 Conv2dSpec(1, 16, 6, 6, 16, residual=True, residual_scale=True, residual_shift=3)):
        with pytest.raises(ScheduleError, match="residual_scale"):
            conv2d_schedule(spec, "small")
