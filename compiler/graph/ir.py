"""The graph IR: a model as a list of operator nodes over named tensors.

Deliberately close to ONNX (op types, attribute names and input order are
ONNX's), so import is a translation of containers, and every pass is a
function from a :class:`Graph` to a new one. Constant tensors live in
``Graph.constants`` as numpy arrays; everything else is computed by a node
or is a graph input.
"""

from dataclasses import dataclass, field

import numpy as np

__all__ = ["ModelError", "Node", "TensorInfo", "Graph"]


class ModelError(ValueError):
    """A model that cannot be imported, compiled or run; the message names the node or file."""


@dataclass
class Node:
    """One operator: ``op`` (an ONNX op type, or a Tilewright one such as ``QConv``) applied to named tensors.

    An empty input name is an omitted optional input, as in ONNX.
    """
    op: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    name: str = ""

    def __str__(self):
        return f"{self.name or '?'} ({self.op})"

    def attr(self, key, default=None):
        return self.attrs.get(key, default)


@dataclass(frozen=True)
class TensorInfo:
    """Name, shape (ints, or None for an unknown dimension) and numpy dtype of a graph input or output."""
    name: str
    shape: tuple
    dtype: np.dtype

    def check(self, array):
        """``array`` as this input wants it, or :class:`ModelError` saying what is wrong."""
        array = np.asarray(array)
        if array.dtype != self.dtype:
            raise ModelError(f"input {self.name!r}: dtype {array.dtype}, the model wants {self.dtype}")
        if len(array.shape) != len(self.shape) or any(
                d is not None and d != n for d, n in zip(self.shape, array.shape)):
            want = "×".join("?" if d is None else str(d) for d in self.shape)
            raise ModelError(f"input {self.name!r}: shape {'×'.join(map(str, array.shape)) or 'scalar'}, "
                             f"the model wants {want}")
        return array


@dataclass
class Graph:
    """Nodes in topological order, graph inputs/outputs, and constant tensors by name."""
    nodes: list
    inputs: list                  # [TensorInfo]
    outputs: list                 # [TensorInfo] (shape/dtype may be unknown: None)
    constants: dict = field(default_factory=dict)
    name: str = "model"
    opset: int = 17               # of the default ONNX domain: some ops (Softmax) changed meaning over time

    def producer(self):
        """Tensor name -> the node computing it."""
        return {out: n for n in self.nodes for out in n.outputs}

    def consumers(self):
        """Tensor name -> the nodes reading it."""
        readers = {}
        for n in self.nodes:
            for i in n.inputs:
                if i:
                    readers.setdefault(i, []).append(n)
        return readers

    def replace(self, **changes):
        fields = dict(nodes=self.nodes, inputs=self.inputs, outputs=self.outputs, constants=self.constants,
                      name=self.name, opset=self.opset)
        fields.update(changes)
        return Graph(**fields)

    def __str__(self):
        lines = [f"graph {self.name}(" + ", ".join(f"{i.name}: {i.dtype}{list(i.shape)}" for i in self.inputs)
                 + ") -> " + ", ".join(o.name for o in self.outputs)]
        for n in self.nodes:
            attrs = ", ".join(f"{k}={_short(v)}" for k, v in n.attrs.items())
            lines.append(f"  {', '.join(n.outputs)} = {n.op}({', '.join(n.inputs)}){' {' + attrs + '}' if attrs else ''}")
        return "\n".join(lines)


def _short(v):
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    return repr(v)
