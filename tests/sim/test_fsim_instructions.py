"""Instruction-level tests of the functional simulator against a naive reference.

Every test builds one DRAM image and one program, runs them on
:class:`~tilewright.sim.FunctionalSimulator` and on
:class:`tests.reference.ReferenceMachine` (written from ``docs/isa.md``), and
compares the counters, every SRAM and the whole DRAM bit for bit.

fsim runs the three streams out of order unless dependency tokens order them,
so :func:`in_order` adds the flags (and, between a LOAD INP/WGT and a STORE,
an empty LOAD UOP on the compute stream) that make it execute in program
order, which is the order the reference uses.
"""

import itertools
import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tilewright import PRESETS, isa
from tilewright.builder import noop
from tilewright.isa import Alu, AluOp, Finish, Gemm, Load, MemType, Stream, Store, Uop, stream_of, uop_format
from tilewright.sim import FunctionalSimulator, fsim

from tests.reference import ReferenceMachine, alu_apply, shift_right, to_signed

TINY, SMALL = PRESETS["tiny"], PRESETS["small"]
ACC16 = TINY.replace(name="tiny_acc16", acc_width=16)
WIDE = TINY.replace(name="tiny_w16", inp_width=16, wgt_width=16, out_width=16)
BATCH2 = TINY.replace(name="tiny_b2", batch=2, block_out=8)
CONFIGS = [TINY, SMALL, ACC16, WIDE, BATCH2]

DRAM_BYTES = 1 << 16
INT32_MAX, INT32_MIN = 2**31 - 1, -2**31

#: Counters compared between fsim's RunStats and the reference.
STAT_KEYS = ("dram_bytes_read", "dram_bytes_written", "gemm_uops", "alu_uops", "instructions")


def cfg_id(cfg):
    return cfg.name


# -- program ordering --------------------------------------------------------

def in_order(program):
    """``program`` with dependency flags that make every instruction wait for its predecessor.

    Each change of stream gets one token from the previous instruction to the
    next; load and store have no queue between them, so an empty compute
    instruction relays the token.
    """
    body = []
    for insn in program:
        if body and {stream_of(body[-1]), stream_of(insn)} == {Stream.LOAD, Stream.STORE}:
            body.append(noop(Stream.COMPUTE))
        body.append(insn)
    for k in range(1, len(body)):
        before, after = stream_of(body[k - 1]), stream_of(body[k])
        if before == after:
            continue
        forward = after > before                    # load → compute → store is "next"
        body[k - 1] = body[k - 1].replace(**{"push_next" if forward else "push_prev": True})
        body[k] = body[k].replace(**{"pop_prev" if forward else "pop_next": True})
    return body


# -- the test bench ----------------------------------------------------------

def value_range(bits):
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


class Bench:
    """fsim and the reference with identical DRAM contents."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.sim = FunctionalSimulator(cfg, dram_bytes=DRAM_BYTES)
        self.ref = ReferenceMachine(cfg, dram_bytes=DRAM_BYTES)
        self.sim_stats = self.ref_stats = None

    # element geometry of each DRAM kind: (bits per value, value shape)
    def geometry(self, kind):
        c = self.cfg
        return {
            "inp": (c.inp_width, (c.batch, c.block_in)),
            "wgt": (c.wgt_width, (c.block_out, c.block_in)),
            "acc": (c.acc_width, (c.batch, c.block_out)),
            "acc8": (8, (c.batch, c.block_out)),
            "out": (c.out_width, (c.batch, c.block_out)),
        }[kind]

    def alloc(self, kind, count):
        """Element address of a fresh block of ``count`` elements of ``kind``."""
        nbytes = self.cfg.elem_bytes(kind)
        return self.sim.dram.alloc(count * nbytes, align=nbytes) // nbytes

    def put_bytes(self, kind, raw):
        """Allocate and write raw bytes (a whole number of elements) to both DRAMs."""
        nbytes = self.cfg.elem_bytes(kind)
        assert len(raw) % nbytes == 0
        addr = self.alloc(kind, len(raw) // nbytes)
        self.sim.dram.write(addr * nbytes, bytes(raw))
        self.ref.write(addr * nbytes, bytes(raw))
        return addr

    def put(self, kind, values):
        """Write elements of ``kind`` to both DRAMs; return their element address.

        ``values`` is a list of :class:`Uop` for ``"uop"``, else an integer
        array reshapeable to ``(count, *element shape)``.
        """
        if kind == "uop":
            fmt, nbytes = uop_format(self.cfg), self.cfg.elem_bytes("uop")
            return self.put_bytes(kind, b"".join(fmt.pack(u).to_bytes(nbytes, "little") for u in values))
        bits, shape = self.geometry(kind)
        arr = np.asarray(values, dtype=np.int64).reshape((-1, *shape))
        lo, hi = value_range(bits)
        assert arr.min(initial=0) >= lo and arr.max(initial=0) <= hi, "value does not fit its element"
        return self.put_bytes(kind, arr.astype(f"<i{bits // 8}").tobytes())

    def random_values(self, rng, kind, count, *, nonzero=False):
        """``count`` random elements of ``kind`` spanning its whole value range."""
        bits, shape = self.geometry(kind)
        lo, hi = value_range(bits)
        values = rng.integers(lo, hi, size=(count, *shape), endpoint=True)
        if nonzero:
            values[values == 0] = 1
        return values

    def random_uops(self, rng, count):
        """``count`` random non-zero micro-ops whose indices fit every buffer they may address."""
        c = self.cfg
        tops = [c.depth("acc"), min(c.depth("inp"), c.depth("acc")), c.depth("wgt")]
        return [Uop(*(int(rng.integers(1, t)) for t in tops)) for _ in range(count)]

    def put_random(self, rng, kind, count, *, nonzero=False):
        if kind == "uop":
            return self.put(kind, self.random_uops(rng, count))
        return self.put(kind, self.random_values(rng, kind, count, nonzero=nonzero))

    def run(self, program):
        """Run ``program`` (FINISH appended) on both machines and compare everything."""
        program = in_order([*program, Finish()])
        sim_stats = self.sim.run(program).as_dict()
        self.ref_stats = self.ref.run(program)
        self.sim_stats = {key: sim_stats[key] for key in STAT_KEYS}
        assert self.sim_stats == self.ref_stats
        self.compare_srams()
        self.compare_dram()
        return self.ref_stats

    def compare_srams(self):
        assert np.array_equal(self.sim.sram("uop"), np.array(self.ref.uop, dtype=np.int64)), "uop SRAM"
        for name in ("inp", "wgt", "acc", "out"):
            sim, ref = self.sim.sram(name), getattr(self.ref, name)
            assert sim.shape == ref.shape, name
            diff = np.argwhere(sim.astype(np.int64) != ref)
            assert diff.size == 0, f"{name} SRAM differs at {diff[:5].tolist()}: " \
                                   f"fsim {sim[tuple(diff[0])]}, reference {ref[tuple(diff[0])]}"

    def compare_dram(self):
        sim, ref = self.sim.dram.read(0, DRAM_BYTES), self.ref.read(0, DRAM_BYTES)
        diff = np.flatnonzero(sim != ref)
        assert diff.size == 0, f"DRAM differs at byte addresses {diff[:8].tolist()}"


@pytest.fixture
def rng(request):
    """A numpy generator seeded from the test id, so every test is reproducible."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(params=["whole", "parts", "chains"])
def chunks(request, monkeypatch):
    """GEMM and ALU instructions evaluated whole, a few loop positions at a time (fsim's chunks made tiny),
    or with ALU waves found by the one-pass search (the vectorised one given a single round): none may
    change a result."""
    if request.param == "parts":
        monkeypatch.setattr(fsim, "GEMM_CHUNK", 3)
        monkeypatch.setattr(fsim, "ALU_CHUNK", 2)
    elif request.param == "chains":
        monkeypatch.setattr(fsim, "_WAVE_ROUNDS", 1)


def load(kind, **fields):
    return Load(memory_type=MemType[kind.upper()], **fields)


# -- the reference's own integer helpers (hand-computed from docs/isa.md) ------

def test_reference_integer_helpers():
    assert to_signed(2**31, 32) == INT32_MIN and to_signed(-1, 8) == -1 and to_signed(0x1FF, 8) == -1
    assert to_signed(0x17F, 8) == 127 and to_signed(128, 8) == -128
    assert shift_right(-7, 1, 32) == -4                      # toward minus infinity
    assert shift_right(-7, 100, 32) == -1 and shift_right(7, 31, 32) == 0
    assert shift_right(3, -2, 32) == 12 and shift_right(1, -31, 32) == INT32_MIN
    assert shift_right(1, -32, 32) == 0 and shift_right(-1, -40, 32) == 0
    assert shift_right(0x4000, -1, 16) == -0x8000
    assert alu_apply(AluOp.ADD, INT32_MAX, 1, 32) == INT32_MIN
    assert alu_apply(AluOp.MUL, 0x10000, 0x10000, 32) == 0
    assert alu_apply(AluOp.MUL, -3, 5, 16) == -15
    assert alu_apply(AluOp.MIN, -5, 3, 32) == -5 and alu_apply(AluOp.MAX, -5, 3, 32) == 3


# -- LOAD --------------------------------------------------------------------

PAD_VALUES = (2, 1, 3, 1)          # y_pad0, y_pad1, x_pad0, x_pad1 when non-zero
PAD_COMBOS = list(itertools.product(*[(0, v) for v in PAD_VALUES]))


@pytest.mark.parametrize("pads", PAD_COMBOS, ids=lambda p: "pad{}{}{}{}".format(*p))
@pytest.mark.parametrize("kind", ["inp", "acc", "acc8", "wgt", "uop"])
def test_load_padding(kind, pads, rng):
    """The padded rectangle over SRAM filled with non-zero noise: pads must become zero."""
    bench = Bench(TINY)
    noise_kind = "acc" if kind == "acc8" else kind
    noise = bench.put_random(rng, noise_kind, 64, nonzero=True)
    data = bench.put_random(rng, kind, 12, nonzero=True)
    y_pad0, y_pad1, x_pad0, x_pad1 = pads
    stats = bench.run([
        load(noise_kind, sram_base=0, dram_base=noise, y_size=8, x_size=8, x_stride=8),
        load(kind, sram_base=5, dram_base=data, y_size=3, x_size=2, x_stride=4,
             y_pad0=y_pad0, y_pad1=y_pad1, x_pad0=x_pad0, x_pad1=x_pad1),
    ])
    if noise_kind == kind:
        assert stats["dram_bytes_read"][kind] == (64 + 6) * TINY.elem_bytes(kind)
    else:
        assert stats["dram_bytes_read"][kind] == 6 * TINY.elem_bytes(kind)


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_load_uop_extreme_fields(cfg):
    """Micro-ops with every field at 0, 1 and its maximum survive the DRAM round trip."""
    bench = Bench(cfg)
    fields = uop_format(cfg).fields
    uops = [Uop(**{f.name: v(f) for f in fields})
            for v in (lambda f: f.max, lambda f: 0, lambda f: 1, lambda f: f.max >> 1)]
    uops += [Uop(dst=fields[0].max), Uop(src=fields[1].max), Uop(wgt=fields[2].max)]
    addr = bench.put("uop", uops)
    bench.run([load("uop", sram_base=cfg.depth("uop") - 7, dram_base=addr, y_size=1, x_size=7)])
    assert bench.ref.uop[-7:] == [(u.dst, u.src, u.wgt) for u in uops]


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("kind", ["inp", "wgt", "acc", "acc8"])
def test_load_basic_extremes(cfg, kind, rng):
    """Values at the limits of every element width, and random ones, land unchanged."""
    bench = Bench(cfg)
    bits, shape = bench.geometry(kind)
    lo, hi = value_range(bits)
    special = np.resize(np.array([lo, hi, -1, 0, 1, lo + 1, hi - 1]), (3, *shape))
    addr = bench.put(kind, np.concatenate([special, bench.random_values(rng, kind, 5)]))
    buffer = "acc" if kind == "acc8" else kind
    depth = cfg.depth(buffer)
    bench.run([load(kind, sram_base=depth - 8, dram_base=addr, y_size=2, x_size=4, x_stride=4)])
    if kind == "acc8":     # sign-extended, not zero-extended
        assert bench.ref.acc[depth - 8:depth - 5].min() == -128


@pytest.mark.parametrize("x_stride", [0, 1, 2, 5, 9])
@pytest.mark.parametrize("kind", ["uop", "inp", "wgt", "acc", "acc8"])
def test_load_strides(kind, x_stride, rng):
    """x_stride larger than, equal to, smaller than (rows overlap) and 0 (rows repeat)."""
    bench = Bench(TINY)
    addr = bench.put_random(rng, kind, 48, nonzero=True)
    bench.run([load(kind, sram_base=3, dram_base=addr + 1, y_size=4, x_size=3, x_stride=x_stride,
                    x_pad1=1)])


@pytest.mark.parametrize("sizes", [(0, 3), (3, 0), (0, 0)], ids=lambda s: f"y{s[0]}x{s[1]}")
@pytest.mark.parametrize("kind", ["uop", "inp", "wgt", "acc", "acc8"])
def test_load_empty_moves_nothing(kind, sizes, rng):
    """A LOAD with x_size or y_size 0 writes no SRAM (not even its pads) and reads no DRAM."""
    bench = Bench(TINY)
    noise_kind = "acc" if kind == "acc8" else kind
    noise = bench.put_random(rng, noise_kind, 16, nonzero=True)
    data = bench.put_random(rng, kind, 16)
    bench.run([load(noise_kind, sram_base=0, dram_base=noise, y_size=1, x_size=16)])
    before = bench.sim.sram(noise_kind)
    stats = bench.run([load(kind, sram_base=0, dram_base=data, y_size=sizes[0], x_size=sizes[1],
                            x_stride=3, y_pad0=1, y_pad1=1, x_pad0=1, x_pad1=1)])
    assert np.array_equal(bench.sim.sram(noise_kind), before)
    assert stats["dram_bytes_read"][kind] == 0


# -- GEMM --------------------------------------------------------------------

def _gemm_setup(bench, rng, n_inp=24, n_wgt=24, n_acc=32):
    """Random inp, wgt and acc entries loaded from index 0 (one LOAD each)."""
    return [load(kind, sram_base=0, dram_base=bench.put_random(rng, kind, n), y_size=1, x_size=n)
            for kind, n in (("inp", n_inp), ("wgt", n_wgt), ("acc", n_acc))]


GEMM_LOOPS = dict(iter_out=3, iter_in=2, dst_factor_out=7, dst_factor_in=2, src_factor_out=6,
                  src_factor_in=3, wgt_factor_out=5, wgt_factor_in=1)
GEMM_UOPS = [Uop(0, 0, 0), Uop(1, 1, 2), Uop(0, 2, 1), Uop(3, 0, 3), Uop(1, 2, 0)]  # dst 0 and 1 repeat


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
def test_gemm_loops_and_repeated_destinations(cfg, rng, chunks):
    bench = Bench(cfg)
    uops = bench.put("uop", [Uop(5, 5, 5), *GEMM_UOPS])
    stats = bench.run([
        *_gemm_setup(bench, rng),
        load("uop", sram_base=10, dram_base=uops, y_size=1, x_size=6),
        Gemm(uop_bgn=11, uop_end=16, **GEMM_LOOPS),
    ])
    assert stats["gemm_uops"] == 3 * 2 * 5


def test_gemms_whose_weight_indices_share_bytes_not_shape(rng):
    """fsim keeps each GEMM's arranged weights for the next one; one micro-op over two weights (indices of
    shape (1, 2, 1)) and two micro-ops on one row (shape (1, 1, 2)) have indices of the same bytes but are
    different arrangements (a cache keyed by the bytes alone handed the second GEMM the first's)."""
    bench = Bench(TINY)
    uops = bench.put("uop", [Uop(0, 0, 0), Uop(0, 1, 1)])
    bench.run([*_gemm_setup(bench, rng), load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=2),
               Gemm(uop_bgn=0, uop_end=1, iter_out=1, iter_in=2, dst_factor_in=1, wgt_factor_in=1),
               Gemm(uop_bgn=0, uop_end=2, iter_out=1, iter_in=1)])


@pytest.mark.parametrize("cfg", [TINY, BATCH2], ids=cfg_id)
def test_output_blocks_reading_the_same_inputs_share_one_product(cfg, rng, chunks):
    """A tile's output channel blocks (destination groups reading the same inputs, each with its own weights)
    are one matrix product with their weights side by side; the sums are the reference's, in the same rows,
    and a second instruction over the same weights in the other arrangement (one group) reuses nothing wrong."""
    bench = Bench(cfg)
    # three destination groups (rows 0, 8, 16), each summing inputs 0-2 against its own three weights
    uops = bench.put("uop", [Uop(8 * g, i, 3 * g + i) for g in range(3) for i in range(3)])
    program = [*_gemm_setup(bench, rng), load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=9),
               Gemm(uop_bgn=0, uop_end=9, iter_out=2, iter_in=3, dst_factor_out=1, dst_factor_in=2,
                    src_factor_out=4, src_factor_in=1),
               Gemm(uop_bgn=3, uop_end=6, iter_out=1, iter_in=2, dst_factor_in=1, src_factor_in=5)]
    bench.run(program)
    # (the micro-ops are in place after the run: the first GEMM's plan is one shared product)
    assert [g.shared for g in bench.sim._gemm_plan(program[-2]).groups] == [True]


@pytest.mark.parametrize("cfg", CONFIGS, ids=cfg_id)
@pytest.mark.parametrize("shared", [True, False], ids=["shared", "own_inputs"])
def test_channel_blocks_stored_one_after_another_accumulate_in_place(cfg, shared, rng, chunks):
    """A tile's output channel blocks whose rows follow one another (block g's six positions at rows 6g…6g+5,
    as the compiler lays a tile out) are accumulated in place, block by block, with products of the
    accumulators' own width where every sum fits it; the sums wrap as the reference's do, from accumulators
    near both limits."""
    bench = Bench(cfg)
    # three blocks of two micro-ops each, reading inputs 0-1 (or 0-1, 2-3, 4-5) against their own weights
    uops = bench.put("uop", [Uop(6 * g, i + (0 if shared else 2 * g), 2 * g + i) for g in range(3) for i in range(2)])
    lo, hi = value_range(cfg.acc_width)
    accs = bench.random_values(rng, "acc", 18)
    accs[::4], accs[1::4] = hi, lo
    gemm = Gemm(uop_bgn=0, uop_end=6, iter_out=2, iter_in=3, dst_factor_out=3, dst_factor_in=1,
                src_factor_out=9, src_factor_in=3)
    program = [*_gemm_setup(bench, rng)[:2],
               load("acc", sram_base=0, dram_base=bench.put("acc", accs), y_size=1, x_size=18),
               load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=6), gemm, gemm]
    bench.run(program)
    plan = bench.sim._gemm_plan(gemm)
    assert plan.by_group and plan.rows == slice(0, 18) and [g.shared for g in plan.groups] == [shared]
    assert plan.fits_acc == (cfg.acc_width == 32 and cfg.inp_width == 8)


def test_plans_follow_the_micro_ops_and_the_data(rng):
    """fsim keeps each instruction's plan (GEMM/ALU rows by the micro-op buffer's contents, LOAD/STORE views
    of DRAM): the same instructions over other micro-ops, loaded to the same place, and a second run of the
    same program over other data and micro-ops must each follow what is there now."""
    bench = Bench(TINY)
    others = [Uop(u.dst + 1, u.src, 3 - u.wgt) for u in GEMM_UOPS]       # (other rows, other weights)
    first, second = (bench.put("uop", uops) for uops in (GEMM_UOPS, others))
    setup = _gemm_setup(bench, rng)
    gemm = Gemm(uop_bgn=0, uop_end=5, **GEMM_LOOPS)
    program = [*setup, load("uop", sram_base=0, dram_base=first, y_size=1, x_size=5), gemm,
               load("uop", sram_base=0, dram_base=second, y_size=1, x_size=5), gemm]
    bench.run(program)
    for kind, values in (("uop", [Uop(u.dst, u.src + 2, u.wgt) for u in GEMM_UOPS]), ("inp", None)):
        # (the same places, new contents)
        nbytes = bench.cfg.elem_bytes(kind)
        raw = (b"".join(uop_format(bench.cfg).pack(u).to_bytes(nbytes, "little") for u in values) if kind == "uop"
               else bench.random_values(rng, "inp", 8).astype("<i1").tobytes())
        address = (first if kind == "uop" else next(i.dram_base for i in setup if i.memory_type == MemType.INP))
        bench.sim.dram.write(address * nbytes, raw)
        bench.ref.write(address * nbytes, raw)
    bench.run(program)


def test_gemm_reduction_longer_than_a_float32_sum_holds(rng):
    """A reduction of 300 micro-ops on one row (1,200 products of 8-bit extremes: a sum past 2**24, where float32
    drops low bits) is exact: fsim sums it as float32 products over slices of at most EXACT_FLOAT32_TERMS
    terms, added in float64."""
    bench = Bench(TINY)
    n = 300
    assert n * TINY.block_in > fsim.EXACT_FLOAT32_TERMS
    extremes = lambda kind, count: bench.put(kind, rng.choice([-128, -127], (count,) + bench.geometry(kind)[1]))
    inp, wgt = extremes("inp", 24), extremes("wgt", 24)
    uops = bench.put("uop", [Uop(0, u % 24, (7 * u) % 24) for u in range(n)])
    bench.run([load("inp", sram_base=0, dram_base=inp, y_size=1, x_size=24),
               load("wgt", sram_base=0, dram_base=wgt, y_size=1, x_size=24),
               load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=n),
               Gemm(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1, reset=True),
               Gemm(uop_bgn=0, uop_end=n, iter_out=1, iter_in=1)])
    assert np.abs(bench.ref.acc[0]).max() > 2 ** 24


@pytest.mark.parametrize("cfg", [TINY, BATCH2], ids=cfg_id)
def test_gemm_reset(cfg, rng, chunks):
    """Reset zeroes acc and out at the looped destinations only, then accumulation restarts."""
    bench = Bench(cfg)
    uops = bench.put("uop", GEMM_UOPS)
    stats = bench.run([
        *_gemm_setup(bench, rng),
        load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=5),
        Gemm(uop_bgn=0, uop_end=5, **GEMM_LOOPS),
        Gemm(reset=True, uop_bgn=1, uop_end=4, **GEMM_LOOPS),
        Gemm(uop_bgn=2, uop_end=5, **{**GEMM_LOOPS, "iter_out": 1}),
    ])
    assert stats["gemm_uops"] == 30 + 18 + 6


@pytest.mark.parametrize("cfg", [TINY, BATCH2], ids=cfg_id)
def test_gemm_overwrite(cfg, rng, chunks):
    """Overwrite replaces each destination by its micro-op's product; on a repeated row the last one wins."""
    bench = Bench(cfg)
    uops = bench.put("uop", GEMM_UOPS)
    stats = bench.run([
        *_gemm_setup(bench, rng),
        load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=5),
        Gemm(uop_bgn=0, uop_end=5, **GEMM_LOOPS),
        Gemm(overwrite=True, uop_bgn=1, uop_end=4, **GEMM_LOOPS),
        Gemm(overwrite=True, reset=True, uop_bgn=4, uop_end=5, **{**GEMM_LOOPS, "iter_out": 1}),
        Gemm(uop_bgn=2, uop_end=5, **{**GEMM_LOOPS, "iter_out": 1}),
    ])
    assert stats["gemm_uops"] == 30 + 18 + 2 + 6


@pytest.mark.parametrize("loops", [dict(uop_bgn=3, uop_end=3, iter_out=2, iter_in=2),
                                   dict(uop_bgn=0, uop_end=3, iter_out=0, iter_in=2),
                                   dict(uop_bgn=0, uop_end=3, iter_out=2, iter_in=0)],
                         ids=["empty_range", "iter_out0", "iter_in0"])
@pytest.mark.parametrize("reset", [False, True])
def test_gemm_nothing_to_do(loops, reset, rng):
    bench = Bench(TINY)
    uops = bench.put("uop", GEMM_UOPS)
    stats = bench.run([*_gemm_setup(bench, rng),
                       load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=5),
                       Gemm(reset=reset, **loops)])
    assert stats["gemm_uops"] == 0


@pytest.mark.parametrize("cfg", [TINY, SMALL, ACC16, WIDE], ids=cfg_id)
def test_gemm_accumulation_wraps(cfg):
    """Accumulators near both acc_width limits plus extreme products wrap around."""
    bench = Bench(cfg)
    lo, hi = value_range(cfg.acc_width)
    ilo, ihi = value_range(cfg.inp_width)
    wlo, whi = value_range(cfg.wgt_width)
    _, acc_shape = bench.geometry("acc")
    accs = np.stack([np.full(acc_shape, v) for v in (hi, hi - 3, lo, lo + 3, 0, -1)])
    inps = np.stack([np.full(bench.geometry("inp")[1], v) for v in (ihi, ilo, ilo)])
    wgts = np.stack([np.full(bench.geometry("wgt")[1], v) for v in (whi, wlo)])
    # (acc, inp, wgt): max·max on top of max, min·min (positive) on max, max·min (negative) on
    # min, ...; entry 0 is hit twice per iteration
    uops = [Uop(0, 0, 0), Uop(1, 1, 1), Uop(2, 0, 1), Uop(3, 2, 0), Uop(4, 1, 1), Uop(5, 0, 0),
            Uop(0, 1, 1)]
    program = [load("acc", sram_base=0, dram_base=bench.put("acc", accs), y_size=1, x_size=6),
               load("inp", sram_base=0, dram_base=bench.put("inp", inps), y_size=1, x_size=3),
               load("wgt", sram_base=0, dram_base=bench.put("wgt", wgts), y_size=1, x_size=2),
               load("uop", sram_base=0, dram_base=bench.put("uop", uops), y_size=1, x_size=7),
               Gemm(uop_bgn=0, uop_end=7, iter_out=3, iter_in=1)]
    bench.run(program)
    # by hand: entry 0 gains block_in·(max·max + min·min) three times on top of hi
    unwrapped = hi + 3 * cfg.block_in * (ihi * whi + ilo * wlo)
    assert unwrapped > hi and (bench.sim.sram("acc")[0] == to_signed(unwrapped, cfg.acc_width)).all()


# -- ALU ---------------------------------------------------------------------

def interesting_values(width):
    """Edge values of a signed ``width``-bit accumulator, shift amounts around it, and others."""
    lo, hi = value_range(width)
    values = [0, 1, -1, 2, -2, 3, -7, 15, 16, 17, -15, -16, -17, 31, 32, 33, -31, -32, -33,
              100, -100, hi, lo, hi - 1, lo + 1, hi // 2 + 1, 0x5A5A, -0x1234]
    return sorted({to_signed(v, width) for v in values})


def put_values(bench, values, *, pad=0):
    """Write a flat list of accumulator values as ACC elements (padded with ``pad``); address, count."""
    lanes = bench.cfg.batch * bench.cfg.block_out
    values = list(values) + [pad] * (-len(values) % lanes)
    return bench.put("acc", values), len(values) // lanes


IMMEDIATES = [-32768, -100, -40, -33, -32, -31, -17, -16, -15, -1, 0, 1, 3, 15, 16, 17, 31, 32, 33,
              40, 32767]


@pytest.mark.parametrize("imm", IMMEDIATES)
@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
@pytest.mark.parametrize("cfg", [TINY, ACC16], ids=cfg_id)
def test_alu_immediate(cfg, op, imm, chunks):
    """Every op with an immediate over every interesting accumulator value (both loop levels)."""
    bench = Bench(cfg)
    addr, count = put_values(bench, interesting_values(cfg.acc_width), pad=-5)
    uops = bench.put("uop", [Uop(0, 0, 0), Uop(count, 0, 0)])
    half = (count + 1) // 2
    stats = bench.run([
        load("acc", sram_base=0, dram_base=addr, y_size=1, x_size=count),
        load("acc", sram_base=count, dram_base=addr, y_size=1, x_size=count),
        load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=2),
        Alu(alu_op=op, use_imm=True, imm=imm, uop_bgn=0, uop_end=2, iter_out=half, iter_in=2,
            dst_factor_out=2, dst_factor_in=1, src_factor_out=3, src_factor_in=1),
    ])
    assert stats["alu_uops"] == half * 2 * 2


@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
@pytest.mark.parametrize("cfg", [TINY, ACC16, SMALL, BATCH2], ids=cfg_id)
def test_alu_vector_all_pairs(cfg, op, chunks):
    """Every op on acc[dst], acc[src] for every pair of interesting values (in chunks that fit)."""
    bench = Bench(cfg)
    lanes = cfg.batch * cfg.block_out
    pairs = list(itertools.product(interesting_values(cfg.acc_width), repeat=2))
    chunk = min(cfg.depth("acc") // 2, 64) * lanes
    for start in range(0, len(pairs), chunk):
        part = pairs[start:start + chunk]
        a_addr, count = put_values(bench, [a for a, _ in part])
        b_addr, _ = put_values(bench, [b for _, b in part])
        bench.run([   # acc[k] op= acc[count + k]
            load("acc", sram_base=0, dram_base=a_addr, y_size=1, x_size=count),
            load("acc", sram_base=count, dram_base=b_addr, y_size=1, x_size=count),
            load("uop", sram_base=7, dram_base=bench.put("uop", [Uop(0, count, 0)]), y_size=1, x_size=1),
            Alu(alu_op=op, uop_bgn=7, uop_end=8, iter_out=count, iter_in=1,
                dst_factor_out=1, src_factor_out=1),
        ])


@pytest.mark.parametrize("op", list(AluOp), ids=lambda op: op.name)
def test_alu_reads_earlier_results(op, rng, chunks):
    """Later micro-ops read destinations written by earlier ones, including src == dst."""
    bench = Bench(TINY)
    addr = bench.put("acc", rng.integers(-40, 40, size=(8, 1, 4)))
    chain = [Uop(1, 0, 0), Uop(2, 1, 0), Uop(1, 2, 0), Uop(3, 3, 0), Uop(0, 1, 0), Uop(2, 0, 0)]
    bench.run([
        load("acc", sram_base=0, dram_base=addr, y_size=1, x_size=8),
        load("uop", sram_base=0, dram_base=bench.put("uop", chain), y_size=1, x_size=len(chain)),
        Alu(alu_op=op, uop_bgn=0, uop_end=len(chain), iter_out=2, iter_in=1, dst_factor_out=4,
            src_factor_out=4),
    ])


@pytest.mark.parametrize("op", [AluOp.MAX, AluOp.MIN, AluOp.ADD], ids=lambda op: op.name)
@pytest.mark.parametrize("cfg", [TINY, BATCH2], ids=cfg_id)
def test_alu_pooling_reduction(cfg, op, rng, chunks):
    """A 2×2 pooling over a 4×4 map: four micro-ops on one destination per output pixel."""
    bench = Bench(cfg)
    fmap = bench.put_random(rng, "acc", 16)
    window = [Uop(16, 0, 0), Uop(16, 1, 0), Uop(16, 4, 0), Uop(16, 5, 0)]
    bench.run([
        load("acc", sram_base=0, dram_base=fmap, y_size=1, x_size=16),
        load("uop", sram_base=0, dram_base=bench.put("uop", window), y_size=1, x_size=4),
        # seed the destinations with the window's first element, then reduce
        Alu(alu_op=AluOp.MUL, use_imm=True, imm=0, uop_bgn=0, uop_end=1, iter_out=2, iter_in=2,
            dst_factor_out=2, dst_factor_in=1),
        Alu(alu_op=AluOp.ADD, uop_bgn=0, uop_end=1, iter_out=2, iter_in=2,
            dst_factor_out=2, dst_factor_in=1, src_factor_out=8, src_factor_in=2),
        Alu(alu_op=op, uop_bgn=1, uop_end=4, iter_out=2, iter_in=2,
            dst_factor_out=2, dst_factor_in=1, src_factor_out=8, src_factor_in=2),
    ])


@pytest.mark.parametrize("cfg", [TINY, ACC16], ids=cfg_id)
def test_alu_clip_and_narrow(cfg, rng):
    """The usual requantisation: SHR, clip with MIN/MAX, then narrowing into OUT."""
    bench = Bench(cfg)
    acc = bench.put_random(rng, "acc", 8)
    bench.run([
        load("acc", sram_base=0, dram_base=acc, y_size=1, x_size=8),
        load("uop", sram_base=0, dram_base=bench.put("uop", [Uop(0, 0, 0)]), y_size=1, x_size=1),
        Alu(alu_op=AluOp.SHR, use_imm=True, imm=5, uop_bgn=0, uop_end=1, iter_out=8, dst_factor_out=1,
            iter_in=1),
        Alu(alu_op=AluOp.MIN, use_imm=True, imm=127, uop_bgn=0, uop_end=1, iter_out=4,
            dst_factor_out=1, iter_in=1),
        Alu(alu_op=AluOp.MAX, use_imm=True, imm=-128, uop_bgn=0, uop_end=1, iter_out=4,
            dst_factor_out=1, iter_in=1),
    ])


# -- STORE -------------------------------------------------------------------

SENTINEL = 0xA5


def _store_setup(bench, rng, count=24):
    """OUT entries 0..count-1 made non-trivial (acc values wider than out_width, narrowed)."""
    acc = bench.put_random(rng, "acc", count)
    return [load("acc", sram_base=0, dram_base=acc, y_size=1, x_size=count),
            load("uop", sram_base=0, dram_base=bench.put("uop", [Uop(0, 0, 0)]), y_size=1, x_size=1),
            Alu(alu_op=AluOp.ADD, use_imm=True, imm=1, uop_bgn=0, uop_end=1, iter_out=count,
                iter_in=1, dst_factor_out=1)]


@pytest.mark.parametrize("shape", [(3, 2, 5), (4, 3, 3), (2, 4, 9), (3, 3, 2), (3, 2, 0), (0, 2, 3),
                                   (2, 0, 3)],
                         ids=lambda s: "y{}x{}s{}".format(*s))
@pytest.mark.parametrize("cfg", [TINY, WIDE, BATCH2], ids=cfg_id)
def test_store_strided(cfg, shape, rng):
    """Strided stores; the bytes between (and around) rows keep their old contents."""
    y_size, x_size, x_stride = shape
    bench = Bench(cfg)
    nbytes = cfg.elem_bytes("out")
    region = bench.put_bytes("out", bytes([SENTINEL]) * (48 * nbytes))
    stats = bench.run([*_store_setup(bench, rng),
                       Store(sram_base=2, dram_base=region + 1, y_size=y_size, x_size=x_size,
                             x_stride=x_stride)])
    assert stats["dram_bytes_written"]["out"] == y_size * x_size * nbytes
    # independent of the reference: exactly the stored elements changed
    written = {1 + r * x_stride + c for r in range(y_size) for c in range(x_size)}
    raw = bench.sim.dram.read(region * nbytes, 48 * nbytes).reshape(48, nbytes)
    for k in set(range(48)) - written:
        assert (raw[k] == SENTINEL).all(), f"element {k} outside the stored rows was modified"


@pytest.mark.parametrize("cfg", [TINY, ACC16, BATCH2], ids=cfg_id)
def test_store_requant_with_bias(cfg, rng):
    """set_bias latches one accumulator row; requantizing stores add it (wrapping) only with ``bias``."""
    bench = Bench(cfg)
    lanes, bits = cfg.batch * cfg.block_out, cfg.acc_width
    top = (1 << (bits - 1)) - 1
    acc = rng.integers(-top - 1, top + 1, size=(8, lanes))
    acc[5] = [top, -top - 1, 7, -7][:lanes] * (lanes // min(lanes, 4))      # the bias row: sums wrap
    region = bench.alloc("out", 64)
    bench.run([
        load("acc", sram_base=0, dram_base=bench.put("acc", acc), y_size=1, x_size=8),
        Store(set_bias=True, sram_base=5, dram_base=region, y_size=9, x_size=9, x_stride=9),  # moves nothing
        Store(requant=True, bias=True, mul=-3, shift=2, sram_base=0, dram_base=region, y_size=2, x_size=2,
              x_stride=3),
        Store(requant=True, mul=5, shift=1, relu=True, sram_base=2, dram_base=region + 8, y_size=1, x_size=3,
              x_stride=3),
        Store(set_bias=True, sram_base=7),
        Store(requant=True, bias=True, relu=True, sram_base=4, dram_base=region + 16, y_size=1, x_size=4,
              x_stride=4),
    ])


@pytest.mark.parametrize("cfg", [TINY, ACC16, BATCH2, TINY.replace(name="tiny_no_scale", store_scale=False)],
                         ids=cfg_id)
def test_store_per_channel_scale(cfg, rng):
    """A set_bias STORE with requant latches the scale register; ``mul = 0`` multiplies each lane by it, then
    adds the bias (``clip((acc · scale + bias) >> shift)``, wrapping). Without ``store_scale`` the same words
    keep their plain meaning: set_bias latches the bias, mul 0 zeroes."""
    bench = Bench(cfg)
    lanes, bits = cfg.batch * cfg.block_out, cfg.acc_width
    top = (1 << (bits - 1)) - 1
    acc = rng.integers(-top - 1, top + 1, size=(8, lanes))
    acc[6] = rng.integers(-(1 << 12), 1 << 12, size=lanes)      # scales
    acc[6, 0] = top                                              # a product that wraps
    region = bench.alloc("out", 16)
    bench.run([
        load("acc", sram_base=0, dram_base=bench.put("acc", acc), y_size=1, x_size=8),
        Store(set_bias=True, sram_base=5),
        Store(set_bias=True, requant=True, sram_base=6),
        Store(requant=True, bias=True, mul=0, shift=7, sram_base=0, dram_base=region, y_size=1, x_size=3,
              x_stride=3),
        Store(requant=True, mul=0, shift=3, relu=True, sram_base=3, dram_base=region + 4, y_size=1, x_size=2,
              x_stride=2),
        Store(requant=True, bias=True, mul=2, shift=1, sram_base=0, dram_base=region + 8, y_size=1, x_size=1,
              x_stride=1),
    ])
    # independent of both machines: numpy on the rows, wrapped as the doc says
    wrap = lambda v: ((v + (1 << (bits - 1))) % (1 << bits)) - (1 << (bits - 1))   # noqa: E731
    lo, hi = -(1 << (cfg.out_width - 1)), (1 << (cfg.out_width - 1)) - 1
    rows = acc.astype(object)
    if cfg.per_channel_store:
        bias, scale = rows[5], rows[6]
        first, second = wrap(wrap(rows[:3] * scale) + bias) >> 7, wrap(rows[3:5] * scale) >> 3
    else:                       # the second set_bias latched row 6 as the bias; mul 0 zeroes
        bias = rows[6]
        first, second = 0 * rows[:3], 0 * rows[3:5]
    want = [np.clip(first, lo, hi), np.clip(second, 0, hi), np.clip(wrap(wrap(rows[:1] + bias) * 2) >> 1, lo, hi)]
    got = [bench.sim.dram.read(base * cfg.elem_bytes("out"), n * cfg.elem_bytes("out")).view(f"int{cfg.out_width}")
           .reshape(n, lanes) for base, n in ((region, 3), (region + 4, 2), (region + 8, 1))]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(np.int64))


# -- counters ----------------------------------------------------------------

def test_counters_by_hand(rng):
    """The counters of one program, computed by hand from the doc (FINISH counts as an instruction)."""
    bench = Bench(TINY)
    program = [*_gemm_setup(bench, rng, n_inp=4, n_wgt=2, n_acc=3),
               load("acc8", sram_base=0, dram_base=bench.put_random(rng, "acc8", 6), y_size=2,
                    x_size=3, x_stride=3, y_pad0=1),
               load("uop", sram_base=0, dram_base=bench.put("uop", GEMM_UOPS), y_size=1, x_size=5),
               Gemm(reset=True, uop_bgn=0, uop_end=2, iter_out=2, iter_in=3),
               Alu(alu_op=AluOp.ADD, use_imm=True, uop_bgn=1, uop_end=4, iter_out=1, iter_in=2),
               Store(sram_base=0, dram_base=bench.alloc("out", 8), y_size=2, x_size=2, x_stride=4)]
    stats = bench.run(program)
    n_insns = len(in_order([*program, Finish()]))
    assert stats["dram_bytes_read"] == {"insn": 16 * n_insns, "uop": 5 * 4, "inp": 4 * 4,
                                        "wgt": 2 * 16, "acc": 3 * 16, "acc8": 6 * 4}
    assert stats["dram_bytes_written"] == {"out": 4 * 4}
    assert (stats["gemm_uops"], stats["alu_uops"]) == (12, 6)


# -- random programs ---------------------------------------------------------

DRAM_ELEMS = 40       # elements of each kind in DRAM for random programs
SRAM_WINDOW = 64      # random LOAD/STORE bases stay below this, where GEMM/ALU work
UOP_WINDOW = 32
MAX_INDEX = 8         # micro-op indices are below this; factors and iterations keep loops in range


@st.composite
def _rect(draw, depth, window, *, pads):
    """sram_base, dram_base, sizes, stride (and pads) of one in-range LOAD/STORE."""
    y_size, x_size = draw(st.integers(0, 3)), draw(st.integers(0, 4))
    x_stride = draw(st.integers(0, 6))
    pad = {name: draw(st.integers(0, 2)) if pads else 0 for name in ("y_pad0", "y_pad1", "x_pad0", "x_pad1")}
    extent = 0 if not (x_size and y_size) else (
        (pad["y_pad0"] + y_size + pad["y_pad1"]) * (pad["x_pad0"] + x_size + pad["x_pad1"]))
    span = (y_size - 1) * x_stride + x_size if x_size and y_size else 0
    return dict(sram_base=draw(st.integers(0, min(depth - extent, window))),
                dram_base=draw(st.integers(0, DRAM_ELEMS - span)),
                y_size=y_size, x_size=x_size, x_stride=x_stride, **(pad if pads else {}))


def _loop_fields(draw, *, weights):
    bgn = draw(st.integers(0, UOP_WINDOW + 4))
    names = ["dst", "src"] + (["wgt"] if weights else [])
    iters = st.integers(0, 3) | st.integers(1, 3)            # 0 now and then
    fields = dict(uop_bgn=bgn, uop_end=bgn + draw(st.integers(0, 4)),
                  iter_out=draw(iters), iter_in=draw(iters))
    for name in names:
        for level in ("out", "in"):
            fields[f"{name}_factor_{level}"] = draw(st.integers(0, 8))
    return fields


ACC_VALUES = st.one_of(st.integers(-40, 40), st.integers(INT32_MIN, INT32_MAX),
                       st.sampled_from([INT32_MIN, INT32_MIN + 1, INT32_MAX, INT32_MAX - 1]))
IMM_VALUES = st.one_of(st.integers(-40, 40), st.integers(-32768, 32767), st.sampled_from([-32768, 32767]))


@st.composite
def random_instruction(draw, cfg):
    kind = draw(st.sampled_from(["uop", "inp", "wgt", "acc", "acc8"] + ["gemm", "alu"] * 3 + ["store"] * 2))
    if kind == "gemm":
        return Gemm(reset=draw(st.booleans()), overwrite=draw(st.booleans()), **_loop_fields(draw, weights=True))
    if kind == "alu":
        return Alu(alu_op=draw(st.sampled_from(list(AluOp))), use_imm=draw(st.booleans()),
                   imm=draw(IMM_VALUES), **_loop_fields(draw, weights=False))
    if kind == "store":
        requant = {}
        if draw(st.booleans()):
            requant = dict(requant=True, relu=draw(st.booleans()), shift=draw(st.integers(0, 31)),
                           mul=draw(IMM_VALUES), bias=draw(st.booleans()))
        if draw(st.integers(0, 3)) == 0:
            requant = dict(set_bias=True, requant=draw(st.booleans()))     # (requant: the scale register)
        return Store(**draw(_rect(cfg.depth("acc"), SRAM_WINDOW, pads=False)), **requant)
    buffer = "acc" if kind == "acc8" else kind
    window = UOP_WINDOW if kind == "uop" else SRAM_WINDOW
    return load(kind, **draw(_rect(cfg.depth(buffer), window, pads=True)))


@st.composite
def random_case(draw, cfg):
    """(DRAM seed, accumulator values, micro-ops, instructions) of one random program."""
    seed = draw(st.integers(0, 2**32 - 1))
    acc_values = draw(st.lists(ACC_VALUES, min_size=8, max_size=8))
    uops = draw(st.lists(st.tuples(*[st.integers(0, MAX_INDEX - 1)] * 3), min_size=DRAM_ELEMS,
                         max_size=DRAM_ELEMS))
    program = draw(st.lists(random_instruction(cfg), min_size=1, max_size=12))
    return seed, acc_values, uops, program


def _warm_up():
    """LOADs filling the first DRAM_ELEMS entries of every SRAM, so the random part has data."""
    return [load(kind, sram_base=0, dram_base=0, y_size=1, x_size=DRAM_ELEMS)
            for kind in ("uop", "inp", "wgt", "acc")]


def run_random_case(cfg, case):
    seed, acc_values, uops, program = case
    rng = np.random.default_rng(seed)
    bench = Bench(cfg)
    bases = {kind: bench.put_random(rng, kind, DRAM_ELEMS) for kind in ("inp", "wgt", "acc8")}
    lanes = cfg.batch * cfg.block_out
    acc = bench.random_values(rng, "acc", DRAM_ELEMS).reshape(DRAM_ELEMS, lanes)
    acc[1::3] = np.resize(acc_values, acc[1::3].shape)              # edge values from hypothesis
    acc[2::3] = rng.integers(-40, 40, size=acc[2::3].shape)         # small values: shift amounts
    bases["acc"] = bench.put("acc", acc)
    bases["uop"] = bench.put("uop", [Uop(*u) for u in uops])
    bases["out"] = bench.put_bytes("out", rng.integers(0, 256, DRAM_ELEMS * cfg.elem_bytes("out"),
                                                        dtype=np.uint8).tobytes())
    relocated = []
    for insn in [*_warm_up(), *program]:
        if isinstance(insn, (Load, Store)):
            insn = insn.replace(dram_base=insn.dram_base + bases[insn.memory_type.name.lower()])
        relocated.append(insn)
    bench.run(relocated)


# at most 7 + 2·8 + 2·8 = 39 from a micro-op loop, and 64 + 7·8 = 120 from a LOAD: in range
assert MAX_INDEX - 1 + 2 * 2 * 8 < min(TINY.depth("wgt"), SMALL.depth("wgt"))


@pytest.mark.parametrize("cfg", [TINY, SMALL], ids=cfg_id)
@settings(max_examples=150, deadline=None,       # (`chunks` sets the same chunk sizes for every example)
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_programs(cfg, data, chunks):
    run_random_case(cfg, data.draw(random_case(cfg)))


def test_fsim_refuses_a_program_that_is_not_whole_instructions():
    sim = FunctionalSimulator("tiny")
    for data in (b"\x00", isa.encode_program([Finish()], sim.cfg) + b"\x07"):
        with pytest.raises(isa.IsaError, match="not a multiple of 16"):
            sim.run(data)


def test_blas_runs_on_one_thread_while_simulators_run(rng, monkeypatch):
    """fsim's matrix products run on one BLAS thread (the fastest for its tile-sized products), and BLAS has
    the threads it had before once the last of the runs overlapping (in several threads) has finished."""
    from threadpoolctl import ThreadpoolController

    def blas_threads():
        return {lib["num_threads"] for lib in ThreadpoolController().select(user_api="blas").info()}

    bench = Bench(TINY)
    uops = bench.put("uop", GEMM_UOPS)
    program = [*_gemm_setup(bench, rng), load("uop", sram_base=0, dram_base=uops, y_size=1, x_size=5),
               Gemm(uop_bgn=0, uop_end=5, **GEMM_LOOPS)]
    seen, matmul = [], fsim._exact_matmul
    monkeypatch.setattr(fsim, "_exact_matmul", lambda a, b: seen.append(blas_threads()) or matmul(a, b))
    with ThreadpoolController().limit(limits=2, user_api="blas"):
        bench.run(program)
        assert seen and all(threads == {1} for threads in seen)
        assert blas_threads() == {2}
        # two runs overlapping: the first to finish leaves the limit to the other
        with fsim._ONE_BLAS_THREAD:
            with fsim._ONE_BLAS_THREAD:
                assert blas_threads() == {1}
            assert blas_threads() == {1}
        assert blas_threads() == {2}
