"""What real models bring: float16/float64 types, bad calibration data, non-finite inputs, initializers that
ONNX lets an input override, outputs that depend on no input."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tilewright.compiler.graph import ModelError
from tilewright.runtime.model import compile_model

RNG = np.random.default_rng(0)


def _conv_model(dtype=np.float32, elem=TensorProto.FLOAT):
    w = numpy_helper.from_array((RNG.standard_normal((8, 4, 3, 3)) * 0.3).astype(dtype), "w")
    b = numpy_helper.from_array((RNG.standard_normal(8) * 0.1).astype(dtype), "b")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
                               helper.make_node("Relu", ["c"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", elem, [1, 4, 6, 6])],
                              [helper.make_tensor_value_info("y", elem, [1, 8, 6, 6])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _sqnr(got, want):
    want = want.astype(np.float64)
    return 10 * np.log10(np.sum(want ** 2) / np.sum((got.astype(np.float64) - want) ** 2))


@pytest.mark.parametrize("dtype,elem", [(np.float16, TensorProto.FLOAT16), (np.float64, TensorProto.DOUBLE)])
def test_float16_and_float64_models_compute_in_float32_and_keep_their_output_type(dtype, elem):
    model = _conv_model(dtype, elem)
    samples = RNG.standard_normal((16, 4, 6, 6)).astype(dtype)
    with np.errstate(all="raise"):          # (no float16 overflow on the way: constants are float32)
        compiled = compile_model(model.SerializeToString(), "tiny", calibration=samples)
        got = compiled.run({"x": samples[:1]})["y"]
    assert [s.node.op for s in compiled.steps if s.where == "accelerator"] == ["QConv"] and got.dtype == dtype
    assert _sqnr(got, ReferenceEvaluator(model).run(None, {"x": samples[:1]})[0]) > 30


@pytest.mark.parametrize("fill,message", [(np.nan, "NaN or infinity"), (np.inf, "NaN or infinity"),
                                          (0.0, "all zero")])
def test_non_finite_or_all_zero_calibration_data_is_refused(fill, message):
    with pytest.raises(ModelError, match=message):
        compile_model(_conv_model().SerializeToString(), "tiny", calibration=np.full((4, 4, 6, 6), fill, np.float32))


def test_non_finite_inputs_to_a_quantized_model_are_refused():
    compiled = compile_model(_conv_model().SerializeToString(), "tiny",
                             calibration=RNG.standard_normal((8, 4, 6, 6)).astype(np.float32))
    x = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    with pytest.raises(ModelError, match="input 'x' holds NaN or infinity"):
        compiled.run(x)


def test_an_initializer_an_input_may_override_is_compiled_in_and_overriding_it_is_one_line():
    graph = helper.make_graph([helper.make_node("Add", ["x", "k"], ["y"]), helper.make_node("Mul", ["k", "k"], ["z"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
                                    helper.make_tensor_value_info("k", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
                               helper.make_tensor_value_info("z", TensorProto.FLOAT, [2])],
                              [numpy_helper.from_array(np.array([1, 2], np.float32), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    compiled = compile_model(model.SerializeToString(), "tiny")
    out = compiled.run({"x": np.array([10, 20], np.float32)})
    assert list(out["y"]) == [11, 22] and list(out["z"]) == [1, 4]      # (z depends on no input)
    with pytest.raises(ModelError, match="k: an initializer of the model"):
        compiled.run({"x": np.zeros(2, np.float32), "k": np.zeros(2, np.float32)})


def test_a_mobilenet_v2_style_network_runs_end_to_end():
    """Inverted residuals with ReLU6 as Clip(0, 6): every convolution (the five depthwise ones too) and the
    classifier on the accelerator; int8 within 20 dB of float; the RTL equal to fsim for one image."""
    from tilewright.compiler.graph import load_onnx, run_graph
    from tilewright.compiler.graph.zoo import mobilenet_v2
    model = mobilenet_v2()
    compiled = compile_model(model.SerializeToString(), "tiny",
                             calibration=RNG.standard_normal((32, 3, 32, 32)).astype(np.float32))
    convs = [n for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    depthwise = [n for n in convs if any(a.name == "group" and a.i > 1 for a in n.attribute)]
    layers = [s for s in compiled.steps if s.node.op in ("QConv", "QDense", "TwConv")]
    assert len(depthwise) == 5 and [s.where for s in layers] == ["accelerator"] * len(convs)
    assert sum(s.node.attr("group", 1) > 1 for s in layers) == 5
    x = RNG.standard_normal((1, 3, 32, 32)).astype(np.float32)
    (name,) = [o.name for o in model.graph.output]
    fsim = compiled.run({"input": x})[name]
    assert _sqnr(fsim, run_graph(load_onnx(model.SerializeToString()), {"input": x})[name]) >= 20
    np.testing.assert_array_equal(compiled.run({"input": x}, backend="rtl")[name], fsim)
