"""Standard operators without a native host kernel run through ``onnx.reference``; models exported by other
tools (skl2onnx) compile and keep their accuracy; constants made by shape arithmetic are folded."""

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from tilewright.cli import main
from tilewright.compiler.graph import ModelError, load_onnx, run_graph
from tilewright.compiler.graph.passes import simplify
from tilewright.compiler.graph.reference import is_reference
from tilewright.runtime.model import compile_model, load_model

from .test_host_ops import model_of, typed

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("op,inputs,attrs", [
    ("Erf", {"x": RNG.standard_normal((2, 5)).astype(np.float32)}, {}),
    ("HardSwish", {"x": RNG.standard_normal((3, 4)).astype(np.float32)}, {}),
    ("CumSum", {"x": RNG.integers(-9, 9, (4, 3)).astype(np.int64), "axis": np.array(1, np.int64)}, {}),
    ("TopK", {"x": RNG.standard_normal((3, 6)).astype(np.float32), "k": np.array([2], np.int64)}, {}),
    ("ArgMax", {"x": RNG.standard_normal((3, 6)).astype(np.float32)}, {"axis": 1}),
])
def test_an_operator_without_a_host_kernel_runs_in_onnx_reference(op, inputs, attrs):
    outputs = 2 if op == "TopK" else 1
    model = model_of(op, inputs, attrs, outputs=outputs)
    expected = ReferenceEvaluator(model).run(None, inputs)
    graph = load_onnx(typed(model, *expected).SerializeToString())
    assert all(is_reference(n) for n in graph.nodes)
    got = run_graph(graph, inputs)
    for k, want in enumerate(expected):
        np.testing.assert_array_equal(got[f"y{k}"], want)


def test_shape_arithmetic_on_constants_is_folded_away():
    """ConstantOfShape, Range and Expand of constants (no native kernel for any) become constants: no
    node of them is left, and the model computes what ONNX's reference evaluator does."""
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                              value=numpy_helper.from_array(np.array([1.5], np.float32))),
             helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
             helper.make_node("Expand", ["r", "shape"], ["rr"]),
             helper.make_node("Add", ["x", "ones"], ["a"]),
             helper.make_node("Mul", ["a", "rr"], ["y"])]
    consts = [shape] + [numpy_helper.from_array(np.array(v, np.float32), n)
                        for n, v in (("start", 0.0), ("limit", 3.0), ("delta", 1.0))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = RNG.standard_normal((2, 3)).astype(np.float32)
    simplified = simplify(load_onnx(model.SerializeToString()))
    assert [n.op for n in simplified.nodes] == ["Add", "Mul"]
    np.testing.assert_array_equal(run_graph(simplified, {"x": x})["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_only_an_unknown_operator_or_domain_is_refused():
    node = helper.make_node("NoSuchOp", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError) as e:
        load_onnx(model.SerializeToString())
    assert "NoSuchOp" in str(e.value) and "\n" not in str(e.value)
    node = helper.make_node("Frobnicate", ["x"], ["y"], domain="org.example")
    graph = helper.make_graph([node], "g", graph.input, graph.output)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.example", 1)])
    with pytest.raises(ModelError, match="domain 'org.example' is not supported"):
        load_onnx(model.SerializeToString())


@pytest.fixture(scope="module")
def digits_mlp():
    from sklearn.datasets import load_digits
    from sklearn.neural_network import MLPClassifier
    x, y = load_digits(return_X_y=True)
    x = x.astype(np.float32)
    clf = MLPClassifier(hidden_layer_sizes=(32,), max_iter=300, random_state=0).fit(x[:1400], y[:1400])
    return clf, x, y


@pytest.mark.parametrize("zipmap", [False, True])
def test_a_skl2onnx_classifier_keeps_its_accuracy_on_the_accelerator(digits_mlp, zipmap, tmp_path):
    """scikit-learn's MLP on the digits, exported by skl2onnx (ai.onnx.ml operators, ZipMap or not): its
    dense layers run on the accelerator and its test accuracy stays within 1 point of scikit-learn's,
    also after a save and load."""
    from skl2onnx import to_onnx
    clf, x, y = digits_mlp
    onx = to_onnx(clf, x[:1], options={id(clf): {"zipmap": zipmap}})
    model = compile_model(onx.SerializeToString(), "tiny", calibration=x[:200])
    table = "\n".join(model.placement_table())
    assert "ArrayFeatureExtractor" in table and "onnx.reference" in table
    assert sum(s.where == "accelerator" for s in model.steps) == 2
    label = onx.graph.output[0].name
    expected = clf.predict(x[1400:])
    got = model.run({"X": x[1400:]})[label]
    assert (got == y[1400:]).mean() >= (expected == y[1400:]).mean() - 0.01
    model.save(tmp_path / "mlp.twm")
    np.testing.assert_array_equal(load_model(tmp_path / "mlp.twm").run({"X": x[1400:]})[label], got)
    probabilities = model.run({"X": x[1400:1402]})[onx.graph.output[1].name]
    if zipmap:       # one {class: probability} per row
        assert sorted(probabilities[0]) == list(range(10)) and abs(sum(probabilities[0].values()) - 1) < 1e-3
    else:
        np.testing.assert_allclose(probabilities.sum(axis=1), 1, atol=1e-3)


def test_the_cli_compiles_and_runs_a_skl2onnx_model(digits_mlp, tmp_path, capsys):
    from skl2onnx import to_onnx
    clf, x, y = digits_mlp
    (tmp_path / "mlp.onnx").write_bytes(to_onnx(clf, x[:1], options={id(clf): {"zipmap": False}}).SerializeToString())
    np.save(tmp_path / "calib.npy", x[:100])
    np.save(tmp_path / "x.npy", x[1400:1450])
    assert main(["compile", str(tmp_path / "mlp.onnx"), "--config", "tiny", "--calib", str(tmp_path / "calib.npy"),
                 "-o", str(tmp_path / "mlp.twm")]) == 0
    assert "onnx.reference" in capsys.readouterr().out
    assert main(["run", str(tmp_path / "mlp.twm"), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as out:
        assert (out["label"] == clf.predict(x[1400:1450])).mean() >= 0.9


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_reference_nodes_follow_the_passes_rewiring_and_their_subgraphs_read_outer_tensors():
    """Identity removal renames a reference node's input; an If whose branches read a tensor of the
    enclosing graph gets it: both compute what the reference evaluator does on the whole model."""
    then = helper.make_graph([helper.make_node("Erf", ["e"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2, 3])])
    other = helper.make_graph([helper.make_node("Neg", ["e"], ["o"])], "else", [],
                              [helper.make_tensor_value_info("o", TensorProto.FLOAT, [2, 3])])
    nodes = [helper.make_node("Identity", ["x"], ["e"]),
             helper.make_node("ReduceMax", ["x"], ["m"], keepdims=0),
             helper.make_node("Greater", ["m", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    model = _model(nodes, [("x", TensorProto.FLOAT, [2, 3]), ("zero", TensorProto.FLOAT, [])],
                   [("y", TensorProto.FLOAT, [2, 3])])
    for x in (RNG.standard_normal((2, 3)).astype(np.float32), -np.abs(RNG.standard_normal((2, 3))).astype(np.float32)):
        feeds = {"x": x, "zero": np.array(0, np.float32)}
        graph = simplify(load_onnx(model.SerializeToString()))
        assert "Identity" not in [n.op for n in graph.nodes]
        np.testing.assert_array_equal(run_graph(graph, feeds)["y"], ReferenceEvaluator(model).run(None, feeds)[0])


def test_models_with_scalar_inputs_or_a_constant_output_compile_and_run():
    model = _model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Constant", [], ["k"],
                    value=numpy_helper.from_array(np.arange(3, dtype=np.int64)))],
                   [("a", TensorProto.FLOAT, []), ("b", TensorProto.FLOAT, [])],
                   [("s", TensorProto.FLOAT, []), ("k", TensorProto.INT64, [3])])
    out = compile_model(model.SerializeToString(), "tiny").run({"a": np.float32(2), "b": np.float32(0.5)})
    assert out["s"] == np.float32(2.5) and list(out["k"]) == [0, 1, 2]
