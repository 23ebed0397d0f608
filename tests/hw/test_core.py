"""ComputeCore in the Amaranth simulator against the functional simulator.

A small wrapper (:class:`CoreHarness`) gives the core real
``amaranth.lib.memory.Memory`` instances wired as ``hw/compute.py`` wires
them: the accumulator's read ports (one or two, see
:func:`~tilewright.hw.core.alu_reads_one_port`) are transparent to its write
port, but the serial core's, which must never read a
row as it is written (checked every cycle), the first port where the core
makes it read as a transparent one would
(:func:`~tilewright.hw.core.acc_port_a_forwarded`), and the ALU's second port
with several passes (:func:`~tilewright.hw.core.alu_port_transparent`). The
last two read the bits written in the cycle they read them inverted, as the
FPGA builds leave them undefined. Each test
fills every memory with seeded random contents, runs GEMM or
ALU instructions on the core, reads ACC and OUT back and compares them with
:class:`~tilewright.sim.FunctionalSimulator` executing the same instruction
from the same SRAM contents (which it receives through LOAD instructions).

OUT cannot be loaded, so fsim's OUT starts at zero while the core's starts
random: rows the instruction writes must equal fsim's, every other row must
keep its random initial value (no stray writes).
"""

import json
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from amaranth import Cat, Elaboratable, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.sim import Simulator

from tilewright import PRESETS, isa
from tilewright.hw.core import (ComputeCore, acc_port_a_forwarded, alu_port_transparent, alu_reads_one_port,
                                soft_multiply)
from tilewright.hw.pipe import pipe
from tilewright.hw.serial_core import core_for
from tilewright.hw.sram import (acc_granularity, acc_loads_by_lane, acc_rows_by_lane, alu_granularity, sram_rows,
                                sram_shape, wgt_rows_by_lane)
from tilewright.isa import Alu, AluOp, ErrorCode, Finish, Gemm, Load, MemType
from tilewright.sim import FunctionalSimulator
from tilewright.sim.fsim import SimError

TINY = PRESETS["tiny"]
#: Variants of tiny that move the lane widths and counts the core is generated for.
ACC16 = TINY.replace(name="tiny_acc16", acc_width=16)
BATCH2 = TINY.replace(name="tiny_b2", batch=2, block_out=8)
# 9 of 16 products in logic (the split runs through a lane), and 16-bit data all in logic
SOFT = TINY.replace(name="tiny_soft", soft_products=9)
SOFT16 = TINY.replace(name="tiny_soft16", inp_width=16, wgt_width=16, out_width=16, soft_products=16)
# ALUs narrower than the accumulator row: one lane of 4 (4 passes per micro-op), 2 and 4 of batch 2's 16
# (with three passes or more the ALU reads both rows through one port: alu_reads_one_port)
VEC1 = TINY.replace(name="tiny_v1", vector_lanes=1)
VEC2 = BATCH2.replace(name="tiny_b2_v2", vector_lanes=2)
VEC4 = BATCH2.replace(name="tiny_b2_v4", vector_lanes=4)
# ... two passes, which keep the second port (not transparent to the write port: alu_port_transparent) ...
HALF = TINY.replace(name="tiny_v2", vector_lanes=2)
# ... and four passes that keep it too, `lean` sharing it with the requantizing STORE: both rows are
# registered before the operands
VEC1_LEAN = VEC1.replace(name="tiny_v1_lean", lean=True)
# 64 products: each from operand copies of its own, and the accumulator's read registered before the
# forwarding (hw/core.py, `registered_read`); with a two-lane ALU of four passes, reading one port
WIDE = TINY.replace(name="tiny_8x8_v2", block_in=8, block_out=8, vector_lanes=2)
# ... and as `slim` builds it (`lean`, no requantizing STORE): the inp and wgt SRAMs read a cycle later
WIDE_LEAN = WIDE.replace(name="tiny_8x8_v2_lean", lean=True, requant_store=False)
# A GEMM of several passes (`gemm_lanes`): two lanes of four a pass; one lane of batch 2's eight (eight passes);
# two passes with products in logic; and 64 products of 256 (operand copies, late reads) as `medium` builds them
GL2 = TINY.replace(name="tiny_g2", gemm_lanes=2)
GL1_B2 = BATCH2.replace(name="tiny_b2_g1", gemm_lanes=1)
GL2_SOFT = SOFT.replace(name="tiny_soft_g2", gemm_lanes=2, soft_products=5)
GL4_WIDE = TINY.replace(name="tiny_16x16_g4_lean", block_in=16, block_out=16, vector_lanes=2, lean=True,
                        requant_store=False, gemm_lanes=4, wgt_buffer_bytes=16384, acc_buffer_bytes=8192)
GEMM_PASSES = [GL2, GL1_B2, GL2_SOFT, GL4_WIDE]
# MUL one partial product a cycle: with every lane, and with one lane (passes and steps nested)
SERIAL = TINY.replace(name="tiny_serial_mul", serial_mul=True)
SERIAL1 = VEC1.replace(name="tiny_v1_serial_mul", serial_mul=True)
# The serial core (hw/serial_core.py): one micro-op and one lane at a time; on batch 2, with a serial MUL, and
# on a GEMM of one product (a row of one lane)
SEQ = VEC1.replace(name="tiny_serial_core", serial_core=True)
SEQ_B2 = BATCH2.replace(name="tiny_b2_serial_core", vector_lanes=1, serial_core=True)
SEQ_MUL = SERIAL1.replace(name="tiny_v1_serial_mul_core", serial_core=True)
SEQ_ONE = PRESETS["pico"].replace(name="pico_serial_core", serial_core=True)
# ... and beside a second accumulator port it leaves to the requantizing STORE (`lean`)
SEQ_LEAN = SEQ.replace(name="tiny_serial_core_lean", lean=True)
# ... and on 16-bit accumulators (its serial shift's limits)
SEQ_ACC16 = SEQ.replace(name="tiny_acc16_serial_core", acc_width=16)
# ... and with no requantizing STORE: the accumulators a lane a row (acc_rows_by_lane)
SEQ_ROWS = SEQ.replace(name="tiny_serial_core_rows", requant_store=False)
SEQ_ROWS_B2 = SEQ_ROWS.replace(name="tiny_b2x2_serial_core_rows", batch=2, block_out=2)    # (lanes b·2 + o)

MEMS = ("uop", "inp", "wgt", "acc", "out")
DRAM_BYTES = 1 << 16
#: Where the SRAM images live in fsim's DRAM (each a multiple of every element size).
DRAM_BASE = {"uop": 0x0000, "inp": 0x1000, "wgt": 0x2000, "acc": 0x8000}


# -- SRAM contents ------------------------------------------------------------

def lanes(cfg, mem):
    """Lanes of an entry of ``mem`` (a row of its SRAM may hold fewer: ``wgt_rows_by_lane``)."""
    return cfg.lanes(mem)[0]


def width(cfg, mem):
    return {"inp": cfg.inp_width, "wgt": cfg.wgt_width, "acc": cfg.acc_width, "out": cfg.out_width}[mem]


def random_ints(rng, bits, shape):
    return rng.integers(-2**(bits - 1), 2**(bits - 1), shape, dtype=np.int64)


def random_acc(rng, cfg, rows):
    """Accumulators mixing full-range values, small ones (shift amounts) and extremes."""
    w = cfg.acc_width
    shape = (rows, lanes(cfg, "acc"))
    specials = np.array([-2**(w - 1), 2**(w - 1) - 1, 0, -1, 1, w - 1, w, -(w - 1), -w, -w - 5])
    pick = rng.random(shape)
    return np.select([pick < 0.4, pick < 0.7, pick < 0.9],
                     [random_ints(rng, w, shape), rng.integers(-2 * w, 2 * w, shape), random_ints(rng, 16, shape)],
                     specials[rng.integers(0, specials.size, shape)])


def random_contents(rng, cfg):
    """Random contents of every SRAM: ``{mem: int64 array}``; ``uop`` is (depth, 3) of (dst, src, wgt)."""
    uop_fields = isa.uop_format(cfg).by_name
    contents = {"uop": np.stack([rng.integers(0, 1 << uop_fields[f].width, cfg.uop_depth)
                                 for f in ("dst", "src", "wgt")], axis=1)}
    for mem in ("inp", "wgt", "out"):
        contents[mem] = random_ints(rng, width(cfg, mem), (cfg.depth(mem), lanes(cfg, mem)))
    contents["acc"] = random_acc(rng, cfg, cfg.acc_depth)
    return contents


def with_uops(contents, uop_bgn, uops):
    """A copy of ``contents`` whose micro-ops from ``uop_bgn`` are ``uops`` ((dst, src, wgt) tuples)."""
    contents = {k: v.copy() for k, v in contents.items()}
    if len(uops):
        contents["uop"][uop_bgn:uop_bgn + len(uops)] = np.array(uops).reshape(-1, 3)
    return contents


def loop_indices(insn, uops):
    """``(dst, src, wgt)`` of every micro-op ``insn`` executes, in order (``uops``: the uop SRAM)."""
    wf = (insn.wgt_factor_out, insn.wgt_factor_in) if isinstance(insn, Gemm) else (0, 0)
    for o in range(insn.iter_out):
        for i in range(insn.iter_in):
            for u in range(insn.uop_bgn, insn.uop_end):
                d, s, w = (int(x) for x in uops[u])
                yield (d + o * insn.dst_factor_out + i * insn.dst_factor_in,
                       s + o * insn.src_factor_out + i * insn.src_factor_in,
                       w + o * wf[0] + i * wf[1])


# -- the core in simulation -----------------------------------------------------

class CoreHarness(Elaboratable):
    """A ComputeCore with its five memories, initialised from ``contents``, wired as in ComputeUnit."""

    def __init__(self, cfg, contents):
        self.cfg = cfg
        self.core = core_for(cfg)
        self.mems = {}
        for mem in MEMS:
            if mem == "uop":
                init = [{"dst": d, "src": s, "wgt": w} for d, s, w in contents["uop"].tolist()]
            else:           # (rows: entries, or with `wgt_rows_by_lane` a weight entry's lanes of each o)
                init = np.asarray(contents[mem]).reshape(sram_rows(cfg, mem), -1).tolist()
            self.mems[mem] = Memory(shape=sram_shape(cfg, mem), depth=sram_rows(cfg, mem), init=init)

    def elaborate(self, platform):
        m = Module()
        core, mems = self.core, self.mems
        m.submodules.core = core
        for name, mem in mems.items():
            m.submodules[f"{name}_mem"] = mem
        acc_w = mems["acc"].write_port(granularity=acc_granularity(self.cfg))
        wiring.connect(m, core.uop_read, mems["uop"].read_port())
        wiring.connect(m, core.inp_read, mems["inp"].read_port())
        wiring.connect(m, core.wgt_read, mems["wgt"].read_port())
        # (the serial core's port is not transparent, as in ComputeUnit: it reads no row while writing it)
        if self.cfg.serial_core:
            wiring.connect(m, core.acc_read_a, mems["acc"].read_port())
        else:
            self.accumulator_port(m, core.acc_read_a, acc_w, not acc_port_a_forwarded(self.cfg))
        if not alu_reads_one_port(self.cfg):
            self.accumulator_port(m, core.acc_read_b, acc_w, alu_port_transparent(self.cfg))
        wiring.connect(m, core.acc_write, acc_w)
        wiring.connect(m, core.out_write, mems["out"].write_port(granularity=alu_granularity(self.cfg)))
        return m

    def accumulator_port(self, m, reader, acc_w, transparent):
        """A read port of the accumulators for ``reader``: transparent to ``acc_w``, or reading the bits it
        writes in that cycle inverted (the FPGA builds mark such ports as undefined then: the core must not
        use them)."""
        port = self.mems["acc"].read_port(transparent_for=(acc_w,) if transparent else ())
        if transparent:
            wiring.connect(m, reader, port)
            return
        written = Signal(len(acc_w.en))
        m.d.sync += written.eq(Mux(port.en & (port.addr == acc_w.addr), acc_w.en, 0))
        bits = port.data.as_value()
        per_en = len(bits) // len(written)
        m.d.comb += [port.addr.eq(reader.addr), port.en.eq(reader.en),
                     reader.data.eq(bits ^ Cat(w.replicate(per_en) for w in written))]


def word(insn, cfg):
    return int.from_bytes(isa.encode(insn, cfg), "little")


def cycle_limit(cfg, insn):
    """The most cycles ``insn``'s micro-ops may take on ``cfg``'s core, start to done, less a constant."""
    steps = cfg.acc_width if cfg.serial_mul else 1       # (cycles per slice of a MUL at most)
    if cfg.serial_core:     # (a lane at a time: the products' and the tree's latency; an ALU lane six cycles
        lanes = cfg.batch * cfg.block_out       # and its MUL or SHR a bit a cycle)
        return insn.uop_count * (lanes + 12 if isinstance(insn, Gemm) else lanes * (cfg.acc_width + 8) + 2)
    # (an ALU micro-op waits up to six cycles for the one ahead when it reads the row it writes)
    return insn.uop_count * (cfg.gemm_passes if isinstance(insn, Gemm) else cfg.vector_passes * steps + 6)


def run_core(cfg, contents, insns):
    """Run ``insns`` one after another on the core; returns ``(reports, {acc, out})``.

    Each report has ``error`` (sampled with ``done``), ``cycles`` (from the
    cycle ``start`` is high, 0, to the cycle ``done`` is high) and ``retired``
    (cycles with ``retire_gemm``/``retire_alu`` high). The testbench fails
    instead of hanging if ``done`` does not come, and checks that ``done`` is
    a one-cycle pulse and that the busy output of the instruction's kind is
    high from the cycle after ``start`` through ``done``.
    """
    h = CoreHarness(cfg, contents)
    core = h.core
    reports, final = [], {}

    async def bench(ctx):
        for insn in insns:
            is_gemm = isinstance(insn, Gemm)
            busy, other = (core.gemm_busy, core.alu_busy) if is_gemm else (core.alu_busy, core.gemm_busy)
            retire, other_retire = (core.retire_gemm, core.retire_alu) if is_gemm \
                else (core.retire_alu, core.retire_gemm)
            ctx.set(core.insn, word(insn, cfg))       # (stable from the cycle before the start)
            await ctx.tick()
            ctx.set(core.start, 1)
            assert not ctx.get(core.done)
            await ctx.tick()
            ctx.set(core.start, 0)
            cycles, retired = 1, 0
            limit = cycle_limit(cfg, insn) + 64
            while True:
                assert ctx.get(busy) and not ctx.get(other), f"busy outputs wrong in cycle {cycles}"
                if cfg.serial_core:     # (what its non-transparent port, undefined on a collision, relies on)
                    assert not (ctx.get(core.acc_read_a.en) and ctx.get(core.acc_write.en)
                                and ctx.get(core.acc_read_a.addr) == ctx.get(core.acc_write.addr)), \
                        f"the serial core reads the row it writes in cycle {cycles}"
                assert not ctx.get(other_retire)
                retired += ctx.get(retire)
                if ctx.get(core.done):
                    break
                assert cycles < limit, f"no done within {limit} cycles of start: the core hangs"
                await ctx.tick()
                cycles += 1
            reports.append({"error": ctx.get(core.error), "cycles": cycles, "retired": retired})
            await ctx.tick()
            assert not ctx.get(core.done), "done is longer than one cycle"
            assert not ctx.get(core.gemm_busy) and not ctx.get(core.alu_busy)
        final.update(read_acc_out(ctx, h))
    simulate(h, bench)
    return reports, final


def read_acc_out(ctx, h):
    """The ACC and OUT contents of harness ``h``, by entry (with `acc_rows_by_lane` an entry's rows together)."""
    cfg, final = h.cfg, {}
    for mem in ("acc", "out"):
        data, row_lanes = h.mems[mem].data, sram_shape(cfg, mem).length
        rows = [[ctx.get(data[r])[k] for k in range(row_lanes)] for r in range(sram_rows(cfg, mem))]
        final[mem] = np.array(rows, dtype=np.int64).reshape(cfg.acc_depth, lanes(cfg, mem))
    return final


def simulate(h, bench):
    sim = Simulator(h)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()


# -- the functional simulator as reference ------------------------------------

def fsim_reference(cfg, contents, insns):
    """``(error, {acc, out})`` of fsim running ``insns`` (one or a list) from ``contents`` (loaded by LOADs)."""
    insns = insns if isinstance(insns, list) else [insns]
    fs = FunctionalSimulator(cfg, dram_bytes=DRAM_BYTES)
    fmt = isa.uop_format(cfg)
    uop_bytes = cfg.elem_bytes("uop")
    fs.dram.write(DRAM_BASE["uop"], b"".join(
        fmt.pack(isa.Uop(*map(int, u))).to_bytes(uop_bytes, "little") for u in contents["uop"]))
    for mem in ("inp", "wgt", "acc"):
        fs.dram.write(DRAM_BASE[mem], contents[mem].astype(f"<i{width(cfg, mem) // 8}"))

    def load(mem, **flags):
        depth = cfg.depth(mem)
        return Load(memory_type=MemType[mem.upper()], sram_base=0,
                    dram_base=DRAM_BASE[mem] // cfg.elem_bytes(mem), y_size=1, x_size=depth, x_stride=depth,
                    **flags)

    # load stream: INP, WGT (→ l2c); compute stream: UOP, ACC (← l2c), the instruction, FINISH.
    program = [load("inp"), load("wgt", push_next=True), load("uop"), load("acc", pop_prev=True), *insns, Finish()]
    try:
        fs.run(program)
        error = ErrorCode.NONE
    except SimError as e:
        assert e.index >= 4, f"fsim failed on the set-up program: {e}"
        error = e.code
    shape = (cfg.acc_depth, -1)
    return error, {"acc": fs.sram("acc").reshape(shape).astype(np.int64),
                   "out": fs.sram("out").reshape(shape).astype(np.int64)}


def assert_state_matches(hw, ref, contents, insns):
    """Core ACC equals fsim's; core OUT equals fsim's on the rows ``insns`` write and is untouched elsewhere."""
    written = sorted({d for insn in insns for d, _, _ in loop_indices(insn, contents["uop"])})
    expected_out = contents["out"].copy()
    expected_out[written] = ref["out"][written]
    for mem, expected in (("acc", ref["acc"]), ("out", expected_out)):
        bad = np.flatnonzero((hw[mem] != expected).any(axis=1))
        assert bad.size == 0, (f"{mem} rows {bad[:8].tolist()} differ for {insns}:\n"
                               f"core {hw[mem][bad[:4]].tolist()}\nfsim {expected[bad[:4]].tolist()}")


def check_against_fsim(insn, contents, cfg=TINY):
    """Run ``insn`` on the core and on fsim from ``contents``; assert equal results; return the core's report."""
    (report,), hw = run_core(cfg, contents, [insn])
    error, ref = fsim_reference(cfg, contents, insn)
    assert ErrorCode(report["error"]) == error, f"{insn}"
    if not error:
        assert report["retired"] == insn.uop_count, "one retire pulse per micro-op"
        assert_state_matches(hw, ref, contents, [insn])
    return report


# -- random loop nests -----------------------------------------------------------

def random_loop(rng, cls, cfg=TINY, *, n_uops, iter_out, iter_in, uop_bgn=None, **fields):
    """A ``cls`` (Gemm/Alu) instruction and its micro-ops with random non-zero factors, all indices in range.

    Returns ``(insn, uops)``; place the micro-ops with :func:`with_uops`.
    """
    depths = {"dst": cfg.acc_depth, "src": cfg.inp_depth if cls is Gemm else cfg.acc_depth, "wgt": cfg.wgt_depth}
    names = ("dst", "src", "wgt") if cls is Gemm else ("dst", "src")
    f = {}
    for n in names:
        # Keep half of each buffer for the micro-op's own index.
        room = depths[n] // 2
        f[f"{n}_factor_out"] = int(rng.integers(1, max(2, room // max(1, 2 * (iter_out - 1)) + 1)))
        f[f"{n}_factor_in"] = int(rng.integers(1, max(2, room // max(1, 2 * (iter_in - 1)) + 1)))
    top = {n: depths[n] - 1 - (iter_out - 1) * f.get(f"{n}_factor_out", 0) - (iter_in - 1) * f.get(f"{n}_factor_in", 0)
           for n in ("dst", "src", "wgt")}
    top["wgt"] = min(top["wgt"], cfg.wgt_depth - 1)
    uops = [tuple(int(rng.integers(0, top[n] + 1)) for n in ("dst", "src", "wgt")) for _ in range(n_uops)]
    if uop_bgn is None:
        uop_bgn = int(rng.integers(0, cfg.uop_depth - n_uops + 1))
    insn = cls(uop_bgn=uop_bgn, uop_end=uop_bgn + n_uops, iter_out=iter_out, iter_in=iter_in, **f, **fields)
    return insn, uops


# -- GEMM --------------------------------------------------------------------------

@pytest.mark.parametrize("wa, wb", [(8, 8), (16, 8), (8, 16), (16, 16)])
def test_soft_multiply_is_the_product(wa, wb):
    """Every 8×8 pair, and the extremes plus random pairs of the wider shapes."""
    a, b = Signal(signed(wa)), Signal(signed(wb))
    p = Signal(signed(wa + wb))
    m = Module()
    m.d.comb += p.eq(soft_multiply(a, b))
    rng = np.random.default_rng(wa * 100 + wb)

    def values(w):
        lo, hi = -(1 << (w - 1)), (1 << (w - 1)) - 1
        return range(lo, hi + 1) if w == 8 else [lo, lo + 1, -1, 0, 1, hi - 1, hi, *rng.integers(lo, hi + 1, 60)]

    pairs = [(int(x), int(y)) for x in values(wa) for y in values(wb)]
    wrong = []

    async def bench(ctx):
        for x, y in pairs:
            ctx.set(a, x)
            ctx.set(b, y)
            if ctx.get(p) != x * y:
                wrong.append((x, y, ctx.get(p)))

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    assert not wrong, wrong[:5]


def test_soft_products_leave_the_dsp_blocks():
    """Yosys maps every ``*`` to a DSP block; the products a config puts in logic must not use one.
    (The DSP blocks are mapped in the flow's coarse step: it stops there, before the LUT mapping.)"""
    import subprocess

    from amaranth.back import rtlil

    from tilewright.fpga.build import SYNTH, tool, utilization_from_stat

    def dsps(cfg, workdir):
        (workdir / "top.il").write_text(rtlil.convert(ComputeCore(cfg), name="top"))
        subprocess.run([tool("yosys"), "-q", "-p", f"read_rtlil top.il; {SYNTH['ice40']} -top top -run :map_ram; "
                        "tee -q -o stat.json stat -json"], cwd=workdir, check=True)
        return utilization_from_stat(json.loads((workdir / "stat.json").read_text()), "ice40")["DSP"]

    with tempfile.TemporaryDirectory() as tmp:
        assert dsps(TINY, Path(tmp)) - dsps(SOFT, Path(tmp)) == SOFT.soft_products


def test_replicas_stay_apart_in_synthesis():
    """Copies of one register (``replicas``) reach the netlist as separate flip-flops; Yosys merges plain
    copies back into one. So do copies whose replica name is only an alias of the flip-flop's output (as a
    clock domain's reset is: ``hw/top.py``'s ``clear_replica_datapath``)."""
    from amaranth.back import rtlil

    from tilewright.fpga.build import synthesise, utilization_from_stat
    from tilewright.hw.pipe import pipe, replicas

    class Fanout(Elaboratable):
        def __init__(self, copy):
            self.copy, self.a, self.b, self.o = copy, Signal(8), Signal(32), Signal(32)

        def elaborate(self, platform):
            m = Module()
            if self.copy == "replicas":
                copies = replicas(m, self.a, "a", 4)
            else:
                copies = [pipe(m, self.a, f"a_{k}") for k in range(4)]
            if self.copy == "aliased":
                aliases = [Signal(8, name=f"a_replica{k}") for k in range(4)]
                m.d.comb += [alias.eq(c) for alias, c in zip(aliases, copies)]
                copies = aliases
            m.d.comb += self.o.eq(Cat(c ^ self.b.word_select(k, 8) for k, c in enumerate(copies)))
            return m

    def flip_flops(copy, workdir):
        top = Fanout(copy)
        (workdir / "top.il").write_text(rtlil.convert(top, name="top", ports=[top.a, top.b, top.o]))
        synthesise("ecp5", workdir, progress=lambda line: None)
        return utilization_from_stat(json.loads((workdir / "stat.json").read_text()), "ecp5")["FF"]

    with tempfile.TemporaryDirectory() as tmp:
        assert [flip_flops(copy, Path(tmp)) for copy in ("plain", "replicas", "aliased")] == [8, 32, 32]


@pytest.mark.parametrize("seed", range(6))
def test_gemm_two_loop_levels(seed):
    """GEMM with both loop levels and non-zero factors for dst, src and wgt matches fsim."""
    rng = np.random.default_rng(seed)
    insn, uops = random_loop(rng, Gemm, n_uops=int(rng.integers(1, 7)), iter_out=int(rng.integers(2, 5)),
                             iter_in=int(rng.integers(2, 5)))
    check_against_fsim(insn, with_uops(random_contents(rng, TINY), insn.uop_bgn, uops))


@pytest.mark.parametrize("cfg", [ACC16, BATCH2, SOFT, SOFT16, VEC1, VEC2, WIDE, WIDE_LEAN, SEQ, SEQ_B2, SEQ_ONE,
                                 SEQ_ROWS, SEQ_ROWS_B2, *GEMM_PASSES], ids=lambda c: c.name)
def test_gemm_other_lane_layouts(cfg):
    """GEMM on a 16-bit accumulator, on batch 2 (lane order b·block_out + o), with products built from
    logic, and beside an ALU of several passes (the accumulator's read address then a register of its own)
    matches fsim."""
    rng = np.random.default_rng(7)
    insn, uops = random_loop(rng, Gemm, cfg, n_uops=5, iter_out=3, iter_in=2)
    check_against_fsim(insn, with_uops(random_contents(rng, cfg), insn.uop_bgn, uops), cfg)


@pytest.mark.parametrize("cfg", [TINY, GL2], ids=lambda c: c.name)
def test_gemm_reset(cfg):
    """GEMM with reset zeroes acc and out of every destination and leaves other rows alone.

    Its source and weight indices run far outside their buffers: with reset
    only the destination is used and range-checked. (With several passes a
    resetting micro-op takes one.)
    """
    rng = np.random.default_rng(11)
    uops = [(int(rng.integers(0, 40)), 255, 127) for _ in range(5)]
    insn = Gemm(uop_bgn=3, uop_end=8, iter_out=3, iter_in=2, dst_factor_out=50, dst_factor_in=41,
                src_factor_out=200, src_factor_in=100, wgt_factor_out=100, wgt_factor_in=60, reset=True)
    contents = with_uops(random_contents(rng, cfg), 3, uops)
    report = check_against_fsim(insn, contents, cfg)
    # (a cycle a micro-op; with passes a stage more drains: the register their sums gather in)
    assert report["cycles"] == check_against_fsim(insn, contents, TINY)["cycles"] + (cfg.gemm_passes > 1)


@pytest.mark.parametrize("cfg", [TINY, WIDE, WIDE_LEAN, SEQ, GL2, GL4_WIDE], ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(3))
def test_gemm_overwrite(seed, cfg):
    """GEMM with overwrite replaces every destination by its product (the last micro-op on a repeated row wins)."""
    rng = np.random.default_rng(20 + seed)
    insn, uops = random_loop(rng, Gemm, cfg, n_uops=int(rng.integers(1, 6)), iter_out=int(rng.integers(1, 4)),
                             iter_in=int(rng.integers(1, 4)), overwrite=True)
    uops[-1] = (uops[0][0],) + uops[-1][1:]            # a repeated destination in every iteration
    check_against_fsim(insn, with_uops(random_contents(rng, cfg), insn.uop_bgn, uops), cfg)


@pytest.mark.parametrize("cfg", [TINY, VEC1, VEC4, WIDE, WIDE_LEAN, SEQ, GL2, GL4_WIDE], ids=lambda c: c.name)
@pytest.mark.parametrize("distance", [1, 2, 3, 4, 5, 7])
def test_gemm_repeated_destination(distance, cfg):
    """Micro-ops writing the row written ``distance`` micro-ops earlier accumulate every product.

    Distance 1 is the back-to-back case: the row is read in the cycle the
    micro-op ahead writes it, so only the transparent read (or with an ALU of
    several passes, the core's forwarding in its place: `acc_port_a_forwarded`)
    gives the new value. Larger distances cover every stage of the product/tree pipeline.
    An inner loop with ``dst_factor_in = 0`` repeats the rows across loop
    iterations too. (With an ALU of several passes the read address is a
    register of its own.)
    """
    rng = np.random.default_rng(100 + distance)
    rows = rng.choice(cfg.acc_depth, distance, replace=False)
    # (sources and weights below each buffer's depth less the loops' reach: 19 and 5)
    uops = [(int(rows[u % distance]), int(rng.integers(0, min(200, cfg.inp_depth - 19))),
             int(rng.integers(0, min(100, cfg.wgt_depth - 5)))) for u in range(12)]
    insn = Gemm(uop_bgn=20, uop_end=32, iter_out=2, iter_in=3, dst_factor_out=0, dst_factor_in=0,
                src_factor_out=9, src_factor_in=5, wgt_factor_out=3, wgt_factor_in=1)
    check_against_fsim(insn, with_uops(random_contents(rng, cfg), 20, uops), cfg)


def test_gemm_single_row_reduction():
    """Every micro-op of a two-level loop accumulates into one row (the usual kernel's reduction)."""
    rng = np.random.default_rng(5)
    uops = [(77, int(rng.integers(0, 64)), int(rng.integers(0, 64))) for _ in range(4)]
    insn = Gemm(uop_bgn=100, uop_end=104, iter_out=4, iter_in=3, src_factor_out=40, src_factor_in=13,
                wgt_factor_out=15, wgt_factor_in=4)
    check_against_fsim(insn, with_uops(random_contents(rng, TINY), 100, uops))


EMPTY_LOOPS = {
    "iter_out=0": dict(uop_bgn=0, uop_end=4, iter_out=0, iter_in=3),
    "iter_in=0": dict(uop_bgn=0, uop_end=4, iter_out=3, iter_in=0),
    "no micro-ops": dict(uop_bgn=9, uop_end=9, iter_out=3, iter_in=3),
    "no micro-ops at the end": dict(uop_bgn=TINY.uop_depth - 1, uop_end=TINY.uop_depth - 1, iter_out=1, iter_in=1),
}


@pytest.mark.parametrize("cfg", [TINY, SEQ], ids=lambda c: c.name)
@pytest.mark.parametrize("cls", [Gemm, Alu])
@pytest.mark.parametrize("fields", EMPTY_LOOPS.values(), ids=EMPTY_LOOPS.keys())
def test_empty_loops(cls, fields, cfg):
    """An instruction with nothing to do finishes without error and writes nothing.

    The micro-ops it would run, had the loops not been empty, address far
    outside every buffer: an empty loop checks no index.
    """
    rng = np.random.default_rng(3)
    contents = with_uops(random_contents(rng, cfg), 0, [(255, 255, 127)] * 4)
    insn = cls(**fields, dst_factor_out=255, src_factor_out=255)
    # fsim leaves acc as loaded, and no row counts as written: out must keep its contents too.
    report = check_against_fsim(insn, contents, cfg)
    assert report["error"] == 0 and report["retired"] == 0 and report["cycles"] <= 3


# -- ALU -----------------------------------------------------------------------------

IMM = isa.instruction_format(Alu, TINY).by_name["imm"]


def random_imm(rng, op):
    if op == AluOp.SHR and rng.random() < 0.8:
        return int(rng.integers(-40, 41))
    return int(rng.choice([int(rng.integers(IMM.min, IMM.max + 1)), IMM.min, IMM.max, 0, -1, 1]))


@pytest.mark.parametrize("use_imm", [True, False], ids=["imm", "vector"])
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_alu_op(op, use_imm):
    """Every ALU op with an immediate and with a vector operand, two loop levels, matches fsim.

    The accumulators mix full-range values, small ones (in-range shift
    amounts of both signs) and the extremes.
    """
    rng = np.random.default_rng([int(op), use_imm])
    for trial in range(2):
        insn, uops = random_loop(rng, Alu, n_uops=int(rng.integers(1, 9)), iter_out=int(rng.integers(1, 4)),
                                 iter_in=int(rng.integers(1, 4)), alu_op=op, use_imm=use_imm,
                                 imm=random_imm(rng, op) if use_imm else 0)
        check_against_fsim(insn, with_uops(random_contents(rng, TINY), insn.uop_bgn, uops))


@pytest.mark.parametrize("cfg", [ACC16, BATCH2, VEC1, VEC2, VEC4, HALF, VEC1_LEAN, SERIAL, SERIAL1, SEQ, SEQ_B2,
                                 SEQ_MUL, SEQ_ONE, SEQ_LEAN, SEQ_ACC16, SEQ_ROWS, SEQ_ROWS_B2],
                         ids=lambda c: c.name)
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_alu_other_lane_layouts(cfg, op):
    """ALU ops on a 16-bit accumulator (shift limits, wrap), on batch 2, and with ALUs narrower than the
    row (``vector_lanes``) match fsim."""
    rng = np.random.default_rng(int(op))
    for use_imm in (True, False):
        insn, uops = random_loop(rng, Alu, cfg, n_uops=6, iter_out=2, iter_in=2, alu_op=op, use_imm=use_imm,
                                 imm=random_imm(rng, op))
        check_against_fsim(insn, with_uops(random_contents(rng, cfg), insn.uop_bgn, uops), cfg)


@pytest.mark.parametrize("cfg", [TINY, VEC1, VEC4, HALF, VEC1_LEAN, SERIAL1, SEQ, SEQ_ROWS], ids=lambda c: c.name)
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_alu_chain(op, cfg):
    """Micro-op k+1 reads, as its source, the row micro-op k writes (a running prefix).

    With one pass the source row is read in the very cycle the previous
    micro-op writes it, so only the transparent read of port B gives the new
    value; with several, the micro-op waits in S2 and reads it again.
    """
    rng = np.random.default_rng(50 + int(op))
    rows = [int(r) for r in rng.choice(cfg.acc_depth, 10, replace=False)]
    uops = [(rows[k + 1], rows[k], 0) for k in range(9)]
    insn = Alu(uop_bgn=200, uop_end=209, iter_out=1, iter_in=2, alu_op=op)
    check_against_fsim(insn, with_uops(random_contents(rng, cfg), 200, uops), cfg)


#: Immediates whose effect compounds when applied twice (MIN and MAX with an immediate never do).
COMPOUNDING_IMM = {AluOp.ADD: 12345, AluOp.SHR: 1, AluOp.MUL: -3}


@pytest.mark.parametrize("cfg", [TINY, VEC1, VEC4, HALF, VEC1_LEAN, SERIAL, WIDE, SEQ_MUL], ids=lambda c: c.name)
@pytest.mark.parametrize("use_imm", [True, False], ids=["imm", "vector"])
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_alu_repeated_destination(op, use_imm, cfg):
    """Micro-ops on the destination written 1, 2 or 3 micro-ops earlier (max pooling, sums) match fsim.

    Destinations repeat in back-to-back micro-ops (the transparent read of
    port A, or the core's forwarding in its place) and sources are sometimes the row just written.
    """
    rng = np.random.default_rng([int(op), use_imm, 9])
    for distance in (1, 2, 3):
        rows = [int(r) for r in rng.choice(cfg.acc_depth, distance + 1, replace=False)]
        uops = [(rows[u % distance], rows[(u + 1) % (distance + 1)], 0) for u in range(8)]
        insn = Alu(uop_bgn=40, uop_end=48, iter_out=2, iter_in=2, alu_op=op, use_imm=use_imm,
                   imm=COMPOUNDING_IMM.get(op, random_imm(rng, op)), src_factor_in=1)
        check_against_fsim(insn, with_uops(random_contents(rng, cfg), 40, uops), cfg)


@pytest.mark.parametrize("cfg", [SERIAL, SERIAL1, SEQ_MUL], ids=lambda c: c.name)
def test_a_serial_mul_takes_a_cycle_per_bit_and_nothing_else_slows(cfg):
    """With ``serial_mul`` a MUL micro-op spends ``acc_width`` cycles on each slice; the other operations
    keep their rate. Both match fsim."""
    rng = np.random.default_rng(12)
    uops = [(u, u + 8, 0) for u in range(8)]      # eight independent rows
    cycles = {}
    for op in (AluOp.MUL, AluOp.ADD):
        insn = Alu(uop_bgn=0, uop_end=8, iter_out=1, iter_in=1, alu_op=op)
        cycles[op] = check_against_fsim(insn, with_uops(random_contents(rng, cfg), 0, uops), cfg)["cycles"]
    assert cycles[AluOp.MUL] - cycles[AluOp.ADD] == 8 * cfg.vector_passes * (cfg.acc_width - 1), cycles


def test_alu_imm_ignores_source_index():
    """With ``use_imm`` the source index is not used, so it may run outside the acc buffer."""
    rng = np.random.default_rng(4)
    insn = Alu(uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, dst_factor_out=1, src_factor_out=200,
               src_factor_in=200, alu_op=AluOp.ADD, use_imm=True, imm=-7)
    check_against_fsim(insn, with_uops(random_contents(rng, TINY), 0, [(1, 255, 0), (2, 255, 0), (9, 255, 0)]))


# -- errors --------------------------------------------------------------------

ERROR_CASES = {
    "uop_bgn > uop_end": (Gemm(uop_bgn=10, uop_end=9, iter_out=1, iter_in=1), [], ErrorCode.UOP_RANGE),
    "uop_end past the buffer": (Alu(uop_bgn=500, uop_end=TINY.uop_depth + 1, iter_out=1, iter_in=1),
                                [], ErrorCode.UOP_RANGE),
    "reversed empty-loop alu": (Alu(uop_bgn=3, uop_end=1, iter_out=0, iter_in=0), [], ErrorCode.UOP_RANGE),
    "gemm dst outer": (Gemm(uop_bgn=0, uop_end=2, iter_out=4, iter_in=2, dst_factor_out=80, dst_factor_in=1),
                       [(10, 0, 0), (20, 0, 0)], ErrorCode.INDEX_RANGE),
    "gemm src inner": (Gemm(uop_bgn=0, uop_end=2, iter_out=2, iter_in=3, src_factor_in=100),
                       [(0, 10, 0), (1, 60, 0)], ErrorCode.INDEX_RANGE),
    "gemm wgt": (Gemm(uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, wgt_factor_out=64, wgt_factor_in=1),
                 [(0, 0, 0), (1, 0, 10), (2, 0, 63)], ErrorCode.INDEX_RANGE),
    # Controls: the largest index is the last entry of its buffer, or the micro-ops end the uop buffer.
    "gemm at every limit": (Gemm(uop_bgn=0, uop_end=3, iter_out=2, iter_in=2, dst_factor_out=100, dst_factor_in=1,
                                 src_factor_out=1, src_factor_in=200, wgt_factor_out=64, wgt_factor_in=1),
                            [(154, 0, 0), (0, 54, 0), (0, 0, 62)], None),
    "alu src at the limit": (Alu(uop_bgn=0, uop_end=2, iter_out=3, iter_in=1, src_factor_out=120, alu_op=AluOp.MAX),
                             [(0, 5, 0), (1, 15, 0)], None),
    "micro-ops up to the end": (Gemm(uop_bgn=TINY.uop_depth - 3, uop_end=TINY.uop_depth, iter_out=2, iter_in=1,
                                     dst_factor_out=1), [(3, 4, 5), (3, 7, 8), (9, 10, 11)], None),
    "alu src": (Alu(uop_bgn=0, uop_end=2, iter_out=3, iter_in=1, src_factor_out=120, alu_op=AluOp.MAX),
                [(0, 5, 0), (1, 17, 0)], ErrorCode.INDEX_RANGE),
    "alu dst inner": (Alu(uop_bgn=0, uop_end=1, iter_out=1, iter_in=9, dst_factor_in=32, alu_op=AluOp.ADD,
                          use_imm=True, imm=1), [(0, 0, 0)], ErrorCode.INDEX_RANGE),
}


@pytest.mark.parametrize("cfg", [TINY, SEQ, GL2], ids=lambda c: c.name)
@pytest.mark.parametrize("insn, uops, code", ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_range_errors(insn, uops, code, cfg):
    """Range errors come with ``done`` (no hang) and the code fsim reports; the core then runs on.

    The controls (no code) put the largest index exactly on the last entry
    of its buffer and must not fail.

    After the failing instruction a GEMM with reset must complete without an
    error and zero its rows: the error does not stick.
    """
    rng = np.random.default_rng(1)
    contents = with_uops(random_contents(rng, cfg), insn.uop_bgn, uops)
    reset = Gemm(uop_bgn=300, uop_end=301, iter_out=1, iter_in=4, dst_factor_in=1, reset=True)
    contents = with_uops(contents, 300, [(240, 0, 0)])
    (report, after), hw = run_core(cfg, contents, [insn, reset])
    error, ref = fsim_reference(cfg, contents, [insn, reset])
    assert report["error"] == error == (code or 0)
    if code:
        assert report["cycles"] <= cycle_limit(cfg, insn) + 16
    else:
        assert_state_matches(hw, ref, contents, [insn, reset])
    assert after["error"] == 0 and after["retired"] == 4
    assert (hw["acc"][240:244] == 0).all() and (hw["out"][240:244] == 0).all()


@pytest.mark.parametrize("cfg", [TINY, VEC1, WIDE, SEQ, SEQ_ROWS, GL2, GL1_B2], ids=lambda c: c.name)
def test_instruction_sequence(cfg):
    """GEMM and ALU instructions one after another (each sees the last one's results) match fsim.

    Mixing kinds exercises the switch of the accumulator read ports between
    the GEMM and ALU pipelines (with several passes, the registered read
    address) and the state carried from one instruction to the next.
    """
    rng = np.random.default_rng(21)
    contents = random_contents(rng, cfg)
    insns = []
    for k in range(10):
        cls = [Gemm, Alu][k % 2] if k < 6 else [Gemm, Alu][int(rng.integers(0, 2))]
        extra = {"alu_op": AluOp(int(rng.integers(0, 5))), "use_imm": bool(rng.integers(0, 2)),
                 "imm": int(rng.integers(-8, 9))} if cls is Alu else {"reset": k == 7}
        insn, uops = random_loop(rng, cls, cfg, n_uops=int(rng.integers(1, 5)), iter_out=int(rng.integers(1, 4)),
                                 iter_in=int(rng.integers(1, 4)), uop_bgn=40 * k, **extra)
        contents = with_uops(contents, insn.uop_bgn, uops)
        insns.append(insn)
    reports, hw = run_core(cfg, contents, insns)
    assert all(r["error"] == 0 for r in reports)
    assert [r["retired"] for r in reports] == [i.uop_count for i in insns]
    error, ref = fsim_reference(cfg, contents, insns)
    assert error == ErrorCode.NONE
    assert_state_matches(hw, ref, contents, insns)


def run_released(cfg, contents, insns):
    """Run ``insns`` on the core, each GEMM after the first started as soon as the one ahead is ``released``
    (as the sequencer starts it, while that one's sums drain); returns ``{acc, out}`` once all are done."""
    h = CoreHarness(cfg, contents)
    core, final = h.core, {}

    async def bench(ctx):
        for k, insn in enumerate(insns):
            ctx.set(core.insn, word(insn, cfg))
            await ctx.tick()
            ctx.set(core.start, 1)
            await ctx.tick()
            ctx.set(core.start, 0)
            for cycle in range(cycle_limit(cfg, insn) + 64):
                if ctx.get(core.done) or (k + 1 < len(insns) and ctx.get(core.released)):
                    break
                await ctx.tick()
            else:
                raise AssertionError(f"instruction {k}: neither released nor done: the core hangs")
            assert ctx.get(core.error) == 0
        await ctx.tick()
        assert not ctx.get(core.gemm_busy)
        final.update(read_acc_out(ctx, h))
    simulate(h, bench)
    return final


@pytest.mark.parametrize("cfg", [TINY, GL2, GL4_WIDE], ids=lambda c: c.name)
@pytest.mark.parametrize("flags", [{}, {"reset": True}, {"overwrite": True}], ids=["plain", "reset", "overwrite"])
def test_gemm_started_as_the_one_ahead_is_released(cfg, flags):
    """A GEMM started while the one ahead drains (on `released`), on the rows that one writes, sees its sums
    and keeps its own flags: the result matches fsim. (With passes, the last pass of the one ahead and the
    first of the next are a cycle apart in the pipeline.)"""
    rng = np.random.default_rng(30)
    first = [(int(rng.integers(0, 4)), int(rng.integers(0, 8)), int(rng.integers(0, 8))) for _ in range(4)]
    second = [(int(rng.integers(0, 4)), int(rng.integers(0, 8)), int(rng.integers(0, 8))) for _ in range(3)]
    insns = [Gemm(uop_bgn=0, uop_end=4, iter_out=2, iter_in=1, dst_factor_out=1, src_factor_out=1, wgt_factor_out=1),
             Gemm(uop_bgn=10, uop_end=13, iter_out=1, iter_in=2, dst_factor_in=1, src_factor_in=2, wgt_factor_in=1,
                  **flags),
             Gemm(uop_bgn=0, uop_end=4, iter_out=1, iter_in=1)]
    contents = with_uops(with_uops(random_contents(rng, cfg), 0, first), 10, second)
    hw = run_released(cfg, contents, insns)
    error, ref = fsim_reference(cfg, contents, insns)
    assert error == ErrorCode.NONE
    assert_state_matches(hw, ref, contents, insns)


def _ecp5_product(m, a, b, *, name):
    """What :func:`tilewright.hw.dsp.ecp5_product` builds, in flip-flops: the product of its operands a cycle
    before (the block's input registers)."""
    return pipe(m, a, f"{name}_a", data=True) * pipe(m, b, f"{name}_b", data=True)


def _ice40_product_pair(m, operands, *, name):
    """What :func:`tilewright.hw.dsp.ice40_product_pair` builds, in flip-flops: each product registered after
    its operands' registers."""
    return [pipe(m, pipe(m, a, f"{name}_a{n}", data=True) * pipe(m, b, f"{name}_b{n}", data=True),
                 f"{name}_p{n}", data=True) for n, (a, b) in enumerate(operands)]


@pytest.mark.parametrize("family, cfg", [("ecp5", GL4_WIDE), ("ecp5", GL4_WIDE.replace(name="b2_g2", batch=2,
                                                                                         gemm_lanes=2)),
                                         ("ecp5", WIDE_LEAN), ("ice40", GL2), ("ice40", TINY)],
                         ids=lambda v: getattr(v, "name", v))
def test_gemm_through_the_fpga_product_blocks(family, cfg, monkeypatch):
    """The FPGA forms of the products (an ECP5 DSP block taking its operands into its input registers, an
    iCE40 block making two), each swapped for flip-flops doing what the block does (the simulators have no
    model of the blocks; tests/hw/test_dsp.py checks the blocks against Yosys's own), with several passes
    choosing the weights in front of them: the results match fsim."""
    import tilewright.hw.core as core_module
    if family == "ecp5":
        monkeypatch.setattr(core_module, "is_ecp5", lambda platform: True)
        monkeypatch.setattr(core_module, "ecp5_product", _ecp5_product)
    else:
        monkeypatch.setattr(core_module, "is_ice40", lambda platform: True)
        monkeypatch.setattr(core_module, "ice40_product_pair", _ice40_product_pair)
    rng = np.random.default_rng(31)
    insn, uops = random_loop(rng, Gemm, cfg, n_uops=4, iter_out=2, iter_in=2)
    check_against_fsim(insn, with_uops(random_contents(rng, cfg), insn.uop_bgn, uops), cfg)


# -- throughput ----------------------------------------------------------------

#: Loop shapes (iter_out, iter_in, micro-ops) with n = 1, 8 and 64 micro-ops.
SHAPES = [(1, 1, 1), (1, 1, 8), (2, 4, 1), (2, 2, 2), (1, 1, 64), (4, 4, 4), (8, 1, 8), (1, 64, 1)]


@pytest.mark.parametrize("cls, cfg", [(Gemm, TINY), (Alu, TINY), (Alu, VEC1), (Gemm, GL2), (Gemm, GL1_B2)],
                         ids=["Gemm", "Alu", "Alu-tiny_v1", "Gemm-tiny_g2", "Gemm-tiny_b2_g1"])
def test_one_micro_op_per_cycle(cls, cfg):
    """From ``start`` to ``done`` takes n·p + c cycles for n micro-ops, the same c for every n and loop
    shape; p is 1, or ``vector_passes`` for ALU micro-ops on ALUs narrower than the row, ``gemm_passes``
    for GEMM micro-ops on a GEMM of fewer lanes (``gemm_lanes``).

    The loop generator must not lose a cycle moving between loop levels;
    results still match fsim. GEMM micro-ops on a repeated row (reductions)
    run at full rate too; ALU micro-ops here never read the row the one
    ahead of them writes (see the next test).
    """
    passes = cfg.vector_passes if cls is Alu else cfg.gemm_passes
    rng = np.random.default_rng(64)
    overhead = {}
    for iter_out, iter_in, n_uops in SHAPES:
        insn, uops = random_loop(rng, cls, cfg, n_uops=n_uops, iter_out=iter_out, iter_in=iter_in,
                                 **({"alu_op": AluOp.ADD} if cls is Alu else {}))
        if cls is Alu:      # rows apart: distinct rows within a micro-op loop, loop factors past them
            insn = replace(insn, dst_factor_out=n_uops * iter_in * 2, dst_factor_in=n_uops * 2, src_factor_out=0,
                           src_factor_in=0)
            uops = [(2 * u, 2 * u + 1, 0) for u in range(n_uops)]
            if (iter_out - 1) * insn.dst_factor_out + (iter_in - 1) * insn.dst_factor_in + 2 * n_uops > cfg.acc_depth:
                continue
        n = insn.uop_count
        report = check_against_fsim(insn, with_uops(random_contents(rng, cfg), insn.uop_bgn, uops), cfg)
        overhead[(iter_out, iter_in, n_uops)] = report["cycles"] - n * passes
    if cls is Gemm:
        insn = Gemm(uop_bgn=0, uop_end=8, iter_out=2, iter_in=4, src_factor_in=1)
        report = check_against_fsim(insn, with_uops(random_contents(rng, cfg), 0, [(5, u, u) for u in range(8)]), cfg)
        overhead["reduction"] = report["cycles"] - 64 * passes
    assert len(overhead) >= 4 and len(set(overhead.values())) == 1, f"cycles - n per shape: {overhead}"


@pytest.mark.parametrize("cfg", [TINY, VEC4, HALF, VEC1_LEAN], ids=lambda c: c.name)
@pytest.mark.parametrize("op", [AluOp.ADD, AluOp.MUL, AluOp.SHR])
def test_alu_chain_waits_one_cycle_per_dependent_micro_op(op, cfg):
    """An ALU micro-op reading the row the micro-op right ahead of it writes waits one cycle (that result
    is a stage from ready and forwarded), or with several passes five (until the last slice is through S5
    and written from the write register, and read back), six where it reads its two rows through
    registers, through one port one after the other or through two with three passes or more; one reading
    a row written two or more micro-ops earlier does not. Both match fsim."""
    rng = np.random.default_rng(65)
    cycles = {}
    for name, uops in (("chain", [(5, u, u) for u in range(8)]), ("apart", [(u, u + 8, u) for u in range(8)])):
        insn = Alu(uop_bgn=0, uop_end=8, iter_out=1, iter_in=4, alu_op=op)
        cycles[name] = check_against_fsim(insn, with_uops(random_contents(rng, cfg), 0, uops), cfg)["cycles"]
    wait = 1 if cfg.vector_passes == 1 else 6 if alu_reads_one_port(cfg) or cfg.vector_passes >= 3 else 5
    assert cycles["chain"] - cycles["apart"] == 31 * wait, cycles    # 32 micro-ops on one row: 31 wait


def test_serial_core_buffers_go_by_lane_only_where_a_beat_is_one_lanes_worth():
    """The serial core takes a LOAD's accumulator writes a lane wide (``acc_loads_by_lane``) only when every
    one of them is a lane: a 32-bit beat of 32-bit lanes, an ACC8 element (a byte a lane) within a beat;
    and keeps the weights a row per output lane (``wgt_rows_by_lane``) where a beat is one such row."""
    assert acc_loads_by_lane(SEQ) and wgt_rows_by_lane(SEQ)
    assert not acc_loads_by_lane(SEQ_B2)         # 16 lanes: an ACC8 element is four beats
    assert wgt_rows_by_lane(SEQ_B2)              # (4 weights of 8 bits: a beat a row still)
    assert not acc_loads_by_lane(SEQ_ACC16)      # a beat holds two 16-bit lanes
    assert not wgt_rows_by_lane(SEQ_ONE)         # one output lane: an entry is a row already
    assert not acc_loads_by_lane(VEC1) and not wgt_rows_by_lane(VEC1)     # the pipelined core reads whole rows
    # A lane a row where no requantizing STORE reads whole accumulator entries
    assert acc_rows_by_lane(SEQ_ROWS) and acc_rows_by_lane(SEQ_ROWS_B2)
    assert not acc_rows_by_lane(SEQ) and not acc_rows_by_lane(SEQ_B2)


@pytest.mark.parametrize("cfg", [SEQ, SEQ_B2], ids=lambda c: c.name)
def test_serial_core_cycles(cfg):
    """The serial core's cycles as docs/hardware.md states them: a GEMM micro-op ``lanes + 6 + log2(block_in)``
    (its lanes issued a cycle each, two reads, the products' and tree's latency, two to drain), an ALU
    micro-op ``2 + lanes·(5 + k)`` with k the operation's cycles (1 for ADD, n for a shift by n > 0, the
    width for a shift left beyond it), a cycle less a lane with an immediate; one cycle more for the
    instruction. Results match fsim."""
    rng = np.random.default_rng(66)
    lanes, n = cfg.batch * cfg.block_out, 6
    uops = [(u, u + 8, u) for u in range(n)]
    expected = {
        "gemm": (Gemm(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1), lanes + 6 + cfg.block_in.bit_length() - 1),
        "add": (Alu(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1, alu_op=AluOp.ADD), 2 + lanes * 6),
        "add imm": (Alu(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1, alu_op=AluOp.ADD, use_imm=True, imm=3),
                    2 + lanes * 5),
        "shr 5": (Alu(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1, alu_op=AluOp.SHR, use_imm=True, imm=5),
                  2 + lanes * (4 + 5)),
        "shl 40 (clamped to the width)": (Alu(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1, alu_op=AluOp.SHR,
                                              use_imm=True, imm=-40), 2 + lanes * (4 + cfg.acc_width)),
    }
    for name, (insn, per_uop) in expected.items():
        report = check_against_fsim(insn, with_uops(random_contents(rng, cfg), 0, uops), cfg)
        assert report["cycles"] == n * per_uop + 1, (name, report["cycles"], n * per_uop + 1)
