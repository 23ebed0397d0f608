"""Every operator the importer accepts, on the host, against ``onnx.reference.ReferenceEvaluator``.

Each case is a one-node ONNX model built with ``onnx.helper``, imported
through :func:`load_onnx` (from bytes, as a file would be) and run by
:func:`run_graph`; the reference evaluator runs the same model.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tilewright.compiler.graph import load_onnx, run_graph

RNG = np.random.default_rng(0)
F = np.float32


def model_of(op, inputs, attrs=None, constants=None, outputs=1, opset=17):
    """A one-node model: ``inputs`` maps names to arrays (graph inputs), ``constants`` to initializers."""
    constants = constants or {}
    names = list(inputs) + list(constants)
    node = helper.make_node(op, names, [f"y{k}" for k in range(outputs)], **(attrs or {}))
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape) for n, a in inputs.items()],
        [helper.make_empty_tensor_value_info(f"y{k}") for k in range(outputs)],
        [numpy_helper.from_array(a, n) for n, a in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def typed(model, *outputs):
    """Give the graph outputs the types of ``outputs`` (ONNX's checker requires them)."""
    for value, array in zip(model.graph.output, outputs):
        value.CopyFrom(helper.make_tensor_value_info(value.name, helper.np_dtype_to_tensor_dtype(array.dtype),
                                                     array.shape))
    return model


def check(op, inputs, attrs=None, constants=None, *, opset=17, optional=(), rtol=1e-5, atol=1e-5):
    """Compare our host run with the reference; ``optional`` names omitted inputs as ''."""
    model = model_of(op, inputs, attrs, constants, opset=opset)
    if optional:
        node = model.graph.node[0]
        node.input[:] = [("" if n in optional else n) for n in node.input]
    expected = ReferenceEvaluator(model).run(None, inputs)[0]
    typed(model, expected)
    got = run_graph(load_onnx(model.SerializeToString()), inputs)["y0"]
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def randf(*shape):
    return RNG.standard_normal(shape).astype(F)


def randi8(*shape, lo=-128, hi=128, dtype=np.int8):
    return RNG.integers(lo, hi, shape).astype(dtype)


# -- float operators ------------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 0, 1, 0]),
    dict(kernel_shape=[1, 1]),
    dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 2, 2, 2]),
    dict(kernel_shape=[3, 3], group=2, pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
    dict(kernel_shape=[2, 2], auto_pad="SAME_LOWER"),
    dict(kernel_shape=[3, 3], auto_pad="VALID"),
], ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
@pytest.mark.parametrize("bias", [False, True])
def test_conv(attrs, bias):
    x, w = randf(2, 4, 9, 8), randf(6, 4 // attrs.get("group", 1), *attrs["kernel_shape"])
    constants = {"w": w} | ({"b": randf(6)} if bias else {})
    check("Conv", {"x": x}, attrs, constants)


@pytest.mark.parametrize("attrs", [{}, dict(transA=1), dict(transB=1, alpha=0.5, beta=2.0)])
def test_gemm(attrs):
    a = randf(3, 5) if not attrs.get("transA") else randf(5, 3)
    b = randf(5, 4) if not attrs.get("transB") else randf(4, 5)
    check("Gemm", {"a": a}, attrs, {"b": b, "c": randf(4)})


def test_gemm_without_c():
    check("Gemm", {"a": randf(3, 5)}, dict(transB=1), {"b": randf(4, 5)})


@pytest.mark.parametrize("shapes", [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((2, 3, 5), (2, 5, 4)), ((5,), (5, 2))])
def test_matmul(shapes):
    check("MatMul", {"a": randf(*shapes[0]), "b": randf(*shapes[1])})


def test_relu():
    check("Relu", {"x": randf(2, 3, 4)})


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.7), (None, 0.3), (0.0, None)])
def test_clip(lo, hi):
    constants = {"lo": np.array(0 if lo is None else lo, dtype=F)}
    if hi is not None:
        constants["hi"] = np.array(hi, dtype=F)
    check("Clip", {"x": randf(3, 7)}, None, constants, optional=("lo",) if lo is None else ())


def test_clip_opset_6_attributes():
    check("Clip", {"x": randf(4, 4)}, dict(min=-0.2, max=0.4), opset=6)


@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 3, 4)), ((2, 3, 4), (4,)), ((2, 3, 4), (3, 1))])
def test_add(shapes):
    check("Add", {"a": randf(*shapes[0]), "b": randf(*shapes[1])})


def test_add_integers():
    check("Add", {"a": RNG.integers(-9, 9, (3, 4)).astype(np.int32), "b": RNG.integers(-9, 9, (4,)).astype(np.int32)})


def test_batch_normalization():
    c = 5
    constants = {"s": randf(c), "b": randf(c), "m": randf(c), "v": np.abs(randf(c)) + 0.1}
    check("BatchNormalization", {"x": randf(2, c, 4, 3)}, dict(epsilon=1e-3), constants)


POOLS = [
    dict(kernel_shape=[2, 2], strides=[2, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 0, 1]),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER", strides=[2, 2]),
]


@pytest.mark.parametrize("attrs", POOLS, ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_max_pool(attrs):
    check("MaxPool", {"x": randf(2, 3, 9, 8)}, attrs)


def test_max_pool_int8():
    check("MaxPool", {"x": randi8(1, 2, 7, 7)}, dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]))


@pytest.mark.parametrize("attrs", POOLS + [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                                count_include_pad=1)],
                         ids=lambda a: "-".join(f"{k}{v}" for k, v in a.items()))
def test_average_pool(attrs):
    check("AveragePool", {"x": randf(2, 3, 9, 8)}, attrs)


def test_global_average_pool():
    check("GlobalAveragePool", {"x": randf(2, 3, 5, 6)})


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_flatten(axis):
    check("Flatten", {"x": randf(2, 3, 4, 5)}, dict(axis=axis))


@pytest.mark.parametrize("shape", [[6, -1], [0, 12, -1], [-1], [2, 0, 0, 5]])
def test_reshape(shape):
    check("Reshape", {"x": randf(2, 3, 4, 5)}, None, {"s": np.array(shape, dtype=np.int64)})


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat(axis):
    shapes = [[2, 3, 4]] * 3
    for k, s in enumerate(shapes):
        s = list(s)
        s[axis] += k
        shapes[k] = s
    check("Concat", {f"x{k}": randf(*s) for k, s in enumerate(shapes)}, dict(axis=axis))


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax(axis):
    check("Softmax", {"x": randf(2, 3, 4)}, dict(axis=axis))


@pytest.mark.parametrize("axis", [1, 2])
def test_softmax_before_opset_13_coerces_to_2d(axis):
    """Up to opset 12 the axes from ``axis`` on form one row (the ONNX spec; the reference evaluator
    implements only the opset-13 meaning, so the oracle here is the spec's formula)."""
    x = randf(2, 3, 4)
    model = typed(model_of("Softmax", {"x": x}, dict(axis=axis), opset=11), x)
    rows = x.reshape(int(np.prod(x.shape[:axis])), -1).astype(np.float64)
    expected = (np.exp(rows) / np.exp(rows).sum(axis=1, keepdims=True)).reshape(x.shape)
    np.testing.assert_allclose(run_graph(load_onnx(model.SerializeToString()), {"x": x})["y0"], expected, rtol=1e-5)


# -- quantized operators ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear(dtype, per_axis):
    x = randf(2, 3, 4) * 4
    x[0, 0, :2] = [0.5, 1.5]            # halves: round half to even
    scale = (np.abs(randf(3)) + 0.05) if per_axis else np.array(0.07, dtype=F)
    zp = np.full(scale.shape, 3 if dtype == np.uint8 else -2, dtype=dtype)
    check("QuantizeLinear", {"x": x}, dict(axis=1) if per_axis else None, {"s": scale, "z": zp}, opset=21)


def test_quantize_linear_without_zero_point():
    check("QuantizeLinear", {"x": randf(5, 5) * 10}, None, {"s": np.array(0.05, dtype=F)}, opset=21)


@pytest.mark.parametrize("per_axis", [False, True])
def test_dequantize_linear(per_axis):
    scale = (np.abs(randf(3)) + 0.05) if per_axis else np.array(0.07, dtype=F)
    zp = np.full(scale.shape, 5, dtype=np.int8)
    check("DequantizeLinear", {"x": randi8(2, 3, 4)}, dict(axis=1) if per_axis else None, {"s": scale, "z": zp},
          opset=21)


@pytest.mark.parametrize("per_channel", [False, True])
@pytest.mark.parametrize("attrs", [dict(pads=[1, 1, 1, 1]), dict(strides=[2, 2]), dict(group=2, pads=[0, 1, 0, 1])],
                         ids=["pad", "stride", "group"])
def test_qlinear_conv(per_channel, attrs):
    x, w = randi8(1, 4, 7, 6, lo=0, hi=256, dtype=np.uint8), randi8(6, 4 // attrs.get("group", 1), 3, 3)
    ws = (np.abs(randf(6)) * 0.01 + 0.001) if per_channel else np.array(0.004, dtype=F)
    constants = {"xs": np.array(0.02, dtype=F), "xz": np.array(128, dtype=np.uint8), "w": w, "ws": ws,
                 "wz": np.zeros(ws.shape, dtype=np.int8), "ys": np.array(0.05, dtype=F),
                 "yz": np.array(120, dtype=np.uint8), "b": RNG.integers(-500, 500, 6).astype(np.int32)}
    check("QLinearConv", {"x": x}, dict(kernel_shape=[3, 3], **attrs), constants)


def test_qlinear_matmul():
    constants = {"as": np.array(0.03, dtype=F), "az": np.array(-3, dtype=np.int8), "b": randi8(5, 4),
                 "bs": np.array(0.02, dtype=F), "bz": np.array(0, dtype=np.int8), "ys": np.array(0.1, dtype=F),
                 "yz": np.array(4, dtype=np.int8)}
    model = model_of("QLinearMatMul", {"a": randi8(3, 5)}, None, constants)
    # input order: a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp
    model.graph.node[0].input[:] = ["a", "as", "az", "b", "bs", "bz", "ys", "yz"]
    a = randi8(3, 5)
    expected = ReferenceEvaluator(model).run(None, {"a": a})[0]
    typed(model, expected)
    np.testing.assert_array_equal(run_graph(load_onnx(model.SerializeToString()), {"a": a})["y0"], expected)


@pytest.mark.parametrize("zero_points", [False, True])
def test_conv_integer(zero_points):
    constants = {"w": randi8(4, 3, 3, 3, lo=0, hi=256, dtype=np.uint8)}
    if zero_points:
        constants |= {"xz": np.array(7, dtype=np.uint8), "wz": np.array(128, dtype=np.uint8)}
    check("ConvInteger", {"x": randi8(1, 3, 6, 6, lo=0, hi=256, dtype=np.uint8)}, dict(pads=[1, 1, 1, 1]), constants)


@pytest.mark.parametrize("zero_points", [False, True])
def test_matmul_integer(zero_points):
    constants = {"b": randi8(5, 4)}
    if zero_points:
        constants |= {"az": np.array(3, dtype=np.int8), "bz": np.array(-1, dtype=np.int8)}
    check("MatMulInteger", {"a": randi8(3, 5)}, None, constants)


def test_identity_and_dropout():
    check("Identity", {"x": randf(3, 3)})
    check("Dropout", {"x": randf(3, 3)})


def test_constant_nodes_become_constants():
    const = helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(randf(3), "c"))
    add = helper.make_node("Add", ["x", "c"], ["y"])
    graph = helper.make_graph([const, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = load_onnx(model.SerializeToString())
    assert [n.op for n in g.nodes] == ["Add"] and "c" in g.constants
    x = randf(2, 3)
    np.testing.assert_allclose(run_graph(g, {"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])
    assert onnx.checker.check_model(model) is None


# -- shape and elementwise glue ------------------------------------------------------------------

@pytest.mark.parametrize("attrs", [{}, dict(start=1), dict(start=-3, end=-1)])
def test_shape(attrs):
    check("Shape", {"x": randf(2, 3, 4, 5)}, attrs, opset=19)


@pytest.mark.parametrize("axis,indices", [(0, [1, 0]), (1, [[0, 2], [-1, 1]]), (2, 3)])
def test_gather(axis, indices):
    check("Gather", {"x": randf(2, 3, 4)}, dict(axis=axis), {"i": np.array(indices, dtype=np.int64)})


@pytest.mark.parametrize("axes", [[0], [1, -1], [-2, 0]])
def test_unsqueeze(axes):
    check("Unsqueeze", {"x": randf(3, 4)}, None, {"a": np.array(axes, dtype=np.int64)})


def test_unsqueeze_and_squeeze_before_opset_13_take_attributes():
    x = randf(3, 1, 4)
    for op, attrs in (("Unsqueeze", dict(axes=[0, 3])), ("Squeeze", dict(axes=[1]))):
        expected = ReferenceEvaluator(model_of(op, {"x": x}, attrs, opset=11)).run(None, {"x": x})[0]
        model = typed(model_of(op, {"x": x}, attrs, opset=11), expected)
        np.testing.assert_array_equal(run_graph(load_onnx(model.SerializeToString()), {"x": x})["y0"], expected)


@pytest.mark.parametrize("axes", [None, [1], [-1, 1]])
def test_squeeze(axes):
    consts = {} if axes is None else {"a": np.array(axes, dtype=np.int64)}
    check("Squeeze", {"x": randf(2, 1, 3, 1)}, None, consts)


@pytest.mark.parametrize("perm", [None, [0, 2, 3, 1]])
def test_transpose(perm):
    check("Transpose", {"x": randf(2, 3, 4, 5)}, None if perm is None else dict(perm=perm))


@pytest.mark.parametrize("op", ["Mul", "Sub", "Div"])
def test_binary_float(op):
    check(op, {"a": randf(2, 3, 4), "b": randf(3, 1) + 3.0})


def test_integer_division_truncates_toward_zero():
    check("Div", {"a": np.array([7, -7, 7, -7, 6], np.int32), "b": np.array([2, 2, -2, -2, 3], np.int32)})


@pytest.mark.parametrize("op,attrs", [("Sigmoid", {}), ("LeakyRelu", {}), ("LeakyRelu", dict(alpha=0.2))])
def test_activations(op, attrs):
    check(op, {"x": randf(3, 4) * 4}, attrs)


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad(mode):
    consts = {"p": np.array([0, 1, 2, 0, 0, 2, 1, 0], np.int64)}
    if mode == "constant":
        consts["v"] = np.array(1.5, F)
    check("Pad", {"x": randf(2, 3, 4, 5)}, dict(mode=mode), consts)


def test_pad_on_chosen_axes():
    check("Pad", {"x": randf(2, 3, 4)}, None, {"p": np.array([1, 2, 3, 0], np.int64), "v": np.array(0.0, F),
                                              "a": np.array([2, 0], np.int64)}, opset=18)


@pytest.mark.parametrize("keepdims", [0, 1])
@pytest.mark.parametrize("axes", [[2, 3], [-1]])
def test_reduce_mean(keepdims, axes):
    check("ReduceMean", {"x": randf(2, 3, 4, 5)}, dict(keepdims=keepdims), {"a": np.array(axes, np.int64)}, opset=18)
    check("ReduceMean", {"x": randf(2, 3, 4, 5)}, dict(keepdims=keepdims, axes=axes), opset=13)


@pytest.mark.parametrize("to", [TensorProto.INT32, TensorProto.FLOAT16, TensorProto.INT8])
def test_cast(to):
    check("Cast", {"x": randf(3, 4) * 50}, dict(to=to))


def test_flatten_as_pytorch_exports_view():
    """x.view(x.size(0), -1): Shape → Gather → Unsqueeze → Concat → Reshape, all on the host."""
    x = randf(2, 3, 4, 4)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["x", "shape"], ["y0"])]
    consts = {"zero": np.array(0, np.int64), "ax0": np.array([0], np.int64), "minus1": np.array([-1], np.int64)}
    graph = helper.make_graph(nodes, "view", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y0", TensorProto.FLOAT, [2, 48])],
                              [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    np.testing.assert_array_equal(run_graph(load_onnx(model.SerializeToString()), {"x": x})["y0"],
                                  ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("magnitude", [127, 1 << 26])
def test_integer_convolutions_are_exact_in_either_arithmetic(magnitude):
    """The host's integer convolution (the accelerator's oracle) sums in float64 when no sum can reach 2**53
    and in int64 otherwise: both equal an int64 sum computed tap by tap (with values of 2**26 and 27 taps the
    float64 sums would round, so the int64 path must be the one taken)."""
    from tilewright.compiler.graph.host import exact_integer_conv
    rng = np.random.default_rng(magnitude)
    x = rng.integers(-magnitude, magnitude + 1, (2, 3, 6, 5), dtype=np.int64)
    w = rng.integers(-magnitude, magnitude + 1, (4, 3, 3, 3), dtype=np.int64)
    got = exact_integer_conv(x, w, strides=[1, 2], pads_begin=[1, 0], pads_end=[1, 1])
    xp = np.pad(x, [(0, 0), (0, 0), (1, 1), (0, 1)])
    want = np.zeros_like(got)
    for oy in range(got.shape[2]):
        for ox in range(got.shape[3]):
            window = xp[:, :, oy:oy + 3, 2 * ox:2 * ox + 3]
            want[:, :, oy, ox] = np.einsum("ncyx,mcyx->nm", window, w)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)
