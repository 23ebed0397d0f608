"""onnxruntime's quantized contrib operators (domain ``com.microsoft``) that its quantizer emits, on the host.

The formulas are onnxruntime's reference ones (its MLAS kernels may round a
value differently by one unit where a float product lands on a half):
dequantize each input (``scale · (q − zero_point)``), compute in float32,
requantize to the output's scale and zero point with round-half-to-even and
saturation to the output type. Elementwise ones broadcast as numpy does.
"""

import numpy as np

from .ir import ModelError

__all__ = ["CONTRIB_OPS", "CONTRIB_DOMAIN"]

CONTRIB_DOMAIN = "com.microsoft"


def _dequantize(q, scale, zero_point):
    zp = 0 if zero_point is None else np.asarray(zero_point).astype(np.int32)
    return np.float32(scale) * (np.asarray(q).astype(np.int32) - zp).astype(np.float32)


def _quantize(x, scale, zero_point, like):
    dtype = np.asarray(zero_point).dtype if zero_point is not None else np.dtype(like)
    info = np.iinfo(dtype)
    zp = 0 if zero_point is None else int(np.asarray(zero_point))
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + zp
    return np.clip(q, info.min, info.max).astype(dtype)


def _binary(fn):
    def run(node, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        value = fn(_dequantize(a, a_scale, a_zp), _dequantize(b, b_scale, b_zp))
        return [_quantize(value, c_scale, c_zp, a.dtype)]
    return run


def _table(fn):
    """A unary op (x, x_scale, x_zp, y_scale, y_zp) as onnxruntime computes it: one value per input code."""
    def run(node, x, x_scale, x_zp, y_scale, y_zp=None):
        return [_quantize(fn(node, _dequantize(x, x_scale, x_zp)), y_scale, y_zp, x.dtype)]
    return run


def _global_average_pool(node, x, x_scale, x_zp, y_scale, y_zp=None):
    axes = tuple(range(1, x.ndim - 1)) if node.attr("channels_last", 0) else tuple(range(2, x.ndim))
    mean = _dequantize(x, x_scale, x_zp).mean(axis=axes, keepdims=True, dtype=np.float64)
    return [_quantize(mean.astype(np.float32), y_scale, y_zp, x.dtype)]


def _average_pool(node, x, x_scale, x_zp, y_scale, y_zp=None):
    from .host import HOST_OPS
    values = _dequantize(x, x_scale, x_zp)
    channels_last = node.attr("channels_last", 0)
    if channels_last:
        values = np.moveaxis(values, -1, 1)
    (pooled,) = HOST_OPS["AveragePool"](node, values)
    if channels_last:
        pooled = np.moveaxis(pooled, 1, -1)
    return [_quantize(pooled, y_scale, y_zp, x.dtype)]


def _concat(node, y_scale, y_zp, *inputs):
    if len(inputs) % 3:
        raise ModelError(f"node {node}: QLinearConcat takes (tensor, scale, zero point) triples after the "
                         f"output's scale and zero point")
    parts = [_quantize(_dequantize(x, s, z), y_scale, y_zp, x.dtype)
             for x, s, z in zip(inputs[0::3], inputs[1::3], inputs[2::3])]
    return [np.concatenate(parts, axis=node.attr("axis"))]


def _qgemm(node, a, a_scale, a_zp, b, b_scale, b_zp, c=None, y_scale=None, y_zp=None):
    a = a.T if node.attr("transA", 0) else a
    b = b.T if node.attr("transB", 0) else b
    za = 0 if a_zp is None else np.asarray(a_zp).astype(np.int64)
    zb = 0 if b_zp is None else np.asarray(b_zp).astype(np.int64)
    acc = (a.astype(np.int64) - za) @ (b.astype(np.int64) - zb)
    if c is not None:
        acc = acc + np.asarray(c).astype(np.int64)
    value = (np.float32(node.attr("alpha", 1.0)) * np.asarray(a_scale, np.float32)
             * np.asarray(b_scale, np.float32) * acc.astype(np.float32))
    if y_scale is None:                 # (no output quantization: float output)
        return [value.astype(np.float32)]
    return [_quantize(value, y_scale, y_zp, a.dtype)]


CONTRIB_OPS = {
    "QLinearAdd": _binary(np.add),
    "QLinearMul": _binary(np.multiply),
    "QLinearGlobalAveragePool": _global_average_pool,
    "QLinearAveragePool": _average_pool,
    "QLinearConcat": _concat,
    "QLinearLeakyRelu": _table(lambda node, v: np.where(v >= 0, v, v * np.float32(node.attr("alpha", 0.01)))),
    "QLinearSigmoid": _table(lambda node, v: (1 / (1 + np.exp(-v.astype(np.float64)))).astype(np.float32)),
    "QGemm": _qgemm,
}
