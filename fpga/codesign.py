"""The co-design search (``tilewright dse``): which accelerator to build for a model on a board, measured.

The search climbs from the board's preset: each round it takes every config
one step away on one knob (:func:`knobs`: the GEMM's shape and lanes, the
requantizing STORE, the ALU's lanes, the buffers, the DRAM bus;
:func:`neighbours`) that it has not tried, costs them all, and moves to the
fastest if that gains at least :data:`MIN_GAIN`; it stops where no step
does (or at ``limit`` configs, or at the budget). Each config is

1. synthesised by Yosys for the board (:func:`synthesis_job`): its LUT,
   flip-flop, DSP and block-RAM use; one that does not fit goes no further;
2. compiled for the model and run on the cycle-accurate RTL with the
   board's own DRAM (:meth:`~tilewright.fpga.boards.Board.dram_timing` at
   the clock: a memory-bound config is not flattered), its output checked
   against fsim (:func:`cycles_job`).

Then the fastest configs and the preset (the finalists) have each layer's
schedule tuned (:func:`tilewright.compiler.tune.tune`, in RTL cycles with
the board's DRAM) and are measured again with them, and are placed and
routed by nextpnr, seed after seed until one meets the clock
(:func:`place_job`): their latency is their cycles at the Fmax reached, and
the winner's bitstream is one that meets timing. The configs the climb
stepped through are placed too, the last first, while one could still win
at the highest Fmax reached (:func:`_could_win`): the fastest in cycles are
the largest, and clock lowest.

Jobs run on a runner (a Dask cluster, or local processes:
:mod:`tilewright.compiler.tune.runner`), as many at once as it has workers.
Every result is a line of the search's log (:class:`SearchLog`, JSON lines):
a search run again, or killed and run again, takes what the log holds,
makes the same steps and does only the rest. The front of latency against
LUT, DSP and block RAM (:func:`pareto_front`) is written as JSON, a plot
and a one-page summary, with the winner's TOML, tuning records, compiled
model and bitstream.
"""

import hashlib
import inspect
import json
import shutil
import time
from pathlib import Path

import numpy as np

from tilewright.config import HwConfig, load_config

__all__ = ["knobs", "neighbours", "synthesis_job", "cycles_job", "place_job", "SearchLog", "pareto_front",
           "search", "code_digest", "RESOURCES", "SearchError", "MIN_GAIN"]

#: The resources the front weighs latency against.
RESOURCES = ("LUT", "DSP", "BRAM")

#: Log format version: a log of another is refused, not misread.
LOG_VERSION = 2

#: The GEMM shapes the search steps through, by MACs a cycle: ``(block_in, block_out, gemm_lanes)`` (0 lanes:
#: all of them). 16×8 makes as many products a cycle as 16×16 at 8 lanes with half its accumulator row and
#: weight entry: 32 KiB of weights take 32 block RAMs 1024 bits wide, 64 at 2048 bits.
GEMMS = ((8, 8, 4), (8, 8, 0), (16, 8, 0), (16, 16, 8), (16, 16, 0))

#: A step is taken when it cuts the latency by at least this much. (Cycles are exact: this only keeps the
#: search from buying a fraction of a percent with more logic.)
MIN_GAIN = 0.01

#: Tuning points measured a batch at a time, each batch learnt whole (``tune(sync=True)``): what the finalists'
#: tuning finds then depends on the seed, not on how many workers measure it.
TUNING_BATCH = 8

#: What a search writes besides its logs, the winner's bitstream named as its board's build names it (ECP5
#: ``.bit``, iCE40 ``.bin``, Gowin ``.fs``).
OUTPUTS = ("summary.md", "front.json", "front.png", "winner.toml", "winner.twm", "winner_tuning.jsonl",
           "winner.bit", "winner.bin", "winner.fs", "winner_report.json")


class SearchError(RuntimeError):
    """A search that cannot go on (a file that is not a model of one input, a log of another search, an
    output folder it cannot write)."""


def _macs(gemm):
    block_in, block_out, lanes = gemm
    return block_in * (lanes or block_out)


def _scaled(nbytes, powers):
    return tuple(nbytes << p if p >= 0 else nbytes >> -p for p in powers)


def knobs(base):
    """The knobs the search turns around ``base`` (a board's preset), each a ladder of values (a step moves one
    knob one rung): the GEMM (8×8 at half its output lanes a cycle or all, 16 inputs by 8 outputs, 16×16 at
    half or all), the requantizing STORE off or on, the ALU's lanes (1 to 8, and ``base``'s), the weight
    buffer from half to eight times ``base``'s, the input and accumulator buffers from half to four times, a
    64- or 128-bit DRAM bus.
    ``base``'s own values are rungs; its other options (lean loaders, soft products) are kept."""
    base = load_config(base)

    def ladder(values, own, key=None):
        return tuple(sorted(set(values) | {own}, key=key))
    return {"gemm": ladder(GEMMS, (base.block_in, base.block_out, base.gemm_lanes), key=lambda g: (_macs(g), g)),
            "requant_store": (False, True),
            "vector_lanes": ladder((1, 2, 4, 8), base.vector_lanes, key=lambda v: (v == 0, v)),
            "wgt_buffer_bytes": _scaled(base.wgt_buffer_bytes, range(-1, 4)),
            "inp_buffer_bytes": _scaled(base.inp_buffer_bytes, range(-1, 3)),
            "acc_buffer_bytes": _scaled(base.acc_buffer_bytes, range(-1, 3)),
            "dram_bus_width": ladder((64, 128), base.dram_bus_width)}


def _setting(cfg, knob):
    return (cfg.block_in, cfg.block_out, cfg.gemm_lanes) if knob == "gemm" else getattr(cfg, knob)


def _named(cfg, base):
    return base if cfg == base else cfg.replace(name=f"dse-{cfg.fingerprint[:8]}")


def neighbours(cfg, ladders, base):
    """The valid configs one step from ``cfg`` on one knob of ``ladders`` (:func:`knobs` of ``base``), knob by
    knob, the step down first; ``base`` itself if it is one, others named by their fingerprint."""
    found = []
    for knob, ladder in ladders.items():
        at = ladder.index(_setting(cfg, knob))
        for rung in (at - 1, at + 1):
            if not 0 <= rung < len(ladder):
                continue
            value = ladder[rung]
            change = dict(zip(("block_in", "block_out", "gemm_lanes"), value)) if knob == "gemm" else {knob: value}
            try:
                found.append(_named(cfg.replace(**change), base))
            except ValueError:          # (a config the parameters do not make: a buffer too small for a block)
                continue
    return found


def synthesis_job(board_name, params, name, out_dir):
    """Yosys synthesis of config ``params`` for ``board_name`` in ``out_dir``: ``{"resources": {kind: used},
    "fits": bool, "seconds"}``, and for a design that does not fit, ``"over"``: what it needs more of than the
    board has. (Runs in a runner's worker. A tool that fails raises: that is no result of the candidate's, and
    the log does not keep it.)"""
    from tilewright.fpga.build import BuildError, build_bitstreams
    cfg = HwConfig(name=name, **params)
    started = time.monotonic()
    (Path(out_dir) / "report.json").unlink(missing_ok=True)      # (an earlier, interrupted search's)
    over = {}
    try:
        report = build_bitstreams(board_name, config=cfg, out_dirs=[out_dir], place=False, progress=lambda line: None)[0]
    except BuildError as e:
        # (a design that does not fit has its report, every resource's use against the board's, written)
        report = json.loads((Path(out_dir) / "report.json").read_text()) if (Path(out_dir) / "report.json").exists() \
            else None
        if not (report and report.get("ok") is False and "synthesis" in report):
            raise
        over = {"over": str(e).partition(": ")[2]}
    used = {kind: v["used"] for kind, v in report["synthesis"].items()}
    return {"resources": used, "fits": report.get("ok", True) is not False, **over,
            "seconds": time.monotonic() - started}


def cycles_job(model_bytes, params, name, board_name, freq_mhz, calibration, inputs, tuning=None):
    """The model compiled for config ``params`` and run on the RTL with ``board_name``'s DRAM at ``freq_mhz``:
    ``{"cycles", "layers": {node: cycles}, "equals_fsim", "seconds"}``, or ``{"error"}``. ``tuning``: tuning
    records (measured with that DRAM) whose fastest schedules the layers take. (Runs in a runner's worker.)"""
    from tilewright.compiler.graph import ModelError
    from tilewright.compiler.program import ProgramError
    from tilewright.compiler.schedule import ScheduleError
    from tilewright.compiler.tune import TuningLog
    from tilewright.fpga.boards import get_board
    from tilewright.runtime.device import forget_device
    from tilewright.runtime.model import compile_model
    cfg = HwConfig(name=name, **params)
    board = get_board(board_name)
    memory = board.dram_timing(freq_mhz)
    started = time.monotonic()
    try:
        model = compile_model(model_bytes, cfg, calibration=calibration, memory=memory,
                              tuning_log=TuningLog(records=tuning) if tuning else None)
    except (ModelError, ProgramError, ScheduleError) as e:   # (the config's result: the model does not go on it)
        return {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]}
    if board.sdram is None and (error := _too_large(model, board.mem_bytes)):
        return {"error": error}
    try:
        expected = model.run(inputs)
        outputs, rows = model.run(inputs, backend="rtl", profile=True, memory=memory)
    finally:        # (no config is measured twice: its simulators, a harness with its DRAM among them, go)
        forget_device("fsim", cfg)
        forget_device("rtl", cfg)
    layers = {r["node"]: r["cycles"] for r in rows if r["cycles"]}
    return {"cycles": sum(layers.values()), "layers": layers, "seconds": time.monotonic() - started,
            "equals_fsim": all(np.array_equal(outputs[k], expected[k]) for k in expected)}


def _too_large(model, mem_bytes):
    """Which of ``model``'s accelerator layers a device of ``mem_bytes`` cannot run (a board that runs them
    from on-chip memory: placed as a device places them), or None."""
    from tilewright.runtime.device import FsimDevice
    from tilewright.sim.dram import DramError
    device = FsimDevice(model.config, dram_bytes=mem_bytes)
    for step in model.steps:
        if step.where == "accelerator":
            try:
                base, insn_addr, _ = device.place(step.program)
            except DramError:
                return (f"layer {step.name} needs {step.program.dram_bytes:,} bytes and its instructions, more than "
                        f"the board's {mem_bytes // 1024} KiB of memory")
            device.free(insn_addr)
            device.free(base)
    return None


def place_job(board_name, params, name, out_dir, freq_mhz, seed):
    """Config ``params`` placed and routed for ``board_name`` at ``freq_mhz`` with ``seed`` into ``out_dir``:
    ``{"seed", "fmax_mhz", "met", "error", "seconds"}`` (the slowest clock domain's Fmax; ``error`` when
    nextpnr did not route it). (Runs in a runner's worker.)"""
    from tilewright.fpga.build import build_bitstreams
    cfg = HwConfig(name=name, **params)
    started = time.monotonic()
    report = build_bitstreams(board_name, config=cfg, freq_mhz=freq_mhz, seeds=[seed], out_dirs=[out_dir],
                              jobs=1, progress=lambda line: None)[0]
    fmax = min((v["achieved_mhz"] for v in (report.get("fmax") or {}).values()), default=None)
    return {"seed": seed, "fmax_mhz": fmax, "met": bool(report.get("timing_met")) and not report.get("error"),
            "error": report.get("error"), "seconds": time.monotonic() - started}


class SearchLog:
    """The search's results, a JSON line each: ``{"kind": "synthesis" | "cycles" | "tuned" | "place", "key",
    "config", "result"}`` (the key: the config's fingerprint; with the trials for "tuned", the clock and the
    seed for "place"). The first line names the search (model, board, clock, seed, the code's digest); a log of
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
        """The logged result of ``kind`` under ``key``, or None."""
        return self.results.get((kind, key))

    def add(self, kind, key, cfg, result):
        """Log ``result`` of ``kind`` for ``cfg`` under ``key``."""
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
    the config (the core, the RTL, the compiler, the runtime, the simulators' harness, the boards, the builds,
    and this module's jobs; not its climb), so that a log taken with other code is not reused."""
    import importlib
    digest = hashlib.sha256()
    for package in ("tilewright", "tilewright.hw", "tilewright.compiler", "tilewright.runtime", "tilewright.sim",
                    "tilewright.fpga"):
        root = Path(importlib.import_module(package).__path__[0])
        for path in sorted(p for pattern in ("*.py", "*.cpp") for p in root.rglob(pattern)):
            if path == Path(__file__):      # (the climb and the summary change no result: only the jobs count)
                continue
            digest.update(f"{package}/{path.relative_to(root)}".encode() + b"\0" + path.read_bytes())
    for job in (synthesis_job, cycles_job, place_job):
        digest.update(inspect.getsource(job).encode())
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


def search(model_bytes, board_name, out, *, freq_mhz=None, runner=None, budget_hours=None, limit=None, finalists=1,
           trials=0, place=True, place_freq_mhz=None, seeds=(1, 2, 3), seed=0, progress=print):
    """Search configs for ``model_bytes`` (ONNX) on ``board_name`` into folder ``out``; returns the summary
    (also ``out/front.json``).

    ``runner``: where jobs run (default: local processes, one per core). ``limit``: at most that many configs
    costed (the preset included); ``budget_hours``: no job is started after that much wall time.
    ``finalists``: how many of the fastest configs (besides the preset) have their layers tuned (``trials``
    points a layer; 0: the compiler's heuristic schedules) and, with ``place``, are placed and routed at
    ``place_freq_mhz`` (default ``freq_mhz``) with ``seeds`` in turn until one meets it.
    """
    from tilewright.compiler.tune.runner import LocalRunner
    if runner is None:
        with LocalRunner() as own:
            return search(model_bytes, board_name, out, freq_mhz=freq_mhz, runner=own, budget_hours=budget_hours,
                          limit=limit, finalists=finalists, trials=trials, place=place,
                          place_freq_mhz=place_freq_mhz, seeds=seeds, seed=seed, progress=progress)
    from tilewright.fpga.boards import get_board
    from tilewright.runtime.model import compile_model
    if place and (not seeds or len(set(seeds)) != len(seeds)):
        raise SearchError(f"place and route needs seeds, each once, not {tuple(seeds)}")
    board = get_board(board_name)
    freq_mhz = board.freq_mhz if freq_mhz is None else freq_mhz
    place_freq_mhz = freq_mhz if place_freq_mhz is None else place_freq_mhz
    memory = board.dram_timing(freq_mhz)                # (a clock past the board's SDRAM fails here, at once)
    base = load_config(board.config)
    ladders = knobs(base)
    out = Path(out)
    # the model must compile (for the board's preset) before any synthesis is spent on it
    calibration, inputs = _inputs(model_bytes, 1, seed)
    compile_model(model_bytes, base, calibration=calibration)
    try:
        log = SearchLog(out / "log.jsonl", {"model": hashlib.sha256(model_bytes).hexdigest()[:16],
                                            "board": board.name, "freq_mhz": freq_mhz, "seed": seed,
                                            "code": code_digest()})
    except OSError as e:
        raise SearchError(f"cannot keep the search's log in {out}: {e.strerror or e}") from None
    deadline = None if budget_hours is None else time.monotonic() + budget_hours * 3600
    progress(f"climbing from {base.name} for {board.title} at {freq_mhz:g} MHz, on {runner.describe()}; "
             f"log {log.path}")
    seeds = tuple(seeds)

    def cycles_item(cfg, tuning=None):
        kind, key = ("tuned", f"{cfg.fingerprint}/{trials}") if tuning is not None else ("cycles", cfg.fingerprint)
        return kind, key, cfg, cycles_job, (model_bytes, cfg.params(), cfg.name, board.name, freq_mhz,
                                            calibration, inputs, tuning)

    def place_item(cfg, s):
        return ("place", _place_key(cfg, place_freq_mhz, s), cfg, place_job,
                (board.name, cfg.params(), cfg.name, str(_place_folder(out, cfg, place_freq_mhz, s)), place_freq_mhz,
                 s))

    def follow(kind, cfg, result):
        if kind == "synthesis" and result.get("fits"):
            return [cycles_item(cfg)]           # (measured before the next synthesis starts)
        if kind == "place" and not result["met"] and result["seed"] in seeds[:-1]:
            return [place_item(cfg, seeds[seeds.index(result["seed"]) + 1])]
        return []

    jobs = _Jobs(runner, log, deadline, follow, progress)
    tried = {}

    def cost(configs):
        fresh = [c for c in configs if c.fingerprint not in tried]
        tried.update((c.fingerprint, c) for c in fresh)
        jobs.run([("synthesis", c.fingerprint, c, synthesis_job,
                   (board.name, c.params(), c.name, str(out / "synthesis" / c.fingerprint))) for c in fresh])

    def latency(cfg):           # (with the compiler's schedules: a search run again takes the same steps)
        measured = _measured(log, cfg)
        return measured["cycles"] / (freq_mhz * 1e6) if measured else None

    # The climb: every untried config a step from the current one, then the fastest of them if it gains. (The
    # preset is costed with the first round's configs, which do not depend on it: no worker waits on it alone.)
    current, rounds, steps, first = base, [], [], [base]
    while not jobs.out_of_time():
        step = [c for c in neighbours(current, ladders, base) if c.fingerprint not in tried]
        step = step[:max(0, limit - len(tried) - len(first))] if limit is not None else step
        if not step:
            break
        now = latency(current)
        progress(f"round {len(rounds) + 1}: {len(step)} configs a step from {current.name} ({_shape(current)}"
                 + (f", {now * 1e3:.3f} ms)" if now else ")"))
        cost(first + step)
        first, now = [], latency(current)
        options = [c for c in (current, *neighbours(current, ladders, base))
                   if c.fingerprint in tried and latency(c) is not None]
        best = min(options, key=latency, default=current)
        gains = best is not current and (now is None or latency(best) <= now * (1 - MIN_GAIN))
        rounds.append({"from": current.name, "tried": [c.name for c in step], "to": best.name if gains else None})
        if not gains:
            break
        current = best
        steps.append(best)
    cost(first)                 # (the preset alone: a limit of one config, or no step from it)

    # The finalists: the fastest measured configs and the preset, tuned, then placed and routed.
    measured = sorted((c for c in tried.values() if latency(c) is not None), key=latency)
    final = measured[:finalists] + ([base] if base in measured[finalists:] else [])
    tuning = _tune(final, trials, model_bytes, calibration, memory, runner, out / "tuning.jsonl", seed, jobs,
                   progress) if trials else {}
    jobs.run([cycles_item(c, records) for c in final if (records := tuning.get(c.fingerprint))])
    placed = list(final)
    if place and final:
        progress(f"placing and routing {', '.join(c.name for c in final)} at {place_freq_mhz:g} MHz "
                 f"(seeds {', '.join(map(str, seeds))}, until one meets it)")
        jobs.run([place_item(c, seeds[0]) for c in final])
        # Fmax in the choice: larger configs clock lower, so the configs the climb stepped through are placed
        # too, the last first, while one could still win at the highest Fmax any placed config reached.
        while not jobs.out_of_time():
            reached = {c.fingerprint: _placements(log, c, place_freq_mhz, seeds) for c in placed}
            more = _could_win([c for c in reversed(steps) if c not in placed], placed,
                              lambda c: _measured(log, c, trials)["cycles"], reached)[:runner.parallelism]
            if not more:
                break
            progress(f"placing {', '.join(c.name for c in more)} too: at the highest Fmax reached, faster than the "
                     f"fastest config that met the clock")
            placed += more
            jobs.run([place_item(c, seeds[0]) for c in more])
    summary = _summarise(log, list(tried.values()), final, placed, rounds, board, freq_mhz,
                         place_freq_mhz if place else None, trials, seeds, out, model_bytes, calibration, memory,
                         progress)
    summary["lost"] = jobs.lost
    return summary


class _Jobs:
    """The search's jobs on a runner, up to its parallelism at a time, each result logged as it comes; what the
    log holds is taken, not run again. An item is ``(kind, key, cfg, function, args)``; ``follow(kind, cfg,
    result)`` gives the items a result calls for next (run before the rest)."""

    def __init__(self, runner, log, deadline, follow, progress):
        self.runner, self.log, self.deadline, self.follow, self.progress = runner, log, deadline, follow, progress
        self.lost = 0

    def out_of_time(self):
        return self.deadline is not None and time.monotonic() >= self.deadline

    def run(self, items):
        pending, running = list(items), {}
        while pending or running:
            while pending and len(running) < self.runner.parallelism and not self.out_of_time():
                kind, key, cfg, fn, args = pending.pop(0)
                known = self.log.get(kind, key)
                if known is not None:
                    pending[:0] = self.follow(kind, cfg, known)
                    continue
                running[self.runner.submit(fn, *args)] = (kind, key, cfg)
            if not running:
                break
            for future in self.runner.wait_any(list(running)):
                kind, key, cfg = running.pop(future)
                try:
                    result = future.result()
                except Exception as e:
                    # A tool or a worker that failed (Yosys, a Verilator build, a process that died) is not the
                    # candidate's result: it is said, not logged, and a search run again tries it again.
                    self.lost += 1
                    self.progress(f"  {cfg.name}: {kind} lost ({type(e).__name__}: {str(e)[:200]}); not logged")
                    continue
                self.log.add(kind, key, cfg, result)
                self.progress(f"  {cfg.name} ({_shape(cfg)}): {_said(kind, result)}")
                pending[:0] = self.follow(kind, cfg, result)


def _tune(configs, trials, model_bytes, calibration, memory, runner, path, seed, jobs, progress):
    """Each of ``configs``' accelerator layers tuned (``trials`` points, in RTL cycles with DRAM ``memory``) into
    the tuning log at ``path``: ``{fingerprint: [its records]}``."""
    from tilewright.compiler.tune import TuningLog, design_hash, model_tasks, tune
    from tilewright.runtime.model import compile_model
    log = TuningLog(path)
    for cfg in configs:
        tasks = model_tasks(compile_model(model_bytes, cfg, calibration=calibration), memory)
        design = design_hash(cfg, memory)
        for n, task in enumerate(tasks, 1):
            if jobs.out_of_time():
                break
            result = tune(task, trials=trials, runner=runner, log=log, seed=seed, design=design,
                          batch=TUNING_BATCH, sync=True, tuner_options={"history": log.records})
            if result.best:
                progress(f"  {cfg.name} [{n}/{len(tasks)}] {task.name}: {result.best['cycles']:,} cycles tuned"
                         + (f", {result.speedup:.3f}x the heuristic's" if result.speedup else ""))
    return {cfg.fingerprint: _tuning_records(log, cfg, memory) for cfg in configs}


def _tuning_records(log, cfg, memory):
    """The records of tuning log ``log`` for ``cfg`` measured with DRAM timing ``memory``."""
    timing = memory.to_json()
    return [r for r in log.records if r["fingerprint"] == cfg.fingerprint and r.get("memory") == timing]


def _measured(log, cfg, trials=0):
    """``cfg``'s cycles result when it fits and its output equals fsim's, else None: with the compiler's
    schedules, or with those tuned with ``trials`` points a layer unless that is more cycles."""
    synth = log.get("synthesis", cfg.fingerprint)
    if not (synth and synth.get("fits")):
        return None
    results = ([log.get("tuned", f"{cfg.fingerprint}/{trials}")] if trials else []) + [log.get("cycles",
                                                                                           cfg.fingerprint)]
    good = [r for r in results if r and not r.get("error") and r["equals_fsim"]]
    return min(good, key=lambda r: r["cycles"], default=None)      # (the tuned one on a tie)


def _could_win(candidates, placed, cycles, reached):
    """Of ``candidates``, those that could beat every config in ``placed`` that met the clock: their ``cycles``
    (a function of a config) at the highest Fmax any placed config reached, fewer seconds than the fastest of
    those at its Fmax. ``reached``: a placed config's fingerprint -> its placements (``place_job`` results).
    With no Fmax reached yet, every candidate could."""
    fmax = {c.fingerprint: _best_fmax(reached[c.fingerprint]) for c in placed}
    highest = max((f for f in fmax.values() if f), default=None)
    if highest is None:
        return list(candidates)
    best = min((cycles(c) / fmax[c.fingerprint] for c in placed
                if fmax[c.fingerprint] and any(p["met"] for p in reached[c.fingerprint])), default=float("inf"))
    return [c for c in candidates if cycles(c) / highest < best]


def _best_fmax(placements):
    """The highest Fmax of a config's placements (``place_job`` results), or None."""
    return max((p["fmax_mhz"] for p in placements if p["fmax_mhz"]), default=None)


def _shape(cfg):
    lanes = f", {cfg.gemm_width} lanes" if cfg.gemm_lanes else ""
    return (f"{cfg.batch}x{cfg.block_in}x{cfg.block_out}{lanes}, wgt/inp/acc {cfg.wgt_buffer_bytes // 1024}/"
            f"{cfg.inp_buffer_bytes // 1024}/{cfg.acc_buffer_bytes // 1024} KiB, bus {cfg.dram_bus_width}, "
            f"ALU {cfg.vector_lanes or 'all'} lane{'' if cfg.vector_lanes == 1 else 's'}"
            f"{', requantizing STORE' if cfg.requant_store else ''}")


def _said(kind, result):
    if result.get("error"):
        return f"{kind} failed: {result['error']}"
    if kind == "synthesis":
        used = ", ".join(f"{k} {v}" for k, v in result["resources"].items() if k in RESOURCES + ("FF",))
        return f"{used}{'' if result['fits'] else ' (does not fit: ' + result['over'] + ')'}"
    if kind == "place":
        reached = f"Fmax {result['fmax_mhz']:g} MHz" if result["fmax_mhz"] else "no Fmax"
        return f"seed {result['seed']}: {reached}{'' if result['met'] else ' (not met)'}"
    return (f"{result['cycles']:,} cycles{' (tuned schedules)' if kind == 'tuned' else ''}"
            f"{'' if result['equals_fsim'] else ', output DIFFERS from fsim'}")


def _place_key(cfg, freq_mhz, seed):
    return f"{cfg.fingerprint}@{freq_mhz:g}#{seed}"


def _place_folder(out, cfg, freq_mhz, seed):
    return out / "place" / f"{cfg.fingerprint}-{freq_mhz:g}MHz-seed{seed}"


def _placements(log, cfg, place_freq_mhz, seeds):
    return [r for r in (log.get("place", _place_key(cfg, place_freq_mhz, s)) for s in seeds) if r]


def _summarise(log, tried, final, placed, rounds, board, freq_mhz, place_freq_mhz, trials, seeds, out, model_bytes,
               calibration, memory, progress):
    """The front, the winner's files and the summary, from what the log holds (``final``: the tuned finalists;
    ``placed``: the configs placed and routed, unless ``place_freq_mhz`` is None)."""
    placed_ids, points, missed = {c.fingerprint for c in placed}, [], []
    for cfg in tried:
        synth, measured = log.get("synthesis", cfg.fingerprint), _measured(log, cfg, trials)
        if not measured:
            missed.append({"config": cfg.name, "shape": _shape(cfg), "why": _why_not(log, cfg)})
            continue
        heuristic = log.get("cycles", cfg.fingerprint)
        point = {"config": cfg.name, "fingerprint": cfg.fingerprint, "shape": _shape(cfg),
                 "macs_per_cycle": cfg.macs_per_cycle, "cycles": measured["cycles"],
                 "heuristic_cycles": heuristic["cycles"] if heuristic else None,
                 "schedules": "heuristic" if measured is heuristic else "tuned",
                 "latency_s": measured["cycles"] / (freq_mhz * 1e6),
                 **{k: synth["resources"].get(k, 0) for k in RESOURCES + ("FF",)}}
        placements = _placements(log, cfg, place_freq_mhz, seeds) \
            if place_freq_mhz is not None and cfg.fingerprint in placed_ids else []
        if fmax := _best_fmax(placements):
            point.update(fmax_mhz=fmax, timing_met=any(p["met"] for p in placements),
                         seeds={str(p["seed"]): p["fmax_mhz"] for p in placements},
                         latency_at_fmax_s=measured["cycles"] / (fmax * 1e6))
        points.append(point)
    front = pareto_front(points)
    preset = next((p for p in points if p["fingerprint"] == load_config(board.config).fingerprint), None)
    met = [p for p in points if p.get("timing_met")]
    # the winner met the clock and is fastest at its Fmax; when no placed config met it (or none was placed), the
    # fastest at the search's clock, without a bitstream
    winner = (min(met, key=lambda p: p["latency_at_fmax_s"]) if met else
              min(front, key=lambda p: (p["latency_s"], p["LUT"])) if front else None)
    compared_on = "latency_at_fmax_s" if met and preset and "latency_at_fmax_s" in preset else "latency_s"
    summary = {"board": board.name, "freq_mhz": freq_mhz, "place_freq_mhz": place_freq_mhz, "trials": trials,
               "dram": memory.to_json(), "tried": len(tried), "measured": len(points), "rounds": rounds,
               "points": points, "front": front, "missed": missed, "preset": preset, "winner": winner,
               "finalists": [c.name for c in final],
               "also_placed": [c.name for c in tried if c.fingerprint in placed_ids and c not in final],
               "compared_on": compared_on,
               "winner_met_timing": bool(met),
               "speedup_over_preset": preset[compared_on] / winner[compared_on] if preset and winner else None,
               "latency": "latency_s: the accelerator layers' cycles at the search's clock; latency_at_fmax_s: at "
                          "the Fmax place and route reached (host layers not counted)"}
    for name in OUTPUTS:       # (none of an earlier run's stays behind)
        (out / name).unlink(missing_ok=True)
    (out / "front.json").write_text(json.dumps(summary, indent=2))
    if points:
        _plot(points, front, preset, out / "front.png")
    if winner:
        trouble = _winner_files(winner, tried, log, out, model_bytes, calibration, memory, place_freq_mhz, seeds)
        if trouble:
            progress(trouble)
        if place_freq_mhz is not None and not met:
            progress(f"no placed config met {place_freq_mhz:g} MHz at seeds {', '.join(map(str, seeds))}: no "
                     f"bitstream; the winner below is the fastest at {freq_mhz:g} MHz")
        at = (f"{winner['latency_at_fmax_s'] * 1e3:.3f} ms at its Fmax {winner['fmax_mhz']:g} MHz"
              if compared_on == "latency_at_fmax_s" else f"{winner['latency_s'] * 1e3:.3f} ms at {freq_mhz:g} MHz")
        speedup = f", {summary['speedup_over_preset']:.2f}x the preset {board.config}" if preset else ""
        progress(f"front: {len(front)} of {len(points)} measured configs; winner {winner['config']} "
                 f"({winner['shape']}): {at}{speedup}")
    else:
        progress("no config was measured: nothing on the front")
    (out / "summary.md").write_text(_one_page(summary))
    return summary


def _winner_files(winner, tried, log, out, model_bytes, calibration, memory, place_freq_mhz, seeds):
    """``winner.toml``, its tuning records, its compiled model (with them) and the bitstream that met timing
    (``winner.bit``, ``.bin`` or ``.fs``, as the board's build names it) with its report."""
    from tilewright.compiler.tune import TuningLog
    from tilewright.runtime.model import compile_model
    cfg = next(c for c in tried if c.fingerprint == winner["fingerprint"])
    (out / "winner.toml").write_text(cfg.toml())
    records = []
    if winner["schedules"] == "tuned":
        records = _tuning_records(TuningLog(out / "tuning.jsonl"), cfg, memory)
        (out / "winner_tuning.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    compile_model(model_bytes, cfg, calibration=calibration, memory=memory,
                  tuning_log=TuningLog(records=records) if records else None).save(out / "winner.twm")
    good = next((p for p in _placements(log, cfg, place_freq_mhz, seeds) if p["met"]), None) \
        if place_freq_mhz is not None else None
    if good:
        folder = _place_folder(out, cfg, place_freq_mhz, good["seed"])
        try:
            bitstream = folder / Path(json.loads((folder / "report.json").read_text())["bitstream"]).name
            shutil.copyfile(bitstream, out / f"winner{bitstream.suffix}")
        except (OSError, ValueError, KeyError):
            return f"no winner bitstream: the build in {folder} is not on this machine (placed by a remote worker?)"
        shutil.copyfile(folder / "report.json", out / "winner_report.json")
    return None


def _why_not(log, cfg):
    synth = log.get("synthesis", cfg.fingerprint)
    if synth is None:
        return "not costed (budget, or its job was lost)"
    if not synth.get("fits"):
        used = ", ".join(f"{k} {v}" for k, v in synth["resources"].items() if k in RESOURCES)
        return f"does not fit: {synth['over']}" if "over" in synth else f"does not fit ({used})"
    cycles = log.get("cycles", cfg.fingerprint)
    if cycles is None:
        return "not measured (budget, or its job was lost)"
    return cycles.get("error") or "output differs from fsim"


def _one_page(summary):
    """``summary.md``: what the search tried, the steps it took, the finalists and the winner."""
    lines = [f"# Co-design search: {summary['board']} at {summary['freq_mhz']:g} MHz", "",
             f"{summary['tried']} configs costed, {summary['measured']} measured (they fit, and their output "
             f"equals fsim's); finalists {', '.join(summary['finalists']) or 'none'}"
             + (f", their layers tuned ({summary['trials']} points a layer)" if summary["trials"] else "")
             + (f", placed and routed for {summary['place_freq_mhz']:g} MHz" if summary["place_freq_mhz"] else "")
             + (f"; also placed, as steps of the climb that could win at a higher Fmax: "
                f"{', '.join(summary['also_placed'])}" if summary.get("also_placed") else "")
             + ".", "", "## Steps", ""]
    for n, r in enumerate(summary["rounds"], 1):
        lines.append(f"{n}. from {r['from']}: {len(r['tried'])} configs a step away; "
                     + (f"moved to {r['to']}" if r["to"] else f"none faster by {MIN_GAIN:.0%}: stopped"))
    placed = any("fmax_mhz" in p for p in summary["points"])
    lines += ["", "## Measured", "",
              f"| config | shape | LUT | DSP | BRAM | cycles | ms at {summary['freq_mhz']:g} MHz |"
              + (f" Fmax placed for {summary['place_freq_mhz']:g} MHz |" if placed else ""),
              "|---|---|---|---|---|---|---|" + ("---|" if placed else "")]
    front = {p["fingerprint"] for p in summary["front"]}
    for p in sorted(summary["points"], key=lambda p: p["latency_s"]):
        fmax = f" {p['fmax_mhz']:g} MHz{'' if p['timing_met'] else ' (not met)'} |" if "fmax_mhz" in p else \
            (" |" if placed else "")
        lines.append(f"| {p['config']}{' (front)' if p['fingerprint'] in front else ''} | {p['shape']} | "
                     f"{p['LUT']:,} | {p['DSP']} | {p['BRAM']} | {p['cycles']:,} | {p['latency_s'] * 1e3:.3f} |{fmax}")
    if summary["missed"]:
        lines += ["", "## Not measured", ""] + [f"* {m['config']} ({m['shape']}): {m['why']}"
                                                for m in summary["missed"]]
    winner, preset = summary["winner"], summary["preset"]
    if winner:
        bitstream = "" if summary["winner_met_timing"] or not summary["place_freq_mhz"] else \
            " (no placed config met the clock: no bitstream)"
        lines += ["", "## Winner", "", f"{winner['config']} ({winner['shape']}){bitstream}: {winner['cycles']:,} cycles"
                  + (f", Fmax {winner['fmax_mhz']:g} MHz, {winner['latency_at_fmax_s'] * 1e3:.3f} ms"
                     if "fmax_mhz" in winner else "")
                  + (f"; {summary['speedup_over_preset']:.2f}x the preset {preset['config']} "
                     f"({'both at their Fmax' if summary['compared_on'] == 'latency_at_fmax_s' else 'same clock'})"
                     if preset else "")]
    return "\n".join(lines) + "\n"


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
