"""The host bridge: :mod:`~tilewright.fpga.protocol` frames from a byte stream to the register bus and memory.

It receives a request byte by byte (a MEM_WRITE's data goes to memory as
it arrives), checks the CRC, executes the request on the accelerator's
AXI4-Lite registers or the on-chip memory, and sends the reply.
"""

import struct

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from tilewright.hw.axi import AxiLiteSignature
from tilewright.hw.regs import ADDR_WIDTH

from . import protocol
from .protocol import Command, Status

__all__ = ["HostBridge", "HostPortSignature", "crc16_next"]


class HostPortSignature(wiring.Signature):
    """A byte-wide memory port for the host (from the requester's side).

    Members
    -------
    valid, ready : one request (a write of ``wdata`` or a read) at byte ``addr``
    rvalid, rdata : the byte a read returns, one or more cycles after it was accepted
    """

    def __init__(self):
        super().__init__({"addr": Out(32), "write": Out(1), "wdata": Out(8), "valid": Out(1), "ready": In(1),
                          "rdata": In(8), "rvalid": In(1)})


def _crc_terms():
    """For each bit of the next CRC, the bits of (crc, byte) it is the XOR of: ("c", k) or ("d", k)."""
    crc = [{("c", k)} for k in range(16)]
    for k in range(7, -1, -1):                  # the bit-serial algorithm, MSB first, on sets of terms
        feedback = crc[15] ^ {("d", k)}
        crc = [feedback] + crc[:15]
        crc = [bit ^ feedback if (protocol.CRC_POLY >> n) & 1 and n else bit for n, bit in enumerate(crc)]
    return crc


def crc16_next(crc, byte):
    """The protocol's CRC after one more byte, as an Amaranth expression (one XOR per term)."""
    bits = []
    for terms in _crc_terms():
        value = Const(0, 1)
        for kind, k in sorted(terms):
            value = value ^ (crc[k] if kind == "c" else byte[k])
        bits.append(value)
    return Cat(*bits)


class HostBridge(wiring.Component):
    """Executes host requests.

    Parameters
    ----------
    fingerprint : str
        The accelerator config's fingerprint (16 hex digits), reported by INFO.
    mem_bytes : int
        Size of the on-chip memory; accesses beyond it are refused.
    clock_hz : int
        The clock this build runs at, reported by INFO.
    idle_timeout : int
        Cycles of silence after which a half-received request is dropped.

    Members
    -------
    rx : In(stream.Signature(8)), tx : Out(stream.Signature(8))
        The UART's bytes.
    regs : Out(AxiLiteSignature)
        The accelerator's register bus.
    mem : Out(HostPortSignature)
    run_busy : In(1)
        A run is in progress: memory requests are refused.
    idle : Out(1)
        Waiting for a request.
    """

    def __init__(self, *, fingerprint, mem_bytes, clock_hz, idle_timeout):
        self.info = struct.pack(protocol.INFO_FORMAT, protocol.VERSION, 0, bytes.fromhex(fingerprint),
                                mem_bytes, int(clock_hz))
        self.mem_bytes, self.idle_timeout = mem_bytes, idle_timeout
        # (the address in the header's 32 bits moves on in place; a reply byte is chosen by 5 bits of its count)
        assert mem_bytes < 1 << 32 and len(self.info) < 32
        super().__init__({"rx": In(stream.Signature(8)), "tx": Out(stream.Signature(8)),
                          "regs": Out(AxiLiteSignature(addr_width=ADDR_WIDTH)), "mem": Out(HostPortSignature()),
                          "run_busy": In(1), "idle": Out(1)})

    def elaborate(self, platform):
        m = Module()
        rx, tx, regs, mem = self.rx, self.tx, self.regs, self.mem
        crc = Signal(16, init=protocol.CRC_INIT)
        command = Signal(8)
        # The request's payload bytes still to come, then (loaded by the reply) the reply's still to send:
        # one counter, no sums with an index to compare.
        length = Signal(16)
        index = Signal(range(7))        # payload bytes received, up to the header's six
        header = Signal(48)             # the first six payload bytes (address, count / offset, value)
        refused = Signal(8)             # a Status decided while receiving (0: none)
        status = Signal(8)
        out_byte = Signal(8)            # the memory byte being sent
        silence = Signal(range(self.idle_timeout + 1))
        write_pending = Signal()        # a MEM_WRITE byte (`rx_byte`) waiting for the memory port
        rx_byte = Signal(8)             # the last byte the UART offered
        # Addresses inside the memory take `reach` bits: the range's sum below is that wide, not 32 bits, and
        # an address with a bit set above them (`far`, a register like the sum) is beyond the memory. No
        # access is made before its range is checked, so the memory port's address needs no more.
        reach = self.mem_bytes.bit_length()
        restart = Signal()              # a byte was taken, or no request was open, last cycle
        timed_out = (silence == self.idle_timeout) & ~restart

        address = header[:32]
        # The memory port's address: the request's, moved on a byte after each access (in place: no
        # adder of an index, no copy for writes). It stays inside `reach` bits, as the range is checked first.
        near = address[:reach]
        reg_offset = header[:8]
        count = header[32:48]
        # A reply's payload byte by the bytes still to send (`length`, n down to 1): INFO's backwards, and
        # R's four (4 to 1, in two bits 0, 3, 2, 1) in that order.
        info_from_end = Const(int.from_bytes(bytes(1) + self.info[::-1], "little"), 8 * (len(self.info) + 1))
        rdata_bytes = [regs.rdata.word_select(k, 8) for k in range(4)]
        rdata_from_end = Cat(rdata_bytes[0], rdata_bytes[3], rdata_bytes[2], rdata_bytes[1])
        byte = rx.payload
        take = rx.valid & rx.ready

        m.d.comb += [mem.valid.eq(write_pending), mem.write.eq(write_pending), mem.wdata.eq(rx_byte),
                     mem.addr.eq(near), regs.wstrb.eq(0xF),
                     regs.awaddr.eq(reg_offset), regs.araddr.eq(reg_offset), regs.wdata.eq(header[8:40])]
        with m.If(mem.valid & mem.ready & mem.write):
            m.d.sync += write_pending.eq(0)
        # The address moves on a cycle after an access is accepted, from a register (the memory's ready
        # stays off the address's enables): a read's next access comes cycles later, a write's once the
        # next byte is received. (A MEM_WRITE's byte goes to memory from `rx_byte`, which holds it until
        # the UART offers the next.) So the memory must take a written byte at least a cycle before the
        # next one is received: the on-chip memory serves the host within cycles, and bytes come 10 bit
        # times apart (hundreds of cycles at the boards' clocks and baud rates).
        stepped = Signal()
        m.d.sync += stepped.eq(mem.valid & mem.ready)

        # A byte sent or received enters the CRC a cycle later, from a register (what is sent is chosen by
        # a multiplexer, and a byte taken depends on the state: on the 85F at 100 MHz the state reached
        # the CRC through the byte's, 11.1 ns); the next byte sent waits for it. A byte received is kept
        # whatever the state, as it is offered (`rx_byte`: the state had reached its enables, 10.9 ns); a
        # byte sent is still in `tx_byte` then (a state loads it again with the same byte until it is
        # taken). (Received bytes come at least 2 cycles apart, as the UART receiver gives them, 10 bit
        # times: `rx_byte` and the payload's flags below rely on it.)
        crc_due, crc_of_rx = (Signal(name=n) for n in ("crc_due", "crc_of_rx"))
        # A frame (a request's sync byte taken, or a reply begun) restarts the CRC and clears the index a
        # cycle later, from a register (the state, the byte's compare and EXECUTE's checks reached the
        # CRC's inputs and the index's enables: 10.4-10.9 ns on the 85F at 100 MHz). Neither is read
        # before the frame's next byte, taken cycles later (the index: not before the payload).
        frame_start = Signal()
        m.d.sync += frame_start.eq(0)
        with m.If(rx.valid):
            m.d.sync += rx_byte.eq(byte)

        # A payload byte enters the header a cycle after it is taken, from `rx_byte` (on the 85F at 100 MHz
        # the state and the byte taken reached the header's enables, 10.3 ns).
        header_due = Signal()
        header_slot = Signal(3)
        m.d.sync += header_due.eq(0)
        with m.If(header_due):
            m.d.sync += header.word_select(header_slot, 8).eq(rx_byte)
        with m.If(stepped):                 # (never as the header's address is loaded)
            m.d.sync += near.eq(near + 1)

        def received(next_state, *, checked=True):
            """Take a byte (into the CRC unless it is the CRC) and go on."""
            m.d.comb += rx.ready.eq(1)
            with m.If(take):
                if checked:
                    m.d.sync += [crc_due.eq(1), crc_of_rx.eq(1)]
                m.next = next_state
            with m.Elif(timed_out):
                m.next = "SYNC"

        # A byte is offered from a register, loaded in the state's first cycle and offered from the second
        # (`prepared`: the state offered last cycle and was not taken, so the byte is current): the choice of
        # the byte by state and index reached the UART's buffer through 10.5-10.8 ns on the 85F at 100 MHz.
        # A byte into the CRC waits a cycle for it anyway; the others (sync, CRC) take a cycle more.
        tx_byte = Signal(8)
        offering, prepared = Signal(), Signal()
        taken = tx.ready & tx.valid
        m.d.comb += [tx.valid.eq(prepared & ~crc_due), tx.payload.eq(tx_byte)]
        m.d.sync += prepared.eq(offering & ~taken)
        with m.If(crc_due):
            m.d.sync += [crc.eq(crc16_next(crc, Mux(crc_of_rx, rx_byte, tx_byte))), crc_due.eq(0)]
        with m.If(frame_start):
            m.d.sync += [crc.eq(protocol.CRC_INIT), index.eq(0)]

        def send(value, next_state, *, checked=True):
            """Offer ``value`` to the UART and go on when it is taken; returns whether it is taken."""
            m.d.comb += offering.eq(1)
            m.d.sync += tx_byte.eq(value)
            with m.If(taken):
                if checked:
                    m.d.sync += [crc_due.eq(1), crc_of_rx.eq(0)]
                m.next = next_state
            return taken

        # Whether the reply's payload is all sent (`length == 0`), kept beside it: the compare lay on the
        # path into the state's and the count's enables.
        reply_end = Signal()

        def reply(code, reply_length=0):
            m.d.sync += [status.eq(code), length.eq(reply_length), frame_start.eq(1),
                         reply_end.eq(Value.cast(reply_length) == 0)]
            m.next = "TX_SYNC"

        def sent_payload_byte():
            m.d.sync += [length.eq(length - 1), reply_end.eq(length == 1)]

        # What EXECUTE decides on, from registers: the request is complete a cycle (CHECK) before. Whether
        # the payload's length suits the command is found a cycle after the length is in (`length_due`),
        # before the first payload byte counts it down.
        crc_ok, length_ok, length_due = Signal(), Signal(), Signal()
        m.d.sync += length_due.eq(0)
        with m.If(length_due):
            with m.Switch(command):
                for cmd, expected in protocol.PAYLOAD_LENGTHS.items():
                    with m.Case(cmd):
                        m.d.sync += length_ok.eq(length >= 4 if expected is None else length == expected)
                with m.Default():
                    m.d.sync += length_ok.eq(0)

        receiving = Signal()
        # Where the payload stands, as flags registered every cycle: the index and the length move only as
        # a byte is taken (or in states between bytes), and bytes come 10 bit times apart at least (the
        # compares and the sum reached the state and the index's enables: 10.9 ns on the 85F at 100 MHz).
        flags = ("in_header", "header_complete", "past_header", "last_payload", "at_length", "writing_mem",
                 "reading_mem")
        in_header, header_complete, past_header, last_payload, at_length, writing_mem, reading_mem = (
            Signal(name=n) for n in flags)
        m.d.sync += [in_header.eq(index < 6), header_complete.eq(index == 3), past_header.eq(index >= 4),
                     last_payload.eq(length == 1), at_length.eq(length == 0),
                     writing_mem.eq(command == Command.MEM_WRITE), reading_mem.eq(command == Command.MEM_READ)]
        # Whether the access would leave the memory: a MEM_WRITE's `length` data bytes (what is left once
        # its address is in) or a MEM_READ's `count` from `address`, through one sum (its operand chosen by
        # a register), in two register steps (the sum and the compare in one reached `beyond`: 11.8-12.1 ns
        # on the 85F at 100 MHz, with a subtraction before a MEM_WRITE's sum then). Both are
        # current when read: a MEM_WRITE's in WRITE_RANGE, a MEM_READ's by EXECUTE (CRC0, CRC1 and CHECK
        # come after the header's last byte).
        end = Signal.like(near + length)
        far, beyond = Signal(), Signal()
        m.d.sync += [end.eq(near + Mux(writing_mem, length, count)), far.eq(address[reach:].any()),
                     beyond.eq(far | (end > self.mem_bytes))]
        with m.FSM() as fsm:
            with m.State("SYNC"):
                m.d.comb += rx.ready.eq(1)
                with m.If(take & (byte == protocol.REQUEST_SYNC)):
                    m.d.sync += [frame_start.eq(1), refused.eq(0)]
                    m.next = "COMMAND"
            with m.State("COMMAND"):
                m.d.comb += receiving.eq(1)
                received("LENGTH0")
                with m.If(take):
                    m.d.sync += command.eq(byte)
            with m.State("LENGTH0"):
                m.d.comb += receiving.eq(1)
                received("LENGTH1")
                with m.If(take):
                    m.d.sync += length[:8].eq(byte)
            with m.State("LENGTH1"):
                m.d.comb += receiving.eq(1)
                received("PAYLOAD")
                with m.If(take):
                    m.d.sync += [length[8:].eq(byte), length_due.eq(1)]
                    with m.If(Cat(length[:8], byte) == 0):
                        m.next = "CRC0"
            with m.State("PAYLOAD"):
                m.d.comb += receiving.eq(1)
                received("PAYLOAD")
                with m.If(take):
                    m.d.sync += length.eq(length - 1)
                    with m.If(in_header):
                        m.d.sync += [index.eq(index + 1), header_due.eq(1), header_slot.eq(index)]
                    with m.If(last_payload):
                        m.next = "CRC0"
                    with m.If(writing_mem):
                        with m.If(header_complete):
                            m.next = "WRITE_HEADER"
                        with m.If(past_header & (refused == 0)):
                            m.d.sync += write_pending.eq(1)
            # A MEM_WRITE's address is complete: refuse the whole write now if it cannot be done, in
            # states taking no byte (the sum and compare, at the byte's arrival, reached the refusal's
            # enable: 11.4 ns on the 85F at 100 MHz; then from registers, through the state, 10.7 ns).
            with m.State("WRITE_HEADER"):          # (the address's last byte enters the header)
                m.d.comb += receiving.eq(1)
                m.next = "WRITE_ADDRESS"
            with m.State("WRITE_ADDRESS"):         # (`end` sums the whole address next cycle)
                m.d.comb += receiving.eq(1)
                m.next = "WRITE_END"
            with m.State("WRITE_END"):             # (and `beyond` compares it the cycle after)
                m.d.comb += receiving.eq(1)
                m.next = "WRITE_RANGE"
            with m.State("WRITE_RANGE"):
                m.d.comb += receiving.eq(1)
                with m.If(self.run_busy):
                    m.d.sync += refused.eq(Status.BUSY)
                with m.Elif(beyond):
                    m.d.sync += refused.eq(Status.BAD_ADDRESS)
                with m.If(at_length):
                    m.next = "CRC0"
                with m.Else():
                    m.next = "PAYLOAD"
            with m.State("CRC0"):
                m.d.comb += receiving.eq(1)
                received("CRC1", checked=False)
                with m.If(take):        # (the CRC took the last payload byte cycles ago: bytes come 10 bits apart)
                    m.d.sync += crc_ok.eq(byte == crc[:8])
            with m.State("CRC1"):
                m.d.comb += receiving.eq(1)
                received("CHECK", checked=False)
                with m.If(take):
                    m.d.sync += crc_ok.eq(crc_ok & (byte == crc[8:]))
            with m.State("CHECK"):                      # (the checks below are registered: a cycle to settle)
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                with m.If(write_pending):
                    pass                                # the last data byte is still going to memory
                with m.Elif(~crc_ok):
                    reply(Status.BAD_CRC)
                with m.Elif(~length_ok):
                    reply(Status.BAD_COMMAND)
                with m.Elif(refused != 0):
                    reply(refused)
                with m.Elif(command == Command.INFO):
                    reply(Status.OK, len(self.info))
                with m.Elif(command == Command.REG_READ):
                    m.next = "REG_READ"
                with m.Elif(command == Command.REG_WRITE):
                    m.next = "REG_WRITE"
                with m.Elif(command == Command.MEM_WRITE):
                    reply(Status.OK)
                with m.Else():                          # MEM_READ
                    with m.If(self.run_busy):
                        reply(Status.BUSY)
                    with m.Elif(beyond):
                        reply(Status.BAD_ADDRESS)
                    with m.Else():
                        reply(Status.OK, count)
            # -- the register bus ---------------------------------------------------------
            with m.State("REG_READ"):
                m.d.comb += regs.arvalid.eq(1)
                with m.If(regs.arready):
                    m.next = "REG_READ_DATA"
            with m.State("REG_READ_DATA"):
                # The answer stays on R, not taken, until the reply has sent it (AXI holds it): no copy.
                with m.If(regs.rvalid):
                    reply(Status.OK, 4)
            with m.State("REG_WRITE"):
                # The register file takes AW and W together.
                m.d.comb += [regs.awvalid.eq(1), regs.wvalid.eq(1)]
                with m.If(regs.awready & regs.wready):
                    m.next = "REG_WRITE_RESPONSE"
            with m.State("REG_WRITE_RESPONSE"):
                m.d.comb += regs.bready.eq(1)
                with m.If(regs.bvalid):
                    reply(Status.OK)
            # -- the reply ------------------------------------------------------------------
            with m.State("TX_SYNC"):
                send(protocol.REPLY_SYNC, "TX_STATUS", checked=False)
            with m.State("TX_STATUS"):
                send(status, "TX_LENGTH0")
            with m.State("TX_LENGTH0"):
                send(length[:8], "TX_LENGTH1")
            with m.State("TX_LENGTH1"):
                send(length[8:], "TX_PAYLOAD")
            with m.State("TX_PAYLOAD"):
                with m.If(reply_end):
                    m.next = "TX_CRC0"
                with m.Elif(reading_mem):
                    m.d.comb += mem.valid.eq(1)
                    with m.If(mem.ready):
                        m.next = "TX_MEMORY"
                with m.Else():
                    source = Mux(command == Command.INFO, info_from_end.word_select(length[:5], 8),
                                 rdata_from_end.word_select(length[:2], 8))
                    with m.If(send(source, "TX_PAYLOAD")):
                        sent_payload_byte()
            with m.State("TX_MEMORY"):
                with m.If(mem.rvalid):
                    m.d.sync += out_byte.eq(mem.rdata)
                    m.next = "TX_MEMORY_BYTE"
            with m.State("TX_MEMORY_BYTE"):
                with m.If(send(out_byte, "TX_PAYLOAD")):
                    sent_payload_byte()
            with m.State("TX_CRC0"):
                m.d.comb += regs.rready.eq(1)       # (a REG_READ's answer is sent: R may take it)
                send(crc[:8], "TX_CRC1", checked=False)
            with m.State("TX_CRC1"):
                send(crc[8:], "SYNC", checked=False)
            m.d.comb += self.idle.eq(fsm.ongoing("SYNC") & ~write_pending)

        # A request the host stopped sending is dropped after `idle_timeout` cycles of silence. The count
        # restarts a cycle after a byte, from a register (the state reached the count's reset through the
        # byte's ready: 12.4 ns on the 85F at 100 MHz), so the timeout comes a cycle later.
        m.d.sync += restart.eq(~receiving | take)
        with m.If(restart | timed_out):
            m.d.sync += silence.eq(0)
        with m.Else():
            m.d.sync += silence.eq(silence + 1)
        return m
