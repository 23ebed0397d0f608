"""fsim speed: a 1024×1024×1024 int8 matmul through the ISA vs. plain numpy.

The ISA program is the hand-scheduled blocked matmul of
``tilewright.examples.matmul`` on the default preset, with one virtual thread (the
largest tiles) and with two (double buffering). Each fsim run places A and
B in DRAM, executes every instruction and reads C back; building and
encoding the program is timed separately. The reference is numpy's float64
product of the same int8 matrices, exact at this size (|sums| < 2^53).
Timings alternate between the contenders and report medians, since these
machines are noisy; the ratio is computed from medians of one run.

Writes benchmarks/results/fsim_matmul.json and .png.
"""

import json
import statistics
import time
from pathlib import Path

import numpy as np

from tilewright import PRESETS, isa
from tilewright.examples.matmul import BlockedMatmul
from tilewright.sim import FunctionalSimulator

SIZE = 1024
REPEATS = 7
OUT = Path(__file__).parent / "results"


def main():
    cfg = PRESETS["default"]
    rng = np.random.default_rng(0)
    A = rng.integers(-128, 128, (SIZE, SIZE), dtype=np.int8)
    B = rng.integers(-128, 128, (SIZE, SIZE), dtype=np.int8)

    def numpy_reference():
        return A.astype(np.float64) @ B.astype(np.float64).T

    exact = numpy_reference().astype(np.int64)
    expected = np.clip(exact, -128, 127)         # the kernel's output: acc clipped to int8
    contenders = {"numpy float64": numpy_reference}
    programs = {}
    for threads in (1, 2):
        kernel = BlockedMatmul(cfg, SIZE, SIZE, SIZE, threads=threads)
        sim = FunctionalSimulator(cfg)
        base = sim.dram.alloc(kernel.dram_bytes, align=4096)
        start = time.perf_counter()
        binary = isa.encode_program(kernel.instructions(base), cfg)
        build = time.perf_counter() - start

        def run(kernel=kernel, sim=sim, base=base, binary=binary):
            for name, data in kernel.pack(A, B).items():
                sim.dram.write(base + kernel.segments[name][0], data)
            stats = sim.run(binary)
            off, size = kernel.segments["out"]
            return kernel.unpack(sim.dram.read(base + off, size).tobytes()), stats

        C, stats = run()
        assert np.array_equal(C, expected), f"fsim with {threads} thread(s) differs from numpy"
        label = f"fsim, {threads} thread{'s' * (threads > 1)}"
        contenders[label] = run
        t = kernel.tiles
        programs[label] = {"threads": threads, "tiles_blocks": [t.m, t.n, t.k],
                           "instructions": len(binary) // isa.INSN_BYTES, "build_and_encode_s": build,
                           "gemm_uops": stats.gemm_uops, "dram_bytes_read": stats.total_bytes_read}
    times = {name: [] for name in contenders}
    for _ in range(REPEATS):
        for name, fn in contenders.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    base_time = medians["numpy float64"]
    print(f"{SIZE}x{SIZE}x{SIZE} int8 matmul, default preset, median of {REPEATS}")
    print(f"  {'':18} {'time':>9} {'ratio':>7}")
    for name, t in medians.items():
        extra = ""
        if name in programs:
            p = programs[name]
            extra = f"   ({p['instructions']} instructions, tiles {p['tiles_blocks']}, build {p['build_and_encode_s'] * 1e3:.1f} ms)"
        print(f"  {name:18} {t * 1e3:7.1f} ms {t / base_time:6.2f}x{extra}")
    OUT.mkdir(exist_ok=True)
    result = {"size": SIZE, "repeats": REPEATS, "median_s": medians,
              "ratio_to_numpy": {n: t / base_time for n, t in medians.items()},
              "all_s": times, "programs": programs}
    (OUT / "fsim_matmul.json").write_text(json.dumps(result, indent=2))
    _plot(medians, OUT / "fsim_matmul.png")
    print(f"wrote {OUT / 'fsim_matmul.json'} and {OUT / 'fsim_matmul.png'}")


def _plot(medians, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 3))
    names = list(medians)
    ax.barh(names, [medians[n] * 1e3 for n in names], color=["gray"] + ["tab:blue"] * (len(names) - 1))
    ax.axvline(5 * medians["numpy float64"] * 1e3, color="tab:red", ls="--", label="5× numpy")
    ax.set_xlabel("ms (median)")
    ax.set_title(f"{SIZE}³ int8 matmul")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
