"""The ``tilewright`` command line.

Every failure the user can cause (a bad config, an unreadable file, an
assembly mistake) ends in a one-line ``error: ...`` on stderr and exit
status 1, never a traceback.
"""

import argparse
import json
import sys
import time
import zipfile
from pathlib import Path

from tilewright import asm, isa
from tilewright.compiler import files
from tilewright.config import ConfigError, load_config

__all__ = ["main"]


class CliError(Exception):
    """A user mistake, reported as one line."""


def _config(args, *, compiles=False):
    """The ``--config`` of ``args``; with ``compiles``, also refuse a config the compiler cannot schedule layers on."""
    try:
        cfg = load_config(args.config)
    except ConfigError as e:
        raise CliError(str(e)) from None
    if compiles:
        from tilewright.runtime.api import schedule_problem
        problem = schedule_problem(cfg)
        if problem:
            raise CliError(f"config {args.config}: {problem}")
    return cfg


def _read(path, mode="r"):
    try:
        return Path(path).read_text() if mode == "r" else Path(path).read_bytes()
    except OSError as e:
        raise CliError(f"cannot read {path}: {e.strerror}") from None


def _write(path, data):
    """Write ``data`` (str or bytes) to ``path`` whole or not at all."""
    try:
        (files.write_text if isinstance(data, str) else files.write_bytes)(path, data)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror}") from None


def _not_over_inputs(output, *inputs):
    """CliError when ``output`` is one of the command's ``inputs``."""
    try:
        files.refuse_overwrite(output, *inputs)
    except files.FileSafetyError as e:
        raise CliError(str(e)) from None


def _output_path(output, *inputs):
    """CliError, before any long work, when ``output`` is one of ``inputs`` or its folder does not exist."""
    _not_over_inputs(output, *inputs)
    if not Path(output).resolve().parent.is_dir():
        raise CliError(f"cannot write {output}: no directory {Path(output).parent}")


def cmd_info(args):
    cfg = _config(args)
    info = cfg.describe()
    info["formats"] = {}
    for fmt in [isa.instruction_format(op, cfg) for op in isa.INSTRUCTION_TYPES] + [isa.uop_format(cfg)]:
        info["formats"][fmt.name] = {
            "bits": fmt.total_bits, "used": fmt.used_bits,
            "fields": {f.name: {"offset": f.offset, "width": f.width, "signed": f.signed} for f in fmt.fields}}
    if args.json:
        print(json.dumps(info, indent=2))
        return
    print(f"config {cfg.name} ({cfg.tag}, fingerprint {cfg.fingerprint})")
    for key, value in cfg.params().items():
        print(f"  {key:<18} {value}")
    print("  depths            " + ", ".join(f"{m} {d}" for m, d in info["depths"].items()))
    print("  element bytes     " + ", ".join(f"{m} {d}" for m, d in info["elem_bytes"].items()))
    for name, fmt in info["formats"].items():
        print(f"{name} ({fmt['used']}/{fmt['bits']} bits)")
        for fname, f in fmt["fields"].items():
            hi = f["offset"] + f["width"] - 1
            bits = f"{hi}:{f['offset']}" if f["width"] > 1 else str(f["offset"])
            print(f"  {bits:>7}  {fname}{' (signed)' if f['signed'] else ''}")


def cmd_asm(args):
    cfg = _config(args)
    try:
        insns = asm.assemble(_read(args.file), cfg)
    except isa.IsaError as e:
        raise CliError(f"{args.file}: {e}") from None
    out = args.output or str(Path(args.file).with_suffix(".bin"))
    _not_over_inputs(out, args.file)
    _write(out, isa.encode_program(insns, cfg))
    print(f"{len(insns)} instructions -> {out}")


def cmd_disasm(args):
    cfg = _config(args)
    try:
        text = asm.disassemble(_read(args.file, "rb"), cfg)
    except isa.IsaError as e:
        raise CliError(f"{args.file}: {e}") from None
    if args.output:
        _not_over_inputs(args.output, args.file)
        _write(args.output, text)
    else:
        sys.stdout.write(text)


def cmd_verilog(args):
    from tilewright.sim.rtl import lint, verilog_source
    cfg = _config(args)
    _write(args.output, verilog_source(cfg))
    print(f"wrote {args.output} (top module 'top', config {cfg.name}, {cfg.tag})")
    if args.lint:
        passed, messages = lint(args.output)
        if not passed:
            raise CliError(f"verilator --lint-only reported:\n{messages}")
        print("verilator --lint-only: no warnings (waivers in tilewright/hw/lint_waivers.vlt)")


def cmd_fuzz(args):
    from tilewright.sim.differential import Mismatch, run_differential
    from tilewright.sim.fuzz import random_program
    from tilewright.sim.rtl import RtlError
    cfg = _config(args)
    batch = 100
    start = time.perf_counter()
    print(f"fuzz: {args.n} random programs on {cfg.name} ({cfg.tag}), seeds {args.seed}..{args.seed + args.n - 1}")
    for first in range(args.seed, args.seed + args.n, batch):
        seeds = range(first, min(first + batch, args.seed + args.n))
        programs = [random_program(cfg, s) for s in seeds]
        try:
            results = run_differential(cfg, programs, dram_bytes=programs[0].dram_bytes)
        except Mismatch as e:
            raise CliError(f"fsim and RTL disagree: {e}") from None
        except RtlError as e:
            raise CliError(str(e)) from None
        cycles = sum(r.counters["cycles"] for r in results)
        print(f"  seeds {seeds.start}..{seeds.stop - 1}: identical ({cycles} RTL cycles), "
              f"{time.perf_counter() - start:.0f} s")
    print(f"PASS: {args.n} programs, fsim and RTL agree on DRAM, error codes and counters")


MEMORY_HELP = ("with --backend rtl: DRAM answers as BOARD's SDRAM would at MHZ (default: the board's clock), "
               "not a bus beat every cycle")


def _number(text, what):
    try:
        return float(text)
    except ValueError:
        raise CliError(f"{what} must be a number, not {text!r}") from None


def _memory(args):
    """The DRAM timing ``--memory BOARD[@MHZ]`` names (a board's SDRAM at its clock or at MHZ), or None."""
    if not args.memory:
        return None
    if getattr(args, "backend", "rtl") != "rtl":
        raise CliError("--memory (a board's DRAM timing) is for --backend rtl")
    from tilewright.fpga.boards import BoardError, get_board
    name, _, mhz = args.memory.partition("@")
    try:
        board = get_board(name)
        freq = _number(mhz, "the clock (MHz)") if mhz else board.freq_mhz
        timing = board.dram_timing(freq)
    except BoardError as e:
        raise CliError(f"--memory {args.memory}: {e}") from None
    if board.sdram is None:
        print(f"DRAM: {board.name}'s on-chip memory (its timing is the same at any clock): one burst at a time, "
              f"read latency {timing.latency} cycles, a beat a cycle", flush=True)
    else:
        print(f"DRAM: {board.name}'s {board.sdram.part} at {freq:g} MHz: read latency {timing.latency} cycles, "
              f"{timing.bytes_per_cycle:.2f} bytes a cycle", flush=True)
    return timing


def cmd_bench(args):
    from tilewright.compiler.tune import TuningLogError
    from tilewright.runtime.bench import RESNET18, bench_resnet18
    from tilewright.runtime.device import DeviceError
    from tilewright.sim.rtl import RtlError
    cfg = _config(args, compiles=True)
    layers = args.layers.split(",") if args.layers else None
    known = {name for name, *_ in RESNET18}
    if layers and not set(layers) <= known:
        raise CliError(f"unknown layer(s) {', '.join(sorted(set(layers) - known))}; choose from {', '.join(sorted(known))}")
    if args.backend == "fsim" and (args.plot or args.roofline or args.trace):
        raise CliError("--plot, --roofline and --trace need cycle counts: use --backend rtl (fsim counts none)")
    if args.tuning_log and not Path(args.tuning_log).is_file():
        raise CliError(f"tuning log {args.tuning_log}: no such file")
    for path in (args.json, args.plot, args.roofline, args.trace):
        if path:
            _not_over_inputs(path, args.tuning_log)
    print(f"ResNet-18 conv layers on {args.backend} ({cfg.name}, {cfg.tag})", flush=True)
    memory = _memory(args)
    try:
        bench_resnet18(args.backend, cfg, layers=layers, json_path=args.json, plot_path=args.plot,
                       roofline_path=args.roofline, trace_path=args.trace, tuning_log=args.tuning_log,
                       memory=memory, progress=lambda line: print(line, flush=True))
    except (DeviceError, RtlError, RuntimeError, TuningLogError) as e:
        raise CliError(str(e)) from None
    for path in (args.json, args.plot, args.roofline, args.trace):
        if path:
            print(f"wrote {path}")


def cmd_docs(args):
    from .docgen import GENERATED_DOCS, update_generated
    root = Path(args.root)
    stale = []
    for rel, generate in GENERATED_DOCS.items():
        path = root / rel
        if not path.exists():
            raise CliError(f"{path} does not exist (run from the repository root or pass --root)")
        if args.check:
            if not update_generated(path, generate(), check=True):
                stale.append(str(path))
        else:
            update_generated(path, generate())
            print(f"updated {path}")
    if stale:
        raise CliError(f"out of date: {', '.join(stale)}; run 'tilewright docs'")
    if args.check:
        print("generated docs are up to date")


def _model_errors():
    from tilewright.compiler.graph import ModelError
    from tilewright.compiler.program import ProgramError
    from tilewright.compiler.schedule import ScheduleError
    from tilewright.runtime.device import DeviceError
    from tilewright.sim.rtl import RtlError
    return (ModelError, ProgramError, ScheduleError, DeviceError, RtlError)


def _load_arrays(path, what):
    """A .npy file as one array, or a .npz file as a dict of arrays by name."""
    import numpy as np
    try:
        with open(path, "rb") as f:
            data = np.load(f, allow_pickle=False)
            return dict(data) if isinstance(data, np.lib.npyio.NpzFile) else data
    except OSError as e:
        raise CliError(f"cannot read {what} {path}: {e.strerror or e}") from None
    except (ValueError, EOFError, zipfile.BadZipFile) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise CliError(f"{what} {path} is not a readable .npy or .npz file ({reason})") from None


def cmd_compile(args):
    from tilewright.runtime.model import compile_model
    cfg = _config(args, compiles=True)
    if args.percentile is not None and args.method != "percentile":
        raise CliError("--percentile needs --method percentile")
    _output_path(args.output, args.model, args.calib, args.tuning_log)
    if args.memory and not args.tuning_log:
        raise CliError("--memory picks a tuning log's schedules: give --tuning-log too")
    memory = _memory(args)
    calibration = _load_arrays(args.calib, "calibration samples") if args.calib else None
    print(f"compiling {args.model} for config {cfg.name} ({cfg.tag})", flush=True)
    try:
        model = compile_model(Path(args.model), cfg, calibration=calibration, method=args.method,
                              percentile=99.99 if args.percentile is None else args.percentile, batch=args.batch,
                              per_channel=args.weights == "per-channel", on_host=args.host or (),
                              tuning_log=args.tuning_log, memory=memory, log=lambda line: print(line, flush=True),
                              progress=True)
        layers = model.meta.get("layers", [])
        if layers:
            print("quantization error per layer (SQNR against the float model, first calibration sample):")
            for layer in layers:
                mul = "per-channel scale" if layer["per_channel"] else f"×{layer['mul']}"
                print(f"  {layer['name']:24} {layer['sqnr_db']:6.1f} dB   requantize {mul} >> {layer['shift']} "
                      f"(multiplier error {layer['multiplier_error']:.1e})")
        model.save(args.output)
    except _model_errors() as e:
        raise CliError(str(e)) from None
    size = Path(args.output).stat().st_size
    print(f"wrote {args.output} ({size / 1e6:.2f} MB) in {model.meta['compile_seconds']:.1f} s")


def _profile_table(rows):
    lines = [f"{'node':24} {'op':18} {'where':11} {'ms':>9} {'cycles':>11} {'MACs':>12}"]
    for r in rows:
        cycles = "" if r["cycles"] is None else str(r["cycles"])
        macs = str(r["macs"]) if r["macs"] else ""
        lines.append(f"{r['node'][:24]:24} {r['op'][:18]:18} {r['where']:11} {r['seconds'] * 1e3:9.2f} {cycles:>11} "
                     f"{macs:>12}")
    total_cycles = sum(r["cycles"] or 0 for r in rows)
    accel = sum(r["seconds"] for r in rows if r["where"] == "accelerator")
    host = sum(r["seconds"] for r in rows if r["where"] == "host")
    lines.append(f"total: accelerator {accel * 1e3:.1f} ms, host {host * 1e3:.1f} ms"
                 + (f", {total_cycles} accelerator cycles" if total_cycles else ""))
    return lines


def cmd_run(args):
    import numpy as np

    from tilewright.runtime.model import default_workers, load_model
    inputs = _load_arrays(args.input, "input")
    try:
        model = load_model(args.model)
        path = None
        if args.output:
            # numpy adds the suffix it wants; say the name it really writes
            single = len(model.graph.outputs) == 1 and not args.output.endswith(".npz")
            path = args.output if args.output.endswith(".npy" if single else ".npz") else \
                args.output + (".npy" if single else ".npz")
            _output_path(path, args.model, args.input)
        if (args.backend == "fpga") != (args.port is not None):
            raise CliError("--backend fpga needs --port (a board's serial port or `tilewright fpga simulate`'s)"
                           if args.port is None else "--port is for --backend fpga")
        if args.workers is not None and args.backend != "rtl":
            raise CliError("--workers is for --backend rtl (several RTL simulations at once)")
        workers = (args.workers or default_workers()) if args.backend == "rtl" else 1
        workers = model.side_by_side(workers)
        memory = _memory(args)
        side_by_side = f", {workers} layers at once" if workers > 1 else ""
        print(f"running {args.model} on {args.backend} (config {model.config.name}{side_by_side})", flush=True)
        outputs, rows = model.run(inputs, backend=args.backend, port=args.port, profile=True, progress=True,
                                  workers=workers, memory=memory)
    except _model_errors() as e:
        raise CliError(str(e)) from None
    if path:
        try:
            with files.atomic_write(path) as f:
                if single:
                    np.save(f, next(iter(outputs.values())))
                else:
                    files.write_npz(f, outputs)
        except OSError as e:
            raise CliError(f"cannot write {path}: {e.strerror}") from None
        print(f"wrote {path}")
    for name, value in outputs.items():
        print(f"output {name}: {value.dtype} {list(value.shape)}")
    if args.profile:
        for line in _profile_table(rows):
            print(line)


def cmd_demo(args):
    if args.which == "digits":
        return _demo_digits(args)
    return _demo_matmul(args)


def _demo_digits(args):
    from tilewright.examples.digits.demo import run_demo
    cfg = _config(args, compiles=True)
    try:
        result = run_demo(cfg, rtl=not args.no_rtl, log=lambda line: print(line, flush=True))
    except _model_errors() as e:
        raise CliError(str(e)) from None
    gap = result["float_accuracy"] - result["int8_accuracy"]
    if gap > 0.01:
        print(f"FAIL: int8 accuracy is {100 * gap:.2f} pp below float (allowed: 1 pp)")
        return 1
    if not result.get("rtl_matches_fsim", True):
        print("FAIL: the RTL and fsim disagree")
        return 1
    print("PASS: int8 within 1 pp of float" + ("; RTL equals fsim bit for bit" if "rtl_cycles" in result else ""))
    return 0


def _demo_matmul(args):
    import numpy as np

    from tilewright.examples.matmul import BlockedMatmul
    from tilewright.sim import FunctionalSimulator

    cfg = _config(args)
    M, K, N = args.shape
    mul, shift = 3, 10
    print(f"Blocked int8 matmul {M}x{K} · {N}x{K}ᵀ with requantize (×{mul}, >>{shift}, ReLU) "
          f"on config {cfg.name} ({cfg.tag}), {args.threads} virtual threads")
    try:
        kernel = BlockedMatmul(cfg, M, K, N, threads=args.threads, mul=mul, shift=shift, relu=True)
    except ValueError as e:
        raise CliError(str(e)) from None
    rng = np.random.default_rng(args.seed)
    A = rng.integers(-128, 128, (M, K), dtype=np.int8)
    B = rng.integers(-128, 128, (N, K), dtype=np.int8)
    sim = FunctionalSimulator(cfg)
    start = time.perf_counter()
    C, stats = kernel.run(sim, A, B)
    elapsed = time.perf_counter() - start
    # Independent reference: numpy in int64, wrapped to the accumulator width.
    acc = A.astype(np.int64) @ B.astype(np.int64).T
    half = 1 << (cfg.acc_width - 1)
    acc = (acc + half) % (2 * half) - half
    acc = ((acc * mul + half) % (2 * half) - half) >> shift
    expected = np.clip(acc, 0, 127).astype(np.int8)
    t = kernel.tiles
    print(f"  tiles (blocks): m={t.m} n={t.n} k={t.k}; {sum(stats.instructions.values())} instructions "
          f"({', '.join(f'{k} {v}' for k, v in stats.instructions.items())})")
    print(f"  fsim time       {elapsed * 1e3:.1f} ms")
    print(f"  GEMM micro-ops  {stats.gemm_uops}")
    print(f"  ALU micro-ops   {stats.alu_uops}")
    print("  DRAM read       " + ", ".join(f"{k} {v}" for k, v in stats.dram_bytes_read.items() if v)
          + f" (total {stats.total_bytes_read} bytes)")
    print(f"  DRAM written    {stats.total_bytes_written} bytes")
    mismatches = int(np.count_nonzero(C != expected))
    if mismatches:
        print(f"FAIL: {mismatches} of {C.size} outputs differ from numpy")
        return 1
    print(f"PASS: all {C.size} outputs equal the numpy reference")
    return 0


def _non_negative_int(text):
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a non-negative integer")
    return value


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return value


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = 0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number")
    return value


def _parser():
    p = argparse.ArgumentParser(prog="tilewright", description="Tilewright: an accelerator, its simulators, "
                                "its compiler and models on it.")
    sub = p.add_subparsers(dest="command", required=True)

    def with_config(sp, default=None):
        kw = {"default": default} if default else {"required": True}
        sp.add_argument("--config", "-c", help="preset name (tiny, small, default) or TOML file", **kw)
        return sp

    sp = with_config(sub.add_parser("info", help="print a config's parameters and instruction fields"))
    sp.add_argument("--json", action="store_true", help="machine-readable output")
    sp.set_defaults(func=cmd_info)

    sp = with_config(sub.add_parser("asm", help="assemble a .s file into 16-byte instructions"))
    sp.add_argument("file")
    sp.add_argument("-o", "--output", help="output file (default: FILE with .bin)")
    sp.set_defaults(func=cmd_asm)

    sp = with_config(sub.add_parser("disasm", help="disassemble a binary instruction file"))
    sp.add_argument("file")
    sp.add_argument("-o", "--output", help="output file (default: stdout)")
    sp.set_defaults(func=cmd_disasm)

    sp = with_config(sub.add_parser("verilog", help="write the accelerator as Verilog"))
    sp.add_argument("-o", "--output", required=True, help="output .v file")
    sp.add_argument("--lint", action="store_true", help="also run verilator --lint-only on it")
    sp.set_defaults(func=cmd_verilog)

    sp = with_config(sub.add_parser("fuzz", help="random programs on fsim and the RTL, compared"))
    sp.add_argument("-n", type=_positive_int, default=1000, help="number of programs")
    sp.add_argument("--seed", type=_non_negative_int, default=0, help="first seed")
    sp.set_defaults(func=cmd_fuzz)

    sp = with_config(sub.add_parser("bench", help="benchmarks: resnet18 (conv layers vs the roofline)"), "default")
    sp.add_argument("suite", choices=["resnet18"])
    sp.add_argument("--backend", choices=["rtl", "fsim"], default="rtl")
    sp.add_argument("--layers", help="comma-separated subset, e.g. C2,C5")
    sp.add_argument("--json", help="write the results as JSON")
    sp.add_argument("--plot", help="write a PNG bar chart of cycles per layer")
    sp.add_argument("--roofline", help="write a PNG roofline chart (MACs/cycle against MACs per DRAM byte)")
    sp.add_argument("--trace", help="write a Chrome/Perfetto trace of every instruction (rtl)")
    sp.add_argument("--tuning-log", metavar="FILE", help="run each layer's fastest schedule in this tuning log")
    sp.add_argument("--memory", metavar="BOARD[@MHZ]", help=MEMORY_HELP)
    sp.set_defaults(func=cmd_bench)

    sp = with_config(sub.add_parser("compile", help="quantize and compile an ONNX model into a .twm file"),
                     "default")
    sp.add_argument("model", help="ONNX model file")
    sp.add_argument("-o", "--output", required=True, help="compiled model file (.twm)")
    sp.add_argument("--calib", help="calibration samples: .npy (N × input shape) or .npz by input name")
    sp.add_argument("--method", choices=["max", "percentile"], default="max", help="calibration method")
    sp.add_argument("--percentile", type=float,
                    help="with --method percentile: the percentile of |x| taken as the range (default 99.99)")
    sp.add_argument("--weights", choices=["per-channel", "per-tensor"], default="per-channel",
                    help="int8 weight scales: one per output channel (default) or one per layer")
    sp.add_argument("--batch", type=_positive_int, help="batch size to compile a dynamic batch dimension for "
                                                        "(default 1)")
    sp.add_argument("--host", action="append", metavar="NODE", help="keep this layer on the host (repeatable)")
    sp.add_argument("--tuning-log", metavar="FILE",
                    help="take each layer's fastest schedule from this tuning log (tilewright tune)")
    sp.add_argument("--memory", metavar="BOARD[@MHZ]",
                    help="with --tuning-log: the schedules tuned with BOARD's SDRAM at MHZ (tilewright tune --memory)")
    sp.set_defaults(func=cmd_compile)

    sp = sub.add_parser("run", help="run a compiled model on fsim, the RTL or a board")
    sp.add_argument("model", help="compiled model file (.twm)")
    sp.add_argument("--input", "-i", required=True, help="input: .npy, or .npz by input name")
    sp.add_argument("--output", "-o", help="write the outputs (.npy for one output, else .npz)")
    sp.add_argument("--backend", choices=["fsim", "rtl", "fpga"], default="fsim")
    sp.add_argument("--port", help="with --backend fpga: the board's serial port (or a simulated board's)")
    sp.add_argument("--profile", action="store_true", help="print where each node ran, its time and cycles")
    sp.add_argument("--workers", type=_positive_int, help="with --backend rtl: RTL simulations at once, each layer "
                                                          "from fsim's input for it (default: one per core, at most 4)")
    sp.add_argument("--memory", metavar="BOARD[@MHZ]", help=MEMORY_HELP)
    sp.set_defaults(func=cmd_run)

    from .tune import add_parser as add_tune_parser
    add_tune_parser(sub, with_config, _positive_int, _non_negative_int)

    from .regress import add_parser as add_regress_parser
    add_regress_parser(sub, with_config, _positive_int, _non_negative_int)

    from .fpga import add_parser as add_fpga_parser
    add_fpga_parser(sub)

    from .dse import add_parser as add_dse_parser
    add_dse_parser(sub, _positive_int, _non_negative_int, _positive_float)

    sp = sub.add_parser("docs", help="regenerate the generated tables in docs/")
    sp.add_argument("--root", default=".", help="repository root")
    sp.add_argument("--check", action="store_true", help="only check that they are current")
    sp.set_defaults(func=cmd_docs)

    sp = with_config(sub.add_parser("demo", help="digits: a CNN quantized, compiled and run on fsim and the RTL; "
                                                 "matmul: a blocked matmul + requantize on fsim"), "default")
    sp.add_argument("which", nargs="?", choices=["digits", "matmul"], default="digits")
    sp.add_argument("--no-rtl", action="store_true", help="digits: skip the RTL run")
    sp.add_argument("--shape", type=int, nargs=3, default=(256, 512, 256), metavar=("M", "K", "N"),
                    help="matmul: M K N")
    sp.add_argument("--threads", type=int, default=2)
    sp.add_argument("--seed", type=_non_negative_int, default=0)
    sp.set_defaults(func=cmd_demo)
    return p


def main(argv=None):
    args = _parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:     # output piped into a reader that stopped early (| head)
        sys.stderr.close()
        return 0

