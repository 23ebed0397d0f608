"""Operators: packed conv2d and dense with a fused epilogue, and their default schedules.

Tensors are in the accelerator's packed layouts (see
:mod:`tilewright.runtime.layout`): data ``(N/b, C/i, H, W, b, i)``, conv
weights ``(O/o, C/i, KH, KW, o, i)``, dense data ``(N/b, K/i, b, i)`` and
weights ``(M/o, K/i, o, i)``, bias ``(O/o, b, o)`` int32 (repeated over the
batch rows), residual and output like the result, int8. ``b``, ``i``,
``o`` are the config's batch, block_in and block_out.

The epilogue computes ``clip(((acc [· scale] + bias [+ residual]) · mul) >>
shift, lo, hi)`` in the accumulator (``(lo, hi)`` from
:func:`tilewright.semantics.out_range`: 127 and 0 with ReLU, else −128, for
int8 outputs): one
ALU operation per term, in place (the compiler moves bias, ``mul``, ``shift``
and the clip into the STORE). ``scale`` is an optional per-output-channel
int32 multiplier (layout like the bias): per-channel requantization. With
``scaled_residual`` the (rescaled) residual joins the accumulator before the
scale instead, ``clip(((acc + residual · residual_scale) · scale + bias) >>
shift)``: the scale and the bias then ride on the STORE of a config with
``per_channel_store``.

A **grouped** conv2d whose groups each keep their width and fit in a block
(``group_channels`` channels per group dividing the block; depthwise, ONNX's
group = channels, is 1) runs on the same GEMM: output channel block ``o``
sums over input block ``o`` alone, with weight blocks ``(O/o, 1, KH, KW, o,
i)`` that are block-diagonal (``runtime.layout.pack_grouped``). A GEMM
micro-op then does the ``block · group_channels`` useful products of a
block's channels at one tap, in the cycle a dense one does ``block²``: the
GEMM core's rate for depthwise work is ``batch · block`` MACs per cycle, and
that is its compute roof.
"""

import itertools
from dataclasses import dataclass

from tilewright.config import load_config
from tilewright.semantics import out_range

from . import te
from .expr import max_, min_
from .intrin import gemm_intrinsic
from .schedule import ScheduleError, create_schedule
from .space import Knob, Space

__all__ = ["Conv2dSpec", "DenseSpec", "conv2d", "dense", "ConvTiles", "DenseTiles", "conv_space", "dense_space",
           "conv_tiles", "dense_tiles", "conv_cycles", "conv_cost", "ConvCost", "groups_fit"]

#: Virtual threads a schedule may ask for.
THREADS = (1, 2, 4)


@dataclass(frozen=True)
class Conv2dSpec:
    """Shape and epilogue of a packed conv2d (channel counts already multiples of the blocks)."""
    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel: tuple = (3, 3)
    stride: int = 1
    padding: int = 0
    bias: bool = True
    residual: bool = False
    mul: int = 1
    shift: int = 0
    relu: bool = False
    residual_mul: int = 1         # the residual is added as (residual · residual_mul) << residual_shift (ALU)
    residual_shift: int = 0
    scale: bool = False           # per-output-channel multiplier of the accumulator (on the STORE, or ALU MUL)
    group_channels: int = 0       # 0: dense; k: groups of k channels inside a block (1: depthwise; see above)
    residual_scale: bool = False  # the residual is multiplied by an int32 per-channel input (one ALU vector MUL)
    scaled_residual: bool = False  # the residual joins before the scale (needs scale, residual and residual_scale)

    @property
    def out_height(self):
        return (self.height + 2 * self.padding - self.kernel[0]) // self.stride + 1

    @property
    def out_width(self):
        return (self.width + 2 * self.padding - self.kernel[1]) // self.stride + 1

    @property
    def macs(self):
        """Multiply-accumulates the layer means (a grouped one: its group's input channels per output)."""
        return (self.batch * self.out_channels * self.out_height * self.out_width
                * (self.group_channels or self.in_channels) * self.kernel[0] * self.kernel[1])

    @property
    def block_diagonal(self):
        """Grouped: each output channel block sums over its own input block (see the module docstring)."""
        return self.group_channels > 0

    def reduce_blocks(self, cfg):
        """Input channel blocks each output channel block sums over: all of them, or (grouped) its own."""
        return 1 if self.block_diagonal else self.in_channels // cfg.block_in

    @property
    def channel_vectors(self):
        """The epilogue's int32 inputs of one entry per output channel (laid out as the bias), by name."""
        return tuple(n for n in ("bias", "scale", "residual_scale") if getattr(self, n))

    @property
    def compact_rows(self):
        """Whether an input tile holds only the rows the kernel reads: a strided kernel one row high
        without padding reads every ``stride``-th row (a LOAD skips the others with its row stride).
        Not for grouped convs, whose input block follows the output block (left as they were)."""
        return self.kernel[0] == 1 and self.stride > 1 and not self.padding and not self.block_diagonal


@dataclass(frozen=True)
class DenseSpec:
    batch: int
    in_features: int
    out_features: int
    bias: bool = True
    mul: int = 1
    shift: int = 0
    relu: bool = False
    scale: bool = False

    @property
    def macs(self):
        return self.batch * self.in_features * self.out_features

    @property
    def channel_vectors(self):
        """The epilogue's int32 inputs of one entry per output feature (laid out as the bias), by name."""
        return tuple(n for n in ("bias", "scale") if getattr(self, n))


@dataclass(frozen=True)
class ConvTiles:
    """Tile sizes in blocks/rows: output channels, rows, columns, input channels; virtual threads and
    the tile loop they split (``"out_channels"`` or ``"rows"``; None: channels when their tiles divide
    evenly, else rows)."""
    out_channels: int
    rows: int
    cols: int
    in_channels: int
    threads: int = 1
    thread_axis: str | None = None


@dataclass(frozen=True)
class DenseTiles:
    """Tile sizes in blocks: batch, output and input features; virtual threads and the tile loop they
    split (``"out_features"`` or ``"batch"``; None: outputs when their tiles divide evenly, else batch)."""
    batch: int
    out_features: int
    in_features: int
    threads: int = 1
    thread_axis: str | None = None


def _thread_axis(threads, axis, extents):
    """The tile loop (a name of ``extents``, in preference order) that ``threads`` virtual threads split:
    ``axis`` if given, else the first whose tile count they divide; a ScheduleError if they cannot."""
    if axis is not None and axis not in extents:
        raise ScheduleError(f"thread_axis={axis!r} must be one of {', '.join(extents)}")
    candidates = [axis] if axis else list(extents)
    for name in candidates:
        if extents[name] % threads == 0:
            return name
    tiles = " or the ".join(f"{name} tiles ({extents[name]})" for name in candidates)
    raise ScheduleError(f"{threads} virtual threads need the {tiles} to be a multiple of {threads}")


def _split_problem(threads, axis, tile_counts):
    """Why ``threads`` virtual threads cannot split the tile loop ``axis`` (a name of ``tile_counts``,
    None with one thread), or None."""
    if (threads == 1) != (axis is None):
        return "a thread axis goes with more than one virtual thread, and only then"
    if axis is not None and tile_counts[axis] % threads:
        return f"{threads} threads do not divide the {tile_counts[axis]} {axis} tiles"
    return None


def _epilogue(acc, spec, terms, out_width):
    """``clip(((acc + terms…) · mul) >> shift, lo, hi)`` as one expression (range from :func:`out_range`)."""
    v = acc
    for t in terms:
        v = v + t
    if spec.mul != 1:
        v = v * spec.mul
    if spec.shift:
        v = v >> spec.shift
    lo, hi = out_range(out_width, spec.relu)
    return max_(min_(v, hi), lo)


def groups_fit(cfg, group_channels):
    """Whether ``cfg``'s GEMM runs groups of ``group_channels`` channels block-diagonally: square blocks that
    the groups divide (see the module docstring)."""
    return cfg.block_in == cfg.block_out and cfg.block_in % group_channels == 0


def _check_packed(cfg, **dims):
    """The batch, input and output dimensions (in that order) must be multiples of the config's blocks."""
    for (name, n), block in zip(dims.items(), (cfg.batch, cfg.block_in, cfg.block_out)):
        if n % block:
            raise ScheduleError(f"{name}={n} is not a multiple of {block}; pack with runtime.layout first")


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


# -- conv2d --------------------------------------------------------------------------

def conv2d_compute(spec, cfg):
    """Tensor expressions of a packed conv2d; returns (inputs by name, output)."""
    c = cfg
    acc = f"int{c.acc_width}"
    NB, CB, OB = spec.batch // c.batch, spec.in_channels // c.block_in, spec.out_channels // c.block_out
    KH, KW = spec.kernel
    s, p = spec.stride, spec.padding
    RB = spec.reduce_blocks(c)
    data = te.placeholder((NB, CB, spec.height, spec.width, c.batch, c.block_in), f"int{c.inp_width}", "data")
    weight = te.placeholder((OB, RB, KH, KW, c.block_out, c.block_in), f"int{c.wgt_width}", "weight")
    padded = te.pad(data, (0, 0, p, p, 0, 0), (0, 0, p, p, 0, 0), "data_pad") if p else data
    if spec.compact_rows:       # the rows the kernel reads, which the schedule keeps on chip
        padded = te.compute((NB, CB, spec.out_height, spec.width, c.batch, c.block_in),
                            lambda n, ch, y, x, b, i: data[n, ch, y * s, x, b, i], "data_rows",
                            dtype=f"int{c.inp_width}")
    row_step = 1 if spec.compact_rows else s
    ic, kh, kw, ii = (te.reduce_axis(RB, "ic"), te.reduce_axis(KH, "kh"), te.reduce_axis(KW, "kw"),
                      te.reduce_axis(c.block_in, "ii"))
    shape = (NB, OB, spec.out_height, spec.out_width, c.batch, c.block_out)
    # grouped: output block o reads input block o (its weight blocks are block-diagonal: see pack_grouped)
    conv = te.compute(shape, lambda n, o, y, x, b, oo: te.sum(
        padded[n, o + ic if spec.block_diagonal else ic, y * row_step + kh, x * s + kw, b, ii].astype(acc)
        * weight[o, ic, kh, kw, oo, ii].astype(acc), [ic, kh, kw, ii]), "conv", dtype=acc)
    # (in this order, which the program's DRAM image follows: bias, residual, the other vectors)
    vectors = {n: te.placeholder((OB, c.batch, c.block_out), acc, n) for n in spec.channel_vectors}
    inputs = {"data": data, "weight": weight}
    if "bias" in vectors:
        inputs["bias"] = vectors.pop("bias")
    if spec.residual:
        inputs["residual"] = te.placeholder(shape, f"int{c.out_width}", "residual")
    inputs |= vectors

    scaled = None
    if spec.residual and (spec.residual_scale or spec.residual_mul != 1 or spec.residual_shift):
        def rescale(n, o, y, x, b, oo):         # in place on the ALU
            v = inputs["residual"][n, o, y, x, b, oo].astype(acc)
            if spec.residual_scale:
                return v * inputs["residual_scale"][o, b, oo]
            v = v * spec.residual_mul
            return v << spec.residual_shift if spec.residual_shift else v
        scaled = te.compute(shape, rescale, "residual_scaled", dtype=acc)

    def epilogue(n, o, y, x, b, oo):
        v = conv[n, o, y, x, b, oo]
        residual = scaled[n, o, y, x, b, oo] if scaled is not None else \
            inputs["residual"][n, o, y, x, b, oo].astype(acc) if spec.residual else None
        if spec.scaled_residual:                # it joins before the scale
            v, residual = v + residual, None
        if spec.scale:
            v = v * inputs["scale"][o, b, oo]
        terms = [inputs["bias"][o, b, oo]] if spec.bias else []
        if residual is not None:
            terms.append(residual)
        return _epilogue(v, spec, terms, c.out_width)

    res = te.compute(shape, epilogue, "epilogue", dtype=acc)
    out = te.compute(shape, lambda n, o, y, x, b, oo: res[n, o, y, x, b, oo].astype(f"int{c.out_width}"),
                     "out", dtype=f"int{c.out_width}")
    return inputs, out, (padded, conv, res, scaled)


def _conv_needs(spec, cfg, t, compact=True):
    """SRAM entries (inp, wgt, acc) and micro-ops per GEMM of tiles ``t`` (``compact=False``: as if an input
    tile held every row between its first and last, which it does unless ``spec.compact_rows``)."""
    KH, KW = spec.kernel
    rows = t.rows if spec.compact_rows and compact else (t.rows - 1) * spec.stride + KH
    cols = (t.cols - 1) * spec.stride + KW
    inp = (t.out_channels if spec.block_diagonal else t.in_channels) * rows * cols
    wgt = t.out_channels * t.in_channels * KH * KW
    out = t.out_channels * t.rows * t.cols
    acc = out + t.out_channels * len(spec.channel_vectors) + (out if spec.residual else 0)
    loops = sorted([t.out_channels, t.rows, t.cols, t.in_channels, KH, KW])
    uops = 1
    for n in loops[:-2]:
        uops *= n
    return inp * t.threads, wgt * t.threads, acc * t.threads, uops


# Fixed cycles per instruction beyond its data, measured on the RTL (benchmarks/rtl_throughput.py and
# the ResNet-18 timelines): a LOAD's DRAM latency, the GEMM pipeline, a STORE with its set_bias.
LOAD_OVERHEAD, GEMM_OVERHEAD, STORE_OVERHEAD = 20, 10, 30


@dataclass(frozen=True)
class ConvCost:
    """The parts of :func:`conv_cycles`' estimate: ``tiles`` output tiles of ``steps`` reduction steps in
    all; per step the cycles of its loads and GEMMs, per tile those of its stores."""
    tiles: int
    steps: int
    load: int
    gemm: int
    store: int

    @property
    def cycles(self):
        """The busiest stream, plus the first step's loads (nothing to overlap them with) and the last
        tile's stores (nothing after them)."""
        return max(self.steps * self.load, self.steps * self.gemm, self.tiles * self.store) + self.load + self.store


def conv_cost(spec, cfg, t):
    """The :class:`ConvCost` of tiles ``t``."""
    c = cfg
    KH, KW = spec.kernel
    RB, OB = spec.reduce_blocks(c), spec.out_channels // c.block_out
    rows, cols = (t.rows - 1) * spec.stride + KH, (t.cols - 1) * spec.stride + KW
    inp_blocks = t.out_channels if spec.block_diagonal else t.in_channels
    beats = {m: -(-c.elem_bytes(m) // c.bus_bytes) for m in ("inp", "wgt", "out")}
    tiles = (OB // t.out_channels) * (spec.out_height // t.rows) * (spec.out_width // t.cols) * (spec.batch // c.batch)
    return ConvCost(
        tiles=tiles, steps=tiles * (RB // t.in_channels),
        load=(inp_blocks * (rows * cols * beats["inp"] + LOAD_OVERHEAD)
              + t.out_channels * t.in_channels * KH * KW * beats["wgt"] + LOAD_OVERHEAD),
        gemm=t.out_channels * t.rows * t.cols * t.in_channels * KH * KW * c.gemm_passes + 2 * GEMM_OVERHEAD,
        store=t.out_channels * (t.rows * t.cols * beats["out"] + STORE_OVERHEAD))


def conv_cycles(spec, cfg, t):
    """Estimated accelerator cycles of tiles ``t`` (:class:`ConvCost`)."""
    return conv_cost(spec, cfg, t).cycles


def _conv_tile_counts(spec, cfg, t):
    """The tile loops virtual threads may split, with their tile counts (the names :func:`_thread_axis` takes)."""
    return {"out_channels": spec.out_channels // cfg.block_out // t.out_channels, "rows": spec.out_height // t.rows}


def _epilogue_resident(spec, cfg, t):
    """Whether the layer's per-channel vectors (``spec.channel_vectors``) stay on chip whole, loaded
    once: when its output-channel tiles would load them again between a thread's tiles (a compute-stream
    LOAD there stalls the GEMMs) and they fit beside the tiles."""
    per_channel = len(spec.channel_vectors)
    OB = spec.out_channels // cfg.block_out
    tile_counts = _conv_tile_counts(spec, cfg, t)
    on_channels = t.threads > 1 and _thread_axis(t.threads, t.thread_axis, tile_counts) == "out_channels"
    if not per_channel or tile_counts["out_channels"] <= (t.threads if on_channels else 1):
        return False
    _, _, acc, _ = _conv_needs(spec, cfg, t)
    return acc - t.out_channels * per_channel * t.threads + OB * per_channel <= cfg.acc_depth


def _fits(c, *, inp, wgt, acc, uops):
    """Whether a tiling's buffer needs (entries per buffer, micro-ops per kernel) fit config ``c``.

    A kernel's micro-ops may take half the uop buffer (the other half holds
    the next kernel's while this one runs), and 1024 at most.
    """
    return _fit_problem(c, inp, wgt, acc, uops) is None


def _fit_problem(c, inp, wgt, acc, uops):
    """Which buffer a tiling's needs (as :func:`_fits` takes them) overfill, or None."""
    limits = {"inp": (inp, c.inp_depth), "wgt": (wgt, c.wgt_depth), "acc": (acc, c.acc_depth),
              "uop": (uops, min(1024, c.uop_depth // 2))}
    over = [f"{name} {need} > {have}" for name, (need, have) in limits.items() if need > have]
    return f"buffers overfilled: {', '.join(over)}" if over else None


def conv_tiles(spec, cfg, threads=None):
    """Tiles that fit the buffers and take the fewest estimated cycles (:func:`conv_cycles`), two
    virtual threads when they fit."""
    return next(ranked_conv_tiles(spec, cfg, threads))


def ranked_conv_tiles(spec, cfg, threads=None):
    """Every tiling that fits, best first (two virtual threads before one); :class:`ScheduleError` naming the
    buffers that even the smallest tiling overfills when none fits."""
    return _ranked(_conv_candidates, spec, cfg, threads, "one output row, column and channel block",
                   lambda c: _fit_problem(c, *_conv_needs(spec, c, ConvTiles(1, 1, 1, 1))))


def _ranked(candidates, spec, cfg, threads, what, smallest_problem):
    """The tilings ``candidates(spec, cfg, T)`` yields, best first, for ``threads`` or 2 then 1; when none
    fits, a :class:`ScheduleError` with what ``smallest_problem(cfg)`` says of the smallest tiling, ``what``."""
    cfg = load_config(cfg)
    found = False
    for T in ([threads] if threads else [2, 1]):
        for _, t in sorted(candidates(spec, cfg, T), key=lambda kt: kt[0]):
            found = True
            yield t
    if not found:
        problem = smallest_problem(cfg)
        reason = problem and f"even {what} needs more entries than the buffers hold ({problem.split(': ', 1)[1]})"
        error = ScheduleError(f"no tiling of {spec} fits config {cfg.name!r}" + (f": {reason}" if reason else ""))
        error.reason = reason or str(error)        # (what a caller that names the layer itself reports)
        raise error


def _conv_candidates(spec, c, T):
    """``(key, ConvTiles)`` for every tiling with ``T`` threads that fits: estimated cycles, then larger tiles."""
    RB, OB = spec.reduce_blocks(c), spec.out_channels // c.block_out
    for to, th, tw, ti in itertools.product(_divisors(OB), _divisors(spec.out_height), _divisors(spec.out_width),
                                            _divisors(RB)):
        try:
            axis = None if T == 1 else _thread_axis(T, None, {"out_channels": OB // to, "rows": spec.out_height // th})
        except ScheduleError:
            continue
        t = ConvTiles(to, th, tw, ti, T, axis)
        # (the tilings that fit with whole input tiles: those the estimate was measured on; the ones a
        # strided 1x1 conv's smaller input tiles let in too are the tuner's to try)
        inp, wgt, acc, uops = _conv_needs(spec, c, t, compact=False)
        if _fits(c, inp=inp, wgt=wgt, acc=acc, uops=uops):
            yield (conv_cycles(spec, c, t), -ti, -(to * th * tw)), t


def conv_space(spec, config="default"):
    """The search space of :func:`conv2d`'s schedule: tile sizes (divisors of the output channel blocks, rows,
    columns and input channel blocks), virtual threads and the tile loop they split. Valid points fit the
    buffers (:func:`_conv_needs`) and split their loop evenly; :func:`conv_tiles` is one of them."""
    c = load_config(config)
    RB, OB = spec.reduce_blocks(c), spec.out_channels // c.block_out
    knobs = [Knob("out_channels", tuple(_divisors(OB))), Knob("rows", tuple(_divisors(spec.out_height))),
             Knob("cols", tuple(_divisors(spec.out_width))), Knob("in_channels", tuple(_divisors(RB))),
             Knob("threads", THREADS), Knob("thread_axis", (None, "out_channels", "rows"))]

    def problem(p):
        t = ConvTiles(**p)
        return (_split_problem(t.threads, t.thread_axis, _conv_tile_counts(spec, c, t))
                or _fit_problem(c, *_conv_needs(spec, c, t)))
    return Space("conv2d/v2", knobs, problem, lambda p: ConvTiles(**p))


def conv2d(spec, config="default", tiles=None):
    """``(schedule, inputs, output)`` of a packed conv2d with its default (or given) schedule."""
    cfg = load_config(config)
    _check_packed(cfg, batch=spec.batch, in_channels=spec.in_channels, out_channels=spec.out_channels)
    if spec.block_diagonal and (spec.in_channels != spec.out_channels or not groups_fit(cfg, spec.group_channels)):
        raise ScheduleError(f"a grouped conv2d needs as many output channels as input ones "
                            f"({spec.out_channels} vs {spec.in_channels}), square GEMM blocks (block_in "
                            f"{cfg.block_in}, block_out {cfg.block_out}) and groups of channels that divide "
                            f"them ({spec.group_channels})")
    if spec.out_height < 1 or spec.out_width < 1:
        raise ScheduleError(f"kernel {spec.kernel} does not fit the padded {spec.height}x{spec.width} input")
    if spec.residual_scale and not (spec.residual and (spec.residual_mul, spec.residual_shift) == (1, 0)):
        raise ScheduleError("residual_scale multiplies a residual in place of residual_mul and residual_shift: "
                            "it needs residual=True and those at 1 and 0")
    if spec.scaled_residual and not (spec.scale and spec.residual_scale):
        raise ScheduleError("scaled_residual adds the residual before the per-channel scale: it needs scale=True "
                            "and residual_scale=True")
    t = tiles or conv_tiles(spec, cfg)
    inputs, out, (padded, conv, res, scaled) = conv2d_compute(spec, cfg)
    s = create_schedule(out)
    if spec.compact_rows:       # its input rows stage is the copy on chip
        s[padded].set_scope("inp")
        data_l = padded
    else:
        if padded is not inputs["data"]:
            s[padded].compute_inline()
        data_l = s.cache_read(padded, "inp", [conv])
    s[conv].set_scope("acc")
    s[res].set_scope("acc")
    weight_l = s.cache_read(inputs["weight"], "wgt", [conv])
    extra = {n: s.cache_read(inputs[n], "acc", [scaled if n.startswith("residual") and scaled is not None else res])
             for n in ("residual", *spec.channel_vectors) if n in inputs}
    if scaled is not None:
        s[scaled].set_scope("acc")

    n, o, y, x, b, oo = s[out].op.axes
    o_o, o_i = s[out].split(o, t.out_channels)
    y_o, y_i = s[out].split(y, t.rows)
    x_o, x_i = s[out].split(x, t.cols)
    order = [n, o_o, y_o, x_o]
    if t.threads > 1:        # one tile per virtual thread, along channels or rows
        axis = _thread_axis(t.threads, t.thread_axis, {"out_channels": o_o.extent, "rows": y_o.extent})
        if axis == "out_channels":
            o_o, vt = s[out].split(o_o, nparts=o_o.extent // t.threads)
            order = [n, o_o, vt, y_o, x_o]
        else:
            y_o, vt = s[out].split(y_o, nparts=y_o.extent // t.threads)
            order = [n, o_o, y_o, vt, x_o]
        s[out].bind(vt, "vthread")
    s[out].reorder(*order, o_i, y_i, x_i, b, oo)
    tile = order[-1]
    resident = [extra.pop(k) for k in spec.channel_vectors] if _epilogue_resident(spec, cfg, t) else []
    for stage in resident:          # loaded once, before the first tile
        s[stage].compute_at(s[out], n)
    for stage in [conv, res] + list(extra.values()) + ([scaled] if scaled is not None else []):
        s[stage].compute_at(s[out], tile)
    s[out].pragma(o_i, "dma_copy")
    for t_ in list(extra.values()) + resident:
        s[t_].pragma(s[t_].op.axes[0], "dma_copy")
    for stage in [res] + ([scaled] if scaled is not None else []):
        s[stage].pragma(s[stage].op.axes[0], "alu")

    cn, co, cy, cx, cb, coo = s[conv].op.axes
    ic, kh, kw, ii = s[conv].op.reduce_axes
    ic_o, ic_i = s[conv].split(ic, t.in_channels)
    s[conv].reorder(ic_o, cn, co, cy, cx, ic_i, kh, kw, cb, coo, ii)
    for cached in (data_l, weight_l):
        s[cached].compute_at(s[conv], ic_o)
        s[cached].pragma(s[cached].op.axes[0], "dma_copy")
    s[conv].tensorize(cb, gemm_intrinsic(cfg))
    return s, inputs, out


# -- dense ---------------------------------------------------------------------------

def dense_compute(spec, cfg):
    c = cfg
    acc = f"int{c.acc_width}"
    NB, KB, MB = spec.batch // c.batch, spec.in_features // c.block_in, spec.out_features // c.block_out
    data = te.placeholder((NB, KB, c.batch, c.block_in), f"int{c.inp_width}", "data")
    weight = te.placeholder((MB, KB, c.block_out, c.block_in), f"int{c.wgt_width}", "weight")
    k, ii = te.reduce_axis(KB, "k"), te.reduce_axis(c.block_in, "ii")
    shape = (NB, MB, c.batch, c.block_out)
    prod = te.compute(shape, lambda n, m, b, oo: te.sum(
        data[n, k, b, ii].astype(acc) * weight[m, k, oo, ii].astype(acc), [k, ii]), "dense", dtype=acc)
    inputs = {"data": data, "weight": weight}
    inputs |= {n: te.placeholder((MB, c.batch, c.block_out), acc, n) for n in spec.channel_vectors}

    def epilogue(n, m, b, oo):
        v = prod[n, m, b, oo] * inputs["scale"][m, b, oo] if spec.scale else prod[n, m, b, oo]
        return _epilogue(v, spec, [inputs["bias"][m, b, oo]] if spec.bias else [], c.out_width)
    res = te.compute(shape, epilogue, "epilogue", dtype=acc)
    out = te.compute(shape, lambda n, m, b, oo: res[n, m, b, oo].astype(f"int{c.out_width}"), "out",
                     dtype=f"int{c.out_width}")
    return inputs, out, (prod, res)


def dense_tiles(spec, cfg, threads=None):
    """Tiles that fit the buffers and move the fewest DRAM bytes, two virtual threads when they fit."""
    return next(ranked_dense_tiles(spec, cfg, threads))


def ranked_dense_tiles(spec, cfg, threads=None):
    """Every tiling that fits, best first (as :func:`ranked_conv_tiles`)."""
    return _ranked(_dense_candidates, spec, cfg, threads, "one block of each",
                   lambda c: _fit_problem(c, **_dense_needs(spec, c, DenseTiles(1, 1, 1))))


def _dense_candidates(spec, c, T):
    """``(key, DenseTiles)`` for every tiling with ``T`` threads that fits: DRAM traffic, then longer reductions."""
    NB, KB, MB = spec.batch // c.batch, spec.in_features // c.block_in, spec.out_features // c.block_out
    for tn, tm, tk in itertools.product(_divisors(NB), _divisors(MB), _divisors(KB)):
        try:
            axis = None if T == 1 else _thread_axis(T, None, {"out_features": MB // tm, "batch": NB // tn})
        except ScheduleError:
            continue
        t = DenseTiles(tn, tm, tk, T, axis)
        if _fits(c, **_dense_needs(spec, c, t)):
            traffic = (NB // tn) * (MB // tm) * (tn * KB * c.elem_bytes("inp") + tm * KB * c.elem_bytes("wgt"))
            yield (traffic, -tk), t


def _dense_needs(spec, c, t):
    """SRAM entries (inp, wgt, acc) and micro-ops per GEMM of tiles ``t``, as :func:`_fits` takes them."""
    acc = (t.batch * t.out_features + t.out_features * len(spec.channel_vectors)) * t.threads
    return dict(inp=t.batch * t.in_features * t.threads, wgt=t.out_features * t.in_features * t.threads, acc=acc,
                uops=t.in_features)


def dense_space(spec, config="default"):
    """The search space of :func:`dense`'s schedule: tile sizes (divisors of the batch, output and input
    feature blocks), virtual threads and the tile loop they split; :func:`dense_tiles` is one of its points."""
    c = load_config(config)
    NB, KB, MB = spec.batch // c.batch, spec.in_features // c.block_in, spec.out_features // c.block_out
    knobs = [Knob("batch", tuple(_divisors(NB))), Knob("out_features", tuple(_divisors(MB))),
             Knob("in_features", tuple(_divisors(KB))), Knob("threads", THREADS),
             Knob("thread_axis", (None, "out_features", "batch"))]

    def problem(p):
        t = DenseTiles(**p)
        tile_counts = {"out_features": MB // t.out_features, "batch": NB // t.batch}
        return _split_problem(t.threads, t.thread_axis, tile_counts) or _fit_problem(c, **_dense_needs(spec, c, t))
    return Space("dense/v2", knobs, problem, lambda p: DenseTiles(**p))


def dense(spec, config="default", tiles=None):
    """``(schedule, inputs, output)`` of a packed dense layer with its default (or given) schedule."""
    cfg = load_config(config)
    _check_packed(cfg, batch=spec.batch, in_features=spec.in_features, out_features=spec.out_features)
    t = tiles or dense_tiles(spec, cfg)
    inputs, out, (prod, res) = dense_compute(spec, cfg)
    s = create_schedule(out)
    s[prod].set_scope("acc")
    s[res].set_scope("acc")
    data_l = s.cache_read(inputs["data"], "inp", [prod])
    weight_l = s.cache_read(inputs["weight"], "wgt", [prod])
    extra = [s.cache_read(inputs[n], "acc", [res]) for n in spec.channel_vectors]
    n, m, b, oo = s[out].op.axes
    n_o, n_i = s[out].split(n, t.batch)
    m_o, m_i = s[out].split(m, t.out_features)
    order = [n_o, m_o]
    if t.threads > 1:
        if _thread_axis(t.threads, t.thread_axis, {"out_features": m_o.extent, "batch": n_o.extent}) == "out_features":
            m_o, vt = s[out].split(m_o, nparts=m_o.extent // t.threads)
            order = [n_o, m_o, vt]
        else:
            n_o, vt = s[out].split(n_o, nparts=n_o.extent // t.threads)
            order = [n_o, vt, m_o]
        s[out].bind(vt, "vthread")
    s[out].reorder(*order, n_i, m_i, b, oo)
    tile = order[-1]
    for stage in [prod, res] + extra:
        s[stage].compute_at(s[out], tile)
    s[out].pragma(n_i, "dma_copy")
    for t_ in extra:
        s[t_].pragma(s[t_].op.axes[0], "dma_copy")
    s[res].pragma(s[res].op.axes[0], "alu")
    pn, pm, pb, poo = s[prod].op.axes
    k, ii = s[prod].op.reduce_axes
    k_o, k_i = s[prod].split(k, t.in_features)
    s[prod].reorder(k_o, pn, pm, k_i, pb, poo, ii)
    for cached in (data_l, weight_l):
        s[cached].compute_at(s[prod], k_o)
        s[cached].pragma(s[cached].op.axes[0], "dma_copy")
    s[prod].tensorize(pb, gemm_intrinsic(cfg))
    return s, inputs, out
