"""Keeping the converter's resident memory down while it reads weights mapped from files.

Weights loaded from safetensors (Hugging Face `from_pretrained`, `safetensors.torch.load_file`) are views of a
file mapping: reading one to write or quantize it makes its pages resident in this process, and they stay
resident (and count in its RSS) until the mapping goes, although the file holds the same bytes. `FilePages`
lets the writer and the quantizer hand those pages back once an array has been read: the kernel unmaps them
from the process (`madvise(MADV_DONTNEED)`), keeps them in its page cache, and maps them again on the next read.

That is only lossless where the process never wrote to the pages: a shared mapping, or a private one in which no
page was copied on write (smaps' `Anonymous: 0 kB`). Mappings are taken as they are when `FilePages` is made;
anything else (anonymous memory, a private mapping with written pages, a platform without /proc/self/smaps) is
left alone, so releasing is always safe to ask for.

`collections_for_large_graphs` keeps Python's cycle collector from walking the whole heap over and over while a
conversion makes hundreds of thousands of graph objects (nodes, fake tensors, IR tensors and ops).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import mmap
import os
import re
import sys
import threading
from bisect import bisect_right
from typing import Iterator

import numpy as np

MADV_DONTNEED = 4
_HEADER = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S{4}) \S+ \S+ (\d+)\s*(.*)$")


def _mappings(smaps: str) -> list[tuple[int, int]]:
    """The (start, end) of every file mapping in `smaps` (the text of /proc/<pid>/smaps) that is shared, or
    private with no page copied on write: the ones whose pages the file holds exactly."""
    found: list[tuple[int, int]] = []
    current: tuple[int, int, bool] | None = None  # (start, end, shared) of the file mapping being read
    anonymous_kb: int | None = None  # its pages copied on write
    for line in smaps.splitlines():
        head = _HEADER.match(line)
        if head:
            if current is not None and (current[2] or anonymous_kb == 0):
                found.append((current[0], current[1]))
            start, end, perms, inode, path = head.groups()
            is_file = inode != "0" and path.startswith("/")
            current = (int(start, 16), int(end, 16), perms[3] == "s") if is_file else None
            anonymous_kb = None
        elif current is not None and line.startswith("Anonymous:"):
            anonymous_kb = int(line.split()[1])
    if current is not None and (current[2] or anonymous_kb == 0):
        found.append((current[0], current[1]))
    return sorted(found)


class FilePages:
    """Release the resident pages of arrays that are views of file mappings (see the module's text)."""

    def __init__(self):
        self._spans: list[tuple[int, int]] = []
        self._madvise = None
        self.released = 0  # bytes handed back
        if sys.platform.startswith("linux"):
            self._open()
        self._starts = [s for s, _ in self._spans]

    def _open(self) -> None:
        try:
            with open(f"/proc/{os.getpid()}/smaps", encoding="ascii", errors="replace") as f:
                self._spans = _mappings(f.read())
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            self._madvise = libc.madvise
        except (OSError, AttributeError):
            self._spans, self._madvise = [], None

    def release(self, array: np.ndarray) -> None:
        """Hand back the pages under `array` if they lie in one clean file mapping; otherwise do nothing."""
        if self._madvise is None or not isinstance(array, np.ndarray) or array.nbytes == 0 \
                or not array.flags.c_contiguous:
            return
        start = array.__array_interface__["data"][0]
        end = start + array.nbytes
        i = bisect_right(self._starts, start) - 1
        if i < 0 or not (self._spans[i][0] <= start and end <= self._spans[i][1]):
            return
        # whole pages: the mapping is clean throughout, so a page shared with a neighbour loses nothing either
        page = mmap.PAGESIZE
        first, last = start // page * page, min(-(-end // page) * page, self._spans[i][1])
        if self._madvise(first, last - first, MADV_DONTNEED) == 0:
            self.released += last - first


_GC_LOCK = threading.Lock()
_gc_users = 0
_gc_restore: tuple[int, ...] | None = None  # the thresholds to put back, while we hold the heap frozen


@contextlib.contextmanager
def collections_for_large_graphs() -> Iterator[None]:
    """While entered (in any number of threads at once), the objects that existed before are frozen out of the
    cycle collector (`gc.freeze`): its full passes, a few dozen in a large conversion, then walk only what the
    conversion makes rather than all of torch as well; and the youngest generation is collected ten times less
    often. Both are undone when the last user leaves (`gc.unfreeze` hands the frozen objects back to the oldest
    generation). A process with the collector off, or with objects it froze itself, is left as it is. On a
    module returning the 100,000 rows of an unbind this took 52.6 and 56.2 s down to 47.2 and 48.0 s (two runs
    each, alternated); in a 2-layer LLM export, four full passes over the heap had taken about 1 s of 5. Used
    as a context manager or as a function decorator."""
    global _gc_users, _gc_restore
    with _GC_LOCK:
        if _gc_users == 0:
            thresholds = gc.get_threshold()
            if gc.isenabled() and thresholds[0] > 0 and gc.get_freeze_count() == 0:
                gc.freeze()
                gc.set_threshold(10 * thresholds[0], *thresholds[1:])
                _gc_restore = thresholds
        _gc_users += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _gc_users -= 1
            if _gc_users == 0 and _gc_restore is not None:
                gc.set_threshold(*_gc_restore)
                gc.unfreeze()
                _gc_restore = None
