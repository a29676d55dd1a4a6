"""Writing files atomically: readers see the old file or the whole new one, and a failure leaves nothing."""

from __future__ import annotations

import os
import tempfile


def write_atomic(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temp file beside `path`, flush it to disk, then rename it over `path`."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".litert_", suffix=".tmp", dir=directory)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; give it a new file's usual mode
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
