"""Integer semantics of the accelerator, written once (see ``docs/isa.md``).

Values are two's-complement integers held in numpy ``int64`` arrays (or
Python ints). The functional simulator computes with these functions; the
RTL implements the same definitions in gates and is checked against the
simulator bit for bit.

* Accumulation wraps around in ``acc_width`` bits.
* ALU: ``MIN``/``MAX`` signed; ``ADD`` wraps; ``MUL`` keeps the low
  ``acc_width`` bits of the product; ``SHR`` shifts arithmetically right
  (rounding toward minus infinity) by amounts ``0 … acc_width-1`` (larger
  amounts act as ``acc_width-1``) and a negative amount ``-n`` shifts left by
  ``n`` (``n ≥ acc_width`` gives zero).
* Narrowing to the output width truncates (keeps the low bits); clipping is
  done with ``MIN``/``MAX`` before it.
* A requantizing STORE writes ``clip(((acc + bias) · mul) >> shift, lo,
  hi)``, or per channel ``clip((acc · scale + bias) >> shift, lo, hi)``:
  sum and product wrapped to ``acc_width`` bits, an arithmetic shift, ``hi``
  the largest output value and ``lo`` 0 (ReLU) or the smallest
  (:func:`requantize`).
"""

import numpy as np

from .isa import AluOp

__all__ = ["wrap", "narrow", "alu", "out_range", "requantize"]


def wrap(x, bits):
    """``x`` reduced to a signed ``bits``-bit integer (two's complement)."""
    half = 1 << (bits - 1)
    if isinstance(x, int):
        return ((x + half) & ((1 << bits) - 1)) - half
    x = np.asarray(x, dtype=np.int64)
    if bits == 64:
        return x
    return ((x + half) & ((1 << bits) - 1)) - half


#: Narrowing is truncation: the same operation as wrap-around.
narrow = wrap


def _shift(a, amount, bits):
    a = np.asarray(a, dtype=np.int64)
    amount = np.asarray(amount, dtype=np.int64)
    right = np.minimum(np.maximum(amount, 0), bits - 1)
    left = np.minimum(np.maximum(-amount, 0), bits)
    # Shift left on the unsigned view: signed overflow is not defined in C.
    shifted_left = (a.astype(np.uint64) << left.astype(np.uint64)).astype(np.int64)
    return np.where(amount >= 0, a >> right, wrap(shifted_left, bits))


def alu(op, a, b, bits):
    """``op(a, b)`` on ``bits``-bit accumulators, elementwise, as ``int64``."""
    a = np.asarray(a, dtype=np.int64)
    b = np.asarray(b, dtype=np.int64)
    op = AluOp(op)
    if op == AluOp.MIN:
        return np.minimum(a, b)
    if op == AluOp.MAX:
        return np.maximum(a, b)
    if op == AluOp.ADD:
        return wrap(a + b, bits)
    if op == AluOp.MUL:
        # |a·b| < 2^62 for bits ≤ 32, so int64 holds the exact product.
        return wrap(a * b, bits)
    return _shift(a, b, bits)


def out_range(out_width, relu=False):
    """``(lo, hi)``: the range an output is clipped to before narrowing.

    ``hi`` is the largest ``out_width``-bit value; ``lo`` is 0 with ReLU, else
    the smallest. The requantizing STORE, the compiler's epilogue and every
    reference read it here.
    """
    hi = (1 << (out_width - 1)) - 1
    return (0 if relu else -hi - 1), hi


def requantize(acc, mul, shift, relu, *, acc_width, out_width, bias=0, scale=None):
    """A requantizing STORE's output values (``out_width`` dtype) from accumulators ``acc``.

    ``clip(((acc + bias) · mul) >> shift, *out_range(out_width, relu))``, the
    sum and the product each wrapped to ``acc_width`` as the ALU's ADD and MUL
    wrap. Given a per-lane ``scale`` (the scale register of a config with
    ``per_channel_store``) and ``mul = 0``, it is ``clip((acc · scale + bias) >>
    shift)`` instead: the per-channel epilogue, product and sum wrapped.
    """
    per_channel = scale is not None and mul == 0
    if acc_width in (8, 16, 32) and 0 <= shift < acc_width:
        # The same sums in acc_width-bit unsigned integers, whose arithmetic wraps as the definition's does,
        # in a few passes over narrow arrays.
        signed = np.dtype(f"int{acc_width}")

        def unsigned(v):        # v's low acc_width bits
            v = np.asarray(v)
            return (v if v.dtype == signed else v.astype(np.int64).astype(signed)).view(f"uint{acc_width}")

        if per_channel:
            total = unsigned(acc) * unsigned(scale)
            total += unsigned(bias)
        else:
            total = unsigned(acc) + unsigned(bias)
            total *= unsigned(mul)
        total = total.view(signed)
        total >>= shift
    else:
        acc, bias = np.asarray(acc, dtype=np.int64), np.asarray(bias, dtype=np.int64)
        if per_channel:
            total = wrap(wrap(acc * np.asarray(scale, dtype=np.int64), acc_width) + bias, acc_width)
        else:
            total = wrap(wrap(acc + bias, acc_width) * mul, acc_width)
        total = total >> shift
    return np.clip(total, *out_range(out_width, relu)).astype(f"int{out_width}")
