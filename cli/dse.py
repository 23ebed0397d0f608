"""``tilewright dse``: the co-design search (:mod:`tilewright.fpga.codesign`)."""

from pathlib import Path

__all__ = ["add_parser"]


def cmd_dse(args):
    from tilewright.compiler.tune import RunnerError, make_runner
    from tilewright.fpga.boards import BoardError, get_board
    from tilewright.fpga.codesign import SearchError, search

    from . import CliError, _model_errors
    try:
        board = get_board(args.board)
    except BoardError as e:
        raise CliError(str(e)) from None
    try:
        model_bytes = Path(args.model).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read model {args.model}: {e.strerror or e}") from None
    try:
        runner = make_runner(args.scheduler, args.workers, dask=args.dask)
    except RunnerError as e:
        raise CliError(str(e)) from None
    with runner:
        try:
            summary = search(model_bytes, board.name, args.output, freq_mhz=args.freq, runner=runner,
                             budget_hours=args.budget_hours, limit=args.candidates, seed=args.seed,
                             progress=lambda line: print(line, flush=True))
        except (SearchError, BoardError, *_model_errors()) as e:      # (BoardError: no DRAM model, a clock past it)
            raise CliError(str(e)) from None
        except OSError as e:
            raise CliError(f"{getattr(e, 'filename', None) or args.output}: {e.strerror or e}") from None
    for name in ("front.json", "front.png", "winner.toml", "winner.twm"):
        if (Path(args.output) / name).exists():
            print(f"wrote {Path(args.output) / name}")
    return 0 if summary["winner"] else 1


def add_parser(sub, positive_int, non_negative_int, positive_float):
    sp = sub.add_parser("dse", help="co-design: search accelerator configs for a model on a board (synthesis, "
                                    "RTL cycles with the board's DRAM)")
    sp.add_argument("model", help="ONNX model file")
    sp.add_argument("--board", required=True, help="a board with a DRAM model (tilewright fpga boards)")
    sp.add_argument("--freq", type=positive_float, help="accelerator clock in MHz (default: the board's)")
    sp.add_argument("-o", "--output", required=True,
                    help="folder for the log (resumed if there), the front, the winner's TOML and model")
    sp.add_argument("--candidates", type=positive_int, help="at most this many configs (the board's preset and a "
                                                            "seeded sample of the others; default: all)")
    sp.add_argument("--budget-hours", type=positive_float, help="start no new synthesis or measurement after this")
    sp.add_argument("--scheduler", metavar="ADDR", help="a Dask scheduler (tcp://HOST:8786) to run on")
    sp.add_argument("--dask", action="store_true", help="run on a Dask LocalCluster on this machine")
    sp.add_argument("--workers", type=positive_int, help="local worker processes (default: one per core)")
    sp.add_argument("--seed", type=non_negative_int, default=0)
    sp.set_defaults(func=cmd_dse)
