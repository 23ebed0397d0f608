"""The digits demo: a small CNN trained on scikit-learn's 8×8 handwritten digits.

``examples/digits/train.py`` trains it in numpy and exports
``examples/digits/digits_cnn.onnx`` (package ``tilewright.examples.digits``) (committed); :func:`run_demo` quantizes
and compiles it for the accelerator, measures float and int8 (fsim)
accuracy over the whole test split, and runs one image through the RTL.
"""

import time
from pathlib import Path

import numpy as np

__all__ = ["MODEL_PATH", "load_split", "run_demo"]

MODEL_PATH = Path(__file__).with_name("digits_cnn.onnx")
TEST_FRACTION = 0.2


def load_split(seed=0):
    """``(x_train, y_train, x_test, y_test)``: images as float32 ``N×1×8×8`` in [0, 1], a fixed stratified split."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None]
    return tuple(train_test_split(x, digits.target, test_size=TEST_FRACTION, random_state=seed,
                                  stratify=digits.target)[i] for i in (0, 2, 1, 3))


def run_demo(config="default", *, rtl=True, calibration_samples=200, log=print):
    """Run the demo; returns a dict of what it measured (and logs a report through ``log``)."""
    from tilewright.compiler.graph import load_onnx, run_graph
    from tilewright.runtime.model import compile_model

    x_train, _, x_test, y_test = load_split()
    graph = load_onnx(MODEL_PATH)
    out = graph.outputs[0].name
    log(f"model {MODEL_PATH.name}: {len(graph.nodes)} ONNX nodes; digits test split: {len(x_test)} images")

    float_pred = run_graph(graph, {graph.inputs[0].name: x_test})[out].argmax(1)
    float_acc = float(np.mean(float_pred == y_test))
    log(f"float accuracy (host, numpy):            {100 * float_acc:.2f} %")

    start = time.perf_counter()
    model = compile_model(graph, config, calibration=x_train[:calibration_samples], log=log)
    log(f"quantized and compiled for config {model.config.name} in {time.perf_counter() - start:.2f} s")

    start = time.perf_counter()
    logits = model.run(x_test, backend="fsim", progress=True)[out]
    fsim_seconds = time.perf_counter() - start
    int8_acc = float(np.mean(logits.argmax(1) == y_test))
    log(f"int8 accuracy on the accelerator (fsim): {100 * int8_acc:.2f} %  "
        f"({len(x_test)} images in {fsim_seconds:.1f} s; float - int8 = {100 * (float_acc - int8_acc):+.2f} pp)")
    result = dict(float_accuracy=float_acc, int8_accuracy=int8_acc, fsim_seconds=fsim_seconds, images=len(x_test))

    if rtl:
        log("one image through the cycle-accurate RTL (Verilator; the first run builds it, a minute or two)")
        image = x_test[:1]
        fsim_out, _ = model.run(image, backend="fsim", profile=True)
        rtl_out, rows = model.run(image, backend="rtl", profile=True)
        same = all(np.array_equal(fsim_out[k], rtl_out[k]) for k in fsim_out)
        cycles = sum(r["cycles"] or 0 for r in rows)
        for r in rows:
            if r["where"] == "accelerator":
                log(f"  {r['node']:10} {r['op']:6} {r['cycles']:>7} cycles  {r['macs']:>7} MACs")
        log(f"RTL: label {y_test[0]}, predicted {int(rtl_out[out].argmax())}; {cycles} accelerator cycles; "
            f"output {'identical to' if same else 'DIFFERENT from'} fsim bit for bit")
        result.update(rtl_cycles=cycles, rtl_matches_fsim=same)
    return result
