"""``tilewright regress`` on a user's TOML: every suite passes, JUnit XML a CI can read, a mismatch leaves a
reproducer, the same cases on a two-worker Dask LocalCluster, and bad arguments give one line."""

import xml.etree.ElementTree as ET

import numpy as np
import pytest

from tilewright.cli import main
from tilewright.sim import differential


@pytest.fixture
def user_toml(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('base = "tiny"\n')      # (the tiny preset's parameters: its RTL build is shared with other tests)
    return path


def _junit(path):
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = {s.get("name").rsplit(".", 1)[1]: s for s in root.iter("testsuite")}
    for s in suites.values():
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(c.find("failure") is not None for c in cases)
    assert int(root.get("tests")) == sum(int(s.get("tests")) for s in suites.values())
    return suites


def test_regress_passes_on_a_user_config(user_toml, tmp_path, capsys):
    junit = tmp_path / "out" / "regress.xml"
    junit.parent.mkdir()
    assert main(["regress", "--config", str(user_toml), "--programs", "6", "--batch", "3", "--operators", "2",
                 "--workers", "1", "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "PASS: 14 of 14 cases passed" in out and "programs/s" in out
    suites = _junit(junit)
    assert {name: int(s.get("tests")) for name, s in suites.items()} == {
        "build": 1, "differential": 6, "operators": 2, "model": 1, "formal": 4}
    assert all(s.get("failures") == "0" for s in suites.values())
    names = [c.get("name") for c in suites["differential"].findall("testcase")]
    assert names == [f"seed {k}" for k in range(6)]


def test_a_mismatch_fails_the_run_and_leaves_a_reproducer(user_toml, tmp_path, capsys, monkeypatch):
    """fsim made wrong for seed 4 only: that program fails (alone too), the others pass."""
    original = differential.fsim_outcomes

    def wrong_for_seed_4(cfg, programs, *, dram_bytes):
        outcomes = original(cfg, programs, dram_bytes=dram_bytes)
        for program, outcome in zip(programs, outcomes):
            if program.seed == 4:
                dram = np.frombuffer(outcome.dram, np.uint8).copy()
                dram[0] ^= 0xFF
                outcome.dram = dram.tobytes()
        return outcomes
    monkeypatch.setattr(differential, "fsim_outcomes", wrong_for_seed_4)
    junit, repro = tmp_path / "r.xml", tmp_path / "repro"
    assert main(["regress", "--config", str(user_toml), "--programs", "6", "--batch", "3", "--operators", "0",
                 "--no-model", "--no-formal", "--workers", "1", "--junit", str(junit), "--repro", str(repro)]) == 1
    out = capsys.readouterr().out
    assert "FAIL: 6 of 7 cases passed" in out
    failures = [c for c in _junit(junit)["differential"].findall("testcase") if c.find("failure") is not None]
    assert [c.get("name") for c in failures] == ["seed 4"]
    assert "DRAM differs at 1 bytes, first at 0x0" in failures[0].find("failure").get("message")
    folder = repro / "seed-4"
    from tilewright.config import load_config
    from tilewright.sim.fuzz import random_program
    program = random_program(load_config("tiny"), 4)
    assert (folder / "dram.bin").read_bytes() == program.dram
    assert (folder / "program.s").read_text().strip() == program.listing().strip()
    readme = (folder / "README").read_text()
    assert "seed 4" in readme and "fails on its own" in readme


def test_a_two_worker_local_cluster_runs_the_same_cases(user_toml, tmp_path, capsys):
    junit = tmp_path / "r.xml"
    assert main(["regress", "--config", str(user_toml), "--programs", "8", "--batch", "2", "--operators", "1",
                 "--no-model", "--no-formal", "--workers", "2", "--junit", str(junit)]) == 0
    out = capsys.readouterr().out
    assert "2 Dask worker thread(s) on a local Dask cluster" in out
    names = sorted(c.get("name") for c in _junit(junit)["differential"].findall("testcase"))
    assert names == sorted(f"seed {k}" for k in range(8))


@pytest.mark.parametrize("args, message", [
    (["--junit", "/no/such/folder/r.xml"], "cannot write /no/such/folder/r.xml: no directory /no/such/folder"),
    (["--scheduler", "tcp://127.0.0.1:9"], "cannot reach the Dask scheduler at tcp://127.0.0.1:9"),
])
def test_bad_arguments_give_one_line(user_toml, args, message, capsys):
    assert main(["regress", "--config", str(user_toml), "--programs", "1", *args]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1


def test_a_count_of_zero_is_refused(user_toml, capsys):
    with pytest.raises(SystemExit):
        main(["regress", "--config", str(user_toml), "--programs", "0"])
    assert "is not a positive integer" in capsys.readouterr().err
