"""A config without the requantizing STORE (``requant_store = false``): the STORE's requantizing fields do not
exist there, the compiler requantizes with ALU instructions instead, and the results are the same."""

import numpy as np
import pytest

from tilewright import isa
from tilewright.config import load_config
from tilewright.isa import AluOp, IsaError, Store
from tilewright.compiler.ops import Conv2dSpec
from tilewright.runtime.api import compile_conv2d, conv2d
from tilewright.runtime.reference import conv2d_reference

FULL = load_config("tiny")
PLAIN = FULL.replace(name="tiny_plain_store", requant_store=False)


def test_the_store_has_no_requantizing_fields():
    fmt = isa.instruction_format(Store, PLAIN)
    assert set(fmt.absent) == {"requant", "relu", "shift", "mul", "bias", "set_bias"}
    assert fmt.used_bits == fmt.by_name["x_stride"].msb + 1
    plain = Store(sram_base=3, dram_base=40, y_size=2, x_size=5, x_stride=7, push_prev=True)
    assert isa.decode(isa.encode(plain, PLAIN), PLAIN) == plain
    with pytest.raises(IsaError, match=r"STORE field requant=True does not exist on config 'tiny_plain_store'"):
        isa.encode(plain.replace(requant=True), PLAIN)
    # A requantizing STORE encoded for the full config sets a bit the plain one reserves.
    word = isa.encode(plain.replace(requant=True, mul=3), FULL)
    with pytest.raises(isa.IllegalInstruction) as caught:
        isa.decode(word, PLAIN)
    assert caught.value.code == isa.ErrorCode.RESERVED_BITS


@pytest.mark.parametrize("backend", ["fsim", "rtl"])
def test_a_conv_requantizes_in_the_alu_and_equals_numpy(backend):
    rng = np.random.default_rng(5)
    x = rng.integers(-128, 128, (1, 8, 6, 6), dtype=np.int8)
    w = rng.integers(-128, 128, (8, 8, 3, 3), dtype=np.int8)
    b = rng.integers(-999, 999, 8, dtype=np.int32)
    got, _ = conv2d(x, w, b, padding=1, mul=3, shift=10, relu=True, config=PLAIN, backend=backend)
    np.testing.assert_array_equal(got, conv2d_reference(x, w, b, padding=1, mul=3, shift=10, relu=True))
    spec = Conv2dSpec(1, 8, 6, 6, 8, (3, 3), 1, 1, bias=True, residual=False, mul=3, shift=10, relu=True)
    plain, full = compile_conv2d(spec, PLAIN).instructions, compile_conv2d(spec, FULL).instructions
    alu_ops = {i.alu_op for i in plain if isinstance(i, isa.Alu)}
    assert {AluOp.MUL, AluOp.SHR, AluOp.MIN, AluOp.MAX} <= alu_ops
    assert not any(i.requant for i in plain if isinstance(i, Store))
    assert any(i.requant for i in full if isinstance(i, Store))
