"""Schedules and lowering, checked by running the loop IR in the reference interpreter."""

import numpy as np
import pytest

from tilewright.compiler import te
from tilewright.compiler.interp import run_ir
from tilewright.compiler.lower import LowerError, lower
from tilewright.compiler.schedule import ScheduleError, create_schedule


def matmul(M=6, K=8, N=4):
    A = te.placeholder((M, K), "int8", "A")
    B = te.placeholder((N, K), "int8", "B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[j, k].astype("int32"), [k]), "C")
    return A, B, C


def run(func, **arrays):
    return run_ir(func, arrays)


def test_default_schedule_computes_the_expression():
    A, B, C = matmul()
    s = create_schedule(C)
    rng = np.random.default_rng(0)
    a, b = rng.integers(-128, 128, A.shape), rng.integers(-128, 128, B.shape)
    out = run(lower(s), A=a, B=b)["C"]
    np.testing.assert_array_equal(out, a @ b.T)


def test_split_reorder_fuse_and_cache_with_compute_at():
    A, B, C = matmul(8, 12, 6)
    D = te.compute(C.shape, lambda i, j: C[i, j] * 2 + 1, "D")
    s = create_schedule(D)
    s[C].set_scope("acc")
    i, j = s[D].op.axes
    io, ii = s[D].split(i, 4)
    jo, ji = s[D].split(j, nparts=2)
    s[D].reorder(io, jo, ii, ji)
    s[C].compute_at(s[D], jo)
    Al = s.cache_read(A, "inp", [C])
    ci, cj = s[C].op.axes
    (k,) = s[C].op.reduce_axes
    ko, ki = s[C].split(k, 4)
    s[C].reorder(ko, ci, cj, ki)
    s[Al].compute_at(s[C], ko)
    f = s[D].fuse(ii, ji)
    func = lower(s)
    text = str(func)
    assert "alloc A.inp[4, 4] int8 in inp" in text        # the region one ko step reads
    assert "alloc C[4, 3] int32 in acc" in text
    assert f.extent == 12
    rng = np.random.default_rng(1)
    a, b = rng.integers(-128, 128, A.shape), rng.integers(-128, 128, B.shape)
    np.testing.assert_array_equal(run(func, A=a, B=b)["D"], (a @ b.T) * 2 + 1)


def test_cache_write_and_inline_pad():
    X = te.placeholder((5, 5), "int8", "X")
    P = te.pad(X, (1, 1), (1, 1))
    Y = te.compute((5, 5), lambda i, j: P[i, j].astype("int32") + P[i + 1, j + 2].astype("int32") +
                   P[i + 2, j + 1].astype("int32"), "Y")
    s = create_schedule(Y)
    s[P].compute_inline()
    Yc = s.cache_write(Y, "acc")
    i, j = s[Y].op.axes
    s[Yc].compute_at(s[Y], i)
    x = np.random.default_rng(2).integers(-128, 128, (5, 5))
    xp = np.pad(x, 1)
    expected = xp[:5, :5] + xp[1:6, 2:7] + xp[2:7, 1:6]
    np.testing.assert_array_equal(run(lower(s), X=x)["Y"], expected)


@pytest.mark.parametrize("action, message", [
    (lambda s, C: s[C].split(s[C].op.axes[0], 5), r"5 does not divide the extent 6"),
    (lambda s, C: s[C].split(s[C].op.axes[0]), r"give exactly one of factor, nparts"),
    (lambda s, C: s[C].fuse(*s[C].op.reduce_axes, s[C].op.axes[1]), r"not adjacent|cannot fuse"),
    (lambda s, C: s[C].bind(s[C].op.reduce_axes[0], "vthread"), r"is a reduction axis"),
    (lambda s, C: s[C].bind(s[C].op.axes[0], "threadIdx.x"), r"only 'vthread' is supported"),
    (lambda s, C: s[C].pragma(s[C].op.axes[0], "unroll"), r"unknown pragma 'unroll'"),
    (lambda s, C: s[C].set_scope("shared"), r"unknown scope 'shared'"),
    (lambda s, C: s[C].compute_inline(), r"cannot inline reduction C"),
])
def test_schedule_errors(action, message):
    *_, C = matmul()
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match=message):
        action(s, C)


def test_on_chip_root_stage_is_rejected():
    A, B, C = matmul()
    D = te.compute(C.shape, lambda i, j: C[i, j] + 1, "D")
    s = create_schedule(D)
    s[C].set_scope("acc")
    with pytest.raises(LowerError, match="C is in scope 'acc' but not computed at any loop"):
        lower(s)


def test_te_errors():
    with pytest.raises(te.TEError, match="unsupported dtype 'float32'"):
        te.placeholder((2,), "float32", "F")
    A = te.placeholder((2, 2), "int8", "A")
    with pytest.raises(te.TEError, match="A has 2 dimensions, indexed with 1"):
        A[0]
    k = te.reduce_axis(2, "k")
    with pytest.raises(te.TEError, match="a sum\\(\\) must be the whole body"):
        te.compute((2,), lambda i: te.sum(A[i, k], [k]) + 1, "bad")
