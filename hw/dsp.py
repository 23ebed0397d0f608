"""Registered multipliers that keep their registers inside the FPGA's DSP blocks.

Yosys's ``synth_ecp5`` maps ``*`` to a MULT18X18D but leaves the registers
around it in the fabric, so every product pays two routes between the logic
and the DSP column (7 of the 11 ns of a product's path on the 85F). On the
ECP5 :func:`ecp5_product` instantiates the MULT18X18D with its own input
and output registers, in place of the flip-flops around ``*`` that the
datapath has everywhere else (simulation, iCE40, Gowin, whose flows pack
them themselves): the same value in the same cycle.
"""

from amaranth import ClockSignal, Instance, Signal, signed
from amaranth.vendor import LatticePlatform

__all__ = ["is_ecp5", "ecp5_product", "ECP5_OPERAND_BITS"]

#: Operand width of the ECP5's MULT18X18D.
ECP5_OPERAND_BITS = 18


def is_ecp5(platform):
    """Whether ``platform`` (as passed to ``elaborate``) builds for a Lattice ECP5."""
    return isinstance(platform, LatticePlatform) and platform.family == "ecp5"


def ecp5_product(m, a, b, *, name):
    """``a · b`` of two signed values of at most 18 bits, two cycles after them, from a MULT18X18D that
    registers the operands and the product itself. Its product register is not reset (the fabric one
    it stands in for is; a product is only read beside a valid bit)."""
    assert max(len(a), len(b)) <= ECP5_OPERAND_BITS
    product = Signal(signed(len(a) + len(b)), name=name)
    m.submodules[name] = _ecp5_mult18(a, b, product)
    return product


def _ecp5_mult18(a, b, product):
    """A MULT18X18D with input registers on A and B and an output register, always enabled."""
    ports = {}
    for port, value in (("A", a), ("B", b)):
        bits = [value[i] if i < len(value) else value[-1] for i in range(ECP5_OPERAND_BITS)]   # sign-extended
        ports.update({f"i_{port}{i}": bit for i, bit in enumerate(bits)})
    ports.update({f"o_P{i}": product[i] for i in range(len(product))})
    registers = {f"p_REG_{reg}_{field}": value for reg in ("INPUTA", "INPUTB", "OUTPUT")
                 for field, value in (("CLK", "CLK0"), ("CE", "CE0"), ("RST", "RST0"))}
    return Instance(
        "MULT18X18D", **registers,
        p_REG_INPUTC_CLK="NONE", p_REG_PIPELINE_CLK="NONE",
        p_GSR="DISABLED", p_MULT_BYPASS="DISABLED", p_RESETMODE="SYNC", p_SOURCEB_MODE="B_INPUT",
        p_CAS_MATCH_REG="FALSE",
        i_CLK0=ClockSignal(), i_CE0=1, i_RST0=0, i_SIGNEDA=1, i_SIGNEDB=1, i_SOURCEA=0, i_SOURCEB=0,
        **ports)
