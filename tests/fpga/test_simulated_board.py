"""The simulated board end to end: the Verilated SoC (bridge, UART, on-chip memory, accelerator)
on a pseudo-terminal, driven through pyserial by the ``fpga`` backend. Results are compared with
fsim (the independent reference for every run) and with the bytes the test wrote."""

import os
import struct
import time

import numpy as np
import pytest

import tilewright
from tilewright import PRESETS
from tilewright.cli import main
from tilewright.fpga import protocol
from tilewright.fpga.boards import get_board
from tilewright.fpga.device import FpgaDevice
from tilewright.fpga.link import Link, LinkError
from tilewright.fpga.simulated import SimulatedBoard
from tilewright.runtime.device import DeviceError

TINY = PRESETS["tiny"]
MEM_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def board():
    """The ECP5 boards' memory layout (register slices, registered RAM inputs); the Tang Nano test below
    runs the small boards' plain one."""
    with SimulatedBoard(TINY, mem_bytes=MEM_BYTES, clock_hz=24_000_000,
                        mem_options=get_board("ulx3s-85f").memory_options) as b:
        yield b


@pytest.fixture(scope="module")
def link(board):
    with Link(board.port, timeout=10) as lk:
        yield lk


def test_info_and_fingerprint_register(link):
    from tilewright.hw.regs import REGISTERS
    info = link.info()
    assert (info.version, info.fingerprint, info.mem_bytes, info.clock_hz) == \
        (protocol.VERSION, TINY.fingerprint, MEM_BYTES, 24_000_000)
    offset = next(r.offset for r in REGISTERS if r.name == "fingerprint")
    assert link.read_register(offset) == int(TINY.fingerprint[:8], 16)


def test_memory_round_trip_across_chunks(link):
    data = os.urandom(5000)            # more than one frame
    link.write_memory(1001, data)      # unaligned start and length
    assert link.read_memory(1001, len(data)) == data
    assert link.read_memory(1000, 1) != b"" and link.read_memory(1001 + len(data) - 3, 3) == data[-3:]


def test_bad_crc_is_refused_and_the_link_recovers(link):
    frame = bytearray(protocol.request(protocol.Command.REG_READ, b"\x14"))
    frame[-1] ^= 0xFF
    link.serial.write(frame)
    head = link.serial.read(4)
    assert head[0] == protocol.REPLY_SYNC and head[1] == protocol.Status.BAD_CRC
    link.serial.read(2 + int.from_bytes(head[2:4], "little"))
    assert link.info().fingerprint == TINY.fingerprint


def test_memory_beyond_the_board_is_refused(link):
    with pytest.raises(LinkError, match="BAD_ADDRESS"):
        link.read_memory(MEM_BYTES - 2, 4)
    with pytest.raises(LinkError, match="BAD_ADDRESS"):
        link.write_memory(MEM_BYTES - 1, b"ab")
    # Far beyond it: addresses whose low bits (all the bridge's sums see) lie inside the memory, at bytes
    # 0 and 16, which the refused writes must leave alone.
    link.write_memory(0, b"keep" * 5)
    for far in (MEM_BYTES, 1 << 31, (1 << 32) - MEM_BYTES + 16):
        with pytest.raises(LinkError, match="BAD_ADDRESS"):
            link.read_memory(far, 4)
        with pytest.raises(LinkError, match="BAD_ADDRESS"):
            link.write_memory(far, b"abcd")
    assert link.read_memory(0, 20) == b"keep" * 5
    link.write_memory(MEM_BYTES - 4, b"edge")           # (the last bytes are still the memory's)
    assert link.read_memory(MEM_BYTES - 4, 4) == b"edge"


def test_an_abandoned_request_is_dropped(link):
    link.serial.write(protocol.request(protocol.Command.MEM_WRITE, struct.pack("<I", 0) + b"xyz")[:6])
    time.sleep(4)        # longer than IDLE_TIMEOUT_BITS bit times of the simulated UART
    assert link.info().fingerprint == TINY.fingerprint


def test_unknown_command_and_wrong_length(link):
    with pytest.raises(LinkError, match="BAD_COMMAND"):
        link.call(0x7E)
    with pytest.raises(LinkError, match="BAD_COMMAND"):
        link.call(protocol.Command.REG_READ, b"\x00\x01")


def test_conv2d_and_dense_equal_fsim(board):
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 6, 5, 5), dtype=np.int8)
    w = rng.integers(-128, 128, (5, 6, 3, 3), dtype=np.int8)
    b = rng.integers(-2000, 2000, 5, dtype=np.int32)
    kwargs = dict(padding=1, mul=5, shift=11, relu=False, config=TINY)
    expected, _ = tilewright.conv2d(x, w, b, **kwargs)
    got, stats = tilewright.conv2d(x, w, b, **kwargs, backend="fpga", port=board.port)
    np.testing.assert_array_equal(got, expected)
    assert stats["cycles"] > 0 and stats["gemm_uops"] > 0 and stats["counters"]["insns_store"] > 0

    d = rng.integers(-128, 128, (3, 20), dtype=np.int8)
    dw = rng.integers(-128, 128, (7, 20), dtype=np.int8)
    expected, _ = tilewright.dense(d, dw, mul=3, shift=9, relu=True, config=TINY)
    got, _ = tilewright.dense(d, dw, mul=3, shift=9, relu=True, config=TINY, backend="fpga", port=board.port)
    np.testing.assert_array_equal(got, expected)


def _digits_over_the_link(cfg, port):
    """The digits CNN compiled for ``cfg`` and run on one test image over ``port``: equal to fsim, with the
    accelerator's cycle counts read over the link. Returns the model and its profile's rows."""
    from tilewright.compiler.graph import load_onnx
    from tilewright.examples.digits.demo import MODEL_PATH, load_split
    from tilewright.runtime.model import compile_model
    x_train, _, x_test, _ = load_split()
    model = compile_model(load_onnx(MODEL_PATH), cfg, calibration=x_train[:50], log=lambda *a: None)
    image = x_test[:1]
    expected = model.run(image, backend="fsim")
    got, rows = model.run(image, backend="fpga", port=port, profile=True)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name])
    accelerated = [r for r in rows if r["where"] == "accelerator"]
    assert accelerated and all(r["cycles"] > 0 for r in accelerated)
    return model, image, rows


def test_digits_model_equals_fsim_with_counters_over_the_link(board):
    _digits_over_the_link(TINY, board.port)


@pytest.mark.parametrize("board_name", ["tangnano9k", "icebreaker"])
def test_the_small_boards_presets_run_the_digits_model_in_their_own_memory(board_name):
    """The small boards as built: the Tang Nano 9K's preset (1×1×1, no requantizing STORE) in its 32 KiB of
    memory, the iCEBreaker's (``tiny_serial``: the serial core, one instruction per stream) in its 64 KiB.
    The RTL harness, its DRAM answering as the board's memory does (``Board.dram_timing``: one burst at a
    time), counts the cycles the SoC's accelerator counts with the real memory, layer by layer: the
    co-design search's cycles for these boards."""
    board = get_board(board_name)
    cfg = PRESETS[board.config]
    rng = np.random.default_rng(7)
    layers = [(tilewright.conv2d, rng.integers(-128, 128, (1, 5, 7, 7), dtype=np.int8),
               rng.integers(-128, 128, (3, 5, 3, 3), dtype=np.int8), dict(stride=2, padding=1, mul=3, shift=9)),
              (tilewright.dense, rng.integers(-128, 128, (1, 3), dtype=np.int8),
               rng.integers(-128, 128, (5, 3), dtype=np.int8), dict(mul=5, shift=6, relu=True))]
    with SimulatedBoard(cfg, mem_bytes=board.mem_bytes, clock_hz=board.freq_mhz * 1_000_000) as b:
        model, image, on_board = _digits_over_the_link(cfg, b.port)
        layer_cycles = [op(x, w, **kw, config=cfg, backend="fpga", port=b.port)[1]["cycles"] for op, x, w, kw in layers]
    _, in_harness = model.run(image, backend="rtl", profile=True, memory=board.dram_timing())
    assert [r["cycles"] for r in in_harness] == [r["cycles"] for r in on_board]
    assert [op(x, w, **kw, config=cfg, backend="rtl", memory=board.dram_timing())[1]["cycles"]
            for op, x, w, kw in layers] == layer_cycles


def test_another_configs_program_is_refused(board):
    with pytest.raises(DeviceError, match="runs a bitstream for config fingerprint"):
        FpgaDevice(PRESETS["small"], port=board.port)


def test_a_model_larger_than_board_memory_is_one_line(board):
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 64, 32, 32), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    with pytest.raises(DeviceError, match=r"memory is too small: \d+ more bytes needed, \d+ of 65536 free"):
        tilewright.conv2d(x, w, padding=1, config=TINY, backend="fpga", port=board.port)


def test_a_silent_port_times_out():
    master, slave = os.openpty()
    try:
        with Link(os.ttyname(slave), timeout=0.5) as lk:
            with pytest.raises(LinkError, match="no answer within 0.5 s"):
                lk.info()
    finally:
        os.close(master)
        os.close(slave)


def test_fpga_backend_needs_a_port():
    with pytest.raises(DeviceError, match="needs port="):
        tilewright.dense(np.zeros((1, 4), np.int8), np.zeros((4, 4), np.int8), config=TINY, backend="fpga")


def test_check_reports_the_board_and_its_memory(board, capsys):
    assert main(["fpga", "check", "--port", board.port, "--bytes", "3000"]) == 0
    out = capsys.readouterr().out
    assert f"config fingerprint {TINY.fingerprint}" in out and f"{MEM_BYTES} bytes of memory" in out
    assert "3000 bytes written and read back intact" in out


def test_link_test_soc_answers_and_refuses_programs(capsys):
    """The SoC without the accelerator (``fpga build --link-test``): INFO names it, its memory works, and
    the ``fpga`` backend refuses to run programs on it."""
    with SimulatedBoard(None, mem_bytes=MEM_BYTES, clock_hz=24_000_000) as link_test:
        assert main(["fpga", "check", "--port", link_test.port, "--bytes", "2000"]) == 0
        out = capsys.readouterr().out
        assert "the link test (no accelerator)" in out and "2000 bytes written and read back intact" in out
        with pytest.raises(DeviceError, match="runs the link-test bitstream"):
            FpgaDevice(TINY, port=link_test.port)


def test_check_on_a_silent_port_is_one_line(capsys):
    master, slave = os.openpty()
    try:
        assert main(["fpga", "check", "--port", os.ttyname(slave), "--timeout", "0.5"]) == 1
    finally:
        os.close(master)
        os.close(slave)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no answer within 0.5 s" in err
    assert main(["fpga", "check", "--port", "/dev/null", "--bytes", "-5"]) == 1
    assert "positive numbers" in capsys.readouterr().err
