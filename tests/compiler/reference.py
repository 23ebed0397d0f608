"""Independent numpy references for the int8 operators (no tilewright code).

The epilogue is ``clip(((acc [* scale] + bias [+ (residual * rmul) << rshift]) * mul) >> shift, lo, 127)``
evaluated in int32 two's complement: the sum and the product each wrap to
int32, the shift is arithmetic, ``lo`` is 0 with ReLU and -128 otherwise.
Everything is computed in int64 and wrapped explicitly.
"""

import numpy as np

__all__ = ["wrap32", "requantize", "conv2d_ref", "dense_ref"]


def wrap32(x):
    """The low 32 bits of int64 ``x`` read as two's-complement int32 (returned as int64)."""
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) & ((1 << 32) - 1)) - (1 << 31)


def requantize(v, mul, shift, relu):
    """int64 ``v`` (already wrapped to int32) → int8 by the epilogue."""
    v = wrap32(np.asarray(v, dtype=np.int64) * np.int64(mul))
    v = v >> np.int64(shift)                   # arithmetic shift of a signed int64 holding an int32
    return np.clip(v, 0 if relu else -128, 127).astype(np.int8)


def conv2d_ref(data, weight, bias=None, stride=1, padding=0, mul=1, shift=0, relu=False, residual=None,
               residual_mul=1, residual_shift=0, scale=None):
    """int8 NCHW data, int8 OIHW weight, int32 bias (O,), int8 residual (N, O, OH, OW) → int8 output."""
    x = np.asarray(data).astype(np.int64)
    w = np.asarray(weight).astype(np.int64)
    N, C, H, W = x.shape
    O, I, KH, KW = w.shape
    assert I == C
    xp = np.zeros((N, C, H + 2 * padding, W + 2 * padding), dtype=np.int64)
    xp[:, :, padding:padding + H, padding:padding + W] = x
    OH = (H + 2 * padding - KH) // stride + 1
    OW = (W + 2 * padding - KW) // stride + 1
    acc = np.zeros((N, O, OH, OW), dtype=np.int64)
    for kh in range(KH):
        for kw in range(KW):
            # window[n, c, y, x] = xp[n, c, y*stride + kh, x*stride + kw]
            window = xp[:, :, kh:kh + (OH - 1) * stride + 1:stride, kw:kw + (OW - 1) * stride + 1:stride]
            acc += np.einsum("ncyx,oc->noyx", window, w[:, :, kh, kw])
    v = wrap32(acc)
    if scale is not None:                      # per output channel, before everything else
        v = wrap32(v * np.asarray(scale).astype(np.int64)[None, :, None, None])
    if bias is not None:
        v = wrap32(v + np.asarray(bias).astype(np.int64)[None, :, None, None])
    if residual is not None:
        r = wrap32(np.asarray(residual).astype(np.int64) * residual_mul)
        v = wrap32(v + wrap32(r * (1 << residual_shift)))
    return requantize(v, mul, shift, relu)


def dense_ref(data, weight, bias=None, mul=1, shift=0, relu=False, scale=None):
    """int8 data (N, K), int8 weight (M, K), int32 bias (M,) → int8 (N, M)."""
    x = np.asarray(data).astype(np.int64)
    w = np.asarray(weight).astype(np.int64)
    acc = x @ w.T
    v = wrap32(acc)
    if scale is not None:
        v = wrap32(v * np.asarray(scale).astype(np.int64)[None, :])
    if bias is not None:
        v = wrap32(v + np.asarray(bias).astype(np.int64)[None, :])
    return requantize(v, mul, shift, relu)
