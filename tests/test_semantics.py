"""``semantics.requantize`` against the definition in Python integers (``docs/isa.md``): its narrow path
(acc_width-bit unsigned arithmetic) and its int64 path must give the definition's outputs for every width,
shift and operand, the extremes included."""

import numpy as np
import pytest

from tilewright.semantics import out_range, requantize

from tests.reference import to_signed


def by_definition(acc, mul, shift, relu, *, acc_width, out_width, bias, scale):
    """clip(((acc + bias) · mul) >> shift), or per channel clip((acc · scale + bias) >> shift): every sum and
    product wrapped to acc_width bits, one value at a time."""
    lo, hi = out_range(out_width, relu)
    out = np.empty(acc.shape, dtype=np.int64)
    for index, a in np.ndenumerate(acc):
        lane = index[-1]
        if scale is not None and mul == 0:
            total = to_signed(to_signed(int(a) * int(scale[lane]), acc_width) + int(bias[lane]), acc_width)
        else:
            total = to_signed(to_signed(int(a) + int(bias[lane]), acc_width) * mul, acc_width)
        out[index] = min(max(total >> shift, lo), hi)
    return out


@pytest.mark.parametrize("acc_width, out_width", [(8, 8), (16, 8), (16, 16), (32, 8), (32, 16), (64, 8)])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_requantize_is_the_definition(acc_width, out_width, per_channel):
    rng = np.random.default_rng(acc_width * 100 + out_width + per_channel)
    lo, hi = -(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1
    edges = np.array([lo, lo + 1, -1, 0, 1, hi - 1, hi])
    for trial in range(40):
        acc = rng.integers(lo, hi, (3, 2, 8), endpoint=True)
        acc.flat[:edges.size] = edges
        bias, scale = (rng.choice(np.concatenate([edges, rng.integers(lo, hi, 8, endpoint=True)]), 8)
                       for _ in range(2))
        mul = 0 if per_channel else int(rng.choice([1, -1, hi, lo, int(rng.integers(-(1 << 15), 1 << 15))]))
        shift = trial % (acc_width + 3)         # past acc_width too (the int64 path)
        relu = bool(trial % 2)
        kw = dict(acc_width=acc_width, out_width=out_width, bias=bias, scale=scale if per_channel else None)
        got = requantize(acc.astype(f"int{acc_width}"), mul, shift, relu, **kw)
        assert got.dtype == np.dtype(f"int{out_width}")
        assert np.array_equal(got, by_definition(acc, mul, shift, relu, **kw)), (trial, mul, shift)
