"""Where the FPGA resources go: each accelerator unit synthesised on its own, and the whole.

Every unit (fetch, the load stream, the compute stream and its GEMM/ALU
core, the store stream, the register file) and the whole ``Accelerator``
are synthesised separately with the family's Yosys flow (the one
``tilewright fpga build`` uses, without the SoC around it), and their cells
are counted by kind: LUT, FF, carry, DSP, block RAM. The units do not add
up to the whole exactly: Yosys optimises across a unit's edge only in the
whole.

Usage: ``python benchmarks/fpga_area.py [--family ice40] [--config tiny]``; writes
benchmarks/results/fpga_area_<family>_<config>.json. A run takes a few minutes.
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
from tilewright.fpga.build import SYNTH, tool, utilization_from_stat
from tilewright.hw.compute import ComputeUnit
from tilewright.hw.core import ComputeCore
from tilewright.hw.fetch import Fetch
from tilewright.hw.load import LoadUnit
from tilewright.hw.regs import RegisterFile
from tilewright.hw.store import StoreUnit
from tilewright.hw.top import Accelerator

OUT = Path(__file__).parent / "results"

UNITS = {
    "fetch": lambda cfg: Fetch(cfg, addr_width=32),
    "load": lambda cfg: LoadUnit(cfg, addr_width=32),
    "compute": lambda cfg: ComputeUnit(cfg, addr_width=32),
    "compute.core": lambda cfg: ComputeCore(cfg),
    "store": lambda cfg: StoreUnit(cfg, addr_width=32),
    "regs": lambda cfg: RegisterFile(),
    "accelerator": lambda cfg: Accelerator(cfg),
}


def synthesise(component, family, workdir):
    """Cells of ``component`` by kind after the family's Yosys synthesis."""
    (workdir / "unit.il").write_text(rtlil.convert(component, name="top"))
    script = f"read_rtlil unit.il; {SYNTH[family]} -top top; tee -q -o stat.json stat -json"
    subprocess.run([tool("yosys"), "-q", "-p", script], cwd=workdir, check=True, capture_output=True)
    return utilization_from_stat(json.loads((workdir / "stat.json").read_text()), family)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", choices=sorted(SYNTH), default="ice40")
    parser.add_argument("--config", default="tiny", help="preset name or TOML file")
    parser.add_argument("--units", nargs="*", choices=list(UNITS), default=list(UNITS))
    parser.add_argument("--json", type=Path, help="output file (default benchmarks/results/fpga_area_<family>_<config>.json)")
    args = parser.parse_args(argv)
    cfg = load_config(args.config)
    result = {"family": args.family, "config": cfg.name, "fingerprint": cfg.fingerprint, "tag": cfg.tag,
              "yosys": SYNTH[args.family], "units": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.units:
            start = time.monotonic()
            cells = synthesise(UNITS[name](cfg), args.family, Path(tmp))
            result["units"][name] = cells
            print(f"{name:14s} " + "  ".join(f"{k} {v}" for k, v in cells.items())
                  + f"  ({time.monotonic() - start:.0f} s)", flush=True)
    path = args.json or OUT / f"fpga_area_{args.family}_{cfg.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
