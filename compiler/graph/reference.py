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
STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview", "ai.onnx.preview.training")

#: Node attributes of a reference node: its serialized NodeProto (uint8 array), {domain: opset version}
#: and the outer-scope tensors its subgraphs read (If, Loop, Scan bodies), by their names in the file.
PROTO, OPSETS, OUTER = "onnx_node", "onnx_opsets", "onnx_outer"

_EVALUATORS = {}        # (proto bytes, opsets, input types) -> ReferenceEvaluator


def is_standard(op, domain):
    """Whether ``op`` is an operator of standard ``domain`` (ONNX's own schema registry says)."""
    import onnx.defs
    return domain in STANDARD_DOMAINS and onnx.defs.has(op, "" if domain == "ai.onnx" else domain)


def reference_node(proto, opsets):
    """``(attributes, extra inputs)`` of a node run through ``onnx.reference``: ``proto`` (a NodeProto), the
    model's ``opsets`` ({domain: version}) and the outer-scope tensors its subgraphs read, which the node
    takes as inputs after its own (so the graph computes them first and its passes see the dependency)."""
    outer = sorted(_outer_names(proto))
    return ({PROTO: np.frombuffer(proto.SerializeToString(), dtype=np.uint8).copy(), OPSETS: dict(opsets),
             OUTER: outer}, outer)


def _outer_names(proto):
    """Tensor names the subgraphs of ``proto`` read from enclosing scopes."""
    from onnx import AttributeProto
    names = set()
    for attr in proto.attribute:
        graphs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            local = {i.name for i in g.input} | {t.name for t in g.initializer}
            for n in g.node:
                names |= {i for i in n.input if i and i not in local} | (_outer_names(n) - local)
                local |= set(n.output)
    return names


def is_reference(node):
    return PROTO in node.attrs


def run(node, values):
    """Outputs of reference ``node`` for its input arrays ``values`` (None for omitted optional inputs)."""
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    proto_bytes = np.asarray(node.attrs[PROTO], dtype=np.uint8).tobytes()
    opsets = {k: int(v) for k, v in node.attrs[OPSETS].items()}
    outer = list(node.attrs.get(OUTER, []))
    own = len(node.inputs) - len(outer)
    # the outer-scope tensors go in under the names the subgraphs know them by
    pairs = list(zip(node.inputs[:own], values[:own])) + list(zip(outer, values[own:]))
    feeds = {name: v for name, v in pairs if name and v is not None}
    key = (proto_bytes, tuple(sorted(opsets.items())), tuple(node.outputs),
           tuple((name, _type_key(v)) for name, v in zip(node.inputs, values)))
    if key not in _EVALUATORS:
        from onnx import NodeProto
        proto = NodeProto()
        proto.ParseFromString(proto_bytes)
        # (graph passes rewire nodes: the tensor names are the node's now, not the file's)
        del proto.input[:], proto.output[:]
        proto.input.extend(node.inputs[:own])
        proto.output.extend(node.outputs)
        inputs = [_value_info(helper, name, value) for name, value in feeds.items()]
        outputs = [helper.make_empty_tensor_value_info(name) for name in proto.output if name]
        graph = helper.make_graph([proto], f"{node.name}_reference", inputs, outputs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
        try:
            _EVALUATORS[key] = ReferenceEvaluator(model)
        except Exception as e:          # (onnx.reference raises many kinds; the node is what matters)
            raise ModelError(f"node {node}: onnx.reference cannot run {proto.op_type}: {_first_line(e)}") from None
    try:
        produced = iter(_EVALUATORS[key].run(None, feeds))
        return [next(produced) if name else None for name in node.outputs]     # (omitted outputs stay None)
    except Exception as e:
        raise ModelError(f"node {node}: {node.op} (onnx.reference): {_first_line(e)}") from None


def _type_key(v):
    if v is None:
        return None
    if isinstance(v, list):
        return ("seq", len(v) and _type_key(v[0]))
    return (np.asarray(v).dtype.str, np.ndim(v))


def _value_info(helper, name, v):
    """A value info for input ``v``: a tensor of its dtype and rank, or a sequence of such tensors."""
    if isinstance(v, list):
        elem = np.asarray(v[0]).dtype if v else np.dtype(np.float32)
        return helper.make_tensor_sequence_value_info(name, helper.np_dtype_to_tensor_dtype(elem), None)
    v = np.asarray(v)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), [None] * v.ndim)


def _first_line(e):
    text = str(e).strip()
    return text.splitlines()[0][:200] if text else type(e).__name__
