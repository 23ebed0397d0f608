"""Compiled models: partition, accelerator results vs the host's integer oracle, files, bad inputs, CLI."""

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tilewright.cli import main
from tilewright.compiler.graph import ModelError, load_onnx, run_graph
from tilewright.compiler.graph.quantize import calibrate, quantize, sqnr_db
from tilewright.compiler.graph.zoo import resnet18
from tilewright.runtime.model import compile_model, load_model

from ..models import small_resnet, small_resnet_graph

SEED = 3        # the small ResNet's weights in these tests


@pytest.fixture(scope="module")
def calib():
    return np.random.default_rng(0).standard_normal((8, 3, 12, 12)).astype(np.float32)


@pytest.fixture(scope="module")
def compiled(calib):
    return compile_model(small_resnet(SEED).SerializeToString(), "default", calibration=calib)


@pytest.mark.parametrize("per_channel", [True, False])
def test_accelerator_equals_the_quantized_graph_on_the_host(calib, per_channel):
    """fsim runs every conv/dense; the host's numpy integer ops (an independent oracle) agree bit for bit."""
    compiled = compile_model(small_resnet(SEED).SerializeToString(), "default", calibration=calib,
                             per_channel=per_channel)
    graph = small_resnet_graph(SEED)
    oracle = quantize(graph, calibrate(graph, [calib[i:i + 1] for i in range(8)]), per_channel=per_channel)
    assert [s.where for s in compiled.steps if s.node.op in ("QConv", "QDense")] == ["accelerator"] * 7
    x = np.random.default_rng(1).standard_normal((1, 3, 12, 12)).astype(np.float32)
    name = graph.outputs[0].name
    got, rows = compiled.run(x, profile=True)
    np.testing.assert_array_equal(got[name], run_graph(oracle, {"input": x})[name])
    assert sqnr_db(run_graph(graph, {"input": x})[name], got[name]) > 20
    assert {r["where"] for r in rows} == {"accelerator", "host"}
    assert sum(r["macs"] for r in rows) == sum(s.macs for s in compiled.steps) > 0


def test_rtl_equals_fsim_and_counts_cycles(compiled):
    x = np.random.default_rng(2).standard_normal((1, 3, 12, 12)).astype(np.float32)
    fsim = compiled.run(x)
    rtl, rows = compiled.run(x, backend="rtl", profile=True)
    for k in fsim:
        np.testing.assert_array_equal(rtl[k], fsim[k])
    accel = [r for r in rows if r["where"] == "accelerator"]
    assert all(r["cycles"] > 0 for r in accel) and all(r["cycles"] is None for r in rows if r["where"] == "host")


def test_rtl_layers_side_by_side_equal_one_after_another(compiled):
    """Two RTL simulations at once, each layer from fsim's input for it: the outputs and every layer's cycles
    are those of the RTL run layer after layer."""
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float32)
    one, rows_one = compiled.run(x, backend="rtl", profile=True)
    two, rows_two = compiled.run(x, backend="rtl", profile=True, workers=2)
    for k in one:
        np.testing.assert_array_equal(two[k], one[k])
    assert [(r["node"], r["cycles"]) for r in rows_two] == [(r["node"], r["cycles"]) for r in rows_one]
    assert sum(r["cycles"] or 0 for r in rows_two) > 0


def test_rtl_side_by_side_names_a_layer_that_differs_from_fsim(compiled, monkeypatch):
    """Each layer's RTL output is checked against fsim's: a difference (here fsim made to disagree on the
    third accelerator layer) names that layer."""
    from tilewright.runtime.device import DeviceError, FsimDevice
    third = [s for s in compiled.steps if s.where == "accelerator"][2]
    real = FsimDevice.run_program

    def wrong_on_third(self, program, tensors):
        out, stats = real(self, program, tensors)
        if program is third.program:
            out["out"] = out["out"] ^ 1
        return out, stats
    monkeypatch.setattr(FsimDevice, "run_program", wrong_on_third)
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float32)
    with pytest.raises(DeviceError, match=f"^{third.name}: the RTL's output differs from fsim's"):
        compiled.run(x, backend="rtl", workers=2)


def test_rtl_side_by_side_names_a_layer_whose_run_fails(compiled, monkeypatch):
    """An RTL run that stops with an error (here made up for the second accelerator layer) ends the whole
    run with that error, named by its layer."""
    from tilewright.runtime.device import DeviceError, RtlDevice
    second = [s for s in compiled.steps if s.where == "accelerator"][1]
    real = RtlDevice.run_program

    def stops_on_second(self, program, tensors):
        if program is second.program:
            raise DeviceError("the RTL stopped with BUS_ERROR at instruction 3")
        return real(self, program, tensors)
    monkeypatch.setattr(RtlDevice, "run_program", stops_on_second)
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float32)
    with pytest.raises(DeviceError, match=f"^{second.name}: the RTL stopped with BUS_ERROR"):
        compiled.run(x, backend="rtl", workers=2)


@pytest.mark.parametrize("backend, workers, message", [("fsim", 2, "for the rtl backend"),
                                                       ("rtl", 0, "must be a positive integer"),
                                                       ("rtl", True, "must be a positive integer")])
def test_bad_worker_counts_are_model_errors(compiled, backend, workers, message):
    x = np.zeros((1, 3, 12, 12), np.float32)
    with pytest.raises(ModelError, match=message):
        compiled.run(x, backend=backend, workers=workers)


def test_save_load_round_trip(compiled, tmp_path):
    path = tmp_path / "m.twm"
    compiled.save(path)
    loaded = load_model(path)
    x = np.random.default_rng(3).standard_normal((1, 3, 12, 12)).astype(np.float32)
    a, b = compiled.run(x), loaded.run(x)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert loaded.placement_table() == compiled.placement_table()
    assert loaded.meta["layers"] == compiled.meta["layers"]


def test_model_files_of_version_1_still_load_and_unknown_versions_are_one_line_errors(compiled, tmp_path):
    """Version 2 files may hold per-channel STOREs an older tilewright would misread, so they say so; this
    tilewright reads both."""
    import json
    compiled.save(tmp_path / "m.twm")
    with np.load(tmp_path / "m.twm") as archive:
        members = {k: archive[k] for k in archive.files}
    header = json.loads(members["header"].tobytes().decode())
    assert header["version"] == 2
    x = np.random.default_rng(4).standard_normal((1, 3, 12, 12)).astype(np.float32)
    for version in (1, 3):
        members["header"] = np.frombuffer(json.dumps(header | {"version": version}).encode(), np.uint8)
        with open(tmp_path / f"v{version}.twm", "wb") as f:
            np.savez(f, **members)
    a, b = compiled.run(x), load_model(tmp_path / "v1.twm").run(x)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ModelError, match=r"v3.twm: model file version 3, this tilewright reads 1 and 2") as e:
        load_model(tmp_path / "v3.twm")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_damaged_model_files_are_one_line_errors(compiled, tmp_path, damage):
    path = tmp_path / "m.twm"
    compiled.save(path)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:len(data) // 2]
    elif damage == "flip":
        for k in range(len(data) // 3, len(data) // 3 + 64):
            data[k] ^= 0x5A
    elif damage == "garbage":
        data = bytearray(b"not a model" * 100)
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="m.twm") as e:
        load_model(path)
    assert "\n" not in str(e.value)


def test_dynamic_batch_runs_in_chunks(calib):
    model = small_resnet(SEED, batch=1)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    m = compile_model(model.SerializeToString(), "default", calibration=calib, batch=2)
    assert m.batch == 2 and m.dynamic_batch
    x = np.random.default_rng(4).standard_normal((5, 3, 12, 12)).astype(np.float32)
    name = m.graph.outputs[0].name
    together = m.run(x)[name]
    one_by_one = np.concatenate([m.run(x[i:i + 1])[name] for i in range(5)])
    assert together.shape == (5, 10)
    np.testing.assert_array_equal(together, one_by_one)


def test_layers_kept_on_the_host_give_the_same_result(compiled, calib):
    m = compile_model(small_resnet(SEED).SerializeToString(), "default", calibration=calib, on_host=["conv2"])
    assert [s.where for s in m.steps if s.name == "conv2"] == ["host"]
    x = np.random.default_rng(5).standard_normal((1, 3, 12, 12)).astype(np.float32)
    a, b = compiled.run(x), m.run(x)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    with pytest.raises(ModelError, match="no node"):
        compile_model(small_resnet(SEED).SerializeToString(), "default", calibration=calib, on_host=["nope"])


def _one_conv(group=1, out=4):
    rng = np.random.default_rng(6)
    w = numpy_helper.from_array(rng.standard_normal((out, 4 // group, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", group=group, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, out, 6, 6])], [w])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("group", [4, 2])
def test_a_grouped_conv_runs_on_the_accelerator_where_its_groups_fit_the_blocks(tmp_path, group):
    """Depthwise (4 groups of 1 channel) and 2 groups of 2: on the accelerator on tiny (4×4 blocks); on a
    config with 4×8 blocks on the host, saying why."""
    model = _one_conv(group=group)
    calib = np.random.default_rng(8).standard_normal((4, 4, 6, 6)).astype(np.float32)
    m = compile_model(model.SerializeToString(), "tiny", calibration=calib)
    assert [(s.where, s.node.attr("group")) for s in m.steps if s.name == "conv"] == [("accelerator", group)]
    x = np.random.default_rng(9).standard_normal((1, 4, 6, 6)).astype(np.float32)
    expected = run_graph(load_onnx(model.SerializeToString()), {"x": x})["y"]
    assert sqnr_db(expected, m.run(x)["y"]) > 25
    on_host = compile_model(model.SerializeToString(), "tiny", calibration=calib, on_host=["conv"])
    np.testing.assert_array_equal(m.run(x)["y"], on_host.run(x)["y"])      # the same integers as the host's
    (tmp_path / "wide.toml").write_text('base = "tiny"\nblock_out = 8\n')
    tiny_out = m.run(x)["y"]
    m = compile_model(model.SerializeToString(), str(tmp_path / "wide.toml"), calibration=calib)
    assert [(s.where, s.why) for s in m.steps if s.name == "conv"] == [
        ("host", f"grouped ({4 // group} channels per group) needs square GEMM blocks its groups divide "
                 f"(block_in 4, block_out 8)")]
    np.testing.assert_array_equal(m.run(x)["y"], tiny_out)      # (the host runs the layer's integers)


def test_grouped_conv_stays_on_the_host_with_a_reason():
    lines = []
    m = compile_model(_one_conv(group=2, out=8).SerializeToString(), "default", log=lines.append)
    assert [(s.where, s.why) for s in m.steps] == [("host", "grouped convolution (group=2) changing the channel count")]
    assert any("grouped convolution" in line for line in lines)
    x = np.random.default_rng(7).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(m.run(x)["y"], run_graph(load_onnx(_one_conv(2, 8).SerializeToString()), {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def _unsupported():
    """A model with an operator of a domain Tilewright does not know (every standard operator runs)."""
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], name="the_op", domain="org.example")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("org.example", 1)])


def test_bad_inputs_are_model_errors(compiled):
    with pytest.raises(ModelError, match=r"the_op \(Frobnicate\): operator domain 'org.example' is not supported"):
        compile_model(_unsupported().SerializeToString())
    with pytest.raises(ModelError, match="truncated|not a valid|cannot"):
        compile_model(small_resnet(SEED).SerializeToString()[:500])
    with pytest.raises(ModelError, match=r"input 'input': shape 1×3×10×12, the model wants 1×3×12×12"):
        compiled.run(np.zeros((1, 3, 10, 12), np.float32))
    with pytest.raises(ModelError, match="input 'input': dtype float64, the model wants float32"):
        compiled.run(np.zeros((1, 3, 12, 12)))
    with pytest.raises(ModelError, match="calibration samples for 'input' are float32 \\[4, 3, 12\\]"):
        compile_model(small_resnet(SEED).SerializeToString(), calibration=np.zeros((4, 3, 12), np.float32))


def test_resnet18_end_to_end_on_fsim():
    """torchvision's ResNet-18 at 224×224 (random weights): compiled, run on fsim, SQNR ≥ 20 dB."""
    model = resnet18().SerializeToString()
    rng = np.random.default_rng(0)
    m = compile_model(model, "default", calibration=rng.standard_normal((4, 3, 224, 224)).astype(np.float32))
    assert sum(s.where == "accelerator" for s in m.steps) == 21       # 20 convolutions + the classifier
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    name = m.graph.outputs[0].name
    assert sqnr_db(run_graph(load_onnx(model), {"input": x})[name], m.run(x)[name]) >= 20


# -- the command line --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def files(tmp_path_factory, calib):
    d = tmp_path_factory.mktemp("cli")
    (d / "m.onnx").write_bytes(small_resnet(SEED).SerializeToString())
    np.save(d / "calib.npy", calib)
    np.save(d / "x.npy", np.random.default_rng(8).standard_normal((1, 3, 12, 12)).astype(np.float32))
    assert main(["compile", str(d / "m.onnx"), "-o", str(d / "m.twm"), "--calib", str(d / "calib.npy")]) == 0
    return d


def test_cli_compile_and_run(files, capsys):
    assert main(["compile", str(files / "m.onnx"), "-o", str(files / "pt.twm"), "--calib", str(files / "calib.npy"),
                 "--method", "percentile", "--percentile", "99.9", "--weights", "per-tensor", "--host", "conv2"]) == 0
    out = capsys.readouterr().out
    assert "calibrating (percentile)" in out and "×" in out and "asked for the host" in out
    pt = load_model(files / "pt.twm")
    assert pt.meta["method"] == "percentile" and pt.meta["per_channel"] is False
    assert main(["run", str(files / "m.twm"), "--input", str(files / "x.npy"), "--output", str(files / "y.npy"),
                 "--profile"]) == 0
    out = capsys.readouterr().out
    assert "conv2" in out and "accelerator" in out and "total: accelerator" in out
    y = np.load(files / "y.npy")
    expected = load_model(files / "m.twm").run(np.load(files / "x.npy"))
    np.testing.assert_array_equal(y, next(iter(expected.values())))
    assert main(["run", str(files / "m.twm"), "--input", str(files / "x.npy"), "--output", str(files / "r.npy"),
                 "--backend", "rtl", "--workers", "2"]) == 0
    assert "2 layers at once" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(files / "r.npy"), y)


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "tilewright.cli", *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize("case", ["truncated onnx", "unsupported op", "wrong shape", "corrupted twm", "wrong dtype",
                                  "missing input file", "truncated npz", "bad batch", "bad percentile",
                                  "percentile without its method", "workers on fsim"])
def test_cli_bad_inputs_are_one_line_errors(files, case):
    d = files
    if case == "truncated onnx":
        (d / "t.onnx").write_bytes((d / "m.onnx").read_bytes()[:700])
        r, what = _cli("compile", d / "t.onnx", "-o", d / "t.twm"), "t.onnx"
    elif case == "unsupported op":
        (d / "u.onnx").write_bytes(_unsupported().SerializeToString())
        r, what = _cli("compile", d / "u.onnx", "-o", d / "u.twm"), "org.example"
    elif case == "wrong shape":
        np.save(d / "bad.npy", np.zeros((1, 3, 8, 8), np.float32))
        r, what = _cli("run", d / "m.twm", "--input", d / "bad.npy"), "shape 1×3×8×8"
    elif case == "corrupted twm":
        data = bytearray((d / "m.twm").read_bytes())
        data[len(data) // 2:len(data) // 2 + 100] = bytes(100)
        (d / "c.twm").write_bytes(bytes(data))
        r, what = _cli("run", d / "c.twm", "--input", d / "x.npy"), "c.twm"
    elif case == "wrong dtype":
        np.save(d / "int.npy", np.zeros((1, 3, 12, 12), np.int8))
        r, what = _cli("run", d / "m.twm", "--input", d / "int.npy"), "dtype int8"
    elif case == "truncated npz":
        np.savez(d / "in.npz", input=np.load(d / "x.npy"))
        (d / "t.npz").write_bytes((d / "in.npz").read_bytes()[:200])
        r, what = _cli("run", d / "m.twm", "--input", d / "t.npz"), "t.npz"
    elif case == "bad percentile":
        r, what = _cli("compile", d / "m.onnx", "-o", d / "p.twm", "--calib", d / "calib.npy", "--method",
                       "percentile", "--percentile", "150"), "percentile 150.0: must be in (0, 100]"
    elif case == "percentile without its method":
        r, what = _cli("compile", d / "m.onnx", "-o", d / "p.twm", "--percentile", "99"), "--method percentile"
    elif case == "workers on fsim":
        r, what = _cli("run", d / "m.twm", "--input", d / "x.npy", "--workers", "2"), "--workers is for --backend rtl"
    elif case == "bad batch":
        r, what = _cli("compile", d / "m.onnx", "-o", d / "b.twm", "--batch", "-1"), "--batch"
        assert r.returncode == 2 and "not a positive integer" in r.stderr     # argparse's usage error
        return
    else:
        r, what = _cli("run", d / "m.twm", "--input", d / "nothing.npy"), "nothing.npy"
    assert r.returncode == 1, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and what in errors[0], r.stderr
    assert "Traceback" not in r.stderr


def test_digits_demo_meets_its_targets():
    from tilewright.examples.digits.demo import run_demo
    result = run_demo("default", log=lambda line: None)
    assert result["images"] == 360
    assert result["int8_accuracy"] >= result["float_accuracy"] - 0.01
    assert result["float_accuracy"] > 0.9
    assert result["rtl_matches_fsim"] and result["rtl_cycles"] > 0


def test_prequantized_model_runs_with_onnx_semantics():
    """A QLinearConv model the accelerator cannot run (two groups) stays on the host, exactly as onnx.reference
    says."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(10)
    inits = {"xs": np.array(0.05, np.float32), "xz": np.array(3, np.int8), "w": rng.integers(-20, 20, (4, 1, 3, 3),
             dtype=np.int8), "ws": np.array(0.02, np.float32), "wz": np.array(0, np.int8),
             "ys": np.array(0.1, np.float32), "yz": np.array(-2, np.int8)}
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="qconv",
                            pads=[1, 1, 1, 1], group=2)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [1, 2, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, [1, 4, 5, 5])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m = compile_model(model.SerializeToString(), "default")
    assert [(s.name, s.where) for s in m.steps] == [("qconv", "host")]
    x = rng.integers(-128, 128, (1, 2, 5, 5), dtype=np.int8)
    np.testing.assert_array_equal(m.run(x)["y"], ReferenceEvaluator(model).run(None, {"x": x})[0])


def _qdq_model(rng):
    """x → Q/DQ → Conv(DQ(w1)) → Relu → Q/DQ → Conv(DQ(w2)) → Q/DQ: a symmetric int8 QDQ model."""
    scales = {"s_in": 0.03, "s_mid": 0.05, "s_out": 0.08}
    inits = {k: np.array(v, np.float32) for k, v in scales.items()} | {"zp": np.array(0, np.int8)}
    inits |= {"w1q": rng.integers(-127, 128, (16, 3, 3, 3), dtype=np.int8), "w1s": np.full(16, 0.004, np.float32),
              "w2q": rng.integers(-127, 128, (8, 16, 3, 3), dtype=np.int8), "w2s": np.array(0.002, np.float32),
              "b1": rng.normal(0, 0.05, 16).astype(np.float32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s_in", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s_in", "zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w1q", "w1s"], ["w1"], axis=0),
             helper.make_node("Conv", ["xd", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("QuantizeLinear", ["r1", "s_mid", "zp"], ["r1q"]),
             helper.make_node("DequantizeLinear", ["r1q", "s_mid", "zp"], ["r1d"]),
             helper.make_node("DequantizeLinear", ["w2q", "w2s"], ["w2"]),
             helper.make_node("Conv", ["r1d", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c2", "s_out", "zp"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "s_out", "zp"], ["y"])]
    g = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])],
                          [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)]), scales


def test_qdq_model_runs_on_the_accelerator_with_its_own_scales():
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(11)
    model, scales = _qdq_model(rng)
    calib = rng.uniform(-2, 2, (4, 3, 8, 8)).astype(np.float32)
    m = compile_model(model.SerializeToString(), "default", calibration=calib)
    layers = [s for s in m.steps if s.where == "accelerator"]
    assert [s.name for s in layers] == ["conv1", "conv2"]
    ops = [s.node.op for s in m.steps]        # only the model's input is quantized, its output dequantized
    assert ops.count("QuantizeLinear") == 1 and ops.count("DequantizeLinear") == 1
    assert [s.node.attr("output_scale") for s in layers] == pytest.approx([scales["s_mid"], scales["s_out"]])
    x = rng.uniform(-2, 2, (1, 3, 8, 8)).astype(np.float32)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    # the accelerator's integer rescale vs ONNX's float one: at most a step apart per layer
    assert np.abs(m.run(x)["y"] - expected).max() <= 2 * scales["s_out"] + 1e-6
    assert sqnr_db(expected, m.run(x)["y"]) > 30


def test_duplicate_onnx_node_names_get_distinct_layers(calib):
    """ONNX does not require unique node names; two layers called "conv" must keep their own weights."""
    model = small_resnet(SEED)
    for n in model.graph.node:
        if n.op_type == "Conv":
            n.name = "conv"
    m = compile_model(model.SerializeToString(), "default", calibration=calib)
    names = [s.name for s in m.steps if s.where == "accelerator"]
    assert len(names) == len(set(names)) == 7
    x = np.random.default_rng(12).standard_normal((1, 3, 12, 12)).astype(np.float32)
    name = m.graph.outputs[0].name
    assert sqnr_db(run_graph(load_onnx(model.SerializeToString()), {"input": x})[name], m.run(x)[name]) > 20


def test_clip_with_only_an_upper_bound_stays_on_the_host():
    model = _one_conv()
    model.graph.node[1].CopyFrom(helper.make_node("Clip", ["c", "", "hi"], ["y"], name="clip"))
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "hi"))
    m = compile_model(model.SerializeToString(), "default")
    assert [(s.where, s.why) for s in m.steps] == [("host", "Clip with min -inf")]
    x = np.random.default_rng(13).standard_normal((1, 4, 6, 6)).astype(np.float32)
    np.testing.assert_allclose(m.run(x)["y"], run_graph(load_onnx(model.SerializeToString()), {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_configs_other_than_int8_int32_are_refused(tmp_path):
    path = tmp_path / "acc16.toml"
    path.write_text('base = "small"\nacc_width = 16\n')
    with pytest.raises(ModelError, match=r"widths \(8, 8, 16, 8\)"):
        compile_model(small_resnet(SEED).SerializeToString(), str(path))


def test_percentile_calibration_keeps_the_overflow_bound_at_the_maximum(calib):
    graph = small_resnet_graph(SEED)
    feeds = [calib[i:i + 1] for i in range(8)]
    peaks, pct = calibrate(graph, feeds, "max"), calibrate(graph, feeds, "percentile", percentile=90.0)
    preacts = [k for k in peaks if k.endswith("/preact")]
    assert len(preacts) == 7 and all(pct[k] == peaks[k] for k in preacts)
    assert all(pct[k] < peaks[k] for k in peaks if not k.endswith("/preact") and peaks[k] > 0)


def test_pytorch_style_view_glue_runs_around_the_accelerator():
    """conv → relu → x.view(n, -1) (Shape/Gather/Unsqueeze/Concat/Reshape) → fc with a dynamic batch."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(14)
    consts = {"w1": (rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32),
              "w2": (rng.standard_normal((10, 128)) * 0.1).astype(np.float32),
              "zero": np.array(0, np.int64), "ax0": np.array([0], np.int64), "m1": np.array([-1], np.int64)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2], name="conv"),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Shape", ["r"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax0"], ["n1"]),
             helper.make_node("Concat", ["n1", "m1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["r", "shape"], ["f"]),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc")]
    g = helper.make_graph(nodes, "view", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 10])],
                          [numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m = compile_model(model.SerializeToString(), "default",
                      calibration=rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    assert [s.name for s in m.steps if s.where == "accelerator"] == ["conv", "fc"]
    assert [s.node.op for s in m.steps].count("DequantizeLinear") == 1        # the output only
    x = rng.standard_normal((5, 3, 8, 8)).astype(np.float32)
    assert sqnr_db(ReferenceEvaluator(model).run(None, {"x": x})[0], m.run(x)["y"]) > 20


def test_outputs_named_like_numpys_own_arguments_are_written(tmp_path, capsys):
    """`run -o out.npz` keeps every output under its own name, even `file` or `allow_pickle` (numpy.savez's
    parameters) or one with a slash."""
    names = ["file", "allow_pickle", "a/b"]
    nodes = [helper.make_node(op, ["x"], [name]) for op, name in zip(("Relu", "Neg", "Abs"), names)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 3]) for n in names])
    (tmp_path / "m.onnx").write_bytes(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
                                      .SerializeToString())
    x = np.random.default_rng(14).standard_normal((2, 3)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert main(["compile", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "m.twm"), "-c", "tiny"]) == 0
    assert main(["run", str(tmp_path / "m.twm"), "-i", str(tmp_path / "x.npy"), "-o", str(tmp_path / "y.npz")]) == 0
    with np.load(tmp_path / "y.npz") as y:
        assert sorted(y.files) == sorted(names)
        for name, expected in zip(names, (np.maximum(x, 0), -x, np.abs(x))):
            np.testing.assert_array_equal(y[name], expected)
