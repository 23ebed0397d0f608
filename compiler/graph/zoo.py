"""ONNX models built with ``onnx.helper``, with random weights: ResNets (torchvision's architecture) and
MobileNetV2-style networks.

Used by the tests and benchmarks; ``resnet18()`` is torchvision's
ResNet-18 at 224×224 (conv 7×7/2, max pool, four stages of two basic
blocks, global average pool, fully connected). ``mobilenet_v2()`` builds
inverted residual blocks (1×1 expansion, 3×3 depthwise, 1×1 projection,
ReLU6 as ``Clip(0, 6)``, a residual Add where shapes allow) as exporters
write them.
"""

import numpy as np

__all__ = ["resnet", "resnet18", "mobilenet_v2"]


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

    def conv_bn(self, x, cin, cout, k, stride, relu=True, group=1):
        """Conv (``group`` groups) + BatchNormalization, then ``relu``: True for Relu, 6.0 for ReLU6 (Clip)."""
        fan_in = cin // group * k * k
        w = self.rng.standard_normal((cout, cin // group, k, k)) * np.sqrt(2.0 / fan_in)
        y = self.node("Conv", [x, self.const(w, "w")], kernel_shape=[k, k], strides=[stride, stride],
                      pads=[k // 2] * 4, group=group)
        stats = [self.rng.uniform(0.5, 1.5, cout), self.rng.normal(0, 0.1, cout), self.rng.normal(0, 0.1, cout),
                 self.rng.uniform(0.5, 1.5, cout)]
        y = self.node("BatchNormalization", [y] + [self.const(s, n) for s, n in zip(stats, "sbmv")])
        if relu is True:
            return self.node("Relu", [y])
        if relu:
            return self.node("Clip", [y, self.const(np.array(0.0), "lo"), self.const(np.array(relu), "hi")])
        return y

    def classifier_model(self, x, cin, classes, name, input_shape):
        """Global average pool, flatten and a fully connected layer on ``x`` (``cin`` channels): the
        ``onnx.ModelProto`` of everything built (opset 17), input ``input`` of ``input_shape``."""
        from onnx import TensorProto, helper
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        w = self.rng.standard_normal((classes, cin)) / np.sqrt(cin)
        x = self.node("Gemm", [x, self.const(w, "fc_w"), self.const(self.rng.normal(0, 0.01, classes), "fc_b")],
                      transB=1)
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, input_shape)],
                                  [helper.make_tensor_value_info(x, TensorProto.FLOAT, [input_shape[0], classes])],
                                  self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])

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
    return b.classifier_model(x, cin, classes, "resnet", [batch, in_channels, image, image])


def resnet18(seed=0, image=224, batch=1):
    """torchvision's ResNet-18 (ImageNet stem, 1000 classes) with random weights."""
    return resnet(seed=seed, image=image, batch=batch)


def mobilenet_v2(*, blocks=((1, 16, 1, 1), (4, 24, 2, 2), (4, 32, 2, 2)), stem=16, image=32, in_channels=3,
                 classes=10, seed=0, batch=1):
    """A MobileNetV2-style network as an ``onnx.ModelProto`` (random weights, opset 17): a 3×3/2 stem,
    then per ``(expansion, channels, repeats, stride)`` that many inverted residual blocks, a 1×1 conv to
    4× the last width, global average pool and a fully connected layer."""
    b = _Builder(seed)
    x = b.conv_bn("input", in_channels, stem, 3, 2, relu=6.0)
    cin = stem
    for expansion, width, repeats, stride in blocks:
        for j in range(repeats):
            s = stride if j == 0 else 1
            hidden = cin * expansion
            y = b.conv_bn(x, cin, hidden, 1, 1, relu=6.0) if expansion != 1 else x
            y = b.conv_bn(y, hidden, hidden, 3, s, relu=6.0, group=hidden)          # depthwise
            y = b.conv_bn(y, hidden, width, 1, 1, relu=False)                       # linear bottleneck
            x = b.node("Add", [y, x]) if s == 1 and cin == width else y
            cin = width
    x = b.conv_bn(x, cin, 4 * cin, 1, 1, relu=6.0)
    return b.classifier_model(x, 4 * cin, classes, "mobilenet_v2", [batch, in_channels, image, image])
