"""RTL throughput from the hardware's own cycle counters (Verilator + cocotb).

* GEMM: one instruction of n micro-ops keeps the core busy n·p + c cycles
  (p = ``gemm_passes``, 1 unless the config has ``gemm_lanes``); c must not
  depend on n.
* ALU: likewise, a micro-op per ``vector_passes`` cycles (each on its own row).
* LOAD: a long LOAD INP moves at least 90% of the bus width per cycle
  (bytes / bus bytes / load-busy cycles).

Usage: ``python benchmarks/rtl_throughput.py [--config default]``; writes
benchmarks/results/rtl_throughput_<config>.json.
"""

import argparse
import json
from pathlib import Path

from tilewright import PRESETS
from tilewright.isa import Alu, AluOp, Finish, Gemm, Load, MemType
from tilewright.sim import Dram
from tilewright.sim.fuzz import program_image
from tilewright.sim.rtl import Job, run_programs

OUT = Path(__file__).parent / "results"
DRAM_BYTES = 1 << 20


def _gemm(n):
    # One micro-op (zeros: acc[0] += inp[0]·wgt[0]) repeated by the loops: n = iter_out · iter_in.
    iter_in = min(n, 64)
    return [Gemm(uop_bgn=0, uop_end=1, iter_out=n // iter_in, iter_in=iter_in), Finish()]


def _alu(n):
    # A row per micro-op (acc[i] += 1 for i < n): a micro-op that reads the row the one right ahead of it
    # writes waits a cycle (docs/hardware.md), which is not what this measures.
    iter_in = min(n, 64)
    return [Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_bgn=0, uop_end=1, iter_out=n // iter_in,
                iter_in=iter_in, dst_factor_out=iter_in, dst_factor_in=1), Finish()]


def _load(cfg, entries):
    # Rows of 512 elements: long bursts, several rows to exercise the 2D path too.
    x = min(entries, 512)
    return [Load(memory_type=MemType.INP, dram_base=0, y_size=entries // x, x_size=x, x_stride=x,
                 push_next=True), Finish(pop_prev=True)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default")
    args = parser.parse_args()
    cfg = PRESETS[args.config]
    sizes = [16, 64, 256, 1024]
    load_entries = min(cfg.inp_depth, 2048)
    cases = ([("gemm", n, _gemm(n)) for n in sizes] + [("alu", n, _alu(n)) for n in sizes]
             + [("load", load_entries, _load(cfg, load_entries))])
    images = [program_image(cfg, program, dram=Dram(DRAM_BYTES)) for _, _, program in cases]
    # The instructions sit after the data; LOAD INP reads from address 0.
    jobs = [Job(dram=p.dram, insn_addr=p.insn_addr, insn_count=p.insn_count) for p in images]
    print(f"running {len(jobs)} programs on the {cfg.name} RTL ({cfg.tag}, {cfg.dram_bus_width}-bit bus)...")
    results = run_programs(cfg, jobs, dram_bytes=DRAM_BYTES)
    records = []
    for (kind, n, _), r in zip(cases, results):
        if r.error:
            raise SystemExit(f"{kind} {n}: the run stopped with error {r.error}")
        busy = r.counters[{"gemm": "gemm_busy", "alu": "alu_busy", "load": "load_busy"}[kind]]
        record = {"kind": kind, "n": n, "busy_cycles": busy, "run_cycles": r.counters["cycles"]}
        if kind == "load":
            beats = r.counters["read_inp"] / cfg.bus_bytes
            record.update(bytes=r.counters["read_inp"], beats=beats, bus_efficiency=beats / busy)
        else:
            record["overhead_c"] = busy - n * (cfg.gemm_passes if kind == "gemm" else cfg.vector_passes)
        records.append(record)
    print(f"{'kind':6} {'n':>6} {'busy':>7} {'c = busy - n·p':>15}")
    for rec in records:
        if rec["kind"] == "load":
            print(f"{'load':6} {rec['n']:>6} {rec['busy_cycles']:>7}   {rec['bytes']} bytes in {rec['beats']:.0f} beats:"
                  f" {100 * rec['bus_efficiency']:.1f}% of the bus per busy cycle")
        else:
            print(f"{rec['kind']:6} {rec['n']:>6} {rec['busy_cycles']:>7} {rec['overhead_c']:>15}")
    for kind in ("gemm", "alu"):
        cs = {rec["overhead_c"] for rec in records if rec["kind"] == kind}
        print(f"{kind}: c {'is constant' if len(cs) == 1 else 'VARIES'} ({sorted(cs)})")
    OUT.mkdir(exist_ok=True)
    path = OUT / f"rtl_throughput_{cfg.name}.json"
    path.write_text(json.dumps({"config": cfg.name, "bus_bits": cfg.dram_bus_width, "records": records}, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
