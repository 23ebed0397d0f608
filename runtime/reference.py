"""Plain numpy references of the operators, for self-checks in benchmarks and demos.

``clip(((acc [· scale] + bias [+ (residual · residual_mul) << residual_shift]) · mul) >> shift, lo, 127)``
(or, with a per-channel ``residual_scale``, ``clip(((acc + residual · residual_scale) · scale + bias) · mul >>
shift, lo, 127)``) with int32 wrap-around after every sum and product, an arithmetic shift, and
``lo`` = 0 with ReLU else −128: the accelerator's int8/int32 semantics from
:mod:`tilewright.semantics`, computed directly in numpy. (The test suite has
its own, separate reference in ``tests/compiler/reference.py``.)
"""

import functools

import numpy as np

from tilewright import semantics

__all__ = ["conv2d_reference", "dense_reference", "requantize"]

ACC_WIDTH, OUT_WIDTH = 32, 8
_wrap32 = functools.partial(semantics.wrap, bits=ACC_WIDTH)


def requantize(acc, mul, shift, relu):
    """The int8 outputs of int32 accumulators ``acc`` (see :func:`tilewright.semantics.requantize`)."""
    return semantics.requantize(acc, mul, shift, relu, acc_width=ACC_WIDTH, out_width=OUT_WIDTH)


def conv2d_reference(data, weight, bias=None, *, stride=1, padding=0, mul=1, shift=0, relu=False, residual=None,
                     residual_mul=1, residual_shift=0, scale=None, groups=1, residual_scale=None):
    """``groups``: a grouped conv (weights O×(C/groups)×KH×KW), each output channel's group of inputs
    ``o // (O/groups)``. ``residual_scale`` (int32, one per output channel): the residual times it joins the
    accumulator before ``scale`` (``residual_mul`` and ``residual_shift`` then unused)."""
    x = np.pad(data.astype(np.int64), ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    O, _, KH, KW = weight.shape
    C = data.shape[1]
    OH = (x.shape[2] - KH) // stride + 1
    OW = (x.shape[3] - KW) // stride + 1
    acc = np.zeros((data.shape[0], O, OH, OW), dtype=np.int64)
    for kh in range(KH):
        for kw in range(KW):
            patch = x[:, :, kh:kh + stride * (OH - 1) + 1:stride, kw:kw + stride * (OW - 1) + 1:stride]
            for g in range(groups):
                cin, cout = slice(g * (C // groups), (g + 1) * (C // groups)), slice(g * (O // groups),
                                                                                     (g + 1) * (O // groups))
                acc[:, cout] += np.einsum("nchw,oc->nohw", patch[:, cin], weight[cout, :, kh, kw].astype(np.int64),
                                          optimize=True)
    if residual_scale is not None:
        acc = acc + residual.astype(np.int64) * residual_scale.astype(np.int64)[None, :, None, None]
        residual = None
    if scale is not None:
        acc = _wrap32(_wrap32(acc) * scale.astype(np.int64)[None, :, None, None])
    if bias is not None:
        acc += bias.astype(np.int64)[None, :, None, None]
    if residual is not None:
        acc += _wrap32(_wrap32(residual.astype(np.int64) * residual_mul) << residual_shift)
    return requantize(acc, mul, shift, relu)


def dense_reference(data, weight, bias=None, *, mul=1, shift=0, relu=False, scale=None):
    acc = data.astype(np.int64) @ weight.astype(np.int64).T
    if scale is not None:
        acc = _wrap32(_wrap32(acc) * scale.astype(np.int64)[None, :])
    if bias is not None:
        acc += bias.astype(np.int64)[None, :]
    return requantize(acc, mul, shift, relu)
