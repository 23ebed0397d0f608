"""One helper shared by the datapaths: a value delayed by a register."""

from amaranth import Signal

__all__ = ["pipe"]


def pipe(m, value, name, *, data=False):
    """``value`` one cycle later: a register named ``name`` in ``m``'s sync domain.

    ``data=True`` for a value only read while a valid bit beside it is set:
    the register is then not reset at the start of a run, so the reset net
    (which reaches every control flip-flop of the datapath) stays small.
    """
    reg = Signal.like(value, name=name, reset_less=data)
    m.d.sync += reg.eq(value)
    return reg
