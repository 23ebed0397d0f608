"""Models other tools quantized: onnxruntime's quantize_static in both formats, and ONNX's own quantized
operators, run on the accelerator with the model's scales, zero points and int8 weights."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tests.models import small_resnet
from tilewright.compiler.graph import load_onnx
from tilewright.compiler.graph.passes import strip_fake_quant
from tilewright.compiler.graph.quantize import sqnr_db
from tilewright.runtime.model import compile_model

ort = pytest.importorskip("onnxruntime")
quantization = pytest.importorskip("onnxruntime.quantization")


def _session(model_bytes):
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL     # the model's own semantics
    return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])


def _quantized_by_onnxruntime(tmp_path, fmt, **options):
    """The test ResNet through quantize_static (``options`` as its keyword arguments; none: its defaults)."""
    model = small_resnet(seed=3)
    (tmp_path / "f.onnx").write_bytes(model.SerializeToString())
    rng = np.random.default_rng(4)
    samples = iter([{"input": rng.standard_normal((1, 3, 12, 12)).astype(np.float32)} for _ in range(16)])

    class Reader(quantization.CalibrationDataReader):
        def get_next(self):
            return next(samples, None)
    quantization.quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", Reader(),
                                 quant_format=getattr(quantization.QuantFormat, fmt), **options)
    return (tmp_path / "q.onnx").read_bytes()


@pytest.mark.parametrize("fmt, options", [
    ("QDQ", {}), ("QOperator", {}),
    ("QDQ", {"activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True}),
    # (reduce_range: 7-bit weights, as onnxruntime advises for uint8 x int8 on x86 without VNNI, where its
    # kernels add pairs of products in saturating 16 bits and the oracle itself is inexact)
    ("QOperator", {"activation_type": "QUInt8", "weight_type": "QInt8", "per_channel": True, "reduce_range": True}),
], ids=["qdq-defaults", "qoperator-defaults", "qdq-uint8-per-channel", "qoperator-uint8-per-channel"])
def test_a_cnn_quantized_by_onnxruntime_runs_its_convolutions_on_the_accelerator(tmp_path, fmt, options):
    options = {k: getattr(quantization.QuantType, v) if k.endswith("_type") else v for k, v in options.items()}
    model = _quantized_by_onnxruntime(tmp_path, fmt, **options)
    convs = sum(n.op_type in ("Conv", "QLinearConv") for n in load_onnx_nodes(model))
    compiled = compile_model(model, "tiny")
    on_accelerator = [s for s in compiled.steps if s.where == "accelerator" and s.node.op == "QConv"]
    assert len(on_accelerator) == convs >= 6
    # asymmetric activations: zero points other than 0 reached the accelerator's layers
    assert any(layer["input_zero_point"] or layer["output_zero_point"] for layer in compiled.meta["layers"])
    session, rng = _session(model), np.random.default_rng(5)
    xs = rng.standard_normal((8, 1, 3, 12, 12)).astype(np.float32)
    expected = np.concatenate([session.run(None, {"input": x})[0] for x in xs])
    name = compiled.graph.outputs[0].name
    got = np.concatenate([compiled.run(x)[name] for x in xs])
    print(f"SQNR against onnxruntime: {sqnr_db(expected, got):.1f} dB")
    assert sqnr_db(expected, got) >= 35


def load_onnx_nodes(model_bytes):
    import onnx
    return onnx.load_from_string(model_bytes).graph.node


def test_the_rtl_computes_an_onnxruntime_model_as_fsim_does(tmp_path):
    compiled = compile_model(_quantized_by_onnxruntime(tmp_path, "QDQ"), "tiny")
    x = np.random.default_rng(6).standard_normal((1, 3, 12, 12)).astype(np.float32)
    name = compiled.graph.outputs[0].name
    np.testing.assert_array_equal(compiled.run(x, backend="rtl")[name], compiled.run(x)[name])


def _qlinear_conv(x_type, x_zp, y_zp, pads):
    rng = np.random.default_rng(10)
    x_dtype = helper.tensor_dtype_to_np_dtype(x_type)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(x_zp, x_dtype),
             "w": rng.integers(-127, 128, (8, 4, 3, 3), dtype=np.int8), "ws": np.array(0.01, np.float32),
             "wz": np.array(0, np.int8), "ys": np.array(0.4, np.float32), "yz": np.array(y_zp, x_dtype),
             "b": rng.integers(-3000, 3000, 8, dtype=np.int32)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["y"], name="qconv",
                            pads=[pads] * 4)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", x_type, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", x_type, [1, 8, 6 + 2 * pads - 2, 6 + 2 * pads - 2])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("x_type, x_zp, y_zp, pads", [
    (TensorProto.INT8, 3, -2, 1), (TensorProto.INT8, -100, 20, 1), (TensorProto.UINT8, 140, 128, 1),
    (TensorProto.UINT8, 0, 255, 0)])
def test_zero_points_are_computed_as_onnx_defines_them(x_type, x_zp, y_zp, pads):
    """QLinearConv with zero points on the accelerator against onnx.reference: padding takes the input's zero
    point, the output's is added; integer rescaling may round a value one step the other way, no more."""
    model = _qlinear_conv(x_type, x_zp, y_zp, pads)
    compiled = compile_model(model.SerializeToString(), "tiny")
    assert [s.name for s in compiled.steps if s.where == "accelerator"] == ["qconv"]
    rng = np.random.default_rng(11)
    info = np.iinfo(helper.tensor_dtype_to_np_dtype(x_type))
    for _ in range(4):
        x = rng.integers(info.min, info.max + 1, (1, 4, 6, 6)).astype(info.dtype)
        expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
        got = compiled.run(x)["y"]
        assert got.dtype == expected.dtype
        diff = np.abs(got.astype(int) - expected.astype(int))
        assert diff.max() <= 1 and np.mean(diff == 0) > 0.97


def test_strip_fake_quant_records_each_tensors_scale_and_zero_point():
    inits = {"s": np.array(0.1, np.float32), "z0": np.array(0, np.int8), "z3": np.array(3, np.int8),
             "u": np.array(130, np.uint8), "s2": np.array(0.2, np.float32)}
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("QuantizeLinear", ["a", "s", "z3"], ["aq"]),
             helper.make_node("DequantizeLinear", ["aq", "s", "z3"], ["ad"]),
             helper.make_node("Neg", ["ad"], ["b"]),
             helper.make_node("QuantizeLinear", ["b", "s", "u"], ["bq"]),          # uint8: in the int8 domain
             helper.make_node("DequantizeLinear", ["bq", "s", "u"], ["bd"]),
             helper.make_node("QuantizeLinear", ["bd", "s2", "z0"], ["cq"]),       # not a pair: kept, recorded
             helper.make_node("DequantizeLinear", ["cq", "s", "z0"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 21)])
    graph = load_onnx(model.SerializeToString())
    stripped, qparams = strip_fake_quant(graph)
    assert [n.op for n in stripped.nodes] == ["Relu", "Neg", "QuantizeLinear", "DequantizeLinear"]
    # "b" is quantized two ways (its own pair, then the kept QuantizeLinear): it gets none
    assert qparams == {"a": pytest.approx((0.1, 3)), "y": pytest.approx((0.1, 0))}
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    from tilewright.compiler.graph import run_graph
    np.testing.assert_allclose(run_graph(stripped, {"x": x})["y"], run_graph(graph, {"x": x})["y"], atol=0.2)


def test_a_relu_the_output_zero_point_cannot_express_keeps_its_layer_on_the_host():
    """Conv → Relu → Q with zero point 5: the requantizer can clip at 0 or -128 only; the layer stays on the
    host, says why, and still computes what the model means."""
    rng = np.random.default_rng(12)
    inits = {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8), "so": np.array(0.02, np.float32),
             "zo": np.array(5, np.int8), "w": (rng.standard_normal((4, 4, 3, 3)) * 0.2).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"]),
             helper.make_node("Conv", ["xd", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "so", "zo"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "so", "zo"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 21)])
    compiled = compile_model(model.SerializeToString(), "tiny")
    conv = next(s for s in compiled.steps if s.name == "conv")
    assert conv.where == "host" and "output zero point 5" in conv.why
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(compiled.run(x)["y"], expected, atol=0.02 + 1e-6)


def test_a_model_quantized_by_onnxruntime_dynamically_runs_its_matmuls_on_the_accelerator(tmp_path):
    """quantize_dynamic's DynamicQuantizeLinear → MatMulInteger → Cast → Mul: the MatMuls run on the accelerator
    with the model's int8 weights and scales (and a calibrated input scale where the model computes one per
    run), close to onnxruntime's own result."""
    import onnx
    rng = np.random.default_rng(15)
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b1"),
             numpy_helper.from_array(rng.standard_normal((32, 10)).astype(np.float32), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r1"]), helper.make_node("MatMul", ["r1", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "f.onnx")
    quantization.quantize_dynamic(tmp_path / "f.onnx", tmp_path / "q.onnx", weight_type=quantization.QuantType.QInt8)
    quantized = (tmp_path / "q.onnx").read_bytes()
    assert sum(n.op_type == "MatMulInteger" for n in load_onnx_nodes(quantized)) == 2
    compiled = compile_model(quantized, "tiny", calibration=rng.standard_normal((64, 64)).astype(np.float32))
    assert [s.where for s in compiled.steps if s.node.op == "QDense"] == ["accelerator"] * 2
    session = _session(quantized)
    xs = rng.standard_normal((8, 4, 64)).astype(np.float32)
    expected = np.concatenate([session.run(None, {"x": x})[0] for x in xs])
    assert sqnr_db(expected, np.concatenate([compiled.run(x)["y"] for x in xs])) >= 30


def test_conv_integer_scaled_to_float_runs_on_the_accelerator():
    """QuantizeLinear → ConvInteger (zero points on both sides) → Cast → Mul(per-channel constant): the
    convolution on the accelerator with the input's own quantization; against onnx.reference."""
    rng = np.random.default_rng(16)
    inits = {"s": np.array(0.02, np.float32), "z": np.array(7, np.uint8),
             "w": rng.integers(0, 256, (6, 3, 3, 3), dtype=np.uint8), "wz": np.array(128, np.uint8),
             "c": (rng.uniform(0.5, 2, (1, 6, 1, 1)) * 1e-3).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("ConvInteger", ["xq", "w", "z", "wz"], ["acc"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "c"], ["y"])]
    model = helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()]), opset_imports=[helper.make_opsetid("", 17)])
    calib = rng.uniform(-2, 3, (8, 3, 8, 8)).astype(np.float32)
    compiled = compile_model(model.SerializeToString(), "tiny", calibration=calib)
    assert [(s.name, s.where) for s in compiled.steps if s.node.op == "QConv"] == [("conv", "accelerator")]
    assert compiled.meta["layers"][0]["input_zero_point"] == 7 - 128
    x = rng.uniform(-2, 3, (1, 3, 8, 8)).astype(np.float32)
    assert sqnr_db(ReferenceEvaluator(model).run(None, {"x": x})[0], compiled.run(x)["y"]) >= 30
