"""The host side of the board link: :mod:`~tilewright.fpga.protocol` frames over pyserial."""

import struct
import time

from tilewright.runtime.device import DeviceError

from . import protocol
from .protocol import Command, Status

__all__ = ["Link", "LinkError", "BoardInfo", "CHUNK"]

#: Bytes per MEM_WRITE / MEM_READ frame.
CHUNK = 4096


class LinkError(DeviceError):
    """The board did not answer, answered garbage, or refused a request."""


class BoardInfo:
    """What INFO reports: protocol version, config fingerprint, memory size and clock."""

    def __init__(self, payload):
        version, _, fingerprint, self.mem_bytes, self.clock_hz = struct.unpack(protocol.INFO_FORMAT, payload)
        self.version, self.fingerprint = version, fingerprint.hex()

    def __repr__(self):
        return (f"BoardInfo(version={self.version}, fingerprint={self.fingerprint}, mem_bytes={self.mem_bytes}, "
                f"clock_hz={self.clock_hz})")


class Link:
    """One serial port to a board (or the simulated board).

    Parameters
    ----------
    port : str
        Serial device (``/dev/ttyUSB0``, a pseudo-terminal of ``tilewright fpga simulate``, ...).
    baud : int
    timeout : float
        Seconds to wait for a reply byte before giving up.
    retries : int
        Times a request refused for a bad CRC is sent again.
    """

    def __init__(self, port, *, baud=protocol.DEFAULT_BAUD, timeout=5.0, retries=2):
        import serial
        try:
            self.serial = serial.Serial(port, baudrate=baud, timeout=timeout)
        except (serial.SerialException, OSError) as e:
            raise LinkError(f"cannot open {port}: {e}") from None
        self.port, self.timeout, self.retries = port, timeout, retries

    def close(self):
        self.serial.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- frames -----------------------------------------------------------------------------

    def _read(self, n):
        data = self.serial.read(n)
        if len(data) != n:
            raise LinkError(f"{self.port}: no answer within {self.timeout:g} s (is a board with the Tilewright "
                            f"SoC on this port?)")
        return data

    def call(self, command, payload=b""):
        """Send one request and return the reply's payload; raises :class:`LinkError` on any failure."""
        frame = protocol.request(command, payload)
        what = Command(command).name if command in Command._value2member_map_ else f"command {command:#04x}"
        for attempt in range(self.retries + 1):
            self.serial.reset_input_buffer()
            self.serial.write(frame)
            sync = self._read(1)
            while sync[0] != protocol.REPLY_SYNC:        # skip noise before the reply
                sync = self._read(1)
            head = self._read(3)
            status, length = head[0], int.from_bytes(head[1:], "little")
            body = self._read(length)
            crc = int.from_bytes(self._read(2), "little")
            if crc != protocol.crc16(head + body):
                raise LinkError(f"{self.port}: the reply to {what} failed its CRC")
            if status == Status.BAD_CRC and attempt < self.retries:
                continue
            if status != Status.OK:
                name = Status(status).name if status in Status._value2member_map_ else str(status)
                raise LinkError(f"{self.port}: the board refused {what}: {name}")
            return body
        raise AssertionError("unreachable")

    # -- requests ---------------------------------------------------------------------------

    def info(self):
        return BoardInfo(self.call(Command.INFO))

    def read_register(self, offset):
        return int.from_bytes(self.call(Command.REG_READ, bytes([offset])), "little")

    def write_register(self, offset, value):
        self.call(Command.REG_WRITE, bytes([offset]) + struct.pack("<I", value & 0xFFFFFFFF))

    def write_memory(self, addr, data, *, progress=None):
        data = bytes(data)
        for start in range(0, len(data), CHUNK):
            chunk = data[start:start + CHUNK]
            self.call(Command.MEM_WRITE, struct.pack("<I", addr + start) + chunk)
            if progress:
                progress(len(chunk))

    def read_memory(self, addr, nbytes, *, progress=None):
        out = bytearray()
        while len(out) < nbytes:
            n = min(CHUNK, nbytes - len(out))
            out += self.call(Command.MEM_READ, struct.pack("<IH", addr + len(out), n))
            if progress:
                progress(n)
        return bytes(out)

    def wait(self, condition, *, timeout, poll=0.01):
        """Call ``condition()`` until it is true; raises :class:`LinkError` after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise LinkError(f"{self.port}: the board did not finish within {timeout:g} s")
            time.sleep(poll)
