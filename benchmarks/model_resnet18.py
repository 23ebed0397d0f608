"""ResNet-18 (torchvision's architecture, 224×224, random weights) as a whole model.

    .venv/bin/python benchmarks/model_resnet18.py [--rtl] [--json benchmarks/results/resnet18_model.json]

Measures, in one run: import + quantize + compile time, fsim run time
(median of 3; of 5, in turns with the float reference, for the default weights) and output SQNR
against the float model, for per-channel and
per-tensor weights; fsim against the float reference (imported and run, and the run alone) at batch 1 and 16;
the first convolution (3 input channels) as im2col + 1×1 conv, with its
channels padded to the block, or on the host; with
``--rtl``, the whole model on the cycle-accurate RTL for the first two and
for per-tensor weights (cycles per layer, MACs per cycle against the
array's peak, output equal to fsim), and the default model's wall time with
its layers simulated one after another and ``--workers`` at once.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from tilewright.compiler.graph import load_onnx, run_graph
from tilewright.compiler.graph.quantize import sqnr_db
from tilewright.compiler.graph.zoo import resnet18
from tilewright.runtime.device import get_devices
from tilewright.runtime.model import compile_model, default_workers


def in_turns(fns, repeat):
    """Median seconds of each of ``fns``, run in turns ``repeat`` times (a noisy machine slows them alike)."""
    times = [[] for _ in fns]
    for _ in range(repeat):
        for fn, spent in zip(fns, times):
            start = time.perf_counter()
            fn()
            spent.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def timed(fn, repeat=1):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="default")
    ap.add_argument("--rtl", action="store_true", help="also run the whole model on the RTL")
    ap.add_argument("--json", type=Path, default=Path("benchmarks/results/resnet18_model.json"))
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="RTL simulations at once for the side-by-side run (default: one per core, at most 4)")
    args = ap.parse_args()

    onnx_bytes = resnet18().SerializeToString()
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((4, 3, 224, 224)).astype(np.float32)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    # The float reference is timed two ways, in turns with fsim (below): importing the ONNX graph and running
    # it (as the first figures were taken), and the run alone.
    graph = load_onnx(onnx_bytes)
    reference = run_graph(graph, {"input": x})
    name = next(iter(reference))
    result = {"model": "resnet18 224x224 random weights", "config": args.config, "calibration_samples": len(calib)}
    models = {}
    for mode in ("per-channel", "per-tensor"):
        model, compile_seconds = timed(lambda: compile_model(onnx_bytes, args.config, calibration=calib,
                                                             per_channel=mode == "per-channel"))
        out = model.run(x)
        if mode == "per-channel":       # (the default: timed in turns with the float reference)
            fsim_seconds, float_seconds, float_run = in_turns(
                [lambda: model.run(x), lambda: run_graph(load_onnx(onnx_bytes), {"input": x}),
                 lambda: run_graph(graph, {"input": x})], 5)
            result |= {"float_host_seconds": float_seconds, "float_run_seconds": float_run}
        else:
            _, fsim_seconds = timed(lambda: model.run(x), 3)
        models[mode] = model
        result[mode] = {"compile_seconds": compile_seconds, "fsim_run_seconds": fsim_seconds,
                        "sqnr_db": sqnr_db(reference[name], out[name]),
                        "accelerator_nodes": sum(s.where == "accelerator" for s in model.steps)}
        print(f"{mode:12} compile {compile_seconds:5.2f} s   fsim run {fsim_seconds:5.2f} s   "
              f"SQNR {result[mode]['sqnr_db']:5.1f} dB", flush=True)

    # a batch of 16 images: the float reference and fsim (a program over the batch) on the same inputs
    batch = 16
    onnx16 = resnet18(batch=batch).SerializeToString()
    x16 = rng.standard_normal((batch, 3, 224, 224)).astype(np.float32)
    model16 = compile_model(onnx16, args.config, calibration=rng.standard_normal((batch, 3, 224, 224)).astype(
        np.float32))
    graph16 = load_onnx(onnx16)
    model16.run(x16)
    fsim16, float16, float16_run = in_turns(
        [lambda: model16.run(x16), lambda: run_graph(load_onnx(onnx16), {"input": x16}),
         lambda: run_graph(graph16, {"input": x16})], 3)
    result["batch16"] = {"float_host_seconds": float16, "float_run_seconds": float16_run, "fsim_run_seconds": fsim16}
    fsim1 = result["per-channel"]["fsim_run_seconds"]
    for n, imported, run, fsim in ((1, float_seconds, float_run, fsim1), (batch, float16, float16_run, fsim16)):
        print(f"batch {n}: float reference {imported:.2f} s imported and run ({run:.2f} s the run alone), fsim "
              f"{fsim:.2f} s ({fsim / imported:.2f}x; {fsim / run:.2f}x the run alone)", flush=True)

    # the first convolution (3 input channels): im2col on the host + a 1x1 conv on the accelerator (the
    # default), the channels padded to the block, or the whole layer on the host
    first = next(s.name for s in models["per-channel"].steps if s.node.op == "QConv")
    variants = {"im2col": models["per-channel"],
                "pad": compile_model(onnx_bytes, args.config, calibration=calib, unfold=False),
                "host": compile_model(onnx_bytes, args.config, calibration=calib, unfold=False, on_host=[first])}
    result["first_conv"] = {"node": first}
    for variant, model in variants.items():
        runs = [model.run(x, profile=True)[1] for _ in range(3)]
        split = {where: statistics.median(sum(r["seconds"] for r in rows if r["node"].split("/")[0] == first
                                              and r["where"] == where) for rows in runs)
                 for where in ("accelerator", "host")}
        result["first_conv"][variant] = {"fsim_seconds": split["accelerator"], "host_seconds": split["host"]}
        print(f"first conv {first} as {variant:6}: fsim {split['accelerator'] * 1e3:6.1f} ms, "
              f"host {split['host'] * 1e3:6.1f} ms", flush=True)

    if args.rtl:
        cfg = models["per-channel"].config
        peak = cfg.macs_per_cycle
        get_devices("rtl", cfg, args.workers)       # (the harnesses start before the clock does)
        for variant, model in (("im2col", variants["im2col"]), ("pad", variants["pad"]),
                               ("per-tensor", models["per-tensor"])):
            fsim_out = model.run(x)
            (rtl_out, profile), rtl_seconds = timed(lambda: model.run(x, backend="rtl", profile=True))
            cycles = {r["node"]: r["cycles"] for r in profile if r["cycles"]}
            total, macs = sum(cycles.values()), sum(r["macs"] for r in profile)
            uops = {kind: sum(r.get(f"{kind}_uops") or 0 for r in profile) for kind in ("gemm", "alu")}
            equal = all(np.array_equal(fsim_out[k], rtl_out[k]) for k in fsim_out)
            print(f"RTL ({variant}): {total} cycles for the whole model ({rtl_seconds:.1f} s), "
                  f"{macs / total:.1f} MACs/cycle ({macs / total / peak:.1%} of {peak}), first conv {cycles[first]} "
                  f"cycles; GEMM micro-ops {uops['gemm']}, ALU micro-ops {uops['alu']}, the other "
                  f"{total - uops['gemm'] - uops['alu']} cycles waiting or moving data; output "
                  f"{'equals' if equal else 'DIFFERS from'} fsim", flush=True)
            if not equal:
                raise SystemExit("the RTL and fsim disagree")
            if variant == "per-tensor":
                result["per-tensor"] |= {"rtl_total_cycles": total, "rtl_of_peak": macs / total / peak,
                                         "rtl_gemm_uops": uops["gemm"], "rtl_alu_uops": uops["alu"]}
                continue
            result["first_conv"][variant]["rtl_cycles"] = cycles[first]
            if variant == "im2col":
                result["rtl"] = {"seconds": rtl_seconds, "total_cycles": total,
                                 "equals_fsim": equal, "macs": macs, "macs_per_cycle": macs / total,
                                 "of_peak": macs / total / peak, "gemm_uops": uops["gemm"], "alu_uops": uops["alu"],
                                 "layers": {r["node"]: {k: r.get(k) for k in ("cycles", "macs", "gemm_uops", "alu_uops")}
                                            for r in profile if r["where"] == "accelerator"},
                                 "host_nodes": [r["node"] for r in profile if r["where"] == "host"]}
                (side, side_profile), side_seconds = timed(
                    lambda: model.run(x, backend="rtl", profile=True, workers=args.workers))
                same = (all(np.array_equal(side[k], rtl_out[k]) for k in rtl_out)
                        and [r["cycles"] for r in side_profile] == [r["cycles"] for r in profile])
                print(f"RTL ({variant}), {args.workers} layers at once: {side_seconds:.1f} s "
                      f"({rtl_seconds / side_seconds:.2f}x faster); outputs and cycles "
                      f"{'equal' if same else 'DIFFER from'} the run above", flush=True)
                if not same:
                    raise SystemExit("the side-by-side run differs from the one after another")
                result["rtl"] |= {"workers": args.workers, "seconds_side_by_side": side_seconds,
                                  "simulated_cycles_per_second": total / rtl_seconds}

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
