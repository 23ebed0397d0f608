"""Compile time of the ten ResNet-18 conv layers of the VTA benchmark (default preset).

Prints per-layer compile time (schedule + lowering + passes + codegen +
checks), instruction counts and the total; writes
benchmarks/results/compile_resnet.json. Target: at most 10 s in total.
"""

import json
import time
from pathlib import Path

from tilewright.compiler import build
from tilewright.compiler.ops import Conv2dSpec, conv2d

OUT = Path(__file__).parent / "results"

#: (H=W, Cin, Cout, kernel, stride); padding 1 for 3×3, 0 for 1×1.
RESNET18 = [(56, 64, 64, 3, 1), (56, 64, 128, 3, 2), (56, 64, 128, 1, 2), (28, 128, 128, 3, 1),
            (28, 128, 256, 3, 2), (28, 128, 256, 1, 2), (14, 256, 256, 3, 1), (14, 256, 512, 3, 2),
            (14, 256, 512, 1, 2), (7, 512, 512, 3, 1)]


def main():
    records, total = [], 0.0
    print(f"{'layer':28} {'compile':>9} {'instructions':>13} {'uops':>6}")
    for k, (hw, cin, cout, kernel, stride) in enumerate(RESNET18, start=2):
        spec = Conv2dSpec(1, cin, hw, hw, cout, (kernel, kernel), stride, 1 if kernel == 3 else 0,
                          bias=True, mul=3, shift=9, relu=True)
        start = time.perf_counter()
        schedule, _, _ = conv2d(spec, "default")
        program = build(schedule, "default")
        elapsed = time.perf_counter() - start
        total += elapsed
        name = f"C{k} {hw} {cin}->{cout} {kernel}x{kernel} s{stride}"
        print(f"{name:28} {elapsed * 1e3:7.0f} ms {len(program.instructions):>13} {len(program.uop_words):>6}")
        records.append({"layer": name, "compile_s": elapsed, "instructions": len(program.instructions),
                        "uops": int(len(program.uop_words))})
    print(f"total: {total:.2f} s for {len(RESNET18)} layers (target 10 s)")
    OUT.mkdir(exist_ok=True)
    (OUT / "compile_resnet.json").write_text(json.dumps({"total_s": total, "layers": records}, indent=2))


if __name__ == "__main__":
    main()
