"""``tilewright fpga``: boards, bitstream builds and reports, programming, the simulated board."""

import json
import shutil
import subprocess
from pathlib import Path

__all__ = ["add_parser", "report_table", "DEFAULT_BUILD_ROOT"]

DEFAULT_BUILD_ROOT = Path("build/fpga")

#: openFPGALoader's names for the boards.
_LOADER_BOARDS = {"ulx3s-85f": "ulx3s", "ulx3s-45f": "ulx3s", "icebreaker": "icebreaker", "tangnano9k": "tangnano9k"}


def _error(message):
    from . import CliError
    return CliError(message)


def _board(name):
    from tilewright.fpga.boards import BoardError, get_board
    try:
        return get_board(name)
    except BoardError as e:
        raise _error(str(e)) from None


def _board_config(args, board):
    from tilewright.config import ConfigError, load_config
    try:
        return load_config(args.config or board.config)
    except ConfigError as e:
        raise _error(str(e)) from None


def cmd_boards(args):
    from tilewright.fpga.boards import BOARDS
    for b in BOARDS.values():
        print(f"{b.name:12} {b.title:40} preset {b.config:6} {b.freq_mhz:g} MHz, "
              f"{b.mem_bytes // 1024} KiB memory, UART {b.baud} baud")


def cmd_build(args):
    from tilewright.fpga.boards import BoardError
    from tilewright.fpga.build import BuildError, build_bitstreams, seed_spread, summary, timing_error, worst_fmax
    board = _board(args.board)
    if args.link_test and args.config:
        raise _error("--link-test builds the SoC without an accelerator: leave out --config")
    if args.output and len(args.seed) > 1:
        raise _error("-o names one build's folder: leave it out with several seeds (each gets its own)")
    cfg = None if args.link_test else _board_config(args, board)
    try:
        reports = build_bitstreams(board.name, config=cfg, freq_mhz=args.freq, seeds=args.seed,
                                   out_dirs=[args.output] if args.output else None, jobs=args.jobs,
                                   progress=lambda line: print(line, flush=True), link_test=args.link_test,
                                   place=not args.synth_only, until_met=args.until_met)
    except (BuildError, BoardError) as e:
        raise _error(str(e)) from None
    for report in reports:
        print(f"seed {report['seed']}: {report['error']}" if report.get("error") else
              summary(report) + (f" (seed {report['seed']})" if len(reports) > 1 else ""))
    spread = seed_spread(reports)
    if spread:
        print(spread)
    if args.synth_only:
        print(f"fits {board.title} (synthesis only: no place and route, no bitstream)")
        return
    failed = [r for r in reports if r.get("error") or not r["timing_met"]]
    if args.until_met and len(failed) < len(reports):
        best = max((r for r in reports if r not in failed), key=worst_fmax)
        print(f"timing met at {best['clock_mhz']:g} MHz with seed {best['seed']} of {len(reports)} placed: "
              f"{best['bitstream']}")
        return
    if failed:
        first = failed[0]
        raise _error((first["error"] if first.get("error") else timing_error(first))
                     + (f"; {len(failed)} of {len(reports)} seeds failed" if len(reports) > 1 else ""))


def report_table(reports):
    """Markdown table of build reports (one row per board × config × clock × seed), and the Fmax spread
    of each build made with several seeds."""
    from tilewright.fpga.build import seed_spread, worst_fmax
    rows = ["| board | config | clock MHz | Fmax MHz | timing | LUT | FF | DSP | BRAM | seed | P&R s |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(reports, key=lambda r: (r["board"], r["config"], r["clock_mhz"], r["seed"])):
        fmax = worst_fmax(r)
        use = r.get("synthesis", {})

        def cell(kind):
            v = use.get(kind)
            return f"{v['used']}/{v['available']}" if v and v.get("available") else "–"
        timing = "met" if r.get("timing_met") else ("not met" if fmax else "no P&R")
        rows.append(f"| {r['board']} | {r['config']} | {r['clock_mhz']:g} | {f'{fmax:.1f}' if fmax else '–'} | "
                    f"{timing} | {cell('LUT')} | {cell('FF')} | {cell('DSP')} | {cell('BRAM')} | {r['seed']} | "
                    f"{r['seconds'].get('place_and_route', 0):.0f} |")
    groups = {}
    for r in reports:
        groups.setdefault((r["board"], r["config"], r["clock_mhz"]), []).append(r)
    spreads = [f"* {board} {config} at {clock:g} MHz: {seed_spread(group)}"
               for (board, config, clock), group in sorted(groups.items()) if seed_spread(group)]
    return "\n".join(rows + ([""] + spreads if spreads else [])) + "\n"


def _reports(paths):
    from tilewright.fpga.build import REPORT_NAME
    found = []
    for path in paths:
        path = Path(path)
        files = [path] if path.is_file() else sorted(path.glob(f"**/{REPORT_NAME}"))
        for f in files:
            try:
                found.append(json.loads(f.read_text()))
            except (OSError, ValueError) as e:
                raise _error(f"cannot read build report {f}: {e}") from None
    return found


def cmd_report(args):
    reports = _reports(args.paths or [DEFAULT_BUILD_ROOT])
    if not reports:
        raise _error(f"no build reports under {', '.join(map(str, args.paths or [DEFAULT_BUILD_ROOT]))}; "
                     f"run `tilewright fpga build` first")
    print(report_table(reports), end="")
    if args.record:
        from .docgen import FPGA_REPORTS
        FPGA_REPORTS.mkdir(parents=True, exist_ok=True)
        for r in reports:
            path = FPGA_REPORTS / f"{r['board']}-{r['config']}-{r['clock_mhz']:g}MHz-seed{r['seed']}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(r, indent=2) + "\n")
            tmp.replace(path)
            print(f"recorded {path}")
        print("run `tilewright docs` to rewrite the table in docs/fpga.md")


def cmd_program(args):
    board = _board(args.board)
    bitstream = Path(args.bitstream)
    if not bitstream.is_file():
        raise _error(f"no bitstream at {bitstream}")
    loader = shutil.which("openFPGALoader")
    if loader is None:
        raise _error("openFPGALoader is not installed: `apt-get install openfpgaloader` (Debian 12 and later) "
                     "or see https://github.com/trabucayre/openFPGALoader")
    proc = subprocess.run([loader, "-b", _LOADER_BOARDS[board.name], str(bitstream)])
    if proc.returncode != 0:
        raise _error(f"openFPGALoader failed (exit {proc.returncode})")


def cmd_simulate(args):
    from tilewright.fpga.simulated import SimulatedBoard
    from tilewright.sim.rtl import RtlError
    board = _board(args.board)
    cfg = _board_config(args, board)
    print(f"building the simulated {board.title} (config {cfg.name}, {board.mem_bytes // 1024} KiB memory; "
          f"the first build takes a minute)", flush=True)
    try:
        with SimulatedBoard(cfg, mem_bytes=board.mem_bytes, clock_hz=int(board.freq_mhz * 1e6),
                            mem_options=board.memory_options) as sim:
            print(f"port {sim.port}", flush=True)
            print(f"use it with: tilewright run MODEL.twm -i INPUT.npy --backend fpga --port {sim.port} "
                  f"(models compiled with --config {cfg.name}); Ctrl-C stops", flush=True)
            try:
                sim.proc.wait()
            except KeyboardInterrupt:
                return 0
    except RtlError as e:
        raise _error(str(e)) from None
    raise _error(f"the simulated board exited (code {sim.proc.returncode})")


def cmd_check(args):
    """INFO, then a pattern written to the board's memory and read back."""
    import random
    import time

    from tilewright.fpga import protocol
    from tilewright.fpga.link import Link, LinkError
    if args.bytes < 1 or args.timeout <= 0 or (args.baud is not None and args.baud <= 0):
        raise _error("--bytes, --timeout and --baud take positive numbers")
    baud = args.baud or (_board(args.board).baud if args.board else protocol.DEFAULT_BAUD)
    try:
        with Link(args.port, baud=baud, timeout=args.timeout) as link:
            info = link.info()
            kind = ("the link test (no accelerator)" if info.fingerprint == protocol.LINK_TEST_FINGERPRINT
                    else f"an accelerator, config fingerprint {info.fingerprint}")
            print(f"{args.port}: protocol version {info.version}, {kind}, {info.mem_bytes} bytes of memory, "
                  f"clock {info.clock_hz / 1e6:g} MHz", flush=True)
            nbytes = min(args.bytes, info.mem_bytes)
            pattern = random.Random(args.seed).randbytes(nbytes)
            started = time.monotonic()
            link.write_memory(0, pattern)
            back = link.read_memory(0, nbytes)
            seconds = time.monotonic() - started
    except LinkError as e:
        raise _error(str(e)) from None
    if back != pattern:
        bad = next(i for i in range(nbytes) if back[i] != pattern[i])
        raise _error(f"memory check failed: byte {bad} was written {pattern[bad]:#04x} and read {back[bad]:#04x}")
    print(f"memory: {nbytes} bytes written and read back intact ({2 * nbytes / seconds / 1024:.1f} KiB/s "
          f"over the link)")


def cmd_paths(args):
    from tilewright.fpga.paths import estimate_paths, group_endpoints, group_paths, routed_endpoints, routed_paths
    folder = Path(args.build)
    netlist_path = folder / "top.json" if folder.is_dir() else folder
    report_path = netlist_path.with_name("report.json")
    routed_path = netlist_path.with_name("pnr_report.json")
    try:
        report = json.loads(report_path.read_text()) if report_path.is_file() else {}
        routed = (json.loads(routed_path.read_text()) if routed_path.is_file() and not args.estimate else {})
    except ValueError as e:
        raise _error(f"cannot read {report_path} or {routed_path}: {e}") from None
    if "detailed_net_timings" not in routed and not netlist_path.is_file():
        raise _error(f"no synthesised netlist at {netlist_path}: give a build folder "
                     f"(`tilewright fpga build ... --synth-only -o DIR` makes one in a minute or two)")
    freq = args.freq or report.get("clock_mhz")
    if not freq:
        raise _error("give --freq MHZ (no report.json beside the netlist says the build's clock)")
    period = 1000.0 / freq
    def ecp5_netlist():
        """The build's netlist, or None where it is not an ECP5's (the estimate knows the ECP5's cells only)."""
        try:
            netlist = json.loads(netlist_path.read_text())
        except ValueError as e:
            raise _error(f"cannot read {netlist_path}: {e}") from None
        ecp5 = "top" in netlist.get("modules", {}) and any(
            c["type"] == "TRELLIS_FF" for c in netlist["modules"]["top"]["cells"].values())
        return netlist if ecp5 else None

    if "detailed_net_timings" in routed:
        # Grouped by start and end register where the ECP5 netlist gives the starts (nextpnr's report has none).
        netlist = ecp5_netlist() if not args.units and netlist_path.is_file() else None
        by_start = netlist is not None
        endpoints = routed_paths(routed, netlist, hop_ns=args.hop) if by_start else routed_endpoints(routed)
        what = f"later than {period:.2f} ns ({freq:g} MHz) after place and route (nextpnr's arrivals"
        what += f", seed {report['seed']}" if "seed" in report else ""
        what += "; starts estimated from the netlist)" if by_start else ")"
    else:
        netlist = ecp5_netlist()
        if netlist is None:
            raise _error(f"{netlist_path} is not an ECP5 netlist (the estimate knows the ECP5's cells only)")
        endpoints = estimate_paths(netlist, hop_ns=args.hop)
        what = f"estimated later than {period:.2f} ns ({freq:g} MHz, {args.hop} ns per net)"
    if not endpoints:
        raise _error(f"no timed endpoints in {routed_path if routed else netlist_path}")
    if args.units or "path" not in endpoints[0]:
        groups = group_endpoints(endpoints, period, depth=args.units)
    else:
        groups = [(ns, n, f"{start} -> {end}") for ns, n, start, end in group_paths(endpoints, period)]
    if args.units:
        groups.sort(key=lambda g: -g[1])
    late = sum(n for _, n, _ in groups)
    # (the total lateness, like a timing tool's total negative slack: steadier across seeds than the worst path)
    total = sum(e["ns"] - period for e in endpoints if e["ns"] > period)
    print(f"{late} of {len(endpoints)} endpoints {what}; the latest {endpoints[0]['ns']} ns, "
          f"{total:.0f} ns late in all")
    for ns, count, name in groups[:args.top]:
        print(f"{ns:6.2f} ns {count:5d}  {name}")
    if len(groups) > args.top:
        print(f"... and {len(groups) - args.top} more groups (--top N)")
    if args.path:
        print("latest path: " + " -> ".join(endpoints[0]["path"]) if "path" in endpoints[0] else
              "(--path lists the latest path's nets from an ECP5 build's netlist, without --units)")


def add_parser(sub):
    fpga = sub.add_parser("fpga", help="boards, bitstreams, the simulated board").add_subparsers(
        dest="fpga_command", required=True)

    sp = fpga.add_parser("boards", help="list the boards")
    sp.set_defaults(func=cmd_boards)

    sp = fpga.add_parser("build", help="build a bitstream (Yosys + nextpnr from PyPI) and its report")
    sp.add_argument("--board", required=True)
    sp.add_argument("--config", help="hardware config (default: the board's preset)")
    sp.add_argument("--freq", type=float, help="accelerator clock in MHz (default: the board's)")
    sp.add_argument("--seed", type=int, nargs="+", default=[1],
                    help="place-and-route seed; several: one synthesis, a build per seed and the Fmax spread")
    sp.add_argument("--jobs", type=int, help="seeds placed and routed at a time (default: one per core)")
    sp.add_argument("--until-met", action="store_true",
                    help="a seed sweep: start no more seeds once one meets timing (those placing finish), "
                         "and succeed if one does")
    sp.add_argument("-o", "--output", help="output folder (default build/fpga/BOARD-CONFIG-FREQ-seedN)")
    sp.add_argument("--synth-only", action="store_true",
                    help="stop after synthesis: the resources used and whether they fit, in a minute or two")
    sp.add_argument("--link-test", action="store_true",
                    help="the SoC without the accelerator: a board's link and memory, checked with `fpga check` "
                         "after a build of a minute or two")
    sp.set_defaults(func=cmd_build)

    sp = fpga.add_parser("check", help="ask a board (or the simulated board) who it is and test its memory")
    sp.add_argument("--port", required=True)
    sp.add_argument("--board", help="take the link speed from this board")
    sp.add_argument("--baud", type=int, help="link speed (default: the board's, else the protocol's default)")
    sp.add_argument("--bytes", type=int, default=4096, help="memory bytes to write and read back (default 4096)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the test pattern")
    sp.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a reply")
    sp.set_defaults(func=cmd_check)

    sp = fpga.add_parser("report", help="the table of build reports")
    sp.add_argument("paths", nargs="*", help=f"report files or folders (default {DEFAULT_BUILD_ROOT})")
    sp.add_argument("--record", action="store_true",
                    help="also keep the reports in docs/fpga_reports/ (the table in docs/fpga.md)")
    sp.set_defaults(func=cmd_report)

    sp = fpga.add_parser("paths", help="every late endpoint of an ECP5 build: nextpnr's own arrivals after "
                                       "place and route, or estimated from the synthesised netlist in seconds")
    sp.add_argument("build", help="a build folder (its pnr_report.json, else its top.json) or a Yosys JSON netlist")
    sp.add_argument("--freq", type=float, help="clock in MHz (default: the build's)")
    sp.add_argument("--top", type=int, default=30, help="groups to list (default 30)")
    sp.add_argument("--hop", type=float, default=1.3, help="ns per net (default 1.3)")
    sp.add_argument("--path", action="store_true",
                    help="also print the latest path's nets (on a routed build: the netlist's path into nextpnr's "
                         "latest endpoint)")
    sp.add_argument("--units", type=int, metavar="DEPTH",
                    help="count late endpoints per unit DEPTH levels down the hierarchy (e.g. 4: "
                         "soc.accelerator.datapath.compute), most first")
    sp.add_argument("--estimate", action="store_true",
                    help="estimate from the netlist even where the build was placed and routed")
    sp.set_defaults(func=cmd_paths)

    sp = fpga.add_parser("program", help="load a bitstream onto a board with openFPGALoader")
    sp.add_argument("--board", required=True)
    sp.add_argument("bitstream")
    sp.set_defaults(func=cmd_program)

    sp = fpga.add_parser("simulate", help="run the board's SoC in Verilator on a pseudo-terminal")
    sp.add_argument("--board", required=True)
    sp.add_argument("--config", help="hardware config (default: the board's preset)")
    sp.set_defaults(func=cmd_simulate)
