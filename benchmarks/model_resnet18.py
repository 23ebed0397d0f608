"""ResNet-18 (torchvision's architecture, 224×224, random weights) as a whole model.

    .venv/bin/python benchmarks/model_resnet18.py [--rtl] [--json benchmarks/results/resnet18_model.json]

Measures, in one run: import + quantize + compile time, fsim run time
(median of 3) and output SQNR against the float model, for per-channel and
per-tensor weights; the first convolution (3 input channels) as im2col +
1×1 conv, with its channels padded to the block, or on the host; with
``--rtl``, the whole model on the cycle-accurate RTL for the first two and
for per-tensor weights (cycles per layer, output equal to fsim).
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
from tilewright.runtime.model import compile_model


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
    args = ap.parse_args()

    onnx_bytes = resnet18().SerializeToString()
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((4, 3, 224, 224)).astype(np.float32)
    x = rng.standard_normal((1, 3, 224, 224)).astype(np.float32)
    reference, float_seconds = timed(lambda: run_graph(load_onnx(onnx_bytes), {"input": x}), 3)
    name = next(iter(reference))
    result = {"model": "resnet18 224x224 random weights", "config": args.config, "calibration_samples": len(calib),
              "float_host_seconds": float_seconds}
    models = {}
    for mode in ("per-channel", "per-tensor"):
        model, compile_seconds = timed(lambda: compile_model(onnx_bytes, args.config, calibration=calib,
                                                             per_channel=mode == "per-channel"))
        out, fsim_seconds = timed(lambda: model.run(x), 3)
        models[mode] = model
        result[mode] = {"compile_seconds": compile_seconds, "fsim_run_seconds": fsim_seconds,
                        "sqnr_db": sqnr_db(reference[name], out[name]),
                        "accelerator_nodes": sum(s.where == "accelerator" for s in model.steps)}
        print(f"{mode:12} compile {compile_seconds:5.2f} s   fsim run {fsim_seconds:5.2f} s   "
              f"SQNR {result[mode]['sqnr_db']:5.1f} dB", flush=True)

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
        for variant, model in (("im2col", variants["im2col"]), ("pad", variants["pad"]),
                               ("per-tensor", models["per-tensor"])):
            fsim_out = model.run(x)
            (rtl_out, profile), rtl_seconds = timed(lambda: model.run(x, backend="rtl", profile=True))
            cycles = {r["node"]: r["cycles"] for r in profile if r["cycles"]}
            equal = all(np.array_equal(fsim_out[k], rtl_out[k]) for k in fsim_out)
            print(f"RTL ({variant}): {sum(cycles.values())} cycles for the whole model ({rtl_seconds:.0f} s), first "
                  f"conv {cycles[first]} cycles; output {'equals' if equal else 'DIFFERS from'} fsim", flush=True)
            if not equal:
                raise SystemExit("the RTL and fsim disagree")
            if variant == "per-tensor":
                result["per-tensor"]["rtl_total_cycles"] = sum(cycles.values())
                continue
            result["first_conv"][variant]["rtl_cycles"] = cycles[first]
            if variant == "im2col":
                result["rtl"] = {"seconds": rtl_seconds, "total_cycles": sum(cycles.values()), "cycles": cycles,
                                 "equals_fsim": equal, "macs": sum(r["macs"] for r in profile)}

    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
