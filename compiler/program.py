"""A compiled operator: instructions, micro-ops and DRAM layout, saved to one file.

A :class:`Program` is relocatable: DRAM addresses in its instructions are
relative to the start of its DRAM image, which holds one segment per tensor
(inputs and outputs, packed in accelerator layout), the micro-op words and,
when needed, zeros. :meth:`Program.instructions_at` shifts them to where the
runtime placed the image. The config fingerprint travels with it; running a
program on another config is refused.
"""

import io
import zipfile
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from tilewright import isa
from tilewright.config import HwConfig, load_config

from . import files

__all__ = ["Segment", "Program", "ProgramError", "ALIGN", "segment_align"]

#: Segment and image alignment: a multiple of every element size, and an AXI burst boundary (a segment's
#: first row starts a burst).
ALIGN = 4096


def segment_align(cfg):
    """The alignment of ``cfg``'s segments and program images: :data:`ALIGN`, or with ``lean`` (boards whose
    memory is tens of kilobytes on chip and serves one short burst at a time) the largest element or 64 bytes,
    whichever is more: a digits layer's five segments then take 7 KB instead of 24."""
    if not cfg.lean:
        return ALIGN
    largest = max(cfg.elem_bytes(mem) for mem in ("uop", "inp", "wgt", "acc", "out", "acc8"))
    return max(64, 1 << (largest - 1).bit_length())


class ProgramError(ValueError):
    """An unreadable or mismatched program file."""


@dataclass(frozen=True)
class Segment:
    """A tensor (or the micro-ops / zeros) in the DRAM image."""
    name: str
    offset: int          # bytes from the image start
    nbytes: int
    role: str            # "input", "output", "uop", "zero"
    shape: tuple = ()
    dtype: str = "int8"


@dataclass
class Program:
    """Instructions plus everything needed to run them."""
    name: str
    config: HwConfig
    instructions: list
    segments: dict
    uop_words: np.ndarray
    dram_bytes: int
    meta: dict = field(default_factory=dict)
    _binaries: dict = field(default_factory=dict, init=False, repr=False, compare=False)   # base -> bytes

    @property
    def fingerprint(self):
        return self.config.fingerprint

    @property
    def inputs(self):
        return [s for s in self.segments.values() if s.role == "input"]

    @property
    def outputs(self):
        return [s for s in self.segments.values() if s.role == "output"]

    def binary_at(self, base):
        """The encoded instructions of an image placed at byte address ``base``: encoded once per place (a
        model runs its programs again and again, at the same place)."""
        if base not in self._binaries:
            self._binaries[base] = isa.encode_program(self.instructions_at(base), self.config)
        return self._binaries[base]

    def instructions_at(self, base):
        """The instructions with DRAM addresses for an image placed at byte address ``base``."""
        align = segment_align(self.config)
        if base % align:
            raise ProgramError(f"program image base {base:#x} is not {align}-byte aligned")
        out = []
        for insn in self.instructions:
            if isinstance(insn, (isa.Load, isa.Store)) and not insn.moves_nothing:
                shift = base // self.config.elem_bytes(insn.memory_type.dram_elem)
                insn = insn.replace(dram_base=insn.dram_base + shift)
            out.append(insn)
        return out

    def listing(self):
        from tilewright.asm import disassemble
        return disassemble(self.instructions, self.config)

    # -- files ----------------------------------------------------------------------

    def save(self, path):
        """Write the program to ``path`` (an ``.npz`` archive: JSON header, instructions, micro-ops)."""
        header = {
            "format": "tilewright-program", "version": 1, "name": self.name,
            "config": self.config.params(), "config_name": self.config.name, "fingerprint": self.fingerprint,
            "segments": [asdict(s) for s in self.segments.values()], "dram_bytes": self.dram_bytes,
            "meta": self.meta,
        }
        binary = isa.encode_program(self.instructions, self.config)
        arrays = dict(header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8),
                      instructions=np.frombuffer(binary, dtype=np.uint8), uops=self.uop_words)
        if hasattr(path, "write"):
            np.savez(path, **arrays)
        else:
            with files.atomic_write(path) as f:       # (the old file stays whole if this fails)
                np.savez(f, **arrays)

    @classmethod
    def load(cls, path, config=None):
        """Read a program; with ``config`` given, refuse one built for another configuration."""
        source = path if hasattr(path, "read") else Path(path)
        if hasattr(path, "read"):
            path = "program data"
        try:
            bad = files.damaged_member(source)
            if bad:
                raise ProgramError(f"{path}: damaged ({bad} fails its checksum)")
            with np.load(source, allow_pickle=False) as archive:
                header = json.loads(archive["header"].tobytes().decode())
                binary = archive["instructions"].tobytes()
                uops = archive["uops"].copy()
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, UnicodeDecodeError) as e:
            raise ProgramError(f"{path}: not a tilewright program ({e})") from None
        if header.get("format") != "tilewright-program":
            raise ProgramError(f"{path}: not a tilewright program")
        cfg = HwConfig(**header["config"], name=header.get("config_name", "custom"))
        if cfg.fingerprint != header["fingerprint"]:
            raise ProgramError(f"{path}: corrupted header (config fingerprint mismatch)")
        if config is not None and load_config(config).fingerprint != cfg.fingerprint:
            raise ProgramError(f"{path} was compiled for config {cfg.name} ({cfg.fingerprint}), "
                               f"not {load_config(config).name} ({load_config(config).fingerprint})")
        try:
            instructions = isa.decode_program(binary, cfg)
        except isa.IsaError as e:
            raise ProgramError(f"{path}: corrupted instructions ({e})") from None
        segments = {s["name"]: Segment(**{**s, "shape": tuple(s["shape"])}) for s in header["segments"]}
        return cls(header["name"], cfg, instructions, segments, uops, header["dram_bytes"], header.get("meta", {}))

    @classmethod
    def from_bytes(cls, data, config=None):
        """The program serialised by :meth:`to_bytes`."""
        return cls.load(io.BytesIO(data), config)

    def to_bytes(self):
        buf = io.BytesIO()
        self.save(buf)
        return buf.getvalue()
