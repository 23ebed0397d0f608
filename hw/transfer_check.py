"""The range checks a LOAD or STORE passes before anything moves, spread over a few cycles.

They run once per instruction, so a few cycles of latency cost nothing,
while doing them in one cycle (two multiplies, three carry chains) was the
longest path of the whole accelerator. One multiplier, registered at both
ends, serves both products; ``serial`` builds it as a shift-and-add over
one bit of the multiplier per cycle instead (small FPGAs: no DSP block,
a few dozen LUTs, up to 2·17 more cycles per instruction). ``compact``
does every sum and compare in that one adder too, a step a cycle (for a
slow clock: a third less logic, a few cycles more).
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ERROR_BITS, ErrorCode

__all__ = ["TransferCheck", "check_width", "dram_base_folded"]

#: Width of the guarded range's bounds, in elements (as ``dram_end``'s).
GUARD_BITS = isa.DRAM_ADDR_BITS + 2

#: Most rows or columns a LOAD writes: the padding on both sides plus the data.
MAX_EXTENT = 2 * ((1 << isa.PAD_BITS) - 1) + (1 << isa.SIZE_BITS)


def check_width(*, sram_bits, limit_bits):
    """Bits a :class:`TransferCheck` computes in: a value at or above ``2**width`` is out of every range,
    so ``width`` bits and an overflow bit hold any of them."""
    return max(limit_bits, sram_bits + 1) + 1


def dram_base_folded(word, layout, keep):
    """Instruction ``word`` (``layout``: a LOAD's or a STORE's) with ``dram_base``'s bits from ``keep`` up
    replaced by whether any is set, in bit ``keep`` (the others 0). A :class:`TransferCheck` of width
    ``keep`` or less (:func:`check_width`) decides the same on it; the DMA reads ``dram_base`` only once
    the check has passed, when those bits are 0 anyway. A queue holding it needs fewer flip-flops."""
    field = layout["dram_base"]
    low, high = field.offset + keep, field.offset + field.width
    if keep + 1 >= field.width:
        return word
    return Cat(word[:low], word[low:high].any(), C(0, high - low - 1), word[high:])


class TransferCheck(wiring.Component):
    """Is an SRAM rectangle inside its buffer, and are the DRAM rows on the bus?

    ``error`` is ``SRAM_RANGE`` when ``sram_base + rows·cols > depth``,
    else ``BUS_ERROR`` when the last DRAM element, ``dram_base + (y_size-1)·x_stride
    + x_size`` (one past it), exceeds ``dram_limit``, else
    ``STORE_OVER_PROGRAM`` when ``[dram_base, that end)`` meets ``[guard_lo,
    guard_hi)``, else 0 — the order in which the functional simulator checks
    them. The inputs must
    stay stable from ``start`` until ``done``; ``y_size`` is at least 1.

    Parameters
    ----------
    sram_bits : int
        Width of the instructions' ``sram_base`` field.
    serial : bool
        Multiply one bit per cycle (see the module's docstring).
    limit_bits : int
        ``dram_limit`` (and the guarded range) are at most ``2**limit_bits``: the DRAM arithmetic
        saturates just above that, with a sticky overflow bit, instead of working at the ISA's full
        widths (a board's small memory: its adders and compares shrink by half).
    guarded : bool
        Build the guarded range (a STORE's); without it there is no ``guard_lo``/``guard_hi``.
    compact : bool
        One adder for everything, serial multiplies included (see the module's docstring).

    Members
    -------
    start : In(1)
        Begin checking (one-cycle pulse).
    sram_base, rows, cols, depth : In
        The SRAM rectangle and the buffer's depth in entries.
    dram_base, x_size, y_size, x_stride : In
        The DRAM rows, in elements.
    dram_limit : In(DRAM_ADDR_BITS + 1)
        Elements on the bus.
    guard_lo, guard_hi : In(GUARD_BITS)
        DRAM elements the rows must not reach (a STORE: the running program's), with ``guarded``.
    done : Out(1)
        One-cycle pulse, :data:`LATENCY` cycles after ``start`` (more when ``serial``), from a register.
    error : Out(ERROR_BITS)
        Valid with ``done``.
    failed : Out(1)
        ``error != 0``, valid with ``done``, from a register: what a stream's next state depends on
        (on the 85F at 100 MHz the state's decode and the error's compare reached the LOAD sequencer's
        state register, 11 ns).
    extent : Out
        ``rows·cols``, valid with ``done``.
    """

    #: Cycles from ``start`` to ``done`` with the parallel multiplier.
    LATENCY = 6

    def __init__(self, *, sram_bits, limit_bits, serial=False, guarded=False, compact=False):
        self.serial, self.guarded, self.compact = serial or compact, guarded, compact
        self.product_bits = 2 * MAX_EXTENT.bit_length()
        # Values at or above 2**width are only ever out of range: `width` bits and an overflow bit hold them.
        self.width = check_width(sram_bits=sram_bits, limit_bits=limit_bits)
        members = {
            "start": In(1),
            "sram_base": In(sram_bits), "rows": In(range(MAX_EXTENT)), "cols": In(range(MAX_EXTENT)),
            "depth": In(sram_bits + 1),
            "dram_base": In(isa.DRAM_ADDR_BITS), "x_size": In(isa.SIZE_BITS), "y_size": In(isa.SIZE_BITS),
            "x_stride": In(isa.SIZE_BITS), "dram_limit": In(isa.DRAM_ADDR_BITS + 1),
            "done": Out(1), "error": Out(ERROR_BITS), "failed": Out(1), "extent": Out(self.product_bits),
        }
        if guarded:
            members |= {"guard_lo": In(GUARD_BITS), "guard_hi": In(GUARD_BITS)}
        super().__init__(members)

    def elaborate(self, platform):
        if self.compact:
            return self._elaborate_compact()
        m = Module()
        W = self.width

        def saturated(value):
            """``value`` as ``W`` bits and whether it does not fit them."""
            return value[:W], value[W:].any() if len(value) > W else 0

        # Data registers, read only in the state after the one that sets them: no reset.
        a = Signal(range(MAX_EXTENT), reset_less=True)
        b = Signal(min(W, self.product_bits), reset_less=True)
        b_over = Signal(reset_less=True)            # b's true value does not fit it
        product = Signal(min(W, self.product_bits), reset_less=True)
        over = Signal(reset_less=True)              # nor product's
        ready = Signal()             # `product` is a·b of the operands set on entering the state
        if self.serial:
            # product += b while a's low bit is set; a >>= 1, b <<= 1; a·b is in when a is 0 (`ready`, a
            # register kept beside a: a compare of a chose every operand's next value, 11.5 ns on the 85F)
            total = product + Mux(a[0], b, 0)
            m.d.sync += [a.eq(a >> 1), b.eq(b << 1), b_over.eq(b_over | b[-1]), product.eq(total),
                         over.eq(over | total[len(product)] | (a[0] & b_over)), ready.eq(a[1:] == 0)]
        else:
            # the registered product of the operands set one cycle ago
            waited = Signal()
            value, too_big = saturated(a * b[:len(a)])
            m.d.comb += ready.eq(waited)
            m.d.sync += [product.eq(value), over.eq(too_big | (b_over & (a != 0))), waited.eq(1)]

        def operands(x, y):
            y_bits, y_over = saturated(y)
            return [a.eq(x), b.eq(y_bits), b_over.eq(y_over), over.eq(0),
                    *([product.eq(0), ready.eq(x == 0)] if self.serial else [waited.eq(0)])]

        base, base_over = saturated(self.dram_base)
        dram_last = Signal(W + 1, reset_less=True)      # dram_base + x_size
        last_over = Signal(reset_less=True)
        sram_end = Signal(len(product) + 1, reset_less=True)
        sram_over = Signal(reset_less=True)
        dram_end = Signal(W + 2, reset_less=True)
        end_over = Signal(reset_less=True)
        sram_bad = Signal()
        bus_bad = Signal()
        guard_bad = Signal()
        m.d.sync += self.done.eq(0)
        # y_size - 1, subtracted as the check starts: AREA's operands then come from registers and the
        # instruction's fields alone (on the 85F the store's queue head reached `a` through it: 12 ns)
        span_rows = Signal(isa.SIZE_BITS, reset_less=True)
        m.d.comb += self.error.eq(Mux(sram_bad, ErrorCode.SRAM_RANGE, Mux(bus_bad, ErrorCode.BUS_ERROR,
                                                                          Mux(guard_bad, ErrorCode.STORE_OVER_PROGRAM, 0))))
        with m.FSM():
            with m.State("IDLE"):
                # The rectangle's size into the multiplier, on every cycle until `start` (which then only
                # moves the state: it came from the sequencer's decision to begin, and on the 85F at 100
                # MHz reached these registers' enables from the store's queue head, 12 ns)
                m.d.sync += [*operands(self.rows, self.cols), dram_last.eq(base + self.x_size),
                             last_over.eq(base_over), span_rows.eq(self.y_size - 1)]
                with m.If(self.start):
                    m.next = "AREA"
            with m.State("AREA"):            # product = rows·cols; the DRAM span next
                with m.If(ready):
                    m.d.sync += operands(span_rows, self.x_stride)
                    m.d.sync += [self.extent.eq(product), sram_end.eq(self.sram_base + product), sram_over.eq(over)]
                    m.next = "SPAN"
            with m.State("SPAN"):            # product = (y_size-1)·x_stride: one past the last DRAM element
                with m.If(ready):
                    m.d.sync += [dram_end.eq(dram_last + product), end_over.eq(last_over | over)]
                    m.next = "COMPARE"
            with m.State("COMPARE"):
                # (the limit and the guarded range lie below 2**W: their bits above it are 0)
                bad = {"sram": sram_over | (sram_end > self.depth),
                       "bus": end_over | (dram_end > self.dram_limit[:W + 1]),
                       "guard": (~base_over & (base < self.guard_hi[:W + 1]) & (dram_end > self.guard_lo[:W + 1])
                                 if self.guarded else 0)}
                m.d.sync += [sram_bad.eq(bad["sram"]), bus_bad.eq(bad["bus"]), guard_bad.eq(bad["guard"]),
                             self.failed.eq(bad["sram"] | bad["bus"] | bad["guard"]), self.done.eq(1)]
                m.next = "DONE"
            with m.State("DONE"):
                m.next = "IDLE"
        return m

    def _elaborate_compact(self):
        """The checks as a sequence of steps through one adder into ``acc`` (see the class's docstring).

        SRAM: ``acc`` = rows·cols (shift-and-add, a cycle per bit of ``rows``), the extent; += sram_base;
        compare with the depth. DRAM: ``acc`` = dram_base (a STORE: compare with the guarded range's end);
        += x_size; += (y_size - 1)·x_stride; compare with the limit (a STORE: and the guarded range's start).
        A compare adds the other value inverted and keeps the carry: ``acc + ~x`` carries exactly when
        ``acc > x``. A sum that leaves ``W`` bits sets ``over``: such a value is out of every range.
        """
        m = Module()
        W = self.width

        def saturated(value):
            return value[:W], value[W:].any() if len(value) > W else 0

        acc = Signal(W, reset_less=True)
        over = Signal(reset_less=True)              # acc's true value does not fit it
        a = Signal(range(MAX_EXTENT), reset_less=True)     # the multiplier, a bit a cycle
        b = Signal(W, reset_less=True)              # the multiplicand, doubled a cycle
        b_over = Signal(reset_less=True)
        operand = Signal(W)                         # what the adder adds to acc this cycle
        invert = Signal()                           # a compare: adds ~operand
        carry_in = Signal()                         # (and 1: acc - operand, which carries when acc >= operand)
        total = acc + (operand ^ invert.replicate(W)) + carry_in
        carry = total[W]
        span_rows = Signal(isa.SIZE_BITS, reset_less=True)      # y_size - 1
        sram_bad, bus_bad, guard_bad = Signal(), Signal(), Signal()
        below_hi = Signal(reset_less=True)          # dram_base < guard_hi
        base, base_over = saturated(self.dram_base)
        m.d.sync += self.done.eq(0)
        m.d.comb += self.error.eq(Mux(sram_bad, ErrorCode.SRAM_RANGE, Mux(bus_bad, ErrorCode.BUS_ERROR,
                                      Mux(guard_bad, ErrorCode.STORE_OVER_PROGRAM, 0))))

        def multiply(x, y):
            """Load the shift-and-add's operands (acc keeps what it holds: the product adds to it)."""
            y_bits, y_over = saturated(y)
            return [a.eq(x), b.eq(y_bits), b_over.eq(y_over)]

        def accumulate(value, value_over=0):
            """acc += value, now."""
            m.d.comb += operand.eq(value)
            m.d.sync += [acc.eq(total[:W]), over.eq(over | carry | value_over)]

        def compare(value):
            """Whether acc > value (or acc does not fit), registered into the flag returned by the caller."""
            m.d.comb += [operand.eq(value), invert.eq(1)]
            return over | carry

        def shift_and_add():
            """acc += a·b, a bit of ``a`` a cycle; returns the block (an ``Else``) to run once ``a`` is 0."""
            with m.If(a != 0):
                with m.If(a[0]):
                    accumulate(b, b_over)
                m.d.sync += [a.eq(a >> 1), b.eq(b << 1), b_over.eq(b_over | b[-1])]
            return m.Else()

        with m.FSM():
            with m.State("IDLE"):
                m.d.sync += [acc.eq(0), over.eq(0), span_rows.eq(self.y_size - 1), *multiply(self.rows, self.cols)]
                with m.If(self.start):
                    m.next = "AREA"
            with m.State("AREA"):                   # acc += rows·cols
                with shift_and_add():
                    m.d.sync += self.extent.eq(acc)
                    m.next = "SRAM_END"
            with m.State("SRAM_END"):
                accumulate(self.sram_base)
                m.next = "SRAM_COMPARE"
            with m.State("SRAM_COMPARE"):
                m.d.sync += [sram_bad.eq(compare(self.depth[:W])), acc.eq(base), over.eq(base_over)]
                m.next = "GUARD_HI" if self.guarded else "DRAM_LAST"
            if self.guarded:
                with m.State("GUARD_HI"):           # acc = dram_base: below the guarded range's end?
                    m.d.comb += [operand.eq(self.guard_hi[:W]), invert.eq(1), carry_in.eq(1)]
                    m.d.sync += below_hi.eq(~over & ~carry)
                    m.next = "DRAM_LAST"
            with m.State("DRAM_LAST"):
                accumulate(*saturated(self.x_size))
                m.d.sync += multiply(span_rows, self.x_stride)
                m.next = "SPAN"
            with m.State("SPAN"):                   # acc += (y_size - 1)·x_stride: one past the last element
                with shift_and_add():
                    m.next = "BUS_COMPARE"
            with m.State("BUS_COMPARE"):
                m.d.sync += bus_bad.eq(compare(self.dram_limit[:W]))
                m.next = "GUARD_LO" if self.guarded else "DONE"
            if self.guarded:
                with m.State("GUARD_LO"):
                    m.d.sync += guard_bad.eq(below_hi & ~over & compare(self.guard_lo[:W]))
                    m.next = "DONE"
            with m.State("DONE"):
                m.d.sync += [self.failed.eq(sram_bad | bus_bad | guard_bad), self.done.eq(1)]
                m.next = "FINISH"
            with m.State("FINISH"):                 # (done and failed, from registers, this cycle)
                m.next = "IDLE"
        return m
