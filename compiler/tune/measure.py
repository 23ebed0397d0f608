"""Measuring points of a task: compile, run on the cycle-accurate RTL, count cycles.

:func:`measure` runs in a runner's worker process (or in this one) and
takes many points at a time: the Verilated model of the config starts once
per process and stays (the runtime's device cache), so only the first
point of a worker pays for it. Every point is compiled and run; its output
is compared with the functional simulator's (bit-exactness is checked, not
assumed). A point that the compiler refuses, that stops with an error or
whose output differs is a result with an ``error``, never an exception: one
bad candidate does not stop a tuning run.

:func:`design_hash` names what the cycle counts depend on (the RTL's
Verilog, the harness and its DRAM timing), for the tuning log's cache key.
"""

import hashlib
import time

import numpy as np

__all__ = ["measure", "design_hash"]


def design_hash(cfg, memory=None):
    """16 hex digits over the config's Verilog, the C++ harness and its DRAM timing (``memory``, a
    :class:`~tilewright.sim.fast.DramTiming`; None: the rtl backend's default)."""
    from tilewright.sim.fast import HARNESS, DramTiming
    from tilewright.sim.rtl import verilog_source
    text = verilog_source(cfg) + HARNESS.read_text() + repr(memory or DramTiming())
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def measure(task, points, *, backend="rtl", verify=True, seed=0):
    """``[{"knobs", "cycles", "error", "seconds"}]`` for each of ``points`` of ``task``, in order.

    ``cycles`` is the run's exact cycle count on ``backend`` (None with an
    ``error``), the RTL's DRAM answering as ``task.memory``; ``seconds`` the
    wall time of compiling and running it.
    """
    from tilewright.runtime.device import forget_device, get_device
    # (a failure here, building the RTL say, is the worker's, not a point's: it raises, and the tuner
    # reports it without caching it as the point's result)
    inputs = task.inputs(seed)
    options = {"memory": task.memory} if backend == "rtl" and task.memory else {}
    device = get_device(backend, task.config, **options)
    reference = get_device("fsim", task.config) if verify and backend != "fsim" else None
    results = []
    for point in points:
        started = time.perf_counter()
        cycles, error = None, None
        try:
            program = task.program(point)
            outputs, stats = device.run_program(program, inputs)
            cycles = stats.get("cycles")
            if cycles is None:
                error = f"the {backend} backend counts no cycles"
            elif reference is not None:
                expected, _ = reference.run_program(program, inputs)
                if not all(np.array_equal(outputs[k], expected[k]) for k in expected):
                    cycles, error = None, f"the {backend} output differs from fsim"
        except Exception as e:          # (a refused or failing candidate is a result, not the end of the run)
            error = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
            if not getattr(device, "alive", True):      # (its simulator died: the next point gets a new one)
                forget_device(backend, task.config)
                device = get_device(backend, task.config, **options)
        results.append({"knobs": point, "cycles": cycles, "error": error,
                        "seconds": round(time.perf_counter() - started, 4)})
    return results
