"""Standard ONNX operators without a native host kernel, run through ``onnx.reference``.

The importer keeps such a node's ``NodeProto`` (and the model's opset
versions) in its attributes (:data:`PROTO`, :data:`OPSETS`); :func:`run`
evaluates it with ONNX's own reference evaluator, one node at a time, so
any operator of the standard domains (``ai.onnx``, ``ai.onnx.ml``) runs on
the host, correctly if slowly. The partition table says which nodes do.
"""

import numpy as np

from .ir import ModelError

__all__ = ["STANDARD_DOMAINS", "PROTO", "OPSETS", "is_standard", "reference_node", "is_reference", "run"]

#: The domains whose every operator Tilewright takes ("" and "ai.onnx" are the same).
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")

#: Node attributes of a reference node: its serialized NodeProto (uint8 array) and {domain: opset version}.
PROTO, OPSETS = "onnx_node", "onnx_opsets"

_EVALUATORS = {}        # (proto bytes, opsets, input types) -> ReferenceEvaluator


def is_standard(op, domain):
    """Whether ``op`` is an operator of standard ``domain`` (ONNX's own schema registry says)."""
    import onnx.defs
    return domain in STANDARD_DOMAINS and onnx.defs.has(op, "" if domain == "ai.onnx" else domain)


def reference_node(proto, opsets):
    """The attributes of a node run through ``onnx.reference``: ``proto`` (a NodeProto) and the model's
    ``opsets`` ({domain: version})."""
    return {PROTO: np.frombuffer(proto.SerializeToString(), dtype=np.uint8).copy(), OPSETS: dict(opsets)}


def is_reference(node):
    return PROTO in node.attrs


def run(node, values):
    """Outputs of reference ``node`` for its input arrays ``values`` (None for omitted optional inputs)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    proto_bytes = np.asarray(node.attrs[PROTO], dtype=np.uint8).tobytes()
    opsets = {k: int(v) for k, v in node.attrs[OPSETS].items()}
    names = [name for name, v in zip(node.inputs, values) if name and v is not None]
    feeds = {name: v for name, v in zip(node.inputs, values) if name and v is not None}
    key = (proto_bytes, tuple(sorted(opsets.items())),
           tuple((name, np.asarray(v).dtype.str, np.ndim(v)) for name, v in feeds.items()))
    if key not in _EVALUATORS:
        from onnx import NodeProto
        proto = NodeProto()
        proto.ParseFromString(proto_bytes)
        inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.asarray(feeds[name]).dtype),
                                                [None] * np.ndim(feeds[name])) for name in names]
        outputs = [helper.make_empty_tensor_value_info(name) for name in proto.output if name]
        graph = helper.make_graph([proto], f"{node.name}_reference", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
        try:
            _EVALUATORS[key] = ReferenceEvaluator(model)
        except Exception as e:          # (onnx.reference raises many kinds; the node is what matters)
            raise ModelError(f"node {node}: onnx.reference cannot run {proto.op_type}: {_first_line(e)}") from None
    try:
        return list(_EVALUATORS[key].run(None, feeds))
    except Exception as e:
        raise ModelError(f"node {node}: {node.op} (onnx.reference): {_first_line(e)}") from None


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
