"""Raw instruction words for the tests, with every bit position read from ``tilewright.isa``.

Tests that build or take apart a word by hand (illegal opcodes, forced
dependency flags, bit-exact checks) use these instead of writing offsets,
widths or masks as numbers.
"""

from tilewright import PRESETS, isa

#: Opcodes that name no instruction (all values of the opcode field outside :data:`isa.INSTRUCTION_TYPES`).
ILLEGAL_OPCODES = tuple(op for op in range(1 << isa.OPCODE_BITS) if op not in isa.INSTRUCTION_TYPES)


def field_of(name, cls=isa.Finish, cfg=PRESETS["tiny"]):
    """The :class:`isa.FieldLayout` of ``name`` in ``cls``'s format (the common header by default)."""
    return isa.instruction_format(cls, cfg).by_name[name]


def mask(field):
    """The bits ``field`` occupies in a word."""
    return ((1 << field.width) - 1) << field.offset


def get_field(word, field):
    """The raw (unsigned) bits of ``field`` in ``word``."""
    return (word & mask(field)) >> field.offset


def set_field(word, field, value):
    """``word`` with ``field`` replaced by the low ``field.width`` bits of ``value``."""
    return (word & ~mask(field)) | ((value << field.offset) & mask(field))


def with_opcode(word, opcode):
    """``word`` with its opcode field set to ``opcode``."""
    return set_field(word, field_of("opcode"), opcode)


def with_reserved_bit(insn, cfg=PRESETS["tiny"], *, highest=False):
    """The 128-bit word of ``insn`` with its lowest (or highest) reserved bit set: beyond its last field."""
    fmt = isa.instruction_format(type(insn), cfg)
    assert fmt.reserved_mask, f"{fmt.name} uses every bit under config {cfg.name}"
    return int.from_bytes(isa.encode(insn, cfg), "little") | (1 << (fmt.total_bits - 1 if highest else fmt.used_bits))


def opcode_only(opcode):
    """The :data:`isa.INSN_BYTES` bytes of a word whose opcode is ``opcode`` and every other bit 0."""
    return with_opcode(0, opcode).to_bytes(isa.INSN_BYTES, "little")
