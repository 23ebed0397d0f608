"""Post-training quantization: requantizer choice, the integer host ops, and accuracy against the float model."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tilewright.compiler.graph import ModelError, Node, run_graph, run_node
from tilewright.compiler.graph.quantize import (MUL_MAX, calibrate, choose_requant, layer_input, layer_report, quantize,
                                                sqnr_db)
from tilewright.runtime.reference import conv2d_reference, dense_reference

from ..models import small_resnet_graph


@settings(max_examples=300, deadline=None)
@given(st.floats(1e-6, 50.0), st.floats(1.0, 2.0 ** 30))
def test_choose_requant_is_the_most_precise_safe_multiplier(m, acc_peak):
    try:
        mul, shift = choose_requant(m, acc_peak)
    except ModelError:
        # only when even the coarsest representation overflows or rounds to zero
        assert all(round(m * 2 ** s) < 1 or round(m * 2 ** s) * acc_peak >= 2 ** 31 or round(m * 2 ** s) > MUL_MAX
                   for s in range(32))
        return
    assert 1 <= mul <= MUL_MAX and mul * acc_peak < 2 ** 31
    # one more bit of shift would break a limit
    nxt = round(m * 2 ** (shift + 1))
    assert nxt > MUL_MAX or nxt * acc_peak >= 2 ** 31 or shift == 31
    assert abs(mul / 2 ** shift - m) <= 2 ** -(shift + 1) + 1e-12


def test_choose_requant_rejects_nonpositive_scales():
    with pytest.raises(ModelError, match="must be positive"):
        choose_requant(0.0, 10)


@pytest.mark.parametrize("relu", [False, True])
@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qconv_host_op_is_the_accelerator_arithmetic(relu, residual, per_channel):
    rng = np.random.default_rng(residual + 2 * relu)
    x = rng.integers(-128, 128, (2, 5, 7, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (4, 5, 3, 3), dtype=np.int8)
    b = rng.integers(-2 ** 20, 2 ** 20, 4).astype(np.int32)
    r = rng.integers(-128, 128, (2, 4, 4, 3), dtype=np.int8) if residual else None
    scale = rng.integers(0, 5000, 4).astype(np.int32) if per_channel else None
    attrs = dict(stride=2, padding=1, kernel=[3, 3], mul=1234, shift=17, relu=relu, residual_mul=7, residual_shift=3)
    node = Node("QConv", ["x", "w", "b", "r" if residual else "", "s" if per_channel else ""], ["y"], attrs, "c")
    (got,) = run_node(node, [x, w, b, r, scale])
    want = conv2d_reference(x, w, b, stride=2, padding=1, mul=1234, shift=17, relu=relu, residual=r,
                            residual_mul=7, residual_shift=3, scale=scale)
    np.testing.assert_array_equal(got, want)


def test_qconv_host_op_adds_a_per_channel_residual_before_the_scale():
    """With a residual_scale input the residual times it joins the accumulator before the per-channel scale (all
    wrapping modulo 2**32)."""
    rng = np.random.default_rng(8)
    x, w = rng.integers(-128, 128, (1, 5, 6, 6), dtype=np.int8), rng.integers(-128, 128, (4, 5, 3, 3), dtype=np.int8)
    b, r = rng.integers(-2 ** 30, 2 ** 30, 4).astype(np.int32), rng.integers(-128, 128, (1, 4, 6, 6), dtype=np.int8)
    scale = rng.integers(1, 2 ** 20, 4).astype(np.int32)
    r_scale = np.array([128, 5000, 2 ** 31 - 1, 300], np.int32)
    node = Node("QConv", ["x", "w", "b", "r", "s", "q"], ["y"], dict(stride=1, padding=1, kernel=[3, 3], mul=1,
                                                                       shift=24, relu=False), "c")
    (got,) = run_node(node, [x, w, b, r, scale, r_scale])
    want = conv2d_reference(x, w, b, padding=1, shift=24, residual=r, scale=scale, residual_scale=r_scale)
    np.testing.assert_array_equal(got, want)
    assert not np.array_equal(got, conv2d_reference(x, w, b, padding=1, shift=24, residual=r, scale=scale,
                                                    residual_mul=300))


def test_qdense_host_op_is_the_accelerator_arithmetic():
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (3, 40), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 40), dtype=np.int8)
    b = rng.integers(-2 ** 24, 2 ** 24, 9).astype(np.int32)
    scale = rng.integers(0, 3000, 9).astype(np.int32)
    node = Node("QDense", ["x", "w", "b"], ["y"], dict(mul=20000, shift=20, relu=False), "d")
    np.testing.assert_array_equal(run_node(node, [x, w, b])[0], dense_reference(x, w, b, mul=20000, shift=20))
    node = Node("QDense", ["x", "w", "b", "s"], ["y"], dict(mul=1, shift=20, relu=True), "d")
    np.testing.assert_array_equal(run_node(node, [x, w, b, scale])[0],
                                  dense_reference(x, w, b, shift=20, relu=True, scale=scale))


@pytest.mark.parametrize("per_channel", [False, True])
def test_quantized_small_resnet_tracks_the_float_model(per_channel):
    graph = small_resnet_graph()
    rng = np.random.default_rng(5)
    calib = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(4)]
    q, layers = quantize(graph, calibrate(graph, calib), with_layers=True, per_channel=per_channel)
    assert [n.op for n in q.nodes].count("QConv") == 6 and [n.op for n in q.nodes].count("QDense") == 1
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)        # not a calibration sample
    name = graph.outputs[0].name
    ref, got = run_graph(graph, {"input": x})[name], run_graph(q, {"input": x})[name]
    assert got.dtype == np.float32 and got.shape == ref.shape
    assert sqnr_db(ref, got) > 20
    rows = layer_report(graph, q, layers, {"input": x})
    assert len(rows) == 7 and all(db > 15 for _, db in rows)
    # per-tensor, and per channel with the residual before the scale: the residual joins at the accumulator's
    # scale, so its integer factor is coarser
    assert all(layer.multiplier_error < (1e-3 if per_channel and not layer.residual_scaled else 5e-3)
               for layer in layers)
    assert all(layer.per_channel == per_channel for layer in layers)
    scales = [n for n in q.nodes if n.op in ("QConv", "QDense") and layer_input(n, "scale")]
    assert len(scales) == (7 if per_channel else 0)
    residuals = [n for n in q.nodes if n.op == "QConv" and layer_input(n, "residual")]
    scaled = [bool(layer_input(n, "residual_scale")) for n in residuals]     # (where each step is worth enough)
    assert residuals and any(scaled) == per_channel and sum(layer.residual_scaled for layer in layers) == sum(scaled)


def test_percentile_calibration_clips_below_the_maximum():
    graph = small_resnet_graph()
    rng = np.random.default_rng(6)
    calib = [rng.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(2)]
    peaks, pct = calibrate(graph, calib, "max"), calibrate(graph, calib, "percentile", percentile=99.0)
    assert set(pct) <= set(peaks) and all(pct[k] <= peaks[k] + 1e-6 for k in pct)
    assert any(pct[k] < 0.9 * peaks[k] for k in pct)
    with pytest.raises(ModelError, match="calibration method"):
        calibrate(graph, calib, "mean")
    with pytest.raises(ModelError, match=r"percentile 150: must be in \(0, 100\]"):
        calibrate(graph, calib, "percentile", percentile=150)
    with pytest.raises(ModelError, match="at least one sample"):
        calibrate(graph, [])


def test_sqnr():
    assert sqnr_db([1.0, 2.0], [1.0, 2.0]) == math.inf
    assert sqnr_db([1.0, 0.0], [1.1, 0.0]) == pytest.approx(20.0)
