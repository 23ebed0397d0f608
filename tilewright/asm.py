"""Text assembly for the instruction set.

One instruction per line::

    MNEMONIC [KIND] [field=value | flag]...

``MNEMONIC`` is ``load``, ``store``, ``gemm``, ``alu`` or ``finish``. ``KIND``
is the memory type of a LOAD/STORE (``inp``, ``wgt``, ``uop``, ``acc``,
``acc8``, ``out``) or the operation of an ALU instruction (``min``, ``max``,
``add``, ``shr``, ``mul``); a number is accepted too, so illegal encodings
can be written for tests. One-bit fields (``pop_prev``, ``reset``,
``use_imm``, ...) are bare words; other fields are ``name=value`` with a
decimal or ``0x`` value, negative where the field is signed. Unset fields
keep their defaults (zero, except a STORE's ``mul`` of 1). ``#`` or ``;``
starts a comment. Field names and widths come from :mod:`tilewright.isa`;
:func:`disassemble` prints only fields that differ from their defaults, in
bit order, so ``assemble(disassemble(p)) == p``.

Example::

    load inp sram_base=0 dram_base=0x40 y_size=2 x_size=8 x_stride=8 push_next
    gemm pop_prev uop_bgn=0 uop_end=4 iter_out=2 iter_in=1 dst_factor_out=1
    alu shr use_imm imm=-3 uop_bgn=4 uop_end=5 iter_out=2 iter_in=1 dst_factor_out=1
    finish
"""

from . import isa
from .isa import AluOp, IsaError, MemType

__all__ = ["AsmError", "assemble", "disassemble", "format_instruction", "parse_instruction"]


class AsmError(IsaError):
    """A line the assembler cannot read; names the line number and the problem."""


_BY_MNEMONIC = {cls.MNEMONIC: cls for cls in isa.INSTRUCTION_TYPES.values()}
_KIND_FIELD = {isa.Load: ("memory_type", MemType), isa.Store: ("memory_type", MemType),
               isa.Alu: ("alu_op", AluOp)}


def _is_flag(f):
    return f.width == 1 and not f.signed


def format_instruction(insn, cfg):
    """One line of assembly for ``insn``."""
    cls = type(insn)
    words = [cls.MNEMONIC]
    kind = _KIND_FIELD.get(cls)
    if kind:
        value = getattr(insn, kind[0])
        words.append(value.name.lower() if isinstance(value, kind[1]) else str(int(value)))
    defaults = {name: fld.default for name, fld in cls.__dataclass_fields__.items()}
    for f in isa.instruction_format(cls, cfg).fields:
        if f.name == "opcode" or (kind and f.name == kind[0]):
            continue
        value = getattr(insn, f.name)
        if _is_flag(f):
            if value:
                words.append(f.name)
        elif value != defaults[f.name]:
            words.append(f"{f.name}={value}")
    return " ".join(words)


def disassemble(insns, cfg):
    """Assembly text for a list of instructions or a 16-byte-aligned binary."""
    if isinstance(insns, (bytes, bytearray, memoryview)):
        insns = isa.decode_program(bytes(insns), cfg)
    return "".join(format_instruction(insn, cfg) + "\n" for insn in insns)


def _int(text):
    try:
        return int(text, 0)
    except ValueError:
        raise AsmError(f"{text!r} is not an integer") from None


def parse_instruction(line, cfg):
    """The instruction on one line of assembly (comments already allowed)."""
    words = line.split()
    cls = _BY_MNEMONIC.get(words[0].lower())
    if cls is None:
        raise AsmError(f"unknown mnemonic {words[0]!r}; expected one of {', '.join(_BY_MNEMONIC)}")
    fmt = isa.instruction_format(cls, cfg)
    values, rest = {}, words[1:]
    kind = _KIND_FIELD.get(cls)
    if kind:
        name, enum_cls = kind
        if not rest or "=" in rest[0] or rest[0] in fmt.by_name:
            choices = ", ".join(m.name.lower() for m in enum_cls)
            raise AsmError(f"{cls.MNEMONIC} needs a {name} first ({choices})")
        word = rest.pop(0)
        if word.upper() in enum_cls.__members__:
            values[name] = enum_cls[word.upper()]
        else:
            values[name] = _int(word)
    for word in rest:
        key, eq, text = word.partition("=")
        f = fmt.by_name.get(key)
        if f is None or key == "opcode" or (kind and key == kind[0]):
            raise AsmError(f"{cls.MNEMONIC} has no field {key!r}")
        if key in values:
            raise AsmError(f"field {key} given twice")
        if _is_flag(f):
            if eq:
                raise AsmError(f"{key} is a flag; write it without a value")
            values[key] = True
        else:
            if not eq:
                raise AsmError(f"field {key} needs a value ({key}=N)")
            values[key] = _int(text)
    insn = cls(**values)
    isa.instruction_format(cls, cfg).check(insn)
    return insn


def assemble(text, cfg):
    """Instructions from assembly text; :class:`AsmError` names the line of any mistake."""
    insns = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].split(";", 1)[0].strip()
        if not line:
            continue
        try:
            insns.append(parse_instruction(line, cfg))
        except IsaError as e:
            raise AsmError(f"line {number}: {e}") from None
    return insns
