"""One helper shared by the datapaths: a value delayed by a register."""

from amaranth import Signal

__all__ = ["pipe"]


def pipe(m, value, name):
    """``value`` one cycle later: a register named ``name`` in ``m``'s sync domain."""
    reg = Signal.like(value, name=name)
    m.d.sync += reg.eq(value)
    return reg
