"""Writing files atomically: readers see the old file or the whole new one, and a failure leaves nothing.

Temporary files and folders in use are listed in `PENDING`, so that a process stopped from outside (the CLI on
Ctrl-C) can remove them before it exits (`remove_pending`).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import shutil
import tempfile
from typing import BinaryIO, Iterator

PENDING: set[str] = set()


def remove_pending() -> None:
    """Remove every temporary file or folder still in use (for an exit that skips the usual cleanup)."""
    for path in list(PENDING):
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif os.path.exists(path):
            os.unlink(path)
        PENDING.discard(path)


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[str]:
    """A temporary folder, removed when the block ends (or by `remove_pending`)."""
    path = tempfile.mkdtemp(prefix=prefix)
    PENDING.add(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        PENDING.discard(path)


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to write `path` through: a temp file beside it, flushed to disk and renamed over `path`
    when the block ends, removed if the block raises."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".litert_", suffix=".tmp", dir=directory)
    PENDING.add(tmp)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes the file private; give it a new file's usual mode
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    finally:
        PENDING.discard(tmp)


@contextlib.contextmanager
def atomic_folder(path: str | os.PathLike, *, overwrite: bool = False) -> Iterator[str]:
    """A folder to fill in place of `path`: a temp folder beside it, renamed to `path` when the block ends
    (replacing an empty folder there, or with `overwrite` any folder), removed if the block raises."""
    from litert_torch.errors import InvalidArgumentError

    path = os.path.abspath(os.fspath(path))
    tmp = tempfile.mkdtemp(prefix=".litert_", suffix=".tmp", dir=os.path.dirname(path))
    PENDING.add(tmp)
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        yield tmp
        if os.path.isdir(path) and os.listdir(path):
            if not overwrite:
                raise InvalidArgumentError(f"{path} exists and is not empty")
            old = tempfile.mkdtemp(prefix=".litert_", suffix=".old", dir=os.path.dirname(path))
            PENDING.add(old)
            os.replace(path, old)  # over the empty folder mkdtemp made
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
            PENDING.discard(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        PENDING.discard(tmp)


@contextlib.contextmanager
def copies_kept_with(files: dict[str, str], folder: str | None) -> Iterator[None]:
    """Copy each of `files` (name -> path) into `folder` under its name, atomically, then run the block (the
    writing of what they make, a bundle); if the block or a copy fails, the copies made are removed: all the
    files or none. With `folder` None, only the block runs."""
    written: list[str] = []
    try:
        if folder is not None:
            os.makedirs(folder, exist_ok=True)
            for name, source in files.items():
                with open(source, "rb") as f, atomic_file(os.path.join(folder, name)) as out:
                    shutil.copyfileobj(f, out)
                written.append(os.path.join(folder, name))
        yield
    except BaseException:
        for path in written:
            if os.path.exists(path):
                os.unlink(path)
        raise


def write_atomic(path: str | os.PathLike, data: bytes | mmap.mmap) -> None:
    """Write `data` to `path` atomically."""
    with atomic_file(path) as f:
        f.write(data)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike) -> None:
    """Raise InvalidArgumentError unless a file can be written at `path` (checked before long work starts):
    not a directory, and its folder (or the nearest existing folder above it, which gets created) writable."""
    from litert_torch.errors import InvalidArgumentError

    path = os.path.abspath(os.fspath(path))
    if os.path.isdir(path):
        raise InvalidArgumentError(f"{path} is a directory; give a file path")
    folder = os.path.dirname(path)
    while not os.path.exists(folder):
        folder = os.path.dirname(folder)
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
        raise InvalidArgumentError(f"cannot write {path}: {folder} is not a writable folder")
