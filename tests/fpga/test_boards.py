"""Boards: PLL plans within the devices' documented ranges, every board's top prepared for its
toolchain (pins, clock plan, the SoC), and the CLI's one-line errors."""

import json
import shutil
import sys
import time
from pathlib import Path

import pytest

from tilewright.cli import main
from tilewright.fpga.boards import BOARDS, BoardError, ecp5_pll, get_board, ice40_pll
from tilewright.fpga.build import BuildError, lone_carries, lone_flip_flops, synthesise
from tilewright.fpga.soc import BoardTop


@pytest.mark.parametrize("f_in,f_out", [(25, 100), (25, 60), (25, 40), (12, 24), (12, 36), (27, 50)])
def test_ecp5_pll_in_range(f_in, f_out):
    ref, fb, op, achieved = ecp5_pll(f_in, f_out)
    pfd = f_in / ref
    assert 3.125 <= pfd <= 400 and 400 <= pfd * fb * op <= 800
    assert achieved == pytest.approx(pfd * fb) and abs(achieved - f_out) / f_out < 0.01


@pytest.mark.parametrize("f_in,f_out", [(12, 24), (12, 30), (12, 33), (12, 48)])
def test_ice40_pll_in_range(f_in, f_out):
    divr, divf, divq, filter_range, achieved = ice40_pll(f_in, f_out)
    pfd = f_in / (divr + 1)
    vco = pfd * (divf + 1)
    assert 10 <= pfd <= 133 and 533 <= vco <= 1066 and 1 <= divq <= 6 and 1 <= filter_range <= 6
    assert achieved == pytest.approx(vco / 2 ** divq) and abs(achieved - f_out) / f_out < 0.02


def test_exact_plans_where_the_dividers_allow():
    assert ecp5_pll(25, 100)[3] == 100 and ice40_pll(12, 24)[4] == 24


def test_unknown_board():
    with pytest.raises(BoardError, match="unknown board 'nope'; boards: ulx3s-85f"):
        get_board("nope")


@pytest.mark.parametrize("name", sorted(BOARDS))
def test_board_top_prepares(name):
    board = BOARDS[name]
    from tilewright.config import load_config
    platform = board.platform_class()
    # A clock other than the board's exercises the PLL plan where the family has one.
    freq = board.freq_mhz if board.family == "gowin" else board.board_clock_mhz * 2
    plan = platform.prepare(BoardTop(board, load_config(board.config), freq_hz=int(board.achieved_mhz(freq) * 1e6),
                                     baud=board.baud), name="top")
    rtlil = plan.files["top.il"]
    rtlil = rtlil if isinstance(rtlil, str) else rtlil.decode()
    pll = {"ecp5": "EHXPLLL", "ice40": "SB_PLL40_PAD"}.get(board.family)
    if pll:
        assert f"cell \\{pll}" in rtlil
    constraints = next(v for k, v in plan.files.items() if k.endswith((".lpf", ".pcf", ".cst")))
    constraints = constraints if isinstance(constraints, str) else constraints.decode()
    assert "uart" in constraints


def test_cli_errors_are_one_line(capsys):
    assert main(["fpga", "build", "--board", "nope"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: unknown board") and err.count("\n") == 1
    assert main(["fpga", "simulate", "--board", "icebreaker", "--config", "nonexistent"]) == 1
    assert "unknown config" in capsys.readouterr().err
    assert main(["fpga", "report", "no/such/folder"]) == 1
    assert "no build reports" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("openFPGALoader") is not None, reason="openFPGALoader is installed here")
def test_program_without_loader_says_how_to_get_it(capsys, tmp_path):
    bitstream = tmp_path / "top.bit"
    bitstream.write_bytes(b"\0")
    assert main(["fpga", "program", "--board", "ulx3s-85f", str(bitstream)]) == 1
    assert "openFPGALoader is not installed" in capsys.readouterr().err


def test_report_record_keeps_reports_for_the_docs_table(tmp_path, monkeypatch, capsys):
    """`fpga report --record` copies build reports into the docs' report folder, from which the table in
    docs/fpga.md is generated."""
    import json

    from tilewright.cli import docgen
    report = {"board": "ulx3s-45f", "title": "ULX3S", "config": "compact", "clock_mhz": 25.0, "seed": 3,
              "fmax": {"clk": {"achieved_mhz": 31.5, "constraint_mhz": 25.0}}, "timing_met": True,
              "synthesis": {"LUT": {"used": 100, "available": 43848}}, "seconds": {"place_and_route": 60.0}}
    build = tmp_path / "build" / "one"
    build.mkdir(parents=True)
    (build / "report.json").write_text(json.dumps(report))
    monkeypatch.setattr(docgen, "FPGA_REPORTS", tmp_path / "recorded")
    assert main(["fpga", "report", str(tmp_path / "build"), "--record"]) == 0
    recorded = tmp_path / "recorded" / "ulx3s-45f-compact-25MHz-seed3.json"
    assert json.loads(recorded.read_text()) == report
    table = docgen.fpga_build_table()
    assert "| ulx3s-45f | compact | 25 | 31.5 | met | 100/43848 |" in table and "1 recorded build " in table
    assert "recorded" in capsys.readouterr().out


def _fake_tool(path, body):
    path.write_text(f"#!{sys.executable}\nimport json, sys, time\n" + body)
    path.chmod(0o755)
    return str(path)


_OUTPUTS = {"F", "O", "SUM", "COUT", "CO", "Q", "DO"}


def _netlist(cells):
    """A Yosys JSON netlist of module ``top`` from ``{name: (type, {port: [bits]})}`` (the ports in
    ``_OUTPUTS`` are outputs, the others inputs)."""
    return {"modules": {"top": {"cells": {
        name: {"type": kind, "connections": ports,
               "port_directions": {port: "output" if port in _OUTPUTS else "input" for port in ports}}
        for name, (kind, ports) in cells.items()}}}}


def _fake_yosys(tmp_path, monkeypatch, *, lone_ffs=0):
    """A Yosys that "synthesises" any design to ten LUT4s (and a chain of ``lone_ffs`` flip-flops after the
    one a LUT feeds), so a build goes straight on to nextpnr."""
    cells = {"lut": ("LUT4", {"F": [2]}), "ff": ("DFF", {"D": [2], "Q": [3]})}
    cells.update({f"ff{k}": ("DFF", {"D": [3 + k], "Q": [4 + k]}) for k in range(lone_ffs)})
    monkeypatch.setenv("YOSYS", _fake_tool(tmp_path / "yosys", (
        "if '--version' in sys.argv: print('Yosys (fake)'); sys.exit()\n"
        "open('stat.json', 'w').write(json.dumps({'modules': {'\\\\top': {'num_cells_by_type': {'LUT4': 10}}}}))\n"
        f"open('top.json', 'w').write({json.dumps(json.dumps(_netlist(cells)))})\n")))


def test_lone_flip_flops_are_those_no_lut_or_alu_of_their_own_feeds():
    """A Gowin flip-flop shares a slice only with the LUT or ALU driving its D input, and a LUT with one
    flip-flop: the others each take a LUT site of their own."""
    netlist = _netlist({
        "lut": ("LUT3", {"F": [10]}), "alu": ("ALU", {"SUM": [11], "COUT": [12]}), "ram": ("RAM16SDP4", {"DO": [13]}),
        "ff_lut": ("DFFE", {"D": [10], "Q": [20]}), "ff_lut_again": ("DFF", {"D": [10], "Q": [21]}),
        "ff_alu": ("DFFR", {"D": [11], "Q": [22]}), "ff_carry": ("DFF", {"D": [12], "Q": [23]}),
        "ff_ram": ("DFF", {"D": [13], "Q": [24]}), "ff_ff": ("DFF", {"D": [20], "Q": [25]}),
    })
    assert lone_flip_flops(netlist) == 4      # the second of the LUT's, the carry's, the RAM's, the copy


def test_an_ice40_flip_flop_shares_a_cell_only_with_a_lut_feeding_nothing_else():
    """An iCE40 logic cell has one output: its LUT's or its flip-flop's."""
    netlist = _netlist({
        "lut": ("SB_LUT4", {"O": [10]}), "lut_also_used": ("SB_LUT4", {"O": [11]}),
        "reader": ("SB_LUT4", {"I0": [11], "O": [14]}), "carry": ("SB_CARRY", {"CO": [12]}),
        "ff_lut": ("SB_DFFE", {"D": [10], "Q": [20]}), "ff_shared": ("SB_DFF", {"D": [11], "Q": [21]}),
        "ff_carry": ("SB_DFF", {"D": [12], "Q": [22]}), "ff_ff": ("SB_DFFSR", {"D": [20], "Q": [23]}),
    })
    assert lone_flip_flops(netlist, "ice40") == 3     # all but the one whose LUT feeds it alone


def test_an_ice40_build_counts_logic_cells_not_luts(tmp_path, monkeypatch, capsys):
    """The iCE40 fit check counts the cells the flip-flops without a LUT of their own add: a design of
    5,000 LUT4s and 400 such flip-flops does not fit the UP5K's 5,280 cells."""
    cells = {f"lut{k}": ("SB_LUT4", {"O": [10 + k]}) for k in range(3)}
    cells.update({f"ff{k}": ("SB_DFF", {"D": [100 + k], "Q": [101 + k]}) for k in range(400)})
    monkeypatch.setenv("YOSYS", _fake_tool(tmp_path / "yosys", (
        "if '--version' in sys.argv: print('Yosys (fake)'); sys.exit()\n"
        "open('stat.json', 'w').write(json.dumps({'modules': {'\\\\top': {'num_cells_by_type': "
        "{'SB_LUT4': 5000, 'SB_DFF': 400}}}}))\n"
        f"open('top.json', 'w').write({json.dumps(json.dumps(_netlist(cells)))})\n")))
    assert main(["fpga", "build", "--board", "icebreaker", "-o", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "logic cells (LUT4s, and flip-flops and carries no LUT of theirs shares a " \
        "cell with) 5400 needed, 5280 available" in err


def test_an_ice40_carry_takes_a_cell_unless_a_lut_on_its_inputs_shares_it():
    """An SB_CARRY shares a logic cell with a LUT whose I1/I2 are its I0/I1; a chain whose carry-in comes
    from the logic takes a cell more to bring it in."""
    netlist = _netlist({
        "sum": ("SB_LUT4", {"I1": [1], "I2": [2], "O": [10]}),
        "c0": ("SB_CARRY", {"I0": [1], "I1": [2], "CI": ["0"], "CO": [20]}),     # with `sum`, from 0
        "c1": ("SB_CARRY", {"I0": [3], "I1": [4], "CI": [20], "CO": [21]}),      # alone, chained
        "c2": ("SB_CARRY", {"I0": [1], "I1": [2], "CI": [5], "CO": [22]}),       # with `sum`, fed from logic
    })
    assert lone_carries(netlist) == 2


@pytest.mark.parametrize("usage,lone_ffs,message", [
    (("9734/   8640   112%", "2556/   6480    39%"), 0, "LUT4 9734 needed, 8640 available"),
    # 99 % of the LUT4 sites (ALUs included) are taken before the flip-flops that need a site of their own
    (("8597/   8640    99%", "2330/   6480    35%"), 2129,
     "LUT4 sites (with 2129 for flip-flops no LUT of theirs feeds) 10726 needed, 8640 available"),
], ids=["lut4", "lut4+lone-ffs"])
def test_build_stops_when_the_packed_design_does_not_fit(usage, lone_ffs, message, tmp_path, monkeypatch, capsys):
    """nextpnr-himbaechel goes on placing a design its packer found too big (and never finishes): the
    build reads the packer's utilisation, stops the tool and says what does not fit, in one line."""
    _fake_yosys(tmp_path, monkeypatch, lone_ffs=lone_ffs)
    monkeypatch.setenv("NEXTPNR_HIMBAECHEL", _fake_tool(tmp_path / "nextpnr", (
        "if '--version' in sys.argv: print('nextpnr (fake)'); sys.exit()\n"
        f"print('Info: Device utilisation:\\nInfo: \\t    LUT4:    {usage[0]}\\n'\n"
        f"      'Info: \\t     ALU:    {usage[1]}\\nInfo: \\t     DFF:    5966/   6480    92%', flush=True)\n"
        "time.sleep(600)\n")))
    started = time.monotonic()
    assert main(["fpga", "build", "--board", "tangnano9k", "-o", str(tmp_path / "out")]) == 1
    assert time.monotonic() - started < 60
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit" in err and message in err


def _fake_gowin_tools(tmp_path, monkeypatch, per_seed):
    """Fake Yosys, nextpnr-himbaechel and Gowin packer, working in ``tmp_path``: the fake nextpnr runs
    ``per_seed`` (Python, with ``seed`` the seed given) and reports the Fmax it sets, ``fmax``, for 27 MHz."""
    monkeypatch.chdir(tmp_path)
    _fake_yosys(tmp_path, monkeypatch)
    monkeypatch.setenv("NEXTPNR_HIMBAECHEL", _fake_tool(tmp_path / "nextpnr", (
        "if '--version' in sys.argv: print('nextpnr (fake)'); sys.exit()\n"
        "seed = sys.argv[sys.argv.index('--seed') + 1]\n" + per_seed +
        "open('pnr_report.json', 'w').write(json.dumps({'fmax': {'clk': {'achieved': fmax, 'constraint': 27.0}}}))\n")))
    monkeypatch.setenv("GOWIN_PACK", _fake_tool(tmp_path / "pack", "open('top.fs', 'w').write('0101')\n"))


def test_a_seed_that_fails_leaves_the_others_reported(tmp_path, monkeypatch, capsys):
    """Place and route failing for one seed is that seed's report and error; the other seeds' bitstreams
    and reports stand, and the command exits 1 saying how many failed."""
    _fake_gowin_tools(tmp_path, monkeypatch,
                      "if seed == '2': print('ERROR: no route for net x'); sys.exit(1)\nfmax = 50.0\n")
    assert main(["fpga", "build", "--board", "tangnano9k", "--seed", "1", "2"]) == 1
    captured = capsys.readouterr()
    assert "seed 2: nextpnr failed" in captured.out and "ERROR: no route for net x" in captured.out
    assert captured.err.count("\n") == 1 and "1 of 2 seeds failed" in captured.err
    folder = tmp_path / "build/fpga/tangnano9k-pico-27MHz-seed{}"
    ok, failed = (json.loads((Path(str(folder).format(seed)) / "report.json").read_text()) for seed in (1, 2))
    assert ok["ok"] and ok["timing_met"] and Path(ok["bitstream"]).is_file()
    assert not failed["ok"] and "no route for net x" in failed["error"]


def test_a_seed_sweep_stops_at_the_first_seed_that_meets_timing(tmp_path, monkeypatch, capsys):
    """``--until-met`` places the seeds in order and starts none after one meets timing: seed 1 fails, seed 2
    misses 27 MHz, seed 3 meets it, seed 4 is never placed (an earlier build's report there is removed),
    and the command succeeds naming seed 3's bitstream."""
    _fake_gowin_tools(tmp_path, monkeypatch, "if seed == '1': print('ERROR: no route for net x'); sys.exit(1)\n"
                                             "fmax = {'2': 20.0, '3': 30.0, '4': 40.0}[seed]\n")
    folder = "build/fpga/tangnano9k-pico-27MHz-seed{}"
    (tmp_path / folder.format(4)).mkdir(parents=True)
    (tmp_path / folder.format(4) / "report.json").write_text("{}")
    assert main(["fpga", "build", "--board", "tangnano9k", "--seed", "1", "2", "3", "4", "--jobs", "1",
                 "--until-met"]) == 0
    out = capsys.readouterr().out
    assert f"timing met at 27 MHz with seed 3 of 3 placed: {folder.format(3)}/top.fs" in out
    failed, missed = (json.loads((tmp_path / folder.format(seed) / "report.json").read_text()) for seed in (1, 2))
    assert "no route for net x" in failed["error"] and missed["timing_met"] is False
    assert not (tmp_path / folder.format(4) / "report.json").exists()


def test_a_gowin_log_without_the_packers_figures_yet_is_no_misfit(tmp_path):
    """The build polls nextpnr's log while it runs: before the packer reports its utilisation there is
    nothing to compare the flip-flops that need a LUT site of their own with (this stopped a design that
    fits, saying 0 sites were available)."""
    from tilewright.fpga.build import _overused
    log = tmp_path / "pnr.log"
    log.write_text("Info: Using uarch 'gowin' for device 'GW1NR-LV9QN88PC6/I5'\n")
    assert _overused(log, "gowin", lone_ffs=2429) is None
    log.write_text(log.read_text() + "Info: Device utilisation:\nInfo: \t    LUT4:    6000/   8640    69%\n")
    assert _overused(log, "gowin", lone_ffs=2429) is None
    log.write_text(log.read_text().replace("6000/", "6300/"))
    assert _overused(log, "gowin", lone_ffs=2429) == (
        "LUT4 sites (with 2429 for flip-flops no LUT of theirs feeds)", 8729, 8640)


@pytest.mark.parametrize("failing_pass,retried", [("ABC_OPS_REINTEGRATE pass", True), ("ABC9", True),
                                                  ("PROC pass", False)])
def test_synthesis_retries_with_the_classic_mapper_only_when_abc9_fails(failing_pass, retried, tmp_path, monkeypatch):
    """YoWASP's Yosys sometimes asserts (or quits silently) inside ABC9 on a design the classic LUT mapper
    maps; an error anywhere else is the design's and is reported as it is."""
    monkeypatch.setenv("YOSYS", _fake_tool(tmp_path / "yosys", (
        "script = sys.argv[sys.argv.index('-p') + 1]\n"
        "log = open(sys.argv[sys.argv.index('-l') + 1], 'w')\n"
        "if 'abc -lut' not in script:\n"
        f"    log.write('2.46.18.7. Executing {failing_pass}.\\nERROR: Assert failed in rtlil.cc\\n'); sys.exit(1)\n"
        "open('stat.json', 'w').write('{}'); open('top.json', 'w').write('{}')\n")))
    (tmp_path / "top.il").write_text("")
    if retried:
        _, mapper = synthesise("ecp5", tmp_path, progress=lambda line: None)
        assert mapper == "abc" and "Assert" in (tmp_path / "synth.abc9.log").read_text()
    else:
        with pytest.raises(BuildError, match="Assert failed"):
            synthesise("ecp5", tmp_path, progress=lambda line: None)
