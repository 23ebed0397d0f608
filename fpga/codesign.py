"""The co-design search (``tilewright dse``): which accelerator to build for a model on a board, measured.

Candidates are configs around the board's preset (:func:`candidates`: the
GEMM's shape and lanes, the buffers, the DRAM bus). Each one is

1. synthesised by Yosys for the board (:func:`synthesis_job`): its LUT,
   flip-flop, DSP and block-RAM use; one that does not fit goes no further;
2. compiled for the model and run on the cycle-accurate RTL with the
   board's own DRAM (:meth:`~tilewright.fpga.boards.Board.dram_timing` at
   the clock: a memory-bound config is not flattered), its output checked
   against fsim (:func:`cycles_job`);
3. given a latency: its cycles at the clock asked for.

Syntheses and measurements run on a runner (a pool of local processes, or
a Dask cluster: :mod:`tilewright.compiler.tune.runner`), as many at once
as it has workers. Every result is a line of the search's log
(:class:`SearchLog`, JSON lines): a search run again, or killed and run
again, takes what the log holds and does only the rest. The front of
latency against LUT, DSP and block RAM (:func:`pareto_front`) is written
as JSON and a plot, with the fastest config's TOML and compiled model.

The clock is the one asked for: Fmax confirmed by place and route, and
each layer's schedule from the tuner, are not part of the search yet.
"""

import dataclasses
import hashlib
import itertools
import json
import time
from pathlib import Path

import numpy as np

from tilewright.config import HwConfig, load_config

__all__ = ["candidates", "synthesis_job", "cycles_job", "SearchLog", "pareto_front", "search", "code_digest",
           "RESOURCES", "SearchError"]

#: The resources the front weighs latency against.
RESOURCES = ("LUT", "DSP", "BRAM")

#: Log format version: a log of another is refused, not misread.
LOG_VERSION = 1


class SearchError(RuntimeError):
    """A search that cannot go on (a file that is not a model of one input, a log of another search, an
    output folder it cannot write)."""


def _resized(nbytes, lanes_then, lanes_now, times):
    """A buffer of ``nbytes`` for entries of ``lanes_then`` values, with as many entries of ``lanes_now``,
    ``times`` as many."""
    return nbytes * lanes_now * times // lanes_then


def candidates(base):
    """Configs around ``base`` (a board's preset): the GEMM 8×8 or 16×16, all its output lanes a cycle or
    half of them, the weight, input and accumulator buffers as in ``base`` or twice as large, a 64- or
    128-bit DRAM bus; ``base``'s options (lean loaders, ALU lanes, requantizing STORE) kept. ``base`` comes
    first; configs that fail validation are left out."""
    base = load_config(base)
    found = {base.fingerprint: base}
    knobs = itertools.product((8, 16), (False, True), (1, 2), (1, 2), (1, 2), (64, 128))
    for block, half, wgt, inp, acc, bus in knobs:
        try:
            cfg = base.replace(
                block_in=block, block_out=block, gemm_lanes=block // 2 if half else 0,
                wgt_buffer_bytes=_resized(base.wgt_buffer_bytes, base.block_in * base.block_out, block * block, wgt),
                inp_buffer_bytes=_resized(base.inp_buffer_bytes, base.block_in, block, inp),
                acc_buffer_bytes=_resized(base.acc_buffer_bytes, base.block_out, block, acc), dram_bus_width=bus)
        except ValueError:
            continue
        found.setdefault(cfg.fingerprint, cfg)
    return [cfg.replace(name=f"dse-{cfg.fingerprint[:8]}") if cfg is not base else cfg for cfg in found.values()]


def synthesis_job(board_name, params, name, out_dir):
    """Yosys synthesis of config ``params`` for ``board_name`` in ``out_dir``: ``{"resources": {kind: used},
    "fits": bool, "seconds"}``. (Runs in a runner's worker. A tool that fails raises: that is no result of
    the candidate's, and the log does not keep it.)"""
    from tilewright.fpga.build import BuildError, build_bitstreams
    cfg = HwConfig(name=name, **params)
    started = time.monotonic()
    (Path(out_dir) / "report.json").unlink(missing_ok=True)      # (an earlier, interrupted search's)
    try:
        report = build_bitstreams(board_name, config=cfg, out_dirs=[out_dir], place=False, progress=lambda line: None)[0]
    except BuildError:
        # (a design that does not fit has its report, every resource's use against the board's, written)
        report = json.loads((Path(out_dir) / "report.json").read_text()) if (Path(out_dir) / "report.json").exists() \
            else None
        if not (report and report.get("ok") is False and "synthesis" in report):
            raise
    used = {kind: v["used"] for kind, v in report["synthesis"].items()}
    return {"resources": used, "fits": report.get("ok", True) is not False, "seconds": time.monotonic() - started}


def cycles_job(model_bytes, params, name, board_name, freq_mhz, calibration, inputs):
    """The model compiled for config ``params`` and run on the RTL with ``board_name``'s DRAM at ``freq_mhz``:
    ``{"cycles", "layers": {node: cycles}, "equals_fsim", "seconds"}``, or ``{"error"}``. (Runs in a runner's
    worker.)"""
    from tilewright.compiler.graph import ModelError
    from tilewright.compiler.program import ProgramError
    from tilewright.compiler.schedule import ScheduleError
    from tilewright.fpga.boards import get_board
    from tilewright.runtime.device import forget_device
    from tilewright.runtime.model import compile_model
    cfg = HwConfig(name=name, **params)
    started = time.monotonic()
    try:
        model = compile_model(model_bytes, cfg, calibration=calibration)
    except (ModelError, ProgramError, ScheduleError) as e:   # (the config's result: the model does not go on it)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    try:
        expected = model.run(inputs)
        outputs, rows = model.run(inputs, backend="rtl", profile=True,
                                  memory=get_board(board_name).dram_timing(freq_mhz))
    finally:        # (no config is measured twice: its simulators, a harness with its DRAM among them, go)
        forget_device("fsim", cfg)
        forget_device("rtl", cfg)
    layers = {r["node"]: r["cycles"] for r in rows if r["cycles"]}
    return {"cycles": sum(layers.values()), "layers": layers, "seconds": time.monotonic() - started,
            "equals_fsim": all(np.array_equal(outputs[k], expected[k]) for k in expected)}


class SearchLog:
    """The search's results, a JSON line each: ``{"kind": "synthesis" | "cycles", "key", "config",
    "result"}``. The first line names the search (model, board, clock, seed, the code's digest); a log of
    another search is refused."""

    def __init__(self, path, search):
        self.path, self.results = Path(path), {}
        header = {"format": "tilewright-dse", "version": LOG_VERSION, **search}
        if self.path.exists() and self.path.stat().st_size:
            lines = self.path.read_text().splitlines()
            try:
                first = json.loads(lines[0])
                records = [json.loads(line) for line in lines[1:-1] if line.strip()]
            except json.JSONDecodeError as e:
                raise SearchError(f"{self.path}: not a search log ({e})") from None
            try:        # (the last line may have been cut by a search killed while writing it: dropped)
                records += [json.loads(lines[-1])] if len(lines) > 1 and lines[-1].strip() else []
            except json.JSONDecodeError:
                self.path.write_text("\n".join(lines[:-1]) + "\n")
            if not isinstance(first, dict) or first.get("format") != header["format"]:
                raise SearchError(f"{self.path}: not a search log")
            if first != header:
                raise SearchError(f"{self.path} is the log of another search ({_differences(first, header)}); "
                                  f"give another output folder")
            for record in records:
                self.results[record["kind"], record["key"]] = record["result"]
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(header) + "\n")

    def get(self, kind, key):
        """The logged result of ``kind`` for config fingerprint ``key``, or None."""
        return self.results.get((kind, key))

    def add(self, kind, key, cfg, result):
        """Log ``result`` (of ``kind``, for ``cfg`` whose fingerprint is ``key``)."""
        self.results[kind, key] = result
        with open(self.path, "a") as f:        # (a line at a time: a killed search loses at most the one running)
            f.write(json.dumps({"kind": kind, "key": key, "config": cfg.name, "result": result}) + "\n")


def _differences(a, b):
    return ", ".join(f"{k}: {a.get(k)!r} there, {b.get(k)!r} here" for k in sorted(set(a) | set(b))
                     if a.get(k) != b.get(k))


def pareto_front(points, keys=("latency_s",) + RESOURCES):
    """The points no other point is at least as good as in every one of ``keys`` and better in one (all
    minimised), in the order given."""
    def dominates(p, q):
        return all(p[k] <= q[k] for k in keys) and any(p[k] < q[k] for k in keys)
    return [q for q in points if not any(dominates(p, q) for p in points if p is not q)]


def code_digest():
    """16 hex digits over Tilewright's own source (Python and C++) that synthesis and cycles depend on besides
    the config (the core, the RTL, the compiler, the runtime, the simulators' harness, the boards), so that a
    log taken with other code is not reused."""
    import importlib
    digest = hashlib.sha256()
    for package in ("tilewright", "tilewright.hw", "tilewright.compiler", "tilewright.runtime", "tilewright.sim",
                    "tilewright.fpga"):
        root = Path(importlib.import_module(package).__path__[0])
        for path in sorted(p for pattern in ("*.py", "*.cpp") for p in root.rglob(pattern)):
            digest.update(f"{package}/{path.relative_to(root)}".encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def _inputs(model_bytes, batch, seed):
    """Random calibration samples and one input for the model's first input (its batch dimension ``batch``)."""
    import onnx
    from google.protobuf.message import DecodeError
    try:
        graph = onnx.load_from_string(model_bytes).graph
    except DecodeError as e:
        raise SearchError(f"the model is not an ONNX file ({e})") from None
    initializers = {i.name for i in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or not inputs[0].type.tensor_type.shape.dim:
        raise SearchError(f"the search feeds models of one input with a shape; this one has "
                          f"{', '.join(i.name for i in inputs) or 'none'}")
    dims = [d.dim_value if d.HasField("dim_value") else 1 for d in inputs[0].type.tensor_type.shape.dim]
    dims[0] = batch
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((4 * batch, *dims[1:])).astype(np.float32),
            rng.standard_normal(dims).astype(np.float32))


def search(model_bytes, board_name, out, *, freq_mhz=None, runner=None, budget_hours=None, limit=None, seed=0,
           progress=print):
    """Search configs for ``model_bytes`` (ONNX) on ``board_name`` into folder ``out``; returns the summary
    (also ``out/front.json``). ``runner``: where jobs run (default: local processes, one per core);
    ``limit``: at most that many candidates (the board's preset and a seeded sample of the rest);
    ``budget_hours``: no new job is started after that much wall time."""
    from tilewright.compiler.tune.runner import LocalRunner
    if runner is None:
        with LocalRunner() as own:
            return search(model_bytes, board_name, out, freq_mhz=freq_mhz, runner=own, budget_hours=budget_hours,
                          limit=limit, seed=seed, progress=progress)
    from tilewright.fpga.boards import get_board
    board = get_board(board_name)
    freq_mhz = board.freq_mhz if freq_mhz is None else freq_mhz
    board.dram_timing(freq_mhz)                         # (a board without a DRAM model fails here, at once)
    out = Path(out)
    pool = list(candidates(board.config))
    if limit is not None and limit < len(pool):
        rest = pool[1:]
        np.random.default_rng(seed).shuffle(rest)
        pool = [pool[0], *rest[:limit - 1]]
    # the model must compile (for the board's preset) before any synthesis is spent on it
    calibration, inputs = _inputs(model_bytes, 1, seed)
    from tilewright.runtime.model import compile_model
    compile_model(model_bytes, pool[0], calibration=calibration)
    digest = hashlib.sha256(model_bytes).hexdigest()[:16]
    try:
        log = SearchLog(out / "log.jsonl", {"model": digest, "board": board.name, "freq_mhz": freq_mhz,
                                            "seed": seed, "code": code_digest()})
    except OSError as e:
        raise SearchError(f"cannot keep the search's log in {out}: {e.strerror or e}") from None
    deadline = None if budget_hours is None else time.monotonic() + budget_hours * 3600
    progress(f"{len(pool)} candidate configs for {board.title} at {freq_mhz:g} MHz, on {runner.describe()}; "
             f"log {log.path}")

    def job(kind, cfg):
        if kind == "synthesis":
            return runner.submit(synthesis_job, board.name, cfg.params(), cfg.name,
                                 str(out / "synthesis" / cfg.fingerprint))
        return runner.submit(cycles_job, model_bytes, cfg.params(), cfg.name, board.name, freq_mhz, calibration,
                             inputs)

    # Each candidate's synthesis, then (if it fits) its measurement; what the log holds is not done again.
    pending, running, lost = [("synthesis", cfg) for cfg in pool], {}, 0
    parallelism = runner.parallelism
    while pending or running:
        while pending and len(running) < parallelism and (deadline is None or time.monotonic() < deadline):
            kind, cfg = pending.pop(0)
            known = log.get(kind, cfg.fingerprint)
            if known is not None:
                _next_step(kind, cfg, known, pending)
                continue
            running[job(kind, cfg)] = (kind, cfg)
        if not running:
            break
        for future in runner.wait_any(list(running)):
            kind, cfg = running.pop(future)
            try:
                result = future.result()
            except Exception as e:
                # A tool or a worker that failed (Yosys, a Verilator build, a process that died) is not the
                # candidate's result: it is said, not logged, and a search run again tries the candidate again.
                lost += 1
                progress(f"  {cfg.name}: {kind} lost ({type(e).__name__}: {str(e)[:200]}); not logged")
                continue
            log.add(kind, cfg.fingerprint, cfg, result)
            progress(f"  {cfg.name} ({_shape(cfg)}): {_said(kind, result)}")
            _next_step(kind, cfg, result, pending)
    summary = _summarise(log, pool, board, freq_mhz, out, model_bytes, calibration, progress)
    summary["lost"] = lost
    return summary


def _next_step(kind, cfg, result, pending):
    if kind == "synthesis" and result.get("fits"):
        pending.insert(0, ("cycles", cfg))       # (measured before the next synthesis starts)


def _shape(cfg):
    lanes = f", {cfg.gemm_width} lanes" if cfg.gemm_lanes else ""
    return (f"{cfg.batch}x{cfg.block_in}x{cfg.block_out}{lanes}, wgt {cfg.wgt_buffer_bytes // 1024} KiB, "
            f"inp {cfg.inp_buffer_bytes // 1024} KiB, acc {cfg.acc_buffer_bytes // 1024} KiB, bus {cfg.dram_bus_width}")


def _said(kind, result):
    if result.get("error"):
        return f"{kind} failed: {result['error']}"
    if kind == "synthesis":
        used = ", ".join(f"{k} {v}" for k, v in result["resources"].items() if k in RESOURCES + ("FF",))
        return f"{used}{'' if result['fits'] else ' (does not fit)'}"
    return f"{result['cycles']:,} cycles{'' if result['equals_fsim'] else ', output DIFFERS from fsim'}"


def _summarise(log, pool, board, freq_mhz, out, model_bytes, calibration, progress):
    """The front, the winner's files and the summary, from what the log holds."""
    points = []
    for cfg in pool:
        synth, cycles = log.get("synthesis", cfg.fingerprint), log.get("cycles", cfg.fingerprint)
        if not (synth and synth.get("fits") and cycles and not cycles.get("error") and cycles["equals_fsim"]):
            continue
        points.append({"config": cfg.name, "fingerprint": cfg.fingerprint, "shape": _shape(cfg),
                       "macs_per_cycle": cfg.macs_per_cycle, "cycles": cycles["cycles"],
                       "latency_s": cycles["cycles"] / (freq_mhz * 1e6),
                       **{k: synth["resources"].get(k, 0) for k in RESOURCES + ("FF",)}})
    front = pareto_front(points)
    preset = next((p for p in points if p["config"] == board.config), None)
    winner = min(front, key=lambda p: (p["latency_s"], p["LUT"])) if front else None
    summary = {"board": board.name, "freq_mhz": freq_mhz, "dram": dataclasses.asdict(board.dram_timing(freq_mhz)),
               "tried": len(pool), "measured": len(points), "points": points, "front": front, "preset": preset,
               "winner": winner,
               "speedup_over_preset": preset["latency_s"] / winner["latency_s"] if preset and winner else None,
               "latency": "the accelerator layers' cycles at the clock asked for (no place and route yet; host "
                          "layers not counted)"}
    for name in ("front.png", "winner.toml", "winner.twm"):       # (none of an earlier run's stays behind)
        (out / name).unlink(missing_ok=True)
    (out / "front.json").write_text(json.dumps(summary, indent=2))
    if points:
        _plot(points, front, preset, out / "front.png")
    if winner:
        cfg = next(c for c in pool if c.fingerprint == winner["fingerprint"])
        (out / "winner.toml").write_text(cfg.toml())
        from tilewright.runtime.model import compile_model
        compile_model(model_bytes, cfg, calibration=calibration).save(out / "winner.twm")
        speedup = f", {summary['speedup_over_preset']:.2f}x the preset {board.config}" if preset else ""
        progress(f"front: {len(front)} of {len(points)} measured configs; fastest {winner['config']} "
                 f"({winner['shape']}): {winner['latency_s'] * 1e3:.3f} ms at {freq_mhz:g} MHz{speedup}")
    else:
        progress("no config was measured: nothing on the front")
    return summary


def _plot(points, front, preset, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(RESOURCES), figsize=(4 * len(RESOURCES), 3.6), sharey=True)
    for ax, kind in zip(axes, RESOURCES):
        ax.scatter([p[kind] for p in points], [p["latency_s"] * 1e3 for p in points], color="tab:gray", s=14,
                   label="measured")
        ax.scatter([p[kind] for p in front], [p["latency_s"] * 1e3 for p in front], color="tab:blue", s=22,
                   label="front")
        if preset:
            ax.scatter([preset[kind]], [preset["latency_s"] * 1e3], color="tab:red", marker="x", s=40,
                       label="board preset")
        ax.set_xlabel(kind)
    axes[0].set_ylabel("accelerator layers' latency (ms)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
