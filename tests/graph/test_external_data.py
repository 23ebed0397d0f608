"""Models whose weights ONNX keeps in a file beside the model (external data)."""

import os

import numpy as np
import onnx
import pytest

from tilewright.compiler.graph import ModelError, load_onnx, run_graph

from ..models import small_resnet


@pytest.fixture
def saved(tmp_path):
    """The test ResNet saved with its tensors in ``weights/m.data`` beside ``m.onnx``, and the model itself."""
    model = small_resnet(seed=5)
    (tmp_path / "weights").mkdir()
    onnx.save(small_resnet(seed=5), tmp_path / "m.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights/m.data", size_threshold=64)
    return tmp_path, model


def test_external_data_is_read_from_beside_the_model_whatever_the_working_directory(saved, monkeypatch):
    folder, model = saved
    assert (folder / "weights" / "m.data").stat().st_size > 10_000        # (the weights really are outside)
    monkeypatch.chdir(os.path.dirname(folder))
    graph = load_onnx(folder / "m.onnx")
    x = np.random.default_rng(0).standard_normal((1, 3, 12, 12)).astype(np.float32)
    expected = run_graph(load_onnx(model.SerializeToString()), {"input": x})
    np.testing.assert_array_equal(run_graph(graph, {"input": x})[graph.outputs[0].name],
                                  expected[graph.outputs[0].name])


@pytest.mark.parametrize("damage, message", [
    ("missing", "its external data weights/m.data is missing"),
    ("truncated", "external data"),
    ("bytes", "give the model as a file path"),
    ("escaping", "points outside the model's folder"),
])
def test_missing_or_damaged_external_data_is_one_line(saved, damage, message):
    folder, _ = saved
    data = folder / "weights" / "m.data"
    if damage == "missing":
        data.unlink()
    elif damage == "truncated":
        data.write_bytes(data.read_bytes()[:5000])
    elif damage == "escaping":
        model = onnx.load(folder / "m.onnx", load_external_data=False)
        for t in model.graph.initializer:
            for entry in t.external_data:
                if entry.key == "location":
                    entry.value = "../m.data"
        (folder / "m.onnx").write_bytes(model.SerializeToString())
    source = (folder / "m.onnx").read_bytes() if damage == "bytes" else folder / "m.onnx"
    with pytest.raises(ModelError) as e:
        load_onnx(source)
    assert message in str(e.value) and "\n" not in str(e.value)
