"""Verilator's ``OBJCACHE`` hook: compile its run-time library once, not once per model.

Every Verilated build (each config, cocotb or C++ harness) compiles the same
run-time library (``verilated.cpp``, ``verilated_vpi.cpp``, ...) with the same
flags: a quarter of a small model's build. ``verilated.mk`` runs every compile
as ``$(OBJCACHE) $(CXX) ARGS``; :func:`_verilator_env
<tilewright.sim.rtl._verilator_env>` sets ``OBJCACHE`` to this script, which
keeps the objects of sources under ``VERILATOR_ROOT`` in ``TW_OBJCACHE_DIR``,
keyed by the compiler, its arguments, the source's bytes and Verilator's
headers, and runs every other compile unchanged. An object whose
dependencies (``-MMD``'s list) reach outside Verilator and the system's
headers is not kept, and a cache that cannot be written costs only the
saving.

Run as ``python -I objcache.py CXX ARGS...``; standard library only.
"""

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: Headers a kept object may depend on besides Verilator's own (the compiler's, in the key).
SYSTEM_HEADERS = ("/usr/",)


def cacheable_source(args, root):
    """The source file of a library compile (``-c``, one ``.cpp`` under ``root``), else None."""
    sources = [a for a in args if a.endswith(".cpp")]
    if "-c" not in args or len(sources) != 1:
        return None
    source = Path(sources[0]).resolve()
    return source if source.is_relative_to(Path(root).resolve()) else None


def key(args, source, root):
    """Hash of what the object depends on: the compiler binary, the arguments, the source, and every file
    under ``root``'s ``include`` by name, size and time (a Verilator upgrade replaces them)."""
    h = hashlib.sha256()
    compiler = shutil.which(args[0]) or args[0]
    stat = os.stat(compiler)
    h.update(f"{os.path.realpath(compiler)} {stat.st_size} {stat.st_mtime_ns}\0".encode())
    h.update("\0".join(args).encode() + b"\0")
    h.update(source.read_bytes())
    include = Path(root) / "include"
    for path in sorted(include.rglob("*")):
        if path.is_file():
            stat = path.stat()
            h.update(f"{path.relative_to(include)} {stat.st_size} {stat.st_mtime_ns}\0".encode())
    return h.hexdigest()[:32]


def dependencies(dep_file):
    """The files a ``-MMD`` dependency file lists (its targets left out)."""
    text = dep_file.read_text().replace("\\\n", " ")
    return [word for line in text.splitlines() if ":" in line for word in line.split(":", 1)[1].split()]


def only_library_headers(dep_file, root):
    """Whether everything ``dep_file`` lists is under ``root`` or the system's headers."""
    root = Path(root).resolve()
    for name in dependencies(dep_file):
        path = Path(name).resolve()
        if not (path.is_relative_to(root) or str(path).startswith(SYSTEM_HEADERS)):
            return False
    return True


def _store(built, entry):
    """Copy ``built`` to ``entry`` atomically (a temporary beside it, then a rename)."""
    fd, partial = tempfile.mkstemp(dir=entry.parent, prefix=entry.name, suffix=".partial")
    os.close(fd)
    try:
        shutil.copyfile(built, partial)
        os.replace(partial, entry)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def main(args):
    root, store = os.environ.get("VERILATOR_ROOT"), os.environ.get("TW_OBJCACHE_DIR")
    source = cacheable_source(args, root) if root and store and "-o" in args else None
    if source is None:
        return os.execvp(args[0], args)     # (replaces this process)
    obj = Path(args[args.index("-o") + 1])
    dep = obj.with_suffix(".d")                 # written by -MMD beside the object
    entry = Path(store) / key(args, source, root)
    cached_obj, cached_dep = entry.with_suffix(".o"), entry.with_suffix(".d")
    if cached_obj.exists():
        if cached_dep.exists():
            shutil.copyfile(cached_dep, dep)
        shutil.copyfile(cached_obj, obj)
        return 0
    code = subprocess.call(args)
    if code or (dep.exists() and not only_library_headers(dep, root)):
        return code
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        if dep.exists():
            _store(dep, cached_dep)
        _store(obj, cached_obj)                 # the object last: it marks the entry complete
    except OSError:
        pass                                    # (the compile itself succeeded)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
