"""The small ResNet the graph and model tests share (one builder, from the library's zoo)."""

from tilewright.compiler.graph import load_onnx
from tilewright.compiler.graph.passes import simplify
from tilewright.compiler.graph.zoo import resnet


def small_resnet(seed=0, batch=1):
    """A ResNet of two one-block stages (8 and 16 channels) on 3×12×12 images: 3×3/1 stem, no pool, 10 classes."""
    return resnet(blocks=(1, 1), widths=(8, 16), image=12, stem=(3, 1, False), classes=10, seed=seed, batch=batch)


def small_resnet_graph(seed=0):
    """:func:`small_resnet` imported (from bytes, as a file would be) and simplified: the float graph."""
    return simplify(load_onnx(small_resnet(seed).SerializeToString()))
