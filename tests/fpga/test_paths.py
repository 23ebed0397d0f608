"""The path estimate over hand-made ECP5 netlists: arrivals by the documented model (a net's sinks
included), the latest input chosen, carry chains without nets, grouping by start and end register, and the CLI on bad input."""

import json
import math

import pytest

from tilewright.cli import main
from tilewright.fpga import paths
from tilewright.fpga.paths import estimate_paths, group_endpoints, group_paths, routed_endpoints, routed_paths

HOP = 1.0


def netlist(cells, names):
    """A Yosys JSON netlist of module ``top`` from {cell: (type, {port: (direction, bits)})}."""
    return {"modules": {"top": {
        "cells": {n: {"type": t, "port_directions": {p: d for p, (d, _) in ports.items()},
                      "connections": {p: bits for p, (_, bits) in ports.items()}}
                  for n, (t, ports) in cells.items()},
        "netnames": {name: {"bits": [bit], "hide_name": 0} for name, bit in names.items()}}}}


def ff(d, q, *, ce=None):
    ports = {"DI": ("input", [d]), "Q": ("output", [q]), "CLK": ("input", [99])}
    if ce is not None:
        ports["CE"] = ("input", [ce])
    return "TRELLIS_FF", ports


def lut(inputs, z):
    return "LUT4", {**{p: ("input", [b]) for p, b in zip("ABCD", inputs)}, "Z": ("output", [z])}


def test_a_lut_chain_arrives_by_the_model_from_its_latest_input():
    # a -> LUT -> LUT -> b.DI, and c -> the second LUT directly (an earlier input, not the path).
    cells = {"a": ff(20, 1), "c": ff(21, 2), "l1": lut([1], 3), "l2": lut([3, 2], 4), "b": ff(4, 5)}
    names = {"a": 1, "c": 2, "x": 3, "y": 4, "b": 5}
    result = estimate_paths(netlist(cells, names), hop_ns=HOP)
    latest = result[0]
    expected = paths.FF_CLK_TO_Q_NS + HOP + 2 * (paths.LUT_NS + HOP) + paths.SETUP_NS["DI"]
    assert (latest["name"], latest["port"]) == ("b", "DI")
    assert latest["ns"] == pytest.approx(expected, abs=0.01)
    assert latest["path"] == ["a", "x", "y"]


def test_a_register_driving_many_sinks_starts_the_latest_path():
    # e.DI <- LUT(a, y), where a also drives 63 other registers and y is two LUTs from b: a's one net
    # to 64 sinks outweighs b's two levels of logic.
    cells = {"a": ff(20, 1), "b": ff(21, 2), "l1": lut([2], 3), "l2": lut([3], 4), "l3": lut([1, 4], 5),
             "e": ff(5, 6), **{f"s{k}": ff(1, 100 + k) for k in range(63)}}
    names = {"a": 1, "b": 2, "x": 3, "y": 4, "z": 5, "e": 6}
    result = {(e["name"], e["port"]): e for e in estimate_paths(netlist(cells, names), hop_ns=HOP)}
    assert result[("e", "DI")]["path"] == ["a", "z"]
    expected = paths.FF_CLK_TO_Q_NS + HOP + 6 * paths.FANOUT_NS + paths.LUT_NS + HOP + paths.SETUP_NS["DI"]
    assert result[("e", "DI")]["ns"] == pytest.approx(expected, abs=0.01)


def test_a_carry_chain_ripples_without_nets():
    # r -> CCU2C #1 (A0) -> COUT -> CCU2C #2 CIN -> S0 -> s.DI
    cells = {"r": ff(20, 1),
             "c1": ("CCU2C", {"A0": ("input", [1]), "COUT": ("output", [2]), "S0": ("output", [6])}),
             "c2": ("CCU2C", {"CIN": ("input", [2]), "S0": ("output", [3]), "COUT": ("output", [7])}),
             "s": ff(3, 4)}
    result = {(e["name"], e["port"]): e["ns"] for e in estimate_paths(netlist(cells, {"r": 1, "s": 4}), hop_ns=HOP)}
    expected = (paths.FF_CLK_TO_Q_NS + HOP + paths.CARRY_NS + paths.SUM_NS + HOP + paths.SETUP_NS["DI"])
    assert result[("s", "DI")] == pytest.approx(expected, abs=0.01)


def test_groups_count_late_endpoints_by_registers():
    # Two bits of one register fed from a through one LUT; a third endpoint straight from a.
    cells = {"a": ff(20, 1), "l": lut([1], 2), "q0": ff(2, 3), "q1": ff(2, 4), "z": ff(1, 5, ce=2)}
    names = {"a": 1, "n": 2, "q[0]": 3, "q[1]": 4, "z": 5}
    result = estimate_paths(netlist(cells, names), hop_ns=HOP)
    # (a's net has two sinks, n's three: each adds FANOUT_NS per doubling)
    through_lut = (paths.FF_CLK_TO_Q_NS + HOP + paths.FANOUT_NS + paths.LUT_NS + HOP
                   + paths.FANOUT_NS * math.log2(3) + paths.SETUP_NS["DI"])
    assert group_paths(result, through_lut - 0.05) == [(pytest.approx(through_lut, abs=0.01), 2, "a", "q.DI"),
                                                     (pytest.approx(through_lut + 0.2, abs=0.01), 1, "a", "z.CE")][::-1]
    assert group_paths(result, 100.0) == []


def test_the_cli_lists_groups_and_refuses_what_it_cannot_read(tmp_path, capsys):
    cells = {"a": ff(20, 1), "l": lut([1], 2), "b": ff(2, 3)}
    (tmp_path / "top.json").write_text(json.dumps(netlist(cells, {"a": 1, "n": 2, "b": 3})))
    assert main(["fpga", "paths", str(tmp_path), "--freq", "500"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 of 2 endpoints estimated later than 2.00 ns") and "a -> b.DI" in out
    assert main(["fpga", "paths", str(tmp_path)]) == 1           # no report: no clock
    assert "give --freq" in capsys.readouterr().err
    (tmp_path / "top.json").write_text(json.dumps({"modules": {"top": {"cells": {}, "netnames": {}}}}))
    assert main(["fpga", "paths", str(tmp_path), "--freq", "100"]) == 1
    assert "not an ECP5 netlist" in capsys.readouterr().err
    assert main(["fpga", "paths", str(tmp_path / "nothing")]) == 1
    assert "no synthesised netlist" in capsys.readouterr().err


def routed_report(arrivals):
    """nextpnr's --report JSON with --detailed-timing-report, from {(cell, port): latest arrival}."""
    return {"fmax": {}, "detailed_net_timings": [
        {"driver": "d", "port": "Q", "net": f"n{k}", "event": "posedge clk",
         "endpoints": [{"cell": cell, "port": port, "event": "posedge clk", "delay": [0.5, ns]}]}
        for k, ((cell, port), ns) in enumerate(arrivals.items())]}


ROUTED = {("u.core.acc_row[0]_TRELLIS_FF_Q", "DI"): 12.5, ("u.core.acc_row[1]_TRELLIS_FF_Q_1", "DI"): 11.0,
          ("u.core.acc_mem.0.3", "ADA8"): 10.5, ("u.fetch.count_TRELLIS_FF_Q_2", "CE"): 10.2,
          ("u.fetch.count_TRELLIS_FF_Q_3", "CE"): 9.5}


def test_routed_endpoints_are_nextpnrs_latest_arrivals_grouped_by_register_or_unit():
    report = routed_report(ROUTED)
    report["detailed_net_timings"][0]["endpoints"].append(      # (an output pin: not against the clock)
        {"cell": "led$buf", "port": "I", "event": "<async>", "delay": [1.0, 20.0]})
    endpoints = routed_endpoints(report)
    assert [e["ns"] for e in endpoints] == sorted(ROUTED.values(), reverse=True)
    assert group_endpoints(endpoints, 10.0) == [(12.5, 2, "u.core.acc_row.DI"), (10.5, 1, "u.core.acc_mem.0.3.ADA8"),
                                                (10.2, 1, "u.fetch.count.CE")]
    assert group_endpoints(endpoints, 10.0, depth=2) == [(12.5, 3, "u.core"), (10.2, 1, "u.fetch")]
    with pytest.raises(ValueError, match="detailed timings"):
        routed_endpoints({"fmax": {}})


def test_the_cli_prefers_a_routed_builds_own_arrivals(tmp_path, capsys):
    cells = {"a": ff(20, 1), "l": lut([1], 2), "b": ff(2, 3)}
    (tmp_path / "top.json").write_text(json.dumps(netlist(cells, {"a": 1, "n": 2, "b": 3})))
    (tmp_path / "pnr_report.json").write_text(json.dumps(routed_report(ROUTED)))
    (tmp_path / "report.json").write_text(json.dumps({"clock_mhz": 100, "seed": 3}))
    assert main(["fpga", "paths", str(tmp_path), "--units", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("4 of 5 endpoints later than 10.00 ns (100 MHz) after place and route") and "seed 3" in out
    assert out.splitlines()[1].split() == ["12.50", "ns", "3", "u.core"]
    assert main(["fpga", "paths", str(tmp_path), "--estimate", "--freq", "500"]) == 0
    assert "a -> b.DI" in capsys.readouterr().out


def test_routed_endpoints_take_their_start_from_the_netlist(tmp_path, capsys):
    # nextpnr names the packed flip-flop's cell (its data through M); the netlist has a -> LUT -> b.
    cells = {"a": ff(20, 1), "l": lut([1], 2), "b_TRELLIS_FF_Q": ff(2, 3)}
    net = netlist(cells, {"a": 1, "n": 2, "b": 3})
    report = routed_report({("b_TRELLIS_FF_Q", "M"): 12.0, ("gone", "DI"): 11.0, ("a", "DI"): 3.0})
    endpoints = routed_paths(report, net, hop_ns=HOP)
    assert [(e["name"], e["port"], e["ns"], e["path"]) for e in endpoints] == [
        ("b_TRELLIS_FF_Q", "DI", 12.0, ["a", "n"]), ("gone", "DI", 11.0, ["gone"]), ("a", "DI", 3.0, ["$20"])]
    assert group_paths(endpoints, 10.0) == [(12.0, 1, "a", "b.DI"), (11.0, 1, "gone", "gone.DI")]
    (tmp_path / "top.json").write_text(json.dumps(net))
    (tmp_path / "pnr_report.json").write_text(json.dumps(report))
    assert main(["fpga", "paths", str(tmp_path), "--freq", "100", "--path"]) == 0
    out = capsys.readouterr().out
    assert "starts estimated from the netlist" in out and "a -> b.DI" in out and "latest path: a -> n" in out
    assert "the latest 12.0 ns, 3 ns late in all" in out        # (12.0 - 10 and 11.0 - 10)
    # Another family's routed build (no TRELLIS_FF to estimate from): its endpoints by register alone.
    (tmp_path / "top.json").write_text(json.dumps(netlist({"g": ("DFF", {"D": ("input", [1]), "Q": ("output", [2])})},
                                                          {"g": 2})))
    assert main(["fpga", "paths", str(tmp_path), "--freq", "100"]) == 0
    out = capsys.readouterr().out
    assert "starts estimated" not in out and "b_TRELLIS_FF_Q" not in out and " b.M" in out


def test_register_names_lose_what_synthesis_appended():
    assert [paths._cell_register(c) for c in ("u.acc_row[7]_TRELLIS_FF_Q_13", "u.mem.0.3_DOA8[3]", "u.mem.0.3",
                                              "u.count_TRELLIS_FF_Q_2", "u.x$12[4]")] == [
        "u.acc_row", "u.mem.0.3", "u.mem.0.3", "u.count", "u.x"]
