"""The same tuning run on one local process and on a two-worker Dask LocalCluster: same best schedule,
trial rate of each (``benchmarks/results/tuning_runners.json``).

    python benchmarks/tuning_runners.py [--layer C9] [--config small] [--trials 32]
"""

import argparse
import json
import sys
from pathlib import Path

from tilewright.compiler.tune import DaskRunner, LocalRunner, TuningLog, design_hash, parse_layer, tune

RESULTS = Path(__file__).parent / "results"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layer", default="conv2d:1,32,14,14,32,3,1,1")
    ap.add_argument("--config", default="small")
    ap.add_argument("--trials", type=int, default=32)
    args = ap.parse_args(argv)
    task = parse_layer(args.layer, args.config)
    design = design_hash(task.config)
    runs = {}
    for name, make in (("local, 1 process", lambda: LocalRunner(1)), ("Dask LocalCluster, 2 workers",
                                                                       lambda: DaskRunner(workers=2))):
        with make() as runner:
            tune(task, trials=2, runner=runner, log=TuningLog(), design=design)    # (workers start their models)
            # the same batches for both: 8 points whatever the parallelism
            result = tune(task, trials=args.trials, runner=runner, log=TuningLog(), design=design, batch=8)
        runs[name] = {"best_cycles": result.best["cycles"], "best_knobs": result.best["knobs"],
                      "seconds": result.seconds, "trials_per_second": result.measured / result.seconds}
        print(f"{name:30} best {result.best['cycles']} {result.best['knobs']}  "
              f"{runs[name]['trials_per_second']:.2f} trials/s", flush=True)
    one, two = runs.values()
    summary = {"task": task.name, "config": task.config.name, "trials": args.trials, "runs": runs,
               "same_best": one["best_knobs"] == two["best_knobs"],
               "rate_ratio": two["trials_per_second"] / one["trials_per_second"]}
    print(f"same best schedule: {summary['same_best']}; trial rate x{summary['rate_ratio']:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "tuning_runners.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
