"""How fast the tuners find the best schedule: XGBoost cost model vs random search vs a genetic algorithm.

Every valid point of each task below is measured once on the RTL (exact
cycles; ``benchmarks/results/tuning_exhaustive.jsonl``, reused on later
runs), so each task's true optimum is known. Each tuner then runs against
that log as its measurement cache (cycle counts are deterministic: a
replayed measurement is the measurement) for several seeds, without the
heuristic's point as a head start, in batches of 8, and we record the best
cycles after every trial. Reported: the median over seeds of trials to
reach 95 % and 99 % of the optimum per task and tuner, the median over
tasks and seeds, and curves (``tuning.png``).

    python benchmarks/tuning.py [--seeds 5] [--workers 2]
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tilewright.compiler.tune import LocalRunner, TuningLog, design_hash, parse_layer, tune

RESULTS = Path(__file__).parent / "results"

#: (config, layer): board-sized presets (small buffers, 32/64-bit buses), spaces of 100-700 valid points.
TASKS = [("small", "conv2d:1,32,14,14,32,3,1,1"), ("small", "conv2d:1,64,14,14,64,3,2,1"),
         ("small", "conv2d:1,64,28,28,64,1,2,0"), ("small", "conv2d:1,16,28,28,32,3,1,1"),
         ("small", "dense:16,512,256"), ("small", "conv2d:1,32,7,7,64,3,1,1"),
         ("tiny", "conv2d:1,16,16,16,16,3,1,1"), ("tiny", "dense:8,256,64")]

#: name -> (tuner, options). "xgb" starts from the analytic estimate's ranking, "xgb-cold" from random points;
#: "xgb-transfer" trains first on the other tasks' records; "xgb-reg" is "xgb" with the regression objective.
TUNERS = {"xgb": ("xgb", {"objective": "rank"}), "xgb-reg": ("xgb", {"objective": "reg"}),
          "xgb-cold": ("xgb", {"objective": "rank", "prior": False}),
          "xgb-transfer": ("xgb", {"objective": "rank"}), "random": ("random", {}), "ga": ("ga", {})}

BATCH = 8


def exhaustive(tasks, log, workers):
    """Measure every valid point of every task (those already in ``log`` are not measured again)."""
    with LocalRunner(workers) as runner:
        for task in tasks:
            valid = len(task.space().valid())
            started = time.perf_counter()
            result = tune(task, trials=valid, tuner="random", runner=runner, log=log, batch=4 * runner.parallelism)
            print(f"{task.config.name:6} {task.name:40} {valid:4} points: optimum {result.best['cycles']}, "
                  f"heuristic {result.default['cycles']}, {result.measured} measured now, {result.failed} failed "
                  f"({time.perf_counter() - started:.0f} s)", flush=True)


def curve(task, log, design, tuner, options, seed, trials):
    """Best cycles after each trial of one run, its measurements replayed from the exhaustive ``log``."""
    optimum = min(r["cycles"] for r in log.task_records(task, design) if r["cycles"])
    best = []
    tune(task, trials=trials, tuner=tuner, log=TuningLog(), batch=BATCH, seed=seed, design=design,
         include_default=False, target=optimum, tuner_options=options, measure_fn=log.replay(design),
         progress=lambda done, total, cycles, rate: best.append(cycles))
    return best + [best[-1]] * (trials - len(best))       # (stopped at the optimum: flat from there)


def trials_to(curve_, target):
    """The first trial (1-based) whose best is at most ``target`` cycles; None if never."""
    return next((k + 1 for k, c in enumerate(curve_) if c is not None and c <= target), None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", default=str(RESULTS / "tuning.json"))
    ap.add_argument("--plot", default=str(RESULTS / "tuning.png"))
    ap.add_argument("--measure-only", action="store_true", help="only the exhaustive measurements")
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    tasks = [parse_layer(layer, config) for config, layer in TASKS]
    log = TuningLog(RESULTS / "tuning_exhaustive.jsonl")
    exhaustive(tasks, log, args.workers)
    if args.measure_only:
        return 0

    rows, curves = [], {}
    for task in tasks:
        design = design_hash(task.config)
        records = log.task_records(task, design)
        optimum = min(r["cycles"] for r in records if r["cycles"])
        trials = len(task.space().valid())
        others = [r for r in log.records if r["task"] != task.key]
        for name, (tuner, options) in TUNERS.items():
            options = dict(options, history=others) if name == "xgb-transfer" else options
            started = time.perf_counter()
            runs = [curve(task, log, design, tuner, options, seed, trials) for seed in range(args.seeds)]
            curves[(task.key, name)] = runs
            for seed, run in enumerate(runs):
                rows.append({"task": task.name, "config": task.config.name, "tuner": name, "seed": seed,
                             "space": trials, "optimum": optimum,
                             "to_95": trials_to(run, optimum / 0.95), "to_99": trials_to(run, optimum / 0.99),
                             "to_100": trials_to(run, optimum)})
            med = {q: statistics.median(r[q] for r in rows[-len(runs):]) for q in ("to_95", "to_99", "to_100")}
            print(f"{task.config.name:6} {task.name:40} {name:13} trials to 95%: {med['to_95']:6.1f}  99%: "
                  f"{med['to_99']:6.1f}  100%: {med['to_100']:6.1f}  ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    summary = {}
    for name in TUNERS:
        mine = [r for r in rows if r["tuner"] == name]
        summary[name] = {q: statistics.median(r[q] for r in mine) for q in ("to_95", "to_99", "to_100")}
    for name, s in summary.items():
        print(f"median over tasks and seeds, {name:13}: 95% in {s['to_95']:.1f}, 99% in {s['to_99']:.1f}, "
              f"optimum in {s['to_100']:.1f} trials")
    ratio = summary["random"]["to_95"] / summary["xgb"]["to_95"]
    print(f"random / xgb trials to 95%: {ratio:.2f}x; ga / xgb: {summary['ga']['to_95'] / summary['xgb']['to_95']:.2f}x")
    Path(args.json).write_text(json.dumps({"tasks": [{"config": c, "layer": l} for c, l in TASKS], "batch": BATCH,
                                           "seeds": args.seeds, "runs": rows, "summary": summary,
                                           "random_over_xgb_95": ratio}, indent=1))
    _plot(tasks, log, curves, args.plot)
    print(f"wrote {args.json} and {args.plot}")
    return 0


def _plot(tasks, log, curves, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    cols = 4
    fig, axes = plt.subplots(-(-len(tasks) // cols), cols, figsize=(16, 3.4 * -(-len(tasks) // cols)), squeeze=False)
    for ax, task in zip(axes.flat, tasks):
        optimum = min(r["cycles"] for r in log.task_records(task) if r["cycles"])
        for name in TUNERS:
            runs = curves[(task.key, name)]
            length = min(len(r) for r in runs)
            quality = np.array([[optimum / c if c else 0 for c in run[:length]] for run in runs])
            ax.plot(np.arange(1, length + 1), np.median(quality, axis=0), label=name,
                    linestyle="--" if name in ("xgb-reg", "xgb-cold") else "-")
        ax.set_xscale("log")
        ax.set_ylim(0.5, 1.01)
        ax.set_title(f"{task.config.name}: {task.name}", fontsize=8)
        ax.set_xlabel("trials")
        ax.set_ylabel("optimum / best so far")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
