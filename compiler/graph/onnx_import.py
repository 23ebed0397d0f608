"""ONNX → graph IR.

Initializers and ``Constant`` nodes become constants; every other node is
kept as it is (op type, inputs, attributes), so the passes and the host
executor speak ONNX's operator semantics. Problems with the file itself
(truncated, not ONNX, failing ONNX's checker) raise :class:`ModelError`
with one line naming the file.
"""

from pathlib import Path

import numpy as np

from . import reference
from .contrib import CONTRIB_DOMAIN, CONTRIB_OPS
from .ir import Graph, ModelError, Node, TensorInfo

__all__ = ["load_onnx", "from_onnx"]


def load_onnx(source):
    """A :class:`Graph` from an ONNX file path, its bytes, or an ``onnx.ModelProto``."""
    import onnx
    from google.protobuf.message import DecodeError

    where = "model"
    if isinstance(source, (str, Path)):
        where = str(source)
        try:
            data = Path(source).read_bytes()
        except OSError as e:
            raise ModelError(f"{where}: cannot read ({e.strerror})") from None
    elif isinstance(source, (bytes, bytearray)):
        data = bytes(source)
    else:
        return from_onnx(source, where)
    try:
        model = onnx.load_model_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ModelError(f"{where}: not a valid ONNX file (truncated or corrupted: {e})") from None
    if not model.graph.node and not model.graph.output:
        raise ModelError(f"{where}: not a valid ONNX file (no graph)")
    _load_external_data(model, where, Path(source).resolve().parent if isinstance(source, (str, Path)) else None)
    return from_onnx(model, where)


def _tensors(graph):
    """Every TensorProto of ``graph``: initializers and node attributes, subgraphs' included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            for g in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _tensors(g)


def _load_external_data(model, where, folder):
    """Read the tensors ``model`` keeps in files beside it (ONNX's external data) from ``folder``, the model
    file's own (not the working directory); a model given as bytes has none to read them from."""
    from onnx import external_data_helper, helper
    tensors = [t for t in _tensors(model.graph) if external_data_helper.uses_external_data(t)]
    if not tensors:
        return
    files = sorted({e.value for t in tensors for e in t.external_data if e.key == "location"})
    if folder is None:
        raise ModelError(f"{where}: its weights are in external data ({', '.join(files)}); give the model as a "
                         f"file path so that they are read from beside it")
    for name in files:
        path = folder / name
        if ".." in Path(name).parts or Path(name).is_absolute():
            raise ModelError(f"{where}: external data location {name!r} points outside the model's folder")
        if not path.is_file():
            raise ModelError(f"{where}: its external data {name} is missing (looked for {path})")
    try:
        external_data_helper.load_external_data_for_model(model, str(folder))
    except (OSError, ValueError) as e:
        raise ModelError(f"{where}: cannot read its external data ({e})") from None
    for t in tensors:       # a short data file leaves a tensor with fewer bytes than its shape needs
        expected = int(np.prod(t.dims, dtype=np.int64)) * helper.tensor_dtype_to_np_dtype(t.data_type).itemsize
        if t.HasField("raw_data") and len(t.raw_data) != expected:
            raise ModelError(f"{where}: external data for {t.name} holds {len(t.raw_data)} bytes, its shape needs "
                             f"{expected} (a truncated {', '.join(files)}?)")


def from_onnx(model, where="model"):
    import onnx
    from onnx import helper, numpy_helper

    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else "invalid model"
        raise ModelError(f"{where}: ONNX checker: {first}") from None
    from .host import HOST_OPS
    g = model.graph
    opsets = {o.domain: o.version for o in model.opset_import}
    constants = {t.name: _float32(numpy_helper.to_array(t)) for t in g.initializer}
    nodes, taken = [], set()
    for k, n in enumerate(g.node):
        attrs = {a.name: _attribute(a) for a in n.attribute}
        # node names key everything derived from a node (its quantized weights, its profile row); ONNX does
        # not require them to be unique, so make them so
        name = n.name or f"{n.op_type}_{k}"
        while name in taken:
            name = f"{name}_{k}"
        taken.add(name)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
            constants[n.output[0]] = _float32(_constant_value(attrs, name))
            continue
        if n.domain == CONTRIB_DOMAIN:
            if n.op_type not in CONTRIB_OPS:
                raise ModelError(f"node {name}: {n.domain} operator {n.op_type} is not supported (of that domain, "
                                 f"Tilewright runs {', '.join(CONTRIB_OPS)})")
            nodes.append(Node(n.op_type, list(n.input), list(n.output), attrs, name))
            continue
        if n.domain not in reference.STANDARD_DOMAINS:
            raise ModelError(f"node {name} ({n.op_type}): operator domain {n.domain!r} is not supported")
        if not reference.is_standard(n.op_type, n.domain):
            raise ModelError(f"node {name}: {n.op_type} is not an operator of ONNX domain "
                             f"{n.domain or 'ai.onnx'!r}")
        inputs = list(n.input)
        if n.op_type not in HOST_OPS:        # (no kernel of our own: ONNX's reference evaluator runs it)
            attrs, outer = reference.reference_node(n, opsets)
            inputs += outer
        nodes.append(Node(n.op_type, inputs, list(n.output), attrs, name))
    inputs = [_info(v, helper) for v in g.input if v.name not in constants]
    outputs = [_info(v, helper) for v in g.output]
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    return Graph(nodes, inputs, outputs, constants, g.name or "model", opset)


def _float32(array):
    """float16 and float64 constants as float32: models of those types compute in float32 (their inputs
    and outputs keep the declared types)."""
    array = np.asarray(array)
    return array.astype(np.float32) if array.dtype in (np.float16, np.float64) else array


def _info(value, helper):
    t = value.type.tensor_type
    shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)) if t.elem_type else None
    return TensorInfo(value.name, shape, dtype)


def _attribute(a):
    from onnx import helper, numpy_helper
    value = helper.get_attribute_value(a)
    if isinstance(value, bytes):
        return value.decode()
    if hasattr(value, "dims") and hasattr(value, "data_type"):       # a TensorProto
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    return value


def _constant_value(attrs, name):
    if "value" in attrs:
        return attrs["value"]
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype=dtype)
    raise ModelError(f"node {name} (Constant): unsupported value attribute {sorted(attrs)}")
