"""The host link's framed protocol: one definition for the bridge RTL and the host driver.

Every exchange is one request frame from the host and one reply frame from
the board, each protected by CRC-16/CCITT-FALSE (polynomial 0x1021, initial
value 0xFFFF, no reflection, no final XOR)::

    request:  0xA5  command  length(u16)  payload[length]  crc(u16)
    reply:    0x5A  status   length(u16)  payload[length]  crc(u16)

Multi-byte fields are little-endian. The CRC covers every byte after the
sync byte. Commands (:class:`Command`):

==========  =========================  ====================================
command     request payload            reply payload
==========  =========================  ====================================
INFO        (none)                     :data:`INFO_FORMAT`: protocol version,
                                       config fingerprint, memory bytes,
                                       clock Hz
REG_READ    offset (u8)                value (u32)
REG_WRITE   offset (u8), value (u32)   (none)
MEM_WRITE   address (u32), bytes       (none)
MEM_READ    address (u32), count (u16) ``count`` bytes
==========  =========================  ====================================

Register offsets are those of :data:`tilewright.hw.regs.REGISTERS`; memory
addresses are the accelerator's DRAM addresses (on-chip memory from 0).
A reply's :class:`Status` says why a request was refused: a request whose
CRC fails is not executed (except that a MEM_WRITE may already have
written some of its bytes: the host simply sends it again); memory commands
are refused while a run is busy. A request the board stops hearing for
:data:`IDLE_TIMEOUT_BITS` bit times is dropped, so a host that timed out
can start afresh after waiting that long.
"""

import enum
import struct

__all__ = ["DEFAULT_BAUD", "REQUEST_SYNC", "REPLY_SYNC", "VERSION", "Command", "Status", "INFO_FORMAT", "IDLE_TIMEOUT_BITS",
           "LINK_TEST_FINGERPRINT",
           "CRC_INIT", "CRC_POLY", "crc16", "request", "PAYLOAD_LENGTHS", "MAX_PAYLOAD"]

#: The UART speed boards are built for and hosts open the port at, unless a board says otherwise.
DEFAULT_BAUD = 1_000_000

REQUEST_SYNC = 0xA5
REPLY_SYNC = 0x5A
VERSION = 1

CRC_POLY = 0x1021
CRC_INIT = 0xFFFF

#: Bit times of silence after which the board drops a half-received request.
IDLE_TIMEOUT_BITS = 1 << 16

#: The largest payload a frame carries (its length field is 16 bits).
MAX_PAYLOAD = 0xFFFF

#: INFO's reply payload: version (u8), reserved (u8), fingerprint (8 bytes, big-endian hex digits),
#: memory bytes (u32), clock Hz (u32).
INFO_FORMAT = "<BB8sII"

#: The fingerprint INFO reports from a link-test bitstream (the SoC without the accelerator): no config
#: has it, so the ``fpga`` backend refuses to run programs on one.
LINK_TEST_FINGERPRINT = "00" * 8


class Command(enum.IntEnum):
    INFO = 0x01
    REG_READ = 0x02
    REG_WRITE = 0x03
    MEM_WRITE = 0x04
    MEM_READ = 0x05


class Status(enum.IntEnum):
    OK = 0
    BAD_CRC = 1          # the request's CRC failed; nothing was executed
    BAD_COMMAND = 2      # unknown command, or a payload length the command does not take
    BAD_ADDRESS = 3      # memory access beyond the on-chip memory
    BUSY = 4             # memory access while a run is busy


#: Payload length each command takes; ``None``: at least 4 (MEM_WRITE's address, then its data).
PAYLOAD_LENGTHS = {Command.INFO: 0, Command.REG_READ: 1, Command.REG_WRITE: 5, Command.MEM_WRITE: None,
                   Command.MEM_READ: 6}


def _table():
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ CRC_POLY if crc & 0x8000 else crc << 1) & 0xFFFF
        table.append(crc)
    return table


_TABLE = _table()


def crc16(data, crc=CRC_INIT):
    """CRC-16/CCITT-FALSE of ``data`` (continuing from ``crc``)."""
    for byte in data:
        crc = ((crc << 8) & 0xFFFF) ^ _TABLE[(crc >> 8) ^ byte]
    return crc


def request(command, payload=b""):
    """The bytes of one request frame."""
    body = struct.pack("<BH", command, len(payload)) + bytes(payload)
    return bytes([REQUEST_SYNC]) + body + struct.pack("<H", crc16(body))
