"""Graph level: ONNX models as a graph IR, host execution, quantization and partitioning.

``load_onnx(path)`` imports a model; ``run_graph(graph, feeds)`` runs it on the
host (numpy) with ONNX semantics.
"""

from .host import HOST_OPS, host_runs, run_graph, run_node
from .ir import Graph, ModelError, Node, TensorInfo
from .onnx_import import from_onnx, load_onnx

__all__ = ["Graph", "Node", "TensorInfo", "ModelError", "load_onnx", "from_onnx", "run_graph", "run_node",
           "HOST_OPS", "host_runs"]
