"""The compute stream: LOAD UOP/ACC/ACC8, GEMM, ALU and FINISH.

Owns the micro-op and accumulator SRAMs; reads the input and weight SRAMs
the load stream fills and writes the output SRAM the store stream drains.
Its LOADs run on a :class:`~tilewright.hw.padded_load.PaddedLoad` outside
(its own, or one it shares with the load stream), which writes the
micro-op and accumulator SRAMs through ``uop_load`` and ``acc_load``.
"""

from amaranth import C, Module, Mux, Signal
from amaranth.lib import data, wiring
from amaranth.lib.memory import Memory, ReadPort, WritePort
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import ErrorCode, MemType, Opcode

from .core import acc_port_a_forwarded, alu_port_transparent, alu_reads_one_port
from .serial_core import core_for
from .padded_load import LoadRequest
from .pipe import pipe
from .sequencer import CommandSignature, Sequencer, TokenPort
from .sram import (acc_granularity, alu_granularity, load_granularity, never_reads_while_written, sram_addr_bits,
                   sram_rows, sram_shape)

__all__ = ["ComputeUnit"]


class ComputeUnit(wiring.Component):
    """Sequencer, the GEMM/ALU core, FINISH, and the LOADs of UOP/ACC/ACC8 for a loader outside.

    Members
    -------
    cmd : In(CommandSignature())
    prev : Out(TokenPort)      (l2c pops, c2l pushes)
    next : Out(TokenPort)      (s2c pops, c2s pushes)
    inp_read, wgt_read : In(ReadPort.Signature)
    out_write : In(WritePort.Signature)
    acc_for_store : Out(ReadPort.Signature)
        A read port of the accumulator SRAM for the store stream: a third
        one, or with ``lean`` the ALU's second, free while no ALU
        instruction executes (``acc_for_store_free``); not built (never free) without ``requant_store``.
    acc_for_store_free : Out(1)
        The store stream may read ``acc_for_store`` this cycle.
    dma : Out(LoadRequest)
        The stream's LOADs (UOP, ACC, ACC8), for the loader outside.
    uop_load, acc_load : Out(WritePort.Signature)
        That loader's writes into the micro-op and accumulator SRAMs.
    protocol_ok : In(1)
        Other streams drained, tokens clear and no instruction after this one,
        a register: checked two cycles after FINISH starts, as it stood the
        cycle after FINISH's pops.
    halt : In(1)
    finished : Out(1)
        One-cycle pulse: FINISH retired.
    fault, error, index : the sequencer's fault report
    status and counter outputs as named
    """

    def __init__(self, cfg):
        self.cfg = cfg

        def port(kind, mem, **granularity):
            return In(kind.Signature(addr_width=sram_addr_bits(cfg, mem), shape=sram_shape(cfg, mem), **granularity))

        super().__init__({
            "cmd": In(CommandSignature()),
            "prev": Out(TokenPort()), "next": Out(TokenPort()),
            "inp_read": port(ReadPort, "inp"), "wgt_read": port(ReadPort, "wgt"),
            "out_write": port(WritePort, "out", granularity=alu_granularity(cfg)),
            "acc_for_store": Out(ReadPort.Signature(addr_width=cfg.index_bits("acc"), shape=sram_shape(cfg, "acc"))),
            "acc_for_store_free": Out(1),
            "dma": Out(LoadRequest(cfg)),
            "uop_load": Out(WritePort.Signature(addr_width=cfg.index_bits("uop"), shape=sram_shape(cfg, "uop"))),
            "acc_load": Out(WritePort.Signature(addr_width=sram_addr_bits(cfg, "acc"), shape=sram_shape(cfg, "acc"),
                                                granularity=load_granularity(cfg, "acc"))),
            "protocol_ok": In(1),
            "halt": In(1),
            "finished": Out(1),
            "fault": Out(1), "error": Out(isa.ERROR_BITS), "index": Out(32), "started": Out(1),
            "busy": Out(1), "blocked": Out(1), "retired": Out(1), "executing": Out(1),
            "gemm_busy": Out(1), "alu_busy": Out(1), "retire_gemm": Out(1), "retire_alu": Out(1),
            "wait_pop_prev": Out(1), "wait_pop_next": Out(1),
            "wait_push_prev": Out(1), "wait_push_next": Out(1),
            "bytes_uop": Out(32), "bytes_acc": Out(32), "bytes_acc8": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        layouts = isa.instruction_layouts(c)
        m.submodules.seq = seq = Sequencer(insn_layout=layouts["header"])
        wiring.connect(m, wiring.flipped(self.cmd), seq.cmd)
        wiring.connect(m, seq.prev, wiring.flipped(self.prev))
        wiring.connect(m, seq.next, wiring.flipped(self.next))

        # -- memories ------------------------------------------------------------
        m.submodules.uop_mem = uop_mem = Memory(shape=sram_shape(c, "uop"), depth=c.uop_depth, init=[])
        def acc_memory():
            return Memory(shape=sram_shape(c, "acc"), depth=sram_rows(c, "acc"), init=[])
        m.submodules.acc_mem = acc_mem = acc_memory()
        uop_w = uop_mem.write_port()
        uop_r = uop_mem.read_port()
        never_reads_while_written(uop_mem)          # (LOAD UOP and the core take turns)
        acc_w = acc_mem.write_port(granularity=acc_granularity(c))

        def acc_copy(name):
            """A read port of a copy of the accumulators of its own, written with them, for a reader that
            never reads a row as it is written: marked so, its block RAMs need none of the logic Yosys builds
            to return the old row on a collision (registers, a compare of the addresses and a multiplexer on
            every bit: 13.9 ns on the 85F at 80 MHz). (Yosys gives each read port block RAMs of its own
            anyway.)"""
            m.submodules[name] = copy = acc_memory()
            copy_w = copy.write_port(granularity=acc_granularity(c))
            port = copy.read_port()
            never_reads_while_written(copy)
            m.d.comb += [copy_w.addr.eq(acc_w.addr), copy_w.data.eq(acc_w.data), copy_w.en.eq(acc_w.en)]
            return port
        # The first port is transparent to the write port, unless the core makes it read as if it were
        # (`acc_port_a_forwarded`: its bits written in the cycle it reads them may then be undefined) or
        # it is the serial core's, which reads no row in a cycle it writes it.
        transparent_a = not (c.serial_core or acc_port_a_forwarded(c))
        acc_ra = acc_mem.read_port(transparent_for=(acc_w,) if transparent_a else ())
        # The ALU's second port, unless it reads both rows through the first. Not transparent (several
        # passes: `alu_port_transparent`), it reads a copy (the ALU waits out the write register; tokens
        # keep a requantizing STORE off the rows compute writes).
        acc_rb = None
        if not alu_reads_one_port(c):
            acc_rb = acc_mem.read_port(transparent_for=(acc_w,)) if alu_port_transparent(c) else acc_copy("acc_mem_b")
        # Requantizing STOREs read through a third port, a copy (tokens keep them off rows compute is
        # writing), or with `lean` through the ALU's second port between ALU instructions (without
        # `requant_store` the store stream never reads the accumulators).
        store_read = self.acc_for_store
        if c.requant_store and not c.lean:
            wiring.connect(m, wiring.flipped(store_read), acc_copy("acc_mem_store"))
            m.d.comb += self.acc_for_store_free.eq(1)
        if not transparent_a and len(acc_mem.read_ports) == 1:
            never_reads_while_written(acc_mem)

        # -- executors -------------------------------------------------------------
        loader = self.dma
        m.submodules.core = core = core_for(c)
        m.d.comb += [uop_w.addr.eq(self.uop_load.addr), uop_w.data.eq(self.uop_load.data),
                     uop_w.en.eq(self.uop_load.en)]
        wiring.connect(m, core.uop_read, uop_r)
        wiring.connect(m, core.acc_read_a, acc_ra)
        if c.requant_store and c.lean:
            # The port is the ALU's from the cycle after its busy flag rises to the cycle after it falls, a
            # register of its own choosing the block RAMs' address (from `active`, which reaches much of the
            # core, the choice reached them through 13-14.5 ns on the 85F at 78 MHz): an ALU instruction's
            # micro-ops pass S0 at least before they read their rows (in S1 or S2), and it is done when the last
            # has. (The serial core reads through the first port alone.)
            alu = C(0) if c.serial_core else pipe(m, core.alu_busy, "acc_b_for_alu")
            m.d.comb += [acc_rb.addr.eq(Mux(alu, core.acc_read_b.addr, store_read.addr)),
                         acc_rb.en.eq(Mux(alu, core.acc_read_b.en, store_read.en)),
                         core.acc_read_b.data.eq(acc_rb.data), store_read.data.eq(acc_rb.data),
                         self.acc_for_store_free.eq(~alu)]
        elif acc_rb is not None:
            wiring.connect(m, core.acc_read_b, acc_rb)
        wiring.connect(m, core.inp_read, wiring.flipped(self.inp_read))
        wiring.connect(m, core.wgt_read, wiring.flipped(self.wgt_read))
        wiring.connect(m, core.out_write, wiring.flipped(self.out_write))

        word = seq.insn.as_value()
        load = data.View(layouts[Opcode.LOAD], word)
        finish = data.View(layouts[Opcode.FINISH], word)
        opcode = finish.opcode
        is_load = opcode == Opcode.LOAD
        kind = {"uop": is_load & (load.memory_type == MemType.UOP),
                "acc": is_load & (load.memory_type == MemType.ACC),
                "acc8": is_load & (load.memory_type == MemType.ACC8),
                "core": (opcode == Opcode.GEMM) | (opcode == Opcode.ALU),
                "finish": opcode == Opcode.FINISH}
        # Which executor a start is for, from registers computed every cycle (the head is stable from the
        # cycle before the start, which reaches every register the executor loads: on the 85F at 100 MHz
        # the opcode's compares before it, 10.8-11 ns from the sequencer's state).
        starts_load = pipe(m, is_load, "starts_load", data=True)
        starts_core = pipe(m, kind["core"], "starts_core", data=True)
        m.d.comb += [loader.insn.eq(word), loader.start.eq(seq.start & starts_load)]
        m.d.comb += [core.insn.eq(word), core.start.eq(seq.start & starts_core)]

        # One writer of acc at a time: the compute stream runs one instruction (a LOAD waits for the
        # core's last sums, the core for the LOAD). A LOAD's writes pass the core's write register
        # (`acc_loading`, chosen as an instruction starts), so the block RAMs' inputs come from it alone.
        # Its last write lands two cycles after it is done (the pipelined core registers them once more):
        # before anything can read the row (the next compute instruction starts then at the earliest and
        # reads cycles later, and a token it pushes reaches the store stream no sooner).
        acc_loading = Signal()
        with m.If(seq.start):
            m.d.sync += acc_loading.eq(kind["acc"] | kind["acc8"])
        wiring.connect(m, wiring.flipped(self.acc_load), core.acc_load)
        m.d.comb += core.acc_loading.eq(acc_loading)
        wiring.connect(m, core.acc_write, acc_w)

        # FINISH: one cycle after its pops, every other part must be quiet (`protocol_ok` is a register,
        # of that cycle: it is checked a cycle later).
        finish_check = pipe(m, pipe(m, seq.start & kind["finish"], "finish_popped"), "finish_check")
        finish_error = Mux(self.protocol_ok & ~finish.push_prev & ~finish.push_next, 0, ErrorCode.PROTOCOL)

        # A GEMM released by the core retires while its sums drain (unless it pushes to the store stream,
        # which reads them), and the next GEMM starts behind it; anything else waits for the core.
        m.d.comb += [seq.released.eq(core.released), seq.ready.eq(core.idle | (opcode == Opcode.GEMM))]
        done = loader.done | core.done | finish_check
        error = Signal(isa.ERROR_BITS)
        m.d.comb += error.eq(loader.error | core.error
                             | Mux(finish_check, finish_error, 0))
        m.d.comb += [
            seq.done.eq(done), seq.error.eq(error), seq.halt.eq(self.halt),
            self.finished.eq(seq.retired & kind["finish"]),
            self.fault.eq(seq.fault), self.error.eq(Mux(seq.fault, error, 0)), self.index.eq(seq.index),
            self.started.eq(seq.start),
            self.busy.eq(seq.busy), self.blocked.eq(seq.blocked), self.retired.eq(seq.retired),
            self.executing.eq(seq.executing),
            self.gemm_busy.eq(core.gemm_busy), self.alu_busy.eq(core.alu_busy),
            self.retire_gemm.eq(core.retire_gemm), self.retire_alu.eq(core.retire_alu),
            self.wait_pop_prev.eq(seq.wait_pop_prev), self.wait_pop_next.eq(seq.wait_pop_next),
            self.wait_push_prev.eq(seq.wait_push_prev), self.wait_push_next.eq(seq.wait_push_next),
        ]
        # A LOAD's bytes are reported the cycle after it retires, from a register of whether it did (the
        # sequencer's state reached the counters' event registers through 10.6 ns on the 85F at 100 MHz).
        # `bytes_read` holds until the stream's next LOAD starts, cycles later, and the counters count until
        # a run's `busy` has been down a cycle, which falls 3 cycles after FINISH or a fault at the earliest.
        for name in ("uop", "acc", "acc8"):
            retired = pipe(m, seq.retired & kind[name], f"retired_{name}")
            m.d.comb += getattr(self, f"bytes_{name}").eq(Mux(retired, loader.bytes_read, 0))
        return m
