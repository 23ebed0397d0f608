"""DSP blocks instantiated where synthesis would waste them, and the platform tests the datapath asks.

On the iCE40, ``synth_ice40 -dsp`` gives every ``*`` a whole SB_MAC16;
:func:`ice40_product_pair` puts two 8×8 products in one block (its 8×8
mode), operand and product registers included: the same values in the same
cycles as the flip-flops and ``*`` it stands in for (tests/hw/test_dsp.py
proves it over Yosys's model of the block).

The ECP5's MULT18X18D can hold its operand and product registers too, and
nextpnr times that mode, but YoWASP's ``ecppack`` (prjtrellis) stops with
an exception on a bitstream that uses it: ECP5 products keep their
registers in the fabric.
"""

from amaranth import Cat, ClockSignal, Instance, Signal, signed
from amaranth.vendor import GowinPlatform, LatticePlatform, SiliconBluePlatform

__all__ = ["is_ecp5", "is_ice40", "is_gowin", "ice40_product_pair", "ICE40_PAIR_OPERAND_BITS"]

#: Operand width of each of the two products an iCE40 SB_MAC16 makes in its 8×8 mode.
ICE40_PAIR_OPERAND_BITS = 8


def is_ecp5(platform):
    """Whether ``platform`` (as passed to ``elaborate``) builds for a Lattice ECP5."""
    return isinstance(platform, LatticePlatform) and platform.family == "ecp5"


def is_ice40(platform):
    """Whether ``platform`` builds for a Lattice iCE40."""
    return isinstance(platform, SiliconBluePlatform)


def is_gowin(platform):
    """Whether ``platform`` builds for a Gowin part."""
    return isinstance(platform, GowinPlatform)


def is_small_fpga(platform):
    """Whether ``platform`` is one of the small FPGAs (iCE40, Gowin): there a LUT counts for more than a
    faster clock, so units that have two forms taking the same cycles choose the smaller."""
    return is_ice40(platform) or is_gowin(platform)


def ice40_product_pair(m, operands, *, name):
    """Two products ``a · b`` of signed 8-bit values from one SB_MAC16 in its 8×8 mode (Yosys maps each
    ``*`` to a whole SB_MAC16), two cycles after the operands: the block's A/B input registers, then
    its two 8×8 product registers. ``operands`` is ``[(a0, b0), (a1, b1)]``; returns ``[p0, p1]``.
    The block's registers are not reset (a product is only read beside a valid bit)."""
    (a0, b0), (a1, b1) = operands
    assert all(len(v) == ICE40_PAIR_OPERAND_BITS for v in (a0, b0, a1, b1))
    width = 2 * ICE40_PAIR_OPERAND_BITS         # of a product; the block's output holds the two side by side
    out = Signal(2 * width, name=f"{name}_mac")
    products = [Signal(signed(width), name=f"{name}_{half}") for half in ("lo", "hi")]
    m.submodules[name] = Instance(
        "SB_MAC16",
        p_MODE_8x8=1, p_A_SIGNED=1, p_B_SIGNED=1, p_A_REG=1, p_B_REG=1, p_C_REG=0, p_D_REG=0,
        p_TOP_8x8_MULT_REG=1, p_BOT_8x8_MULT_REG=1, p_PIPELINE_16x16_MULT_REG1=0, p_PIPELINE_16x16_MULT_REG2=0,
        p_TOPOUTPUT_SELECT=2, p_BOTOUTPUT_SELECT=2,         # the 8×8 products, registered
        p_TOPADDSUB_LOWERINPUT=0, p_TOPADDSUB_UPPERINPUT=0, p_TOPADDSUB_CARRYSELECT=0,
        p_BOTADDSUB_LOWERINPUT=0, p_BOTADDSUB_UPPERINPUT=0, p_BOTADDSUB_CARRYSELECT=0, p_NEG_TRIGGER=0,
        i_CLK=ClockSignal(), i_CE=1, i_A=Cat(a0, a1), i_B=Cat(b0, b1), i_C=0, i_D=0,
        i_AHOLD=0, i_BHOLD=0, i_CHOLD=0, i_DHOLD=0, i_IRSTTOP=0, i_IRSTBOT=0, i_ORSTTOP=0, i_ORSTBOT=0,
        i_OLOADTOP=0, i_OLOADBOT=0, i_ADDSUBTOP=0, i_ADDSUBBOT=0, i_OHOLDTOP=0, i_OHOLDBOT=0,
        i_CI=0, i_ACCUMCI=0, i_SIGNEXTIN=0, o_O=out)
    m.d.comb += [products[0].eq(out[:width]), products[1].eq(out[width:])]
    return products
