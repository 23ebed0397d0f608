"""Latency hiding, part 3: a layer's first and last tiles in pieces compute the same, in fewer cycles."""

import importlib

import numpy as np
import pytest

import tilewright
from tilewright.compiler import build
from tilewright.compiler.ops import Conv2dSpec, conv2d
from tilewright.config import load_config
from tilewright.isa import Gemm, Load, MemType
from tilewright.runtime import api
from tilewright.runtime.reference import conv2d_reference

codegen_module = importlib.import_module("tilewright.compiler.passes.codegen")

# ResNet-18's C4 (1x1, stride 2, 64 -> 128 channels) on a 28x28 input
SHAPE = dict(cin=64, cout=128, size=28, stride=2)


def _without_pieces(monkeypatch):
    monkeypatch.setattr(codegen_module, "pipeline_ends", lambda items, cfg: items)


@pytest.fixture
def fresh_programs():
    """conv2d compiles afresh (its program cache would hand back the other variant)."""
    api.compile_conv2d.cache_clear()
    yield
    api.compile_conv2d.cache_clear()


@pytest.mark.parametrize("config", ["tiny", "small"])
def test_first_and_last_tiles_in_pieces_compute_the_same_in_fewer_cycles(config, monkeypatch, fresh_programs):
    rng = np.random.default_rng(7)
    x = rng.integers(-128, 128, (1, SHAPE["cin"], SHAPE["size"], SHAPE["size"]), dtype=np.int8)
    w = rng.integers(-128, 128, (SHAPE["cout"], SHAPE["cin"], 1, 1), dtype=np.int8)
    b = rng.integers(-3000, 3000, SHAPE["cout"], dtype=np.int32)
    kw = dict(stride=SHAPE["stride"], padding=0, mul=3, shift=10, relu=True)
    expected = conv2d_reference(x, w, b, **kw)
    out, stats = tilewright.conv2d(x, w, b, backend="rtl", config=config, **kw)
    api.compile_conv2d.cache_clear()
    _without_pieces(monkeypatch)
    whole, whole_stats = tilewright.conv2d(x, w, b, backend="rtl", config=config, **kw)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(whole, expected)
    assert stats["instructions"] > whole_stats["instructions"]          # it was split
    assert stats["gemm_uops"] == whole_stats["gemm_uops"]              # into the same work
    assert stats["cycles"] < whole_stats["cycles"]


def _c4_program(config):
    cfg = load_config(config)
    spec = Conv2dSpec(cfg.batch, SHAPE["cin"], 56, 56, SHAPE["cout"], (1, 1), 2, 0, bias=True, mul=3, shift=12,
                      relu=True)
    schedule, _, _ = conv2d(spec, cfg)
    return build(schedule, cfg)


def test_the_first_gemm_waits_for_part_of_the_first_tile_and_no_weight_is_loaded_twice(monkeypatch):
    """ResNet-18's C4 on `default`: the first GEMM's token comes from a LOAD before the last one the
    first tile needs; the weights, loaded in pieces, stay in place for every later tile."""
    split = _c4_program("default")
    _without_pieces(monkeypatch)
    whole = _c4_program("default")

    def first_gemm_waits_for(program):     # entries loaded up to the push the first GEMM pops
        loads = [(k, i) for k, i in enumerate(program.instructions) if isinstance(i, Load)
                 and i.memory_type in (MemType.INP, MemType.WGT)]
        pushed = next(k for k, i in loads if i.push_next)
        return sum(i.y_size * i.x_size for k, i in loads if k <= pushed)

    assert 2 * first_gemm_waits_for(split) <= first_gemm_waits_for(whole)
    assert sum(isinstance(i, Gemm) for i in split.instructions) > sum(isinstance(i, Gemm) for i in whole.instructions)

    def weight_entries(program):
        return sum(i.y_size * i.x_size for i in program.instructions
                   if isinstance(i, Load) and i.memory_type == MemType.WGT)
    assert weight_entries(split) == weight_entries(whole)
