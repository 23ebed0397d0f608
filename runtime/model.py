"""Compiled models: an ONNX model quantized, partitioned and compiled, run on any backend, saved as one file.

``compile_model`` takes an ONNX model (path, bytes or ``ModelProto``) to a
:class:`CompiledModel`:

1. import and simplify (constant folding, batch-norm folding, dead nodes,
   conv/dense fusion with bias, residual add and ReLU/Clip);
2. quantize float layers to int8 from calibration samples
   (:mod:`tilewright.compiler.graph.quantize`);
3. partition: every ``QConv``/``QDense`` runs on the accelerator, every other
   node on the host (numpy); an operator neither can run is an error naming
   the node before anything is compiled;
4. compile each accelerator layer for its shape, channels padded to the
   config's blocks, and pack its weights and bias once.

:meth:`CompiledModel.run` executes it on ``fsim`` or ``rtl`` (the same
call), packing activations into the accelerator layout at each layer and
unpacking the result; with ``profile=True`` it also returns one row per node
(where it ran, seconds, accelerator cycles when the backend counts them,
GEMM and ALU micro-ops).
:meth:`CompiledModel.save` / :func:`load_model` write and read one ``.twm``
file (a zip: a JSON header with the config, graph and placement; programs,
packed weights and host constants as arrays).
"""

import concurrent.futures
import json
import os
import queue
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tilewright.compiler.graph import Graph, host_runs, ModelError, Node, TensorInfo, load_onnx, run_graph, run_node
from tilewright.compiler.graph.host import QUANTIZED_WIDTHS
from tilewright.compiler.graph.reference import is_reference
from tilewright.compiler.graph.passes import (lower_integer_ops, lower_qoperator, simplify, strip_fake_quant,
                                              unfold_narrow_convs)
from tilewright.compiler.graph.quantize import calibrate, host_reason, layer_input, layer_report, quantize
from tilewright.compiler.ops import Conv2dSpec, DenseSpec, groups_fit
from tilewright.compiler.tune.log import TuningLog, TuningLogError
from tilewright.compiler.tune.task import Task
from tilewright.compiler.program import Program, ProgramError
from tilewright.compiler import files
from tilewright.config import HwConfig, load_config
from tilewright.sim.rtl import RtlError
from .progress import Progress

from .api import compile_conv2d, compile_dense, residual_rescale
from .device import DeviceError, forget_device, get_device, get_devices
from .layout import pack_bias, pack_grouped, pack_nchw, pack_oihw, pack_rows, round_up, unpack_nchw, unpack_rows

__all__ = ["CompiledModel", "Step", "compile_model", "load_model", "default_workers", "ACCELERATOR_OPS", "FORMAT"]

#: Graph operators the accelerator runs (everything else runs on the host).
ACCELERATOR_OPS = {"QConv", "QDense"}
#: Version 2 (2026-12-07): programs may requantize per channel on the STORE (``mul = 0``, a scale register an
#: older tilewright's fsim and RTL read as a zero multiplier) and QConv may take a ``residual_scale``; this
#: tilewright still reads version 1.
FORMAT, VERSION, READS = "tilewright-model", 2, (1, 2)
CALIBRATION_CHUNK = 16


@dataclass
class Step:
    """One node of the compiled model and where it runs."""
    node: Node
    where: str                            # "accelerator" or "host"
    why: str = ""                         # for host nodes that look like layers: why not the accelerator
    program: Program | None = None
    packed: dict = field(default_factory=dict)   # weight, bias, scale, residual_scale, packed
    out_channels: int = 0
    macs: int = 0
    spec: object = None                   # the operator's packed spec (accelerator steps, when compiled here)

    @property
    def name(self):
        return self.node.name


class CompiledModel:
    """A quantized graph whose layers have accelerator programs; run it with :meth:`run`."""

    def __init__(self, graph, config, steps, *, batch, dynamic_batch, meta=None):
        self.graph, self.config, self.steps = graph, load_config(config), steps
        self.batch, self.dynamic_batch = batch, dynamic_batch
        self.meta = meta or {}

    # -- description ------------------------------------------------------------------------

    def placement_table(self):
        """Which node runs where, as text lines."""
        width = max([len(s.name) for s in self.steps] + [4])
        lines = [f"{'node':{width}}  {'op':18} where"]
        for s in self.steps:
            note = f"  ({s.why})" if s.why else ""
            lines.append(f"{s.name:{width}}  {s.node.op:18} {s.where}{note}")
        accel = sum(s.where == "accelerator" for s in self.steps)
        lines.append(f"{accel} node(s) on the accelerator, {len(self.steps) - accel} on the host")
        return lines

    # -- running --------------------------------------------------------------------------------

    @property
    def _quantized(self):
        """Whether any layer runs on the int8 accelerator."""
        return any(s.where == "accelerator" for s in self.steps)

    def _inputs(self, inputs):
        if not isinstance(inputs, dict):
            if len(self.graph.inputs) != 1:
                raise ModelError(f"the model has {len(self.graph.inputs)} inputs; pass a dict of arrays by name")
            inputs = {self.graph.inputs[0].name: inputs}
        feeds, count = {}, None
        for info in self.graph.inputs:
            if info.name not in inputs:
                raise ModelError(f"missing input {info.name!r}")
            shape = (None,) + tuple(info.shape[1:]) if self.dynamic_batch else info.shape
            array = TensorInfo(info.name, shape, info.dtype).check(inputs[info.name])
            if array.dtype.kind == "f" and self._quantized and not np.isfinite(array).all():
                raise ModelError(f"input {info.name!r} holds NaN or infinity: the int8 accelerator layers cannot "
                                 f"represent them")
            if self.dynamic_batch:
                if count is not None and array.shape[0] != count:
                    raise ModelError(f"input {info.name!r} has {array.shape[0]} samples, another has {count}")
                count = array.shape[0]
            feeds[info.name] = array
        unknown = set(inputs) - set(feeds)
        if unknown & set(self.graph.constants):
            raise ModelError(f"{', '.join(sorted(unknown & set(self.graph.constants)))}: an initializer of the model "
                             f"(ONNX lets an input override it; Tilewright compiles it in as a constant)")
        if unknown:
            raise ModelError(f"the model has no input(s) {', '.join(sorted(unknown))}")
        return feeds, (count if self.dynamic_batch else self.batch)

    def run(self, inputs, *, backend="fsim", port=None, profile=False, progress=False, workers=1, memory=None):
        """Outputs by name (and, with ``profile``, per-node rows) for ``inputs``: an array, or a dict by name.

        ``backend`` is ``"fsim"``, ``"rtl"`` or ``"fpga"`` (with ``port``, a board's serial port). On
        ``rtl``, ``memory`` is how DRAM answers (a :class:`~tilewright.sim.fast.DramTiming`: a board's,
        say, from :meth:`~tilewright.fpga.boards.Board.dram_timing`).

        ``workers`` > 1 (``rtl`` only) runs up to that many RTL simulations at once (one harness process
        each, shared by the layers): fsim runs the network layer by layer, and as it reaches each
        accelerator layer that layer's input is also handed to the next free harness; each layer's RTL
        output must equal fsim's (a :class:`DeviceError` names the first that does not, or the layer
        whose RTL run failed). The outputs and every layer's cycles are those of one RTL run after
        another (each layer starts from the input the RTL itself would have made, bit for bit), in about
        ``1 / workers`` of the time; a row's ``seconds`` is then its layer's RTL run, side by side with
        others.

        With a dynamic batch dimension any number of samples can be given;
        they run in chunks of the compiled batch.
        """
        feeds, count = self._inputs(inputs)
        if count == 0:
            raise ModelError("the inputs hold no samples (batch dimension 0)")
        if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers < 1:
            raise ModelError(f"workers={workers!r}: must be a positive integer")
        if workers > 1 and backend != "rtl":
            raise ModelError(f"workers={workers}: several layers at once is for the rtl backend, not {backend}")
        device = get_device(backend, self.config, port=port, memory=memory)    # (checks backend, port, memory)
        workers = self.side_by_side(workers)
        if workers > 1:
            device = get_devices(backend, self.config, workers, memory=memory)
        run_chunk = self._run_chunk_side_by_side if workers > 1 else self._run_chunk
        rows = {s.name: dict(node=s.name, op=s.node.op, where=s.where, seconds=0.0, cycles=None, macs=s.macs)
                for s in self.steps}
        starts = range(0, count, self.batch)
        results = []
        with Progress(len(starts), f"running on {backend}", enabled=progress) as bar:
            for start in starts:
                chunk = {k: _pad_batch(v[start:start + self.batch], self.batch) if self.dynamic_batch else v
                         for k, v in feeds.items()}
                results.append(run_chunk(chunk, device, rows))
                bar.advance(f"samples {start + 1}-{min(start + self.batch, count)}")
        outputs = {name: np.concatenate([r[name] for r in results])[:count] if self.dynamic_batch else results[0][name]
                   for name in results[0]}
        for info in self.graph.outputs:     # (float16/float64 models compute in float32; outputs keep their type)
            value = outputs[info.name]
            if info.dtype is not None and info.dtype.kind == "f" and isinstance(value, np.ndarray) \
                    and value.dtype.kind == "f" and value.dtype != info.dtype:
                outputs[info.name] = value.astype(info.dtype)
        return (outputs, list(rows.values())) if profile else outputs

    def side_by_side(self, workers):
        """How many RTL simulations ``run(..., workers=workers)`` runs at once: no more than the accelerator
        layers."""
        return min(workers, sum(s.where == "accelerator" for s in self.steps)) or 1

    def _walk(self, feeds, rows, layer):
        """The chunk's outputs: every node in order, the host's here (timed into ``rows``), each accelerator
        step's output tensor from ``layer(step, env)``."""
        env = dict(self.graph.constants)
        env.update(feeds)
        for step in self.steps:
            if step.where == "accelerator":
                outs = [layer(step, env)]
            else:
                start = time.perf_counter()
                outs = run_node(step.node, [env[i] if i else None for i in step.node.inputs], self.graph.opset)
                rows[step.name]["seconds"] += time.perf_counter() - start
            env.update(zip(step.node.outputs, outs))
        return {o.name: env[o.name] for o in self.graph.outputs}

    def _run_chunk(self, feeds, device, rows):
        def layer(step, env):
            start = time.perf_counter()
            out, stats = device.run_program(step.program, self._accelerator_tensors(step, env))
            result = self._unpacked(step, env, out["out"])
            rows[step.name]["seconds"] += time.perf_counter() - start
            _count(rows[step.name], stats)
            return result
        return self._walk(feeds, rows, layer)

    def _accelerator_tensors(self, step, env):
        """The program inputs of accelerator ``step``: its activations packed, and what the step packed once."""
        c, node = self.config, step.node
        x = env[layer_input(node, "data")]
        if node.op == "QConv":
            tensors = {"data": pack_nchw(x, c.batch, c.block_in), **step.packed}
            if layer_input(node, "residual"):
                tensors["residual"] = pack_nchw(env[layer_input(node, "residual")], c.batch, c.block_out)
            return tensors
        return {"data": pack_rows(x, c.batch, c.block_in), **step.packed}

    def _unpacked(self, step, env, out):
        """Accelerator ``step``'s packed output as the node's tensor."""
        samples = env[layer_input(step.node, "data")].shape[0]
        return (unpack_nchw if step.node.op == "QConv" else unpack_rows)(out, samples, step.out_channels)

    def _run_chunk_side_by_side(self, feeds, devices, rows):
        """:meth:`_run_chunk` with the accelerator layers on several RTL ``devices`` at once: fsim computes
        their inputs (see :meth:`run`)."""
        reference = get_device("fsim", self.config)
        idle = queue.SimpleQueue()
        for device in devices:
            idle.put(device)

        def on_rtl(step, tensors):
            device = idle.get()
            try:
                start = time.perf_counter()
                out, stats = device.run_program(step.program, tensors)
                return out["out"], stats, time.perf_counter() - start
            except (DeviceError, RtlError) as e:
                if not device.alive:        # (its harness died: the next run starts new ones)
                    forget_device("rtl", self.config)
                raise DeviceError(f"{step.name}: {e}") from None
            finally:
                idle.put(device)

        def check(step, future, expected):
            out, stats, seconds = future.result()
            if not np.array_equal(out, expected):
                raise DeviceError(f"{step.name}: the RTL's output differs from fsim's on the same input")
            rows[step.name]["seconds"] += seconds
            _count(rows[step.name], stats)

        runs = []           # [step, RTL future, fsim's output] not yet checked

        def layer(step, env):
            while runs and runs[0][1].done():       # (a layer that failed stops the run now)
                check(*runs.pop(0))
            tensors = self._accelerator_tensors(step, env)
            runs.append([step, pool.submit(on_rtl, step, tensors), None])
            out, _ = reference.run_program(step.program, tensors)
            runs[-1][2] = out["out"]
            return self._unpacked(step, env, out["out"])

        with concurrent.futures.ThreadPoolExecutor(len(devices)) as pool:
            try:
                outputs = self._walk(feeds, rows, layer)
                for run in runs:
                    check(*run)
            finally:        # (a failure: the layers not yet started need not run)
                for _, future, _ in runs:
                    future.cancel()
        return outputs

    # -- files ----------------------------------------------------------------------------------

    def save(self, path):
        """Write the model to one ``.twm`` file."""
        arrays, counter = {}, iter(range(1 << 30))

        def put(array):
            key = f"a{next(counter)}"
            arrays[key] = np.asarray(array)
            return key

        def attr(v):
            if isinstance(v, np.ndarray):
                return {"__array__": put(v)}
            if isinstance(v, np.generic):
                return v.item()
            return v

        g = self.graph
        header = {
            "format": FORMAT, "version": VERSION,
            "config": self.config.params(), "config_name": self.config.name, "fingerprint": self.config.fingerprint,
            "batch": self.batch, "dynamic_batch": self.dynamic_batch, "meta": self.meta,
            "graph": {"name": g.name, "opset": g.opset,
                      "inputs": [_info_json(i) for i in g.inputs], "outputs": [_info_json(o) for o in g.outputs],
                      "constants": {k: put(v) for k, v in g.constants.items()}},
            "steps": [{"op": s.node.op, "inputs": s.node.inputs, "outputs": s.node.outputs, "name": s.name,
                       "attrs": {k: attr(v) for k, v in s.node.attrs.items()}, "where": s.where, "why": s.why,
                       "out_channels": s.out_channels, "macs": s.macs,
                       "program": put(np.frombuffer(s.program.to_bytes(), np.uint8)) if s.program else None,
                       "packed": {k: put(v) for k, v in s.packed.items()}} for s in self.steps],
        }
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        try:
            with files.atomic_write(path) as f:       # (the old file stays whole if this fails)
                np.savez(f, **arrays)
        except OSError as e:
            raise ModelError(f"cannot write {path}: {e.strerror}") from None


def load_model(path):
    """Read a ``.twm`` file written by :meth:`CompiledModel.save`; a damaged file is a one-line ModelError."""
    try:
        bad = files.damaged_member(Path(path))
        if bad:
            raise ModelError(f"{path}: damaged ({bad} fails its checksum)")
        with np.load(Path(path), allow_pickle=False) as archive:
            header = json.loads(archive["header"].tobytes().decode())
            if not isinstance(header, dict) or header.get("format") != FORMAT:
                raise ModelError(f"{path}: not a tilewright model file")
            if header.get("version") not in READS:
                raise ModelError(f"{path}: model file version {header.get('version')}, this tilewright reads "
                                 f"{' and '.join(map(str, READS))}; recompile the model")
            return _from_header(header, archive)
    except ModelError:
        raise
    except FileNotFoundError:
        raise ModelError(f"{path}: no such file") from None
    except (OSError, ValueError, KeyError, TypeError, EOFError, zipfile.BadZipFile, UnicodeDecodeError,
            ProgramError) as e:
        raise ModelError(f"{path}: not a readable tilewright model file ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def _from_header(header, archive):
    cfg = HwConfig(**header["config"], name=header["config_name"])
    if cfg.fingerprint != header["fingerprint"]:
        raise ValueError("config fingerprint mismatch")
    g = header["graph"]

    def attr(v):
        return archive[v["__array__"]] if isinstance(v, dict) and "__array__" in v else v

    steps = []
    for s in header["steps"]:
        node = Node(s["op"], s["inputs"], s["outputs"], {k: attr(v) for k, v in s["attrs"].items()}, s["name"])
        program = Program.from_bytes(archive[s["program"]].tobytes(), cfg) if s["program"] else None
        steps.append(Step(node, s["where"], s["why"], program, {k: archive[v] for k, v in s["packed"].items()},
                          s["out_channels"], s["macs"]))
    graph = Graph([s.node for s in steps], [_info_from(i) for i in g["inputs"]],
                  [_info_from(o) for o in g["outputs"]], {k: archive[v] for k, v in g["constants"].items()},
                  g["name"], g["opset"])
    return CompiledModel(graph, cfg, steps, batch=header["batch"], dynamic_batch=header["dynamic_batch"],
                         meta=header["meta"])


def default_workers():
    """RTL simulations to run at once by default: one per core this process may use, at most 4 (each
    harness holds its own DRAM, a few hundred MB)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def _count(row, stats):
    """Add a run's ``stats`` to its profile ``row``: cycles where the backend counts them, and the GEMM and
    ALU micro-ops (one a cycle at most: what is left of the cycles is waiting and moving data)."""
    for key in ("cycles", "gemm_uops", "alu_uops"):
        if key in stats:
            row[key] = (row.get(key) or 0) + stats[key]


def _info_json(info):
    return {"name": info.name, "shape": list(info.shape), "dtype": np.dtype(info.dtype).str}


def _info_from(d):
    return TensorInfo(d["name"], tuple(d["shape"]), np.dtype(d["dtype"]))


def _pad_batch(array, batch):
    if array.shape[0] == batch:
        return array
    return np.concatenate([array, np.zeros((batch - array.shape[0],) + array.shape[1:], array.dtype)])


# -- compiling ------------------------------------------------------------------------------------

def _input_shapes(graph, batch):
    """Concrete input shapes (a dynamic leading dimension becomes ``batch``) and whether it was dynamic."""
    if batch is not None and (not isinstance(batch, (int, np.integer)) or batch < 1):
        raise ModelError(f"batch={batch!r}: must be a positive integer")
    shapes, dynamic = {}, False
    for info in graph.inputs:
        shape = list(info.shape)
        if shape and shape[0] is None:
            shape[0], dynamic = batch or 1, True
        elif batch and shape and shape[0] != batch:
            raise ModelError(f"input {info.name!r} has a fixed batch of {shape[0]}; cannot compile for {batch}")
        if any(d is None for d in shape):
            raise ModelError(f"input {info.name!r} has shape {info.shape}: only the first (batch) dimension "
                             "may be dynamic")
        shapes[info.name] = tuple(shape)
    return shapes, dynamic


def _calibration_feeds(graph, samples, shapes, dynamic, log):
    """Calibration samples as a list of feed dicts: chunks of up to CALIBRATION_CHUNK samples, or of the
    model's fixed batch."""
    if samples is None:
        log("no calibration samples given: calibrating on 8 random normal inputs (give real samples for "
            "real accuracy)")
        rng = np.random.default_rng(0)
        samples = {i.name: rng.standard_normal((8,) + shapes[i.name][1:]).astype(i.dtype) for i in graph.inputs}
    if not isinstance(samples, dict):
        if len(graph.inputs) != 1:
            raise ModelError("the model has several inputs: give calibration samples as a dict by input name")
        samples = {graph.inputs[0].name: samples}
    arrays = {}
    for info in graph.inputs:
        if info.name not in samples:
            raise ModelError(f"calibration samples have no array for input {info.name!r} "
                             f"(they have: {', '.join(map(repr, samples)) or 'nothing'})")
        a = np.asarray(samples[info.name])
        if a.dtype != info.dtype or a.shape[1:] != shapes[info.name][1:]:
            raise ModelError(f"calibration samples for {info.name!r} are {a.dtype} {list(a.shape)}; want "
                             f"{np.dtype(info.dtype)} [N, {', '.join(map(str, shapes[info.name][1:]))}]")
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise ModelError(f"calibration samples for {info.name!r} hold NaN or infinity "
                             f"({int(np.count_nonzero(~np.isfinite(a)))} values); int8 ranges need finite data")
        if a.dtype.kind == "f" and a.size and not a.any():
            raise ModelError(f"calibration samples for {info.name!r} are all zero: every range would be empty; "
                             f"give samples like the model's real inputs")
        arrays[info.name] = a
    count = min(len(a) for a in arrays.values())
    chunk = CALIBRATION_CHUNK if dynamic else shapes[graph.inputs[0].name][0]
    if count == 0 or count < chunk and not dynamic:
        raise ModelError(f"calibration needs at least {chunk if not dynamic else 1} sample(s), got {count}")
    if not dynamic:
        count -= count % chunk
    return [{k: a[s:s + chunk] for k, a in arrays.items()} for s in range(0, count, chunk)]


def _check_supported(graph):
    for node in graph.nodes:
        if not host_runs(node):
            raise ModelError(f"node {node}: operator {node.op} is not supported (not on the accelerator, "
                             f"not on the host)")


def _accelerator_step(node, shapes, consts, cfg, schedules=None, memory=None):
    """A compiled accelerator step for QConv/QDense ``node``, and where its schedule came from: the fastest
    record of the tuning log ``schedules`` (a TuningLog) for its shape measured with DRAM timing ``memory``,
    or the heuristic."""
    x_shape, w = shapes[layer_input(node, "data")], consts[layer_input(node, "weight")]
    a, O = node.attrs, w.shape[0]
    scale = consts[layer_input(node, "scale")] if layer_input(node, "scale") else None
    epilogue = dict(bias=True, mul=a["mul"], shift=a["shift"], relu=bool(a["relu"]), scale=scale is not None)
    if node.op == "QConv":
        N, C, H, W = x_shape
        residual, grouped = bool(layer_input(node, "residual")), a.get("group", 1) != 1
        if layer_input(node, "residual_scale"):     # the residual joins before the per-channel scale
            rescale = dict(residual_scale=True, scaled_residual=True)
            packed = {"residual_scale": pack_bias(consts[layer_input(node, "residual_scale")], cfg.batch,
                                                  cfg.block_out)}
        else:
            rescale, packed = residual_rescale(a.get("residual_mul", 1), a.get("residual_shift", 0), O, cfg) \
                if residual else ({}, {})
        spec = Conv2dSpec(round_up(N, cfg.batch), round_up(C, cfg.block_in), H, W, round_up(O, cfg.block_out),
                          tuple(w.shape[2:]), a["stride"], a["padding"], residual=residual,
                          group_channels=w.shape[1] if grouped else 0, **rescale, **epilogue)
        packed["weight"] = pack_grouped(w, cfg.block_out) if grouped else pack_oihw(w, cfg.block_out, cfg.block_in)
        op = "conv2d"
        macs = N * O * w.shape[1] * spec.out_height * spec.out_width * w.shape[2] * w.shape[3]
    else:
        N, K = x_shape
        spec = DenseSpec(round_up(N, cfg.batch), round_up(K, cfg.block_in), round_up(O, cfg.block_out), **epilogue)
        packed = {"weight": pack_rows(w, cfg.block_out, cfg.block_in)}
        op = "dense"
        macs = N * K * O
    task = Task(op, spec, cfg, memory)
    record, tiles = schedules.best_schedule(task) if schedules else (None, None)
    program = (compile_conv2d if op == "conv2d" else compile_dense)(spec, cfg, tiles)
    packed["bias"] = pack_bias(consts[layer_input(node, "bias")], cfg.batch, cfg.block_out)
    if scale is not None:
        packed["scale"] = pack_bias(scale, cfg.batch, cfg.block_out)
    source = {"layer": node.name, "task": task.key, "schedule": "tuned" if record else "heuristic",
              "tiles": record["knobs"] if record else task.default_point()}
    if record:
        source["cycles"] = record["cycles"]
    return Step(node, "accelerator", "", program, packed, O, macs, spec), source


def _tuning_log(path):
    """The tuning log at ``path``, or ``path`` if it is a TuningLog (one line of ModelError if it cannot be
    read)."""
    if isinstance(path, TuningLog):
        return path
    if not Path(path).is_file():
        raise ModelError(f"tuning log {path}: no such file")
    try:
        return TuningLog(path)
    except TuningLogError as e:
        raise ModelError(str(e)) from None


def _placement(graph, on_host, cfg):
    """``[(node, where, why)]``: QConv/QDense on the accelerator (unless named in ``on_host``, or a grouped
    QConv whose groups do not fit the config's GEMM blocks), the rest on the host."""
    unknown = set(on_host) - {n.name for n in graph.nodes}
    if unknown:
        raise ModelError(f"on_host names no node of the model: {', '.join(sorted(unknown))}")
    plan = []
    for node in graph.nodes:
        if node.op == "QConv" and node.attr("group", 1) != 1 and not groups_fit(
                cfg, graph.constants[node.inputs[1]].shape[1]):
            plan.append((node, "host", f"grouped ({graph.constants[node.inputs[1]].shape[1]} channels per group) "
                                       f"needs square GEMM blocks its groups divide (block_in {cfg.block_in}, "
                                       f"block_out {cfg.block_out})"))
        elif node.op in ACCELERATOR_OPS and node.name not in on_host:
            plan.append((node, "accelerator", ""))
        elif node.op in ACCELERATOR_OPS:
            plan.append((node, "host", "asked for the host"))
        elif node.op == "Im2Col":
            kh, kw = node.attr("kernel")
            plan.append((node, "host", f"gathers {kh}x{kw} windows into {node.attr('channels')} channels for "
                                       f"{node.attr('layer')}"))
        elif is_reference(node):
            plan.append((node, "host", "onnx.reference: no native host kernel, slower"))
        else:
            plan.append((node, "host", host_reason(node, graph.constants) if node.op in ("TwConv", "TwDense") else ""))
    return plan


def compile_model(model, config="default", *, calibration=None, method="max", percentile=99.99, batch=None,
                  per_channel=True, unfold=True, on_host=(), tuning_log=None, memory=None, log=None,
                  progress=False):
    """Import, quantize, partition and compile ``model``; returns a :class:`CompiledModel`.

    ``calibration``: sample inputs for int8 calibration, an array ``N × …`` for
    a one-input model or a dict of them by input name (needed only when the
    model has float layers; random normal inputs are used, with a warning,
    when none are given). ``batch`` fixes a dynamic batch dimension
    (default 1). ``per_channel``: one weight scale per output channel (else
    one per layer: no per-channel ALU multiply, a little faster, less
    accurate). ``unfold``: layers with fewer input channels than a block
    (a first conv on RGB) run as im2col on the host + a 1×1 conv, instead of
    padding the channels (see ``unfold_narrow_convs``). ``on_host`` names
    layers to keep on the host (run there with the accelerator's integer
    arithmetic). ``log`` receives progress lines (the partition table is
    printed through it before compiling). ``tuning_log`` (a path or a TuningLog): each layer takes the fastest schedule
    that log measured for its shape on this config, the heuristic's where it has none; ``meta["schedules"]``
    and ``log`` say which layers used which. ``memory`` (a :class:`~tilewright.sim.fast.DramTiming`, a
    board's SDRAM): take the log's schedules measured with that DRAM timing (default: the harness's own).
    """
    log = log or (lambda line: None)
    cfg = load_config(config)
    fields = ("inp_width", "wgt_width", "acc_width", "out_width")
    widths, wanted = (tuple(getattr(w, f) for f in fields) for w in (cfg, QUANTIZED_WIDTHS))
    if widths != wanted:
        raise ModelError(f"config {cfg.name} has input/weight/accumulator/output widths {widths}; models are "
                         f"quantized to int8 with int32 accumulators {wanted}")
    started = time.perf_counter()
    graph = model if isinstance(model, Graph) else load_onnx(model)
    shapes, dynamic = _input_shapes(graph, batch)
    source = lower_integer_ops(lower_qoperator(graph))
    graph, given = strip_fake_quant(source)
    graph = simplify(graph, keep=set(given))
    _check_supported(graph)
    meta = {"source": graph.name, "method": None, "per_channel": None, "layers": []}
    sample = {i.name: np.zeros(shapes[i.name], i.dtype) for i in graph.inputs}
    if any(n.op in ("TwConv", "TwDense") and host_reason(n, graph.constants) is None for n in graph.nodes):
        feeds = _calibration_feeds(graph, calibration, shapes, dynamic, log)
        log(f"calibrating ({method}) on {sum(len(next(iter(f.values()))) for f in feeds)} sample(s)")
        ranges = calibrate(graph, feeds, method=method, percentile=percentile)
        if given:       # a pre-quantized model's own scales and zero points win over calibration
            log(f"using the model's quantization (QuantizeLinear/DequantizeLinear scales and zero points) for "
                f"{len(given)} tensor(s)")
        quantized, layers = quantize(graph, ranges, qparams=given, with_layers=True, per_channel=per_channel,
                                     residual_before_scale=cfg.per_channel_store)
        quantized = unfold_narrow_convs(quantized, cfg.block_in) if unfold else quantized
        sample = {k: _pad_batch(v[:shapes[k][0]], shapes[k][0]) for k, v in feeds[0].items()}
        _, env = run_graph(quantized, sample, keep=True)
        meta["method"], meta["per_channel"] = method, per_channel
        meta["layers"] = [dict(name=layer.name, mul=layer.mul, shift=layer.shift, sqnr_db=round(db, 2),
                               per_channel=layer.per_channel, multiplier_error=layer.multiplier_error,
                               input_scale=layer.input_scale, weight_scale=layer.weight_scale,
                               output_scale=layer.output_scale, input_zero_point=layer.input_zero_point,
                               output_zero_point=layer.output_zero_point, residual_scaled=layer.residual_scaled)
                          for layer, db in layer_report(source if given else graph, quantized, layers, sample,
                                                        quant_env=env)]
    else:
        quantized = graph
        # (shapes are needed only for accelerator layers; a model without any need not run on zeros, which
        # its integer inputs may not take: sizes, indices)
        env = run_graph(quantized, sample, keep=True)[1] if any(n.op in ACCELERATOR_OPS for n in graph.nodes) else {}
    tensor_shapes = {k: np.shape(v) for k, v in env.items()}
    plan = _placement(quantized, on_host, cfg)
    preview = CompiledModel(quantized, cfg, [Step(n, w, why) for n, w, why in plan], batch=1, dynamic_batch=False)
    for line in preview.placement_table():
        log(line)

    schedules = _tuning_log(tuning_log) if tuning_log else None
    steps, meta["schedules"] = [], []
    accel = sum(w == "accelerator" for _, w, _ in plan)
    with Progress(accel, "compiling", enabled=progress) as bar:
        for node, where, why in plan:
            if where == "accelerator":
                step, source = _accelerator_step(node, tensor_shapes, quantized.constants, cfg, schedules,
                                                 memory)
                steps.append(step)
                meta["schedules"].append(source)
                bar.advance(node.name)
            else:
                steps.append(Step(node, where, why))
    if tuning_log:
        tuned = [s["layer"] for s in meta["schedules"] if s["schedule"] == "tuned"]
        others = [s["layer"] for s in meta["schedules"] if s["schedule"] != "tuned"]
        log(f"schedules from {schedules.path or 'the tuning records'}: {len(tuned)} tuned "
            f"({', '.join(tuned) or 'none'}); "
            f"{len(others)} heuristic ({', '.join(others) or 'none'})")
    # the accelerator's weights travel packed; the host keeps only the constants its nodes read
    host_reads = {i for s in steps if s.where == "host" for i in s.node.inputs} | {o.name for o in quantized.outputs}
    constants = {k: v for k, v in quantized.constants.items() if k in host_reads}
    first = shapes[quantized.inputs[0].name] if quantized.inputs else ()
    final_batch = first[0] if first else 1
    meta["compile_seconds"] = round(time.perf_counter() - started, 3)
    return CompiledModel(quantized.replace(constants=constants), cfg, steps, batch=final_batch,
                         dynamic_batch=dynamic, meta=meta)
