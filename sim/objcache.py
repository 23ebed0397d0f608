"""Verilator's ``OBJCACHE`` hook: compile its run-time library once, not once per model.

Every Verilated build (each config, cocotb or C++ harness) compiles the same
run-time library (``verilated.cpp``, ``verilated_vpi.cpp``, ...) with the same
flags: a quarter of a small model's build. ``verilated.mk`` runs every compile
as ``$(OBJCACHE) $(CXX) ARGS``; :func:`_verilator_env
<tilewright.sim.rtl._verilator_env>` sets ``OBJCACHE`` to this script, which
keeps the objects of sources under ``VERILATOR_ROOT`` (they include no
model header) in ``TW_OBJCACHE_DIR``, keyed by the compiler, its arguments
and the source's bytes, and runs every other compile unchanged.

Run as ``python -I objcache.py CXX ARGS...``; standard library only.
"""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path


def cacheable_source(args, root):
    """The source file of a library compile (``-c``, one ``.cpp`` under ``root``), else None."""
    sources = [a for a in args if a.endswith(".cpp")]
    if "-c" not in args or len(sources) != 1:
        return None
    source = Path(sources[0]).resolve()
    return source if source.is_relative_to(Path(root).resolve()) else None


def key(args, source):
    """Hash of what the object depends on: the compiler binary, the arguments but the output, the source."""
    out = args.index("-o") + 1 if "-o" in args else None
    h = hashlib.sha256()
    compiler = shutil.which(args[0]) or args[0]
    stat = os.stat(compiler)
    h.update(f"{os.path.realpath(compiler)} {stat.st_size} {stat.st_mtime_ns}\0".encode())
    h.update("\0".join(a for i, a in enumerate(args) if i != out).encode())
    h.update(source.read_bytes())
    return h.hexdigest()[:32]


def main(args):
    root, store = os.environ.get("VERILATOR_ROOT"), os.environ.get("TW_OBJCACHE_DIR")
    source = cacheable_source(args, root) if root and store and "-o" in args else None
    if source is None:
        return os.execvp(args[0], args)     # (replaces this process)
    obj = Path(args[args.index("-o") + 1])
    dep = obj.with_suffix(".d")                 # written by -MMD beside the object
    entry = Path(store) / key(args, source)
    if not entry.with_suffix(".o").exists():
        code = subprocess.call(args)
        if code:
            return code
        entry.parent.mkdir(parents=True, exist_ok=True)
        for built, suffix in ((dep, ".d"), (obj, ".o")):    # the object last: it marks the entry complete
            if built.exists():
                partial = entry.with_suffix(f"{suffix}.{os.getpid()}")
                shutil.copyfile(built, partial)
                os.replace(partial, entry.with_suffix(suffix))
        return 0
    if entry.with_suffix(".d").exists():
        shutil.copyfile(entry.with_suffix(".d"), dep)
    shutil.copyfile(entry.with_suffix(".o"), obj)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
