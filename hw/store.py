"""The store stream: STORE OUT, from the output SRAM to DRAM."""

from amaranth import C, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, fifo, wiring
from amaranth.lib.memory import ReadPort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ErrorCode, Opcode

from .axi import AxiWriteSignature
from .core import product_registers_reset_less
from .dma import RowWriter
from .dsp import ecp5_multiply, is_ecp5, wrapped_product
from .pipe import pipe, replicas
from .sequencer import CommandSignature, Sequencer, TokenPort
from .sram import sram_shape
from .transfer_check import TransferCheck

__all__ = ["StoreUnit"]


class StoreUnit(wiring.Component):
    """Sequencer plus the STORE executor.

    Reads ``y_size·x_size`` consecutive OUT entries from ``sram_base`` — or,
    for a requantizing STORE, ACC entries, each lane turned into
    ``clip(((acc + bias) · mul) >> shift, lo, hi)`` — one per cycle (one per
    ``vector_passes`` cycles when requantizing) through a seven-stage
    pipeline and a small FIFO, into a :class:`RowWriter`; retires
    when every write response is in. A ``set_bias`` STORE reads one ACC entry
    into the bias register instead (with ``per_channel_store``: into the scale
    register when it has ``requant``, whose lanes then multiply in place of
    ``mul`` where ``mul = 0``, before the bias is added). Without ``requant_store`` there is no
    requantizer: OUT entries go to the FIFO a cycle after they are read, or
    with ``slow_clock`` straight to the writer, the output buffer's
    read port holding each until the writer takes it.

    Members
    -------
    cmd : In(CommandSignature())
    prev : Out(TokenPort)   (c2s pops, s2c pushes)
    out_read, acc_read : In(ReadPort.Signature)
    acc_read_free : In(1)
        ``acc_read`` may be read this cycle (with ``lean`` the port is the ALU's between its instructions).
    axi : Out(AxiWriteSignature)
    program_start, program_end : In(addr_width + 1)
        Byte range of the running program's instructions: a STORE reaching into it is
        ``STORE_OVER_PROGRAM``.
    halt, fault, error, index, status and counter outputs as in the other units
    """

    def __init__(self, cfg, *, addr_width):
        self.cfg = cfg
        self.addr_width = addr_width
        super().__init__({
            "cmd": In(CommandSignature()),
            "prev": Out(TokenPort()),
            "out_read": In(ReadPort.Signature(addr_width=cfg.index_bits("out"), shape=sram_shape(cfg, "out"))),
            "acc_read": In(ReadPort.Signature(addr_width=cfg.index_bits("acc"), shape=sram_shape(cfg, "acc"))),
            "acc_read_free": In(1),
            "axi": Out(AxiWriteSignature(addr_width=addr_width, data_width=cfg.dram_bus_width)),
            "program_start": In(addr_width + 1), "program_end": In(addr_width + 1),
            "halt": In(1),
            "fault": Out(1), "error": Out(isa.ERROR_BITS), "index": Out(32), "started": Out(1),
            "busy": Out(1), "blocked": Out(1), "retired": Out(1), "dma_busy": Out(1),
            "wait_pop_prev": Out(1), "wait_push_prev": Out(1),
            "bytes_out": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        E = c.elem_bytes("out")
        shift = E.bit_length() - 1
        layouts = isa.instruction_layouts(c)
        m.submodules.seq = seq = Sequencer(insn_layout=layouts["header"])
        m.submodules.writer = writer = RowWriter(addr_width=self.addr_width, data_width=c.dram_bus_width,
                                                 elem_bytes=E, lean=c.lean, timing_registers=not c.slow_clock)
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        wiring.connect(m, seq.prev, wiring.flipped(self.prev))
        wiring.connect(m, writer.axi, wiring.flipped(self.axi))

        insn = data.View(layouts[Opcode.STORE], seq.insn.as_value())     # stable until it retires
        m.submodules.check = check = TransferCheck(sram_bits=len(insn.sram_base), serial=c.lean, guarded=True,
                                                   limit_bits=self.addr_width - shift, compact=c.slow_clock)
        m.d.comb += [
            check.sram_base.eq(insn.sram_base), check.rows.eq(insn.y_size), check.cols.eq(insn.x_size),
            check.depth.eq(c.acc_depth),          # OUT and ACC share one index space
            check.dram_base.eq(insn.dram_base), check.x_size.eq(insn.x_size), check.y_size.eq(insn.y_size),
            check.x_stride.eq(insn.x_stride), check.dram_limit.eq((1 << self.addr_width) >> shift),
            # the program's bytes as whole elements: any element sharing a byte with it
            check.guard_lo.eq(self.program_start >> shift),
            check.guard_hi.eq((self.program_end + (E - 1)) >> shift),
        ]
        count = check.extent                      # y_size·x_size elements, once checked
        m.d.comb += [
            writer.cmd.payload.addr.eq(insn.dram_base << shift),
            writer.cmd.payload.row_bytes.eq(insn.x_size << shift),
            writer.cmd.payload.stride.eq(insn.x_stride << shift),
            writer.cmd.payload.rows.eq(insn.y_size),
        ]
        # Data registers (read only beside a valid bit or in the state that sets them) are not reset
        # at the start of a run.
        addr = Signal(c.index_bits("out") + 1, reset_less=True)
        left = Signal.like(addr, reset_less=True)      # (a checked STORE's elements fit the buffer)
        issue = Signal()
        # Whether `left` is 0, kept beside it (on the 85F at 100 MHz the 32-bit compare reached the
        # registers `issue` enables)
        issued_all = Signal(reset_less=True)
        read_valid = Signal()           # SRAM data arrives this cycle
        m.d.comb += self.out_read.addr.eq(addr)
        m.d.sync += read_valid.eq(issue)
        with m.If(issue):
            m.d.sync += [addr.eq(addr + 1), left.eq(left - 1), issued_all.eq(left == 1)]
        requant = set_bias = gap = C(0)
        if c.requant_store:
            requant, set_bias = insn.requant, insn.set_bias
            bias = Signal.like(self.acc_read.data)            # the bias register: zero after reset
            # the scale register (per_channel_store), zero after reset too
            scale = Signal.like(self.acc_read.data) if c.per_channel_store else None
            m.d.comb += [self.acc_read.addr.eq(addr), self.acc_read.en.eq(1)]
            element, valid, gap, acc = self._requantizer(m, platform, insn, issue, read_valid, bias, scale)
            # A set_bias STORE's entry goes to its register from `acc`, a cycle after the read, under
            # flags of their own: from the read port, with the instruction's `requant` choosing the
            # register, the path spanned the 85F twice (18.5 ns, 17.5 of it routing, on a 16x16 GEMM).
            # The STORE retires as it sets the flag; the next one reads the register cycles later.
            load_bias, load_scale = Signal(), Signal()
            m.d.sync += [load_bias.eq(0), load_scale.eq(0)]
            with m.If(load_bias):
                m.d.sync += bias.eq(acc)
            if scale is not None:
                with m.If(load_scale):
                    m.d.sync += scale.eq(acc)
        elif not c.slow_clock:       # an OUT entry, registered as it leaves the SRAM, is the element
            element = pipe(m, self.out_read.data, "element", data=True)
            valid = [read_valid, pipe(m, read_valid, "element_valid")]
        if c.requant_store or not c.slow_clock:
            m.d.comb += self.out_read.en.eq(1)
            may_issue, pending = self._element_fifo(m, writer, element, valid, issue)
        else:
            # The output buffer's read port holds the element read (its enable off) until the writer
            # takes it, and the next is read as it does.
            holding = Signal()
            taken = writer.elements.valid & writer.elements.ready
            m.d.comb += [self.out_read.en.eq(issue), writer.elements.payload.eq(self.out_read.data),
                         writer.elements.valid.eq(holding)]
            with m.If(issue):
                m.d.sync += holding.eq(1)
            with m.Elif(taken):
                m.d.sync += holding.eq(0)
            may_issue, pending = ~holding | taken, holding

        done = Signal()
        error = Signal(isa.ERROR_BITS)
        # Whether the STORE moves nothing, a register (the head is stable from the cycle of `start`): the
        # check's start, which depends on it, then comes from flip-flops alone
        empty = pipe(m, isa.moves_nothing(insn), "empty", data=True)
        with m.FSM():
            with m.State("IDLE"):
                with m.If(seq.start):
                    m.next = "CHECK"
            with m.State("CHECK"):
                m.d.sync += addr.eq(insn.sram_base)
                if c.requant_store:
                    with m.If(set_bias & (insn.sram_base >= c.acc_depth)):
                        m.d.comb += [done.eq(1), error.eq(ErrorCode.SRAM_RANGE)]
                        m.next = "IDLE"
                    with m.Elif(set_bias):
                        m.next = "BIAS_READ"
                with (m.Elif if c.requant_store else m.If)(empty):
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
                with m.Else():
                    m.d.comb += check.start.eq(1)
                    m.next = "RANGES"
            with m.State("RANGES"):
                m.d.sync += [left.eq(count), issued_all.eq(0)]     # (a STORE moving nothing ended in CHECK)
                with m.If(check.done & check.failed):
                    m.d.comb += [done.eq(1), error.eq(check.error)]
                    m.next = "IDLE"
                with m.Elif(check.done):
                    m.d.comb += writer.cmd.valid.eq(1)
                    m.next = "STREAM"
            if c.requant_store:
                with m.State("BIAS_READ"):       # addr = sram_base: the entry arrives next cycle
                    with m.If(self.acc_read_free):
                        m.next = "BIAS_LATCH"
                with m.State("BIAS_LATCH"):     # the entry is on the read port; `acc` holds it next cycle
                    m.d.sync += load_bias.eq(1 if scale is None else ~insn.requant)
                    if scale is not None:
                        m.d.sync += load_scale.eq(insn.requant)
                    m.d.comb += done.eq(1)
                    m.next = "IDLE"
            with m.State("STREAM"):
                m.d.comb += issue.eq(~issued_all & (gap == 0) & may_issue & (~requant | self.acc_read_free))
                with m.If(issued_all & ~pending & ~writer.busy):
                    with m.If(writer.error):
                        m.next = "FAILED"
                    with m.Else():
                        m.d.comb += done.eq(1)
                        m.next = "IDLE"
            with m.State("FAILED"):
                # A write answered with an error faults a cycle after the transfer drains, from the state
                # alone: the drain's condition (the writer's and the queue's state) reached the run's
                # halt through the fault, 11.1 ns on the 85F at 100 MHz.
                m.d.comb += [done.eq(1), error.eq(ErrorCode.BUS_ERROR)]
                m.next = "IDLE"

        m.d.comb += [
            seq.done.eq(done), seq.error.eq(error), seq.halt.eq(self.halt),
            self.fault.eq(seq.fault), self.error.eq(Mux(seq.fault, error, 0)), self.index.eq(seq.index),
            self.started.eq(seq.start),
            self.busy.eq(seq.busy), self.blocked.eq(seq.blocked), self.retired.eq(seq.retired),
            self.dma_busy.eq(seq.executing),
            self.wait_pop_prev.eq(seq.wait_pop_prev), self.wait_push_prev.eq(seq.wait_push_prev),
            self.bytes_out.eq(Mux(seq.retired & ~set_bias & ~empty,
                                  count << shift, 0)),
        ]
        return m

    def _element_fifo(self, m, writer, element, valid, issue):
        """The elements (``element``, valid as the last of ``valid``, the stages' valid bits) into the
        writer through a FIFO; returns (whether an element may be read, whether any is on its way)."""
        m.submodules.queue = queue = fifo.SyncFIFOBuffered(width=len(writer.elements.payload), depth=16)
        m.d.comb += [queue.w_data.eq(element), queue.w_en.eq(valid[-1]),
                     writer.elements.payload.eq(queue.r_data), writer.elements.valid.eq(queue.r_rdy),
                     queue.r_en.eq(writer.elements.ready)]
        # Whether the queue has room for one more element besides those in it and on their way to it, a
        # flag of its own (on the 85F at 100 MHz the queue's room, a sum and a compare, reached the
        # registers `issue` enables, 10.8 ns): `room` is the queue's depth less those, counted down as an
        # element is issued and up as the writer takes one (exact where the sum of the stages' valid bits
        # counted a requantizing STORE's element of several passes more than once, holding it back).
        room = Signal(range(queue.depth + 1), init=queue.depth)
        has_room = Signal(init=1)
        # (`has_room` is whether the next count is not 0, with the writer's take, which comes late, decided
        # last: an issue needs room, so without a take the count ends at 0 from 0, or from 1 with an issue;
        # on the 85F at 100 MHz the sum and its compare after the take took 11.5 ns)
        taken = queue.r_en & queue.r_rdy
        m.d.sync += [room.eq(room - issue + taken), has_room.eq(taken | ~((room == 0) | ((room == 1) & issue)))]
        return has_room, Cat(*valid).any() | queue.r_rdy

    def _requantizer(self, m, platform, insn, issue, read_valid, bias, scale):
        """The element each SRAM read makes, plain or requantized; returns ``(element, valids, gap,
        acc)``: the valid bit of every stage (the last one's element enters the FIFO), the cycles left
        before a requantizing STORE may read its next entry and the register holding the entry read the
        cycle before (when no requantizing STORE is shifting it). ``scale``: the scale register, or None
        without ``per_channel_store``."""
        c = self.cfg
        # SRAM reads feed the FIFO through eight stages, one step each: read ·
        # registered · + bias · operands at the multipliers · × mul (products of halves) · sum · >> shift
        # · clip.
        # The requantizing steps take `vector_width` lanes a cycle: an ACC
        # entry spends `vector_passes` cycles in the registered stage, shifting
        # down a slice each cycle (the bias and scale registers turn with it),
        # and the clipped slices are gathered into the element; such a STORE
        # reads an entry every `vector_passes` cycles. Per channel (mul = 0)
        # the multiply takes each lane's scale and the bias is added in the sum
        # stage instead of before the multiply.
        width, passes, w = c.vector_width, c.vector_passes, c.acc_width
        slice_bits = width * w
        plain = pipe(m, self.out_read.data, "plain_0", data=True)
        acc = Signal.like(self.acc_read.data, reset_less=True)             # the entry being requantized, slice 0 at the bottom
        valid, last = [read_valid, Signal(name="stage_valid_1")], [None, Signal(name="stage_last_1", reset_less=True)]
        if passes > 1:
            part = Signal(range(passes), reset_less=True)
            m.d.comb += last[1].eq(~insn.requant | (part == passes - 1))
            stepping = valid[1] & ~last[1]
            with m.If(read_valid):
                m.d.sync += [valid[1].eq(1), part.eq(0)]
            with m.Elif(stepping):
                m.d.sync += part.eq(part + 1)
            with m.Else():
                m.d.sync += valid[1].eq(0)
            # Whether the entry shifts down a slice (else it loads the read port) and whether the bias and
            # scale registers turn, each decided a cycle ahead into a register per slice: the select of every
            # bit of these wide registers, placed by the accumulator's block RAMs across the die, is then a
            # flip-flop nearby, not logic on the instruction's fields. (Next cycle's `valid[1] & ~last[1]`:
            # the instruction is stable while its entries pass.)
            ahead = read_valid | stepping
            ahead_part = Mux(read_valid, 0, part + 1)
            shifting = replicas(m, ahead & insn.requant & (ahead_part != passes - 1), "shifting", passes)
            turning = replicas(m, ahead & insn.requant, "turning", passes)
            turned = (bias, scale) if scale is not None else (bias,)

            def piece(value, k):
                return value.as_value()[k * slice_bits:(k + 1) * slice_bits]
            for k in range(passes):
                with m.If(shifting[k]):
                    m.d.sync += piece(acc, k).eq(piece(acc, k + 1) if k + 1 < passes else 0)
                with m.Else():
                    m.d.sync += piece(acc, k).eq(piece(self.acc_read.data, k))
                with m.If(turning[k]):
                    m.d.sync += [piece(r, k).eq(piece(r, (k + 1) % passes)) for r in turned]
        else:
            m.d.sync += [valid[1].eq(read_valid), acc.eq(self.acc_read.data)]
            m.d.comb += last[1].eq(1)
        biased = [Signal(signed(w), name=f"biased_{k}", reset_less=True) for k in range(width)]   # wraps, as ALU ADD does
        if scale is None:
            muls, late = [insn.mul] * width, [0] * width
            m.d.sync += [b.eq(acc[k] + Mux(insn.bias, bias[k], 0)) for k, b in enumerate(biased)]
        else:
            # Per channel (mul = 0, a flag of the instruction's head, which is stable): each lane's multiplier
            # is its scale, registered beside the accumulator, and the bias is added after the multiply.
            per_lane = pipe(m, insn.mul == 0, "per_lane", data=True)
            muls = [Signal(signed(w), name=f"mul_{k}", reset_less=True) for k in range(width)]
            late = [Signal(signed(w), name=f"late_bias_{k}", reset_less=True) for k in range(width)]
            for k, b in enumerate(biased):
                m.d.sync += [b.eq(acc[k] + Mux(insn.bias & ~per_lane, bias[k], 0)),
                             muls[k].eq(Mux(per_lane, scale[k], insn.mul)),
                             late[k].eq(Mux(insn.bias & per_lane, bias[k], 0))]
            for n in (1, 2):        # (to the sum of the products, two stages on)
                late = [pipe(m, v, f"late_bias_{k}_{n}", data=True) for k, v in enumerate(late)]
        # acc·mul mod 2**w from products of halves registered apart from their sum (`wrapped_product`), a
        # cycle after their operands are registered once more: on the ECP5 in the DSP
        # blocks' input registers, at the multipliers (from the `biased` registers into the DSP column and
        # the products back out, the route took most of 11 ns on the 85F at 90 MHz), elsewhere in fabric.
        products = []
        for k, b in enumerate(biased):
            operands = b, muls[k]       # (`mul` unextended: a 16-bit one takes two products of 32-bit halves)
            name, multiply = f"product_{{}}_{k}", None
            if is_ecp5(platform):
                multiply = ecp5_multiply(m, f"{name}_mult")
            else:
                operands = [pipe(m, v, name.format(n), data=True) for n, v in zip(("acc", "mul"), operands)]
            product = wrapped_product(m, *operands, name=name, multiply=multiply,
                                      reset_less=product_registers_reset_less(platform))
            products.append(pipe(m, (product + late[k])[:w].as_signed(), f"product_{k}", data=True))
        hi = (1 << (c.out_width - 1)) - 1
        # The fields the last stages read, from registers of their own beside them (the head of the command
        # queue lies far away: on the 85F at 80 MHz `relu` reached the element through 13.4 ns). A STORE's
        # first entry reaches these stages cycles after it starts, and it retires once its last has left.
        shift, relu, requant = (pipe(m, getattr(insn, n), f"late_{n}", data=True) for n in ("shift", "relu", "requant"))
        lo = Mux(relu, 0, -hi - 1)
        quantized = []
        for k, p in enumerate(products):
            shifted = Signal(signed(w), name=f"shifted_{k}", reset_less=True)
            lane = Signal(signed(c.out_width), name=f"quantized_{k}")
            m.d.sync += shifted.eq(p >> shift)
            with m.If(shifted > hi):
                m.d.comb += lane.eq(hi)
            with m.Elif(shifted < lo):
                m.d.comb += lane.eq(lo)
            with m.Else():
                m.d.comb += lane.eq(shifted)
            quantized.append(lane)
        quantized = Cat(quantized)
        for n in range(5):
            plain = pipe(m, plain, f"plain_{n + 1}", data=True)
            valid.append(pipe(m, valid[-1], f"stage_valid_{n + 2}"))
            last.append(pipe(m, last[-1], f"stage_last_{n + 2}", data=True))
        if passes > 1:
            # The element's earlier slices; slices of one entry are clipped on consecutive cycles.
            gathered = Signal((c.batch * c.block_out - width) * c.out_width, reset_less=True)
            m.d.sync += gathered.eq(Cat(gathered[len(quantized):], quantized))
            quantized = Cat(gathered, quantized)
        element = pipe(m, Mux(requant, quantized, plain), "element", data=True)
        valid.append(pipe(m, valid[-1] & last[-1], "stage_valid_7"))
        gap = Signal(range(max(passes, 2)))     # cycles until a requantizing STORE may read the next entry
        if passes > 1:
            with m.If(issue & insn.requant):
                m.d.sync += gap.eq(passes - 1)
            with m.Elif(gap != 0):
                m.d.sync += gap.eq(gap - 1)

        return element, valid, gap, acc

