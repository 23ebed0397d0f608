"""What a conv2d program loads: a strided 1x1 conv only the input rows it reads, a layer's bias once when its
tiles would load it again mid-layer. Both compute what numpy does, on fsim and the RTL."""

import numpy as np
import pytest

from tilewright.compiler import build
from tilewright.compiler import ops
from tilewright.compiler.ops import Conv2dSpec, ConvTiles, conv2d
from tilewright.config import load_config
from tilewright.isa import Alu, Load, MemType, Store
from tilewright.runtime import get_device
from tilewright.runtime.layout import pack_bias, pack_nchw, pack_oihw, unpack_nchw
from tilewright.runtime.reference import conv2d_reference


def _run(backend, cfg, spec, tiles, rng):
    KH, KW = spec.kernel
    x = rng.integers(-128, 128, (spec.batch, spec.in_channels, spec.height, spec.width), dtype=np.int8)
    w = rng.integers(-128, 128, (spec.out_channels, spec.in_channels, KH, KW), dtype=np.int8)
    b = rng.integers(-5000, 5000, spec.out_channels, dtype=np.int32)
    schedule, _, _ = conv2d(spec, cfg, tiles)
    program = build(schedule, cfg)
    tensors = {"data": pack_nchw(x, cfg.batch, cfg.block_in), "weight": pack_oihw(w, cfg.block_out, cfg.block_in),
               "bias": pack_bias(b, cfg.batch, cfg.block_out)}
    out, stats = get_device(backend, cfg).run_program(program, tensors)
    expected = conv2d_reference(x, w, b, stride=spec.stride, padding=spec.padding, mul=spec.mul, shift=spec.shift,
                                relu=spec.relu)
    np.testing.assert_array_equal(unpack_nchw(out["out"], spec.batch, spec.out_channels), expected)
    return program, stats


def _loaded(program, memory):
    return sum(i.y_size * i.x_size for i in program.instructions if isinstance(i, Load) and i.memory_type == memory)


@pytest.mark.parametrize("backend", ["fsim", "rtl"])
@pytest.mark.parametrize("rows", [1, 3])
def test_a_strided_1x1_conv_loads_only_the_input_rows_it_reads(backend, rows):
    cfg = load_config("small")
    spec = Conv2dSpec(1, 16, 12, 12, 16, (1, 1), 2, 0, bias=True, mul=5, shift=9, relu=True)
    assert spec.compact_rows and not Conv2dSpec(1, 16, 12, 12, 16, (3, 3), 2, 1).compact_rows
    tiles = ConvTiles(out_channels=1, rows=rows, cols=6, in_channels=1, threads=2, thread_axis="out_channels")
    program, _ = _run(backend, cfg, spec, tiles, np.random.default_rng(rows))
    in_blocks = spec.in_channels // cfg.block_in
    # (with one output row per tile the rows are the same either way: rows=3 tells them apart)
    # each output row reads one input row of all columns it spans (2·6 - 1 = 11 of 12), once per channel tile
    channel_tiles = spec.out_channels // cfg.block_out
    assert _loaded(program, MemType.INP) == channel_tiles * in_blocks * spec.out_height * 11


@pytest.mark.parametrize("backend", ["fsim", "rtl"])
def test_a_layers_bias_is_loaded_once_when_its_tiles_would_load_it_again(backend, monkeypatch):
    cfg = load_config("small")
    spec = Conv2dSpec(1, 16, 6, 6, 64, (3, 3), 1, 1, bias=True, mul=3, shift=10, relu=False)
    tiles = ConvTiles(out_channels=2, rows=3, cols=6, in_channels=1, threads=2, thread_axis="out_channels")
    assert ops._epilogue_resident(spec, cfg, tiles)
    program, stats = _run(backend, cfg, spec, tiles, np.random.default_rng(5))
    monkeypatch.setattr(ops, "_epilogue_resident", lambda *args: False)
    per_tile, per_tile_stats = _run(backend, cfg, spec, tiles, np.random.default_rng(5))
    blocks = spec.out_channels // cfg.block_out
    # the bias still added on the store path, not by the ALU
    assert not any(isinstance(i, Alu) for i in program.instructions)
    assert sum(isinstance(i, Store) and i.set_bias for i in program.instructions) == blocks * 2   # 2 row tiles
    assert _loaded(program, MemType.ACC) == blocks          # all of it, once
    assert sum(isinstance(i, Load) and i.memory_type == MemType.ACC for i in program.instructions) == 1
    assert _loaded(per_tile, MemType.ACC) == blocks and sum(
        isinstance(i, Load) and i.memory_type == MemType.ACC for i in per_tile.instructions) == 4
    if backend == "rtl":
        assert stats["cycles"] < per_tile_stats["cycles"]


def test_the_bias_stays_per_tile_when_it_does_not_fit_or_is_loaded_once_anyway():
    cfg = load_config("small")
    spec = Conv2dSpec(1, 16, 6, 6, 64, (3, 3), 1, 1, bias=True)
    # one channel tile per thread: each loads its bias once anyway
    assert not ops._epilogue_resident(spec, cfg, ConvTiles(4, 3, 6, 1, 2, "out_channels"))
    # a bias larger than what the accumulators have left beside the tiles
    big = Conv2dSpec(1, 16, 6, 6, 8 * cfg.acc_depth, (3, 3), 1, 1, bias=True)
    assert not ops._epilogue_resident(big, cfg, ConvTiles(1, 3, 6, 1, 2, "out_channels"))
