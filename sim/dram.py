"""Simulated DRAM: a byte array with a first-fit allocator."""

import numpy as np

__all__ = ["Dram", "DramError"]


class DramError(ValueError):
    """Out of memory, a bad free, or an access outside the array."""


class Dram:
    """``size`` bytes of zero-initialised memory with ``alloc``/``free``.

    Addresses are byte offsets from 0. The backing array is allocated lazily
    by the OS (``np.zeros``), so a large ``size`` costs nothing until touched.
    """

    def __init__(self, size=256 << 20):
        self.size = size
        self.data = np.zeros(size, dtype=np.uint8)
        self._free = [(0, size)]    # sorted, coalesced (start, length)
        self._allocs = {}           # start -> length

    def alloc(self, nbytes, align=64):
        """Start address of a new block of ``nbytes`` aligned to ``align`` bytes."""
        if nbytes <= 0 or align <= 0:
            raise DramError(f"cannot allocate {nbytes} bytes aligned to {align}")
        for k, (start, length) in enumerate(self._free):
            addr = -(-start // align) * align
            if addr + nbytes <= start + length:
                pieces = [(start, addr - start), (addr + nbytes, start + length - addr - nbytes)]
                self._free[k:k + 1] = [p for p in pieces if p[1] > 0]
                self._allocs[addr] = nbytes
                return addr
        used = sum(self._allocs.values())
        raise DramError(f"out of DRAM: {nbytes} bytes requested, {used} of {self.size} in use")

    @property
    def free_bytes(self):
        """Bytes not allocated (possibly in several pieces)."""
        return self.size - sum(self._allocs.values())

    def free(self, addr):
        if addr not in self._allocs:
            raise DramError(f"free of {addr:#x}, which is not an allocated block")
        self._free.append((addr, self._allocs.pop(addr)))
        self._free.sort()
        merged = []
        for start, length in self._free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + length)
            else:
                merged.append((start, length))
        self._free = merged

    def _check(self, addr, nbytes):
        if addr < 0 or addr + nbytes > self.size:
            raise DramError(f"access [{addr:#x}, {addr + nbytes:#x}) outside DRAM of {self.size:#x} bytes")

    def write(self, addr, data):
        """Copy ``data`` (bytes or any numpy array, taken as raw little-endian bytes) to ``addr``."""
        if isinstance(data, (bytes, bytearray, memoryview)):
            raw = np.frombuffer(data, dtype=np.uint8)
        else:
            arr = np.ascontiguousarray(data)
            raw = arr.astype(arr.dtype.newbyteorder("<"), copy=False).view(np.uint8).ravel()
        self._check(addr, raw.size)
        self.data[addr:addr + raw.size] = raw

    def read(self, addr, nbytes):
        """A copy of ``nbytes`` bytes from ``addr``."""
        self._check(addr, nbytes)
        return self.data[addr:addr + nbytes].copy()

    def read_array(self, addr, dtype, shape):
        """A copy of a little-endian array of ``dtype`` and ``shape`` stored at ``addr``."""
        dtype = np.dtype(dtype).newbyteorder("<")
        count = int(np.prod(shape))
        return self.read(addr, count * dtype.itemsize).view(dtype).reshape(shape)
