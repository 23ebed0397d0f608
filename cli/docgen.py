"""Generated reference tables for the docs.

The text between the ``<!-- generated:begin -->`` and ``<!-- generated:end -->``
markers of ``docs/isa.md`` (field tables, from the ISA spec),
``docs/hardware.md`` (register map, from :mod:`tilewright.hw.regs`),
``docs/compiler.md`` (a compiler walkthrough) and ``docs/fpga.md`` (the
recorded bitstream builds, from ``docs/fpga_reports/``) is produced here, so the documents cannot drift from the code: a test compares
them, and ``tilewright docs`` rewrites them.
"""

import json
from pathlib import Path

from tilewright import isa
from tilewright.compiler import files
from tilewright.config import PRESETS

__all__ = ["isa_tables", "register_tables", "fpga_build_table", "update_generated", "GENERATED_DOCS", "BEGIN",
           "END", "FPGA_REPORTS"]

BEGIN = "<!-- generated:begin -->"
END = "<!-- generated:end -->"


def _format_table(fmt):
    rows = [f"**{fmt.name}** ({fmt.used_bits} of {fmt.total_bits} bits used)", "",
            "| bits | field | width | description |", "|---|---|---|---|"]
    for f in fmt.fields:
        bits = f"{f.msb}:{f.offset}" if f.width > 1 else f"{f.offset}"
        signed = " (signed)" if f.signed else ""
        rows.append(f"| {bits} | `{f.name}` | {f.width} | {f.doc}{signed} |")
    return "\n".join(rows) + "\n"


def _enum_table(title, enum_cls):
    rows = [f"| {title} | value |", "|---|---|"]
    rows += [f"| `{m.name}` | {m.value} |" for m in enum_cls]
    return "\n".join(rows) + "\n"


def _preset_table():
    names = list(PRESETS)
    rows = ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    cfgs = [PRESETS[n] for n in names]
    rows.append("| GEMM (batch×in×out) | " + " | ".join(f"{c.batch}×{c.block_in}×{c.block_out}" for c in cfgs) + " |")
    for mem in ("uop", "inp", "wgt", "acc"):
        rows.append(f"| {mem} depth (index bits) | "
                    + " | ".join(f"{c.depth(mem)} ({c.index_bits(mem)})" for c in cfgs) + " |")
    rows.append("| micro-op bits (stored) | " + " | ".join(f"{c.uop_bits} ({c.uop_bits_stored})" for c in cfgs) + " |")
    rows.append("| DRAM bus bits | " + " | ".join(str(c.dram_bus_width) for c in cfgs) + " |")
    return "\n".join(rows) + "\n"


def isa_tables(cfg=None):
    """Markdown for every format under ``cfg`` (the default preset if None)."""
    cfg = cfg or PRESETS["default"]
    parts = [f"Field layouts for the `{cfg.name}` preset; other configs change only the widths that "
             f"follow buffer depths, and without `requant_store` the STORE has no fields after `x_stride` "
             f"(`tilewright info --config NAME` prints any of them).\n",
             _preset_table()]
    parts += [_format_table(isa.instruction_format(op, cfg)) for op in isa.INSTRUCTION_TYPES]
    parts.append(_format_table(isa.uop_format(cfg)))
    parts += [_enum_table("memory type", isa.MemType), _enum_table("ALU op", isa.AluOp),
              _enum_table("error code", isa.ErrorCode)]
    return "\n".join(parts)


def register_tables():
    """Markdown for the register map."""
    from tilewright.hw.regs import register_table
    return register_table()


#: The conv2d that docs/compiler.md follows through the compiler.
WALKTHROUGH = dict(batch=1, in_channels=4, height=4, width=4, out_channels=8, kernel=(3, 3), stride=1, padding=1,
                   bias=True, mul=3, shift=6, relu=True)


def compiler_walkthrough():
    """Markdown: one small conv2d after lowering, after every pass, and as instructions."""
    from tilewright.compiler import build
    from tilewright.compiler.checker import check
    from tilewright.compiler.ops import Conv2dSpec, ConvTiles, conv2d
    spec = Conv2dSpec(**WALKTHROUGH)
    schedule, _, _ = conv2d(spec, "tiny", tiles=ConvTiles(out_channels=1, rows=4, cols=4, in_channels=1, threads=2))
    steps = []
    program = build(schedule, "tiny", dump=lambda name, ir: steps.append((name, ir)))
    report = check(program)
    parts = [f"`Conv2dSpec({', '.join(f'{k}={v}' for k, v in WALKTHROUGH.items())})` on the `tiny` preset, "
             f"tiles of one output-channel block × 4 × 4, one input-channel block per step, 2 virtual threads.\n"]
    for name, ir in steps[:-1]:
        parts.append(f"### after `{name}`\n\n```\n{ir}```\n")
    parts.append(f"### after `codegen` ({len(program.instructions)} instructions, "
                 f"{len(program.uop_words)} micro-ops; tokens per queue {report.tokens})\n\n"
                 f"```\n{program.listing()}```\n")
    return "\n".join(parts)


#: Build reports kept as evidence (``tilewright fpga report --record`` copies them here from build folders).
FPGA_REPORTS = Path(__file__).resolve().parents[1] / "docs" / "fpga_reports"


def fpga_build_table():
    """Markdown: the table of the recorded bitstream builds."""
    from .fpga import report_table
    reports = [json.loads(p.read_text()) for p in sorted(FPGA_REPORTS.glob("*.json"))]
    if not reports:
        return "No build recorded yet.\n"
    return (f"{len(reports)} recorded build{'s' * (len(reports) != 1)} (`docs/fpga_reports/`; "
            f"`tilewright fpga report --record` adds the reports under `build/fpga`, `tilewright docs` "
            f"rewrites this table):\n\n" + report_table(reports))


#: Document (relative to the repository root) -> generator of its marked section.
GENERATED_DOCS = {"docs/isa.md": isa_tables, "docs/hardware.md": register_tables,
                  "docs/compiler.md": compiler_walkthrough, "docs/fpga.md": fpga_build_table}


def update_generated(path, content, *, check=False):
    """Rewrite the marked section of ``path`` with ``content``; with ``check``, return whether it is current."""
    path = Path(path)
    text = path.read_text()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    if not (sep and sep2):
        raise ValueError(f"{path} lacks the {BEGIN} / {END} markers")
    new = f"{head}{BEGIN}\n{content}{END}{tail}"
    if check:
        return new == text
    files.write_text(path, new)
    return True
