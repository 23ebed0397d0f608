"""Train the digits demo's CNN in numpy and export it to ONNX.

    .venv/bin/python examples/digits/train.py [--epochs 40] [--output examples/digits/digits_cnn.onnx]

Network (input N×1×8×8 in [0, 1]): conv 3×3 1→16 pad 1 + ReLU, conv 3×3
16→32 stride 2 pad 1 + ReLU, flatten, dense 512→10. Trained with Adam on
softmax cross-entropy over the training part of
:func:`tilewright.examples.digits.demo.load_split`; deterministic for a given seed. The
export uses ``onnx.helper`` with a dynamic batch dimension, and is checked
against ``onnx.reference.ReferenceEvaluator`` before it is written.
"""

import argparse
from pathlib import Path

import numpy as np

from tilewright.examples.digits.demo import MODEL_PATH, load_split

LAYERS = [  # (name, out channels, stride)
    ("conv1", 16, 1),
    ("conv2", 32, 2),
]


def im2col(x, k, stride, pad):
    """(N, C, H, W) → rows (N·OH·OW, C·k·k) of the padded input's k×k windows."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    N, C, H, W = x.shape
    OH, OW = (H - k) // stride + 1, (W - k) // stride + 1
    cols = np.empty((N, C, k, k, OH, OW), x.dtype)
    for i in range(k):
        for j in range(k):
            cols[:, :, i, j] = x[:, :, i:i + stride * OH:stride, j:j + stride * OW:stride]
    return cols.transpose(0, 4, 5, 1, 2, 3).reshape(N * OH * OW, C * k * k), (OH, OW)


def col2im(dcols, shape, k, stride, pad, out_hw):
    """The adjoint of :func:`im2col`: window gradients summed back into an input-shaped array."""
    N, C, H, W = shape
    OH, OW = out_hw
    d = dcols.reshape(N, OH, OW, C, k, k).transpose(0, 3, 4, 5, 1, 2)
    dx = np.zeros((N, C, H + 2 * pad, W + 2 * pad), dcols.dtype)
    for i in range(k):
        for j in range(k):
            dx[:, :, i:i + stride * OH:stride, j:j + stride * OW:stride] += d[:, :, i, j]
    return dx[:, :, pad:pad + H, pad:pad + W]


def init(rng):
    params, cin = {}, 1
    for name, cout, _ in LAYERS:
        params[f"{name}.w"] = rng.standard_normal((cout, cin, 3, 3)) * np.sqrt(2.0 / (cin * 9))
        params[f"{name}.b"] = np.zeros(cout)
        cin = cout
    params["fc.w"] = rng.standard_normal((10, cin * 16)) * np.sqrt(1.0 / (cin * 16))
    params["fc.b"] = np.zeros(10)
    return params


def forward(params, x):
    """Logits and the cache the backward pass needs."""
    cache, a = [], x
    for name, cout, stride in LAYERS:
        cols, (OH, OW) = im2col(a, 3, stride, 1)
        z = cols @ params[f"{name}.w"].reshape(cout, -1).T + params[f"{name}.b"]
        cache.append((a.shape, cols, z, (OH, OW)))
        a = np.maximum(z, 0).reshape(a.shape[0], OH, OW, cout).transpose(0, 3, 1, 2)
    flat = a.reshape(a.shape[0], -1)
    return flat @ params["fc.w"].T + params["fc.b"], (cache, flat)


def backward(params, cache, flat, dlogits):
    grads = {"fc.w": dlogits.T @ flat, "fc.b": dlogits.sum(0)}
    da = (dlogits @ params["fc.w"]).reshape(-1, LAYERS[-1][1], 4, 4)
    for (name, cout, stride), (shape, cols, z, hw) in zip(reversed(LAYERS), reversed(cache)):
        dz = da.transpose(0, 2, 3, 1).reshape(-1, cout) * (z > 0)
        grads[f"{name}.w"] = (dz.T @ cols).reshape(params[f"{name}.w"].shape)
        grads[f"{name}.b"] = dz.sum(0)
        da = col2im(dz @ params[f"{name}.w"].reshape(cout, -1), shape, 3, stride, 1, hw)
    return grads


def train(x, y, epochs, seed, lr=2e-3, batch=32, log=print):
    rng = np.random.default_rng(seed)
    params = init(rng)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(p) for k, p in params.items()}
    x = x.astype(np.float64)
    step = 0
    for epoch in range(epochs):
        order = rng.permutation(len(x))
        loss = 0.0
        for s in range(0, len(x), batch):
            idx = order[s:s + batch]
            logits, (cache, flat) = forward(params, x[idx])
            p = np.exp(logits - logits.max(1, keepdims=True))
            p /= p.sum(1, keepdims=True)
            loss += -np.log(p[np.arange(len(idx)), y[idx]] + 1e-12).sum()
            p[np.arange(len(idx)), y[idx]] -= 1
            grads = backward(params, cache, flat, p / len(idx))
            step += 1
            for k, g in grads.items():      # Adam
                m[k] = 0.9 * m[k] + 0.1 * g
                v[k] = 0.999 * v[k] + 0.001 * g * g
                params[k] -= lr * (m[k] / (1 - 0.9 ** step)) / (np.sqrt(v[k] / (1 - 0.999 ** step)) + 1e-8)
        if (epoch + 1) % 5 == 0 or epoch == 0:
            log(f"epoch {epoch + 1:3}: loss {loss / len(x):.4f}")
    return params


def export(params):
    """The trained network as an ``onnx.ModelProto`` (opset 17, batch dimension ``N``)."""
    from onnx import TensorProto, checker, helper, numpy_helper

    inits = [numpy_helper.from_array(v.astype(np.float32), k) for k, v in params.items()]
    nodes, x = [], "image"
    for name, _, stride in LAYERS:
        nodes.append(helper.make_node("Conv", [x, f"{name}.w", f"{name}.b"], [f"{name}.out"], name=name,
                                      kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[stride, stride]))
        nodes.append(helper.make_node("Relu", [f"{name}.out"], [f"{name}.relu"], name=f"{name}.relu"))
        x = f"{name}.relu"
    nodes.append(helper.make_node("Flatten", [x], ["flat"], name="flatten", axis=1))
    nodes.append(helper.make_node("Gemm", ["flat", "fc.w", "fc.b"], ["logits"], name="fc", transB=1))
    graph = helper.make_graph(nodes, "digits_cnn",
                              [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tilewright")
    checker.check_model(model)
    return model


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", type=Path, default=MODEL_PATH)
    args = ap.parse_args()
    x_train, y_train, x_test, y_test = load_split()
    params = train(x_train, y_train, args.epochs, args.seed)
    accuracy = np.mean(forward(params, x_test.astype(np.float64))[0].argmax(1) == y_test)
    model = export(params)
    from onnx.reference import ReferenceEvaluator
    onnx_logits = ReferenceEvaluator(model).run(None, {"image": x_test})[0]
    np.testing.assert_allclose(onnx_logits, forward(params, x_test.astype(np.float64))[0], rtol=1e-3, atol=1e-3,
                               err_msg="the ONNX export disagrees with the numpy model")
    args.output.write_bytes(model.SerializeToString())
    print(f"test accuracy {100 * accuracy:.2f} % ({len(x_test)} images); wrote {args.output} "
          f"({args.output.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
