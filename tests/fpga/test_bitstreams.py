"""Real bitstreams in every test run: the link-test SoC (UART, host bridge, on-chip memory; no
accelerator, which takes 35 minutes or more to place and route on the ECP5) built for one board of each
family, and the whole SoC at the smallest board preset (the Tang Nano 9K's ``pico``, a few minutes), with
the YoWASP tools, through the same flow as ``tilewright fpga build``. The bitstreams are checked against
the device families' documented formats, not against our own code."""

import json

import pytest

from tilewright.cli import main
from tilewright.config import load_config
from tilewright.fpga.boards import get_board
from tilewright.fpga.build import REPORT_NAME

#: A family's bitstream file and bytes its format requires: the iCE40 and ECP5 sync words, Gowin's
#: text bitstream (lines of 0 and 1).
FORMATS = {"ice40": ("top.bin", bytes.fromhex("7eaa997e")), "ecp5": ("top.bit", bytes.fromhex("ffffbdb3")),
           "gowin": ("top.fs", None)}


@pytest.mark.parametrize("board_name", ["icebreaker", "ulx3s-45f", "tangnano9k"])
def test_link_test_bitstream(board_name, tmp_path, capsys):
    board = get_board(board_name)
    out = tmp_path / board_name
    assert main(["fpga", "build", "--board", board_name, "--link-test", "-o", str(out)]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(f"{board_name} link-test: Fmax") and "(met)" in summary

    report = json.loads((out / REPORT_NAME).read_text())
    assert report["ok"] and report["timing_met"] and report["config"] == "link-test"
    assert all(v["achieved_mhz"] >= v["constraint_mhz"] >= board.freq_mhz - 0.5 for v in report["fmax"].values())
    used = report["synthesis"]
    assert 0 < used["LUT"]["used"] <= used["LUT"]["available"] == board.resources["LUT"]
    assert report["critical_path"]["ns"] > 0

    _check_bitstream(board, out, report)


def _check_bitstream(board, out, report):
    name, sync = FORMATS[board.family]
    bitstream = (out / name).read_bytes()
    assert report["bitstream"] == str(out / name)
    if sync is not None:
        assert sync in bitstream[:256]
    else:
        lines = bitstream.decode("ascii").split()
        assert len(lines) > 100 and all(set(line) <= {"0", "1"} for line in lines if not line.startswith("//"))


def test_the_smallest_board_preset_synthesises_and_fits(tmp_path, capsys):
    """The accelerator itself: the Tang Nano 9K at its preset (``pico``, which runs the compiled models)
    synthesised and fitted, with its DSPs and block RAM in use. (Its place and route takes 5-8 minutes on
    these machines: `make fpga` builds the bitstream, the link tests here build real ones.)"""
    board = get_board("tangnano9k")
    out = tmp_path / "pico"
    assert main(["fpga", "build", "--board", "tangnano9k", "--synth-only", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-2].startswith("tangnano9k pico: LUT") and lines[-1].startswith("fits ")
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["ok"] and report["timing_met"] is None and report["config"] == board.config
    assert report["fingerprint"] == load_config(board.config).fingerprint
    used = report["synthesis"]
    assert all(0 < used[kind]["used"] <= used[kind]["available"] for kind in ("LUT", "FF", "DSP", "BRAM"))
    assert not list(out.glob("top.fs"))


def test_the_icebreaker_preset_is_a_bitstream_meeting_its_clock(tmp_path, capsys):
    """An accelerator bitstream: the iCEBreaker at its preset (``tiny_serial``, about 96 % of the UP5K's logic
    cells, so a change that grows it fails here) placed and routed at 24 MHz with timing met, in 2.5-5
    minutes."""
    board = get_board("icebreaker")
    out = tmp_path / "tiny_serial"
    assert main(["fpga", "build", "--board", "icebreaker", "-o", str(out)]) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(f"icebreaker {board.config}: Fmax") and "(met)" in summary
    report = json.loads((out / REPORT_NAME).read_text())
    assert report["ok"] and report["timing_met"] and report["fingerprint"] == load_config(board.config).fingerprint
    cells = report["utilization"]["ICESTORM_LC"]
    assert 0.5 * cells["available"] < cells["used"] <= cells["available"]
    assert report["utilization"]["ICESTORM_DSP"]["used"] > 0 and report["utilization"]["ICESTORM_RAM"]["used"] > 0
    _check_bitstream(board, out, report)


def test_several_seeds_share_one_synthesis_and_report_their_spread(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["fpga", "build", "--board", "icebreaker", "--link-test", "--seed", "1", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("synthesizing (Yosys)") == 1
    folders = [tmp_path / f"build/fpga/icebreaker-link-test-24MHz-seed{seed}" for seed in (1, 2)]
    reports = [json.loads((folder / REPORT_NAME).read_text()) for folder in folders]
    assert [r["seed"] for r in reports] == [1, 2] and all(r["timing_met"] for r in reports)
    assert all((folder / "top.bin").is_file() for folder in folders)
    fmax = sorted(min(v["achieved_mhz"] for v in r["fmax"].values()) for r in reports)
    assert f"Fmax over seeds 1, 2: {fmax[0]:.1f}-{fmax[1]:.1f} MHz" in out
    assert main(["fpga", "report"]) == 0
    assert "* icebreaker link-test at 24 MHz: Fmax over seeds 1, 2" in capsys.readouterr().out
