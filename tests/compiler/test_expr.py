"""Expressions: evaluation, affine forms, simplification, intervals, printing."""

import pytest

from tilewright.compiler.expr import (Var, as_expr, evaluate, interval, linear, max_, min_, select,
                                      simplify, substitute)


def test_evaluate_and_substitute():
    x, y = Var("x"), Var("y")
    e = (x * 3 + y) // 2 - max_(x, y) % 4
    assert evaluate(e, {x: 5, y: 4}) == (15 + 4) // 2 - 5 % 4
    assert evaluate(substitute(e, {y: x + 1}), {x: 2}) == (6 + 3) // 2 - 3 % 4
    assert evaluate(select(x < y, x, y), {x: 1, y: 2}) == 1
    assert evaluate(as_expr(-7) >> 1, {}) == -4          # arithmetic shift rounds toward -inf
    assert evaluate(as_expr(3) >> -2, {}) == 12           # a negative amount shifts left
    with pytest.raises(KeyError, match="variable y has no value"):
        evaluate(x + y, {x: 1})
    with pytest.raises(TypeError, match="no truth value"):
        bool(x < 1)


def test_linear_forms():
    x, y = Var("x"), Var("y")
    assert linear(x * 4 + (y - x) * 2 + 3) == ({x: 2, y: 2}, 3)
    assert linear((x << 2) - 1) == ({x: 4}, -1)
    assert linear(x * y) is None
    assert linear(x // 2) is None
    assert linear(x - x) == ({}, 0)


def test_simplify_is_canonical_and_readable():
    x, y = Var("x"), Var("y")
    assert str(simplify(y + x * 2 + 1 - 1 + x)) == "y + x * 3" or str(simplify(y + x * 2 + 1 - 1 + x)) == "x * 3 + y"
    assert str(simplify(min_(as_expr(3), 5) + x)) == "x + 3"
    assert str(simplify(x - 1)) == "x - 1"
    assert str(simplify(select(as_expr(1) < 2, x, y))) == "x"


def test_interval():
    x, y = Var("x"), Var("y")
    r = {x: (0, 3), y: (-2, 2)}
    assert interval(x * 2 - y, r) == (-2, 8)
    assert interval(x // 2, r) == (0, 1)
    assert interval(max_(x, y), r) == (0, 3)
    assert interval(x % 2, r) == (0, 1)
    assert interval(x * y + Var("z"), r) is None
