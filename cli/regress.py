"""``tilewright regress``: the hardware regression for a config, with JUnit XML for CI."""

from pathlib import Path

from tilewright.cli import CliError, _config, _output_path, _write

__all__ = ["add_parser"]


def add_parser(sub, with_config, positive_int, non_negative_int):
    sp = with_config(sub.add_parser(
        "regress", help="build the RTL for a config and run random programs (fsim vs RTL), operators, a model and "
                        "the formal proofs; JUnit XML; on a Dask cluster"))
    sp.add_argument("--programs", type=positive_int, default=200, help="random programs (default 200)")
    sp.add_argument("--seed", type=non_negative_int, default=0, help="first program seed (default 0)")
    sp.add_argument("--batch", type=positive_int, default=20,
                    help="programs per unit of work (one RTL run in one worker; default 20)")
    sp.add_argument("--operators", type=non_negative_int, default=8,
                    help="random conv2d/dense cases on the RTL (default 8)")
    sp.add_argument("--no-model", action="store_true", help="skip the digits model")
    sp.add_argument("--no-formal", action="store_true", help="skip the formal proofs")
    sp.add_argument("--junit", metavar="FILE", help="write the results as JUnit XML")
    sp.add_argument("--scheduler", metavar="ADDR", help="a Dask scheduler (tcp://HOST:8786) to run on")
    sp.add_argument("--workers", type=positive_int,
                    help="without --scheduler: a Dask LocalCluster of this many processes (default: one per core); "
                         "1 runs everything in this process")
    sp.add_argument("--repro", metavar="DIR", default="regress-repro",
                    help="where a mismatching program's reproducer goes (default regress-repro/)")
    sp.set_defaults(func=cmd_regress)


def _runner(args):
    import os

    from tilewright.compiler.tune.runner import DaskRunner, RunnerError
    workers = args.workers or os.cpu_count() or 1
    if not args.scheduler and workers == 1:
        return None
    try:
        return DaskRunner(args.scheduler, None if args.scheduler else workers)
    except RunnerError as e:
        raise CliError(str(e)) from None


def cmd_regress(args):
    import tempfile

    from tilewright.sim.regress import RegressionPlan, junit_xml, run_regression, write_reproducer
    cfg = _config(args, compiles=True)
    if args.junit:
        _output_path(args.junit, args.config)
    plan = RegressionPlan(programs=args.programs, seed=args.seed, batch=args.batch, operators=args.operators,
                          model=not args.no_model, formal=not args.no_formal)
    print(f"regress: config {cfg.name} ({cfg.tag}, fingerprint {cfg.fingerprint})", flush=True)
    from tilewright.compiler.tune.runner import RunnerError
    runner = _runner(args)
    try:
        with tempfile.TemporaryDirectory(prefix="tw-regress-") as workdir:
            result = run_regression(cfg, plan, runner=runner, workdir=workdir,
                                    log=lambda line: print("  " + line, flush=True))
    except RunnerError as e:        # (a Dask cluster left without workers)
        raise CliError(str(e)) from None
    finally:
        if runner is not None:
            runner.close()

    for case in result.failed:
        if case.reproducer:
            folder = write_reproducer(Path(args.repro) / f"seed-{case.reproducer['seed']}", cfg, case)
            print(f"  reproducer: {folder}/ ({case.name}: {case.failure})")
    if args.junit:
        _write(args.junit, junit_xml(result.cases, name=f"tilewright.regress.{cfg.name}", seconds=result.seconds))
        print(f"  wrote {args.junit}")
    print(f"{'FAIL' if result.failed else 'PASS'}: {len(result.cases) - len(result.failed)} of {len(result.cases)} "
          f"cases passed in {result.seconds:.0f} s; {result.programs} random programs at "
          f"{result.programs_per_second:.1f} programs/s")
    return 1 if result.failed else 0
