"""Where the FPGA resources go: each accelerator unit synthesised on its own, and the whole.

Every unit (fetch, the load stream's loader, the compute stream with its
GEMM/ALU core and, apart, its loader, the store stream, the register file,
and the DMA reader that fetch and each loader have, or with ``lean`` share), the whole ``Accelerator``
and the SoC's on-chip memory (the board's size and layout)
are synthesised separately with the family's Yosys flow (the one
``tilewright fpga build`` uses, without the SoC around it), and their cells
are counted by kind: LUT, FF, carry, DSP, block RAM. The units do not add
up to the whole exactly: Yosys optimises across a unit's edge only in the
whole.

With ``--timing MHZ`` (ECP5) each unit is also placed and routed out of
context (no IO buffers, the whole 85F to itself) by nextpnr at MHZ, and its
Fmax and critical path (the cells it runs through, logic vs routing delay)
are reported: the per-component timing check that a full board build takes
too long for.

Units are built with 32-bit addresses, or with ``--board NAME`` as that
board's SoC builds them (addresses as wide as its memory).

Usage: ``python benchmarks/fpga_area.py [--family ice40 | --board NAME] [--config tiny] [--timing 100]``; writes
benchmarks/results/fpga_area_<family>_<config>.json. A run takes a few minutes
(tens of minutes with ``--timing``).
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from amaranth.back import rtlil

from tilewright.config import load_config
from tilewright.isa import MemType
from tilewright.fpga.boards import BoardError, get_board
from tilewright.fpga.build import SYNTH, BuildError, critical_path, tool, utilization_from_stat
from tilewright.fpga.build import synthesise as synthesise_top
from tilewright.fpga.memory import OnChipMemory
from tilewright.hw.compute import ComputeUnit
from tilewright.hw.serial_core import core_for
from tilewright.hw.dma import RowReader
from tilewright.hw.fetch import Fetch
from tilewright.hw.padded_load import PaddedLoad
from tilewright.hw.regs import RegisterFile
from tilewright.hw.store import StoreUnit
from tilewright.hw.top import AXI_ID_WIDTH, Accelerator

OUT = Path(__file__).parent / "results"

UNITS = {
    "fetch": lambda cfg, aw, board: Fetch(cfg, addr_width=aw),
    "load": lambda cfg, aw, board: PaddedLoad(cfg, (MemType.INP, MemType.WGT), addr_width=aw),
    "compute": lambda cfg, aw, board: ComputeUnit(cfg),
    "compute.loader": lambda cfg, aw, board: PaddedLoad(cfg, (MemType.UOP, MemType.ACC, MemType.ACC8),
                                                        addr_width=aw),
    "compute.core": lambda cfg, aw, board: core_for(cfg),
    "store": lambda cfg, aw, board: StoreUnit(cfg, addr_width=aw),
    "regs": lambda cfg, aw, board: RegisterFile(direct=cfg.slow_clock),
    "reader": lambda cfg, aw, board: RowReader(addr_width=aw, data_width=cfg.dram_bus_width, lean=cfg.lean,
                                                     timing_registers=not cfg.slow_clock),
    "accelerator": lambda cfg, aw, board: Accelerator(cfg, addr_width=aw),
    "memory": lambda cfg, aw, board: OnChipMemory(size=board.mem_bytes, data_width=cfg.dram_bus_width,
                                                  addr_width=aw, id_width=AXI_ID_WIDTH, **board.memory_options),
}


#: The board whose platform elaborates the units of each family (vendor primitives, memory styles).
FAMILY_BOARD = {"ecp5": "ulx3s-85f", "ice40": "icebreaker", "gowin": "tangnano9k"}


def synthesise(component, family, workdir):
    """Cells of ``component`` by kind after the family's Yosys synthesis (netlist in ``workdir/top.json``)."""
    platform = get_board(FAMILY_BOARD[family]).platform_class()
    (workdir / "top.il").write_text(rtlil.convert(component, name="top", platform=platform))
    _, mapper = synthesise_top(family, workdir, progress=lambda line: None)
    cells = utilization_from_stat(json.loads((workdir / "stat.json").read_text()), family)
    return dict(cells, lut_mapper=mapper)


def place_and_route(workdir, freq_mhz, seed=1):
    """Fmax (MHz) and critical path of ``workdir/top.json`` placed and routed out of context on the
    ULX3S-85F's ECP5 (device, package and speed from its board platform)."""
    platform = get_board(FAMILY_BOARD["ecp5"]).platform_class()
    args = [tool("nextpnr-ecp5"), platform._nextpnr_device_options[platform.device], "--package",
            platform._nextpnr_package_options[platform.package].upper(), "--speed", str(platform.speed),
            "--out-of-context", "--router", "router2", "--json", "top.json", "--freq", f"{freq_mhz:g}",
            "--seed", str(seed), "--report", "report.json", "--timing-allow-fail", "-q", "-l", "pnr.log"]
    subprocess.run(args, cwd=workdir, check=True, capture_output=True)
    report = json.loads((workdir / "report.json").read_text())
    fmax = min((v["achieved"] for v in report.get("fmax", {}).values()), default=None)
    return {"fmax_mhz": round(fmax, 1) if fmax else None, "critical_path": critical_path(report)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(SYNTH), default="ice40")
    parser.add_argument("--config", default="tiny", help="preset name or TOML file")
    parser.add_argument("--board", help="the family, the board's preset (unless --config) and its memory's address "
                                        "width, as the SoC builds the accelerator")
    parser.add_argument("--units", nargs="*", choices=list(UNITS), default=list(UNITS))
    parser.add_argument("--timing", type=float, metavar="MHZ",
                        help="also place and route each unit out of context (ECP5) at MHZ; report Fmax")
    parser.add_argument("--json", type=Path, help="output file (default benchmarks/results/fpga_area_<family>_<config>.json)")
    parser.add_argument("--keep", type=Path, metavar="DIR",
                        help="keep each unit's netlist and tool logs in DIR/UNIT (nextpnr's full critical path "
                             "is in its pnr.log)")
    args = parser.parse_args(argv)
    addr_width = 32
    if args.board:
        try:
            board = get_board(args.board)
        except BoardError as exc:
            parser.error(str(exc))
        args.family = board.family
        if "--config" not in (argv if argv is not None else sys.argv):
            args.config = board.config
        addr_width = (board.mem_bytes - 1).bit_length()
    else:
        board = get_board(FAMILY_BOARD[args.family])
    if args.timing is not None and (args.family != "ecp5" or args.timing <= 0):
        parser.error("--timing takes a positive clock in MHz and an ECP5 family or board")
    cfg = load_config(args.config)
    result = {"family": args.family, "config": cfg.name, "fingerprint": cfg.fingerprint, "tag": cfg.tag,
              "addr_width": addr_width, "yosys": SYNTH[args.family], "units": {}}
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.units:
            start = time.monotonic()
            workdir = args.keep / name if args.keep else Path(tmp)
            workdir.mkdir(parents=True, exist_ok=True)
            try:
                line = _measure(name, UNITS[name](cfg, addr_width, board), args, workdir, result["units"])
            except (BuildError, subprocess.CalledProcessError) as exc:       # (Yosys, nextpnr): report, go on
                failed += 1
                result["units"][name] = {"error": str(exc) if isinstance(exc, BuildError) else
                                         f"{Path(exc.cmd[0]).name} exited with {exc.returncode}"}
                line = f"{name:14s} FAILED: {result['units'][name]['error']}"
            print(line + f"  ({time.monotonic() - start:.0f} s)", flush=True)
    path = args.json or OUT / f"fpga_area_{args.family}_{cfg.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 1 if failed else 0


def _measure(name, component, args, workdir, units):
    """Synthesise (and with ``--timing`` place and route) one unit into ``units[name]``; its report line."""
    cells = units[name] = synthesise(component, args.family, workdir)
    line = f"{name:14s} " + "  ".join(f"{k} {v}" for k, v in cells.items())
    if args.timing is not None:
        cells.update(place_and_route(workdir, args.timing))
        path = cells["critical_path"] or {}
        line += (f"  Fmax {cells['fmax_mhz']} MHz: {path.get('from')} -> {path.get('to')}, "
                 f"{path.get('clk_to_q_ns')} ns clock-to-out + {path.get('logic_ns')} ns logic + "
                 f"{path.get('routing_ns')} ns routing")
    return line


if __name__ == "__main__":
    sys.exit(main())
