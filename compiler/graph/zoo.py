"""ONNX models built with ``onnx.helper``, with random weights: ResNets (torchvision's architecture).

Used by the tests and benchmarks; ``resnet18()`` is torchvision's
ResNet-18 at 224×224 (conv 7×7/2, max pool, four stages of two basic
blocks, global average pool, fully connected).
"""

import numpy as np

__all__ = ["resnet", "resnet18"]


class _Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, kind):
        self.count += 1
        return f"{kind}{self.count}"

    def const(self, array, kind):
        from onnx import numpy_helper
        name = self.name(kind)
        self.inits.append(numpy_helper.from_array(np.asarray(array, dtype=np.float32), name))
        return name

    def node(self, op, inputs, **attrs):
        from onnx import helper
        out = self.name(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def conv_bn(self, x, cin, cout, k, stride, relu=True):
        fan_in = cin * k * k
        w = self.rng.standard_normal((cout, cin, k, k)) * np.sqrt(2.0 / fan_in)
        y = self.node("Conv", [x, self.const(w, "w")], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4)
        stats = [self.rng.uniform(0.5, 1.5, cout), self.rng.normal(0, 0.1, cout), self.rng.normal(0, 0.1, cout),
                 self.rng.uniform(0.5, 1.5, cout)]
        y = self.node("BatchNormalization", [y] + [self.const(s, n) for s, n in zip(stats, "sbmv")])
        return self.node("Relu", [y]) if relu else y

    def basic_block(self, x, cin, cout, stride):
        y = self.conv_bn(x, cin, cout, 3, stride)
        y = self.conv_bn(y, cout, cout, 3, 1, relu=False)
        shortcut = x if stride == 1 and cin == cout else self.conv_bn(x, cin, cout, 1, stride, relu=False)
        return self.node("Relu", [self.node("Add", [y, shortcut])])


def resnet(*, blocks=(2, 2, 2, 2), widths=(64, 128, 256, 512), image=224, in_channels=3, classes=1000,
           stem=(7, 2, True), seed=0, batch=1):
    """A torchvision-style ResNet of basic blocks as an ``onnx.ModelProto`` (random weights, opset 17).

    ``stem`` is (kernel, stride, max pool): (7, 2, True) for ImageNet, (3, 1, False) for small images.
    """
    from onnx import TensorProto, helper
    b = _Builder(seed)
    k, stride, pool = stem
    x = b.conv_bn("input", in_channels, widths[0], k, stride)
    if pool:
        x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = widths[0]
    for stage, (n, width) in enumerate(zip(blocks, widths)):
        for j in range(n):
            x = b.basic_block(x, cin, width, 2 if j == 0 and stage > 0 else 1)
            cin = width
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    w = b.rng.standard_normal((classes, cin)) / np.sqrt(cin)
    x = b.node("Gemm", [x, b.const(w, "fc_w"), b.const(b.rng.normal(0, 0.01, classes), "fc_b")], transB=1)
    graph = helper.make_graph(b.nodes, "resnet",
                              [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                             [batch, in_channels, image, image])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, classes])], b.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def resnet18(seed=0, image=224, batch=1):
    """torchvision's ResNet-18 (ImageNet stem, 1000 classes) with random weights."""
    return resnet(seed=seed, image=image, batch=batch)
