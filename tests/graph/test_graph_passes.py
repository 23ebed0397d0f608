"""Float graph passes keep what the model computes (oracle: onnx.reference) and do what they say."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tilewright.compiler.graph import load_onnx, run_graph
from tilewright.compiler.graph.passes import fold_batch_norm, fold_constants, fuse, remove_dead, simplify

from ..models import small_resnet


def test_simplify_keeps_the_result_and_fuses_everything_fusable():
    model = small_resnet()
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"input": x})[0]
    graph = simplify(load_onnx(model.SerializeToString()))
    np.testing.assert_allclose(run_graph(graph, {"input": x})[graph.outputs[0].name], expected, rtol=1e-4, atol=1e-4)
    ops = [n.op for n in graph.nodes]
    assert ops == ["TwConv"] * 6 + ["GlobalAveragePool", "Flatten", "TwDense"]
    residuals = [n for n in graph.nodes if n.op == "TwConv" and n.inputs[3]]
    assert len(residuals) == 2 and all(n.attr("act") == "relu" for n in residuals)
    # every residual is computed before the node that adds it
    order = {o: k for k, n in enumerate(graph.nodes) for o in n.outputs}
    assert all(order.get(n.inputs[3], -1) < order[n.outputs[0]] for n in residuals)


def _model(nodes, inits, inputs, outputs):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_fold_batch_norm_only_when_the_conv_feeds_only_it():
    rng = np.random.default_rng(2)
    inits = {"w": rng.standard_normal((4, 3, 3, 3)).astype(np.float32)}
    inits |= {k: rng.uniform(0.5, 1.5, 4).astype(np.float32) for k in "smv"} | {"b": np.zeros(4, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"]),
             helper.make_node("Relu", ["c"], ["z"])]                # a second reader of the conv output
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 5, 5])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 5, 5]) for n in "yz"])
    graph = fold_batch_norm(load_onnx(model.SerializeToString()))
    assert [n.op for n in graph.nodes] == ["Conv", "BatchNormalization", "Relu"]
    del model.graph.node[2], model.graph.output[1]
    graph = fold_batch_norm(load_onnx(model.SerializeToString()))
    assert [n.op for n in graph.nodes] == ["Conv"]
    x = rng.standard_normal((1, 3, 5, 5)).astype(np.float32)
    np.testing.assert_allclose(run_graph(graph, {"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-4, atol=1e-5)


def test_fold_constants_and_remove_dead():
    inits = {"a": np.ones((2, 2), np.float32), "s": np.array([4], np.int64)}
    nodes = [helper.make_node("Add", ["a", "a"], ["two"]),               # constant: folded
             helper.make_node("Reshape", ["two", "s"], ["flat"]),         # constant: folded
             helper.make_node("Add", ["x", "flat"], ["y"]),
             helper.make_node("Relu", ["x"], ["unused"])]                 # reaches no output: removed
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])])
    graph = remove_dead(fold_constants(load_onnx(model.SerializeToString())))
    assert [n.op for n in graph.nodes] == ["Add"] and set(graph.constants) == {"flat"}
    np.testing.assert_array_equal(run_graph(graph, {"x": np.zeros(4, np.float32)})["y"], np.full(4, 2, np.float32))


@pytest.mark.parametrize("act", ["relu", "clip6", "none"])
def test_fuse_dense_with_bias_add_and_activation(act):
    rng = np.random.default_rng(3)
    inits = {"w": rng.standard_normal((5, 3)).astype(np.float32), "b": rng.standard_normal(3).astype(np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(6, np.float32)}
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["a"])]
    out = "a"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["a"], ["y"]))
        out = "y"
    elif act == "clip6":
        nodes.append(helper.make_node("Clip", ["a", "lo", "hi"], ["y"]))
        out = "y"
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5])],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, [2, 3])])
    graph = simplify(load_onnx(model.SerializeToString()))
    assert [n.op for n in graph.nodes] == ["TwDense"]
    assert graph.nodes[0].attr("act") == {"relu": "relu", "clip6": "clip", "none": "none"}[act]
    x = rng.standard_normal((2, 5)).astype(np.float32) * 3
    np.testing.assert_allclose(run_graph(graph, {"x": x})[out], ReferenceEvaluator(model).run(None, {"x": x})[0],
                               rtol=1e-5, atol=1e-5)


def test_fuse_leaves_a_conv_whose_output_is_also_a_graph_output():
    rng = np.random.default_rng(4)
    inits = {"w": rng.standard_normal((2, 2, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["y"])]
    model = _model(nodes, inits, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                   [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 2, 3, 3]) for n in "cy"])
    graph = fuse(load_onnx(model.SerializeToString()))
    assert [(n.op, n.attr("act")) for n in graph.nodes] == [("TwConv", "none"), ("Relu", None)]


def test_unfold_narrow_convs_moves_data_only():
    """Im2Col + 1×1 QConv computes the same integers as the padded-channel QConv, with fewer blocks."""
    from tilewright.compiler.graph import Graph, Node, TensorInfo
    from tilewright.compiler.graph.passes import unfold_narrow_convs
    rng = np.random.default_rng(9)
    consts = {"w7": rng.integers(-127, 128, (8, 3, 7, 7), dtype=np.int8),
              "w1": rng.integers(-127, 128, (8, 8, 1, 1), dtype=np.int8),
              "b": rng.integers(-5000, 5000, 8).astype(np.int32), "s": rng.integers(1, 900, 8).astype(np.int32)}
    attrs = dict(stride=2, padding=3, kernel=[7, 7], mul=1, shift=16, relu=True)
    nodes = [Node("QConv", ["x", "w7", "b", "", "s"], ["y"], attrs, "stem"),
             Node("QConv", ["y", "w1", "b"], ["z"], {**attrs, "stride": 1, "padding": 0, "kernel": [1, 1],
                                                    "mul": 3, "shift": 9}, "pointwise")]
    graph = Graph(nodes, [TensorInfo("x", (2, 3, 19, 17), np.dtype(np.int8))],
                  [TensorInfo("z", (None,) * 4, np.dtype(np.int8))], consts)
    unfolded = unfold_narrow_convs(graph, block_in=16)
    assert [n.op for n in unfolded.nodes] == ["Im2Col", "QConv", "QConv"]
    assert unfolded.constants["stem/wq_unfolded"].shape == (8, 147, 1, 1)
    x = rng.integers(-128, 128, (2, 3, 19, 17), dtype=np.int8)
    np.testing.assert_array_equal(run_graph(unfolded, {"x": x})["z"], run_graph(graph, {"x": x})["z"])
    # a full block of channels, or a 1x1 kernel, stays as it is
    assert [n.op for n in unfold_narrow_convs(graph, block_in=2).nodes] == ["QConv", "QConv"]
