"""The rtl backend (Verilator + C++ harness) against fsim, and the bench command."""

import dataclasses
import json

import numpy as np
import pytest

import tilewright
from tilewright.cli import main
from tilewright.runtime.bench import chrome_trace
from tilewright.runtime.reference import conv2d_reference, dense_reference
from tilewright.sim.fast import DramTiming


@pytest.mark.parametrize("config", ["tiny", "small"])
def test_conv2d_on_the_rtl_equals_fsim_and_counts_cycles(config):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 12, 9, 9), dtype=np.int8)
    w = rng.integers(-128, 128, (10, 12, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 10, dtype=np.int32)
    r = rng.integers(-128, 128, (1, 10, 5, 5), dtype=np.int8)
    kw = dict(stride=2, padding=1, mul=5, shift=10, relu=True, residual=r, config=config)
    out_rtl, stats = tilewright.conv2d(x, w, b, backend="rtl", **kw)
    out_fsim, fstats = tilewright.conv2d(x, w, b, **kw)
    np.testing.assert_array_equal(out_rtl, out_fsim)
    np.testing.assert_array_equal(out_rtl, conv2d_reference(x, w, b, stride=2, padding=1, mul=5, shift=10,
                                                            relu=True, residual=r))
    for key in ("gemm_uops", "alu_uops", "dram_bytes_read", "dram_bytes_written", "instructions"):
        assert stats[key] == fstats[key], key
    assert stats["cycles"] >= stats["gemm_uops"]


def test_without_perf_counters_the_stats_hold_the_cycles_alone():
    from tilewright import PRESETS
    cfg = PRESETS["tiny"].replace(name="tiny_lean", perf_counters=False)
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, (2, 24), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 24), dtype=np.int8)
    out, stats = tilewright.dense(x, w, mul=3, shift=4, config=cfg, backend="rtl")
    np.testing.assert_array_equal(out, dense_reference(x, w, mul=3, shift=4))
    assert set(stats) == {"cycles", "counters"} and set(stats["counters"]) == {"cycles"} and stats["cycles"] > 0


def test_dense_on_the_rtl():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (3, 40), dtype=np.int8)
    w = rng.integers(-128, 128, (9, 40), dtype=np.int8)
    out, stats = tilewright.dense(x, w, mul=-7, shift=5, config="tiny", backend="rtl")
    np.testing.assert_array_equal(out, dense_reference(x, w, mul=-7, shift=5))
    assert stats["cycles"] > 0


def test_bench_command_on_fsim(tmp_path, capsys):
    path = tmp_path / "r18.json"
    assert main(["bench", "resnet18", "--backend", "fsim", "--layers", "C10,C11", "--json", str(path)]) == 0
    result = json.loads(path.read_text())
    assert [r["layer"] for r in result["layers"]] == ["C10", "C11"]
    assert all(r["macs"] > 0 and r["dram_bytes"] > 0 and r["cycles"] is None for r in result["layers"])
    assert "output equals numpy" in capsys.readouterr().out
    assert main(["bench", "resnet18", "--layers", "C99"]) == 1


def test_the_roofline_chart_places_each_layer_by_intensity_and_rate(tmp_path):
    """x = MACs per DRAM byte, y = MACs per cycle; the roof rises with the bus's bytes per cycle up to the
    ridge, then stays at the GEMM's MACs per cycle. A tuned layer's heuristic run is drawn beside it."""
    from tilewright.runtime.bench import roofline_plot
    cfg = tilewright.PRESETS["default"]
    records = [{"layer": "C2", "macs": 115_605_504, "cycles": 480_000, "dram_bytes": 1_300_000, "schedule": "tuned",
                "default": {"cycles": 520_000, "dram_bytes": 1_700_000}},
               {"layer": "C10", "macs": 25_690_112, "cycles": 190_000, "dram_bytes": 2_600_000,
                "schedule": "heuristic"}]
    path = tmp_path / "roofline.png"
    drawn = roofline_plot(records, path, cfg)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for r in records:
        assert drawn["points"][r["layer"]] == pytest.approx((r["macs"] / r["dram_bytes"], r["macs"] / r["cycles"]))
    assert drawn["heuristic"] == {"C2": pytest.approx((115_605_504 / 1_700_000, 115_605_504 / 520_000))}
    (x0, y0), ridge, (x1, y1) = drawn["roof"]
    assert ridge == pytest.approx((cfg.macs_per_cycle / cfg.bus_bytes, cfg.macs_per_cycle))
    assert y0 == pytest.approx(x0 * cfg.bus_bytes) and y1 == cfg.macs_per_cycle
    assert x0 < min(x for x, _ in drawn["points"].values()) and x1 > max(x for x, _ in drawn["points"].values())


def test_chrome_trace_pairs_start_and_end():
    from tilewright.compiler.program import Program
    from tilewright.isa import Finish, Gemm
    program = Program("p", tilewright.PRESETS["tiny"], [Gemm(), Finish()], {}, np.zeros(0), 0)
    events = chrome_trace(["10 compute start 0", "17 compute end 0", "18 compute start 1", "18 compute end 1"],
                          program, "L", 3)
    spans = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["ts"], e["dur"], e["tid"], e["pid"]) for e in spans] == \
        [("GEMM", 10, 8, "compute", 3), ("FINISH", 18, 1, "compute", 3)]


@pytest.mark.parametrize("config, channels, groups, size, stride, padding, kernel", [
    ("tiny", 10, 10, 7, 2, 1, 3), ("small", 20, 20, 9, 1, 2, 5), ("small", 20, 5, 6, 1, 1, 3)])
def test_grouped_conv2d_on_the_rtl_equals_the_reference(config, channels, groups, size, stride, padding, kernel):
    """Depthwise (each channel with its own kernel) and groups of 4 channels, on the GEMM with block-diagonal
    weights (more channels than a block, and a partial last block)."""
    rng = np.random.default_rng(channels)
    x = rng.integers(-128, 128, (1, channels, size, size), dtype=np.int8)
    w = rng.integers(-128, 128, (channels, channels // groups, kernel, kernel), dtype=np.int8)
    b = rng.integers(-3000, 3000, channels, dtype=np.int32)
    kw = dict(stride=stride, padding=padding, shift=7, relu=True, groups=groups)
    expected = conv2d_reference(x, w, b, **kw)
    out, stats = tilewright.conv2d(x, w, b, config=config, backend="rtl", **kw)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(tilewright.conv2d(x, w, b, config=config, **kw)[0], expected)
    assert stats["cycles"] > 0


def test_a_slower_dram_costs_cycles_not_results():
    """The harness's DRAM at a board's pace (a read latency, bytes a cycle for reads and writes together):
    the same output as fsim, at least the cycles its DRAM bytes take at that bandwidth, and more cycles than
    the default DRAM (a bus beat every cycle each way); the default timing given explicitly changes nothing."""
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 16, 10, 10), dtype=np.int8)
    w = rng.integers(-128, 128, (12, 16, 3, 3), dtype=np.int8)
    b = rng.integers(-3000, 3000, 12, dtype=np.int32)
    kw = dict(padding=1, mul=3, shift=9, relu=True, config="tiny")
    expected, _ = tilewright.conv2d(x, w, b, **kw)
    runs = {}
    for name, memory in (("default", None), ("explicit", DramTiming()), ("narrow", DramTiming(30, 1.5)),
                         ("narrower", DramTiming(30, 0.75))):
        out, runs[name] = tilewright.conv2d(x, w, b, backend="rtl", memory=memory, **kw)
        np.testing.assert_array_equal(out, expected)
    assert runs["explicit"]["cycles"] == runs["default"]["cycles"]
    for name, bytes_per_cycle in (("narrow", 1.5), ("narrower", 0.75)):
        moved = runs[name]["dram_bytes_read"] + runs[name]["dram_bytes_written"]
        assert moved == runs["default"]["dram_bytes_read"] + runs["default"]["dram_bytes_written"]
        assert runs[name]["cycles"] >= moved / bytes_per_cycle
    assert runs["default"]["cycles"] < runs["narrow"]["cycles"] < runs["narrower"]["cycles"]


def test_a_boards_sdram_timing():
    """ULX3S's SDRAM as the harness's DRAM: 16 bits a cycle less refresh's share, a read latency that grows
    with the clock (a row activation of fixed nanoseconds, a slower CAS latency past 100 MHz); a clock past
    the part's is a one-line error. A board without one answers as its on-chip memory, one burst at a time
    (its cycles against the SoC's: tests/fpga/test_simulated_board.py), but the ECP5 layout of that memory
    (registered, sliced) has no model."""
    from tilewright.fpga.boards import BOARDS, BoardError
    board = BOARDS["ulx3s-85f"]
    timings = [board.dram_timing(f) for f in (25, 50, 75, 100, 125, 143)]
    assert all(1.9 < t.bytes_per_cycle < 2 for t in timings)
    latencies = [t.latency for t in timings]
    assert latencies == sorted(latencies) and latencies[0] < latencies[-1]
    assert board.dram_timing() == board.dram_timing(board.freq_mhz)
    with pytest.raises(BoardError, match="up to 143 MHz, not 150"):
        board.dram_timing(150)
    assert BOARDS["icebreaker"].dram_timing() == BOARDS["icebreaker"].dram_timing(12) == \
        DramTiming(latency=2, one_burst=True)
    with pytest.raises(BoardError, match="ulx3s-85f: no model of its on-chip memory's timing"):
        dataclasses.replace(board, sdram=None).dram_timing()


def test_memory_option_errors(capsys):
    for argv, message in ((["--memory", "nosuch"], "unknown board 'nosuch'"),
                          (["--memory", "ulx3s-85f@fast"], "the clock (MHz) must be a number, not 'fast'"),
                          (["--memory", "ulx3s-85f@200"], "up to 143 MHz, not 200"),
                          (["--memory", "ulx3s-85f", "--backend", "fsim"], "is for --backend rtl")):
        assert main(["bench", "resnet18", "--layers", "C11", *argv]) == 1
        assert message in capsys.readouterr().err


def test_a_dram_bandwidth_is_what_a_memory_bound_run_gets():
    """A memory-bound dense moves close to the bytes a cycle it is given, and a little less bandwidth costs
    a little more time: beats start on whole cycles, but their memory time keeps its fractions (a stream
    that lost them ran at bus_bytes / ceil(bus_bytes / bytes_per_cycle): 1.95 bytes a cycle on tiny's 4-byte
    bus as 1.33)."""
    from tilewright.sim.fast import DramTiming
    rng = np.random.default_rng(4)
    x, w = rng.integers(-128, 128, (16, 256), dtype=np.int8), rng.integers(-128, 128, (64, 256), dtype=np.int8)
    cycles = {}
    for bytes_per_cycle in (0.7, 0.95, 1.05, 1.3, 1.95, 2.05):
        out, stats = tilewright.dense(x, w, mul=3, shift=9, config="tiny", backend="rtl",
                                      memory=DramTiming(16, bytes_per_cycle))
        np.testing.assert_array_equal(out, dense_reference(x, w, mul=3, shift=9))
        moved = stats["dram_bytes_read"] + stats["dram_bytes_written"]
        cycles[bytes_per_cycle] = stats["cycles"]
        assert moved / stats["cycles"] <= bytes_per_cycle
        if bytes_per_cycle <= 1.3:      # (memory-bound: at least 9/10 of the bandwidth used)
            assert moved / stats["cycles"] >= 0.9 * bytes_per_cycle
    for slower, faster in ((0.95, 1.05), (1.95, 2.05)):
        assert 1 <= cycles[slower] / cycles[faster] <= 1.12
