"""Memories marked ``never_reads_while_written`` synthesise to bare block RAMs: the FPGA builds tell Yosys
their read-during-write collisions are undefined. Unmarked ones keep the logic that returns the old entry."""

import json

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.back import rtlil
from amaranth.lib.memory import Memory

from tilewright.fpga.build import synthesise
from tilewright.hw.sram import never_reads_while_written


class OneWriteOneRead(Elaboratable):
    def __init__(self, *, marked):
        self.marked = marked
        self.w_addr, self.r_addr = Signal(9), Signal(9)
        self.w_data, self.r_data, self.w_en = Signal(64), Signal(64), Signal()

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=64, depth=512, init=[])
        w, r = mem.write_port(), mem.read_port()
        if self.marked:
            never_reads_while_written(mem)
        # (a registered address: a module with processes, which Yosys's memory passes skip until `proc`)
        m.d.sync += w.addr.eq(self.w_addr)
        m.d.comb += [w.data.eq(self.w_data), w.en.eq(self.w_en), r.addr.eq(self.r_addr), self.r_data.eq(r.data)]
        return m


def cells(design, workdir):
    workdir.mkdir()
    ports = [design.w_addr, design.w_data, design.w_en, design.r_addr, design.r_data]
    (workdir / "top.il").write_text(rtlil.convert(design, name="top", ports=ports))
    synthesise("ecp5", workdir, progress=lambda line: None)
    return json.loads((workdir / "stat.json").read_text())["modules"]["\\top"]["num_cells_by_type"]


def test_a_marked_memory_is_block_ram_alone_and_an_unmarked_one_keeps_its_collision_logic(tmp_path):
    marked, unmarked = cells(OneWriteOneRead(marked=True), tmp_path / "a"), cells(OneWriteOneRead(marked=False),
                                                                                  tmp_path / "b")
    assert marked["DP16KD"] == unmarked["DP16KD"] == 2
    assert marked.get("TRELLIS_FF", 0) == 9 and "LUT4" not in marked        # (the address register)
    assert unmarked["TRELLIS_FF"] >= 9 + 64          # the old entry, kept for a collision, and its select


def unused_memory():
    mem = Memory(shape=8, depth=16, init=[])
    mem._MustUse__silence = True        # (made to be refused, never elaborated)
    return mem


def test_only_one_write_and_one_plain_read_port_can_be_marked():
    mem = unused_memory()
    mem.read_port(transparent_for=(mem.write_port(),))
    with pytest.raises(ValueError, match="one write port"):
        never_reads_while_written(mem)
    mem = unused_memory()
    mem.write_port(), mem.read_port(), mem.read_port()
    with pytest.raises(ValueError, match="one write port"):
        never_reads_while_written(mem)
    mem = unused_memory()       # (Yosys asserts on the collision mask of an asynchronous read port)
    mem.write_port(), mem.read_port(domain="comb")
    with pytest.raises(ValueError, match="one write port"):
        never_reads_while_written(mem)


@pytest.mark.parametrize("lutram", [True, False], ids=["lutram", "block-ram"])
def test_a_head_registered_fifo_synthesises_for_the_ecp5_in_both_forms(lutram, tmp_path):
    """The LUT RAM form reads asynchronously and is not marked (Yosys asserts on a collision mask there);
    the other reads synchronously and is marked. (At 15 entries Yosys puts both in LUT RAM.)"""
    from tilewright.fpga.boards import get_board
    from tilewright.hw.fifo import HeadRegisteredFIFO

    platform = get_board("ulx3s-85f").platform_class()
    fifo = HeadRegisteredFIFO(width=128, depth=16, lutram=lutram, decode=lambda w: w[:4], decoded_width=4)
    (tmp_path / "top.il").write_text(rtlil.convert(fifo, name="top", platform=platform))
    synthesise("ecp5", tmp_path, progress=lambda line: None)
    used = json.loads((tmp_path / "stat.json").read_text())["modules"]["\\top"]["num_cells_by_type"]
    assert "TRELLIS_DPR16X4" in used and "DP16KD" not in used


def _memory_attributes(cfg):
    """Each accumulator memory of ``cfg``'s compute unit, by name: whether it is marked, and its read ports."""
    import re

    from tilewright.hw.compute import ComputeUnit
    il = rtlil.convert(ComputeUnit(cfg), name="top")
    read_ports = [cell for cell in il.split("cell ")[1:] if cell.startswith("$memrd_v2")]
    found = {}
    for match in re.finditer(r"((?:attribute .*\n\s*)*)memory .* \\(acc_mem\w*)\n", il):
        reads = sum(f'\\MEMID "\\\\{match.group(2)}"' in cell for cell in read_ports)
        found[match.group(2)] = ("no_rw_check" in match.group(1), reads)
    return found


# (`tiny` has the requantizing STORE: without `lean` it reads the accumulators through a copy of its own)
@pytest.mark.parametrize("vector_lanes,lean,serial,expected", [
    (4, False, False, {"acc_mem": (False, 2), "acc_mem_store": (True, 1)}),     # one pass: transparent
    (2, False, False, {"acc_mem": (True, 1), "acc_mem_b": (True, 1), "acc_mem_store": (True, 1)}),  # two passes
    (1, True, False, {"acc_mem": (True, 1), "acc_mem_b": (True, 1)}),           # shared with the STORE
    (1, False, False, {"acc_mem": (True, 1), "acc_mem_store": (True, 1)}),      # the ALU through one port
    (1, False, True, {"acc_mem": (True, 1), "acc_mem_store": (True, 1)}),       # the serial core
])
def test_accumulator_ports_read_marked_memories_unless_transparent(vector_lanes, lean, serial, expected):
    """Only an ALU of one pass reads the accumulators through ports transparent to the write port. Every
    other port reads a memory of its own, marked: the first port with several passes, which the core makes
    read as a transparent one would (`acc_port_a_forwarded`), and the serial core's; the ALU's second port,
    which never reads a row as it is written; the requantizing STORE's."""
    from tilewright import PRESETS
    cfg = PRESETS["tiny"].replace(name="tiny_rw", vector_lanes=vector_lanes, lean=lean, serial_core=serial)
    assert _memory_attributes(cfg) == expected
