"""The GEMM and ALU datapaths for the smallest FPGAs: one micro-op at a time, one accumulator lane at a time.

:class:`SerialCore` has :class:`~tilewright.hw.core.ComputeCore`'s members
and contract and computes the same results (``serial_core`` in
:class:`~tilewright.config.HwConfig` chooses it). Where the pipelined core
keeps a micro-op entering every cycle, with registers for every row in
flight and the forwarding and hazard logic between them, this one walks
each micro-op to its end before it takes the next::

    NEXT   micro-op read (the loops step)
    INDEX  indices and range check; GEMM: the inp, wgt (and acc[dst]) rows read
    GEMM   a lane a cycle into products · tree levels · acc += sum → write register
    ALU    per lane: acc[src] read (not with an immediate) · acc[dst] read · op in one adder (a cycle;
           SHR a bit a cycle, MUL a partial product a cycle) · result → write register · written

The rows a micro-op reads stay on the read ports' outputs (their enables
are off until the next read), a lane is chosen from them by multiplexers
(a lane's weights are a row of their own with ``wgt_rows_by_lane``; with
``acc_rows_by_lane`` so is a lane's accumulator, a GEMM reading it the
cycle before its sum leaves the tree), and each result is written into its
lane alone (the ALU's one-lane write granularity: ``serial_core`` asks for
``vector_lanes = 1``). No row is read in a cycle it is written, and a
micro-op starts once the last one's writes are in, so the accumulator's read
port needs no transparency and a micro-op sees every write before it. A GEMM micro-op takes
``batch·block_out`` cycles for its lanes, two for the micro-op's reads, the products'
and the tree's latency (2 + log2(block_in)) and two to drain; an ALU micro-op two, and
six cycles a lane (five with an immediate; a shift by n > 1 bits n - 1 more, MUL
``acc_width - 1`` more).
"""

from amaranth import C, Cat, Module, Mux, Signal, signed
from amaranth.lib import data

from tilewright import isa
from tilewright.isa import AluOp, ErrorCode

from .core import (ComputeCore, LoopGenerator, adder_tree, alu_reads_one_port, index_out_of_range,
                   product_registers_reset_less, saturating_step, uop_range_bad)
from .dsp import ICE40_PAIR_OPERAND_BITS, ice40_product_pair, is_ice40
from .pipe import pipe
from .sram import acc_loads_by_lane, acc_rows_by_lane, wgt_rows_by_lane, widened

__all__ = ["SerialCore", "core_for"]


def core_for(cfg):
    """The compute core ``cfg`` builds: :class:`SerialCore` with ``serial_core``, else
    :class:`~tilewright.hw.core.ComputeCore`."""
    return SerialCore(cfg) if cfg.serial_core else ComputeCore(cfg)


class SerialCore(ComputeCore):
    """:class:`~tilewright.hw.core.ComputeCore`'s members, one micro-op and one lane at a time (see above).

    ``released`` never rises: every instruction, a GEMM too, is done before the next starts. The second
    accumulator port, where the config has one (:func:`~tilewright.hw.core.alu_reads_one_port`), is
    the requantizing STORE's alone (``ComputeUnit``).
    """

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        gemm = data.View(self.gemm_layout, self.insn)
        alu = data.View(self.alu_layout, self.insn)
        # (the instruction is stable from the cycle before the start until done: decoded straight from it)
        is_gemm = gemm.opcode == isa.Opcode.GEMM
        alu_is = {op: alu.alu_op == op for op in AluOp}
        m.submodules.loops = loops = _SerialLoops(
            uop_bits=c.index_bits("uop"), index_bits=(c.index_bits("acc"), c.src_index_bits, c.index_bits("wgt")))
        m.d.comb += [
            loops.uop_bgn.eq(gemm.uop_bgn), loops.uop_end.eq(gemm.uop_end),
            loops.iter_out.eq(gemm.iter_out), loops.iter_in.eq(gemm.iter_in),
            loops.hold.eq(1),
        ]
        for name in ("dst", "src", "wgt"):
            for level in ("out", "in"):
                factor = getattr(gemm, f"{name}_factor_{level}")
                m.d.comb += loops.factors[f"{name}_{level}"].eq(Mux(is_gemm, factor, 0) if name == "wgt" else factor)
        # The reads hold their rows until the next read (a read port's enable is 1 unless driven).
        ports = [self.uop_read, self.inp_read, self.wgt_read, self.acc_read_a]
        m.d.comb += [port.en.eq(0) for port in ports + ([] if alu_reads_one_port(c) else [self.acc_read_b])]
        active = Signal()
        error = Signal(isa.ERROR_BITS)
        uop_bad = uop_range_bad(c, gemm)

        # -- the micro-op: read in NEXT, its indices from the port's output (held) and the loops' offsets --
        s1 = Signal.like(loops.out, reset_less=True)
        uop = self.uop_read.data
        m.d.comb += self.uop_read.addr.eq(loops.out.u)
        dst, src, wgt = (Signal(len(loops.out[n]) + 1, name=n) for n in ("dst", "src", "wgt"))
        m.d.comb += [dst.eq(uop.dst + s1.dst), src.eq(uop.src + s1.src), wgt.eq(uop.wgt + s1.wgt)]
        # With `acc_rows_by_lane` an accumulator row is a lane: its address is the entry's above the lane's.
        acc_rows = acc_rows_by_lane(c)
        entry_bits = c.index_bits("acc")
        out_of_range = index_out_of_range(c, dst, src, wgt, is_gemm=is_gemm, reset=gemm.reset, use_imm=alu.use_imm)

        # -- lanes: `lane` counts b·block_out + o ----------------------------------------------
        BI, BO, lanes, width = c.block_in, c.block_out, c.batch * c.block_out, c.acc_width
        lane = Signal(range(lanes))
        last_lane = lane == lanes - 1

        def lane_of(row, k, bits):
            return row.as_value().word_select(k, bits).as_signed()
        acc_port = self.acc_read_a

        def acc_row(entry, k):
            """The accumulator row of lane ``k`` of ``entry`` (the entry's, when a row holds it whole)."""
            return Cat(k, entry[:entry_bits]) if acc_rows else entry[:entry_bits]

        # -- the write register: a lane of the core's, or a LOAD's writes (`acc_loading`, a cycle late) --
        result = Signal(signed(width))          # the lane written (valid with `write_lane`)
        write_lane = Signal()
        result_lane = Signal.like(lane)
        loading = pipe(m, self.acc_loading, "acc_loading")
        load = self.acc_load
        write = Signal(len(self.out_write.en))      # OUT's enables: the lane's (the row's, with one lane)
        m.d.comb += write.eq(Mux(write_lane, C(1, len(write)) << result_lane, 0))
        wr_en = pipe(m, write, "wr_en")
        wr_dst = pipe(m, Mux(loading, load.addr, acc_row(dst, result_lane)), "wr_dst", data=True)
        if acc_rows:                    # (the lane's row)
            wr_acc_en = pipe(m, Mux(loading, load.en, write_lane), "wr_acc_en")
            wr_data = pipe(m, Mux(loading, load.data.as_value(), result.as_unsigned()), "wr_data", data=True)
        else:
            wr_acc_en = pipe(m, Mux(loading, widened(load.en, len(self.acc_write.en) // len(load.en)),
                                    widened(write, len(self.acc_write.en) // len(write))), "wr_acc_en")
            if acc_loads_by_lane(c):       # (a LOAD's lane on every lane too: one lane's multiplexer)
                wr_data = pipe(m, Mux(loading, load.data.as_value()[:width], result.as_unsigned()), "wr_data",
                               data=True).replicate(lanes)
            else:
                wr_data = pipe(m, Mux(loading, load.data.as_value(), result.replicate(lanes)), "wr_data",
                               data=True)
        m.d.comb += [
            self.acc_write.addr.eq(wr_dst), self.acc_write.data.eq(wr_data), self.acc_write.en.eq(wr_acc_en),
            self.out_write.addr.eq(wr_dst[-entry_bits:]), self.out_write.en.eq(wr_en),
        ]
        for k in range(lanes):
            lane_data = wr_data if acc_rows else wr_data.word_select(k, width)
            m.d.comb += self.out_write.data[k].eq(lane_data[:c.out_width])

        # -- GEMM: a lane a cycle into the products, the tree, the accumulate --------------------
        # (lanes are b·block_out + o, block_out a power of two: b and o are the lane's bits)
        o_bits = BO.bit_length() - 1
        inp_slice, wgt_slice = self.inp_read.data.as_value(), self.wgt_read.data.as_value()
        if c.batch > 1:
            inp_slice = inp_slice.word_select(lane[o_bits:], BI * c.inp_width)
        # A lane's weights: with `wgt_rows_by_lane` the row read the cycle before (lane o's), else the lane's
        # slice of the entry.
        by_rows = wgt_rows_by_lane(c)
        if BO > 1 and not by_rows:
            wgt_slice = wgt_slice.word_select(lane[:o_bits], BI * c.wgt_width)
        operands = [(inp_slice.word_select(k, c.inp_width).as_signed(), wgt_slice.word_select(k, c.wgt_width).as_signed())
                    for k in range(BI)]
        pairs = is_ice40(platform) and c.inp_width == c.wgt_width == ICE40_PAIR_OPERAND_BITS
        reset_less = product_registers_reset_less(platform)
        products = []
        for k in range(0, BI, 2 if pairs else 1):
            if pairs and k + 1 < BI:
                products += ice40_product_pair(m, operands[k:k + 2], name=f"p_{k}")
            else:
                # Two registers, as the pair's (so that the cycles do not depend on the platform).
                p = Signal(signed(c.inp_width + c.wgt_width), name=f"p_{k}", reset_less=reset_less)
                m.d.sync += p.eq(operands[k][0] * operands[k][1])
                products.append(pipe(m, p, f"p_{k}_out", data=reset_less))
        total, levels = adder_tree(m, products)
        latency = 2 + levels        # from a lane's issue to its sum
        issue = Signal()
        flight = [(issue, lane)]
        for n in range(latency):
            flight.append((pipe(m, flight[-1][0], f"g_valid_{n}"), pipe(m, flight[-1][1], f"g_lane_{n}", data=True)))
        g_valid, g_lane = flight[-1]
        # The accumulator row's lane: the GEMM's sum leaving the tree adds to it, an ALU lane reads it (one
        # multiplexer for both: no ALU lane runs while sums leave the tree). With `acc_rows_by_lane` the row
        # is the lane, a GEMM's read as the lane's products enter the tree's last level (below).
        if acc_rows:
            row_lane = acc_port.data.as_value().as_signed()
        else:
            row_lane = lane_of(acc_port.data, Mux(g_valid, g_lane, lane), width)
        g_busy = Cat(v for v, _ in flight[1:]).any() | wr_en.any()       # a lane of it yet to be written
        clear = gemm.reset | gemm.overwrite
        g_result = Mux(clear, 0, row_lane) + Mux(gemm.reset, 0, total)

        # -- ALU: one lane, in one adder over a few cycles (_SerialAlu) ---------------------------
        alu_unit = _SerialAlu(m, alu_is, width)

        m.d.comb += [self.error.eq(error), self.idle.eq(~active),
                     self.gemm_busy.eq(active & is_gemm), self.alu_busy.eq(active & ~is_gemm)]

        def alu_lane_next():        # (an ALU lane reads its source row first, unless the operand is the immediate)
            with m.If(alu.use_imm):
                m.next = "ALU_DST"
            with m.Else():
                m.next = "ALU_SRC"
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.comb += [loops.start.eq(1), loops.skip.eq(uop_bad)]
                    m.d.sync += [active.eq(1), error.eq(Mux(uop_bad, ErrorCode.UOP_RANGE, 0))]
                    m.next = "NEXT"
            with m.State("NEXT"):
                with m.If(loops.valid):
                    m.d.comb += [self.uop_read.en.eq(1), loops.hold.eq(0)]
                    m.d.sync += s1.eq(loops.out)
                    m.next = "INDEX"
                with m.Else():
                    m.d.comb += self.done.eq(1)
                    m.d.sync += active.eq(0)
                    m.next = "IDLE"
            with m.State("INDEX"):
                m.d.sync += lane.eq(0)
                with m.If(out_of_range):
                    # (the loops stop: `hold` off, so they take the stop)
                    m.d.comb += [loops.stop.eq(1), loops.hold.eq(0)]
                    m.d.sync += error.eq(ErrorCode.INDEX_RANGE)
                    m.next = "NEXT"
                with m.Elif(is_gemm):
                    m.d.comb += [self.inp_read.addr.eq(src), self.inp_read.en.eq(1),
                                 self.wgt_read.addr.eq(Cat(C(0, o_bits), wgt) if by_rows else wgt),
                                 self.wgt_read.en.eq(1)]
                    if not acc_rows:
                        m.d.comb += [acc_port.addr.eq(dst), acc_port.en.eq(1)]
                    m.next = "GEMM"
                with m.Else():
                    alu_lane_next()
            with m.State("GEMM"):
                m.d.comb += issue.eq(1)
                m.d.sync += lane.eq(lane + 1)
                if by_rows:         # (the next lane's weights, for the next cycle)
                    m.d.comb += [self.wgt_read.addr.eq(Cat((lane + 1)[:o_bits], wgt)), self.wgt_read.en.eq(1)]
                with m.If(last_lane):
                    m.next = "GEMM_DRAIN"
            with m.State("GEMM_DRAIN"):
                with m.If(~g_busy):
                    m.d.comb += self.retire_gemm.eq(1)
                    m.next = "NEXT"
            # An ALU lane: its source row read (not with an immediate), then its destination row; the rows
            # are read anew for each lane, one port holding one row.
            with m.State("ALU_SRC"):
                m.d.comb += [acc_port.addr.eq(acc_row(src, lane)), acc_port.en.eq(1)]
                m.next = "ALU_DST"
            with m.State("ALU_DST"):
                alu_unit.take_b(Mux(alu.use_imm, alu.imm, row_lane))
                m.d.comb += [acc_port.addr.eq(acc_row(dst, lane)), acc_port.en.eq(1)]
                m.next = "ALU_OPERANDS"
            with m.State("ALU_OPERANDS"):
                alu_unit.take_a(row_lane)
                m.next = "ALU_OP"
            with m.State("ALU_OP"):
                with m.If(alu_unit.step()):
                    m.next = "ALU_RESULT"
            with m.State("ALU_RESULT"):
                m.d.comb += [write_lane.eq(1), result.eq(alu_unit.result), result_lane.eq(lane)]
                m.next = "ALU_WRITTEN"
            with m.State("ALU_WRITTEN"):         # (the write register writes the lane: no read this cycle)
                m.d.sync += lane.eq(lane + 1)
                with m.If(last_lane):
                    m.d.comb += self.retire_alu.eq(1)
                    m.next = "NEXT"
                with m.Else():
                    alu_lane_next()
        if acc_rows:        # (a lane's row is read the cycle before its sum leaves the tree)
            reading, read_lane = flight[-2]
            with m.If(reading):
                m.d.comb += [acc_port.addr.eq(acc_row(dst, read_lane)), acc_port.en.eq(1)]
        # The GEMM's sums leave the tree into the write register whatever the state: a lane a cycle.
        with m.If(g_valid):
            m.d.comb += [write_lane.eq(1), result.eq(g_result), result_lane.eq(g_lane)]
        return m


class _SerialAlu:
    """``op(a, b)`` (docs/isa.md) for one accumulator lane in one adder, over one or more cycles.

    Three registers: ``r`` (``a``, then the sum, or the product as it accumulates), ``q`` (``a`` again,
    halved a cycle: a right shift's value, or the MUL's multiplier bits) and ``b`` (the source operand,
    doubled a cycle for MUL; for a left shift, once its amount is taken, ``a`` doubled a cycle). Called
    from the core's states: :meth:`take_b`, then :meth:`take_a`, then :meth:`step` every cycle until it
    says the result is in; :attr:`result` is valid after that.

    ADD adds ``b`` to ``r``; MIN and MAX subtract ``b`` from ``r`` in the same adder and keep whether
    ``a < b`` (one cycle each). MUL adds ``b·2**k`` into ``r`` while bit ``k`` of ``a`` is set, ``width``
    cycles (two's complement: the low bits of a product are those of the unsigned one). SHR shifts ``q``
    by its amount, clamped as the ISA does (at most ``width - 1`` right, ``width`` left: to 0), a bit a
    cycle: ``max(1, n)`` cycles for a shift by ``n``.
    """

    def __init__(self, m, op_is, width):
        self.m, self.op_is, self.width = m, op_is, width
        self.r = Signal(width, name="alu_r", reset_less=True)
        self.q = Signal(width, name="alu_q", reset_less=True)
        self.b = Signal(width, name="alu_b", reset_less=True)
        self.count = Signal(range(width + 1), name="alu_count", reset_less=True)   # steps left (MUL, SHR)
        self.shift_left = Signal(name="alu_shift_left", reset_less=True)
        self.take_b_result = Signal(name="alu_take_b", reset_less=True)          # MIN/MAX: the result is b
        compares = op_is[AluOp.MIN] | op_is[AluOp.MAX]
        multiplies = op_is[AluOp.MUL]
        # The adder: r + b (ADD), r - b (MIN, MAX: a carry in and b inverted; the sign of the 33-bit
        # difference is a < b), r + b while q's low bit is set (MUL)
        addend = Mux(multiplies, self.b & self.q[0].replicate(width), self.b ^ compares.replicate(width))
        self.total = (Cat(self.r, self.r[-1]) + Cat(addend, addend[-1]) + compares)[:width + 1]
        self.result = Mux(op_is[AluOp.SHR], Mux(self.shift_left, self.b, self.q),
                          Mux(compares & self.take_b_result, self.b, self.r))

    def take_b(self, value):
        """The source operand (the source lane or the immediate), in the state before :meth:`take_a`."""
        self.m.d.sync += self.b.eq(value)

    def take_a(self, value):
        """The destination lane; and from the source operand the steps the operation takes."""
        m, width, b = self.m, self.width, self.b
        shift_bits = (width - 1).bit_length()
        sign, high, low = b[-1], b[shift_bits:-1], b[:shift_bits]
        # Shift amounts clamped from bit tests, not wide compares: b >= width - 1 and, for b < 0,
        # -b >= width (b[shift_bits:-1] all ones means -2**shift_bits <= b < 0).
        negated = (-b[:shift_bits + 1])[:shift_bits + 1]
        right = Mux(~sign & (high.any() | (low >= width - 1)), width - 1, low)
        left = Mux(~(sign & high.all()) | (negated >= width), width, negated)
        steps = Mux(self.op_is[AluOp.SHR], Mux(sign, left, right), Mux(self.op_is[AluOp.MUL], width, 0))
        m.d.sync += [self.r.eq(Mux(self.op_is[AluOp.MUL], 0, value)), self.q.eq(value), self.count.eq(steps),
                     self.shift_left.eq(sign & self.op_is[AluOp.SHR])]
        with m.If(sign & self.op_is[AluOp.SHR]):
            m.d.sync += b.eq(value)

    def step(self):
        """One cycle of the operation; returns whether it is the last."""
        m, op_is, q = self.m, self.op_is, self.q
        with m.If(op_is[AluOp.ADD] | op_is[AluOp.MUL]):
            m.d.sync += self.r.eq(self.total[:self.width])
        m.d.sync += self.take_b_result.eq(self.total[-1] ^ op_is[AluOp.MIN])    # (a < b) for MAX, not for MIN
        with m.If(self.count != 0):
            m.d.sync += [self.count.eq(self.count - 1), q.eq(Cat(q[1:], q[-1]))]
            with m.If(op_is[AluOp.MUL] | self.shift_left):
                m.d.sync += self.b.eq(self.b << 1)
        return self.count[1:] == 0


class _SerialLoops(LoopGenerator):
    """:class:`~tilewright.hw.core.LoopGenerator`'s walk in less logic, for the serial core, which steps it
    once a micro-op (several cycles) at the most: whether each counter is at its last value is a compare
    (the micro-op's with the instruction's bound, the iterations' with 1 as they count down), not a flag
    kept beside it, and emptiness is decided as the walk starts."""

    def elaborate(self, platform):
        m = Module()
        # (set at `start`, read only while running: no reset)
        # The outer and inner iterations left, the current one included: the last is a compare with 1,
        # not a sum and a compare with the bound.
        o, i = Signal(isa.LOOP_BITS, reset_less=True), Signal(isa.LOOP_BITS, reset_less=True)
        u = Signal(self.uop_bits + 1, reset_less=True)
        names = tuple(self.index_bits)
        base = [Signal(self.index_bits[n] + 1, name=f"base_{n}", reset_less=True) for n in names]   # o·f_out
        off = [Signal(self.index_bits[n] + 1, name=f"off_{n}", reset_less=True) for n in names]     # + i·f_in
        f_out, f_in = ([self.factors[f"{n}_{level}"] for n in names] for level in ("out", "in"))
        running = Signal()
        last_u, last_i, last_o = u + 1 == self.uop_end, i == 1, o == 1
        m.d.comb += [self.valid.eq(running), self.busy.eq(running), self.out.u.eq(u),
                     self.out.last.eq(last_u & last_i & last_o)]
        m.d.comb += [getattr(self.out, n).eq(off[k]) for k, n in enumerate(names)]
        empty = (self.uop_end <= self.uop_bgn) | (self.iter_out == 0) | (self.iter_in == 0)
        with m.If(self.start):
            m.d.sync += [running.eq(~empty & ~self.skip), o.eq(self.iter_out), i.eq(self.iter_in), u.eq(self.uop_bgn)]
            m.d.sync += [s.eq(0) for s in base + off]
        with m.Elif(running & ~self.hold):
            with m.If(self.stop | self.out.last):
                m.d.sync += running.eq(0)
            with m.If(~last_u):
                m.d.sync += u.eq(u + 1)
            with m.Elif(~last_i):
                m.d.sync += [u.eq(self.uop_bgn), i.eq(i - 1)]
                m.d.sync += [off[k].eq(saturating_step(off[k], f_in[k])) for k in range(len(names))]
            with m.Else():
                m.d.sync += [u.eq(self.uop_bgn), i.eq(self.iter_in), o.eq(o - 1)]
                m.d.sync += [base[k].eq(saturating_step(base[k], f_out[k])) for k in range(len(names))]
                m.d.sync += [off[k].eq(saturating_step(base[k], f_out[k])) for k in range(len(names))]
        return m
