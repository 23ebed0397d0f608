"""The accelerator: fetch, load, compute and store joined by token queues.

:class:`Accelerator` is the top level a user simulates or synthesises: an
AXI4 manager to DRAM (``m_axi``), an AXI4-Lite register file for the host
(``s_axil``, map in :mod:`tilewright.hw.regs`) and an interrupt that is high
while a run is done.

A write of 1 to ``control`` resets the datapath for one cycle (command and
token queues, sequencers; SRAM contents persist, as in the functional
simulator) and starts fetching. The run ends when FINISH retires or an
error stops it; ``done`` rises only once no AXI transaction is in flight,
so the next run starts from a quiet bus.
"""

from amaranth import Cat, ClockDomain, ClockSignal, DomainRenamer, Module, Mux, ResetSignal, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ErrorCode, MemType

from .arbiter import ReadArbiter
from .axi import AxiLiteSignature, AxiSignature, forward
from .compute import ComputeUnit
from .dma import ReaderShare, RowReader, attach_reader
from .dsp import is_small_fpga
from .fetch import Fetch
from .fifo import HeadRegisteredFIFO
from .load import LoadUnit
from .padded_load import LoadShare, PaddedLoad
from .pipe import pipe
from .regs import ADDR_WIDTH, COUNTERS, STATUS_LAYOUT, RegisterFile, built_counters
from .sequencer import POP_COPIES, CommandLayout, CommandSignature
from .sram import alu_granularity, load_granularity, never_reads_while_written, sram_rows, sram_shape
from .store import StoreUnit
from .token_queue import TokenQueue
from .transfer_check import check_width, dram_base_folded

__all__ = ["Accelerator", "Datapath", "TraceSignature", "READ_CLIENTS", "AXI_ID_WIDTH"]

#: Cycles every stream must stay blocked before the run is declared deadlocked.
DEADLOCK_CYCLES = 8

#: The units that read DRAM, in ARID order (client ``k`` of the read arbiter gets ID ``k``).
READ_CLIENTS = ("fetch", "load", "compute")

#: ARID/AWID width of the DRAM port.
AXI_ID_WIDTH = ReadArbiter.id_bits(len(READ_CLIENTS))
#: The load stream's longest read burst: the compute stream's small LOADs (micro-ops, biases), which the
#: arbiter serves first, then wait behind at most `outstanding` such bursts (memory answers in order).
LOAD_BURST_BEATS = 32

#: Byte address width of the accelerator's AXI port unless a SoC narrows it to its memory.
AXI_ADDR_WIDTH = 32


def read_first(cfg):
    """The read client the arbiter serves before the others: the compute stream's loader (None with
    ``lean``, where one reader serves everyone)."""
    return None if cfg.lean else READ_CLIENTS.index("compute")


class TraceSignature(wiring.Signature):
    """Per stream: an instruction started executing / retired this cycle, and its index.

    Members ``{load,compute,store}_start``, ``_retire`` (1 bit) and ``_index`` (32 bits);
    simulation harnesses turn them into a timeline.
    """

    def __init__(self):
        members = {}
        for name in (s.name.lower() for s in isa.Stream):
            members.update({f"{name}_start": Out(1), f"{name}_retire": Out(1), f"{name}_index": Out(32)})
        super().__init__(members)


class _CommandQueue(wiring.Component):
    """A stream's command FIFO: room for ``depth`` instructions besides the one its sequencer executes.

    The executing instruction stays at the head (``held``) until it retires;
    ``empty`` means nothing waits behind it. With ``depth`` 0 the queue is
    the head register alone, written only while empty (a cycle after a pop).
    """

    def __init__(self, depth):
        self.depth = depth
        super().__init__({"w": In(stream.Signature(CommandLayout())), "r": Out(CommandSignature()),
                          "held": In(1), "empty": Out(1)})

    def elaborate(self, platform):
        m = Module()
        if self.depth == 0:
            head = Signal.like(self.w.payload, reset_less=True)     # (read only while valid)
            m.d.comb += [self.w.ready.eq(~self.r.valid), self.r.payload.eq(head),
                         self.empty.eq(self.r.valid == self.held)]
            with m.If(self.w.valid & self.w.ready):
                m.d.sync += [head.eq(self.w.payload), self.r.valid.eq(1)]
            with m.Elif(self.r.ready):
                m.d.sync += self.r.valid.eq(0)
            return m
        # The head is a register: the stream decodes the executing instruction straight from it.
        m.submodules.fifo = q = HeadRegisteredFIFO(width=len(self.w.payload.as_value()), depth=self.depth + 1,
                                                   pop_copies=POP_COPIES)
        m.d.comb += [q.w_data.eq(self.w.payload), q.w_en.eq(self.w.valid), self.w.ready.eq(q.w_rdy),
                     self.r.payload.eq(q.r_data), self.r.valid.eq(q.r_rdy), q.r_en.eq(self.r.ready),
                     q.r_en_copies.eq(self.r.ready_copies),
                     # (`held` implies the head: a sequencer is busy only with its queue's head valid)
                     self.empty.eq(~q.behind & (q.r_rdy == self.held))]
        return m


class Datapath(wiring.Component):
    """Everything that one run uses; reset at the start of each run.

    Members
    -------
    start : In(1)
        Begin fetching ``insn_count`` instructions at ``insn_addr``.
    insn_addr, insn_count : In(32)
        Stable from two cycles before ``start`` (the register file's, written before it).
    axi : Out(AxiSignature)
    error : Out(ERROR_BITS), error_index : Out(32), fault : Out(1)
        The first error of the run: ``fault`` pulses once, as the streams halt, and ``error`` and
        ``error_index`` hold it from two cycles later (the next cycle on the small FPGAs).
    finished : Out(1)
        FINISH retired.
    quiet : Out(1)
        No instruction executing and no AXI transaction in flight.
    events : Out(one bit or count per counter)
        Per-cycle increments for the counters in :data:`~tilewright.hw.regs.COUNTERS`.
    """

    def __init__(self, cfg, *, addr_width):
        self.cfg, self.addr_width = cfg, addr_width
        members = {
            "start": In(1), "insn_addr": In(32), "insn_count": In(32),
            "axi": Out(AxiSignature(addr_width=addr_width, data_width=cfg.dram_bus_width, id_width=AXI_ID_WIDTH)),
            "fault": Out(1), "error": Out(isa.ERROR_BITS), "error_index": Out(32),
            "finished": Out(1), "quiet": Out(1),
            "trace": Out(TraceSignature()),
        }
        members.update({f"event_{name}": Out(32) for name, _ in COUNTERS if name != "cycles"})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        c, aw = self.cfg, self.addr_width
        m.submodules.fetch = fetch = Fetch(c, addr_width=aw)
        m.submodules.load = load = LoadUnit(c)
        m.submodules.compute = compute = ComputeUnit(c)
        m.submodules.store = store = StoreUnit(c, addr_width=aw)
        queues = {}
        for name in ("load", "compute", "store"):
            queues[name] = m.submodules[f"{name}_queue"] = _CommandQueue(c.cmd_queue_depth)
        # With `slow_clock` the load and store streams' instructions are queued with `dram_base` folded to
        # as many bits as their range checks compute in (a few LUTs before the queues, a dozen flip-flops
        # fewer in each; on a fast clock the OR would lengthen the path from fetch).
        layouts = isa.instruction_layouts(c)
        keep = check_width(sram_bits=layouts[isa.Opcode.LOAD]["sram_base"].width, limit_bits=aw)
        wiring.connect(m, fetch.compute, queues["compute"].w)
        for name, opcode in (("load", isa.Opcode.LOAD), ("store", isa.Opcode.STORE)):
            source, sink = getattr(fetch, name), queues[name].w
            if not c.slow_clock:
                wiring.connect(m, source, sink)
                continue
            m.d.comb += [sink.valid.eq(source.valid), source.ready.eq(sink.ready),
                         sink.payload.index.eq(source.payload.index),
                         sink.payload.insn.eq(dram_base_folded(source.payload.insn, layouts[opcode], keep))]
        wiring.connect(m, queues["load"].r, load.cmd)
        wiring.connect(m, queues["compute"].r, compute.cmd)
        wiring.connect(m, queues["store"].r, store.cmd)
        m.d.comb += [queues["load"].held.eq(load.busy), queues["compute"].held.eq(compute.busy),
                     queues["store"].held.eq(store.busy)]

        # -- token queues: l2c, c2l, c2s, s2c ---------------------------------------
        tokens = {q: TokenQueue(depth=c.token_queue_depth) for q in isa.Queue}
        for q, tq in tokens.items():
            m.submodules[f"tokens_{q.name.lower()}"] = tq
        self._join(m, producer=load.next, consumer=compute.prev, queue=tokens[isa.Queue.L2C])
        self._join(m, producer=compute.prev, consumer=load.next, queue=tokens[isa.Queue.C2L])
        self._join(m, producer=compute.next, consumer=store.prev, queue=tokens[isa.Queue.C2S])
        self._join(m, producer=store.prev, consumer=compute.next, queue=tokens[isa.Queue.S2C])

        # -- SRAMs shared between streams ---------------------------------------------
        m.submodules.inp_mem = inp_mem = Memory(shape=sram_shape(c, "inp"), depth=c.inp_depth, init=[])
        m.submodules.wgt_mem = wgt_mem = Memory(shape=sram_shape(c, "wgt"), depth=sram_rows(c, "wgt"), init=[])
        m.submodules.out_mem = out_mem = Memory(shape=sram_shape(c, "out"), depth=c.acc_depth, init=[])
        inp_write = inp_mem.write_port(granularity=load_granularity(c, "inp"))
        wgt_write = wgt_mem.write_port(granularity=load_granularity(c, "wgt"))
        wiring.connect(m, compute.inp_read, inp_mem.read_port())
        wiring.connect(m, compute.wgt_read, wgt_mem.read_port())
        wiring.connect(m, compute.out_write, out_mem.write_port(granularity=alu_granularity(c)))
        wiring.connect(m, store.out_read, out_mem.read_port())
        for mem in (inp_mem, wgt_mem, out_mem):        # (the tokens keep their readers off rows being written)
            never_reads_while_written(mem)
        wiring.connect(m, store.acc_read, compute.acc_for_store)
        m.d.comb += store.acc_read_free.eq(compute.acc_for_store_free)

        # -- LOADs: one PaddedLoad per stream, or one both streams share ------------------
        compute_types = (MemType.UOP, MemType.ACC, MemType.ACC8)
        if c.lean:
            m.submodules.loader = loader = PaddedLoad(c, (MemType.INP, MemType.WGT) + compute_types, addr_width=aw)
            m.submodules.load_share = share = LoadShare(c)
            wiring.connect(m, load.dma, share.client_0)
            wiring.connect(m, compute.dma, share.client_1)
            wiring.connect(m, share.loader, loader.request)
            loaders = {"load": loader, "compute": loader}
        else:
            loaders = {"load": PaddedLoad(c, (MemType.INP, MemType.WGT), addr_width=aw),
                       "compute": PaddedLoad(c, compute_types, addr_width=aw)}
            for name, unit in (("load", load), ("compute", compute)):
                m.submodules[f"{name}_loader"] = loaders[name]
                wiring.connect(m, unit.dma, loaders[name].request)
        wiring.connect(m, loaders["load"].write_inp, inp_write)
        wiring.connect(m, loaders["load"].write_wgt, wgt_write)
        wiring.connect(m, loaders["compute"].write_uop, compute.uop_load)
        wiring.connect(m, loaders["compute"].write_acc, compute.acc_load)

        # -- AXI: the readers share AR/R, the store stream owns AW/W/B ----------------
        # A RowReader for fetch and for each loader, or with `lean` one they all take turns on.
        def row_reader(name, **options):
            m.submodules[f"{name}_reader"] = reader = RowReader(
                addr_width=aw, data_width=c.dram_bus_width, lean=c.lean, timing_registers=not c.slow_clock, **options)
            return reader
        if c.lean:
            reader = row_reader("shared")
            m.submodules.reader_share = reader_share = ReaderShare(count=2, addr_width=aw, data_width=c.dram_bus_width)
            attach_reader(m, reader_share.reader, reader)
            wiring.connect(m, fetch.read, reader_share.client_0)
            wiring.connect(m, loaders["load"].read, reader_share.client_1)
            readers = {"fetch": reader.axi}
        else:
            readers = {}
            for name, unit in (("fetch", fetch), ("load", loaders["load"]), ("compute", loaders["compute"])):
                reader = row_reader(name, **({"max_beats": LOAD_BURST_BEATS} if name == "load" else {}))
                attach_reader(m, unit.read, reader)
                readers[name] = reader.axi
        m.submodules.arbiter = arbiter = ReadArbiter(count=len(READ_CLIENTS), addr_width=aw,
                                                     data_width=c.dram_bus_width,
                                                     first=read_first(c))
        for k, name in enumerate(READ_CLIENTS):
            if name in readers:      # (with lean fetch's reader is everyone's)
                wiring.connect(m, readers[name], arbiter.clients()[k])
        forward(m, arbiter.bus, self.axi)
        forward(m, store.axi, self.axi, skip={"awid", "bid"})
        m.d.comb += self.axi.awid.eq(0)

        # -- errors: the first one wins and halts every stream -------------------------
        halt = Signal()
        m.d.comb += [fetch.halt.eq(halt), load.halt.eq(halt), compute.halt.eq(halt), store.halt.eq(halt)]
        sources = [(fetch.fault, fetch.error, fetch.index), (load.fault, load.error, load.index),
                   (compute.fault, compute.error, compute.index), (store.fault, store.error, store.index)]
        # Deadlock / end without FINISH: every stream quiet for several cycles.
        streams_blocked = load.blocked & compute.blocked & store.blocked
        fetch_blocked = fetch.done | fetch.stalled
        stuck = Signal(range(DEADLOCK_CYCLES + 1))
        with m.If(streams_blocked & fetch_blocked & ~halt & ~self.finished):
            m.d.sync += stuck.eq(stuck + 1)
        with m.Else():
            m.d.sync += stuck.eq(0)
        all_empty = queues["load"].empty & queues["compute"].empty & queues["store"].empty
        # (registered: it is read only once every stream has been stuck for a while)
        ended = pipe(m, fetch.done & all_empty, "ended")
        sources.append((stuck == DEADLOCK_CYCLES, Mux(ended, ErrorCode.PROTOCOL, ErrorCode.DEADLOCK),
                        Mux(ended, fetch.index, compute.index)))
        # A fault halts the streams at once, from one flip-flop. Except on the small FPGAs (fewer flip-flops
        # there), which error and index it reports is taken a cycle later from a register per source (on the
        # 85F at 100 MHz the units' fault logic reached the 36 error flip-flops' enables across the die). No
        # source faults while halted, so the registers hold the faults of the halting cycle alone.
        raised = [(fault & ~halt, error, index) for fault, error, index in sources]
        for fault, _, _ in raised:
            with m.If(fault):
                m.d.sync += halt.eq(1)
                m.d.comb += self.fault.eq(1)
        if not is_small_fpga(platform):
            raised = [(pipe(m, fault, f"fault_{k}"), pipe(m, error, f"error_{k}", data=True),
                       pipe(m, index, f"index_{k}", data=True)) for k, (fault, error, index) in enumerate(raised)]
        for fault, error, index in reversed(raised):      # the first listed wins a tie
            with m.If(fault):
                m.d.sync += [self.error.eq(error), self.error_index.eq(index)]

        # FINISH is legal when nothing else is left: tokens, other streams, instructions. (Once fetch is
        # done its index is the run's count, as latched at the start: the host may write the register meanwhile.)
        # (registered: compute checks it a cycle later; on the 85F the queues' counts reached the compute
        # stream's state through it)
        # (`fetch.last_index` is `fetch.index - 1` once fetch is done, from a register: no subtractor.)
        tokens_clear = ~Cat(tq.pop_ready for tq in tokens.values()).any()
        m.d.sync += compute.protocol_ok.eq(
            tokens_clear & ~load.busy & ~store.busy & queues["load"].empty & queues["store"].empty
            & fetch.done & (compute.index == fetch.last_index))
        with m.If(compute.finished):
            m.d.sync += self.finished.eq(1)

        # -- quiet bus -----------------------------------------------------------------
        beats_due = Signal(range(len(READ_CLIENTS) * 8 * 256 + 1))    # (a reader has at most 5 bursts of 256 beats due)
        # A beat taken is subtracted a cycle later, from a register (`rready` comes from deep in the
        # loaders): the count is then one high in the cycle after a beat, which the test allows for.
        beat_taken = pipe(m, self.axi.rvalid & self.axi.rready, "beat_taken")
        m.d.sync += beats_due.eq(beats_due + Mux(self.axi.arvalid & self.axi.arready, self.axi.arlen + 1, 0) - beat_taken)
        no_beats_due = Mux(beat_taken, beats_due == 1, beats_due == 0)
        m.d.comb += self.quiet.eq(no_beats_due & ~fetch.busy & ~load.dma_busy & ~compute.executing & ~store.dma_busy)

        # -- fetch control and counter events -----------------------------------------
        m.d.comb += [fetch.start.eq(self.start), fetch.addr.eq(self.insn_addr), fetch.count.eq(self.insn_count)]
        # The program's bytes, which no STORE may reach (isa.ErrorCode.STORE_OVER_PROGRAM), latched as fetch
        # latches its address; past the bus the run stops at fetch before any STORE.
        with m.If(self.start):
            m.d.sync += [store.program_start.eq(self.insn_addr), store.program_end.eq(fetch.program_end)]
        events = {
            "gemm_busy": compute.gemm_busy, "alu_busy": compute.alu_busy,
            "load_busy": load.dma_busy, "store_busy": store.dma_busy,
            "load_wait_c2l": load.wait_pop_next, "load_wait_l2c": load.wait_push_next,
            "compute_wait_l2c": compute.wait_pop_prev, "compute_wait_s2c": compute.wait_pop_next,
            "compute_wait_c2l": compute.wait_push_prev, "compute_wait_c2s": compute.wait_push_next,
            "store_wait_c2s": store.wait_pop_prev, "store_wait_s2c": store.wait_push_prev,
            "read_insn": Mux(fetch.dispatched, isa.INSN_BYTES, 0),
            "read_uop": compute.bytes_uop, "read_inp": load.bytes_inp, "read_wgt": load.bytes_wgt,
            "read_acc": compute.bytes_acc, "read_acc8": compute.bytes_acc8, "write_out": store.bytes_out,
            "gemm_uops": compute.retire_gemm, "alu_uops": compute.retire_alu,
            "insns_load": load.retired, "insns_compute": compute.retired, "insns_store": store.retired,
        }
        # every counter but the cycle count has its event here: a missing one would count nothing, silently
        assert set(events) == {name for name, _ in COUNTERS} - {"cycles"}, set(events) ^ {n for n, _ in COUNTERS}
        for name, value in events.items():
            m.d.comb += getattr(self, f"event_{name}").eq(value)
        for name, unit in (("load", load), ("compute", compute), ("store", store)):
            m.d.comb += [getattr(self.trace, f"{name}_start").eq(unit.started),
                         getattr(self.trace, f"{name}_retire").eq(unit.retired),
                         getattr(self.trace, f"{name}_index").eq(unit.index)]
        return m

    @staticmethod
    def _join(m, *, producer, consumer, queue):
        """``producer`` pushes into ``queue``, ``consumer`` pops from it."""
        m.d.comb += [queue.push.eq(producer.push), producer.push_ready.eq(queue.push_ready),
                     queue.pop.eq(consumer.pop), consumer.pop_ready.eq(queue.pop_ready)]


class Accelerator(wiring.Component):
    """The whole accelerator for one :class:`~tilewright.config.HwConfig`.

    Members
    -------
    m_axi : Out(AxiSignature)
        DRAM: byte addresses, ``dram_bus_width`` data, IDs per reader.
    s_axil : In(AxiLiteSignature)
        Host registers (:data:`~tilewright.hw.regs.REGISTERS`).
    irq : Out(1)
        High while the last run is done.
    busy : Out(1)
        A run is in progress (the status register's ``busy``).
    trace : Out(TraceSignature)
        Instruction start/retire events per stream, for timelines.
    """

    def __init__(self, cfg, *, addr_width=AXI_ADDR_WIDTH):
        self.cfg, self.addr_width = cfg, addr_width
        super().__init__({
            "m_axi": Out(AxiSignature(addr_width=addr_width, data_width=cfg.dram_bus_width, id_width=AXI_ID_WIDTH)),
            "s_axil": In(AxiLiteSignature(addr_width=ADDR_WIDTH)),
            "irq": Out(1), "busy": Out(1),
            "trace": Out(TraceSignature()),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.regs = regs = RegisterFile(direct=self.cfg.slow_clock)
        wiring.connect(m, wiring.flipped(self.s_axil), regs.bus)
        # The start pulse is registered before it resets the whole datapath: a net that reaches
        # thousands of flip-flops must leave a flip-flop, not the register file's write decode.
        # Reset the datapath in that cycle, start it in the next. A start while a run is busy is
        # ignored: resetting the datapath under bursts in flight would leave the bus answering a
        # run that no longer exists (every run ends by itself: errors and deadlocks stop it).
        starting = Signal()
        busy = Signal()
        start_now = regs.start & ~busy & ~starting
        m.d.sync += starting.eq(start_now)
        # The datapath's reset is one flip-flop of its own, `starting`'s copy that the domain's reset also
        # sets (a cycle late, and a cycle longer): with `starting` and the reset joined by a LUT, that
        # LUT's output reached its ~1,200 flip-flops across the die (on the 85F at 100 MHz, 7.8 ns).
        # (Through an ECP5 global buffer it was faster, but nextpnr then failed to route the flip-flop
        # into the buffer with one seed in three: docs/fpga.md.)
        clear = Signal(init=1, name="clear_replica_datapath")     # (kept apart from the counters' copy)
        m.d.sync += clear.eq(start_now)
        m.domains.datapath = ClockDomain("datapath", local=True)
        m.d.comb += [ClockSignal("datapath").eq(ClockSignal()), ResetSignal("datapath").eq(clear)]
        m.submodules.datapath = datapath = DomainRenamer("datapath")(Datapath(self.cfg, addr_width=self.addr_width))
        go = Signal()
        m.d.sync += go.eq(starting)
        m.d.comb += [datapath.start.eq(go), datapath.insn_addr.eq(regs.insn_addr),
                     datapath.insn_count.eq(regs.insn_count)]
        forward(m, datapath.axi, self.m_axi)
        wiring.connect(m, datapath.trace, wiring.flipped(self.trace))

        done = Signal()
        status = Signal(STATUS_LAYOUT)
        ending = Signal()       # finished or failed, waiting for the bus to go quiet
        # The bus's quiet and the fault as seen a cycle before, registers (the readers' and streams' state
        # reached `ending`'s enable through them: 11.5 and 11.1 ns on the 85F at 100 MHz). `ending` is
        # then set two cycles after a fault at the earliest, and the quiet it sees is of the cycle after
        # the fault, when an instruction a stream started in the fault's cycle (the streams halt from
        # the next) is already executing.
        quiet = pipe(m, datapath.quiet, "quiet")
        faulted = pipe(m, datapath.fault, "faulted")
        with m.If(starting):
            m.d.sync += [busy.eq(1), done.eq(0), ending.eq(0)]
        with m.Elif(busy):
            with m.If(datapath.finished | faulted):
                m.d.sync += ending.eq(1)
            with m.If(ending & quiet):
                m.d.sync += [busy.eq(0), done.eq(1), ending.eq(0)]
        # A run counts as started from the write that starts it: the status read after it never
        # shows the last run's outcome.
        m.d.comb += [
            status.busy.eq(busy | starting), status.done.eq(done & ~starting),
            status.error.eq(Mux(starting, 0, datapath.error)),
            regs.status.eq(status),
            regs.error_index.eq(Mux(starting, 0, datapath.error_index)),
            regs.fingerprint.eq(int(self.cfg.fingerprint[:8], 16)),
            self.irq.eq(done & ~starting), self.busy.eq(busy | starting),
        ]
        # -- counters of the last run (the registers of counters not built read 0) --------
        # An event is counted a cycle after it happens, from a register (the events come from deep in
        # the streams, the counters sit by the register file): the same totals, as the run's last
        # busy cycle's events are counted in the cycle after it, before a host can read them.
        counting = Signal()
        m.d.sync += counting.eq(busy)
        # The counters are cleared by a copy of `clear` (as `starting`, and set by the domain's reset): one
        # flip-flop, not the reset and `starting` joined by a LUT, reaches their ~1,000 resets (on the 85F
        # at 100 MHz, 10.6 ns).
        clear_counters = Signal(init=1, name="clear_replica_counters")
        m.d.sync += clear_counters.eq(start_now)
        for name in built_counters(self.cfg):
            counter = Signal(32, name=f"count_{name}", reset_less=True)
            if name == "cycles":
                step, when = 1, busy
            else:
                step, when = pipe(m, getattr(datapath, f"event_{name}"), f"event_{name}", data=True), counting
            with m.If(clear_counters):
                m.d.sync += counter.eq(0)
            with m.Elif(when):
                m.d.sync += counter.eq(counter + step)
            m.d.comb += getattr(regs, name).eq(counter)
        return m
