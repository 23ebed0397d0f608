"""One local process against a two-worker Dask LocalCluster, on the same layer
(``benchmarks/results/tuning_runners.json``):

* trial rate: the random tuner with one seed, so both measure the same points in the same batches;
* best schedule: the XGBoost tuner, ``--trials`` points on each.

    python benchmarks/tuning_runners.py [--layer C11] [--config default] [--trials 32]
"""

import argparse
import json
import sys
from pathlib import Path

from tilewright.compiler.tune import DaskRunner, LocalRunner, TuningLog, design_hash, parse_layer, tune

RESULTS = Path(__file__).parent / "results"
BATCH = 8


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="C11")
    ap.add_argument("--config", default="default")
    ap.add_argument("--trials", type=int, default=32)
    args = ap.parse_args(argv)
    task = parse_layer(args.layer, args.config)
    design = design_hash(task.config)
    runs = {}
    for name, make in (("local, 1 process", lambda: LocalRunner(1)),
                       ("Dask LocalCluster, 2 workers", lambda: DaskRunner(workers=2))):
        with make() as runner:
            tune(task, trials=runner.parallelism, runner=runner, log=TuningLog(), design=design)  # (warm the workers)
            timed = tune(task, trials=args.trials, tuner="random", runner=runner, log=TuningLog(), design=design,
                         batch=BATCH, include_default=False)
            tuned = tune(task, trials=args.trials, runner=runner, log=TuningLog(), design=design, batch=BATCH)
        runs[name] = {"random_trials_per_second": timed.measured / timed.seconds,
                      "xgb_best_cycles": tuned.best["cycles"], "xgb_best_knobs": tuned.best["knobs"],
                      "xgb_trials_per_second": tuned.measured / tuned.seconds}
        print(f"{name:30} {runs[name]['random_trials_per_second']:.3f} trials/s (random, same points); xgb best "
              f"{tuned.best['cycles']} {tuned.best['knobs']} ({runs[name]['xgb_trials_per_second']:.3f} trials/s)",
              flush=True)
    one, two = runs.values()
    summary = {"task": task.name, "config": task.config.name, "trials": args.trials, "batch": BATCH, "runs": runs,
               "same_best": one["xgb_best_knobs"] == two["xgb_best_knobs"],
               "rate_ratio": two["random_trials_per_second"] / one["random_trials_per_second"]}
    print(f"same best schedule: {summary['same_best']}; trial rate x{summary['rate_ratio']:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tuning_runners.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
