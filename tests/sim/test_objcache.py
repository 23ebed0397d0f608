"""sim/objcache.py: Verilator's run-time library compiled once and reused, everything else compiled as asked."""

import shutil
import subprocess

import pytest

from tilewright.sim import objcache

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")


@pytest.fixture
def library(tmp_path, monkeypatch):
    """A fake VERILATOR_ROOT with one library source and a header, and the object store."""
    root = tmp_path / "verilator"
    (root / "include").mkdir(parents=True)
    (root / "include" / "lib.h").write_text("int answer();\n")
    (root / "lib.cpp").write_text('#include "include/lib.h"\nint answer() { return 42; }\n')
    monkeypatch.setenv("VERILATOR_ROOT", str(root))
    monkeypatch.setenv("TW_OBJCACHE_DIR", str(tmp_path / "store"))
    return root


def compile_in(folder, source, *flags, monkeypatch):
    """Compile ``source`` in ``folder`` as verilated.mk does (``-o`` relative to it); returns the object."""
    folder.mkdir(exist_ok=True)
    monkeypatch.chdir(folder)
    assert objcache.main(["g++", *flags, "-MMD", "-c", "-o", "lib.o", str(source)]) == 0
    return folder / "lib.o"


def test_a_library_object_is_compiled_once_and_copied_after(library, tmp_path, monkeypatch):
    first = compile_in(tmp_path / "a", library / "lib.cpp", "-O1", monkeypatch=monkeypatch)
    assert "lib.h" in (tmp_path / "a" / "lib.d").read_text()
    calls = []
    monkeypatch.setattr(subprocess, "call", lambda args: calls.append(args) or 1)
    second = compile_in(tmp_path / "b", library / "lib.cpp", "-O1", monkeypatch=monkeypatch)
    assert not calls
    assert second.read_bytes() == first.read_bytes()
    assert (tmp_path / "b" / "lib.d").read_text() == (tmp_path / "a" / "lib.d").read_text()


def test_other_flags_another_source_or_new_headers_compile_again(library, tmp_path, monkeypatch):
    compile_in(tmp_path / "a", library / "lib.cpp", "-O1", monkeypatch=monkeypatch)
    real_call, calls = subprocess.call, []
    monkeypatch.setattr(subprocess, "call", lambda args: calls.append(args) or real_call(args))
    compile_in(tmp_path / "b", library / "lib.cpp", "-O2", monkeypatch=monkeypatch)
    (library / "lib.cpp").write_text('#include "include/lib.h"\nint answer() { return 43; }\n')
    compile_in(tmp_path / "c", library / "lib.cpp", "-O1", monkeypatch=monkeypatch)
    (library / "include" / "lib.h").write_text("int answer();  // an upgrade\n")
    compile_in(tmp_path / "d", library / "lib.cpp", "-O1", monkeypatch=monkeypatch)
    assert len(calls) == 3


def test_an_object_reaching_outside_the_library_is_not_kept(library, tmp_path, monkeypatch):
    """A library source that includes a header from the build folder (a model's) is compiled every time."""
    (library / "lib.cpp").write_text('#include "model.h"\nint answer() { return MODEL; }\n')
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "model.h").write_text(f"#define MODEL {len(folder)}\n")
        compile_in(tmp_path / folder, library / "lib.cpp", "-I.", monkeypatch=monkeypatch)
    assert not list((tmp_path / "store").glob("*.o"))


def test_a_model_source_is_never_cached(library, tmp_path, monkeypatch):
    model = tmp_path / "Vtop.cpp"
    model.write_text("int top() { return 1; }\n")
    assert objcache.cacheable_source(["g++", "-c", "-o", "Vtop.o", str(model)], library) is None
    assert objcache.cacheable_source(["g++", "-c", "-o", "lib.o", str(library / "lib.cpp")], library)
    assert objcache.cacheable_source(["g++", "-o", "lib", str(library / "lib.cpp")], library) is None
    executed = []
    monkeypatch.setattr(objcache.os, "execvp", lambda f, args: executed.append(args))
    objcache.main(["g++", "-c", "-o", str(tmp_path / "Vtop.o"), str(model)])
    assert executed and not (tmp_path / "store").exists()


def test_a_failed_compile_is_not_stored(library, tmp_path, monkeypatch):
    (library / "lib.cpp").write_text("this is not C++\n")
    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    assert objcache.main(["g++", "-c", "-o", "lib.o", str(library / "lib.cpp")]) != 0
    assert not list((tmp_path / "store").glob("*.o"))


def test_a_store_that_cannot_be_written_costs_only_the_saving(library, tmp_path, monkeypatch):
    monkeypatch.setenv("TW_OBJCACHE_DIR", str(tmp_path / "a-file"))
    (tmp_path / "a-file").write_text("not a folder")
    assert compile_in(tmp_path / "a", library / "lib.cpp", monkeypatch=monkeypatch).exists()
