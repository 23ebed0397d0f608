"""A tuning task: one operator shape on one config, its search space, and what a point of it costs.

A :class:`Task` names an operator (``"conv2d"`` or ``"dense"``), its packed
spec and the config. It builds the :class:`~tilewright.compiler.program.Program`
of any point of its space, makes random inputs for it and describes the
program a point makes with :func:`features`: DRAM bytes per memory type,
instructions, reuse, buffer use and the analytic estimate, in units that
mean the same for every shape and config, so a cost model trained on some
tasks ranks the points of another.
"""

import dataclasses
import hashlib
import json
import math

import numpy as np

from tilewright.config import load_config

from .. import ops

__all__ = ["Task", "FEATURES", "features", "dram_bytes", "parse_layer", "model_tasks", "LayerSpecError"]

_OPS = {"conv2d": (ops.Conv2dSpec, ops.conv_space, ops.conv_tiles, ops.conv2d),
        "dense": (ops.DenseSpec, ops.dense_space, ops.dense_tiles, ops.dense)}


class LayerSpecError(ValueError):
    """A layer given on the command line that does not parse."""


#: Spec fields added after tuning logs existed (left out of the key at 0, their default).
_LATER_FIELDS = ("group_channels", "residual_scale", "scaled_residual")


@dataclasses.dataclass(frozen=True)
class Task:
    """One operator shape (``op`` with its packed ``spec``) on one config, measured with the RTL's DRAM
    answering as ``memory`` (a :class:`~tilewright.sim.fast.DramTiming`, a board's SDRAM say; None: the
    harness's default, a bus beat a cycle)."""
    op: str
    spec: object
    config: object
    memory: object = None

    def __post_init__(self):
        from tilewright.sim.fast import DramTiming
        if self.op not in _OPS:
            raise ValueError(f"no search space for operator {self.op!r}; tunable: {', '.join(_OPS)}")
        if self.memory is not None and not isinstance(self.memory, DramTiming):
            raise ValueError(f"memory must be a DramTiming or None, not {self.memory!r}")
        if self.memory == DramTiming():     # (the default, spelt out: the same task as None, the same records)
            object.__setattr__(self, "memory", None)
        object.__setattr__(self, "config", load_config(self.config))

    @property
    def key(self):
        """``op:`` and a hash of the spec's fields: the same for the same shape and epilogue. (A field added
        later counts only away from its default, so earlier logs keep their keys.)"""
        fields = {k: v for k, v in dataclasses.asdict(self.spec).items() if not (k in _LATER_FIELDS and v == 0)}
        text = json.dumps(fields, sort_keys=True)
        return f"{self.op}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"

    @property
    def name(self):
        """A short readable description of the shape."""
        s = self.spec
        if self.op == "conv2d":
            return (f"conv2d {s.batch}x{s.in_channels}x{s.height}x{s.width} -> {s.out_channels} "
                    f"{s.kernel[0]}x{s.kernel[1]} s{s.stride} p{s.padding}"
                    + (f" groups of {s.group_channels}" if s.group_channels else ""))
        return f"dense {s.batch}x{s.in_features} -> {s.out_features}"

    @property
    def macs(self):
        return self.spec.macs

    def space(self):
        return _OPS[self.op][1](self.spec, self.config)

    def default_point(self):
        """The heuristic's schedule as a point of the space."""
        return dataclasses.asdict(_OPS[self.op][2](self.spec, self.config))

    def program(self, point):
        """The compiled program of ``point`` (ScheduleError or CheckError when the compiler refuses it)."""
        from .. import build
        tiles = self.space().make(point)
        return build(_OPS[self.op][3](self.spec, self.config, tiles)[0], self.config)

    def inputs(self, seed=0):
        """Random packed inputs for the task's programs."""
        from tilewright.runtime.layout import pack_bias, pack_grouped, pack_nchw, pack_oihw, pack_rows
        c, s = self.config, self.spec
        rng = np.random.default_rng(seed)
        int8 = lambda shape: rng.integers(-128, 128, shape, dtype=np.int8)      # noqa: E731
        if self.op == "conv2d":
            tensors = {"data": pack_nchw(int8((s.batch, s.in_channels, s.height, s.width)), c.batch, c.block_in),
                       "weight": pack_grouped(int8((s.out_channels, s.group_channels) + tuple(s.kernel)),
                                              c.block_out)
                       if s.block_diagonal else pack_oihw(int8((s.out_channels, s.in_channels) + tuple(s.kernel)),
                                                     c.block_out, c.block_in)}
            if s.residual:
                tensors["residual"] = pack_nchw(int8((s.batch, s.out_channels, s.out_height, s.out_width)),
                                                c.batch, c.block_out)
            channels = s.out_channels
        else:
            tensors = {"data": pack_rows(int8((s.batch, s.in_features)), c.batch, c.block_in),
                       "weight": pack_rows(int8((s.out_features, s.in_features)), c.block_out, c.block_in)}
            channels = s.out_features
        for name in s.channel_vectors:
            low, high = (-4096, 4096) if name == "bias" else (1, 64)
            tensors[name] = pack_bias(rng.integers(low, high, channels, dtype=np.int32), c.batch, c.block_out)
        return tensors

    @property
    def memory_json(self):
        """``memory`` as a tuning record holds it (None for the default DRAM: records from before kept it so)."""
        return self.memory.to_json() if self.memory is not None else None

    def bandwidth(self):
        """The DRAM bytes a cycle a stream gets, on this task's memory."""
        from tilewright.sim.fast import DramTiming
        return (self.memory or DramTiming()).bandwidth(self.config.bus_bytes)

    def to_json(self):
        d = {"op": self.op, "spec": dataclasses.asdict(self.spec), "config": dataclasses.asdict(self.config)}
        if self.memory is not None:
            d["memory"] = self.memory_json
        return d

    @classmethod
    def from_json(cls, d):
        """The task of a :meth:`to_json` dict (a tuning record)."""
        from tilewright.config import HwConfig
        from tilewright.sim.fast import DramTiming
        spec = dict(d["spec"])
        if "kernel" in spec:
            spec["kernel"] = tuple(spec["kernel"])
        memory = DramTiming(**d["memory"]) if d.get("memory") else None
        return cls(d["op"], _OPS[d["op"]][0](**spec), HwConfig(**d["config"]), memory)


def model_tasks(model, memory=None):
    """The distinct tasks of a :class:`~tilewright.runtime.model.CompiledModel`'s accelerator layers, in order,
    measured with DRAM timing ``memory``."""
    unique = {}
    for step in model.steps:
        if step.where == "accelerator":
            task = Task("conv2d" if step.node.op == "QConv" else "dense", step.spec, model.config, memory)
            unique.setdefault(task.key, task)
    return list(unique.values())


def parse_layer(text, config, memory=None):
    """A :class:`Task` (measured with DRAM timing ``memory``) from ``conv2d:N,C,H,W,O,K,S,P``, ``dense:N,K,M``
    or a ResNet-18 layer name (``C2``…``C11``).

    Channel and batch counts are rounded up to the config's blocks, as the runtime pads them.
    """
    from tilewright.runtime.bench import RESNET18, resnet18_layer
    from tilewright.runtime.layout import round_up
    cfg = load_config(config)
    resnet = [name for name, *_ in RESNET18]
    if text in resnet:
        return Task("conv2d", resnet18_layer(text, cfg), cfg, memory)
    op, _, args = text.partition(":")
    forms = {"conv2d": "conv2d:N,C,H,W,O,K,S,P", "dense": "dense:N,K,M"}
    try:
        values = [int(v) for v in args.split(",")]
    except ValueError:
        values = None
    if op not in forms or values is None or len(values) != forms[op].count(",") + 1 or min(values, default=0) < 0:
        raise LayerSpecError(f"layer {text!r}: give {forms['conv2d']}, {forms['dense']} or a ResNet-18 layer "
                             f"({', '.join(resnet)}); counts are non-negative integers")
    if op == "conv2d":
        n, c, h, w, o, k, s, p = values
        if min(n, c, h, w, o, k, s) < 1:
            raise LayerSpecError(f"layer {text!r}: every size and the stride must be at least 1")
        spec = ops.Conv2dSpec(round_up(n, cfg.batch), round_up(c, cfg.block_in), h, w, round_up(o, cfg.block_out),
                              (k, k), s, p, mul=3, shift=12, relu=True)
        if spec.out_height < 1 or spec.out_width < 1:
            raise LayerSpecError(f"layer {text!r}: a {k}x{k} kernel does not fit a {h}x{w} input padded by {p}")
        return Task("conv2d", spec, cfg, memory)
    n, k, m = values
    if min(values) < 1:
        raise LayerSpecError(f"layer {text!r}: every size must be at least 1")
    return Task("dense", ops.DenseSpec(round_up(n, cfg.batch), round_up(k, cfg.block_in), round_up(m, cfg.block_out),
                                       mul=3, shift=10, relu=True), cfg, memory)


# -- features ---------------------------------------------------------------------------------------

#: The cost model's inputs, in order. Sizes are log2(1 + x); fractions and flags are as they are.
FEATURES = (
    "macs", "ideal_cycles", "dram_inp", "dram_wgt", "dram_acc", "dram_out", "dram_cycles", "roofline",
    "estimate", "estimate_load", "estimate_gemm", "estimate_store", "steps", "tiles",
    "loads", "stores", "gemm_insns", "uops_per_kernel", "reuse_inp", "reuse_wgt",
    "row_bytes_inp", "row_bytes_out", "fill_inp", "fill_wgt", "fill_acc", "fill_uop",
    "threads", "split_outputs", "bus_bytes", "macs_per_cycle", "kernel", "stride", "dense",
)


def _as_conv(task, point):
    """A conv2d spec and tiles with the cost structure of ``point``: a dense layer is a 1×1 convolution
    over one row per batch block (its batch tile the rows tile, its output tiles the channel tiles)."""
    if task.op == "conv2d":
        return task.spec, ops.ConvTiles(**point)
    s, c = task.spec, task.config
    spec = ops.Conv2dSpec(c.batch, s.in_features, s.batch // c.batch, 1, s.out_features, (1, 1), 1, 0,
                          bias=s.bias, scale=s.scale)
    axis = {"out_features": "out_channels", "batch": "rows", None: None}[point["thread_axis"]]
    return spec, ops.ConvTiles(point["out_features"], point["batch"], 1, point["in_features"], point["threads"], axis)


def _rows_read(tiles, tile, stride, kernel, padding, size):
    """Input rows (or columns) a LOAD reads from DRAM over all ``tiles`` output tiles of ``tile`` rows:
    the padding around the input is made by the load, not read."""
    total = 0
    for k in range(tiles):
        first = k * tile * stride - padding
        last = first + (tile - 1) * stride + kernel          # one past
        total += max(0, min(last, size) - max(first, 0))
    return total


def _executions(loops, uses):
    """How often a load runs in the loop nest ``loops`` (``(name, extent)``, outermost first) when it
    depends on the loops named in ``uses``: loads are hoisted (by the compiler) to just inside the
    innermost loop they depend on that runs more than once, so they repeat with it and every loop
    around it, and not with the loops inside."""
    inner = max((k for k, (name, extent) in enumerate(loops) if name in uses and extent > 1), default=-1)
    return math.prod(extent for _, extent in loops[:inner + 1])


def dram_bytes(task, point):
    """DRAM bytes the program of ``point`` reads per memory type (``inp``, ``wgt``, ``acc``) and writes
    (``out``), from the schedule's loop nest. Each of ``threads`` virtual threads loads its own copy of
    what it uses (its own tiles, or the same data again when the threads split another loop)."""
    c = task.config
    s, T = task.spec, point["threads"]
    e = {m: c.elem_bytes(m) for m in ("inp", "wgt", "acc", "out")}
    epilogue = len(s.channel_vectors)
    if task.op == "dense":
        t = ops.DenseTiles(**point)
        NB, KB, MB = s.batch // c.batch, s.in_features // c.block_in, s.out_features // c.block_out
        loops = [("n", NB // t.batch // (T if t.thread_axis == "batch" else 1)),
                 ("m", MB // t.out_features // (T if t.thread_axis == "out_features" else 1)),
                 ("k", KB // t.in_features)]
        return {"inp": _executions(loops, {"n", "k"}) * T * t.batch * t.in_features * e["inp"],
                "wgt": _executions(loops, {"m", "k"}) * T * t.out_features * t.in_features * e["wgt"],
                "acc": _executions(loops, {"m"}) * T * t.out_features * e["acc"] * epilogue,
                "out": NB * MB * e["out"]}
    t = ops.ConvTiles(**point)
    KH, KW = s.kernel
    CB, OB, NB = s.reduce_blocks(c), s.out_channels // c.block_out, s.batch // c.batch
    on_channels = t.thread_axis == "out_channels"
    loops = [("n", NB), ("o", OB // t.out_channels // (T if on_channels else 1)),
             ("y", s.out_height // t.rows // (T if t.thread_axis == "rows" else 1)),
             ("x", s.out_width // t.cols), ("c", CB // t.in_channels)]
    # Input tiles overlap and the padding is made by the load, not read: the rows (columns) read are summed
    # over the row (column) tiles; they repeat with the channel tiles around them.
    rows = (s.out_height if s.compact_rows else
            _rows_read(s.out_height // t.rows, t.rows, s.stride, KH, s.padding, s.height))
    cols = _rows_read(s.out_width // t.cols, t.cols, s.stride, KW, s.padding, s.width)
    inner = _executions(loops[2:], {"y", "x", "c"}) > 1
    channel_tiles = (loops[1][1] if inner else 1) * (T if on_channels else 1)
    outputs = NB * OB * s.out_height * s.out_width * e["out"]
    # (grouped: each channel tile reads its own input blocks, once)
    inp_blocks = OB if s.block_diagonal else channel_tiles * CB
    return {"inp": NB * inp_blocks * rows * cols * e["inp"],
            "wgt": _executions(loops, {"o", "c"}) * T * t.out_channels * t.in_channels * KH * KW * e["wgt"],
            "acc": (OB if ops._epilogue_resident(s, c, t) else _executions(loops, {"o"}) * T * t.out_channels)
            * e["acc"] * epilogue
            + (outputs if s.residual else 0),
            "out": outputs}


def features(task, point):
    """The :data:`FEATURES` of the program ``point`` makes, as a list of floats."""
    c = task.config
    spec, t = _as_conv(task, point)
    KH, KW = spec.kernel
    cols = (t.cols - 1) * spec.stride + KW
    cost = ops.conv_cost(spec, c, t)
    dram = dram_bytes(task, point)
    inp, wgt, acc, uops = ops._conv_needs(spec, c, t)
    ideal = task.macs / c.macs_per_cycle
    dram_cycles = sum(dram.values()) / task.bandwidth()
    sizes = {
        "macs": task.macs, "ideal_cycles": ideal, **{f"dram_{m}": b for m, b in dram.items()},
        "dram_cycles": dram_cycles, "roofline": max(ideal, dram_cycles), "estimate": cost.cycles,
        "estimate_load": cost.steps * cost.load, "estimate_gemm": cost.steps * cost.gemm,
        "estimate_store": cost.tiles * cost.store, "steps": cost.steps, "tiles": cost.tiles,
        "loads": cost.steps * (t.in_channels + 1), "stores": cost.tiles * t.out_channels,
        "gemm_insns": cost.steps * t.out_channels * t.rows * t.cols * t.in_channels * KH * KW / max(uops, 1),
        "uops_per_kernel": uops, "reuse_inp": task.macs / max(dram["inp"], 1),
        "reuse_wgt": task.macs / max(dram["wgt"], 1), "row_bytes_inp": cols * c.elem_bytes("inp"),
        "row_bytes_out": t.cols * c.elem_bytes("out"), "bus_bytes": c.bus_bytes, "macs_per_cycle": c.macs_per_cycle,
        "kernel": KH * KW, "stride": spec.stride,
    }
    values = {name: math.log2(1 + v) for name, v in sizes.items()}
    values.update(fill_inp=inp / c.inp_depth, fill_wgt=wgt / c.wgt_depth, fill_acc=acc / c.acc_depth,
                  fill_uop=uops / c.uop_depth, threads=t.threads, split_outputs=float(t.thread_axis == "out_channels"),
                  dense=float(task.op == "dense"))
    return [float(values[name]) for name in FEATURES]
