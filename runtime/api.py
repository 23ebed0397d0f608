"""One-call operators: ``tilewright.conv2d`` and ``tilewright.dense``.

They pack NCHW / N×K int8 tensors into the accelerator's layouts (padding
channels to the blocks), compile the operator once per shape and config
(cached), run it on a backend and unpack the int8 result::

    out, stats = tilewright.conv2d(x, w, b, stride=1, padding=1, mul=3, shift=9, relu=True)

The result equals ``clip(((acc + bias [+ residual]) · mul) >> shift, lo, 127)``
in int32 two's complement with an arithmetic shift, ``acc`` the exact
convolution or product, ``lo`` 0 with ``relu`` else −128.
"""

import functools
import itertools

import numpy as np

from tilewright.compiler import build
from tilewright.compiler.checker import CheckError
from tilewright.compiler.ops import (Conv2dSpec, DenseSpec, conv2d as conv2d_schedule, dense as dense_schedule,
                                     groups_fit, ranked_conv_tiles, ranked_dense_tiles)
from tilewright.compiler.schedule import ScheduleError
from tilewright.config import load_config
from tilewright.isa import IMM_BITS
from tilewright.semantics import wrap

from .device import get_device
from .layout import pack_bias, pack_grouped, pack_nchw, pack_oihw, pack_rows, round_up, unpack_nchw, unpack_rows

__all__ = ["conv2d", "dense", "compile_conv2d", "compile_dense", "schedule_problem", "residual_rescale",
           "OperatorError"]


class OperatorError(ValueError):
    """Bad arguments to an operator (the message names the argument)."""


def _int_array(x, name, dtype, ndim):
    x = np.asarray(x)
    if x.dtype != np.dtype(dtype):
        raise OperatorError(f"{name} must be {dtype}, not {x.dtype}")
    if x.ndim != ndim:
        raise OperatorError(f"{name} must have {ndim} dimensions, not shape {x.shape}")
    return x


def _nonempty(**dims):
    for name, n in dims.items():
        if n == 0:
            raise OperatorError(f"{name} is 0; every dimension must be at least 1")


def _check_epilogue(mul, shift):
    limit = 1 << (IMM_BITS - 1)
    if not isinstance(mul, (int, np.integer)) or not -limit <= mul < limit:
        raise OperatorError(f"mul={mul!r} must be an integer in [{-limit}, {limit - 1}]")
    if not isinstance(shift, (int, np.integer)) or not 0 <= shift < 64:
        raise OperatorError(f"shift={shift!r} must be an integer in [0, 63]")


def _channel_vectors(cfg, channels, what, **vectors):
    """Per-output-channel int32 vectors (bias, scale) checked and packed like the bias."""
    packed = {}
    for name, v in vectors.items():
        if v is None:
            continue
        v = _int_array(v, name, "int32", 1)
        if v.size != channels:
            raise OperatorError(f"{name} has {v.size} values for {channels} {what}")
        packed[name] = pack_bias(v, cfg.batch, cfg.block_out)
    return packed


#: Tilings the heuristic tries, best first, before it gives up on a layer whose programs do not pass the
#: checks (the config's queues too shallow for the schedule, a field the ISA cannot hold).
HEURISTIC_TRIES = 8


def _compile(schedule, ranked, spec, config, tiles):
    """The checked Program of ``tiles``, or of the heuristic's best tiling whose program passes the checks."""
    if tiles is not None:
        s, _, _ = schedule(spec, config, tiles)
        return build(s, config)
    first = None
    for t in itertools.islice(ranked(spec, config), HEURISTIC_TRIES):
        try:
            s, _, _ = schedule(spec, config, t)
            return build(s, config)
        except (CheckError, ScheduleError) as e:      # (the next tiling may hold fewer tokens or fit the fields)
            first = first or e
    cfg = load_config(config)
    queues = (f" (token queues {cfg.token_queue_depth}, command queues {cfg.cmd_queue_depth} deep)"
              if isinstance(first, CheckError) else "")
    error = ScheduleError(f"no schedule of {spec} runs on config {cfg.name!r}{queues}: {first}")
    error.reason = getattr(first, "reason", str(first))
    raise error from None


def schedule_problem(config):
    """Why the compiler cannot run even the smallest layers on ``config``, or None.

    The smallest layers: a 3×3 convolution with padding, bias and a residual
    over one block of channels, and a dense layer with bias over one block of
    features. A config they do not compile for (buffers below a 3×3 window,
    queues too shallow for any schedule; token queues must hold two) is
    refused where it enters, with the reason.
    """
    cfg = load_config(config)
    if cfg.token_queue_depth < 2:
        return ("token_queue_depth=1: the compiler's schedules keep up to two dependency tokens in flight on a queue "
                "(a producer one step ahead), which a 1-deep queue deadlocks; use 2 or more")
    layers = [("3x3 convolution of one channel block (padding, bias, residual)", compile_conv2d,
               Conv2dSpec(cfg.batch, cfg.block_in, 4, 4, cfg.block_out, (3, 3), 1, 1, bias=True, residual=True)),
              ("dense layer of one feature block (bias)", compile_dense,
               DenseSpec(cfg.batch, cfg.block_in, cfg.block_out, bias=True))]
    for what, compile_layer, spec in layers:
        try:
            compile_layer(spec, cfg)
        except (CheckError, ScheduleError) as e:
            return f"the compiler cannot run even a {what} on this config: {getattr(e, 'reason', e)}"
    return None


@functools.lru_cache(maxsize=64)
def compile_conv2d(spec, config, tiles=None):
    """The :class:`Program` of a packed conv2d with ``tiles`` (default: the heuristic's), cached."""
    return _compile(conv2d_schedule, ranked_conv_tiles, spec, config, tiles)


@functools.lru_cache(maxsize=64)
def compile_dense(spec, config, tiles=None):
    """The :class:`Program` of a packed dense layer with ``tiles`` (default: the heuristic's), cached."""
    return _compile(dense_schedule, ranked_dense_tiles, spec, config, tiles)


def residual_rescale(residual_mul, residual_shift, channels, config):
    """``(spec fields, packed tensors)`` of a residual added as ``(r · residual_mul) << residual_shift`` to
    ``channels`` output channels: with a shift, one ALU vector MUL by ``residual_mul << residual_shift``
    (``residual_scale``, wrapped to the accumulator width: the same integers, as MUL and the left shift both
    keep the low bits) in place of a MUL and a shift; without, the immediate ``residual_mul``."""
    cfg = load_config(config)
    if not residual_shift:
        return {"residual_mul": int(residual_mul), "residual_shift": 0}, {}
    k = wrap(int(residual_mul) << int(residual_shift), cfg.acc_width)
    return {"residual_scale": True}, {"residual_scale": pack_bias(np.full(channels, k), cfg.batch, cfg.block_out)}


def conv2d(data, weight, bias=None, *, stride=1, padding=0, mul=1, shift=0, relu=False, residual=None,
           residual_mul=1, residual_shift=0, scale=None, groups=1, config="default", backend="fsim", port=None,
           memory=None):
    """int8 NCHW ``data`` ⊛ int8 OIHW ``weight`` (+ int32 ``bias``) with the requantizing epilogue.

    ``groups``: a grouped convolution with as many output channels as input ones, each group of
    ``C / groups`` channels (dividing the config's block) convolved alone; weights C×(C/groups)×KH×KW.
    ``groups = C`` is a depthwise convolution. See :mod:`tilewright.compiler.ops`.

    ``residual`` (int8, the output's shape) is added as ``(residual · residual_mul) << residual_shift``;
    ``scale`` (int32, one per output channel) multiplies the accumulator before bias and residual.

    ``backend`` is ``"fsim"``, ``"rtl"`` or ``"fpga"`` (with ``port``, a board's serial port); on
    ``rtl``, ``memory`` is how DRAM answers (a :class:`~tilewright.sim.fast.DramTiming`).
    Returns ``(output, stats)``: int8 ``N×O×OH×OW`` and the backend's counters.
    """
    cfg = load_config(config)
    data = _int_array(data, "data", "int8", 4)
    weight = _int_array(weight, "weight", "int8", 4)
    N, C, H, W = data.shape
    O, I, KH, KW = weight.shape
    _nonempty(batch=N, in_channels=C, out_channels=O, kernel_height=KH, kernel_width=KW)
    if not (isinstance(groups, (int, np.integer)) and groups >= 1 and C % groups == 0):
        raise OperatorError(f"groups={groups!r} must be a positive integer dividing the {C} channels")
    grouped = groups != 1
    if grouped and not (O == C and I == C // groups):
        raise OperatorError(f"groups={groups}: weights must be {C}x{C // groups}xKHxKW (as many outputs as "
                            f"inputs), not {O}x{I}x{KH}x{KW}")
    if not grouped and I != C:
        raise OperatorError(f"weight has {I} input channels, data has {C}")
    if not (isinstance(stride, (int, np.integer)) and stride >= 1 and isinstance(padding, (int, np.integer))
            and padding >= 0):
        raise OperatorError(f"stride must be ≥ 1 and padding ≥ 0 integers, got {stride!r}, {padding!r}")
    stride, padding = int(stride), int(padding)
    _check_epilogue(mul, shift)
    _check_epilogue(residual_mul, residual_shift)
    if residual_shift >= cfg.acc_width:
        raise OperatorError(f"residual_shift={residual_shift} must be below the accumulator width {cfg.acc_width}")
    OH, OW = (H + 2 * padding - KH) // stride + 1, (W + 2 * padding - KW) // stride + 1
    if OH < 1 or OW < 1:
        raise OperatorError(f"a {KH}x{KW} kernel does not fit a {H}x{W} input padded by {padding}")
    rescale, rescale_tensors = residual_rescale(residual_mul, residual_shift, O, cfg) if residual is not None \
        else ({}, {})
    spec = Conv2dSpec(round_up(N, cfg.batch), round_up(C, cfg.block_in), H, W, round_up(O, cfg.block_out),
                      (KH, KW), stride, padding, bias=bias is not None, residual=residual is not None,
                      mul=int(mul), shift=int(shift), relu=bool(relu), scale=scale is not None,
                      group_channels=C // groups if grouped else 0, **rescale)
    if grouped and not groups_fit(cfg, C // groups):
        raise OperatorError(f"a grouped conv needs square GEMM blocks that its {C // groups}-channel groups divide; "
                            f"config {cfg.name} has block_in {cfg.block_in}, block_out {cfg.block_out}")
    tensors = {"data": pack_nchw(data, cfg.batch, cfg.block_in),
               "weight": pack_grouped(weight, cfg.block_out) if grouped
               else pack_oihw(weight, cfg.block_out, cfg.block_in)}
    tensors |= _channel_vectors(cfg, O, "output channels", bias=bias, scale=scale)
    if residual is not None:
        residual = _int_array(residual, "residual", "int8", 4)
        if residual.shape != (N, O, OH, OW):
            raise OperatorError(f"residual has shape {residual.shape}, the output is {(N, O, OH, OW)}")
        tensors["residual"] = pack_nchw(residual, cfg.batch, cfg.block_out)
        tensors |= rescale_tensors
    program = compile_conv2d(spec, cfg)
    outputs, stats = get_device(backend, cfg, port=port, memory=memory).run_program(program, tensors)
    return unpack_nchw(outputs["out"], N, O), stats


def dense(data, weight, bias=None, *, mul=1, shift=0, relu=False, scale=None, config="default", backend="fsim",
          port=None, memory=None):
    """int8 ``data`` (N×K) · int8 ``weight`` (M×K)ᵀ (+ int32 ``bias``) with the requantizing epilogue.

    ``scale`` (int32, one per output) multiplies the accumulator before the bias. ``backend``, ``port``
    and ``memory`` as for :func:`conv2d`.
    """
    cfg = load_config(config)
    data = _int_array(data, "data", "int8", 2)
    weight = _int_array(weight, "weight", "int8", 2)
    N, K = data.shape
    M, K2 = weight.shape
    _nonempty(batch=N, in_features=K, out_features=M)
    if K2 != K:
        raise OperatorError(f"weight has {K2} input features, data has {K}")
    _check_epilogue(mul, shift)
    spec = DenseSpec(round_up(N, cfg.batch), round_up(K, cfg.block_in), round_up(M, cfg.block_out),
                     bias=bias is not None, mul=int(mul), shift=int(shift), relu=bool(relu), scale=scale is not None)
    tensors = {"data": pack_rows(data, cfg.batch, cfg.block_in),
               "weight": pack_rows(weight, cfg.block_out, cfg.block_in)}
    tensors |= _channel_vectors(cfg, M, "outputs", bias=bias, scale=scale)
    program = compile_dense(spec, cfg)
    outputs, stats = get_device(backend, cfg, port=port, memory=memory).run_program(program, tensors)
    return unpack_rows(outputs["out"], N, M), stats
