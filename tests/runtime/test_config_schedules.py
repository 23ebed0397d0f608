"""Configs at the edges of what the compiler can schedule: shallow queues and narrow fields fall back to another
tiling that runs (equal to numpy), and a config on which nothing runs is refused where it enters, with the reason."""

import numpy as np
import pytest

from tilewright.cli import main
from tilewright.compiler.schedule import ScheduleError
from tilewright.config import ConfigError, HwConfig, load_config
from tilewright.runtime.api import conv2d, schedule_problem
from tilewright.runtime.reference import conv2d_reference

# Found by compiling random layers on random configs: the heuristic's first tiling deadlocks on the queues
# (2-deep token queues behind 1-deep command queues) or needs a GEMM field wider than the config's ISA
# holds. Each now compiles to another tiling.
EDGE_CONFIGS = {
    "command-queues-1": (dict(batch=1, block_in=16, block_out=1, uop_buffer_bytes=2048, inp_buffer_bytes=2048,
                              wgt_buffer_bytes=65536, acc_buffer_bytes=2048, token_queue_depth=2, cmd_queue_depth=1,
                              dram_bus_width=128), (26, 7, 6, 3)),
    "narrow-gemm-fields": (dict(batch=1, block_in=16, block_out=32, uop_buffer_bytes=16384, inp_buffer_bytes=131072,
                                wgt_buffer_bytes=8192, acc_buffer_bytes=256, token_queue_depth=16, cmd_queue_depth=8,
                                dram_bus_width=64), (6, 6, 6, 3)),
}


@pytest.mark.parametrize("name", EDGE_CONFIGS)
def test_a_tiling_that_runs_is_found(name):
    params, (C, H, O, K) = EDGE_CONFIGS[name]
    cfg = HwConfig(**params)
    rng = np.random.default_rng(len(name))
    x = rng.integers(-128, 128, (cfg.batch, C, H, H), dtype=np.int8)
    w = rng.integers(-128, 128, (O, C, K, K), dtype=np.int8)
    b = rng.integers(-999, 999, O, dtype=np.int32)
    got, _ = conv2d(x, w, b, padding=K // 2, shift=9, relu=True, config=cfg)
    np.testing.assert_array_equal(got, conv2d_reference(x, w, b, padding=K // 2, shift=9, relu=True))


TOO_FEW_WEIGHTS = load_config("tiny").replace(wgt_buffer_bytes=128)       # 8 weight blocks, a 3x3 window needs 9


def test_a_layer_that_fits_no_tiling_says_which_buffer():
    x, w = np.zeros((1, 4, 5, 5), np.int8), np.zeros((4, 4, 3, 3), np.int8)
    with pytest.raises(ScheduleError, match=r"even one output row, column and channel block needs more entries "
                                            r"than the buffers hold \(wgt 9 > 8\)"):
        conv2d(x, w, padding=1, config=TOO_FEW_WEIGHTS)


def test_a_config_nothing_runs_on_is_refused_with_the_reason(tmp_path, capsys):
    assert schedule_problem(load_config("tiny")) is None
    assert "3x3 convolution" in schedule_problem(TOO_FEW_WEIGHTS)
    path = tmp_path / "few.toml"
    path.write_text('base = "tiny"\nwgt_buffer_bytes = 128\n')
    from tilewright.examples.digits.demo import MODEL_PATH
    assert main(["compile", str(MODEL_PATH), "--config", str(path), "-o", str(tmp_path / "m.twm")]) == 1
    err = capsys.readouterr().err.strip()
    assert err == (f"error: config {path}: the compiler cannot run even a 3x3 convolution of one channel block "
                   f"(padding, bias, residual) on this config: even one output row, column and channel block needs "
                   f"more entries than the buffers hold (wgt 9 > 8)")
    assert not (tmp_path / "m.twm").exists()


def test_one_deep_token_queues_are_refused_with_the_reason():
    """The compiler's schedules deadlock on them (a conv with bias on this config, whichever tiling)."""
    cfg = HwConfig(batch=4, block_in=32, block_out=2, uop_buffer_bytes=32768, inp_buffer_bytes=1 << 20,
                   wgt_buffer_bytes=4096, acc_buffer_bytes=256, token_queue_depth=1, cmd_queue_depth=256,
                   dram_bus_width=32)
    assert schedule_problem(cfg).startswith("token_queue_depth=1: the compiler's schedules keep up to two")
    with pytest.raises(ScheduleError, match=r"runs on config 'custom' \(token queues 1, command queues 256 deep\): "
                                            r"the streams can deadlock"):
        conv2d(np.zeros((4, 3, 6, 6), np.int8), np.zeros((6, 3, 3, 3), np.int8), np.zeros(6, np.int32), padding=1,
               config=cfg)


def test_the_gemm_has_an_upper_bound():
    with pytest.raises(ConfigError, match=r"batch·block_in·block_out = 16384 is more than 4096"):
        HwConfig(block_in=1024)
