"""Per-layer RTL cycles of a whole model against each layer's roofline: MobileNetV2-style and ResNet-18.

    .venv/bin/python benchmarks/model_layers.py [--model mobilenet_v2|mobilenet_v2_224|resnet18] [--config default]
        [--json benchmarks/results/layers_<model>_<config>.json]

Compiles the model (the zoo's, random weights, calibrated on 4 random
inputs; ``mobilenet_v2`` is the test suite's 32×32 one, ``mobilenet_v2_224``
has MobileNetV2's own widths, whose last 1×1 conv is 4× the last width
instead of 1280 channels), runs one input on the cycle-accurate RTL and checks the output
against fsim's bit for bit. For every accelerator layer it reports the
cycles, the MACs the layer means, the MACs per cycle and their share of the
array's peak (``batch · block_in · block_out``), and the layer's roofline:
the larger of

* the GEMM bound: the GEMM micro-ops the packed layer needs at one per
  cycle (for a conv, ``N/b · O/o · OH · OW · (C/i) · KH · KW``; for a
  depthwise conv, whose block-diagonal weights do one block of channels per
  micro-op, ``N/b · C/o · OH · OW · KH · KW``; for a dense layer,
  ``N/b · M/o · K/i``), and
* the DRAM bound: every input, weight, bias/scale and output byte moved
  once, at the bus width per cycle.

A depthwise layer's peak is ``batch · block`` MACs per cycle (one block of
channels per micro-op), so its utilization of the array is at most
``1 / block_in``; its roofline ratio says how close it comes to that.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from tilewright.compiler.graph.zoo import mobilenet_v2, resnet18
from tilewright.config import load_config
from tilewright.runtime.model import compile_model

#: MobileNetV2's own widths (Sandler et al., table 2), for the 224×224 model.
MOBILENET_V2_BLOCKS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1))
MODELS = {"mobilenet_v2": (mobilenet_v2, 32),
          "mobilenet_v2_224": (lambda: mobilenet_v2(blocks=MOBILENET_V2_BLOCKS, stem=32, image=224, classes=1000), 224),
          "resnet18": (resnet18, 224)}


def roofline(step, cfg):
    """``(gemm_cycles, dram_cycles)``: the layer's two bounds (see the module docstring)."""
    s = step.spec
    if step.node.op == "QConv":
        NB, OB = s.batch // cfg.batch, s.out_channels // cfg.block_out
        KH, KW = s.kernel
        gemm = NB * OB * s.out_height * s.out_width * s.reduce_blocks(cfg) * KH * KW
        out = s.batch * s.out_channels * s.out_height * s.out_width
        data = s.batch * s.in_channels * s.height * s.width + (out if s.residual else 0)
    else:
        gemm = (s.batch // cfg.batch) * (s.out_features // cfg.block_out) * (s.in_features // cfg.block_in)
        out, data = s.batch * s.out_features, s.batch * s.in_features
    weight = sum(v.nbytes for v in step.packed.values())      # (weights and the per-channel vectors)
    return gemm, (data + weight + out) / cfg.bus_bytes


def markdown(rows, total, cfg):
    """The per-layer table as Markdown, with a summary row per kind of layer and one for all."""
    lines = ["| layer | kind | RTL cycles | roofline | cycles / roofline | MACs / cycle | of peak |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['layer']} | {r['kind']} | {r['cycles']:,} | {r['roofline']:,.0f} | {r['ratio']:.2f} | "
                     f"{r['macs_per_cycle']:.1f} | {r['utilization']:.1%} |")
    groups = {kind: [r for r in rows if r["kind"] == kind] for kind in dict.fromkeys(r["kind"] for r in rows)}
    groups["all"] = rows
    for kind, group in groups.items():
        cycles, macs, bound = (sum(r[k] for r in group) for k in ("cycles", "macs", "roofline"))
        lines.append(f"| **{kind}** ({len(group)}) | | {cycles:,} | {bound:,.0f} | {cycles / bound:.2f} | "
                     f"{macs / cycles:.1f} | {macs / cycles / cfg.macs_per_cycle:.1%} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(MODELS), default="mobilenet_v2")
    ap.add_argument("--config", default="default")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--markdown", action="store_true", help="also print the table in Markdown (docs/models.md)")
    args = ap.parse_args()
    cfg = load_config(args.config)
    build, image = MODELS[args.model]
    onnx_bytes = build().SerializeToString()
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((4, 3, image, image)).astype(np.float32)
    x = rng.standard_normal((1, 3, image, image)).astype(np.float32)
    model = compile_model(onnx_bytes, cfg, calibration=calib)
    fsim = model.run(x)
    rtl, profile = model.run(x, backend="rtl", profile=True)
    if not all(np.array_equal(fsim[k], rtl[k]) for k in fsim):
        raise SystemExit("the RTL and fsim disagree")
    steps = {s.name: s for s in model.steps if s.where == "accelerator"}
    rows = []
    print(f"{args.model} on {cfg.name} ({cfg.macs_per_cycle} MACs/cycle): RTL output equals fsim")
    print(f"{'layer':28} {'kind':9} {'cycles':>10} {'roofline':>10} {'ratio':>6} {'MACs/cycle':>10} {'of peak':>7}")
    for r in profile:
        step = steps.get(r["node"])
        if step is None:
            continue
        gemm, dram = roofline(step, cfg)
        bound = max(gemm, dram)
        groups = getattr(step.spec, "group_channels", 0)
        kind = "depthwise" if groups == 1 else "grouped" if groups else step.node.op[1:].lower()
        row = dict(layer=r["node"], kind=kind, cycles=r["cycles"], macs=r["macs"], gemm_bound=gemm,
                   dram_bound=dram, roofline=bound, ratio=r["cycles"] / bound,
                   macs_per_cycle=r["macs"] / r["cycles"], utilization=r["macs"] / r["cycles"] / cfg.macs_per_cycle)
        rows.append(row)
        print(f"{row['layer']:28} {kind:9} {row['cycles']:>10,} {bound:>10,.0f} {row['ratio']:>6.2f} "
              f"{row['macs_per_cycle']:>10.1f} {row['utilization']:>7.1%}")
    total = {k: sum(r[k] for r in rows) for k in ("cycles", "macs", "roofline")}
    print(f"{'all accelerator layers':38} {total['cycles']:>10,} {total['roofline']:>10,.0f} "
          f"{total['cycles'] / total['roofline']:>6.2f} {total['macs'] / total['cycles']:>10.1f} "
          f"{total['macs'] / total['cycles'] / cfg.macs_per_cycle:>7.1%}")
    if args.markdown:
        print(markdown(rows, total, cfg))
    out = args.json or Path(f"benchmarks/results/layers_{args.model}_{cfg.name}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "config": cfg.name, "image": image, "rtl_equals_fsim": True,
                               "layers": rows, "total": total}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
