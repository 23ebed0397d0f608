"""Helpers shared by the datapaths: a value delayed by a register, and copies of it."""

from amaranth import Signal

__all__ = ["pipe", "replicas"]


def pipe(m, value, name, *, data=False):
    """``value`` one cycle later: a register named ``name`` in ``m``'s sync domain.

    ``data=True`` for a value only read while a valid bit beside it is set:
    the register is then not reset at the start of a run, so the reset net
    (which reaches every control flip-flop of the datapath) stays small.
    """
    reg = Signal.like(value, name=name, reset_less=data)
    m.d.sync += reg.eq(value)
    return reg


def replicas(m, value, name, count, *, data=False):
    """``count`` registers each holding ``value`` one cycle later, for a value whose sinks lie far apart:
    each copy can be placed by its own sinks.

    They are named ``{name}_replica{k}``; the FPGA builds keep registers so named apart
    (``tilewright.fpga.build.KEEP_REPLICAS``), which Yosys would otherwise merge back into one.
    """
    return [pipe(m, value, f"{name}_replica{k}", data=data) for k in range(count)]
