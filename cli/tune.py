"""``tilewright tune``: tune the schedules of a model's layers (or of given layers) in RTL cycles."""

from pathlib import Path

from tilewright.cli import CliError, _config, _memory, _model_errors

__all__ = ["add_parser"]


def add_parser(sub, with_config, positive_int, non_negative_int):
    sp = with_config(sub.add_parser(
        "tune", help="tune layer schedules in RTL cycles (XGBoost cost model; local processes or Dask)"), "default")
    sp.add_argument("model", nargs="?", help="ONNX model whose accelerator layers to tune")
    sp.add_argument("--layer", action="append", metavar="SPEC",
                    help="a layer instead of a model: conv2d:N,C,H,W,O,K,S,P, dense:N,K,M or a ResNet-18 layer "
                         "(C2..C11); repeatable")
    sp.add_argument("--trials", type=positive_int, default=64, help="points measured per layer (default 64)")
    sp.add_argument("--log", default="tuning.jsonl", help="tuning log (JSON lines), appended; also the cache of "
                                                          "measurements (default tuning.jsonl)")
    sp.add_argument("--tuner", choices=["xgb", "random", "ga"], default="xgb")
    sp.add_argument("--scheduler", metavar="ADDR", help="a Dask scheduler (tcp://HOST:8786) to measure on")
    sp.add_argument("--dask", action="store_true", help="measure on a Dask LocalCluster on this machine")
    sp.add_argument("--workers", type=positive_int, help="local worker processes (default: one per core)")
    sp.add_argument("--seed", type=non_negative_int, default=0)
    sp.add_argument("--memory", metavar="BOARD[@MHZ]",
                    help="measure with the RTL's DRAM answering as BOARD's SDRAM at MHZ (default: the board's "
                         "clock), not a bus beat every cycle; compile with the same --memory")
    sp.set_defaults(func=cmd_tune)


def _tasks(args, cfg, memory):
    """The distinct tasks of ``--layer``s, or of the model's accelerator layers."""
    from tilewright.compiler.tune import LayerSpecError, model_tasks, parse_layer
    if bool(args.model) == bool(args.layer):
        raise CliError("give a model or --layer SPEC (not both)")
    if args.layer:
        try:
            tasks = [parse_layer(text, cfg, memory) for text in args.layer]
        except LayerSpecError as e:
            raise CliError(str(e)) from None
    else:
        from tilewright.runtime.model import compile_model
        if not Path(args.model).is_file():
            raise CliError(f"{args.model}: no such file")
        print(f"compiling {args.model} for config {cfg.name} to find its layers", flush=True)
        return model_tasks(compile_model(Path(args.model), cfg), memory)
    unique = {}
    for task in tasks:
        unique.setdefault(task.key, task)
    return list(unique.values())


def cmd_tune(args):
    from tilewright.compiler.tune import RunnerError, TuningLog, TuningLogError, design_hash, make_runner
    cfg = _config(args, compiles=True)
    try:
        log = TuningLog(args.log)
    except TuningLogError as e:
        raise CliError(str(e)) from None
    memory = _memory(args)
    try:
        tasks = _tasks(args, cfg, memory)
        print(f"{len(tasks)} layer(s) to tune on {cfg.name} ({cfg.tag}), {args.trials} trials each, "
              f"{args.tuner} tuner; log {args.log}", flush=True)
        design = design_hash(cfg, memory)
        runner = make_runner(args.scheduler, args.workers, dask=args.dask)
    except (RunnerError, *_model_errors()) as e:
        raise CliError(str(e)) from None
    results = []
    with runner:
        print(f"measuring on {runner.describe()}", flush=True)
        try:
            _tune_each(args, tasks, runner, log, design, results)
        except RunnerError as e:        # (a Dask cluster left without workers: what was measured is in the log)
            raise CliError(str(e)) from None
    print(f"use it: tilewright compile MODEL.onnx --config {args.config} --tuning-log {args.log}"
          + (f" --memory {args.memory}" if args.memory else "") + " -o MODEL.twm")
    return 0 if all(r.best for r in results) else 1


def _tune_each(args, tasks, runner, log, design, results):
    """Tune each of ``tasks`` in turn, saying how each went; ``results`` gets each TuneResult."""
    from tilewright.compiler.tune import tune
    from tilewright.runtime.progress import Progress
    for n, task in enumerate(tasks, 1):
        options = {"history": log.records} if args.tuner == "xgb" else None
        with Progress(args.trials, f"[{n}/{len(tasks)}] {task.name}") as bar:
            def progress(done, total, best, rate):
                bar.advance(f"best {best or '-'} cycles, {rate:.1f} trials/s")
            result = tune(task, trials=args.trials, tuner=args.tuner, runner=runner, log=log, seed=args.seed,
                          design=design, progress=progress, tuner_options=options)
        results.append(result)
        best, default = result.best, result.default
        if best is None:
            print(f"  no point of {task.name} ran: {result.first_error or 'nothing to measure'}", flush=True)
            continue
        line = f"  best {best['cycles']} cycles {best['knobs']}"
        if default and default["cycles"]:
            line += f"; heuristic {default['cycles']} ({result.speedup:.3f}x)"
        print(line + f"; {result.measured} measured, {result.cached} from the log, {result.failed} failed, "
                     f"{result.seconds:.0f} s", flush=True)
