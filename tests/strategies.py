"""Hypothesis strategies shared by the tests: random valid instructions and micro-ops."""

import dataclasses

from hypothesis import strategies as st

from tilewright import isa


def _field_values(fmt, enums):
    fields = {}
    for f in fmt.fields:
        if f.name == "opcode":
            continue
        if f.name in enums:
            fields[f.name] = st.sampled_from(list(enums[f.name]))
        elif f.width == 1 and not f.signed:
            fields[f.name] = st.booleans()
        else:
            fields[f.name] = st.integers(f.min, f.max)
    return fields


def instructions(cfg, kinds=tuple(isa.INSTRUCTION_TYPES.values())):
    """Any encodable instruction of the given classes (legal enum values, any field value)."""
    enums = {"memory_type": isa.MemType, "alu_op": isa.AluOp}
    options = [st.builds(cls, **_field_values(isa.instruction_format(cls, cfg), enums)) for cls in kinds]
    return st.one_of(options)


def uops(cfg):
    return st.builds(isa.Uop, **_field_values(isa.uop_format(cfg), {}))


def field_names(cls):
    return [f.name for f in dataclasses.fields(cls)]
