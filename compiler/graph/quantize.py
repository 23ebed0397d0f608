"""Post-training int8 quantization of a fused float graph.

``calibrate`` runs the float graph on sample inputs and records each
tensor's range (``max`` of |x|, or a ``percentile`` of |x|). ``quantize``
then rewrites it:

* every TwConv / TwDense the accelerator can run becomes ``QConv`` /
  ``QDense``: symmetric int8 activations (scale = range / 127), symmetric
  int8 weights, int32 bias, and integer requantization. With per-channel
  weights (the default) each output channel has its own weight scale; the
  accumulator is multiplied by a per-channel int32 ``scale`` to a common
  fixed point of ``2**-shift`` output steps, where the bias and the residual
  (``(r · residual_mul) << residual_shift``) join it, and the STORE shifts
  and clips: ``clip((acc · scale[c] + bias + residual·k) >> shift)``. With
  per-tensor weights the STORE's scalar multiplier does the rescale:
  ``clip(((acc + bias + residual·k) · mul) >> shift)``. Either way the
  shift is the largest that cannot overflow 32 bits on the calibrated
  pre-activation ranges (with a margin), for the most precise multipliers;
* int8 tensors flow between them; MaxPool, Flatten, Reshape and Relu work on
  int8 directly, every other host operator gets ``DequantizeLinear`` /
  ``QuantizeLinear`` around it, and graph outputs are dequantized.

The result is a graph the host can run exactly (``run_graph``) and the
runtime can put on the accelerator; ``report`` measures each layer's SQNR
against the float model.
"""

import math
from dataclasses import dataclass

import numpy as np

from .host import run_graph, run_node
from .ir import ModelError, Node, TensorInfo

__all__ = ["calibrate", "quantize", "choose_requant", "host_reason", "QuantLayer", "sqnr_db", "layer_report",
           "INT8_EXACT_OPS", "OVERFLOW_MARGIN"]

#: Host operators that act on int8 values exactly as on the floats they stand for (same scale).
INT8_EXACT_OPS = {"MaxPool", "Flatten", "Reshape", "Relu"}
#: Calibrated accumulator magnitudes are multiplied by this before they bound ``mul``.
OVERFLOW_MARGIN = 4.0
MUL_MAX = (1 << 15) - 1
SHIFT_MAX = 31


def _feeds(graph, samples):
    for s in samples:
        yield s if isinstance(s, dict) else {graph.inputs[0].name: s}


def calibrate(graph, samples, method="max", percentile=99.99, seed=0):
    """``{tensor: range}`` over ``samples`` (feed dicts, or arrays for a one-input graph)."""
    if method not in ("max", "percentile"):
        raise ModelError(f"calibration method {method!r}: use 'max' or 'percentile'")
    rng = np.random.default_rng(seed)
    peaks, pools, count = {}, {}, 0
    for feeds in _feeds(graph, samples):
        _, env = run_graph(graph, feeds, keep=True)
        env.update(_pre_activations(graph, env))
        count += 1
        for name, value in env.items():
            if name in graph.constants or not np.issubdtype(np.asarray(value).dtype, np.floating):
                continue
            a = np.abs(np.asarray(value, dtype=np.float64)).ravel()
            peaks[name] = max(peaks.get(name, 0.0), float(a.max()) if a.size else 0.0)
            if method == "percentile":
                pick = a if a.size <= 100_000 else rng.choice(a, 100_000, replace=False)
                pools.setdefault(name, []).append(pick)
    if not count:
        raise ModelError("calibration needs at least one sample input")
    if method == "max":
        return peaks
    return {n: float(np.percentile(np.concatenate(p), percentile)) for n, p in pools.items()}


def _pre_activations(graph, env):
    """``{node/preact: value}`` for fused layers with an activation: the requantizer's input range."""
    out = {}
    for n in graph.nodes:
        if n.op in ("TwConv", "TwDense") and n.attr("act", "none") != "none":
            plain = Node(n.op, n.inputs, n.outputs, {**n.attrs, "act": "none"}, n.name)
            out[f"{n.name}/preact"] = run_node(plain, [env[i] if i else None for i in n.inputs])[0]
    return out


def choose_requant(m, acc_peak):
    """``(mul, shift)`` with ``mul / 2**shift`` closest to ``m`` such that ``|mul| · acc_peak < 2**31``.

    The largest usable shift gives the most precise multiplier; ``acc_peak``
    is the largest accumulator magnitude the layer is expected to see.
    """
    if not m > 0:
        raise ModelError(f"requantization scale {m} must be positive")
    best = None
    for shift in range(32):
        mul = round(m * 2 ** shift)
        if mul > MUL_MAX or mul * acc_peak >= 2 ** 31:
            break
        if mul >= 1:
            best = (mul, shift)
    if best is None:
        raise ModelError(f"no 16-bit multiplier represents scale {m:.3g} for accumulators up to {acc_peak:.3g}")
    return best


def sqnr_db(reference, approx):
    """Signal-to-quantization-noise ratio of ``approx`` against ``reference``, in dB."""
    ref = np.asarray(reference, dtype=np.float64)
    noise = np.sum((ref - np.asarray(approx, dtype=np.float64)) ** 2)
    signal = np.sum(ref ** 2)
    return math.inf if noise == 0 else 10 * math.log10(signal / noise) if signal > 0 else -math.inf


@dataclass
class QuantLayer:
    """What quantization chose for one accelerator layer."""
    name: str
    op: str
    input_scale: float
    weight_scale: float            # the largest, with per-channel weights
    output_scale: float
    mul: int                       # 1 with per-channel weights: the multipliers are in the scale vector
    shift: int
    residual_mul: int = 0
    residual_shift: int = 0
    per_channel: bool = False
    multiplier_error: float = 0.0  # worst relative error of the integer rescale(s)


def _requant_per_tensor(w, s_x, s_y, b, acc_peak, s_r):
    """int8 weights with one scale, and the scalar requantizer; see :func:`quantize`."""
    s_w = max(float(np.abs(w).max()), 1e-8) / 127.0
    acc_scale = s_x * s_w
    wq = np.clip(np.rint(w / s_w), -127, 127).astype(np.int8)
    mul, shift = choose_requant(acc_scale / s_y, OVERFLOW_MARGIN * acc_peak / acc_scale)
    # round to nearest: the arithmetic shift floors, so add half an output step first
    half = round(2 ** (shift - 1) / mul) if shift else 0
    bq = np.rint(b / acc_scale) + half
    attrs = dict(mul=mul, shift=shift)
    if s_r is not None:
        attrs["residual_mul"] = max(1, min(MUL_MAX, round(s_r / acc_scale)))
    exact = acc_scale / s_y
    return wq, bq, None, attrs, s_w, abs(mul / 2 ** shift - exact) / exact


def _requant_per_channel(w, s_x, s_y, b, acc_peak, s_r):
    """int8 weights with one scale per output channel: each channel's accumulator is multiplied by its own
    ``scale`` (an int32 vector) to the common fixed point ``2**-shift`` output steps, where bias and
    residual join it."""
    s_w = np.maximum(np.abs(w).reshape(len(w), -1).max(axis=1), 1e-8) / 127.0
    wq = np.clip(np.rint(w / s_w.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127).astype(np.int8)
    # the largest shift that keeps the calibrated sum (in output steps · 2**shift) inside int32
    steps = OVERFLOW_MARGIN * acc_peak / s_y
    shift = int(min(SHIFT_MAX, max(0, math.floor(math.log2((2 ** 31 - 1) / max(steps, 1.0))))))
    exact = s_x * s_w / s_y * 2 ** shift
    scale = np.clip(np.rint(exact), 0, 2 ** 31 - 1)
    bq = np.rint(b / s_y * 2 ** shift) + (2 ** (shift - 1) if shift else 0)
    attrs = dict(mul=1, shift=shift)
    if s_r is not None:
        k = s_r / s_y * 2 ** shift
        k_shift = max(0, math.ceil(math.log2(k / MUL_MAX))) if k > MUL_MAX else 0
        attrs |= dict(residual_mul=max(1, round(k / 2 ** k_shift)), residual_shift=k_shift)
    error = float(np.max(np.abs(scale - exact) / np.maximum(exact, 1e-30))) if len(exact) else 0.0
    return wq, bq, scale.astype(np.int32), attrs, float(s_w.max()), error


def host_reason(node):
    """Why the accelerator cannot run fused layer ``node`` (it then stays on the host in float), or None."""
    if node.op == "TwDense":
        return None
    if node.op != "TwConv":
        return "not a fused conv/dense layer"
    strides, pads = node.attr("strides", [1, 1]), node.attr("pads", [0, 0, 0, 0])
    if len(strides) != 2:
        return f"{len(strides)}-D convolution"
    if node.attr("group", 1) != 1:
        return f"grouped convolution (group={node.attr('group')})"
    if any(d != 1 for d in node.attr("dilations", [1, 1])):
        return f"dilation {node.attr('dilations')}"
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return f"auto_pad={node.attr('auto_pad')}"
    if strides[0] != strides[1]:
        return f"unequal strides {strides}"
    if len(set(pads)) != 1:
        return f"unequal pads {pads}"
    if node.attr("act") == "clip" and node.attr("clip_min") not in (0.0, -math.inf):
        return f"Clip with min {node.attr('clip_min')}"
    return None


def _accelerated_conv(node):
    """Conv2dSpec-style parameters of a TwConv the accelerator runs, or None (it stays on the host)."""
    if host_reason(node) is not None:
        return None
    return dict(stride=int(node.attr("strides", [1, 1])[0]), padding=int(node.attr("pads", [0, 0, 0, 0])[0]))


def _relu(node):
    return node.attr("act") == "relu" or node.attr("act") == "clip" and node.attr("clip_min") == 0.0


def quantize(graph, ranges, *, with_layers=False, per_channel=True):
    """The quantized graph (and, with ``with_layers``, the :class:`QuantLayer` choices).

    ``per_channel``: one weight scale per output channel (the accelerator
    then multiplies each channel's accumulator by its own int32 factor, one
    ALU operation per output element); otherwise one scale per layer and
    the scalar multiplier of the STORE.
    """
    scale = {}                     # int8 tensor -> scale
    constants = dict(graph.constants)
    nodes, layers = [], []
    acc_peaks = _accumulator_peaks(graph, ranges)

    def tensor_scale(name):
        r = ranges.get(name)
        if r is None:
            raise ModelError(f"tensor {name!r} has no calibrated range (was it computed for the samples?)")
        return max(r, 1e-8) / 127.0

    def as_int8(name):
        """``name`` as an int8 tensor (quantizing a float one on the way)."""
        if name in scale:
            return name
        q = f"{name}/q"
        if q not in scale:
            s = tensor_scale(name)
            constants[f"{q}/scale"] = np.array(s, dtype=np.float32)
            constants[f"{q}/zp"] = np.array(0, dtype=np.int8)
            nodes.append(Node("QuantizeLinear", [name, f"{q}/scale", f"{q}/zp"], [q], {}, f"{q}"))
            scale[q] = s
        return q

    def as_float(name):
        if name not in scale:
            return name
        f = f"{name}/f"
        if not any(f in n.outputs for n in nodes):
            constants[f"{f}/scale"] = np.array(scale[name], dtype=np.float32)
            constants[f"{f}/zp"] = np.array(0, dtype=np.int8)
            nodes.append(Node("DequantizeLinear", [name, f"{f}/scale", f"{f}/zp"], [f], {}, f))
        return f

    renamed = {}
    for node in graph.nodes:
        inputs = [renamed.get(i, i) for i in node.inputs]
        conv = _accelerated_conv(node) if node.op == "TwConv" else None
        if node.op == "TwDense" or conv is not None:
            x = as_int8(inputs[0])
            w = constants[inputs[1]].astype(np.float64)
            out = node.outputs[0]
            s_x, s_y = scale[x], tensor_scale(out)
            if node.attr("act") == "clip" and np.isfinite(node.attr("clip_max")):
                s_y = min(s_y, node.attr("clip_max") / 127.0)
            b = constants[inputs[2]] if inputs[2] else np.zeros(w.shape[0])
            r = as_int8(inputs[3]) if conv is not None and len(inputs) > 3 and inputs[3] else None
            requant = _requant_per_channel if per_channel else _requant_per_tensor
            wq, bq, channel_scale, attrs, s_w, error = requant(w, s_x, s_y, b, acc_peaks[node.name],
                                                                scale[r] if r else None)
            names = {k: f"{node.name}/{k}" for k in ("wq", "bq", "scale")}
            constants[names["wq"]] = wq
            constants[names["bq"]] = np.clip(bq, -2 ** 31, 2 ** 31 - 1).astype(np.int32)
            attrs |= dict(relu=_relu(node), input_scale=s_x, weight_scale=s_w, output_scale=s_y)
            q_inputs = [x, names["wq"], names["bq"]]
            if conv is not None:
                attrs |= dict(conv, kernel=list(wq.shape[2:]))
                q_inputs.append(r or "")
            if channel_scale is not None:
                constants[names["scale"]] = channel_scale
                q_inputs.append(names["scale"])
            while not q_inputs[-1]:
                q_inputs.pop()
            q = f"{out}/q"
            nodes.append(Node("QConv" if conv is not None else "QDense", q_inputs, [q], attrs, node.name))
            scale[q] = s_y
            renamed[out] = q
            layers.append(QuantLayer(node.name, node.op, s_x, s_w, s_y, attrs["mul"], attrs["shift"],
                                     attrs.get("residual_mul", 0), attrs.get("residual_shift", 0),
                                     channel_scale is not None, error))
        elif node.op in INT8_EXACT_OPS and inputs[0] in scale:
            q = f"{node.outputs[0]}/q"
            nodes.append(Node(node.op, [inputs[0]] + inputs[1:], [q], node.attrs, node.name))
            scale[q] = scale[inputs[0]]
            renamed[node.outputs[0]] = q
        else:
            nodes.append(Node(node.op, [as_float(i) if i else i for i in inputs], node.outputs, node.attrs,
                              node.name))
    outputs = []
    for o in graph.outputs:
        name = renamed.get(o.name, o.name)
        f = as_float(name)
        if f != o.name:
            nodes.append(Node("Identity", [f], [o.name], {}, f"{o.name}/out"))
        outputs.append(TensorInfo(o.name, o.shape, o.dtype))
    q = graph.replace(nodes=nodes, constants=constants, outputs=outputs)
    return (q, layers) if with_layers else q


def _accumulator_peaks(graph, ranges):
    """Per fused layer: the calibrated magnitude of ``acc + bias + residual`` (the output before its
    activation), in real units."""
    return {n.name: max(ranges.get(f"{n.name}/preact", ranges.get(n.outputs[0], 0.0)), 1e-8)
            for n in graph.nodes if n.op in ("TwConv", "TwDense")}


def layer_report(float_graph, quant_graph, layers, feeds):
    """``[(layer, SQNR dB of its output against the float model)]`` on one input."""
    _, f_env = run_graph(float_graph, feeds, keep=True)
    _, q_env = run_graph(quant_graph, feeds, keep=True)
    by_name = {n.name: n for n in quant_graph.nodes}
    rows = []
    for layer in layers:
        node = by_name[layer.name]
        out = node.outputs[0]
        approx = q_env[out].astype(np.float64) * layer.output_scale
        rows.append((layer, sqnr_db(f_env[out.removesuffix("/q")], approx)))
    return rows
