"""HwConfig: presets, derived quantities, validation, TOML loading."""

import pytest

from tilewright import PRESETS, ConfigError, load_config


def test_default_matches_vta_buffers():
    c = PRESETS["default"]
    assert (c.batch, c.block_in, c.block_out) == (1, 16, 16)
    assert (c.inp_width, c.wgt_width, c.acc_width, c.out_width) == (8, 8, 32, 8)
    assert [c.depth(m) for m in ("uop", "inp", "wgt", "acc")] == [8192, 2048, 1024, 2048]
    assert (c.inp_buffer_bytes, c.wgt_buffer_bytes, c.acc_buffer_bytes, c.uop_buffer_bytes) == \
        (32 << 10, 256 << 10, 128 << 10, 32 << 10)
    assert c.uop_bits == 32 and c.dram_bus_width == 128


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_consistent(name):
    c = PRESETS[name]
    for mem in ("inp", "wgt", "acc", "uop"):
        assert c.depth(mem) * c.elem_bytes(mem) == getattr(c, f"{mem}_buffer_bytes")
        assert 1 << c.index_bits(mem) == c.depth(mem)
    assert c.elem_bytes("inp") == c.batch * c.block_in * c.inp_width // 8
    assert c.elem_bytes("wgt") == c.block_out * c.block_in * c.wgt_width // 8
    assert load_config(name) is c


def test_fingerprint_ignores_name_and_tracks_parameters():
    c = PRESETS["small"]
    assert c.replace(name="other").fingerprint == c.fingerprint
    assert c.replace(name="other") == c
    assert c.replace(token_queue_depth=32).fingerprint != c.fingerprint
    assert c.replace(perf_counters=False).fingerprint != c.fingerprint


def test_options_at_their_default_leave_the_fingerprint_as_before_they_existed():
    """perf_counters, soft_products, vector_lanes, lean and the other options came later: a config that leaves
    them at their defaults hashes the parameters without them."""
    import hashlib
    import json
    c = PRESETS["small"]
    later = ("perf_counters", "soft_products", "vector_lanes", "gemm_lanes", "lean", "requant_store", "store_scale", "serial_mul",
             "serial_core", "slow_clock")
    params = {k: v for k, v in c.params().items() if k not in later}
    assert c.fingerprint == hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]


@pytest.mark.parametrize("changes, message", [
    ({"block_in": 12}, r"^block_in=12 must be a power of two$"),
    ({"acc_buffer_bytes": 3000}, r"^acc_buffer_bytes=3000 must be a power of two$"),
    ({"inp_width": 4}, r"^inp_width=4 is not supported; choose one of 8, 16$"),
    ({"vector_lanes": 3}, r"^vector_lanes=3 must be 0 \(one per accumulator lane\) or a power of two up to "
                          r"batch·block_out = 16$"),
    ({"vector_lanes": 32}, r"^vector_lanes=32 must be 0"),
    ({"gemm_lanes": 3}, r"^gemm_lanes=3 must be 0 \(all of block_out\) or a power of two up to block_out = 16$"),
    ({"gemm_lanes": 32}, r"^gemm_lanes=32 must be 0"),
    ({"serial_core": True, "vector_lanes": 1, "gemm_lanes": 4}, r"^serial_core computes one lane at a time already"),
    ({"gemm_lanes": 4, "soft_products": 65}, r"^soft_products=65 must be between 0 and the GEMM's 64 products$"),
    ({"dram_bus_width": 96}, r"^dram_bus_width=96 is not an AXI data width"),
    ({"wgt_buffer_bytes": 128}, r"^wgt_buffer_bytes=128 is smaller than one wgt block \(256 bytes\)$"),
    ({"batch": "1"}, r"^batch must be an integer, not '1'$"),
    ({"perf_counters": 0}, r"^perf_counters must be true or false, not 0$"),
    ({"serial_core": True}, r"^serial_core builds one ALU lane: it needs vector_lanes = 1, not 0 \(one per "
                            r"accumulator lane\)$"),
    ({"serial_core": True, "vector_lanes": 1, "soft_products": 3},
     r"^serial_core builds block_in = 16 products, in DSP blocks: it needs soft_products = 0, not 3$"),
    ({"slow_clock": "no"}, r"^slow_clock must be true or false, not 'no'$"),
    ({"uop_buffer_bytes": 1 << 20}, r"^the (GEMM|STORE) instruction needs 1\d\d bits, more than 128"),
])
def test_validation_names_field_and_value(changes, message):
    with pytest.raises(ConfigError, match=message):
        PRESETS["default"].replace(**changes)


def test_wider_types_are_accepted():
    c = PRESETS["small"].replace(inp_width=16, wgt_width=16, out_width=16, acc_width=32,
                                 wgt_buffer_bytes=64 << 10)
    assert c.elem_bytes("inp") == 16 and c.elem_bytes("wgt") == 128 and c.depth("wgt") == 512


def test_toml_with_base_and_overrides(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('base = "small"\ntoken_queue_depth = 8\n')
    c = load_config(str(path))
    assert c.name == "mine" and c.token_queue_depth == 8
    assert c.replace(token_queue_depth=64) == PRESETS["small"]


def test_toml_hw_table(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text('[hw]\nbase = "small"\nbatch = 2\n')
    c = load_config(path)
    assert (c.batch, c.block_in, c.block_out) == (2, 8, 8)


@pytest.mark.parametrize("text, message", [
    ("batch = 3\n", r"batch=3 must be a power of two"),
    ("speed = 3\n", r"unknown parameter\(s\) speed"),
    ('base = "huge"\n', r"base='huge' is not a preset"),
    ("batch = [\n", r"cannot read config file"),
    ('base = ["tiny"]\n', r"base=\['tiny'\] is not a preset"),
    ('base = "tiny"\nbatch = 2\n[hw]\nblock_in = 8\n', r"with a \[hw\] table every parameter goes in it \(base, batch"),
    ("hw = 3\n", r"with a \[hw\] table every parameter goes in it"),
])
def test_bad_toml(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message):
        load_config(str(path))


def test_unknown_preset_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown config 'huge'"):
        load_config("huge")
    with pytest.raises(ConfigError, match=r"does not exist"):
        load_config(str(tmp_path / "missing.toml"))


def test_a_config_file_that_is_not_utf8_is_one_error(tmp_path):
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "d\xe9faut"\n'.encode("latin-1"))
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(path)


def test_no_command_queue_counts_as_one_slot():
    """``cmd_queue_depth = 0`` (a stream's instruction in a register) is legal and holds one instruction as the
    simulator and the checker count; the token queues need one entry at least."""
    from tilewright import HwConfig
    assert HwConfig(cmd_queue_depth=0).cmd_queue_slots == 1 and HwConfig(cmd_queue_depth=8).cmd_queue_slots == 8
    with pytest.raises(ConfigError, match=r"^token_queue_depth=0 must be a power of two$"):
        HwConfig(token_queue_depth=0)


@pytest.mark.parametrize("key", ["token_queue_depth", "cmd_queue_depth"])
def test_queue_depths_have_an_upper_bound(key):
    from tilewright import HwConfig
    assert getattr(HwConfig(**{key: 4096}), key) == 4096
    with pytest.raises(ConfigError, match=f"{key}=8192 is more than 4096"):
        HwConfig(**{key: 8192})


def test_the_board_config_examples_spell_out_their_presets():
    """``examples/boards/tiny_serial.toml`` is the iCEBreaker's preset written as a config file."""
    from pathlib import Path
    example = Path(__file__).parents[1] / "examples" / "boards" / "tiny_serial.toml"
    assert load_config(str(example)).replace(name="tiny_serial") == PRESETS["tiny_serial"]
