"""Every hardware fact is stated once: the spec floor stands alone, and no second copy creeps back.

These checks read the sources as text (and import graphs as ASTs); they fail
when a fact the spec owns is written again where it can be recognised.
"""

import ast
import re
from pathlib import Path

import pytest

from tilewright import isa
from tilewright.config import PRESETS
from tilewright.hw.axi import LITE_DATA_WIDTH, RESP_OKAY, RESP_SLVERR
from tilewright.hw.regs import CONTROL_START, COUNTERS, REGISTERS, STATUS_FIELDS, Status
from tilewright.sim.fast import HARNESS, harness_header

ROOT = Path(__file__).resolve().parents[1]

#: The bottom floor: config, ISA, semantics, assembler, builder (and the package's own __init__).
SPEC_MODULES = {"config", "isa", "semantics", "asm", "builder"}


def _tilewright_imports(path):
    """Names of the ``tilewright`` modules ``path`` imports (at any depth of the file)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:          # from .x import y / from . import x
                names |= {node.module.split(".")[0]} if node.module else {a.name for a in node.names}
            elif node.module and node.module.split(".")[0] == "tilewright":
                parts = node.module.split(".")
                names |= {parts[1]} if len(parts) > 1 else {a.name for a in node.names}
        elif isinstance(node, ast.Import):
            names |= {a.name.split(".")[1] for a in node.names if a.name.startswith("tilewright.")}
    return names


def test_the_spec_floor_holds_only_the_spec():
    modules = {p.stem for p in (ROOT / "tilewright").glob("*.py")} - {"__init__"}
    assert modules == SPEC_MODULES
    assert not [p for p in (ROOT / "tilewright").iterdir() if p.is_dir() and p.name != "__pycache__"]


def test_spec_modules_import_only_the_spec_and_without_cycles():
    graph = {m: _tilewright_imports(ROOT / "tilewright" / f"{m}.py") for m in SPEC_MODULES}
    for module, imports in graph.items():
        assert imports <= SPEC_MODULES, f"tilewright/{module}.py imports {imports - SPEC_MODULES} from above the spec"
    # No cycle: repeatedly peel modules that import nothing left.
    left = dict(graph)
    while left:
        leaves = [m for m, deps in left.items() if not deps & set(left)]
        assert leaves, f"import cycle among {sorted(left)}"
        for m in leaves:
            del left[m]


def _defines(text):
    return dict(re.findall(r"^#define (\w+) (\S+)$", text, flags=re.M))


@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_harness_constants_are_generated_from_the_register_map(preset):
    cfg = PRESETS[preset]
    header = harness_header(cfg)
    defines = _defines(header)
    offsets = {r.name: r.offset for r in REGISTERS}
    for name in ("control", "status", "insn_addr", "insn_count", "error_index"):
        assert int(defines[f"REG_{name.upper()}"], 16) == offsets[name]
    assert int(defines["BUS_BYTES"]) == cfg.bus_bytes
    assert int(defines["CONTROL_START"], 16) == CONTROL_START
    assert (int(defines["AXI_RESP_OKAY"]), int(defines["AXI_RESP_SLVERR"])) == (RESP_OKAY, RESP_SLVERR)
    assert int(defines["AXIL_WSTRB_ALL"], 16) == (1 << LITE_DATA_WIDTH // 8) - 1
    assert int(defines["NUM_COUNTERS"]) == len(COUNTERS)
    listed = re.search(r"COUNTER_OFFSETS\[NUM_COUNTERS\] = \{(.*)\};", header).group(1)
    assert [int(v, 16) for v in listed.split(", ")] == [offsets[name] for name, _ in COUNTERS]
    streams = re.search(r"#define TW_STREAMS\(X\) (.*)", header).group(1)
    assert streams == " ".join(f"X({s.name.lower()})" for s in isa.Stream)


def test_the_harness_source_states_no_constant_of_its_own():
    code = re.sub(r"//.*", "", HARNESS.read_text())        # comments may explain, code may not restate
    assert "#define REG_" not in code and "#define BUS_BYTES" not in code
    assert not re.search(r"0x[0-9a-fA-F]+", code), "a hex literal in harness.cpp: generate it into tw_spec.h"
    assert not re.search(r"\"(load|compute|store)\"", code), "stream names come from TW_STREAMS"
    used = set(re.findall(r"\b(REG_\w+|AXIL?_\w+|CONTROL_\w+|NUM_COUNTERS|COUNTER_OFFSETS|BUS_BYTES)\b", code))
    generated = harness_header(PRESETS["tiny"])
    assert all(name in generated for name in used), used


def test_status_fields_round_trip_and_match_the_register_doc():
    doc = next(r.doc for r in REGISTERS if r.name == "status")
    for name, (lsb, width) in STATUS_FIELDS.items():
        assert (f"bit {lsb} {name}" if width == 1 else f"bits {lsb + width - 1}:{lsb} {name}") in doc
    assert STATUS_FIELDS["error"][1] == isa.ERROR_BITS >= max(isa.ErrorCode).bit_length()
    for status in (Status(True, False, 0), Status(False, True, isa.ErrorCode.PROTOCOL)):
        assert Status.decode(status.encode()) == status


#: Patterns of facts the spec owns, and the one file allowed to state each.
RESTATED = [
    (r"status\s*(&|>>)", None, "decode the status register with hw.regs.Status"),
    (r"\(\s*\w*y_size - 1\) \* \w*x_stride", "tilewright/isa.py", "the DRAM end is isa.dram_end"),
    (r"^(?!\s*def ).*\bid_width=\d", None, "the AXI ID width is hw.top.AXI_ID_WIDTH"),
    (r"\b(insn|word)\w*(\.as_value\(\))?\[:\s*\d+\]", None, "read the opcode through the instruction layout"),
    (r"\"error\": (In|Out)\((?!1\))\d", None, "error codes are isa.ERROR_BITS wide"),
    (r"\(\w*depth\w*(\(\w+\))? - 1\)\.bit_length\(\)", None, "SRAM index widths are HwConfig.index_bits"),
    (r"\w+\.y_pad0 \+ \w+\.y_size \+ \w+\.y_pad1", "tilewright/isa.py", "the padded rectangle is isa.padded_rows/cols"),
]


@pytest.mark.parametrize("pattern, owner, why", RESTATED, ids=[w for _, _, w in RESTATED])
def test_no_second_copy_of_a_spec_fact(pattern, owner, why):
    folders = ("tilewright", "hw", "sim", "compiler", "runtime", "cli", "examples")
    hits = [f"{p.relative_to(ROOT)}:{k + 1}"
            for folder in folders for p in sorted((ROOT / folder).rglob("*.py"))
            for k, line in enumerate(p.read_text().splitlines())
            if re.search(pattern, line) and str(p.relative_to(ROOT)) != owner]
    assert not hits, f"{why}: {hits}"
