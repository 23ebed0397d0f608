"""The co-design search: its candidates, its front, its log, and a small search end to end (Yosys synthesis
for the ULX3S-85F, RTL cycles with the board's SDRAM) that a second run and a killed run resume."""

import json
from pathlib import Path

import numpy as np
import pytest

from tilewright.cli import main
from tilewright.compiler.tune import LocalRunner
from tilewright.config import load_config
from tilewright.fpga.codesign import RESOURCES, SearchError, SearchLog, candidates, pareto_front, search

DIGITS = Path(__file__).parents[2] / "examples" / "digits" / "digits_cnn.onnx"


def test_candidates_around_a_preset():
    """The preset first, then valid configs of one GEMM shape and buffers each, the preset's options kept; a
    TOML of any of them loads back to the same config."""
    base = load_config("slim")
    pool = candidates("slim")
    assert pool[0] is base and len({c.fingerprint for c in pool}) == len(pool) > 10
    assert {c.block_in for c in pool} == {8, 16} and {c.gemm_lanes for c in pool} >= {0, 4, 8}
    assert all(c.lean == base.lean and c.vector_lanes == base.vector_lanes for c in pool)
    assert any(c.wgt_buffer_bytes > base.wgt_buffer_bytes and c.block_in == 8 for c in pool)


def test_a_config_as_toml_loads_back(tmp_path):
    for cfg in candidates("slim")[::9]:
        path = tmp_path / f"{cfg.name}.toml"
        path.write_text(cfg.toml())
        loaded = load_config(path)
        assert loaded == cfg and loaded.fingerprint == cfg.fingerprint and loaded.name == cfg.name


def test_pareto_front_against_every_pair():
    """The front holds exactly the points that no other point is no worse than in every measure and better
    in one (checked by comparing every pair with numpy)."""
    rng = np.random.default_rng(5)
    keys = ("latency_s",) + RESOURCES
    for _ in range(20):
        values = rng.integers(0, 6, (30, len(keys)))
        points = [dict(zip(keys, map(int, row)), n=n) for n, row in enumerate(values)]
        no_worse = (values[:, None, :] <= values[None, :, :]).all(axis=2)
        better = (values[:, None, :] < values[None, :, :]).any(axis=2)
        dominated = (no_worse & better).any(axis=0)          # [q]: some p dominates q
        assert [p["n"] for p in pareto_front(points)] == [n for n in range(30) if not dominated[n]]


def test_a_log_of_another_search_is_refused(tmp_path):
    log = SearchLog(tmp_path / "log.jsonl", {"model": "a", "board": "ulx3s-85f", "freq_mhz": 50, "seed": 0})
    log.add("synthesis", "f1", load_config("slim"), {"fits": True, "resources": {"LUT": 1}})
    again = SearchLog(tmp_path / "log.jsonl", {"model": "a", "board": "ulx3s-85f", "freq_mhz": 50, "seed": 0})
    assert again.get("synthesis", "f1") == {"fits": True, "resources": {"LUT": 1}}
    with pytest.raises(SearchError, match=r"another search \(freq_mhz: 50 there, 75 here\)"):
        SearchLog(tmp_path / "log.jsonl", {"model": "a", "board": "ulx3s-85f", "freq_mhz": 75, "seed": 0})


class CountingRunner(LocalRunner):
    """Local worker processes that count what they are given."""

    def __init__(self, workers):
        super().__init__(workers)
        self.submitted = []

    def submit(self, fn, *args, **kwargs):
        self.submitted.append(fn.__name__)
        return super().submit(fn, *args, **kwargs)


@pytest.fixture(scope="module")
def small_search(tmp_path_factory):
    """Two candidates for the digits CNN on the ULX3S-85F at 50 MHz, two workers."""
    out = tmp_path_factory.mktemp("dse")
    with CountingRunner(2) as runner:
        summary = search(DIGITS.read_bytes(), "ulx3s-85f", out, runner=runner, limit=2, progress=lambda line: None)
    return out, summary, runner.submitted


def test_a_search_measures_fits_and_resumes(small_search):
    """Each candidate synthesised once and measured once (its output equal to fsim's); the front's latency is
    its cycles at the clock, the winner's TOML and model are written; run again, the search measures nothing
    and gives the same front; with its log cut after the syntheses (a search killed then), it measures again
    but synthesises nothing."""
    out, summary, submitted = small_search
    assert sorted(submitted) == ["cycles_job"] * 2 + ["synthesis_job"] * 2
    assert summary["measured"] == 2 and summary["preset"]["config"] == "slim" and summary["front"]
    for point in summary["front"]:
        assert point["latency_s"] == pytest.approx(point["cycles"] / 50e6)
        assert all(point[k] > 0 for k in ("LUT", "FF", "DSP", "BRAM"))
    assert load_config(out / "winner.toml").fingerprint == summary["winner"]["fingerprint"]
    assert (out / "winner.twm").exists() and (out / "front.png").exists()
    assert json.loads((out / "front.json").read_text())["front"] == summary["front"]

    with CountingRunner(2) as runner:
        again = search(DIGITS.read_bytes(), "ulx3s-85f", out, runner=runner, limit=2, progress=lambda line: None)
    assert runner.submitted == [] and again["front"] == summary["front"]

    log = out / "log.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0]] + [line for line in lines[1:] if '"synthesis"' in line]) + "\n")
    with CountingRunner(2) as runner:
        resumed = search(DIGITS.read_bytes(), "ulx3s-85f", out, runner=runner, limit=2, progress=lambda line: None)
    assert runner.submitted == ["cycles_job"] * 2 and resumed["front"] == summary["front"]


def test_dse_command_errors(tmp_path, capsys):
    for argv, message in ((["--board", "icebreaker"], "icebreaker has no SDRAM model"),
                          (["--board", "nosuch"], "unknown board 'nosuch'"),
                          (["--board", "ulx3s-85f", "--freq", "200"], "up to 143 MHz, not 200")):
        assert main(["dse", str(DIGITS), "-o", str(tmp_path / "d"), *argv]) == 1
        assert message in capsys.readouterr().err
    assert main(["dse", str(tmp_path / "none.onnx"), "--board", "ulx3s-85f", "-o", str(tmp_path / "d")]) == 1
    assert "cannot read model" in capsys.readouterr().err


def test_a_search_refuses_what_it_cannot_search_before_it_starts(tmp_path):
    """A file that is not ONNX stops the search before any synthesis and before the log is written (so the
    folder can take the corrected model); an output folder that is a file is one line from the CLI."""
    with LocalRunner(1) as runner:
        with pytest.raises(SearchError, match="not an ONNX file"):
            search(b"not a model", "ulx3s-85f", tmp_path / "a", runner=runner, progress=lambda line: None)
    assert not (tmp_path / "a" / "log.jsonl").exists()
    (tmp_path / "file").write_text("")
    assert main(["dse", str(DIGITS), "--board", "ulx3s-85f", "-o", str(tmp_path / "file")]) == 1


def test_a_log_cut_in_its_last_line_is_read(tmp_path):
    header = {"model": "a", "board": "ulx3s-85f", "freq_mhz": 50, "seed": 0}
    log = SearchLog(tmp_path / "log.jsonl", header)
    log.add("synthesis", "f1", load_config("slim"), {"fits": True, "resources": {"LUT": 1}})
    log.add("synthesis", "f2", load_config("slim"), {"fits": False, "resources": {"LUT": 2}})
    text = (tmp_path / "log.jsonl").read_text()
    (tmp_path / "log.jsonl").write_text(text[:-20])         # (killed while writing f2's line)
    again = SearchLog(tmp_path / "log.jsonl", header)
    assert again.get("synthesis", "f1") and again.get("synthesis", "f2") is None
    again.add("cycles", "f1", load_config("slim"), {"cycles": 5})        # (after the cut line, which is gone)
    assert SearchLog(tmp_path / "log.jsonl", header).get("cycles", "f1") == {"cycles": 5}
