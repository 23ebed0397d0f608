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
  and clips: ``clip((acc · scale[c] + bias + residual·k) >> shift)``. A
  residual worth at least RESIDUAL_STEPS_MIN accumulator steps per step of
  its own joins the accumulator before the scale instead, multiplied by a
  per-channel int32 ``residual_scale`` (its steps in accumulator steps,
  rounded): ``clip(((acc + residual · residual_scale[c]) · scale[c] + bias)
  >> shift)``, so the per-channel multiply and the bias ride on the STORE of
  a config with ``per_channel_store`` (docs/isa.md). With
  per-tensor weights the STORE's scalar multiplier does the rescale:
  ``clip(((acc + bias + residual·k) · mul) >> shift)``. Either way the
  shift is the largest that cannot overflow 32 bits on the calibrated
  pre-activation ranges (with a margin), for the most precise multipliers;
* int8 tensors flow between them; the operators in INT8_EXACT_OPS (shape
  operators, MaxPool, Relu) work on int8 directly, every other host operator gets ``DequantizeLinear`` /
  ``QuantizeLinear`` around it, and graph outputs are dequantized.

The result is a graph the host can run exactly (``run_graph``) and the
runtime can put on the accelerator; ``report`` measures each layer's SQNR
against the float model.
"""

import math
from dataclasses import dataclass

import numpy as np

from tilewright.isa import IMM_BITS, SHIFT_BITS
from tilewright.semantics import wrap

from .host import QUANTIZED_WIDTHS, run_graph, run_node
from .ir import ModelError, Node, TensorInfo

__all__ = ["calibrate", "quantize", "choose_requant", "host_reason", "width_keeping_groups", "LAYER_INPUTS", "layer_input", "QuantLayer", "sqnr_db", "layer_report",
           "INT8_EXACT_OPS", "OVERFLOW_MARGIN"]

#: Host operators that act on int8 values exactly as on the floats they stand for (same scale).
INT8_EXACT_OPS = {"MaxPool", "Flatten", "Reshape", "Relu", "Transpose", "Squeeze", "Unsqueeze"}
#: Calibrated accumulator magnitudes are multiplied by this before they bound ``mul``.
OVERFLOW_MARGIN = 4.0
#: The requantizer's limits: the STORE's signed multiplier and its shift field (the ISA), int32 accumulators.
MUL_MAX = (1 << (IMM_BITS - 1)) - 1
SHIFT_MAX = (1 << SHIFT_BITS) - 1
ACC_LIMIT = 1 << (QUANTIZED_WIDTHS.acc_width - 1)
#: A per-channel residual joins the accumulator before the scale when each of its steps is worth at least
#: this many accumulator steps: the rounded multiplier is then within 1/256 of the exact one, no coarser than
#: the per-tensor residual's (and the scale's) rounding.
RESIDUAL_STEPS_MIN = 128
#: Percentile calibration keeps at most this many magnitudes per tensor (a uniform subsample).
POOL_SIZE = 200_000


def _feeds(graph, samples):
    for s in samples:
        yield s if isinstance(s, dict) else {graph.inputs[0].name: s}


def calibrate(graph, samples, method="max", percentile=99.99, seed=0):
    """``{tensor: range}`` over ``samples`` (feed dicts, or arrays for a one-input graph).

    Also ``{layer}/preact``: each fused layer's largest pre-activation magnitude, whatever the method.
    """
    if method not in ("max", "percentile"):
        raise ModelError(f"calibration method {method!r}: use 'max' or 'percentile'")
    if method == "percentile" and not 0 < percentile <= 100:
        raise ModelError(f"percentile {percentile}: must be in (0, 100]")
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
            if method == "percentile" and not name.endswith("/preact"):
                pool = np.concatenate([pools.get(name, a[:0]), a])
                pools[name] = pool if pool.size <= POOL_SIZE else rng.choice(pool, POOL_SIZE, replace=False)
    if not count:
        raise ModelError("calibration needs at least one sample input")
    if method == "max":
        return peaks
    return {n: float(np.percentile(pools[n], percentile)) if n in pools else peak for n, peak in peaks.items()}


def _pre_activations(graph, env):
    """``{node/preact: value}`` for every fused layer: ``acc + bias + residual`` before the activation, the
    range that bounds the requantizer's shift (an int32 overflow bound, so always its maximum)."""
    out = {}
    for n in graph.nodes:
        if n.op in ("TwConv", "TwDense"):
            if n.attr("act", "none") == "none":
                out[f"{n.name}/preact"] = env[n.outputs[0]]
            else:
                plain = Node(n.op, n.inputs, n.outputs, {**n.attrs, "act": "none"}, n.name)
                out[f"{n.name}/preact"] = run_node(plain, [env[i] if i else None for i in n.inputs])[0]
    return out


def choose_requant(m, acc_bound):
    """``(mul, shift)`` with ``mul / 2**shift`` closest to ``m`` such that ``|mul| · acc_bound < 2**31``.

    The largest usable shift gives the most precise multiplier; ``acc_bound``
    is the largest accumulator value (in integer units) the layer may see.
    """
    if not m > 0:
        raise ModelError(f"requantization scale {m} must be positive")
    best = None
    for shift in range(SHIFT_MAX + 1):
        mul = round(m * 2 ** shift)
        if mul > MUL_MAX or mul * acc_bound >= ACC_LIMIT:
            break
        if mul >= 1:
            best = (mul, shift)
    if best is None:
        raise ModelError(f"no 16-bit multiplier represents scale {m:.3g} for accumulators up to {acc_bound:.3g}")
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
    input_zero_point: int = 0
    output_zero_point: int = 0
    residual_scaled: bool = False  # the residual joins before the per-channel scale (a residual_scale vector)


#: Input roles of the quantized layers, in order ("" for an absent optional input).
LAYER_INPUTS = {"QConv": ("data", "weight", "bias", "residual", "scale", "residual_scale"),
                "QDense": ("data", "weight", "bias", "scale")}


def layer_input(node, role):
    """The tensor a QConv/QDense node reads in ``role`` (see LAYER_INPUTS), or ""."""
    k = LAYER_INPUTS[node.op].index(role)
    return node.inputs[k] if k < len(node.inputs) else ""


@dataclass
class _Requant:
    """One layer's integer weights and requantizer (see :func:`quantize`)."""
    weights: np.ndarray            # int8
    bias: np.ndarray               # int64; wrapped to int32 by the caller
    scale: np.ndarray | None       # int32 per output channel, or None (per-tensor)
    attrs: dict                    # mul, shift[, residual_mul, residual_shift]
    weight_scale: float            # the largest
    error: float                   # worst relative error of the integer rescales
    residual_scale: np.ndarray | None = None    # int32 per output channel: the residual before the scale


def _int32_bias(b):
    """A rounded float bias as int64, clipped to the int32 range."""
    return np.clip(b, -ACC_LIMIT, ACC_LIMIT - 1).astype(np.int64)


def _residual_rescale(k):
    """``(residual_mul, residual_shift)`` with ``residual_mul << residual_shift ≈ k`` and a 16-bit multiplier."""
    shift = max(0, math.ceil(math.log2(k / MUL_MAX))) if k > MUL_MAX else 0
    mul = max(1, round(k / 2 ** shift))
    return mul, shift, abs(mul * 2 ** shift - k) / k


def _requant_per_tensor(w, s_x, s_y, b, preact_peak, s_r):
    """int8 weights with one scale, and the STORE's scalar requantizer."""
    s_w = max(float(np.abs(w).max()), 1e-8) / 127.0
    acc_scale = s_x * s_w
    wq = np.clip(np.rint(w / s_w), -127, 127).astype(np.int8)
    mul, shift = choose_requant(acc_scale / s_y, OVERFLOW_MARGIN * preact_peak / acc_scale)
    # round to nearest: the arithmetic shift floors, so add half an output step first
    half = round(2 ** (shift - 1) / mul) if shift else 0
    exact = acc_scale / s_y
    attrs, error = dict(mul=mul, shift=shift), abs(mul / 2 ** shift - exact) / exact
    if s_r is not None:
        r_mul, r_shift, r_error = _residual_rescale(s_r / acc_scale)
        attrs |= dict(residual_mul=r_mul, residual_shift=r_shift)
        error = max(error, r_error)
    return _Requant(wq, _int32_bias(np.rint(b / acc_scale) + half), None, attrs, s_w, error)


def _requant_per_channel(w, s_x, s_y, b, preact_peak, s_r, *, s_w=None, z_x=0, z_y=0, z_r=0,
                         margin=OVERFLOW_MARGIN, residual_before_scale=True):
    """int8 weights with one scale per output channel (``s_w``, or each channel's largest weight / 127):
    each channel's accumulator is multiplied by its own ``scale`` (an int32 vector) to the common fixed
    point ``2**-shift`` output steps, where bias and residual join it. With ``residual_before_scale`` a
    residual whose steps are each worth at least RESIDUAL_STEPS_MIN accumulator steps joins the
    accumulator before the scale instead, times its ``residual_scale`` (see the module docstring).

    Zero points of input, output and residual (``z_x``, ``z_y``, ``z_r``) become
    constant terms of the bias, exactly: the accumulator sums ``w · x`` where
    the layer means ``w · (x - z_x)`` (the input is padded with ``z_x``), so
    ``z_x · Σw`` (times the channel's scale) is taken off; the output step
    ``z_y`` is ``z_y · 2**shift`` before the shift; the residual's
    ``z_r · residual_mul << residual_shift`` (before the scale: ``z_r ·
    residual_scale · scale``) is taken off. The hardware's
    integer arithmetic wraps modulo 2**32, so terms that overflow on the way
    cancel; only the final sum must fit, which the shift ensures
    (``preact_peak`` times ``margin`` fits).
    """
    if s_w is None:
        s_w = np.maximum(np.abs(w).reshape(len(w), -1).max(axis=1), 1e-8) / 127.0
    wq = np.clip(np.rint(w / s_w.reshape((-1,) + (1,) * (w.ndim - 1))), -127, 127).astype(np.int8)
    # the largest shift that keeps the calibrated sum (in output steps · 2**shift) inside int32
    steps = margin * preact_peak / s_y + abs(z_y)
    shift = int(min(SHIFT_MAX, max(0, math.floor(math.log2((ACC_LIMIT - 1) / max(steps, 1.0))))))
    exact = s_x * s_w / s_y * 2 ** shift
    scale = np.clip(np.rint(exact), 0, ACC_LIMIT - 1)
    bias = _int32_bias(np.rint(b / s_y * 2 ** shift) + (2 ** (shift - 1) if shift else 0) + z_y * 2 ** shift)
    # (int64 products wrap modulo 2**64, a multiple of the 2**32 that matters)
    bias -= z_x * wq.astype(np.int64).reshape(len(wq), -1).sum(axis=1) * scale.astype(np.int64)
    attrs = dict(mul=1, shift=shift)
    error = float(np.max(np.abs(scale - exact) / np.maximum(exact, 1e-30))) if len(exact) else 0.0
    residual_scale = None
    if s_r is not None:
        steps = s_r / (s_x * s_w)           # accumulator steps per step of the residual, per channel
        if residual_before_scale and steps.min() >= RESIDUAL_STEPS_MIN and steps.max() < ACC_LIMIT:
            residual_scale = np.rint(steps).astype(np.int64)
            error = max(error, float(np.max(np.abs(residual_scale - steps) / steps)))
            bias -= z_r * residual_scale * scale.astype(np.int64)
            residual_scale = residual_scale.astype(np.int32)
        else:
            r_mul, r_shift, r_error = _residual_rescale(s_r / s_y * 2 ** shift)
            attrs |= dict(residual_mul=r_mul, residual_shift=r_shift)
            error = max(error, r_error)
            bias -= z_r * r_mul * 2 ** r_shift
    return _Requant(wq, bias, scale.astype(np.int32), attrs, float(s_w.max()), error, residual_scale)


def _worst_preact(w, b, x_params, r_params):
    """The largest ``|w · x + b + r|`` (real units) any int8 input and residual with these (scale, zero point)
    can give: per output channel, the ends of the interval each term spans."""
    def span(params):
        s, z = params
        return (0.0, 0.0) if s is None else (s * (-128 - z), s * (127 - z))
    (x_lo, x_hi), (r_lo, r_hi) = span(x_params), span(r_params)
    w = w.reshape(len(w), -1)
    hi = np.maximum(w * x_lo, w * x_hi).sum(axis=1) + b + r_hi
    lo = np.minimum(w * x_lo, w * x_hi).sum(axis=1) + b + r_lo
    return float(np.maximum(np.abs(hi), np.abs(lo)).max())


def model_weight_scales(w):
    """Per output channel, the scale of the int8 grid float weights ``w`` already lie on (a pre-quantized
    model's: one scale for the layer, else one per channel, each its largest weight / 127), or None."""
    def on_grid(s):
        q = w / s.reshape((-1,) + (1,) * (w.ndim - 1))
        return np.all(np.abs(q - np.rint(q)) < 1e-3)
    peaks = np.abs(w).reshape(len(w), -1).max(axis=1)
    for s in (np.full(len(w), peaks.max() / 127.0), peaks / 127.0):
        if np.all(s > 0) and on_grid(s):
            return s
    return None


def host_reason(node, constants=None):
    """Why the accelerator cannot run fused layer ``node`` (it then stays on the host in float), or None.

    ``constants`` (the graph's) show whether a grouped convolution keeps each group's width (as many outputs
    as inputs: depthwise and the like), the only grouping the accelerator runs (the partition then checks
    that its groups fit the config's blocks)."""
    if node.attr("host_reason"):        # found by quantize (see output_reason)
        return node.attr("host_reason")
    if node.op == "TwDense":
        return None
    if node.op != "TwConv":
        return "not a fused conv/dense layer"
    strides, pads = node.attr("strides", [1, 1]), node.attr("pads", [0, 0, 0, 0])
    if len(strides) != 2:
        return f"{len(strides)}-D convolution"
    if node.attr("group", 1) != 1 and not width_keeping_groups(node, constants):
        return f"grouped convolution (group={node.attr('group')}) changing the channel count"
    if any(d != 1 for d in node.attr("dilations", [1, 1])):
        return f"dilation {node.attr('dilations')}"
    if node.attr("auto_pad", "NOTSET") not in ("NOTSET", ""):
        return f"auto_pad={node.attr('auto_pad')}"
    if strides[0] != strides[1]:
        return f"unequal strides {strides}"
    if len(set(pads)) != 1:
        return f"unequal pads {pads}"
    if node.attr("act") == "clip" and node.attr("clip_min") != 0.0:
        # the requantizer clips to the int8 range: [0, max] maps onto it, a lower bound below 0 does not
        return f"Clip with min {node.attr('clip_min')}"
    return None


def output_reason(node, s_y, z_y, given):
    """Why fused layer ``node`` cannot write int8 output of scale ``s_y`` and zero point ``z_y`` (``given``:
    the model's, not to be changed) on the accelerator, or None. Its requantizer clips at 0 for a
    ReLU, at -128 and 127 otherwise: a ReLU needs ``z_y`` at 0 or -128 (where the clip does it); a
    Clip's upper bound must be no lower than what 127 stands for (only a calibrated scale is narrowed
    to it)."""
    act = node.attr("act", "none")
    if act == "clip" and given and np.isfinite(node.attr("clip_max")) and node.attr("clip_max") / s_y + z_y < 127:
        return f"Clip to {node.attr('clip_max')} inside the output's range"
    if act != "none" and z_y not in (0, -128):
        return f"{'ReLU' if act == 'relu' else 'Clip'} with output zero point {z_y} (needs 0 or -128)"
    return None


def width_keeping_groups(node, constants):
    """Whether conv ``node`` (TwConv, QConv, ONNX Conv) is grouped with as many output channels as input ones
    in each group (depthwise: groups of one)."""
    w = (constants or {}).get(node.inputs[1]) if len(node.inputs) > 1 else None
    group = node.attr("group", 1)
    return group != 1 and w is not None and np.ndim(w) == 4 and w.shape[0] == group * w.shape[1]


def _accelerated_conv(node, constants):
    """Conv2dSpec-style parameters of a TwConv the accelerator runs, or None (it stays on the host)."""
    if host_reason(node, constants) is not None:
        return None
    return dict(stride=int(node.attr("strides", [1, 1])[0]), padding=int(node.attr("pads", [0, 0, 0, 0])[0]),
                group=int(node.attr("group", 1)))


def _relu(node, z_y=0):
    """Whether the requantizer must clip at 0 (with output zero point -128 its clip at -128 does it)."""
    return z_y == 0 and (node.attr("act") == "relu" or node.attr("act") == "clip" and node.attr("clip_min") == 0.0)


def quantize(graph, ranges, *, qparams=None, with_layers=False, per_channel=True, residual_before_scale=True):
    """The quantized graph (and, with ``with_layers``, the :class:`QuantLayer` choices).

    ``per_channel``: one weight scale per output channel (the accelerator
    then multiplies each channel's accumulator by its own int32 factor: on
    the STORE with ``per_channel_store``, else one ALU operation per output
    element); otherwise one scale per layer and the scalar multiplier of the
    STORE. ``residual_before_scale``: per-channel residuals may join before
    the scale (for a config whose STORE then scales: ``per_channel_store``;
    elsewhere it buys nothing and rounds the residual's factor coarser).

    ``qparams``: ``{tensor: (scale, zero point)}`` a pre-quantized model gives
    its tensors (:func:`~.passes.strip_fake_quant`); they win over
    ``ranges``. A layer whose input comes so keeps the model's weights where
    they lie on an int8 grid (:func:`model_weight_scales`). Zero points are
    folded into the bias (see :func:`_requant_per_channel`, which such a
    layer always uses), and an input with a zero point is padded with it on
    the host (a ``Pad`` node) instead of with zeros by the accelerator.
    """
    qparams = qparams or {}
    qp = {}                        # int8 tensor -> (scale, zero point)
    constants = dict(graph.constants)
    nodes, layers = [], []
    preact_peaks = _preact_peaks(graph, ranges)

    def tensor_qparams(name):
        if name in qparams:
            return qparams[name]
        r = ranges.get(name)
        if r is None:
            raise ModelError(f"tensor {name!r} has no calibrated range (was it computed for the samples?)")
        return max(r, 1e-8) / 127.0, 0

    def linear(op, name, out, params):
        constants[f"{out}/scale"] = np.array(params[0], dtype=np.float32)
        constants[f"{out}/zp"] = np.array(params[1], dtype=np.int8)
        nodes.append(Node(op, [name, f"{out}/scale", f"{out}/zp"], [out], {}, out))

    def as_int8(name):
        """``name`` as an int8 tensor (quantizing a float one on the way)."""
        if name in qp:
            return name
        q = f"{name}/q"
        if q not in qp:
            qp[q] = tensor_qparams(name)
            linear("QuantizeLinear", name, q, qp[q])
        return q

    def as_float(name):
        if name not in qp:
            return name
        f = f"{name}/f"
        if not any(f in n.outputs for n in nodes):
            linear("DequantizeLinear", name, f, qp[name])
        return f

    def padded(name, p):
        """int8 ``name`` padded by ``p`` on both spatial sides with its zero point (a host Pad node)."""
        out = f"{name}/pad{p}"
        if out not in qp:
            zp = np.array(qp[name][1], dtype=np.int8)
            pads = [0, 0, p, p, 0, 0, p, p]
            if graph.opset < 11:
                nodes.append(Node("Pad", [name], [out], {"pads": pads, "value": float(zp)}, out))
            else:
                constants[f"{out}/pads"], constants[f"{out}/value"] = np.array(pads, dtype=np.int64), zp
                nodes.append(Node("Pad", [name, f"{out}/pads", f"{out}/value"], [out], {}, out))
            qp[out] = qp[name]
        return out

    renamed = {}
    for node in graph.nodes:
        inputs = [renamed.get(i, i) for i in node.inputs]
        conv = _accelerated_conv(node, constants) if node.op == "TwConv" else None
        accelerated = node.op == "TwDense" or conv is not None
        if accelerated:
            out = node.outputs[0]
            s_y, z_y = tensor_qparams(out)
            reason = output_reason(node, s_y, z_y, out in qparams)
            if reason:          # (host_reason reports it in the partition table)
                node, accelerated = Node(node.op, node.inputs, node.outputs, node.attrs | {"host_reason": reason},
                                         node.name), False
        if accelerated:
            given = node.inputs[0] in qparams
            x = as_int8(inputs[0])
            (s_x, z_x), w = qp[x], constants[inputs[1]].astype(np.float64)
            if node.attr("act") == "clip" and np.isfinite(node.attr("clip_max")) and out not in qparams:
                s_y = min(s_y, node.attr("clip_max") / 127.0)
            b = constants[inputs[2]] if inputs[2] else np.zeros(w.shape[0])
            r = as_int8(inputs[3]) if conv is not None and len(inputs) > 3 and inputs[3] else None
            s_r, z_r = qp[r] if r else (None, 0)
            s_w = model_weight_scales(w) if given else None
            if s_w is not None:     # the model's layer: no input it can take overflows it (ONNX's never does)
                rq = _requant_per_channel(w, s_x, s_y, b, _worst_preact(w, b, (s_x, z_x), (s_r, z_r)), s_r,
                                          s_w=s_w, z_x=z_x, z_y=z_y, z_r=z_r, margin=1.0,
                                          residual_before_scale=residual_before_scale)
            elif per_channel or z_x or z_y or z_r:
                rq = _requant_per_channel(w, s_x, s_y, b, preact_peaks[node.name], s_r, s_w=s_w, z_x=z_x, z_y=z_y,
                                          z_r=z_r, residual_before_scale=residual_before_scale)
            else:
                rq = _requant_per_tensor(w, s_x, s_y, b, preact_peaks[node.name], s_r)
            if conv is not None and z_x and conv["padding"]:
                x, conv = padded(x, conv["padding"]), dict(conv, padding=0)
            op = "QConv" if conv is not None else "QDense"
            roles = dict(data=x, weight=f"{node.name}/wq", bias=f"{node.name}/bq", residual=r or "",
                         scale=f"{node.name}/scale" if rq.scale is not None else "",
                         residual_scale=f"{node.name}/rscale" if rq.residual_scale is not None else "")
            constants[roles["weight"]] = rq.weights
            # (wrapped like the hardware's sums: zero-point terms may overflow on the way and cancel)
            constants[roles["bias"]] = wrap(rq.bias, 32).astype(np.int32)
            if rq.scale is not None:
                constants[roles["scale"]] = rq.scale
            if rq.residual_scale is not None:
                constants[roles["residual_scale"]] = rq.residual_scale
            attrs = rq.attrs | dict(relu=_relu(node, z_y), input_scale=s_x, weight_scale=rq.weight_scale,
                                    output_scale=s_y)
            if conv is not None:
                attrs |= dict(conv, kernel=list(rq.weights.shape[2:]))
            q_inputs = [roles[k] for k in LAYER_INPUTS[op]]
            while not q_inputs[-1]:
                q_inputs.pop()
            q = f"{out}/q"
            nodes.append(Node(op, q_inputs, [q], attrs, node.name))
            qp[q] = (s_y, z_y)
            renamed[out] = q
            layers.append(QuantLayer(node.name, node.op, s_x, rq.weight_scale, s_y, attrs["mul"], attrs["shift"],
                                     attrs.get("residual_mul", 0), attrs.get("residual_shift", 0),
                                     rq.scale is not None, rq.error, z_x, z_y, rq.residual_scale is not None))
        elif node.op == "Shape":        # reads only the shape: the int8 tensor will do
            nodes.append(Node(node.op, inputs, node.outputs, node.attrs, node.name))
        elif node.op in INT8_EXACT_OPS and inputs[0] in qp and (node.op != "Relu" or qp[inputs[0]][1] == 0):
            q = f"{node.outputs[0]}/q"
            nodes.append(Node(node.op, [inputs[0]] + inputs[1:], [q], node.attrs, node.name))
            qp[q] = qp[inputs[0]]
            renamed[node.outputs[0]] = q
        else:           # on the host in float: what the model quantizes reaches it quantized
            nodes.append(Node(node.op, [as_float(as_int8(i) if orig in qparams else i) if i else i
                                        for i, orig in zip(inputs, node.inputs)], node.outputs, node.attrs,
                              node.name))
            for o in node.outputs:      # the model quantizes it: so does the host, as the model does
                if o in qparams and o not in (g.name for g in graph.outputs):
                    qp[f"{o}/q"] = qparams[o]
                    linear("QuantizeLinear", o, f"{o}/q", qparams[o])
                    renamed[o] = f"{o}/q"
    outputs = []
    for o in graph.outputs:
        name = renamed.get(o.name, o.name)
        f = as_float(name)
        if f != o.name:
            nodes.append(Node("Identity", [f], [o.name], {}, f"{o.name}/out"))
        outputs.append(TensorInfo(o.name, o.shape, o.dtype))
    q = graph.replace(nodes=nodes, constants=constants, outputs=outputs)
    return (q, layers) if with_layers else q


def _preact_peaks(graph, ranges):
    """Per fused layer: the calibrated magnitude of ``acc + bias + residual`` (the output before its
    activation), in real units."""
    peaks = {}
    for n in graph.nodes:
        if n.op in ("TwConv", "TwDense"):
            if f"{n.name}/preact" not in ranges:
                raise ModelError(f"layer {n.name} has no calibrated pre-activation range (calibrate the graph "
                                 f"it belongs to)")
            peaks[n.name] = max(ranges[f"{n.name}/preact"], 1e-8)
    return peaks


def layer_report(float_graph, quant_graph, layers, feeds, *, quant_env=None):
    """``[(layer, SQNR dB of its output against the float model)]`` on ``feeds``.

    ``float_graph``: the float model; for a pre-quantized one, the model as
    it came (its QuantizeLinear → DequantizeLinear pairs round and clip: a
    tensor they quantize is compared with its dequantized value).
    ``quant_env``: every tensor of ``quant_graph`` on ``feeds`` if already computed (``run_graph(keep=True)``).
    """
    _, f_env = run_graph(float_graph, feeds, keep=True)
    producer = float_graph.producer()
    for n in float_graph.nodes:
        q = producer.get(n.inputs[0]) if n.op == "DequantizeLinear" else None
        if q is not None and q.op == "QuantizeLinear":
            f_env[q.inputs[0]] = f_env[n.outputs[0]]
    q_env = quant_env if quant_env is not None else run_graph(quant_graph, feeds, keep=True)[1]
    by_name = {n.name: n for n in quant_graph.nodes}
    rows = []
    for layer in layers:
        node = by_name[layer.name]
        out = node.outputs[0]
        approx = (q_env[out].astype(np.float64) - layer.output_zero_point) * layer.output_scale
        rows.append((layer, sqnr_db(f_env[out.removesuffix("/q")], approx)))
    return rows
