"""Simulated DRAM allocator and accessors."""

import numpy as np
import pytest

from tilewright.sim import Dram, DramError


def test_alloc_aligns_reuses_and_coalesces():
    d = Dram(4096)
    a = d.alloc(100, align=64)
    b = d.alloc(256, align=256)
    assert a % 64 == 0 and b % 256 == 0 and b >= a + 100
    d.free(a)
    c = d.alloc(64)
    assert c == a                                 # first fit reuses the hole
    d.free(c)
    d.free(b)
    assert d.alloc(4096, align=1) == 0            # everything merged back


def test_errors():
    d = Dram(1024)
    with pytest.raises(DramError, match="out of DRAM: 2048 bytes requested"):
        d.alloc(2048)
    with pytest.raises(DramError, match="free of 0x10"):
        d.free(16)
    with pytest.raises(DramError, match="outside DRAM"):
        d.write(1000, bytes(100))
    with pytest.raises(DramError, match="cannot allocate 0 bytes"):
        d.alloc(0)


def test_read_write_arrays_little_endian():
    d = Dram(256)
    d.write(8, np.array([1, -2], dtype=">i4"))    # big-endian input is stored little-endian
    assert d.read(8, 8).tobytes() == b"\x01\x00\x00\x00\xfe\xff\xff\xff"
    assert d.read_array(8, np.int32, (2,)).tolist() == [1, -2]
