"""Verilog output: lint-clean with the documented waivers, and nothing else waived."""

import re

import pytest

from tilewright import PRESETS
from tilewright.cli import main
from tilewright.sim.rtl import LINT_WAIVERS, lint

WAIVED = set(re.findall(r"lint_off -rule (\w+)", LINT_WAIVERS.read_text()))


@pytest.mark.parametrize("config", list(PRESETS))
def test_verilog_passes_lint(config, tmp_path, capsys):
    out = tmp_path / f"{config}.v"
    assert main(["verilog", "--config", config, "-o", str(out), "--lint"]) == 0
    assert "module top" in out.read_text()
    assert "no warnings" in capsys.readouterr().out
    # Without the waivers, only the waived (and explained) classes appear.
    passed, messages = lint(out, waivers=False)
    classes = set(re.findall(r"%Warning-(\w+)", messages))
    assert classes <= WAIVED, f"unwaived lint warnings: {classes - WAIVED}"


def test_waiver_list_is_short_and_explained():
    text = LINT_WAIVERS.read_text()
    assert len(WAIVED) <= 4
    for rule in WAIVED:
        assert re.search(rf"//.*{rule}", text), f"{rule} has no reason"
