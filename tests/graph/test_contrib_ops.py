"""onnxruntime's quantized contrib operators (com.microsoft) on the host, against onnxruntime itself (whole
models quantized by onnxruntime: tests/runtime/test_prequantized_models.py)."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tilewright.compiler.graph import ModelError, load_onnx, run_graph

ort = pytest.importorskip("onnxruntime")
RNG = np.random.default_rng(0)
MS = "com.microsoft"


def _session(model):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL     # the model's own semantics
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _one_node(op, inputs, constants, attrs=None, outputs=("y",)):
    """A com.microsoft node over graph ``inputs`` (arrays) and ``constants`` (initializers), in their order."""
    names = list(inputs) + list(constants)
    order = attrs.pop("order") if attrs and "order" in attrs else names
    node = helper.make_node(op, order, list(outputs), domain=MS, **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in constants.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)])
    model.ir_version = 8
    return model


def _typed(model, expected):
    """``model`` with its output typed like ``expected`` (ONNX's checker wants graph outputs typed)."""
    out = model.graph.output[0]
    out.CopyFrom(helper.make_tensor_value_info(out.name, helper.np_dtype_to_tensor_dtype(expected.dtype),
                                               expected.shape))
    return model


def _q(shape, dtype=np.uint8):
    info = np.iinfo(dtype)
    return RNG.integers(info.min, info.max + 1, shape).astype(dtype)


def _scale(v):
    return np.array(v, np.float32)


def _zp(v, dtype=np.uint8):
    return np.array(v, dtype)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("op,build", [
    ("QLinearAdd", lambda d: ({"a": _q((2, 3, 4, 4), d), "b": _q((2, 3, 4, 4), d)},
                              {"as": _scale(0.05), "az": _zp(3, d), "bs": _scale(0.02), "bz": _zp(-5 if d is np.int8 else 200, d),
                               "cs": _scale(0.07), "cz": _zp(7, d)},
                              {"order": ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]})),
    ("QLinearMul", lambda d: ({"a": _q((3, 8), d), "b": _q((8,), d)},
                              {"as": _scale(0.03), "az": _zp(10, d), "bs": _scale(0.04), "bz": _zp(2, d),
                               "cs": _scale(0.5), "cz": _zp(1, d)},
                              {"order": ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]})),
    ("QLinearGlobalAveragePool", lambda d: ({"x": _q((2, 4, 5, 5), d)},
                                            {"xs": _scale(0.1), "xz": _zp(9, d), "ys": _scale(0.05), "yz": _zp(4, d)},
                                            {})),
    ("QLinearGlobalAveragePool", lambda d: ({"x": _q((2, 5, 3), d)},      # (channels last, one spatial axis)
                                            {"xs": _scale(0.1), "xz": _zp(9, d), "ys": _scale(0.05), "yz": _zp(4, d)},
                                            {"channels_last": 1})),
    ("QLinearAveragePool", lambda d: ({"x": _q((1, 3, 6, 6), d)},
                                      {"xs": _scale(0.1), "xz": _zp(9, d), "ys": _scale(0.08), "yz": _zp(4, d)},
                                      {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]})),
    ("QLinearLeakyRelu", lambda d: ({"x": _q((4, 16), d)},
                                    {"xs": _scale(0.06), "xz": _zp(20, d), "ys": _scale(0.04), "yz": _zp(30, d)},
                                    {"alpha": 0.1})),
    ("QLinearSigmoid", lambda d: ({"x": _q((4, 16), d)},
                                  {"xs": _scale(0.06), "xz": _zp(20, d), "ys": _scale(1 / 256), "yz": _zp(0, d)},
                                  {})),
    ("QLinearConcat", lambda d: ({"a": _q((1, 2, 3), d), "b": _q((1, 4, 3), d)},
                                 {"ys": _scale(0.05), "yz": _zp(5, d), "as": _scale(0.05), "az": _zp(5, d),
                                  "bs": _scale(0.11), "bz": _zp(17, d)},
                                 {"axis": 1, "order": ["ys", "yz", "a", "as", "az", "b", "bs", "bz"]})),
])
def test_contrib_operators_compute_what_onnxruntime_does(op, build, dtype):
    """Equal to onnxruntime's output; where onnxruntime sums in float32 in its own order (average pooling)
    a value on a rounding half may land one code away, so: never more than one, and rarely."""
    inputs, constants, attrs = build(dtype)
    model = _one_node(op, inputs, constants, attrs)
    expected = _session(model).run(None, inputs)[0]
    got = run_graph(load_onnx(_typed(model, expected).SerializeToString()), inputs)["y"]
    assert got.dtype == expected.dtype and got.shape == expected.shape
    difference = np.abs(got.astype(np.int32) - expected.astype(np.int32))
    assert difference.max() <= (1 if op == "QLinearAveragePool" else 0) and (difference == 0).mean() >= 0.95


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_computes_what_onnxruntime_does(quantized_output):
    # 7-bit weights: onnxruntime's uint8 x int8 kernels on x86 without VNNI (AVX2's vpmaddubsw) add pairs of
    # products in saturating 16 bits, so full-range operands make the oracle itself inexact on such machines
    # (onnxruntime's own advice there: quantize with reduce_range)
    a, b = _q((3, 16), np.uint8), RNG.integers(-64, 64, (8, 16)).astype(np.int8)
    constants = {"as": _scale(0.02), "az": _zp(128), "b": b, "bs": _scale(0.01), "bz": _zp(0, np.int8),
                 "c": RNG.integers(-500, 500, 8).astype(np.int32)}
    order = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized_output:
        constants.update(ys=_scale(0.3), yz=_zp(100))
        order += ["ys", "yz"]
    model = _one_node("QGemm", {"a": a}, constants, {"transB": 1, "alpha": 1.0, "order": order})
    expected = _session(model).run(None, {"a": a})[0]
    got = run_graph(load_onnx(_typed(model, expected).SerializeToString()), {"a": a})["y"]
    if quantized_output:
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_an_unknown_contrib_operator_is_one_line():
    model = _typed(_one_node("QLinearFrobnicate", {"x": _q((2,))}, {}), _q((2,)))
    with pytest.raises(ModelError) as e:
        load_onnx(model.SerializeToString())
    assert "com.microsoft operator QLinearFrobnicate is not supported" in str(e.value) and "\n" not in str(e.value)
