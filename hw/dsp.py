"""DSP blocks instantiated where synthesis would waste them, and the platform tests the datapath asks.

On the iCE40, ``synth_ice40 -dsp`` gives every ``*`` a whole SB_MAC16;
:func:`ice40_product_pair` puts two 8×8 products in one block (its 8×8
mode), operand and product registers included: the same values in the same
cycles as the flip-flops and ``*`` it stands in for (tests/hw/test_dsp.py
proves it over Yosys's model of the block).

The ECP5's MULT18X18D can hold its operand registers: :func:`ecp5_product`
takes a product's operands into the block, where a large GEMM copied them
into fabric registers for each product (the same cycles). Yosys itself maps
``*`` to a MULT18X18D without registers; it has no simulation model of the
block, so the RTL simulators build the plain form (``platform`` None), and
``tests/hw/test_dsp.py`` checks the instance against Yosys's own mapping.
"""

from amaranth import C, Cat, ClockSignal, Instance, Signal, signed
from amaranth.vendor import GowinPlatform, LatticePlatform, SiliconBluePlatform

__all__ = ["is_ecp5", "is_ice40", "is_gowin", "ice40_product_pair", "ecp5_product", "wrapped_product", "ecp5_multiply",
           "ICE40_PAIR_OPERAND_BITS"]

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


#: Operand width of an ECP5 MULT18X18D.
ECP5_OPERAND_BITS = 18


def ecp5_product(m, a, b, *, name):
    """``a · b`` of two signed values of at most 18 bits from one MULT18X18D, of the operands a cycle
    before: the block's A/B input registers stand in for operand registers of the product's own (on
    the 85F at 100 MHz the route from such a register into the DSP column and the product's back out
    took 11 ns; inside the block the register sits at the multiplier). The product itself is not
    registered in the block. Its registers are not reset (a product is only read beside a valid bit).

    The operands enter at the top of the block's 18-bit inputs, zeros below, and the product is read
    from the top of its 36 bits: ``(a·2^i)·(b·2^j) = a·b·2^(i+j)``, exactly, with no sign extension (a
    GEMM input's sign bit, repeated into ten pins of each of the 8 blocks it feeds, reached 80 pins
    across the DSP rows: 10.7 ns on the 85F at 100 MHz)."""
    assert len(a) <= ECP5_OPERAND_BITS and len(b) <= ECP5_OPERAND_BITS
    product = Signal(signed(len(a) + len(b)), name=f"{name}_dsp")
    out = Signal(2 * ECP5_OPERAND_BITS)
    operand_a, operand_b = (Cat(C(0, ECP5_OPERAND_BITS - len(v)), v) for v in (a, b))     # top-aligned
    pins = {**{f"i_A{k}": operand_a[k] for k in range(ECP5_OPERAND_BITS)},
            **{f"i_B{k}": operand_b[k] for k in range(ECP5_OPERAND_BITS)},
            **{f"o_P{k}": out[k] for k in range(2 * ECP5_OPERAND_BITS)}}
    m.submodules[name] = Instance(
        "MULT18X18D",
        p_REG_INPUTA_CLK="CLK0", p_REG_INPUTB_CLK="CLK0", p_REG_PIPELINE_CLK="NONE", p_REG_OUTPUT_CLK="NONE",
        p_GSR="DISABLED",
        i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
        i_CLK0=ClockSignal(), i_CE0=1, i_RST0=0, i_CLK1=0, i_CLK2=0, i_CLK3=0, i_CE1=0, i_CE2=0, i_CE3=0,
        i_RST1=0, i_RST2=0, i_RST3=0, **pins)
    m.d.comb += product.eq(out[len(out) - len(product):])
    return product


def wrapped_product(m, a, b, *, name, multiply=None, reset_less=False):
    """``a·b mod 2**len(a)`` from products of halves registered apart from their sum (no adder follows a
    multiplier in one cycle). ``a`` is taken as unsigned. A signed ``b`` of at most half the bits makes two
    products, ``lo(a)·b + hi(a)·b·2**half``; any other ``b``, extended (or cut) to the width of ``a``,
    three, ``lo(a)·lo(b) + (lo(a)·hi(b) + hi(a)·lo(b))·2**half``. ``multiply(x, y, part)`` makes each
    product (by default ``x * y``; a DSP block's: :func:`ecp5_multiply`) of an unsigned half of ``a`` and
    a half of ``b``, or ``b`` itself; its register is named ``name.format(part)``. ``reset_less`` as
    :func:`~.core.product_registers_reset_less` says. Returns the sum of the registers, combinational: a
    cycle after the factors with ``x * y``, two with :func:`ecp5_multiply` (its blocks register them)."""
    width = len(a)
    half = width // 2
    a = a.as_unsigned()
    if len(b) <= half and b.shape().signed:
        factors = {"l": (a[:half], b, 0), "h": (a[half:], b, half)}
    else:
        if len(b) != width:
            wide = Signal(width, name=name.format("b"))       # (``b`` extended as its sign says, or cut)
            m.d.comb += wide.eq(b)
            b = wide
        b = b.as_unsigned()
        factors = {"ll": (a[:half], b[:half], 0), "lh": (a[:half], b[half:], half), "hl": (a[half:], b[:half], half)}
    at = {}     # the registered products by the power of two they stand at
    for part, (x, y, shift) in factors.items():
        product = Signal(width - shift, name=name.format(part), reset_less=reset_less)
        m.d.sync += product.eq(x * y if multiply is None else multiply(x, y, part))
        at.setdefault(shift, []).append(product)
    return sum(sum(products[1:], products[0])[:width - shift] << shift for shift, products in at.items())[:width]


def ecp5_multiply(m, name):
    """A ``multiply`` for :func:`wrapped_product` from MULT18X18D blocks (:func:`ecp5_product`, named
    ``name.format(part)``): the product of the factors given a cycle before, an unsigned one as a signed
    value a bit wider."""
    def multiply(x, y, part):
        x, y = (v if v.shape().signed else Cat(v, 0).as_signed() for v in (x, y))
        return ecp5_product(m, x, y, name=name.format(part))
    return multiply
