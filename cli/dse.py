"""``tilewright dse``: the co-design search (:mod:`tilewright.fpga.codesign`)."""

import sys
import warnings
from pathlib import Path

__all__ = ["add_parser"]


def cmd_dse(args):
    from tilewright.compiler.tune import RunnerError, make_runner
    from tilewright.fpga.boards import BoardError, get_board
    from tilewright.fpga.codesign import OUTPUTS, SearchError, search

    from . import CliError, _model_errors
    try:
        board = get_board(args.board)
        board.dram_timing(args.freq)        # (a clock past the board's SDRAM: said before any worker starts)
    except BoardError as e:
        raise CliError(str(e)) from None
    try:
        model_bytes = Path(args.model).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read model {args.model}: {e.strerror or e}") from None
    seeds = args.seeds or [1, 2, 3]
    if len(set(seeds)) != len(seeds):
        raise CliError("give each --seeds seed once")
    if args.local and args.scheduler:
        raise CliError("--local runs on this machine's processes, --scheduler on a Dask cluster: give one")
    try:
        runner = make_runner(args.scheduler, args.workers, dask=not args.local)
    except RunnerError as e:
        raise CliError(str(e)) from None
    # (Dask warns of each measurement's 47 MB model, a known cost of sending it with every job: docs/codesign.md)
    warnings.filterwarnings("ignore", message="Sending large graph")
    with runner:
        try:
            summary = search(model_bytes, board.name, args.output, freq_mhz=args.freq, runner=runner,
                             budget_hours=args.budget_hours, limit=args.candidates, finalists=args.finalists,
                             trials=args.trials, place=not args.no_place, place_freq_mhz=args.place_freq,
                             seeds=seeds, seed=args.seed, progress=lambda line: print(line, flush=True))
        except (SearchError, BoardError, RunnerError, *_model_errors()) as e:
            # (BoardError: a place-and-route clock past the board's; RunnerError: a cluster left without workers)
            raise CliError(str(e)) from None
        except OSError as e:
            raise CliError(f"{getattr(e, 'filename', None) or args.output}: {e.strerror or e}") from None
        except KeyboardInterrupt:
            print(f"interrupted: {Path(args.output) / 'log.jsonl'} keeps every finished result; the same command "
                  f"resumes the search", file=sys.stderr, flush=True)
            return 130
    for name in OUTPUTS:
        if (Path(args.output) / name).exists():
            print(f"wrote {Path(args.output) / name}")
    placed = not args.no_place and summary["finalists"]
    return 0 if summary["winner"] and (summary["winner_met_timing"] or not placed) else 1


def add_parser(sub, positive_int, non_negative_int, positive_float):
    sp = sub.add_parser("dse", help="co-design: search accelerator configs for a model on a board (synthesis, "
                                    "RTL cycles with the board's DRAM, tuned schedules, place and route)")
    sp.add_argument("model", help="ONNX model file")
    sp.add_argument("--board", required=True, help="a board with a DRAM model (tilewright fpga boards)")
    sp.add_argument("--freq", type=positive_float, help="accelerator clock in MHz (default: the board's)")
    sp.add_argument("-o", "--output", required=True,
                    help="folder for the log (resumed if there), the front, the winner's TOML and model")
    sp.add_argument("--candidates", type=positive_int,
                    help="cost at most this many configs, the preset included (default: until no step gains)")
    sp.add_argument("--budget-hours", type=positive_float, help="start no new job after this")
    sp.add_argument("--finalists", type=non_negative_int, default=1,
                    help="the fastest configs tuned and placed, besides the preset (default 1); the climb's steps "
                         "are placed too while one could win")
    sp.add_argument("--trials", type=non_negative_int, default=16,
                    help="schedules measured per layer of each finalist (default 16; 0: the compiler's own)")
    sp.add_argument("--no-place", action="store_true", help="no place and route: latency at --freq only")
    sp.add_argument("--place-freq", type=positive_float, metavar="MHZ",
                    help="the clock configs are placed and routed for (default --freq)")
    sp.add_argument("--seeds", type=positive_int, nargs="+", metavar="SEED",
                    help="place-and-route seeds, tried in turn until one meets the clock (default 1 2 3)")
    sp.add_argument("--scheduler", metavar="ADDR", help="a Dask scheduler (tcp://HOST:8786) to run on")
    sp.add_argument("--local", action="store_true",
                    help="run on local worker processes, not a Dask LocalCluster (the default)")
    sp.add_argument("--workers", type=positive_int, help="workers on this machine (default: one per core)")
    sp.add_argument("--seed", type=non_negative_int, default=0)
    sp.set_defaults(func=cmd_dse)
