"""The GEMM and ALU datapaths for the smallest FPGAs: one micro-op at a time, one accumulator lane at a time.

:class:`SerialCore` has :class:`~tilewright.hw.core.ComputeCore`'s members
and contract and computes the same results (``serial_core`` in
:class:`~tilewright.config.HwConfig` chooses it). Where the pipelined core
keeps a micro-op entering every cycle, with registers for every row in
flight and the forwarding and hazard logic between them, this one walks
each micro-op to its end before it takes the next::

    NEXT   micro-op read (the loops step)
    INDEX  indices and range check; GEMM: the inp, wgt and acc[dst] rows read
    GEMM   a lane a cycle into products · tree levels · acc += sum → write register
    ALU    per lane: acc[src] read (not with an immediate) · acc[dst] read · op (a cycle; SHR a bit
           a cycle, a serial MUL a partial product a cycle) · result → write register · written

The rows a micro-op reads stay on the read ports' outputs (their enables
are off until the next read), a lane is chosen from them by multiplexers,
and each result is written into its lane alone (the ALU's one-lane write
granularity: ``serial_core`` asks for ``vector_lanes = 1``). No row is read
while a write is in flight, so the accumulator's read port needs no
transparency and a micro-op sees every write before it. A GEMM micro-op takes
``batch·block_out`` cycles for its lanes, two for the micro-op's reads, the products'
and the tree's latency (2 + log2(block_in)) and two to drain; an ALU micro-op two, and
six cycles a lane (five with an immediate; a shift by n bits n + 1 more, a serial MUL
``acc_width - 1`` more).
"""

from amaranth import C, Cat, Module, Mux, Signal, signed
from amaranth.lib import data

from tilewright import isa
from tilewright.isa import AluOp, ErrorCode

from .core import (ComputeCore, LoopGenerator, _AluLane, adder_tree, alu_reads_one_port, index_out_of_range,
                   product_registers_reset_less, uop_range_bad)
from .dsp import ICE40_PAIR_OPERAND_BITS, ice40_product_pair, is_ice40
from .pipe import pipe
from .sram import widened

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
        m.submodules.loops = loops = LoopGenerator(
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
        acc_bits = len(self.acc_write.addr)
        out_of_range = index_out_of_range(c, dst, src, wgt, is_gemm=is_gemm, reset=gemm.reset, use_imm=alu.use_imm)

        # -- lanes: `lane` counts b·block_out + o ----------------------------------------------
        BI, BO, lanes, width = c.block_in, c.block_out, c.batch * c.block_out, c.acc_width
        lane = Signal(range(lanes))
        last_lane = lane == lanes - 1

        def lane_of(row, k, bits):
            return row.as_value().word_select(k, bits).as_signed()
        acc_port = self.acc_read_a

        # -- the write register: a lane of the core's, or a LOAD's writes (`acc_loading`, a cycle late) --
        result = Signal(signed(width))          # the lane written (valid with `write_lane`)
        write_lane = Signal()
        result_lane = Signal.like(lane)
        loading = pipe(m, self.acc_loading, "acc_loading")
        load = self.acc_load
        write = Signal(len(self.out_write.en))      # OUT's enables: the lane's (the row's, with one lane)
        m.d.comb += write.eq(Mux(write_lane, C(1, len(write)) << result_lane, 0))
        wr_en = pipe(m, write, "wr_en")
        wr_acc_en = pipe(m, Mux(loading, widened(load.en, len(self.acc_write.en) // len(load.en)),
                                widened(write, len(self.acc_write.en) // len(write))), "wr_acc_en")
        wr_dst = pipe(m, Mux(loading, load.addr, dst[:acc_bits]), "wr_dst", data=True)
        wr_data = pipe(m, Mux(loading, load.data.as_value(), result.replicate(lanes)), "wr_data", data=True)
        m.d.comb += [
            self.acc_write.addr.eq(wr_dst), self.acc_write.data.eq(wr_data), self.acc_write.en.eq(wr_acc_en),
            self.out_write.addr.eq(wr_dst), self.out_write.en.eq(wr_en),
        ]
        for k in range(lanes):
            m.d.comb += self.out_write.data[k].eq(wr_data.word_select(k, width)[:c.out_width])

        # -- GEMM: a lane a cycle into the products, the tree, the accumulate --------------------
        # (lanes are b·block_out + o, block_out a power of two: b and o are the lane's bits)
        o_bits = BO.bit_length() - 1
        inp_slice, wgt_slice = self.inp_read.data.as_value(), self.wgt_read.data.as_value()
        if c.batch > 1:
            inp_slice = inp_slice.word_select(lane[o_bits:], BI * c.inp_width)
        if BO > 1:
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
        # multiplexer for both: no ALU lane runs while sums leave the tree)
        row_lane = lane_of(acc_port.data, Mux(g_valid, g_lane, lane), width)
        g_busy = Cat(v for v, _ in flight[1:]).any() | wr_en.any()       # a lane of it yet to be written
        clear = gemm.reset | gemm.overwrite
        g_result = Mux(clear, 0, row_lane) + Mux(gemm.reset, 0, total)

        # -- ALU: one lane, its operands in registers -------------------------------------------
        a_op, b_op = Signal(signed(width), reset_less=True), Signal(signed(width), reset_less=True)
        step = Signal(range(width + 2))      # (a shift takes up to width + 2 cycles: `step` must not wrap to 0)
        first = step == 0
        alu_lane = _AluLane(m, alu_is, a_op, b_op, width, 0, serial_from=first if c.serial_mul else None,
                            reset_less=reset_less, held=True, serial_shift=first)
        # (SHR a bit a cycle; MUL with `serial_mul` a partial product a cycle, `width` of them)
        steps_left = alu_is[AluOp.SHR] & (first | alu_lane.shifting)
        if c.serial_mul:
            steps_left |= alu_is[AluOp.MUL] & (step != width - 1)

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
                                 self.wgt_read.addr.eq(wgt), self.wgt_read.en.eq(1),
                                 acc_port.addr.eq(dst), acc_port.en.eq(1)]
                    m.next = "GEMM"
                with m.Else():
                    alu_lane_next()
            with m.State("GEMM"):
                m.d.comb += issue.eq(1)
                m.d.sync += lane.eq(lane + 1)
                with m.If(last_lane):
                    m.next = "GEMM_DRAIN"
            with m.State("GEMM_DRAIN"):
                with m.If(~g_busy):
                    m.d.comb += self.retire_gemm.eq(1)
                    m.next = "NEXT"
            # An ALU lane: its source row read (not with an immediate), then its destination row; the rows
            # are read anew for each lane, one port holding one row.
            with m.State("ALU_SRC"):
                m.d.comb += [acc_port.addr.eq(src), acc_port.en.eq(1)]
                m.next = "ALU_DST"
            with m.State("ALU_DST"):
                m.d.sync += b_op.eq(Mux(alu.use_imm, alu.imm, row_lane))
                m.d.comb += [acc_port.addr.eq(dst), acc_port.en.eq(1)]
                m.next = "ALU_OPERANDS"
            with m.State("ALU_OPERANDS"):
                m.d.sync += [a_op.eq(row_lane), step.eq(0)]
                m.next = "ALU_OP"
            with m.State("ALU_OP"):
                m.d.sync += step.eq(step + 1)
                with m.If(~steps_left):
                    m.next = "ALU_RESULT"
            with m.State("ALU_RESULT"):
                m.d.comb += [write_lane.eq(1), result.eq(alu_lane.result[:width]), result_lane.eq(lane)]
                m.next = "ALU_WRITTEN"
            with m.State("ALU_WRITTEN"):         # (the write register writes the lane: no read this cycle)
                m.d.sync += lane.eq(lane + 1)
                with m.If(last_lane):
                    m.d.comb += self.retire_alu.eq(1)
                    m.next = "NEXT"
                with m.Else():
                    alu_lane_next()
        # The GEMM's sums leave the tree into the write register whatever the state: a lane a cycle.
        with m.If(g_valid):
            m.d.comb += [write_lane.eq(1), result.eq(g_result), result_lane.eq(g_lane)]
        return m
