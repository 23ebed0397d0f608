"""Float graph passes: each takes a :class:`Graph` and returns a new one.

``simplify`` runs them in order: identities out, constants folded,
batch norms folded into the convolutions before them, dead nodes removed,
then ``fuse`` groups each Conv/Gemm/MatMul with its bias, residual add and
ReLU/Clip into one ``TwConv``/``TwDense`` node, the unit the accelerator
runs. Fused nodes keep float semantics (``host.run_node`` runs them), so
calibration and the float baseline see the same graph the quantizer does.
"""

import numpy as np

from .host import run_node
from .ir import Node, TensorInfo

__all__ = ["simplify", "fold_constants", "remove_identities", "fold_batch_norm", "remove_dead", "fuse",
           "unfold_narrow_convs", "strip_fake_quant", "quantization_params", "lower_qoperator", "lower_integer_ops"]


def simplify(graph, keep=frozenset()):
    """All the passes below in order; ``keep`` names tensors fusion must not absorb (see :func:`fuse`)."""
    graph = fold_constants(remove_identities(graph))
    return fuse(remove_dead(fold_batch_norm(graph, keep)), keep)


def _rename(graph, mapping):
    """``graph`` with tensor names replaced per ``mapping`` in node inputs and graph outputs."""
    def name(n):
        while n in mapping:
            n = mapping[n]
        return n
    nodes = [Node(n.op, [name(i) for i in n.inputs], n.outputs, n.attrs, n.name) for n in graph.nodes]
    return nodes, name


def remove_identities(graph):
    """Identity and (inference-mode) Dropout nodes forward their input."""
    mapping, kept = {}, []
    outputs = {o.name for o in graph.outputs}
    for n in graph.nodes:
        if n.op in ("Identity", "Dropout") and n.outputs[0] not in outputs and not any(n.outputs[1:]):
            mapping[n.outputs[0]] = n.inputs[0]
        else:
            kept.append(n)
    nodes, _ = _rename(graph.replace(nodes=kept), mapping)
    return graph.replace(nodes=nodes)


def quantization_params(node, constants):
    """``(scale, zero point)`` of a QuantizeLinear/DequantizeLinear with one constant scale and an int8 or
    uint8 zero point (or none), else None. The zero point is given in the int8 domain: a uint8 tensor
    ``u`` stands for the int8 ``u - 128`` with its zero point moved the same way, which changes no value
    the pair represents (``s · (u - z) = s · ((u - 128) - (z - 128))``)."""
    scale = constants.get(node.inputs[1]) if len(node.inputs) > 1 else None
    zp = constants.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.array(0, np.uint8)
    if scale is None or np.size(scale) != 1 or np.size(zp) != 1 or zp.dtype not in (np.int8, np.uint8) \
            or node.attr("output_dtype", 0) or not float(np.asarray(scale).reshape(())) > 0:
        return None
    return float(np.asarray(scale).reshape(())), int(zp.reshape(())) - (128 if zp.dtype == np.uint8 else 0)


def strip_fake_quant(graph):
    """QuantizeLinear → DequantizeLinear pairs on activations (a QDQ model's fake quantization) removed;
    returns ``(graph, qparams)``: ``{tensor: (scale, zero point)}`` as the model quantizes each float tensor.

    A pair is taken when its quantization is one scale and an int8 or uint8
    zero point (:func:`quantization_params`) and every reader of the
    quantized tensor dequantizes it the same way. ``qparams`` holds those
    tensors and also the input of every other such QuantizeLinear and the
    output of every such DequantizeLinear of a computed tensor (a QOperator
    model's edges): the quantizer then gives the accelerator's layers the
    model's own scales and zero points. A tensor quantized two different
    ways gets none. Quantized weights (DequantizeLinear of a constant) are
    left to :func:`fold_constants`.
    """
    constants, consumers = graph.constants, graph.consumers()
    outputs = {o.name for o in graph.outputs}
    mapping, drop, seen = {}, set(), {}

    def record(tensor, params):
        seen.setdefault(tensor, set()).add(params)

    for node in graph.nodes:
        params = quantization_params(node, constants) if node.op in ("QuantizeLinear", "DequantizeLinear") else None
        if params is None or node.inputs[0] in constants:
            continue
        if node.op == "DequantizeLinear":
            record(node.outputs[0], params)
            continue
        record(node.inputs[0], params)
        readers = consumers.get(node.outputs[0], [])
        if node.outputs[0] in outputs or not readers or any(
                r.op != "DequantizeLinear" or quantization_params(r, constants) != params for r in readers):
            continue
        for dq in readers:
            mapping[dq.outputs[0]] = node.inputs[0]
            drop.add(id(dq))
        drop.add(id(node))
    if not mapping:
        return graph, _agreed(seen, mapping)
    kept = [n for n in graph.nodes if id(n) not in drop]
    nodes, name = _rename(graph.replace(nodes=kept), mapping)
    graph_outputs = [TensorInfo(o.name, o.shape, o.dtype) for o in graph.outputs]
    kept_graph = graph.replace(nodes=nodes, outputs=graph_outputs)
    # a graph output that was a DequantizeLinear's: keep the name with an Identity
    for o in graph.outputs:
        if name(o.name) != o.name:
            kept_graph.nodes.append(Node("Identity", [name(o.name)], [o.name], {}, f"{o.name}/out"))
    return remove_unused_constants(kept_graph), _agreed(seen, mapping)


def _agreed(seen, mapping):
    """The tensors (renamed per ``mapping``, a stripped DequantizeLinear's output to its pair's input) quantized
    one way only."""
    found = {}
    for tensor, params in seen.items():
        while tensor in mapping:
            tensor = mapping[tensor]
        found.setdefault(tensor, set()).update(params)
    return {t: next(iter(p)) for t, p in found.items() if len(p) == 1}


def lower_qoperator(graph):
    """A QOperator model's QLinearConv, QLinearMatMul and QGemm in QDQ form (DequantizeLinear → Conv /
    MatMul / Gemm with float weights and bias → QuantizeLinear), so that they fuse and quantize as a QDQ
    model's layers do and run on the accelerator with the model's scales, zero points and int8 weights.

    Taken only where the accelerator can run the result: constant weights
    with zero point 0, activations with one scale and an int8/uint8 zero
    point, a 2-D convolution of one group without dilation, equal strides
    and pads, and a quantized output. The others stay as they are and run on
    the host with ONNX's integer semantics.
    """
    constants, nodes = dict(graph.constants), []
    for n in graph.nodes:
        lowered = _lowered_qoperator(n, constants)
        nodes.extend(lowered if lowered is not None else [n])
    return remove_unused_constants(graph.replace(nodes=nodes, constants=constants))


#: Input positions of (x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, bias) in each QOperator node.
_QOPERATOR_INPUTS = {"QLinearConv": (0, 1, 2, 3, 4, 5, 6, 7, 8), "QLinearMatMul": (0, 1, 2, 3, 4, 5, 6, 7, None),
                     "QGemm": (0, 1, 2, 3, 4, 5, 7, 8, 6)}


def _lowered_qoperator(n, constants):
    """``[DequantizeLinear, Conv/MatMul/Gemm, QuantizeLinear]`` for QOperator node ``n``, or None (kept)."""
    if n.op not in _QOPERATOR_INPUTS:
        return None
    x, sx, zx, w, sw, zw, sy, zy, b = (n.inputs[k] if k is not None and k < len(n.inputs) else ""
                                       for k in _QOPERATOR_INPUTS[n.op])
    act_in, act_out = (Node("QuantizeLinear", [x, sx, zx], [""]), Node("QuantizeLinear", ["", sy, zy], [""]))
    if w not in constants or not sy or x in constants or any(
            t and t not in constants for t in (sx, zx, sw, zw, sy, zy, b)) \
            or quantization_params(act_in, constants) is None or quantization_params(act_out, constants) is None \
            or (zw and np.any(constants[zw] != 0)) or n.attr("transA", 0):
        return None
    wq = constants[w].astype(np.float64)
    if n.op == "QLinearConv":
        from .quantize import host_reason      # (quantize imports this module)
        if wq.ndim != 4 or host_reason(Node("TwConv", [x, w], [], n.attrs, n.name), constants) is not None:
            return None
        channel_axis = 0
    else:
        if wq.ndim != 2:
            return None
        channel_axis = 0 if n.op == "QGemm" and n.attr("transB", 0) else 1
    alpha = n.attr("alpha", 1.0) if n.op == "QGemm" else 1.0
    w_scale = np.asarray(constants[sw], np.float64).ravel()
    if w_scale.size not in (1, wq.shape[channel_axis]):
        return None
    shape = [1] * wq.ndim
    shape[channel_axis] = -1
    wf, xf, yf = f"{n.name}/w_float", f"{n.name}/x_float", f"{n.name}/y_float"
    constants[wf] = (wq * (alpha * w_scale).reshape(shape)).astype(np.float32)
    inputs = [xf, wf]
    if b:
        bf = f"{n.name}/b_float"
        constants[bf] = (constants[b].astype(np.float64).ravel() * alpha * float(constants[sx]) * w_scale
                         ).astype(np.float32)
        inputs.append(bf)
    op = {"QLinearConv": "Conv", "QLinearMatMul": "MatMul", "QGemm": "Gemm"}[n.op]
    attrs = {k: v for k, v in n.attrs.items() if k not in ("alpha",)} if op != "MatMul" else {}
    return [Node("DequantizeLinear", [x, sx, zx] if zx else [x, sx], [xf], {}, xf),
            Node(op, inputs, [yf], attrs, n.name),
            Node("QuantizeLinear", [yf, sy, zy] if zy else [yf, sy], [n.outputs[0]], {}, f"{n.name}/y")]


def lower_integer_ops(graph):
    """ConvInteger / MatMulInteger with constant weights whose int32 result is only cast to float and scaled
    (``Cast → Mul``), lowered to a float Conv / MatMul with the scale and weight zero point folded into
    the weights, so that they quantize and run on the accelerator like any layer:

    * **static** (the multiplier a constant, per tensor or per output
      channel): the input is dequantized first (DequantizeLinear with its
      zero point, scale 1 — or the scale of the QuantizeLinear that made it,
      which then pairs off with it), so the model's own input quantization
      stays exact;
    * **dynamic** (onnxruntime's ``quantize_dynamic``: the input comes from
      DynamicQuantizeLinear and the multiplier is its run-time scale times a
      constant): the float input is used directly, and the accelerator's
      layer quantizes it with a calibrated scale (static) instead of one
      computed per run.

    Anything else keeps ONNX's integer semantics on the host.
    """
    constants, consumers, producer = dict(graph.constants), graph.consumers(), graph.producer()
    replaced, drop = {}, set()
    for n in graph.nodes:
        lowered = _lowered_integer_op(n, graph, constants, consumers, producer)
        if lowered is not None:
            new_nodes, absorbed = lowered
            replaced[id(n)] = new_nodes
            drop.update(id(a) for a in absorbed)
    if not replaced:
        return graph
    nodes = [m for n in graph.nodes if id(n) not in drop for m in replaced.get(id(n), [n])]
    return remove_dead(graph.replace(nodes=nodes, constants=constants))


def _channel_factor(value, channels, kind):
    """A constant multiplier of a layer's output as one value per output channel (a scalar repeated), or None."""
    if value is None:
        return None
    if np.size(value) == 1:
        return np.full(channels, float(np.asarray(value).reshape(())), np.float32)
    return _bias_vector(value, channels, kind)


def _lowered_integer_op(n, graph, constants, consumers, producer):
    """``(new nodes, absorbed nodes)`` for ConvInteger/MatMulInteger ``n`` (see :func:`lower_integer_ops`),
    or None."""
    if n.op not in ("ConvInteger", "MatMulInteger"):
        return None
    x, w = n.inputs[0], n.inputs[1]
    zx, zw = (n.inputs[k] if k < len(n.inputs) else "" for k in (2, 3))
    outputs = {o.name for o in graph.outputs}

    def only_reader(tensor, op):
        readers = consumers.get(tensor, [])
        return readers[0] if tensor not in outputs and len(readers) == 1 and readers[0].op == op else None
    cast = only_reader(n.outputs[0], "Cast")
    mul = cast and cast.attr("to") == 1 and only_reader(cast.outputs[0], "Mul")         # (1: FLOAT)
    if not mul or w not in constants or (zw and zw not in constants):
        return None
    kind, channels = ("TwConv", constants[w].shape[0]) if n.op == "ConvInteger" else ("TwDense", constants[w].shape[1])
    factor = mul.inputs[1] if mul.inputs[0] == cast.outputs[0] else mul.inputs[0]
    source = producer.get(x)
    dynamic = source is not None and source.op == "DynamicQuantizeLinear" and source.outputs[2] == zx
    if dynamic:         # factor = Mul(x's run-time scale, constant)
        made = producer.get(factor)
        if made is None or made.op != "Mul" or source.outputs[1] not in made.inputs:
            return None
        scale = _channel_factor(constants.get(made.inputs[1] if made.inputs[0] == source.outputs[1]
                                              else made.inputs[0]), channels, kind)
        x_scale = 1.0
    else:
        if zx and zx not in constants:
            return None
        scale = _channel_factor(constants.get(factor), channels, kind)
        quantized = quantization_params(source, constants) if source is not None and source.op == "QuantizeLinear" \
            else None
        x_scale = quantized[0] if quantized else 1.0
    if scale is None:
        return None
    wq = constants[w].astype(np.float64) - (constants[zw].astype(np.float64) if zw else 0.0)
    if n.op == "ConvInteger":
        if wq.ndim != 4 or np.size(constants.get(zw, 0)) != 1:
            return None
        wf = wq * (scale.astype(np.float64) / x_scale).reshape(-1, 1, 1, 1)
    else:
        if wq.ndim != 2 or np.size(constants.get(zw, 0)) not in (1, channels):
            return None
        wf = wq * (scale.astype(np.float64) / x_scale)
    wname = f"{n.name}/w_float"
    constants[wname] = wf.astype(np.float32)
    if dynamic:
        first, data = [], source.inputs[0]
    else:
        data = f"{n.name}/x_float"
        constants[f"{data}/scale"] = np.array(x_scale, np.float32)
        first = [Node("DequantizeLinear", [x, f"{data}/scale"] + ([zx] if zx else []), [data], {}, data)]
    op = "Conv" if n.op == "ConvInteger" else "MatMul"
    attrs = {k: v for k, v in n.attrs.items()} if op == "Conv" else {}
    return first + [Node(op, [data, wname], mul.outputs, attrs, n.name)], [cast, mul]


def fold_constants(graph):
    """Nodes whose inputs are all constants are evaluated now; their outputs become constants."""
    constants, nodes = dict(graph.constants), []
    for n in graph.nodes:
        if n.inputs and all(i == "" or i in constants for i in n.inputs):
            outs = run_node(n, [constants[i] if i else None for i in n.inputs], graph.opset)
            constants.update(zip(n.outputs, outs))
        else:
            nodes.append(n)
    return graph.replace(nodes=nodes, constants=constants)


def fold_batch_norm(graph, keep=frozenset()):
    """Conv → BatchNormalization (constant statistics, the conv feeding only it) becomes one Conv, unless the
    conv's output is in ``keep`` (a pre-quantized model rounds it before the normalization)."""
    consumers, producer = graph.consumers(), graph.producer()
    constants, drop, replaced = dict(graph.constants), set(), {}
    for bn in graph.nodes:
        if bn.op != "BatchNormalization" or any(bn.outputs[1:]):
            continue
        conv = producer.get(bn.inputs[0])
        params = bn.inputs[1:5]
        if conv is None or conv.op != "Conv" or len(consumers.get(conv.outputs[0], [])) != 1 \
                or conv.outputs[0] in keep \
                or not all(p in constants for p in params) or conv.inputs[1] not in constants:
            continue
        scale, shift, mean, var = (constants[p].astype(np.float64) for p in params)
        factor = scale / np.sqrt(var + bn.attr("epsilon", 1e-5))
        w = constants[conv.inputs[1]]
        b = constants[conv.inputs[2]] if len(conv.inputs) > 2 and conv.inputs[2] else np.zeros(w.shape[0])
        wname, bname = f"{conv.name}/w_bn", f"{conv.name}/b_bn"
        constants[wname] = (w * factor.reshape((-1,) + (1,) * (w.ndim - 1))).astype(w.dtype)
        constants[bname] = ((b - mean) * factor + shift).astype(w.dtype)
        replaced[conv.name] = Node("Conv", [conv.inputs[0], wname, bname], bn.outputs, conv.attrs, conv.name)
        drop.add(id(bn))
    nodes = [replaced.get(n.name, n) if n.op == "Conv" else n for n in graph.nodes if id(n) not in drop]
    return remove_unused_constants(graph.replace(nodes=nodes, constants=constants))


def remove_dead(graph):
    """Nodes none of whose outputs reach a graph output."""
    live = {o.name for o in graph.outputs}
    kept = []
    for n in reversed(graph.nodes):
        if any(o in live for o in n.outputs):
            kept.append(n)
            live.update(i for i in n.inputs if i)
    return remove_unused_constants(graph.replace(nodes=kept[::-1]))


def remove_unused_constants(graph):
    used = {i for n in graph.nodes for i in n.inputs} | {o.name for o in graph.outputs}
    return graph.replace(constants={k: v for k, v in graph.constants.items() if k in used})


# -- fusion ----------------------------------------------------------------------------------

def fuse(graph, keep=frozenset()):
    """Conv/Gemm/MatMul [+ bias Add] [+ residual Add] [+ Relu | Clip] → one TwConv/TwDense node.

    A tensor in ``keep`` ends a fused node: a pre-quantized model quantizes
    it (``strip_fake_quant``'s qparams), so it must exist, rounded as the
    model rounds it, rather than be an intermediate sum in the accumulator.

    A TwConv has inputs ``(x, w, b, residual)`` (b and residual may be ``""``)
    and attributes ``strides, pads, dilations, group`` and ``act`` (``"none"``,
    ``"relu"`` or ``"clip"`` with ``clip_min``/``clip_max``); a TwDense has
    ``(x, w, b)`` with ``w`` as ``M × K`` (PyTorch's Linear layout).
    """
    consumers = graph.consumers()
    constants = dict(graph.constants)
    outputs = {o.name for o in graph.outputs}
    position = {out: k for k, n in enumerate(graph.nodes) for out in n.outputs}
    absorbed, fused = set(), {}

    def single_next(tensor, op=None):
        users = consumers.get(tensor, [])
        if tensor in outputs or tensor in keep or len(users) != 1 or (op and users[0].op not in op) or id(users[0]) in absorbed:
            return None
        return users[0]

    for k, n in enumerate(graph.nodes):
        head = _fusable_head(n, constants)
        if head is None:
            continue
        kind, x, w, b, attrs = head
        out, residual = n.outputs[0], ""
        nxt = single_next(out, ("Add",))
        if nxt is not None and b == "":       # a bias Add: a constant vector per output channel
            other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
            bias = _bias_vector(constants.get(other), w.shape[0], kind)
            if bias is not None:
                b = f"{n.name}/bias"
                constants[b] = bias
                absorbed.add(id(nxt))
                out = nxt.outputs[0]
                nxt = single_next(out, ("Add",))
        if nxt is not None and kind == "TwConv":     # a residual Add of another computed tensor
            other = nxt.inputs[1] if nxt.inputs[0] == out else nxt.inputs[0]
            if other not in constants and position.get(other, -1) < k:     # computed before this node
                residual = other
                absorbed.add(id(nxt))
                out = nxt.outputs[0]
        act = {"act": "none"}
        nxt = single_next(out, ("Relu", "Clip"))
        if nxt is not None:
            clip = _clip_bounds(nxt, constants)
            if clip is not None:
                act = clip
                absorbed.add(id(nxt))
                out = nxt.outputs[0]
        wname = f"{n.name}/w"
        constants[wname] = w
        inputs = [x, wname, b] + ([residual] if kind == "TwConv" else [])
        fused[id(n)] = Node(kind, inputs, [out], {**attrs, **act}, n.name)
    nodes = [fused.get(id(n), n) for n in graph.nodes if id(n) not in absorbed]
    return remove_unused_constants(graph.replace(nodes=nodes, constants=constants))


def _fusable_head(n, constants):
    """``(kind, x, weights (float, M-first), bias name or "", attrs)`` for a Conv/Gemm/MatMul with constant
    weights, else None."""
    if n.op == "Conv" and len(n.inputs) >= 2 and n.inputs[1] in constants:
        w = constants[n.inputs[1]]
        if w.ndim != 4:
            return None
        attrs = {k: n.attrs[k] for k in ("strides", "pads", "dilations", "group", "auto_pad", "kernel_shape")
                 if k in n.attrs}
        b = n.inputs[2] if len(n.inputs) > 2 else ""
        return "TwConv", n.inputs[0], w, b, attrs
    if n.op == "Gemm" and n.inputs[1] in constants and not n.attr("transA", 0):
        w = constants[n.inputs[1]] * n.attr("alpha", 1.0)
        w = w if n.attr("transB", 0) else w.T
        b = ""
        if len(n.inputs) > 2 and n.inputs[2]:
            c = constants.get(n.inputs[2])
            if c is None or c.size not in (1, w.shape[0]) or c.ndim > 1 and c.shape[0] != 1:
                return None
            b = n.inputs[2]
            constants[b + "/beta"] = np.broadcast_to(c.reshape(-1) * n.attr("beta", 1.0), (w.shape[0],)).copy()
            b = b + "/beta"
        return "TwDense", n.inputs[0], np.ascontiguousarray(w), b, {}
    if n.op == "MatMul" and n.inputs[1] in constants and constants[n.inputs[1]].ndim == 2:
        return "TwDense", n.inputs[0], np.ascontiguousarray(constants[n.inputs[1]].T), "", {}
    return None


def _bias_vector(value, channels, kind):
    """A per-output-channel vector from an Add operand broadcast along the output, or None."""
    if value is None:
        return None
    v = np.asarray(value)
    if kind == "TwConv":
        if v.size == channels and (v.ndim == 1 and channels == 1 or v.ndim in (3, 4) and v.shape[-2:] == (1, 1)):
            return v.reshape(channels).astype(np.float32)
        return None
    if v.size == channels and v.shape[-1] == channels:
        return v.reshape(channels).astype(np.float32)
    return None


def _clip_bounds(node, constants):
    if node.op == "Relu":
        return {"act": "relu"}
    lo = node.inputs[1] if len(node.inputs) > 1 else ""
    hi = node.inputs[2] if len(node.inputs) > 2 else ""
    if (lo and lo not in constants) or (hi and hi not in constants):
        return None
    lo = float(constants[lo]) if lo else node.attr("min", float("-inf"))
    hi = float(constants[hi]) if hi else node.attr("max", float("inf"))
    return {"act": "clip", "clip_min": lo, "clip_max": hi}


# -- quantized graphs --------------------------------------------------------------------------

def unfold_narrow_convs(graph, block_in):
    """QConv layers with fewer input channels than a block (a network's first layer, on 3-channel images)
    become ``Im2Col`` on the host + a 1×1 QConv when that needs fewer GEMM blocks.

    Padding 3 channels to a block of 16 wastes 13/16 of every GEMM of a 7×7
    kernel: 49 block products per output pixel. Gathering each window into
    3·7·7 = 147 channels (10 blocks) makes the same sums in 10 — bit for bit
    the same result, since only int8 data is moved. ``Im2Col`` is a host node
    (a strided copy); the weights are reshaped to ``O × (C·KH·KW) × 1 × 1``.
    """
    constants, nodes = dict(graph.constants), []
    for n in graph.nodes:
        w = constants.get(n.inputs[1]) if n.op == "QConv" and n.attr("group", 1) == 1 else None
        if w is None:
            nodes.append(n)
            continue
        O, C, KH, KW = w.shape
        blocks = -(-C // block_in) * KH * KW
        if C >= block_in or KH * KW == 1 or -(-C * KH * KW // block_in) >= blocks:
            nodes.append(n)
            continue
        cols, wname = f"{n.name}/im2col", f"{n.name}/wq_unfolded"
        nodes.append(Node("Im2Col", [n.inputs[0]], [cols],
                          dict(kernel=[KH, KW], stride=n.attr("stride"), padding=n.attr("padding"),
                               layer=n.name, channels=C * KH * KW), cols))
        constants[wname] = np.ascontiguousarray(w.reshape(O, C * KH * KW, 1, 1))
        nodes.append(Node("QConv", [cols, wname] + n.inputs[2:], n.outputs,
                          {**n.attrs, "stride": 1, "padding": 0, "kernel": [1, 1]}, n.name))
    return remove_unused_constants(graph.replace(nodes=nodes, constants=constants))
