"""The co-design search: its candidates, its front, its log, and a small search end to end (Yosys synthesis
for the ULX3S-85F, RTL cycles with the board's SDRAM) that a second run and a killed run resume."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tilewright.cli import main
from tilewright.compiler.tune import LocalRunner
from tilewright.config import load_config
from tilewright.runtime.model import load_model
from tilewright.fpga.codesign import (RESOURCES, SearchError, SearchLog, _setting, knobs, neighbours, pareto_front,
                                      search)

DIGITS = Path(__file__).parents[2] / "examples" / "digits" / "digits_cnn.onnx"


def _differing_knobs(a, b, ladders):
    return [k for k in ladders if _setting(a, k) != _setting(b, k)]


def test_neighbours_are_one_rung_of_one_knob_away():
    """Each neighbour of a config differs from it in one knob by one rung of that knob's ladder, is valid and
    named by its fingerprint; the preset's own values are rungs; stepping back reaches the config again."""
    base = load_config("slim")
    ladders = knobs(base)
    assert all(_setting(base, k) in ladder for k, ladder in ladders.items())
    assert ladders["gemm"] == ((8, 8, 4), (8, 8, 0), (16, 8, 0), (16, 16, 8), (16, 16, 0))
    assert ladders["wgt_buffer_bytes"] == (16384, 32768, 65536, 131072, 262144)
    for cfg in (base, *neighbours(base, ladders, base)[:6]):
        around = neighbours(cfg, ladders, base)
        assert len({c.fingerprint for c in around}) == len(around) and cfg not in around
        for other in around:
            (knob,) = _differing_knobs(cfg, other, ladders)
            ladder = ladders[knob]
            assert abs(ladder.index(_setting(cfg, knob)) - ladder.index(_setting(other, knob))) == 1
            assert other.name == ("slim" if other == base else f"dse-{other.fingerprint[:8]}")
            assert other.lean == base.lean
            assert cfg in neighbours(other, ladders, base)
    assert len(neighbours(base, ladders, base)) == 12      # (two a knob; one where slim is at an end: STORE, bus)


def test_a_config_as_toml_loads_back(tmp_path):
    base = load_config("slim")
    for cfg in neighbours(base, knobs(base), base):
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


def _search(out, runner, **options):
    return search(DIGITS.read_bytes(), "ulx3s-85f", out, runner=runner, limit=2, trials=2,
                  **{"place": False, "finalists": 2, **options}, progress=lambda line: None)


@pytest.fixture(scope="module")
def small_search(tmp_path_factory):
    """Two configs for the digits CNN on the ULX3S-85F at 50 MHz, both finalists, their layers tuned (two
    points a layer), two workers, no place and route."""
    out = tmp_path_factory.mktemp("dse")
    with CountingRunner(2) as runner:
        summary = _search(out, runner)
    return out, summary, runner.submitted


def test_a_search_measures_tunes_and_resumes(small_search):
    """The preset and one step from it, each synthesised once and measured once (outputs equal to fsim's); the
    finalists' layers tuned with the board's SDRAM and measured again with those schedules; the front's
    latency is the cycles at the clock; the winner's TOML, tuning records and model (with them) are written.
    Run again, the search submits nothing and gives the same front; with its log cut after the syntheses (a
    search killed then), it measures again but neither synthesises nor tunes."""
    out, summary, submitted = small_search
    finalists = len(summary["finalists"])
    assert finalists == 2 and submitted.count("synthesis_job") == 2 and submitted.count("cycles_job") == 4
    assert submitted.count("measure") >= finalists and set(submitted) == {"synthesis_job", "cycles_job", "measure"}
    assert summary["measured"] == 2 and summary["preset"]["config"] == "slim" and summary["front"]
    assert summary["rounds"][0]["from"] == "slim" and len(summary["rounds"][0]["tried"]) == 1
    for point in summary["points"]:
        assert point["latency_s"] == pytest.approx(point["cycles"] / 50e6)
        assert all(point[k] > 0 for k in ("LUT", "FF", "DSP", "BRAM"))
        assert point["schedules"] == "tuned" and point["cycles"] <= point["heuristic_cycles"]
    winner = summary["winner"]
    assert load_config(out / "winner.toml").fingerprint == winner["fingerprint"]
    records = [json.loads(line) for line in (out / "winner_tuning.jsonl").read_text().splitlines()]
    assert records and all(r["fingerprint"] == winner["fingerprint"] and r["memory"] for r in records)
    model = load_model(out / "winner.twm")
    assert model.config.fingerprint == winner["fingerprint"]
    assert {s["schedule"] for s in model.meta["schedules"]} == {"tuned"}
    assert (out / "front.png").exists() and "## Winner" in (out / "summary.md").read_text()
    assert json.loads((out / "front.json").read_text())["front"] == summary["front"]

    with CountingRunner(2) as runner:
        again = _search(out, runner)
    assert runner.submitted == [] and again["front"] == summary["front"]

    log = out / "log.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0]] + [line for line in lines[1:] if '"synthesis"' in line]) + "\n")
    with CountingRunner(2) as runner:
        resumed = _search(out, runner)
    assert runner.submitted == ["cycles_job"] * 4 and resumed["front"] == summary["front"]


def test_the_winner_is_the_fastest_at_the_fmax_it_met(small_search, tmp_path):
    """With place-and-route results in the log, the winner is the finalist whose bitstream met the clock and
    whose cycles at its Fmax are fewest, compared with the preset at the preset's Fmax; a finalist whose seeds
    all missed the clock is not the winner, however fast; and the next seed is placed only after one missed."""
    out, summary, _ = small_search
    copy = tmp_path / "dse"
    copy.mkdir()
    for name in ("log.jsonl", "tuning.jsonl"):
        shutil.copyfile(out / name, copy / name)
    points = {p["config"]: p for p in summary["points"]}
    fast, slow = sorted(points.values(), key=lambda p: p["cycles"])
    header = json.loads((copy / "log.jsonl").read_text().splitlines()[0])
    log = SearchLog(copy / "log.jsonl", {k: v for k, v in header.items() if k not in ("format", "version")})
    slim = load_config("slim")          # (the log keeps a config's name beside its key; the keys are what count)
    # the faster config misses 50 MHz at every seed; the slower meets it at its second seed (its third is never
    # placed: no job is submitted)
    for s, fmax in ((1, 40.0), (2, 45.0), (3, 49.0)):
        log.add("place", f"{fast['fingerprint']}@50#{s}", slim,
                {"seed": s, "fmax_mhz": fmax, "met": False, "error": None, "seconds": 1})
    for s, fmax in ((1, 48.0), (2, 61.5)):
        log.add("place", f"{slow['fingerprint']}@50#{s}", slim,
                {"seed": s, "fmax_mhz": fmax, "met": fmax >= 50, "error": None, "seconds": 1})
    folder = copy / "place" / f"{slow['fingerprint']}-50MHz-seed2"
    folder.mkdir(parents=True)
    (folder / "top.bit").write_bytes(b"bits")
    (folder / "report.json").write_text(json.dumps({"bitstream": "/elsewhere/top.bit"}))
    with CountingRunner(1) as runner:
        placed = _search(copy, runner, place=True)
    assert runner.submitted == []
    by_name = {p["config"]: p for p in placed["points"]}
    assert by_name[fast["config"]]["fmax_mhz"] == 49.0 and not by_name[fast["config"]]["timing_met"]
    assert by_name[slow["config"]]["latency_at_fmax_s"] == pytest.approx(slow["cycles"] / 61.5e6)
    assert placed["winner"]["config"] == slow["config"] and (copy / "winner.bit").read_bytes() == b"bits"
    # (the preset, at the Fmax its seeds reached, met or not)
    preset_fmax = 61.5 if placed["preset"]["config"] == slow["config"] else 49.0
    assert placed["compared_on"] == "latency_at_fmax_s" and placed["speedup_over_preset"] == pytest.approx(
        placed["preset"]["cycles"] / preset_fmax / (slow["cycles"] / 61.5))


def test_a_step_of_the_climb_is_placed_only_while_it_could_win():
    """A config not yet placed could win when its cycles at the highest Fmax any placed config reached take
    less time than the fastest config that met the clock at its own Fmax; before any Fmax, every one could."""
    from tilewright.fpga.codesign import _could_win
    slim = load_config("slim")
    preset, fastest, step, small = (slim.replace(name=n, wgt_buffer_bytes=b << 10)
                                    for n, b in (("preset", 32), ("fastest", 64), ("step", 128), ("small", 16)))
    tie = slim.replace(name="tie", acc_buffer_bytes=16 << 10)
    counts = {"preset": 37_000, "fastest": 21_000, "step": 22_000, "small": 36_000, "tie": 27_500}
    def cycles(cfg):
        return counts[cfg.name]
    def placement(seed, fmax, met):
        return {"seed": seed, "fmax_mhz": fmax, "met": met, "error": None, "seconds": 1}
    candidates = [step, small]
    assert _could_win(candidates, [preset, fastest], cycles, {preset.fingerprint: [], fastest.fingerprint: []}) \
        == candidates
    # the preset met the clock at its second seed and reached 100 MHz there (370 us); the fastest missed it at
    # 70 (300 us, but no bitstream): at 100 MHz the step (220 us) and the small config (360 us) could both win
    reached = {preset.fingerprint: [placement(1, 60.0, False), placement(2, 100.0, True)],
               fastest.fingerprint: [placement(1, 50.0, False), placement(2, 70.0, False)]}
    assert _could_win(candidates, [preset, fastest], cycles, reached) == candidates
    # the step then met the clock at 80 MHz (275 us): the small config, 360 us at 100 MHz, could not win
    reached[step.fingerprint] = [placement(1, 80.0, True)]
    assert _could_win([small], [preset, fastest, step], cycles, reached) == []
    # a config whose cycles at the highest Fmax tie the best is not placed; one a cycle fewer is
    assert _could_win([tie], [preset, step], cycles, reached) == []
    counts["tie"] -= 1
    assert _could_win([tie], [preset, step], cycles, reached) == [tie]


def test_dse_command_errors(tmp_path, capsys):
    for argv, message in ((["--board", "nosuch"], "unknown board 'nosuch'"),
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


def test_a_layer_too_large_for_a_boards_memory_is_said(monkeypatch):
    """On a board that runs its programs from on-chip memory, a config's layers must each fit it: the search's
    check agrees with a device of that many bytes, which runs the model at the smallest size the check passes
    and fails 64 bytes below it."""
    from tilewright.examples.digits.demo import load_split
    from tilewright.fpga.codesign import _too_large
    from tilewright.runtime.device import DeviceError, FsimDevice
    from tilewright.runtime.model import compile_model
    from tilewright.sim.dram import DramError
    cfg = load_config("tiny")
    x_train, _, x_test, _ = load_split()
    model = compile_model(DIGITS.read_bytes(), cfg, calibration=x_train[:20])
    assert _too_large(model, 64 * 1024) is None
    fits = next(n for n in range(64, 64 * 1024, 64) if _too_large(model, n) is None)
    assert "needs" in _too_large(model, fits - 64)
    expected = model.run(x_test[:1])
    for nbytes in (fits, fits - 64):
        monkeypatch.setattr("tilewright.runtime.model.get_device", lambda *a, **k: FsimDevice(cfg, dram_bytes=nbytes))
        if nbytes == fits:
            got = model.run(x_test[:1])
            assert all(np.array_equal(got[k], expected[k]) for k in expected)
        else:
            with pytest.raises((DeviceError, DramError)):
                model.run(x_test[:1])


def test_a_config_that_does_not_fit_says_what_it_needs(tmp_path):
    """The iCEBreaker's preset with a 64-bit bus: its LUTs fit the UP5K, but not with the flip-flops that share
    no logic cell with a LUT; the search's result says so, not just the LUT count."""
    from tilewright.fpga.boards import get_board
    from tilewright.fpga.codesign import synthesis_job
    cfg = load_config("tiny_serial").replace(dram_bus_width=64, name="tiny_serial_wide")
    result = synthesis_job("icebreaker", cfg.params(), cfg.name, str(tmp_path))
    cells = get_board("icebreaker").resources["LUT"]
    assert not result["fits"] and result["resources"]["LUT"] <= cells
    assert result["over"].startswith("logic cells") and result["over"].endswith(f"{cells} available")
