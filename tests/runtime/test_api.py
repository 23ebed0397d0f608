"""The runtime's host side: layout packing round trips, and the one-call
operators' argument checking (every bad input is a clear :class:`OperatorError`
or another named error, never an internal traceback from the compiler)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tilewright
from tilewright import ConfigError, PRESETS
from tilewright.compiler import build
from tilewright.compiler.ops import Conv2dSpec, conv2d as conv2d_schedule
from tilewright.runtime import DeviceError, OperatorError, get_device
from tilewright.runtime.layout import (pack_bias, pack_nchw, pack_oihw, pack_rows, round_up, unpack_nchw,
                                       unpack_rows)

from ..compiler.reference import conv2d_ref


# -- layout ------------------------------------------------------------------------------------

def test_round_up():
    assert [round_up(n, 4) for n in (0, 1, 3, 4, 5, 8, 9)] == [0, 4, 4, 4, 8, 8, 12]
    assert round_up(7, 1) == 7


@settings(max_examples=60, deadline=None)
@given(N=st.integers(1, 5), C=st.integers(1, 21), H=st.integers(1, 5), W=st.integers(1, 5),
       batch=st.sampled_from([1, 2, 4]), block=st.sampled_from([1, 4, 8, 16]), seed=st.integers(0, 2**32 - 1))
def test_pack_nchw_round_trip(N, C, H, W, batch, block, seed):
    x = np.random.default_rng(seed).integers(-128, 128, (N, C, H, W), dtype=np.int8)
    y = pack_nchw(x, batch, block)
    Np, Cp = round_up(N, batch), round_up(C, block)
    assert y.dtype == np.int8 and y.shape == (Np // batch, Cp // block, H, W, batch, block)
    assert y.flags.c_contiguous
    np.testing.assert_array_equal(unpack_nchw(y, N, C), x)
    # element mapping, and zero padding of batch and channels
    full = unpack_nchw(y, Np, Cp)
    np.testing.assert_array_equal(full[:N, :C], x)
    assert not full[N:].any() and not full[:, C:].any()
    n, c, h, w = N - 1, C - 1, H - 1, W - 1
    assert y[n // batch, c // block, h, w, n % batch, c % block] == x[n, c, h, w]


@settings(max_examples=40, deadline=None)
@given(O=st.integers(1, 21), I=st.integers(1, 21), K=st.integers(1, 3), bo=st.sampled_from([4, 8, 16]),
       bi=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**32 - 1))
def test_pack_oihw(O, I, K, bo, bi, seed):
    w = np.random.default_rng(seed).integers(-128, 128, (O, I, K, K), dtype=np.int8)
    y = pack_oihw(w, bo, bi)
    Op, Ip = round_up(O, bo), round_up(I, bi)
    assert y.dtype == np.int8 and y.shape == (Op // bo, Ip // bi, K, K, bo, bi)
    # invert by hand: (O/bo, I/bi, KH, KW, bo, bi) -> OIHW
    back = y.transpose(0, 4, 1, 5, 2, 3).reshape(Op, Ip, K, K)
    np.testing.assert_array_equal(back[:O, :I], w)
    assert not back[O:].any() and not back[:, I:].any()


@settings(max_examples=60, deadline=None)
@given(N=st.integers(1, 20), K=st.integers(1, 40), rows=st.sampled_from([1, 2, 4, 16]),
       block=st.sampled_from([4, 8, 16]), seed=st.integers(0, 2**32 - 1))
def test_pack_rows_round_trip(N, K, rows, block, seed):
    x = np.random.default_rng(seed).integers(-128, 128, (N, K), dtype=np.int8)
    y = pack_rows(x, rows, block)
    Np, Kp = round_up(N, rows), round_up(K, block)
    assert y.dtype == np.int8 and y.shape == (Np // rows, Kp // block, rows, block)
    np.testing.assert_array_equal(unpack_rows(y, N, K), x)
    full = unpack_rows(y, Np, Kp)
    assert not full[N:].any() and not full[:, K:].any()
    assert y[(N - 1) // rows, (K - 1) // block, (N - 1) % rows, (K - 1) % block] == x[N - 1, K - 1]


@pytest.mark.parametrize("n,batch,block", [(1, 1, 4), (5, 1, 4), (13, 2, 8), (16, 1, 16), (1000, 1, 16)])
def test_pack_bias(n, batch, block):
    b = np.random.default_rng(n).integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32)
    y = pack_bias(b, batch, block)
    c = round_up(n, block)
    assert y.dtype == np.int32 and y.shape == (c // block, batch, block)
    for row in range(batch):             # the same bias on every batch row
        flat = y[:, row, :].reshape(-1)
        np.testing.assert_array_equal(flat[:n], b)
        assert not flat[n:].any()
    # extreme values survive the int64 detour
    edge = np.array([-2**31, 2**31 - 1], np.int32)
    np.testing.assert_array_equal(pack_bias(edge, 1, 4).reshape(-1)[:2], edge)


def test_pack_bias_channels_argument_pads_further():
    y = pack_bias(np.array([1, 2, 3], np.int32), 1, 4, channels=9)
    assert y.shape == (3, 1, 4)
    assert y.reshape(-1).tolist() == [1, 2, 3] + [0] * 9


def test_unpack_of_operator_output_layout():
    """unpack_nchw reads the (N/b, O/o, H, W, b, o) output layout, with b and o from the array."""
    y = np.arange(1 * 2 * 3 * 2 * 1 * 4, dtype=np.int8).reshape(1, 2, 3, 2, 1, 4)
    x = unpack_nchw(y, 1, 6)
    assert x.shape == (1, 6, 3, 2)
    assert x[0, 5, 2, 1] == y[0, 1, 2, 1, 0, 1]


# -- operator argument checking ----------------------------------------------------------------

def i8(*shape):
    return np.ones(shape, np.int8)


def conv(x=None, w=None, b=None, **kw):
    kw.setdefault("config", "tiny")
    return tilewright.conv2d(i8(1, 4, 5, 5) if x is None else x, i8(4, 4, 3, 3) if w is None else w, b, **kw)


def dense(x=None, w=None, b=None, **kw):
    kw.setdefault("config", "tiny")
    return tilewright.dense(i8(2, 6) if x is None else x, i8(3, 6) if w is None else w, b, **kw)


def test_good_call_for_reference():
    out, _ = conv(b=np.zeros(4, np.int32), padding=1)
    assert out.shape == (1, 4, 5, 5) and out.dtype == np.int8
    # ones ⊛ ones over 4 channels: 36 inside, 24 on the edges, 16 in the corners
    rows = np.array([2, 3, 3, 3, 2])
    assert (out == 4 * rows[:, None] * rows[None, :]).all()
    out, _ = dense(b=np.zeros(3, np.int32))
    assert (out == 6).all()


def test_operator_error_is_value_error():
    assert issubclass(OperatorError, ValueError)


CONV_BAD = [
    # (description, kwargs for conv(), message regex)
    ("float data", dict(x=np.ones((1, 4, 5, 5), np.float32)), r"data must be int8, not float32"),
    ("float64 data", dict(x=np.ones((1, 4, 5, 5))), r"data must be int8, not float64"),
    ("uint8 data", dict(x=np.ones((1, 4, 5, 5), np.uint8)), r"data must be int8, not uint8"),
    ("int32 weight", dict(w=np.ones((4, 4, 3, 3), np.int32)), r"weight must be int8, not int32"),
    ("float weight", dict(w=np.ones((4, 4, 3, 3), np.float16)), r"weight must be int8, not float16"),
    ("3-d data", dict(x=i8(4, 5, 5)), r"data must have 4 dimensions, not shape \(4, 5, 5\)"),
    ("5-d data", dict(x=i8(1, 1, 4, 5, 5)), r"data must have 4 dimensions"),
    ("2-d weight", dict(w=i8(4, 4)), r"weight must have 4 dimensions, not shape \(4, 4\)"),
    ("channel mismatch", dict(w=i8(4, 3, 3, 3)), r"weight has 3 input channels, data has 4"),
    ("channel mismatch 2", dict(x=i8(1, 20, 5, 5), w=i8(4, 16, 3, 3)), r"weight has 16 input channels, data has 20"),
    ("bias too short", dict(b=np.zeros(3, np.int32)), r"bias has 3 values for 4 output channels"),
    ("bias too long", dict(b=np.zeros(5, np.int32)), r"bias has 5 values for 4 output channels"),
    ("int64 bias", dict(b=np.zeros(4, np.int64)), r"bias must be int32, not int64"),
    ("int8 bias", dict(b=np.zeros(4, np.int8)), r"bias must be int32, not int8"),
    ("float bias", dict(b=np.zeros(4, np.float32)), r"bias must be int32, not float32"),
    ("2-d bias", dict(b=np.zeros((1, 4), np.int32)), r"bias must have 1 dimensions, not shape \(1, 4\)"),
    ("residual shape", dict(residual=i8(1, 4, 5, 5)),
     r"residual has shape \(1, 4, 5, 5\), the output is \(1, 4, 3, 3\)"),
    ("residual channels", dict(residual=i8(1, 3, 3, 3)), r"residual has shape \(1, 3, 3, 3\)"),
    ("residual batch", dict(residual=i8(2, 4, 3, 3)), r"residual has shape \(2, 4, 3, 3\)"),
    ("residual ndim", dict(residual=i8(4, 3, 3)), r"residual must have 4 dimensions"),
    ("residual dtype", dict(residual=np.zeros((1, 4, 3, 3), np.int32)), r"residual must be int8, not int32"),
    ("kernel too big", dict(w=i8(4, 4, 7, 7)), r"a 7x7 kernel does not fit a 5x5 input padded by 0"),
    ("kernel too big padded", dict(w=i8(4, 4, 8, 8), padding=1), r"a 8x8 kernel does not fit a 5x5 input padded by 1"),
    ("kernel too wide", dict(x=i8(1, 4, 6, 2), w=i8(4, 4, 3, 3)), r"a 3x3 kernel does not fit a 6x2 input"),
    ("kernel too big stride 2", dict(x=i8(1, 4, 2, 2), w=i8(4, 4, 3, 3), stride=2),
     r"a 3x3 kernel does not fit a 2x2 input padded by 0"),
    ("stride 0", dict(stride=0), r"stride must be ≥ 1 and padding ≥ 0 integers, got 0, 0"),
    ("stride -1", dict(stride=-1), r"stride must be ≥ 1"),
    ("stride float", dict(stride=1.5), r"stride must be ≥ 1 and padding ≥ 0 integers, got 1.5"),
    ("negative padding", dict(padding=-1), r"padding ≥ 0 integers, got 1, -1"),
    ("float padding", dict(padding=1.0), r"padding ≥ 0 integers, got 1, 1.0"),
    ("mul too big", dict(mul=1 << 15), r"mul=32768 must be an integer in \[-32768, 32767\]"),
    ("mul too small", dict(mul=-(1 << 15) - 1), r"mul=-32769 must be an integer in \[-32768, 32767\]"),
    ("mul float", dict(mul=1.5), r"mul=1.5 must be an integer"),
    ("negative shift", dict(shift=-1), r"shift=-1 must be an integer in \[0, 63\]"),
    ("shift too big", dict(shift=64), r"shift=64 must be an integer in \[0, 63\]"),
    ("shift float", dict(shift=2.0), r"shift=2.0 must be an integer"),
    ("groups not dividing", dict(x=i8(1, 4, 5, 5), w=i8(4, 2, 3, 3), groups=3),
     r"groups=3 must be a positive integer dividing the 4 channels"),
    ("groups changing width", dict(x=i8(1, 4, 5, 5), w=i8(8, 2, 3, 3), groups=2),
     r"groups=2: weights must be 4x2xKHxKW \(as many outputs as inputs\), not 8x2x3x3"),
    ("groups not fitting the block", dict(x=i8(1, 24, 5, 5), w=i8(24, 3, 3, 3), groups=8),
     r"3-channel groups divide; config tiny has block_in 4"),
]


@pytest.mark.parametrize("kwargs,message", [c[1:] for c in CONV_BAD], ids=[c[0] for c in CONV_BAD])
def test_conv2d_bad_arguments(kwargs, message):
    kwargs = dict(kwargs)
    x, w, b = kwargs.pop("x", None), kwargs.pop("w", None), kwargs.pop("b", None)
    with pytest.raises(OperatorError, match=message):
        conv(x, w, b, **kwargs)


DENSE_BAD = [
    ("float data", dict(x=np.ones((2, 6), np.float32)), r"data must be int8, not float32"),
    ("int32 weight", dict(w=np.ones((3, 6), np.int32)), r"weight must be int8, not int32"),
    ("1-d data", dict(x=i8(6)), r"data must have 2 dimensions, not shape \(6,\)"),
    ("3-d weight", dict(w=i8(1, 3, 6)), r"weight must have 2 dimensions"),
    ("feature mismatch", dict(w=i8(3, 5)), r"weight has 5 input features, data has 6"),
    ("bias length", dict(b=np.zeros(4, np.int32)), r"bias has 4 values for 3 outputs"),
    ("bias dtype", dict(b=np.zeros(3, np.float64)), r"bias must be int32, not float64"),
    ("bias list", dict(b=[1, 2, 3]), r"bias must be int32, not int64"),
    ("mul too big", dict(mul=40000), r"mul=40000 must be an integer in \[-32768, 32767\]"),
    ("negative shift", dict(shift=-3), r"shift=-3 must be an integer in \[0, 63\]"),
]


@pytest.mark.parametrize("kwargs,message", [c[1:] for c in DENSE_BAD], ids=[c[0] for c in DENSE_BAD])
def test_dense_bad_arguments(kwargs, message):
    kwargs = dict(kwargs)
    x, w, b = kwargs.pop("x", None), kwargs.pop("w", None), kwargs.pop("b", None)
    with pytest.raises(OperatorError, match=message):
        dense(x, w, b, **kwargs)


def test_mul_and_shift_limits_are_accepted():
    for mul in (-(1 << 15), (1 << 15) - 1, np.int16(-5), np.int64(7)):
        conv(mul=mul, shift=0)
    for shift in (0, 63, np.int32(5)):
        dense(shift=shift)


def test_unknown_config_and_backend():
    with pytest.raises(ConfigError, match=r"unknown config 'huge'"):
        conv(config="huge")
    with pytest.raises(DeviceError, match=r"unknown backend 'gpu' \(available: fsim, rtl, fpga\)"):
        conv(backend="gpu")
    with pytest.raises(DeviceError, match=r"unknown backend"):
        dense(backend="rtl-nonexistent")


def test_errors_leave_the_runtime_usable():
    """A rejected call (or a compile error) does not poison the program cache or the device."""
    with pytest.raises(OperatorError):
        conv(b=np.zeros(5, np.int32))
    with pytest.raises(OperatorError):
        conv(residual=i8(1, 4, 5, 5))
    out, _ = conv(b=np.arange(4, dtype=np.int32))
    assert (out == 36 + np.arange(4)[None, :, None, None]).all()


# -- device-level input checking ----------------------------------------------------------------

def _tiny_program():
    cfg = PRESETS["tiny"]
    s, _, _ = conv2d_schedule(Conv2dSpec(1, 4, 5, 5, 4, (3, 3), 1, 1, bias=True), cfg)
    return cfg, build(s, cfg)


def test_device_rejects_missing_or_misshapen_inputs():
    cfg, program = _tiny_program()
    dev = get_device("fsim", cfg)
    data, weight = pack_nchw(i8(1, 4, 5, 5), 1, 4), pack_oihw(i8(4, 4, 3, 3), 4, 4)
    bias = pack_bias(np.zeros(4, np.int32), 1, 4)
    with pytest.raises(DeviceError, match=r"needs input\(s\) bias"):
        dev.run_program(program, {"data": data, "weight": weight})
    with pytest.raises(DeviceError, match=r"input data has shape \(1, 1, 4, 5, 1, 4\), the program expects "
                                          r"\(1, 1, 5, 5, 1, 4\)"):
        dev.run_program(program, {"data": data[:, :, :4], "weight": weight, "bias": bias})
    outputs, _ = dev.run_program(program, {"data": data, "weight": weight, "bias": bias})
    assert (unpack_nchw(outputs["out"], 1, 4)[:, :, 1:4, 1:4] == 36).all()


def test_device_rejects_program_of_another_config():
    _, program = _tiny_program()
    with pytest.raises(DeviceError, match=r"was compiled for config tiny .* the device runs small"):
        get_device("fsim", "small").run_program(program, {})


# -- known problems ------------------------------------------------------------------------------

EMPTY = [
    ("batch 0", lambda: conv(x=i8(0, 4, 5, 5))),
    ("in channels 0", lambda: conv(x=i8(1, 0, 5, 5), w=i8(4, 0, 3, 3))),
    ("out channels 0", lambda: conv(w=i8(0, 4, 3, 3))),
    ("kernel 0x0", lambda: conv(w=i8(4, 4, 0, 0))),
    ("dense batch 0", lambda: dense(x=i8(0, 6))),
    ("dense features 0", lambda: dense(x=i8(2, 0), w=i8(3, 0))),
    ("dense outputs 0", lambda: dense(w=i8(0, 6))),
]


@pytest.mark.parametrize("call", [c[1] for c in EMPTY], ids=[c[0] for c in EMPTY])
def test_empty_dimensions_are_operator_errors(call):
    with pytest.raises(OperatorError, match=r"(?i)empty|zero|size 0|at least 1|positive|≥ 1"):
        call()


def test_numpy_integer_stride_and_padding():
    rng = np.random.default_rng(21)
    x, w = rng.integers(-128, 128, (1, 4, 5, 5), dtype=np.int8), rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
    out, _ = conv(x, w, stride=np.int64(2), padding=np.int64(1), shift=np.int64(8))
    ref, _ = conv(x, w, stride=2, padding=1, shift=8)
    np.testing.assert_array_equal(out, ref)
    np.testing.assert_array_equal(out, conv2d_ref(x, w, None, 2, 1, 1, 8))
