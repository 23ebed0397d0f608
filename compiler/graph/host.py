"""Operators on the host, in numpy, with ONNX semantics.

Every op the importer accepts has an implementation here, so any node the
accelerator does not take still runs; the float model also runs here for
calibration and as the accuracy baseline. Float ops compute in float32 like
ONNX runtimes; integer ops (ConvInteger, the QLinear ops) accumulate
exactly in int64.
"""

from types import SimpleNamespace

import numpy as np

from tilewright.semantics import requantize, wrap

from . import reference
from .contrib import CONTRIB_OPS
from .ir import ModelError

__all__ = ["HOST_OPS", "host_runs", "run_node", "run_graph", "conv_nchw", "exact_integer_conv", "pool_nchw",
           "quantize_linear", "QUANTIZED_WIDTHS"]


# -- shared kernels ---------------------------------------------------------------------

def _pads(node, spatial, kernel, strides, dilations, shape):
    """Begin/end padding per spatial axis, from ``pads`` or ``auto_pad``."""
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = list(node.attr("pads", [0] * (2 * spatial)))
        return pads[:spatial], pads[spatial:]
    if auto == "VALID":
        return [0] * spatial, [0] * spatial
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for n, k, s, d in zip(shape, kernel, strides, dilations):
            out = -(-n // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
            small, big = total // 2, total - total // 2
            begin.append(small if auto == "SAME_UPPER" else big)
            end.append(big if auto == "SAME_UPPER" else small)
        return begin, end
    raise ModelError(f"node {node}: auto_pad={auto!r} is not supported")


def _windows(x, kernel, strides, dilations):
    """(N, C, out..., k...) strided view of the windows of ``x`` (already padded)."""
    n, c, *size = x.shape
    out = [(s - (k - 1) * d - 1) // st + 1 for s, k, st, d in zip(size, kernel, strides, dilations)]
    if any(o <= 0 for o in out):
        raise ModelError(f"kernel {tuple(kernel)} does not fit the padded input {tuple(size)}")
    st = x.strides
    view = np.lib.stride_tricks.as_strided(
        x, shape=(n, c, *out, *kernel),
        strides=(st[0], st[1], *(st[2 + i] * strides[i] for i in range(len(size))),
                 *(st[2 + i] * dilations[i] for i in range(len(size)))), writeable=False)
    return view


def conv_nchw(x, w, *, strides, pads_begin, pads_end, dilations=None, group=1, dtype=np.float32):
    """ONNX Conv of ``x`` (N, C, spatial...) with ``w`` (M, C/group, k...), no bias, computed in ``dtype``."""
    spatial = x.ndim - 2
    dilations = dilations or [1] * spatial
    x = np.pad(x.astype(dtype), [(0, 0), (0, 0)] + list(zip(pads_begin, pads_end)))
    kernel = w.shape[2:]
    cols = _windows(x, kernel, strides, dilations)                     # N, C, out..., k...
    n, c = x.shape[:2]
    m = w.shape[0]
    if c % group or m % group or w.shape[1] != c // group:
        raise ModelError(f"conv: {c} input channels, weights {w.shape}, group {group} do not match")
    outs = []
    for g in range(group):
        xs = cols[:, g * (c // group):(g + 1) * (c // group)]
        ws = w[g * (m // group):(g + 1) * (m // group)].astype(dtype)
        # contract channels and kernel positions
        axes_x = [1] + list(range(2 + spatial, 2 + 2 * spatial))
        axes_w = [1] + list(range(2, 2 + spatial))
        y = np.tensordot(xs, ws, axes=(axes_x, axes_w))               # N, out..., M/group
        outs.append(np.moveaxis(y, -1, 1))
    return np.concatenate(outs, axis=1)


def pool_nchw(x, kernel, *, strides, pads_begin, pads_end, dilations=None, kind="max", ceil_mode=False,
              count_include_pad=False):
    """ONNX MaxPool/AveragePool of ``x`` (N, C, spatial...)."""
    spatial = x.ndim - 2
    dilations = dilations or [1] * spatial
    extra = []
    for n, k, s, d, b, e in zip(x.shape[2:], kernel, strides, dilations, pads_begin, pads_end):
        span = n + b + e - ((k - 1) * d + 1)
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= n + b:        # the last window must start inside the input or left pad
            out -= 1
        extra.append(max(0, (out - 1) * s + (k - 1) * d + 1 - (n + b + e)))
    pad_cfg = [(0, 0), (0, 0)] + [(b, e + x_) for b, e, x_ in zip(pads_begin, pads_end, extra)]
    if kind == "max":
        fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
        padded = np.pad(x, pad_cfg, constant_values=fill)
        return _windows(padded, kernel, strides, dilations).max(axis=tuple(range(-spatial, 0)))
    valid = np.pad(np.ones(x.shape[2:], dtype=np.float64), pad_cfg[2:])
    if count_include_pad:       # explicit pads count, the ceil-mode overhang does not
        valid = np.pad(np.ones([n + b + e for n, b, e in zip(x.shape[2:], pads_begin, pads_end)]),
                       [(0, x_) for x_ in extra])
    padded = np.pad(x.astype(np.float64), pad_cfg)
    sums = _windows(padded, kernel, strides, dilations).sum(axis=tuple(range(-spatial, 0)))
    counts = _windows(valid[None, None], kernel, strides, dilations).sum(axis=tuple(range(-spatial, 0)))
    return (sums / counts).astype(x.dtype)


def quantize_linear(x, scale, zero_point=None, axis=1, dtype=None):
    """ONNX QuantizeLinear: saturate(round_half_even(x / scale) + zero_point)."""
    dtype = np.dtype(dtype or (zero_point.dtype if zero_point is not None else np.uint8))
    scale, zp = _per_axis(scale, x, axis), _per_axis(zero_point if zero_point is not None else 0, x, axis)
    info = np.iinfo(dtype)
    q = np.rint(x.astype(np.float64) / scale) + zp
    return np.clip(q, info.min, info.max).astype(dtype)


def _per_axis(v, x, axis):
    v = np.asarray(v)
    if v.ndim == 0 or v.size == 1:
        return v.reshape(()).astype(np.float64) if v.dtype.kind == "f" else v.reshape(()).astype(np.int64)
    shape = [1] * x.ndim
    shape[axis % x.ndim] = v.size
    return v.reshape(shape).astype(np.float64 if v.dtype.kind == "f" else np.int64)


def _zp(v, like=None):
    return np.int64(0) if v is None else np.asarray(v).astype(np.int64)


# -- operators --------------------------------------------------------------------------

def _conv_attrs(node, x, w):
    spatial = x.ndim - 2
    kernel = list(node.attr("kernel_shape", w.shape[2:]))
    strides = list(node.attr("strides", [1] * spatial))
    dilations = list(node.attr("dilations", [1] * spatial))
    begin, end = _pads(node, spatial, kernel, strides, dilations, x.shape[2:])
    return dict(strides=strides, pads_begin=begin, pads_end=end, dilations=dilations, group=node.attr("group", 1))


def _conv(node, x, w, b=None):
    y = conv_nchw(x, w, dtype=np.float64, **_conv_attrs(node, x, w))
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
    return [y.astype(x.dtype)]


def _conv_integer(node, x, w, x_zp=None, w_zp=None):
    xs = x.astype(np.int64) - _zp(x_zp)
    wz = _zp(w_zp)
    ws = w.astype(np.int64) - (wz.reshape((-1,) + (1,) * (w.ndim - 1)) if wz.ndim == 1 else wz)
    return [exact_integer_conv(xs, ws, **_conv_attrs(node, x, w)).astype(np.int32)]


def exact_integer_conv(x, w, **attrs):
    """:func:`conv_nchw` of integer ``x`` and ``w`` as exact int64: in float64, whose matrix products are
    BLAS's, when no sum of products can reach 2**53 (every partial sum is then an exact integer, in any
    order: int8 data and weights need kernels of over 10**11 taps to miss), else in int64."""
    taps = int(np.prod(w.shape[1:]))
    bound = float(np.abs(x).max(initial=0)) * float(np.abs(w).max(initial=0)) * taps
    if bound < 2.0 ** 53:
        return conv_nchw(x, w, dtype=np.float64, **attrs).astype(np.int64)
    return conv_nchw(x, w, dtype=np.int64, **attrs)


def _requantize_float(acc, real_scale, y_scale_dtype_zp):
    y_zp = y_scale_dtype_zp
    dtype = y_zp.dtype if y_zp is not None else np.uint8
    info = np.iinfo(dtype)
    r = acc * real_scale + (0 if y_zp is None else y_zp.astype(np.float64))
    return np.rint(np.clip(r, info.min, info.max)).astype(dtype)


def _qlinear_conv(node, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp=None, b=None):
    acc = _conv_integer(node, x, w, x_zp, w_zp)[0].astype(np.int64)
    if b is not None:
        acc = acc + b.astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    ws = np.asarray(w_scale)
    ws = ws.reshape((1, -1) + (1,) * (acc.ndim - 2)) if ws.size > 1 else ws.reshape(())
    return [_requantize_float(acc.astype(np.float64), _real_scale(x_scale, ws, y_scale), y_zp)]


def _real_scale(a_scale, b_scale, y_scale):
    """``a · b / y`` in the scales' own precision (float32 models round it there, as onnx.reference and
    ONNX Runtime do; computing it in float64 moves ties by one step)."""
    return (np.asarray(a_scale) * np.asarray(b_scale) / np.asarray(y_scale)).astype(np.float64)


def _matmul_integer(node, a, b, a_zp=None, b_zp=None):
    az = _zp(a_zp)
    bz = _zp(b_zp)
    return [np.matmul(a.astype(np.int64) - az, b.astype(np.int64) - bz).astype(np.int32)]


def _qlinear_matmul(node, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp=None):
    acc = np.matmul(a.astype(np.int64) - _zp(a_zp), b.astype(np.int64) - _zp(b_zp)).astype(np.float64)
    return [_requantize_float(acc, _real_scale(a_scale, b_scale, y_scale), y_zp)]


def _gemm(node, a, b, c=None):
    a = a.T if node.attr("transA", 0) else a
    b = b.T if node.attr("transB", 0) else b
    y = node.attr("alpha", 1.0) * (a.astype(np.float64) @ b.astype(np.float64))
    if c is not None:
        y = y + node.attr("beta", 1.0) * c
    return [y.astype(a.dtype)]


def _clip(node, x, lo=None, hi=None):
    lo = node.attr("min") if lo is None else lo
    hi = node.attr("max") if hi is None else hi
    y = x
    if lo is not None:
        y = np.maximum(y, np.asarray(lo, dtype=x.dtype))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi, dtype=x.dtype))
    return [y.astype(x.dtype)]


def _batch_norm(node, x, scale, b, mean, var):
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise ModelError(f"node {node}: training-mode BatchNormalization is not supported")
    shape = (1, -1) + (1,) * (x.ndim - 2)
    eps = node.attr("epsilon", 1e-5)
    y = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * scale.reshape(shape) + b.reshape(shape)
    return [y.astype(x.dtype)]


def _pool(kind):
    def run(node, x):
        if len(node.outputs) > 1 and any(node.outputs[1:]):
            raise ModelError(f"node {node}: MaxPool indices output is not supported")
        spatial = x.ndim - 2
        kernel = list(node.attr("kernel_shape"))
        strides = list(node.attr("strides", [1] * spatial))
        dilations = list(node.attr("dilations", [1] * spatial))
        begin, end = _pads(node, spatial, kernel, strides, dilations, x.shape[2:])
        return [pool_nchw(x, kernel, strides=strides, pads_begin=begin, pads_end=end, dilations=dilations,
                          kind=kind, ceil_mode=bool(node.attr("ceil_mode", 0)),
                          count_include_pad=bool(node.attr("count_include_pad", 0)))]
    return run


def _global_average_pool(node, x):
    return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True, dtype=np.float64).astype(x.dtype)]


def _flatten(node, x):
    axis = node.attr("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    return [x.reshape(int(np.prod(x.shape[:axis])), -1)]


def _reshape(node, x, shape):
    shape = [int(s) for s in shape]
    if not node.attr("allowzero", 0):
        shape = [x.shape[k] if s == 0 else s for k, s in enumerate(shape)]
    try:
        return [x.reshape(shape)]
    except ValueError:
        raise ModelError(f"node {node}: cannot reshape {x.shape} to {shape}") from None


def _softmax(node, x, opset):
    axis = node.attr("axis", -1 if opset >= 13 else 1) % x.ndim
    if opset < 13:                    # coerced to 2D: all axes from `axis` on form one row
        flat = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
        e = np.exp(flat - flat.max(axis=1, keepdims=True))
        return [(e / e.sum(axis=1, keepdims=True)).reshape(x.shape).astype(x.dtype)]
    xf = x.astype(np.float64)
    e = np.exp(xf - xf.max(axis=axis, keepdims=True))
    return [(e / e.sum(axis=axis, keepdims=True)).astype(x.dtype)]


def _quantize(node, x, scale, zp=None):
    dtype = node.attr("output_dtype")
    if dtype:
        from onnx import helper
        dtype = helper.tensor_dtype_to_np_dtype(dtype)
    return [quantize_linear(x, scale, zp, axis=node.attr("axis", 1), dtype=dtype)]


def _dequantize(node, x, scale, zp=None):
    axis = node.attr("axis", 1)
    y = (x.astype(np.int64) - _per_axis(_zp(zp), x, axis)) * _per_axis(scale, x, axis)
    return [y.astype(np.asarray(scale).dtype)]


def _tw_fused(node, *values):
    """Float semantics of TwConv / TwDense (calibration and the float baseline)."""
    values = list(values) + [None] * (4 - len(values))
    x, w, b = values[0], values[1], values[2]
    if node.op == "TwConv":
        y = conv_nchw(x, w, dtype=np.float64, **_conv_attrs(node, x, w))
        if b is not None:
            y += b.reshape(1, -1, 1, 1)
        if values[3] is not None:
            y += values[3]
    else:
        if x.ndim != 2:
            raise ModelError(f"node {node}: dense input must be 2-D, got {x.shape}")
        y = x.astype(np.float64) @ w.T.astype(np.float64)
        if b is not None:
            y += b
    act = node.attr("act", "none")
    if act == "relu":
        y = np.maximum(y, 0)
    elif act == "clip":
        y = np.clip(y, node.attr("clip_min"), node.attr("clip_max"))
    return [y.astype(np.float32)]


#: QConv/QDense compute with int8 data and int32 accumulators (the only configs compile_model accepts).
QUANTIZED_WIDTHS = SimpleNamespace(inp_width=8, wgt_width=8, acc_width=32, out_width=8)


def _wrap32(v):
    return wrap(v, QUANTIZED_WIDTHS.acc_width)


def _requantize_int(acc, node):
    """The accelerator's STORE epilogue: clip((acc · mul) >> shift, lo, 127), int32 wrap-around."""
    return requantize(acc, node.attr("mul"), node.attr("shift"), node.attr("relu"),
                      acc_width=QUANTIZED_WIDTHS.acc_width, out_width=QUANTIZED_WIDTHS.out_width)


def _qconv(node, x, w, b, r=None, scale=None, residual_scale=None):
    """QConv (graph.quantize) exactly as the accelerator computes it."""
    p = node.attr("padding")
    acc = _wrap32(exact_integer_conv(x.astype(np.int64), w.astype(np.int64), strides=[node.attr("stride")] * 2,
                                     pads_begin=[p, p], pads_end=[p, p], group=node.attr("group", 1)))
    if residual_scale is not None:      # the residual joins before the per-channel scale
        acc = _wrap32(acc + _wrap32(r.astype(np.int64) * residual_scale.astype(np.int64).reshape(1, -1, 1, 1)))
        r = None
    if scale is not None:
        acc = _wrap32(acc * scale.astype(np.int64).reshape(1, -1, 1, 1))
    acc = _wrap32(acc + b.astype(np.int64).reshape(1, -1, 1, 1))
    if r is not None:
        rescaled = _wrap32(_wrap32(r.astype(np.int64) * node.attr("residual_mul")) << node.attr("residual_shift", 0))
        acc = _wrap32(acc + rescaled)
    return [_requantize_int(acc, node)]


def _qdense(node, x, w, b, scale=None):
    acc = _wrap32(x.astype(np.int64) @ w.astype(np.int64).T)
    if scale is not None:
        acc = _wrap32(acc * scale.astype(np.int64))
    return [_requantize_int(_wrap32(acc + b.astype(np.int64)), node)]


def _im2col(node, x):
    """Im2Col (graph.passes.unfold_narrow_convs): each k×k window of the zero-padded input as channels
    ``(c, kh, kw)`` — int8 data moved, not changed."""
    p, stride, kernel = node.attr("padding"), node.attr("stride"), node.attr("kernel")
    padded = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p)))
    windows = _windows(padded, kernel, [stride, stride], [1, 1])        # N, C, OH, OW, KH, KW
    n, c, oh, ow = windows.shape[:4]
    return [np.ascontiguousarray(windows.transpose(0, 1, 4, 5, 2, 3)).reshape(n, -1, oh, ow)]


# -- shape and elementwise glue that exporters emit around the layers ---------------------------

def _axes(node, axes, opset, first_input_opset=13):
    """An op's axes: an input from ``first_input_opset`` on, an attribute before."""
    if opset < first_input_opset:
        return node.attr("axes")
    return None if axes is None else [int(a) for a in np.asarray(axes).ravel()]


def _shape(node, x):
    start, end = node.attr("start", 0), node.attr("end")
    return [np.array(x.shape[start:end], dtype=np.int64)]


def _unsqueeze(node, x, axes=None, opset=17):
    axes = _axes(node, axes, opset)
    rank = x.ndim + len(axes)
    for a in sorted(a % rank for a in axes):
        x = np.expand_dims(x, a)
    return [x]


def _squeeze(node, x, axes=None, opset=17):
    axes = _axes(node, axes, opset)
    return [np.squeeze(x, axis=None if axes is None else tuple(a % x.ndim for a in axes))]


def _div(node, a, b):
    if np.issubdtype(a.dtype, np.integer):        # C-style: truncate toward zero
        q = np.floor_divide(a, b)
        return [(q + ((np.remainder(a, b) != 0) & ((a < 0) ^ (b < 0)))).astype(a.dtype)]
    return [np.divide(a, b).astype(a.dtype)]


def _pad(node, x, pads=None, value=None, axes=None, opset=17):
    pads = node.attr("pads") if opset < 11 else [int(p) for p in pads]
    value = node.attr("value", 0.0) if opset < 11 else (0 if value is None else value.item())
    axes = list(range(x.ndim)) if axes is None else [int(a) % x.ndim for a in np.asarray(axes).ravel()]
    widths = [(0, 0)] * x.ndim
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    if any(lo < 0 or hi < 0 for lo, hi in widths):
        raise ModelError(f"node {node}: negative pads (cropping) are not supported")
    mode = node.attr("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise ModelError(f"node {node}: pad mode {mode!r} is not supported")
    kw = {"constant_values": value} if mode == "constant" else {}
    return [np.pad(x, widths, mode=mode, **kw).astype(x.dtype)]


def _reduce_mean(node, x, axes=None, opset=17):
    axes = _axes(node, axes, opset, first_input_opset=18)
    if not axes and node.attr("noop_with_empty_axes", 0):
        return [x]
    y = x.astype(np.float64).mean(axis=None if not axes else tuple(axes), keepdims=bool(node.attr("keepdims", 1)))
    return [np.asarray(y).astype(x.dtype)]


def _cast(node, x):
    from onnx import helper
    return [x.astype(helper.tensor_dtype_to_np_dtype(node.attr("to")))]


#: Operators whose meaning depends on the opset (run_node passes it).
def _zip_map(node, x):
    """ai.onnx.ml ZipMap: one {class label: score} dict per row of ``x``."""
    labels = node.attr("classlabels_int64s") or node.attr("classlabels_strings")
    if labels is None or len(labels) != x.shape[-1]:
        raise ModelError(f"node {node}: ZipMap has {0 if labels is None else len(labels)} class labels for "
                         f"{x.shape[-1]} scores")
    return [[dict(zip(labels, (float(v) for v in row))) for row in np.asarray(x, dtype=np.float32)]]


_OPSET_DEPENDENT = {"Unsqueeze", "Squeeze", "Pad", "ReduceMean"}


HOST_OPS = {
    "Conv": _conv,
    "ConvInteger": _conv_integer,
    "QLinearConv": _qlinear_conv,
    "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul,
    "Gemm": _gemm,
    "MatMul": lambda node, a, b: [np.matmul(a, b)],
    "Relu": lambda node, x: [np.maximum(x, np.zeros((), dtype=x.dtype))],
    "Clip": _clip,
    "Add": lambda node, a, b: [np.add(a, b).astype(np.result_type(a, b))],
    "BatchNormalization": _batch_norm,
    "MaxPool": _pool("max"),
    "AveragePool": _pool("average"),
    "GlobalAveragePool": _global_average_pool,
    "Flatten": _flatten,
    "Reshape": _reshape,
    "Concat": lambda node, *xs: [np.concatenate(xs, axis=node.attr("axis"))],
    "Softmax": None,               # needs the opset: see run_node
    "QuantizeLinear": _quantize,
    "DequantizeLinear": _dequantize,
    "Identity": lambda node, x: [x],
    "Shape": _shape,
    "Gather": lambda node, x, i: [np.take(x, i.astype(np.int64), axis=node.attr("axis", 0))],
    "Unsqueeze": _unsqueeze,
    "Squeeze": _squeeze,
    "Transpose": lambda node, x: [np.transpose(x, node.attr("perm"))],
    "Mul": lambda node, a, b: [np.multiply(a, b).astype(a.dtype)],
    "Sub": lambda node, a, b: [np.subtract(a, b).astype(a.dtype)],
    "Div": _div,
    "Sigmoid": lambda node, x: [(1.0 / (1.0 + np.exp(-x.astype(np.float64)))).astype(x.dtype)],
    "LeakyRelu": lambda node, x: [np.where(x >= 0, x, x * np.asarray(node.attr("alpha", 0.01), x.dtype))],
    "Pad": _pad,
    "ReduceMean": _reduce_mean,
    "Cast": _cast,
    "Dropout": lambda node, x, *_: [x] + [np.ones(x.shape, dtype=bool)] * (len(node.outputs) - 1),
    "ZipMap": _zip_map,            # (ai.onnx.ml; onnx.reference has none)
    # Tilewright's fused operators (graph.passes.fuse), in float
    "TwConv": _tw_fused,
    "TwDense": _tw_fused,
    # ... and quantized (graph.quantize), bit-exact with the accelerator
    "QConv": _qconv,
    "QDense": _qdense,
    "Im2Col": _im2col,
}


HOST_OPS.update(CONTRIB_OPS)     # onnxruntime's quantized operators (com.microsoft)


def run_node(node, values, opset=17):
    """Outputs of ``node`` given its input arrays ``values`` (None for omitted optional inputs)."""
    if reference.is_reference(node):
        return reference.run(node, values)
    if node.op not in HOST_OPS:
        raise ModelError(f"node {node}: operator {node.op} is not supported (not on the accelerator, "
                         f"not on the host)")
    while values and values[-1] is None:
        values = values[:-1]
    try:
        if node.op == "Softmax":
            return _softmax(node, *values, opset)
        if node.op in _OPSET_DEPENDENT:
            return HOST_OPS[node.op](node, *values, opset=opset)
        return HOST_OPS[node.op](node, *values)
    except ModelError:
        raise
    except (ValueError, TypeError, IndexError) as e:
        raise ModelError(f"node {node}: {e}") from None


def host_runs(node):
    """Whether the host can run ``node`` (a kernel of its own, or onnx.reference)."""
    return node.op in HOST_OPS or reference.is_reference(node)


def run_graph(graph, feeds, *, keep=False):
    """Run every node of ``graph`` on the host; returns the outputs (and, with ``keep``, every tensor)."""
    env = dict(graph.constants)
    for info in graph.inputs:
        if info.name not in feeds:
            raise ModelError(f"missing input {info.name!r}")
        env[info.name] = info.check(feeds[info.name])
    for node in graph.nodes:
        outs = run_node(node, [env[i] if i else None for i in node.inputs], graph.opset)
        env.update(zip(node.outputs, outs))
    result = {o.name: env[o.name] for o in graph.outputs}
    return (result, env) if keep else result
