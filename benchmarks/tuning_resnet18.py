"""Tuned ResNet-18 conv layers (C2-C11) against the heuristic's schedules and the roofline, on the RTL.

For each config: every layer is tuned (XGBoost tuner, ``--trials`` points each, the log in
``benchmarks/results/tuning_resnet18_<config>.jsonl``, resumed on reruns), then the benchmark runs
every layer with the heuristic's schedule and with the tuned one, each checked against numpy (and
fsim): per layer the cycles, the speedup and cycles / roofline bound.

    python benchmarks/tuning_resnet18.py [--config default small] [--trials 48] [--workers 2]
"""

import argparse
import json
import sys
from pathlib import Path

from tilewright.compiler.tune import LocalRunner, TuningLog, design_hash, parse_layer, tune
from tilewright.config import load_config
from tilewright.runtime.bench import RESNET18, bench_resnet18

RESULTS = Path(__file__).parent / "results"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", nargs="+", default=["default", "small"])
    ap.add_argument("--trials", type=int, default=48)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary = {}
    for config in args.config:
        cfg = load_config(config)
        path = RESULTS / f"tuning_resnet18_{cfg.name}.jsonl"
        log, design = TuningLog(path), design_hash(cfg)
        with LocalRunner(args.workers) as runner:
            for name, *_ in RESNET18:
                task = parse_layer(name, cfg)
                result = tune(task, trials=args.trials, runner=runner, log=log, design=design,
                              tuner_options={"history": log.records})
                print(f"{cfg.name:8} {name:4} tuned {result.best['cycles']:>9} heuristic {result.default['cycles']:>9} "
                      f"({result.speedup:.3f}x; {result.measured} measured, {result.seconds:.0f} s)", flush=True)
        heuristic = bench_resnet18("rtl", cfg, progress=lambda line: None)
        tuned = bench_resnet18("rtl", cfg, tuning_log=path, progress=lambda line: None)
        rows = []
        for h, t in zip(heuristic["layers"], tuned["layers"]):
            rows.append({"layer": h["layer"], "shape": h["shape"], "heuristic_cycles": h["cycles"],
                         "tuned_cycles": t["cycles"], "speedup": h["cycles"] / t["cycles"],
                         "roofline_cycles": t["roofline_cycles"], "heuristic_ratio": h["ratio"],
                         "tuned_ratio": t["ratio"], "tiles": t["tiles"]})
            print(f"{cfg.name:8} {h['layer']:4} {h['shape']:22} heuristic {h['cycles']:>9} (x{h['ratio']:.3f} of "
                  f"roofline)  tuned {t['cycles']:>9} (x{t['ratio']:.3f})  speedup {rows[-1]['speedup']:.3f}",
                  flush=True)
        summary[cfg.name] = {"trials": args.trials, "layers": rows,
                             "worst_tuned_ratio": max(r["tuned_ratio"] for r in rows),
                             "worst_heuristic_ratio": max(r["heuristic_ratio"] for r in rows)}
        print(f"{cfg.name}: worst cycles / roofline: heuristic {summary[cfg.name]['worst_heuristic_ratio']:.3f}, "
              f"tuned {summary[cfg.name]['worst_tuned_ratio']:.3f}", flush=True)
    out = RESULTS / "tuning_resnet18.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    out.write_text(json.dumps(previous | summary, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
