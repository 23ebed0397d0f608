"""Nothing a user owns is lost: outputs never replace the command's inputs, and a write that fails leaves the
old file whole."""

import os

import numpy as np
import pytest

from tilewright.compiler import files
from tilewright.cli import main
from tilewright.runtime.model import compile_model, load_model

from tests.models import small_resnet


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "out.bin"
    path.write_bytes(b"old contents")
    os.chmod(path, 0o640)
    with pytest.raises(RuntimeError):
        with files.atomic_write(path) as f:
            f.write(b"half of the new")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old contents" and os.listdir(tmp_path) == ["out.bin"]
    files.write_bytes(path, b"new")
    assert path.read_bytes() == b"new" and path.stat().st_mode & 0o777 == 0o640


def test_a_model_save_that_fails_half_way_keeps_the_old_model(tmp_path, monkeypatch):
    model = compile_model(small_resnet(0).SerializeToString(), "tiny")
    path = tmp_path / "m.twm"
    model.save(path)
    before = path.read_bytes()

    def savez_then_fail(f, **arrays):
        f.write(b"PK\x03\x04 a partial archive")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(np, "savez", savez_then_fail)
    with pytest.raises(Exception, match="No space left"):
        model.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and os.listdir(tmp_path) == ["m.twm"]
    load_model(path)


@pytest.mark.parametrize("command", ["compile over the model", "asm over its source", "disasm over its input",
                                     "run over its input"])
def test_no_command_writes_over_its_own_input(command, tmp_path, capsys):
    onnx_path = tmp_path / "m.onnx"
    onnx_path.write_bytes(small_resnet(0).SerializeToString())
    program = tmp_path / "p.bin"
    if command == "compile over the model":
        argv, victim = ["compile", str(onnx_path), "--config", "tiny", "-o", str(onnx_path)], onnx_path
    elif command == "asm over its source":
        program.write_text("finish\n")             # (a source named .bin: the default output is itself)
        argv, victim = ["asm", str(program), "--config", "tiny"], program
    elif command == "disasm over its input":
        assert main(["asm", str(tmp_path / "x.s"), "--config", "tiny"]) == 1      # (no such file: one line)
        (tmp_path / "x.s").write_text("finish\n")
        assert main(["asm", str(tmp_path / "x.s"), "--config", "tiny", "-o", str(program)]) == 0
        argv, victim = ["disasm", str(program), "--config", "tiny", "-o", str(program)], program
    else:
        assert main(["compile", str(onnx_path), "--config", "tiny", "-o", str(tmp_path / "m.twm")]) == 0
        np.save(tmp_path / "x.npy", np.zeros((1, 3, 12, 12), np.float32))
        argv, victim = ["run", str(tmp_path / "m.twm"), "-i", str(tmp_path / "x.npy"), "-o",
                        str(tmp_path / "x.npy")], tmp_path / "x.npy"
    before = victim.read_bytes()
    capsys.readouterr()
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is also an input" in err
    assert victim.read_bytes() == before


def test_a_damaged_model_or_program_is_refused_before_any_member_is_parsed(tmp_path):
    """A byte flipped inside a .twm's or a program's data fails the archive's checksum, checked first."""
    from tilewright.compiler import ProgramError
    from tilewright.compiler.graph import ModelError
    model = compile_model(small_resnet(0).SerializeToString(), "tiny")
    path = tmp_path / "m.twm"
    model.save(path)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ModelError, match=r"damaged \(\S+ fails its checksum\)"):
        load_model(path)
    program = next(s.program for s in model.steps if s.program)
    program.save(tmp_path / "p.npz")
    data = bytearray((tmp_path / "p.npz").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (tmp_path / "p.npz").write_bytes(bytes(data))
    with pytest.raises(ProgramError, match="fails its checksum"):
        type(program).load(tmp_path / "p.npz")
