"""A hardware regression for a user's config: what ``tilewright regress`` runs.

Five suites, each a list of :class:`Case` results:

``build``
    The RTL of the config, Verilated (once per design hash, cached).
``differential``
    Random programs (:mod:`tilewright.sim.fuzz`) on fsim and the RTL; DRAM,
    error codes and counters must be identical. Batches of programs are
    the unit of work fanned out to the runner.
``operators``
    ``conv2d`` and ``dense`` over random shapes, strides, padding and
    epilogues on the RTL, against the numpy reference.
``model``
    The digits CNN compiled for the config, on fsim and the RTL: outputs
    identical bit for bit.
``formal``
    The four safety properties of :mod:`tilewright.sim.properties`, by k-induction.

Work runs through the futures interface of :mod:`tilewright.compiler.tune.runner`:
a Dask cluster (a ``LocalCluster`` by default, or a scheduler's address), or
this process alone. A differential mismatch leaves a reproducer folder per
failing program (:func:`write_reproducer`): its listing, DRAM image, seed,
and whether it fails alone or only after the programs before it in its batch.
"""

import json
import time
import xml.etree.ElementTree as ET
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["Case", "RegressionPlan", "Regression", "run_regression", "junit_xml", "write_reproducer", "SUITES"]

SUITES = ("build", "differential", "operators", "model", "formal")


@dataclass
class Case:
    """One test case's outcome: ``failure`` is None when it passed."""
    suite: str
    name: str
    seconds: float
    failure: str | None = None
    detail: str = ""
    programs: int = 0                  # (differential) programs this case ran
    reproducer: dict | None = field(default=None, repr=False)


@dataclass
class RegressionPlan:
    """What to run: ``programs`` random programs from ``seed`` in batches of ``batch``, ``operators``
    random operator cases, the model, the proofs (each suite can be left out)."""
    programs: int = 200
    seed: int = 0
    batch: int = 20
    operators: int = 8
    model: bool = True
    formal: bool = True


# -- work items (run in worker processes: module-level, arguments picklable) --------------------------

def _timed(suite, name, fn):
    start = time.perf_counter()
    try:
        detail = fn() or ""
        return Case(suite, name, time.perf_counter() - start, detail=detail)
    except Exception as e:      # a case that fails for any reason is a failed case, never a dead regression
        return Case(suite, name, time.perf_counter() - start, failure=f"{type(e).__name__}: {e}".strip())


def differential_batch(cfg, seeds):
    """Cases for the random programs ``seeds`` run as one batch (SRAMs persist from one to the next)."""
    from .differential import differential_results
    from .fuzz import random_program
    start = time.perf_counter()
    programs = [random_program(cfg, s) for s in seeds]
    try:
        checked = differential_results(cfg, programs, dram_bytes=programs[0].dram_bytes)
    except Exception as e:      # (a build or harness failure: every program of the batch failed)
        checked = e
    each = (time.perf_counter() - start) / len(seeds)
    if isinstance(checked, Exception):
        return [Case("differential", f"seed {s}", each, failure=f"{type(checked).__name__}: {checked}", programs=1)
                for s in seeds]
    cases = []
    for k, (program, (result, mismatch)) in enumerate(zip(programs, checked)):
        case = Case("differential", f"seed {program.seed}", each, programs=1,
                    detail=f"{result.counters.get('cycles', 0)} RTL cycles")
        if mismatch:
            first_line, _, listing = str(mismatch).partition("\n")
            case.failure = first_line
            case.detail = listing
            alone = differential_results(cfg, [program], dram_bytes=program.dram_bytes)[0][1]
            case.reproducer = dict(seed=program.seed, listing=program.listing(), dram=program.dram,
                                   insn_addr=program.insn_addr, insn_count=program.insn_count,
                                   fails_alone=alone is not None, seeds_before=list(seeds[:k]), message=first_line)
        cases.append(case)
    return cases


def _random_operator(cfg, seed):
    """One random conv2d or dense case on the RTL against numpy; returns its description."""
    from tilewright.runtime.api import conv2d, dense
    from tilewright.runtime.reference import conv2d_reference, dense_reference
    rng = np.random.default_rng(seed)
    relu, shift = bool(rng.integers(2)), int(rng.integers(4, 10))
    mul = int(rng.integers(1, 4))
    if seed % 3 == 2:
        n, k, o = int(rng.integers(1, 2 * cfg.batch + 1)), int(rng.integers(1, 3 * cfg.block_in)), \
            int(rng.integers(1, 3 * cfg.block_out))
        x = rng.integers(-128, 128, (n, k), dtype=np.int8)
        w = rng.integers(-128, 128, (o, k), dtype=np.int8)
        b = rng.integers(-2000, 2000, o, dtype=np.int32)
        got, _ = dense(x, w, b, mul=mul, shift=shift, relu=relu, config=cfg, backend="rtl")
        want = dense_reference(x, w, b, mul=mul, shift=shift, relu=relu)
        what = f"dense {n}x{k} -> {o}"
    else:
        c, o = int(rng.integers(1, 2 * cfg.block_in + 1)), int(rng.integers(1, 2 * cfg.block_out + 1))
        kh = int(rng.choice([1, 3]))
        h, w_ = int(rng.integers(kh, 10)), int(rng.integers(kh, 10))
        stride, padding = int(rng.integers(1, 3)), int(rng.integers(0, 2)) if kh > 1 else 0
        x = rng.integers(-128, 128, (cfg.batch, c, h, w_), dtype=np.int8)
        w = rng.integers(-128, 128, (o, c, kh, kh), dtype=np.int8)
        b = rng.integers(-2000, 2000, o, dtype=np.int32)
        got, _ = conv2d(x, w, b, stride=stride, padding=padding, mul=mul, shift=shift, relu=relu, config=cfg,
                        backend="rtl")
        want = conv2d_reference(x, w, b, stride=stride, padding=padding, mul=mul, shift=shift, relu=relu)
        what = f"conv2d {x.shape} * {w.shape} stride {stride} pad {padding}"
    if not np.array_equal(got, want):
        wrong = np.flatnonzero(got.ravel() != want.ravel())
        k = wrong[0]
        raise AssertionError(f"{what}: {wrong.size} of {want.size} outputs differ from numpy "
                             f"(first at flat index {k}: RTL {got.ravel()[k]}, numpy {want.ravel()[k]})")
    return f"{what}, mul {mul} shift {shift} relu {relu}: equal to numpy"


def operator_case(cfg, seed):
    return _timed("operators", f"random operator {seed}", lambda: _random_operator(cfg, seed))


def _digits_model(cfg):
    from tilewright.examples.digits.demo import MODEL_PATH
    from tilewright.runtime.model import compile_model
    rng = np.random.default_rng(0)
    model = compile_model(MODEL_PATH, cfg, calibration=rng.random((64, 1, 8, 8), dtype=np.float32))
    images = rng.random((2, 1, 8, 8), dtype=np.float32)
    fsim_out = model.run(images, backend="fsim")
    rtl_out = model.run(images, backend="rtl")
    for name in fsim_out:
        if not np.array_equal(fsim_out[name], rtl_out[name]):
            raise AssertionError(f"output {name!r} of the RTL differs from fsim")
    return f"{MODEL_PATH.name}: 2 images, RTL outputs identical to fsim"


def model_case(cfg):
    return _timed("model", "digits CNN, RTL vs fsim", lambda: _digits_model(cfg))


def formal_case(cfg, name, workdir):
    from .properties import formal_properties, prove_property
    prop = next(p for p in formal_properties(cfg) if p.name == name)

    def proof():
        prove_property(prop, workdir=workdir)
        return "proved by k-induction"
    return _timed("formal", f"{name}: {prop.says}", proof)


def build_case(cfg):
    from .rtl import build
    return _timed("build", f"Verilate {cfg.name} ({cfg.tag}, {cfg.fingerprint})",
                  lambda: f"model in {build(cfg)}")


# -- the driver --------------------------------------------------------------------------------------

class _InProcess:
    """The runner interface in this process alone: work runs in submission order as it is waited for."""
    parallelism = 1

    def __init__(self):
        self._queue = []

    def submit(self, fn, *args):
        future = Future()
        self._queue.append((future, fn, args))
        return future

    def wait_any(self, futures):
        if not any(f.done() for f in futures):
            future, fn, args = self._queue.pop(0)
            future.set_result(fn(*args))
        return {f for f in futures if f.done()}

    @staticmethod
    def describe():
        return "this process"


@dataclass
class Regression:
    """What :func:`run_regression` found: every case, the wall time, and the random programs' share of it."""
    cases: list
    seconds: float
    programs: int = 0
    program_seconds: float = 0.0       # wall time from the first batch submitted to the last one done

    @property
    def failed(self):
        return [c for c in self.cases if c.failure]

    @property
    def programs_per_second(self):
        return self.programs / self.program_seconds if self.program_seconds else 0.0


def run_regression(cfg, plan, *, runner=None, workdir, log=print):
    """Run ``plan`` on ``cfg``; returns a :class:`Regression`. ``runner`` None: in this process.

    ``log`` receives one line as each suite starts and as work completes (programs per second).
    """
    runner = runner or _InProcess()
    start = time.perf_counter()
    cases = [build_case(cfg)]
    log(f"build: {cases[0].failure or cases[0].detail} ({cases[0].seconds:.0f} s)")
    if cases[0].failure:
        return Regression(cases, time.perf_counter() - start)

    futures, submitted = {}, time.perf_counter()
    seeds = range(plan.seed, plan.seed + plan.programs)
    for first in range(0, plan.programs, plan.batch):
        futures[runner.submit(differential_batch, cfg, list(seeds[first:first + plan.batch]))] = "differential"
    for k in range(plan.operators):
        futures[runner.submit(operator_case, cfg, plan.seed + k)] = "operators"
    if plan.model:
        futures[runner.submit(model_case, cfg)] = "model"
    if plan.formal:
        from .properties import formal_properties
        for prop in formal_properties(cfg):
            futures[runner.submit(formal_case, cfg, prop.name, str(workdir))] = "formal"
    log(f"{plan.programs} random programs in batches of {plan.batch}, {plan.operators} operators"
        f"{', the digits model' if plan.model else ''}{', 4 proofs' if plan.formal else ''} "
        f"on {runner.describe()}")

    programs, mismatches, program_seconds = 0, 0, 0.0
    pending = set(futures)
    while pending:
        for future in runner.wait_any(pending):
            pending.discard(future)
            try:
                result = future.result()
            except Exception as e:        # (a worker that died: its work is a failed case)
                result = Case(futures[future], "lost work", 0.0, failure=f"{type(e).__name__}: {e}")
            done = result if isinstance(result, list) else [result]
            cases.extend(done)
            if futures[future] == "differential":
                programs += sum(c.programs for c in done)
                mismatches += sum(c.failure is not None for c in done)
                program_seconds = time.perf_counter() - submitted
                log(f"differential: {programs}/{plan.programs} programs, {mismatches} failed, "
                    f"{programs / program_seconds:.1f} programs/s")
            else:
                for c in done:
                    log(f"{c.suite}: {c.name}: {'FAIL ' + c.failure if c.failure else 'pass'} ({c.seconds:.0f} s)")
    return Regression(cases, time.perf_counter() - start, programs, program_seconds)


def junit_xml(cases, *, name, seconds):
    """JUnit XML (the schema CI systems read): one ``testsuite`` per suite, one ``testcase`` per case."""
    root = ET.Element("testsuites", name=name, tests=str(len(cases)),
                      failures=str(sum(c.failure is not None for c in cases)), time=f"{seconds:.3f}")
    for suite in SUITES:
        mine = [c for c in cases if c.suite == suite]
        if not mine:
            continue
        node = ET.SubElement(root, "testsuite", name=f"{name}.{suite}", tests=str(len(mine)),
                             failures=str(sum(c.failure is not None for c in mine)), errors="0", skipped="0",
                             time=f"{sum(c.seconds for c in mine):.3f}")
        for c in mine:
            case = ET.SubElement(node, "testcase", classname=f"{name}.{suite}", name=c.name, time=f"{c.seconds:.3f}")
            if c.failure:
                ET.SubElement(case, "failure", message=c.failure).text = c.detail
            elif c.detail:
                ET.SubElement(case, "system-out").text = c.detail
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_reproducer(folder, cfg, case):
    """A folder holding what reproduces ``case``'s mismatch: ``program.s``, ``dram.bin``, ``config.json`` and
    ``README``."""
    from tilewright.compiler import files
    r = case.reproducer
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files.write_text(folder / "program.s", r["listing"] + "\n")
    files.write_bytes(folder / "dram.bin", r["dram"])
    files.write_text(folder / "config.json", json.dumps({"name": cfg.name, **cfg.params()}, indent=2) + "\n")
    if r["fails_alone"]:
        how = (f"It fails on its own: `tilewright fuzz --config CONFIG -n 1 --seed {r['seed']}` reruns it "
               f"(CONFIG: the regression's config; config.json holds its parameters).")
    else:
        how = (f"It passes on its own: it fails only after seeds {r['seeds_before']} ran before it on the same "
               f"accelerator (their SRAM contents carry over); rerun with `tilewright fuzz --config CONFIG "
               f"-n {len(r['seeds_before']) + 1} --seed {r['seeds_before'][0] if r['seeds_before'] else r['seed']}`.")
    files.write_text(folder / "README", (
        f"Random program seed {r['seed']} on config {cfg.name} ({cfg.tag}, fingerprint {cfg.fingerprint}).\n"
        f"fsim and the RTL disagree: {r['message']}\n\n"
        f"dram.bin is the whole DRAM image before the run; its {r['insn_count']} instructions start at byte "
        f"{r['insn_addr']:#x} (program.s lists them).\n{how}\n"))
    return folder
