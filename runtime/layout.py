"""Packing tensors into the accelerator's blocked layouts, and back.

Channel and batch counts are padded with zeros up to multiples of the
config's blocks, so any shape can be packed; unpacking crops the padding.

* ``pack_nchw``: NCHW → ``(N/b, C/i, H, W, b, i)``; ``unpack_nchw`` the inverse for outputs
  ``(N/b, C/o, H, W, b, o)``.
* ``pack_oihw``: OIHW → ``(O/o, I/i, KH, KW, o, i)``; ``pack_grouped``: grouped C×k×KH×KW (groups of k
  channels) → ``(C/o, 1, KH, KW, o, o)``, block-diagonal blocks.
* ``pack_rows`` / ``unpack_rows``: N×K → ``(N/b, K/i, b, i)`` (dense data and weights).
* ``pack_bias``: per-channel int32 → ``(O/o, b, o)``, repeated over the batch rows.
"""

import numpy as np

__all__ = ["round_up", "pack_nchw", "unpack_nchw", "pack_oihw", "pack_grouped", "pack_rows", "unpack_rows",
           "pack_bias"]


def round_up(n, block):
    return -(-n // block) * block


def _pad_axes(x, sizes):
    pads = [(0, s - n) for n, s in zip(x.shape, sizes)]
    return np.pad(x, pads) if any(p for _, p in pads) else x


def pack_nchw(x, batch, block):
    """NCHW → (N/batch, C/block, H, W, batch, block), zero-padded."""
    N, C, H, W = x.shape
    x = _pad_axes(x, (round_up(N, batch), round_up(C, block), H, W))
    N2, C2 = x.shape[:2]
    return np.ascontiguousarray(x.reshape(N2 // batch, batch, C2 // block, block, H, W).transpose(0, 2, 4, 5, 1, 3))


def unpack_nchw(y, n, c):
    """(N/b, C/o, H, W, b, o) → NCHW cropped to ``n`` × ``c``."""
    NB, CB, H, W, b, o = y.shape
    return y.transpose(0, 4, 1, 5, 2, 3).reshape(NB * b, CB * o, H, W)[:n, :c]


def pack_oihw(w, block_out, block_in):
    """OIHW → (O/bo, I/bi, KH, KW, bo, bi), zero-padded."""
    O, I, KH, KW = w.shape
    w = _pad_axes(w, (round_up(O, block_out), round_up(I, block_in), KH, KW))
    O2, I2 = w.shape[:2]
    return np.ascontiguousarray(w.reshape(O2 // block_out, block_out, I2 // block_in, block_in, KH, KW)
                                .transpose(0, 2, 4, 5, 1, 3))


def pack_grouped(w, block):
    """Grouped weights C×k×KH×KW (C output channels in groups of ``k`` that each read their own ``k`` input
    channels; depthwise: k = 1) → (C/block, 1, KH, KW, block, block), zero-padded: output channel ``j`` of
    a block takes only the input channels of its group, which lie in the same block (``k`` divides it)."""
    C, k, KH, KW = w.shape
    if block % k or C % k:
        raise ValueError(f"groups of {k} channels must divide the block ({block}) and the channels ({C})")
    w = _pad_axes(w, (round_up(C, block), k, KH, KW))
    packed = np.zeros((w.shape[0] // block, 1, KH, KW, block, block), dtype=w.dtype)
    j = np.arange(block)
    for g in range(k):        # output j reads input (j // k) * k + g of its block
        packed[:, 0, :, :, j, (j // k) * k + g] = w[:, g].reshape(-1, block, KH, KW).transpose(1, 0, 2, 3)
    return np.ascontiguousarray(packed)


def pack_rows(x, rows, block):
    """N×K → (N/rows, K/block, rows, block), zero-padded (dense data and weights)."""
    N, K = x.shape
    x = _pad_axes(x, (round_up(N, rows), round_up(K, block)))
    N2, K2 = x.shape
    return np.ascontiguousarray(x.reshape(N2 // rows, rows, K2 // block, block).transpose(0, 2, 1, 3))


def unpack_rows(y, n, m):
    """(N/b, M/o, b, o) → N×M cropped."""
    NB, MB, b, o = y.shape
    return y.transpose(0, 2, 1, 3).reshape(NB * b, MB * o)[:n, :m]


def pack_bias(bias, batch, block_out, channels=None):
    """Per-channel bias → (C/block_out, batch, block_out) int32, the same for every batch row."""
    bias = np.asarray(bias, dtype=np.int64)
    c = round_up(channels or bias.size, block_out)
    padded = np.zeros(c, dtype=np.int64)
    padded[:bias.size] = bias
    blocks = padded.reshape(c // block_out, 1, block_out)
    return np.ascontiguousarray(np.repeat(blocks, batch, axis=1)).astype(np.int32)
