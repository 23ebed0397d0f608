"""Fetch: instructions from DRAM to the three command queues, in order.

Instructions are read in chunks into a local buffer, and a chunk is only
requested when the buffer has room for all of it: however full the command
queues get, fetch never holds the shared read channel waiting for them (a
stalled R channel would starve the very units that empty them). The decoder
checks each instruction as :func:`tilewright.isa.fetch_error` does and
routes it by stream. The program must start on a 16-byte boundary and lie
below ``2**addr_width``; a misaligned address, a program beyond the bus's
reach (both checked before anything is read, as the functional simulator
does) or an error response to an instruction read stops the run with
``BUS_ERROR``.
"""

from amaranth import C, Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright import isa
from tilewright.isa import AluOp, ErrorCode, Opcode, Stream

from .dma import BeatLayout, ElementPacker, ReadClient
from .fifo import HeadRegisteredFIFO, head_registered_on
from .pipe import pipe
from .sequencer import CommandLayout

__all__ = ["Fetch"]

CHUNK = 16      # instructions per read request
LEAN_CHUNK = 8  # with `lean`: a buffer of 16 fits one row of Gowin's 16-deep LUT RAMs


class _InstructionBuffer(wiring.Component):
    """The fetch buffer: the reader's beats in, whole instructions out (a FIFO of ``depth`` instructions
    with a registered head, :class:`~.fifo.HeadRegisteredFIFO`'s read ports).

    When an instruction spans whole beats (a bus no wider than 128 bits), each beat is written straight
    into its lane of the FIFO's memory: no register assembles an instruction from its beats on the way
    in (224 flip-flops on a 32-bit bus, each a LUT site of its own on the Gowin, fed as they are from
    the bus). A wider bus holds several instructions a beat: :class:`~.dma.ElementPacker` splits them.
    ``arrived`` pulses as an instruction is complete.
    """

    def __init__(self, *, bus_bytes, depth, decode, decoded_width, registered_head):
        self.bus_bytes, self.depth, self.registered_head = bus_bytes, depth, registered_head
        self.decode, self.decoded_width = decode, decoded_width
        super().__init__({
            "beats": In(stream.Signature(BeatLayout(bus_bytes * 8))),
            "arrived": Out(1), "level": Out(range(depth + 1)),
            "r_data": Out(isa.INSN_BITS), "r_decoded": Out(decoded_width), "r_rdy": Out(1), "r_en": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        lanes = max(1, isa.INSN_BYTES // self.bus_bytes)
        m.submodules.fifo = fifo = HeadRegisteredFIFO(width=isa.INSN_BITS, depth=self.depth, lanes=lanes,
                                                      decode=self.decode, decoded_width=self.decoded_width,
                                                      registered_head=self.registered_head)
        if self.bus_bytes > isa.INSN_BYTES:
            m.submodules.packer = packer = ElementPacker(elem_bytes=isa.INSN_BYTES, bus_bytes=self.bus_bytes)
            wiring.connect(m, wiring.flipped(self.beats), packer.beats)
            m.d.comb += [fifo.w_data.eq(packer.elements.payload), fifo.w_en.eq(packer.elements.valid),
                         packer.elements.ready.eq(1)]
        else:       # (fetch asks only for what the buffer has room for: every beat is taken)
            m.d.comb += [fifo.w_data.eq(self.beats.payload.data), fifo.w_en.eq(self.beats.valid),
                         self.beats.ready.eq(1)]
        m.d.comb += [self.arrived.eq(fifo.written), self.level.eq(fifo.level), self.r_data.eq(fifo.r_data),
                     self.r_decoded.eq(fifo.r_decoded), self.r_rdy.eq(fifo.r_rdy), fifo.r_en.eq(self.r_en)]
        return m


class DecodedLayout(data.StructLayout):
    """What fetch needs of an instruction to dispatch it: its stream, what is wrong with it (an
    ``ErrorCode``, 0 for a legal instruction) and whether that is nothing (``legal``: dispatch reads one
    flip-flop, not a compare)."""

    def __init__(self):
        super().__init__({"to_load": 1, "to_store": 1, "error": isa.ERROR_BITS, "legal": 1})


def _decode(word, cfg):
    """Instruction ``word``'s bits of :class:`DecodedLayout`: routing and legality as ``isa.stream_of`` and
    ``isa.fetch_error`` define them (all but the bus errors, which are not the word's)."""
    layouts = isa.instruction_layouts(cfg)
    header = data.View(layouts["header"], word)
    mem = data.View(layouts[Opcode.LOAD], word).memory_type
    alu_op = data.View(layouts[Opcode.ALU], word).alu_op
    opcode = header.opcode
    to_load = (opcode == Opcode.LOAD) & mem.matches(*(t for t, s in isa.LOAD_STREAMS.items() if s == Stream.LOAD))
    to_store = opcode == Opcode.STORE
    to_compute = ~to_load & ~to_store
    bad_memory = (((opcode == Opcode.LOAD) & ~mem.matches(*isa.LOAD_STREAMS))
                  | (to_store & ~mem.matches(*isa.STORE_MEMORY_TYPES)))
    bad_flag = 0
    for executing, routed in ((Stream.LOAD, to_load), (Stream.COMPUTE, to_compute), (Stream.STORE, to_store)):
        for flag in isa.illegal_flags(executing):
            bad_flag |= routed & getattr(header, flag)
    # a bit beyond the fields of the word's instruction (isa.decode)
    reserved_set = 0
    for op in isa.INSTRUCTION_TYPES:
        reserved_set |= (opcode == op) & word[isa.instruction_format(op, cfg).used_bits:].any()
    error = Mux(~opcode.matches(*isa.INSTRUCTION_TYPES), ErrorCode.ILLEGAL_OPCODE,
                Mux(reserved_set, ErrorCode.RESERVED_BITS,
                    Mux(bad_memory, ErrorCode.ILLEGAL_MEMORY_TYPE,
                        Mux((opcode == Opcode.ALU) & ~alu_op.matches(*AluOp), ErrorCode.ILLEGAL_ALU_OP,
                            Mux(bad_flag, ErrorCode.ILLEGAL_DEPENDENCY, 0)))))
    error = Cat(error, C(0, isa.ERROR_BITS))[:isa.ERROR_BITS]
    return Cat(to_load, to_store, error, error == 0)


class Fetch(wiring.Component):
    """Reads ``count`` instructions from byte address ``addr`` and dispatches them.

    Members
    -------
    start : In(1)
        Begin fetching (one-cycle pulse); ``addr`` and ``count`` are sampled, and must be stable from
        two cycles before (where the program's bounds are checked).
    addr, count : In(32)
    program_end : Out(addr_width + 1)
        One past the program's last byte, at most ``2**addr_width``: valid at ``start`` and while
        ``addr`` and ``count`` hold.
    load, compute, store : Out(stream.Signature(CommandLayout()))
        The command queues.
    read : Out(ReadClient)
        A :class:`~.dma.RowReader` of its own, or one shared (``lean``).
    halt : In(1)
        Stop dispatching.
    fault : Out(1)
        One-cycle pulse: the instruction at ``index`` is illegal (``error``).
    error : Out(ERROR_BITS)
    index : Out(32)
        Index of the next instruction to dispatch.
    last_index : Out(32)
        Index of the run's last instruction (``count - 1``), a register from the cycle after ``start``.
    done : Out(1)
        Every instruction has been dispatched.
    stalled : Out(1)
        Nothing in flight and the next instruction's queue is full.
    dispatched : Out(1)
        One-cycle pulse: an instruction left for its queue.
    busy : Out(1)
        A read is in flight.
    """

    def __init__(self, cfg, *, addr_width):
        self.cfg = cfg
        self.addr_width = addr_width
        cmd = Out(stream.Signature(CommandLayout()))
        super().__init__({
            "start": In(1), "addr": In(32), "count": In(32), "program_end": Out(addr_width + 1),
            "load": cmd, "compute": cmd, "store": cmd,
            "read": Out(ReadClient(addr_width=addr_width, data_width=cfg.dram_bus_width)),
            "halt": In(1),
            "fault": Out(1), "error": Out(isa.ERROR_BITS), "index": Out(32), "last_index": Out(32),
            "done": Out(1), "stalled": Out(1), "dispatched": Out(1), "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        c = self.cfg
        reader = self.read
        chunk_size = LEAN_CHUNK if c.lean else CHUNK
        # The buffer decodes an instruction as it becomes the head (on the ECP5 ahead of it, into a
        # register: `_decode`), so that dispatching it, which pops the buffer, starts from flip-flops.
        registered_head = head_registered_on(platform)      # (the dispatch below relies on which)
        m.submodules.buffer = buffer = _InstructionBuffer(bus_bytes=c.dram_bus_width // 8, depth=2 * chunk_size,
                                                          decode=lambda word: _decode(word, c),
                                                          decoded_width=DecodedLayout().size,
                                                          registered_head=registered_head)
        wiring.connect(m, wiring.flipped(reader.beats), buffer.beats)

        # A program that passes the start check lies below 2**addr_width, so it holds at most
        # 2**(addr_width-4) instructions: every count and index below is that narrow.
        index_bits = self.addr_width - 4 + 1
        index = Signal(index_bits)
        remaining = Signal(index_bits)        # instructions not yet asked of DRAM
        next_addr = Signal(self.addr_width)   # where the next chunk starts
        arriving = Signal(range(chunk_size + 1))   # asked for but not yet in the buffer
        running = Signal()
        # index == count, kept as a flag beside the index (it gates `fault` and ends the run): set at
        # the start and as the index steps, from a compare with the last index registered at the start.
        all_dispatched = Signal()
        last_index = Signal(index_bits, reset_less=True)
        chunk = Signal(range(chunk_size + 1))
        # min(remaining, chunk_size) from bit tests: no subtractor or ordered compare on the request path
        m.d.comb += chunk.eq(Mux(remaining[chunk_size.bit_length() - 1:].any(), chunk_size, remaining))
        bad_address = Signal()       # misaligned, or the program runs past the last address the bus reaches
        # Whether a chunk may be asked for, a register: judged from the cycle before (the buffer's level
        # and the counts reached the request's enables and the reader share's held command through it:
        # 11.4 ns on the 85F at 100 MHz). Stale by a cycle it is still safe: with nothing arriving
        # the buffer's level can only fall, and an accepted ask, a fault or a start clears it.
        # It costs a cycle per chunk, while the buffer still holds the chunk before.
        may_ask = Signal()
        ask = may_ask & ~self.halt
        m.d.sync += may_ask.eq(running & (remaining != 0) & (arriving == 0) & ~bad_address & ~self.start
                               & (buffer.level <= buffer.depth - chunk_size) & ~(ask & reader.cmd.ready)
                               & ~self.fault)
        m.d.comb += [
            reader.cmd.valid.eq(ask),
            reader.cmd.payload.addr.eq(next_addr),
            reader.cmd.payload.row_bytes.eq(chunk * isa.INSN_BYTES),
            reader.cmd.payload.stride.eq(0),
            reader.cmd.payload.rows.eq(1),
        ]
        arrived = buffer.arrived
        with m.If(ask & reader.cmd.ready):
            m.d.sync += [remaining.eq(remaining - chunk), next_addr.eq(next_addr + chunk * isa.INSN_BYTES),
                         arriving.eq(chunk - arrived)]
        with m.Elif(arrived):
            m.d.sync += arriving.eq(arriving - 1)

        # -- dispatch -------------------------------------------------------------
        word = buffer.r_data
        decoded = data.View(DecodedLayout(), buffer.r_decoded)
        to_load, to_store = decoded.to_load, decoded.to_store
        to_compute = ~to_load & ~to_store
        # A read's error response stops dispatch from a register where the buffer's head is one: a beat
        # written in cycle t heads the buffer in t + 2 at the earliest (t + 3 on the ECP5, where the
        # decoding waits behind the head), when the reader's error (a register
        # set in t + 1) has passed this one. Everything `go` depends on then comes from flip-flops (on the
        # 85F at 100 MHz the error reached the head's 128 enables through the dispatch: 12 ns). An
        # instruction fetched before the failed beat may still leave in t + 1, so the fault can name the
        # index after it. The Gowin's head, read asynchronously, can be the failed word in t + 1.
        # `bus_failed`: the program's address is bad or a read failed (there, one register for both).
        bus_failed = Signal()
        # The program's bounds, ahead of `start` in two steps, each into a register: its end, then its
        # compare with the bus and the alignment (in one cycle they reached `bus_failed` through
        # `start`'s choice, 11.7 ns on the 85F at 100 MHz; in one register, 11.6 ns).
        # (No reset: the run's reset comes in the cycle before `start`, and must not clear them.)
        # (as wide as the bus's reach: an address or count with a bit above it is beyond the bus anyway)
        aw, count_bits = self.addr_width, self.addr_width - (isa.INSN_BYTES.bit_length() - 1)
        end = pipe(m, self.addr[:aw] + self.count[:count_bits] * isa.INSN_BYTES, "end", data=True)
        far = pipe(m, self.addr[aw:].any() | self.count[count_bits:].any(), "far", data=True)
        beyond = far | (end > 1 << aw)
        bad_start = pipe(m, (self.addr[:4] != 0) | beyond, "bad_start", data=True)
        m.d.comb += self.program_end.eq(pipe(m, Mux(beyond, 1 << self.addr_width, end), "program_end", data=True))
        if registered_head:
            m.d.sync += bus_failed.eq(Mux(self.start, bad_start, bad_address) | reader.error)
        else:
            m.d.comb += bus_failed.eq(bad_address | reader.error)
        error = Signal(isa.ERROR_BITS)
        legal = ~bus_failed & decoded.legal
        m.d.comb += error.eq(Mux(bus_failed, ErrorCode.BUS_ERROR, decoded.error))

        for queue, selected in ((self.load, to_load), (self.compute, to_compute), (self.store, to_store)):
            m.d.comb += [queue.payload.insn.eq(word), queue.payload.index.eq(index),
                         queue.valid.eq(running & buffer.r_rdy & selected & legal & ~self.halt)]
        target_ready = Mux(to_load, self.load.ready, Mux(to_store, self.store.ready, self.compute.ready))
        go = running & buffer.r_rdy & legal & ~self.halt & target_ready
        m.d.comb += [
            buffer.r_en.eq(go),
            self.dispatched.eq(go),
            self.fault.eq(running & (buffer.r_rdy | bus_failed) & ~legal & ~self.halt & ~all_dispatched),
            self.error.eq(Mux(self.fault, error, 0)),
            self.index.eq(index), self.last_index.eq(last_index),
            self.done.eq(running & all_dispatched),
            self.busy.eq(reader.busy | (arriving != 0)),
            self.stalled.eq(running & buffer.r_rdy & legal & ~target_ready & (arriving == 0) & ~reader.busy),
        ]
        with m.If(go):
            m.d.sync += [index.eq(index + 1), all_dispatched.eq(index == last_index)]
        with m.If(self.fault):
            m.d.sync += running.eq(0)
        with m.If(self.start):
            # (a count too wide for the index is beyond the bus: it saturates, never reads as 0)
            narrow = Mux(self.count[index_bits:].any(), (1 << index_bits) - 1, self.count)
            m.d.sync += [next_addr.eq(self.addr), remaining.eq(narrow), arriving.eq(0),
                         index.eq(0), running.eq(1), all_dispatched.eq(narrow == 0), last_index.eq(narrow - 1),
                         bad_address.eq(bad_start)]
        return m
