"""Writing the user's files safely: all or nothing, and never over the command's own inputs.

:func:`atomic_write` writes to a temporary file in the destination's folder
and renames it into place, so a write that fails half-way (disk full, a
kill) leaves the old file as it was; :func:`refuse_overwrite` stops a
command before it writes an output that is one of its inputs.
"""

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["atomic_write", "write_bytes", "write_text", "write_npz", "refuse_overwrite", "damaged_member",
           "FileSafetyError"]


class FileSafetyError(ValueError):
    """An output that would replace one of the command's inputs (one line)."""


@contextlib.contextmanager
def atomic_write(path, mode="wb"):
    """``with atomic_write(path) as f: ...``: ``f`` is a temporary file beside ``path`` that replaces it only
    when the block ends without an exception (else it is removed). The file gets the old file's
    permissions, or the umask's for a new one; a symlink is written through (its target replaced), a
    device or pipe written directly."""
    path = Path(os.path.realpath(path))      # (through a symlink to the file it names)
    if path.exists() and not path.is_file():         # (a device, a pipe: /dev/stdout)
        with open(path, mode) as f:
            yield f
        return
    fd, temporary = tempfile.mkstemp(prefix=".tw.", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, mode) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(temporary, path.stat().st_mode & 0o7777)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(temporary, 0o666 & ~umask)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def write_bytes(path, data):
    with atomic_write(path) as f:
        f.write(data)


def write_text(path, text):
    with atomic_write(path, "w") as f:
        f.write(text)


def refuse_overwrite(output, *inputs):
    """FileSafetyError when ``output`` names the same file as one of ``inputs`` (None entries are skipped)."""
    out = Path(output)
    for given in inputs:
        if given is None:
            continue
        source = Path(given)
        same = out.resolve() == source.resolve()
        if not same and out.exists() and source.exists():
            with contextlib.suppress(OSError):
                same = os.path.samefile(out, source)
        if same:
            raise FileSafetyError(f"{output} is also an input ({given}); writing it would destroy it: "
                                  f"choose another output")


def damaged_member(source):
    """The name of the first member of zip archive ``source`` (a path or a binary file) whose data fail their
    CRC, or None: checked before any member is parsed, so a damaged archive is refused, not half-read."""
    import zipfile
    with zipfile.ZipFile(source) as archive:
        bad = archive.testzip()
    if hasattr(source, "seek"):
        source.seek(0)
    return bad


def write_npz(f, arrays):
    """``arrays`` (name → array) into the open binary file ``f`` as an ``.npz`` archive ``numpy.load`` reads.

    ``numpy.savez(f, **arrays)`` takes the names as keyword arguments, so a
    model output called ``file`` or ``allow_pickle`` collides with its own
    parameters; here any name is a member name (``name.npy``).
    """
    import zipfile

    import numpy as np
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array))     # (string outputs pickle)
