"""``tilewright bench resnet18``: the ResNet-18 conv layers against the roofline.

For each layer (C2–C11 of the VTA benchmark) the default schedule (with
virtual threads) and the same tiles on one thread are compiled and run on a
backend; outputs are checked against numpy (and, for the RTL, against the
functional simulator). Per layer: MACs, cycles, GEMM utilization = MACs /
(cycles × batch × block_in × block_out), DRAM bytes, the roofline bound =
max(ideal GEMM cycles, bytes / bus bytes per cycle), cycles / bound, and the
single-thread cycles; overall, simulated cycles per wall-clock second.
"""

import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from tilewright.compiler import build, files
from tilewright.compiler.ops import Conv2dSpec, conv2d, conv_tiles
from tilewright.compiler.tune.task import Task
from tilewright.config import load_config

from .device import DeviceError, get_device
from .layout import pack_bias, pack_nchw, pack_oihw, unpack_nchw
from .reference import conv2d_reference

__all__ = ["RESNET18", "resnet18_layer", "bench_resnet18", "chrome_trace", "roofline_plot"]

#: (name, H=W, Cin, Cout, kernel, stride); padding 1 for 3×3, 0 for 1×1.
RESNET18 = [("C2", 56, 64, 64, 3, 1), ("C3", 56, 64, 128, 3, 2), ("C4", 56, 64, 128, 1, 2),
            ("C5", 28, 128, 128, 3, 1), ("C6", 28, 128, 256, 3, 2), ("C7", 28, 128, 256, 1, 2),
            ("C8", 14, 256, 256, 3, 1), ("C9", 14, 256, 512, 3, 2), ("C10", 14, 256, 512, 1, 2),
            ("C11", 7, 512, 512, 3, 1)]


def resnet18_layer(name, config):
    """The packed Conv2dSpec of ResNet-18 layer ``name`` (``"C2"``…``"C11"``) on ``config``, with the
    benchmark's epilogue (bias, ×3 >> 12, ReLU)."""
    cfg = load_config(config)
    _, hw, cin, cout, kernel, stride = next(layer for layer in RESNET18 if layer[0] == name)
    return Conv2dSpec(cfg.batch, cin, hw, hw, cout, (kernel, kernel), stride, 1 if kernel == 3 else 0, bias=True,
                      mul=3, shift=12, relu=True)


def chrome_trace(events, program, layer, pid):
    """Chrome/Perfetto trace events (one time unit = one cycle) from harness trace lines."""
    started, out = {}, []
    for line in events:
        cycle, stream, kind, index = line.split()
        key = (stream, int(index))
        if kind == "start":
            started[key] = int(cycle)
        elif key in started:
            insn = program.instructions[int(index)]
            name = type(insn).__name__.upper()
            if hasattr(insn, "memory_type"):
                name += f" {insn.memory_type.name}"
            elif hasattr(insn, "alu_op"):
                name += f" {insn.alu_op.name}"
            begin = started.pop(key)
            out.append({"name": name, "ph": "X", "ts": begin, "dur": int(cycle) - begin + 1, "pid": pid,
                        "tid": stream, "args": {"instruction": int(index), "layer": layer}})
    out.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": layer}})
    return out


def _run(device, program, tensors, trace_file=None):
    if trace_file is not None:
        device.trace = str(trace_file)
    start = time.perf_counter()
    try:
        outputs, stats = device.run_program(program, tensors)
    finally:
        if trace_file is not None:
            device.trace = None
    return outputs["out"], stats, time.perf_counter() - start


def bench_resnet18(backend="rtl", config="default", *, layers=None, json_path=None, plot_path=None,
                   roofline_path=None, trace_path=None, tuning_log=None, memory=None, progress=print):
    """Run the benchmark; returns the JSON-ready result dict. With ``tuning_log`` (a path) each layer runs
    the fastest schedule that log holds for it (the heuristic's where it has none), and the heuristic's
    schedule too (``default`` in its record). ``plot_path``: a bar chart of cycles per layer;
    ``roofline_path``: the layers on the config's roofline. ``memory``: the RTL's DRAM timing (a
    :class:`~tilewright.sim.fast.DramTiming`), if not the harness's default."""
    for path in (json_path, plot_path, roofline_path, trace_path):
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
    cfg = load_config(config)
    if backend != "fsim" and not cfg.perf_counters:
        raise DeviceError(f"config {cfg.name} has no performance counters (perf_counters = false): the benchmark "
                          f"needs their DRAM byte counts")
    tuned = None
    if tuning_log:
        from tilewright.compiler.tune import TuningLog
        tuned = TuningLog(tuning_log)
    device = get_device(backend, cfg, memory=memory)
    from tilewright.sim.fast import DramTiming
    bandwidth = (memory or DramTiming()).bandwidth(cfg.bus_bytes)
    check = get_device("fsim", cfg) if backend != "fsim" else None
    macs_per_cycle = cfg.macs_per_cycle
    records, trace_events = [], []
    sim_cycles, sim_seconds = 0, 0.0
    rng = np.random.default_rng(0)
    for k, (name, hw, cin, cout, kernel, stride) in enumerate(RESNET18):
        if layers and name not in layers:
            continue
        spec = resnet18_layer(name, cfg)
        pad = spec.padding
        x = rng.integers(-128, 128, (cfg.batch, cin, hw, hw), dtype=np.int8)
        w = rng.integers(-128, 128, (cout, cin, kernel, kernel), dtype=np.int8)
        b = rng.integers(-4096, 4096, cout, dtype=np.int32)
        tensors = {"data": pack_nchw(x, cfg.batch, cfg.block_in), "weight": pack_oihw(w, cfg.block_out, cfg.block_in),
                   "bias": pack_bias(b, cfg.batch, cfg.block_out)}
        record, tiles = tuned.best_schedule(Task("conv2d", spec, cfg, memory)) if tuned else (None, None)
        heuristic = conv_tiles(spec, cfg)
        tiles = tiles or heuristic
        program = build(conv2d(spec, cfg, tiles)[0], cfg)
        single = build(conv2d(spec, cfg, dataclasses.replace(tiles, threads=1))[0], cfg)
        trace_file = Path(f"{trace_path}.{name}.txt") if trace_path and backend == "rtl" else None
        out, stats, seconds = _run(device, program, tensors, trace_file)
        out_single, stats_single, seconds_single = _run(device, single, tensors)
        expected = conv2d_reference(x, w, b, stride=stride, padding=pad, mul=3, shift=12, relu=True)
        result = unpack_nchw(out, cfg.batch, cout)
        if not np.array_equal(result, expected) or not np.array_equal(unpack_nchw(out_single, cfg.batch, cout), expected):
            raise RuntimeError(f"{name}: the {backend} output differs from numpy")
        if check is not None:
            fsim_out, _ = check.run_program(program, tensors)
            if not np.array_equal(fsim_out["out"], out):
                raise RuntimeError(f"{name}: the {backend} output differs from fsim")
        macs = spec.macs
        dram = stats["dram_bytes_read"] + stats["dram_bytes_written"]
        ideal = macs / macs_per_cycle
        bound = max(ideal, dram / bandwidth)
        cycles = stats.get("cycles")
        record = {"layer": name, "shape": f"{hw} {cin}->{cout} {kernel}x{kernel} s{stride}", "macs": macs,
                  "cycles": cycles, "gemm_utilization": macs / (cycles * macs_per_cycle) if cycles else None,
                  "dram_bytes": dram, "roofline_cycles": bound, "ratio": cycles / bound if cycles else None,
                  "cycles_single_thread": stats_single.get("cycles"), "threads": tiles.threads,
                  "tiles": dataclasses.asdict(tiles), "schedule": "tuned" if record else "heuristic",
                  "instructions": stats["instructions"]}
        if record["schedule"] == "tuned" and tiles != heuristic:
            _, stats_default, _ = _run(device, build(conv2d(spec, cfg, heuristic)[0], cfg), tensors)
            record["default"] = {"cycles": stats_default.get("cycles"),
                                 "dram_bytes": stats_default["dram_bytes_read"] + stats_default["dram_bytes_written"]}
        if cycles:
            sim_cycles += cycles + stats_single["cycles"]
            sim_seconds += seconds + seconds_single
        if trace_file is not None and trace_file.exists():
            trace_events += chrome_trace(trace_file.read_text().splitlines(), program, name, k)
            trace_file.unlink()
        records.append(record)
        if cycles:
            progress(f"{name:4} {record['shape']:22} cycles {cycles:>9} (1 thread {stats_single['cycles']:>9})  "
                     f"util {record['gemm_utilization']:.3f}  roofline ×{record['ratio']:.3f}")
        else:
            progress(f"{name:4} {record['shape']:22} {stats['instructions']} instructions, {dram} DRAM bytes: "
                     f"output equals numpy")
    result = {"backend": backend, "config": cfg.name, "layers": records,
              "sim_cycles_per_second": sim_cycles / sim_seconds if sim_seconds else None}
    three = [r["gemm_utilization"] for r in records if r["gemm_utilization"] and "3x3" in r["shape"]]
    if three:
        result["mean_gemm_utilization_3x3"] = sum(three) / len(three)
        progress(f"mean GEMM utilization (3x3 layers): {result['mean_gemm_utilization_3x3']:.3f}; "
                 f"worst roofline ratio {max(r['ratio'] for r in records):.3f}; "
                 f"{result['sim_cycles_per_second']:,.0f} simulated cycles/s")
    if json_path:
        files.write_text(json_path, json.dumps(result, indent=2))
    if plot_path and records and records[0]["cycles"]:
        _plot(records, plot_path, cfg)
    if roofline_path and records and records[0]["cycles"]:
        roofline_plot(records, roofline_path, cfg, bandwidth)
    if trace_path and trace_events:
        files.write_text(trace_path, json.dumps({"traceEvents": trace_events, "displayTimeUnit": "ns",
                                                "otherData": {"time_unit": "cycle"}}))
    return result


def _plot(records, path, cfg):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [r["layer"] for r in records]
    xs = np.arange(len(names))
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(xs - 0.27, [r["cycles_single_thread"] for r in records], 0.27, label="1 thread", color="tab:gray")
    ax.bar(xs, [r["cycles"] for r in records], 0.27, label="latency hiding", color="tab:blue")
    ax.bar(xs + 0.27, [r["roofline_cycles"] for r in records], 0.27, label="roofline bound", color="tab:green")
    for x, r in zip(xs, records):
        ax.text(x, r["cycles"], f"{r['gemm_utilization']:.2f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs, names)
    ax.set_ylabel("cycles")
    ax.set_title(f"ResNet-18 conv layers on {cfg.name} ({cfg.tag}); labels: GEMM utilization")
    ax.legend()
    fig.tight_layout()
    with files.atomic_write(path) as f:
        fig.savefig(f, dpi=120, format=Path(path).suffix.lstrip(".") or "png")


def roofline_plot(records, path, cfg, bandwidth=None):
    """The layers on ``cfg``'s roofline, log–log: operational intensity (MACs per DRAM byte) across, MACs
    per cycle up; the compute roof (``macs_per_cycle``) and the bandwidth slope (``bandwidth``, by default
    the bus's bytes a cycle, × MACs per byte) meet at the ridge. One point per layer as run (tuned, when a
    tuning log chose it), and its heuristic schedule's where that differs. Returns what it drew: ``{"roof": [(x, y), ...], "points":
    {layer: (x, y)}, "heuristic": {layer: (x, y)}}``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peak, bus = cfg.macs_per_cycle, bandwidth or cfg.bus_bytes

    def point(macs, cycles, dram):
        return macs / dram, macs / cycles

    fig, ax = plt.subplots(figsize=(7, 5))
    runs = [point(r["macs"], r["cycles"], r["dram_bytes"]) for r in records]
    defaults = [(r, point(r["macs"], r["default"]["cycles"], r["default"]["dram_bytes"]))
                for r in records if r.get("default")]
    xs = [x for x, _ in runs] + [x for _, (x, _) in defaults]
    lo, hi = min(xs + [peak / bus]) / 2, max(xs + [peak / bus]) * 2
    ridge = peak / bus
    ax.plot([lo, ridge, hi], [lo * bus, peak, peak], color="black", linewidth=1.5,
            label=f"roofline: {peak} MACs/cycle, {bus:g} bytes/cycle")
    tuned = any(r["schedule"] == "tuned" for r in records)
    ax.scatter([x for x, _ in runs], [y for _, y in runs], color="tab:blue", zorder=3,
               label="tuned (or heuristic where untuned)" if tuned else "heuristic schedule")
    if defaults:
        ax.scatter([x for _, (x, _) in defaults], [y for _, (_, y) in defaults], color="tab:gray", marker="x",
                   zorder=3, label="heuristic schedule")
    for r, (x, y) in zip(records, runs):
        ax.annotate(r["layer"], (x, y), textcoords="offset points", xytext=(4, -10), fontsize=7)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(min(lo * bus, min(y for _, y in runs) / 2), peak * 2)
    ax.set_xlabel("operational intensity (MACs per DRAM byte)")
    ax.set_ylabel("MACs per cycle")
    ax.set_title(f"ResNet-18 conv layers on the {cfg.name} roofline ({cfg.tag})")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    with files.atomic_write(path) as f:
        fig.savefig(f, dpi=120, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    return {"roof": [(lo, lo * bus), (ridge, peak), (hi, peak)],
            "points": {r["layer"]: xy for r, xy in zip(records, runs)},
            "heuristic": {r["layer"]: xy for r, xy in defaults}}
