"""What the runtimes and third-party libraries print: warnings and errors only, unless asked for more.

Native logs. Loading a model, LiteRT's C++ code logs some 30 INFO lines (each accelerator registered, each plugin
tried) and TFLite's "Created TensorFlow Lite XNNPACK delegate for CPU."; LiteRT-LM logs its own. Both runtimes have
a minimum severity of their own, and `apply_native` sets it:

- LiteRT-LM: `litert_lm.set_min_log_severity`, its Python API.
- LiteRT: `LiteRtSetMinLoggerSeverity` on `LiteRtGetDefaultLogger()` (LiteRT's C API) and TFLite's
  `MinimalLogger::minimum_log_severity_` (what `tflite::LoggerOptions::SetMinimumLogSeverity` sets). The
  ai-edge-litert wheel links both into `libpywrap_litert_common.so` without exporting them, so they are found by
  name in that library's symbol table and called (or set) at the address it is loaded at. When anything there is
  not as expected (another platform, a stripped or changed library), nothing is touched and the lines stay.

Third-party output. `third_party_output()` keeps the progress bars and Python warnings that ai-edge-quantizer and
transformers print while the block runs out of stderr; they are logged at debug level instead.

`set_level("info")` (the CLI's --verbose and --debug; LITERT_TORCH_RUNTIME_LOGS=1 in the environment) shows all of
it again.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import io
import logging
import os
import struct
import sys
import warnings
from typing import Iterator

# our level -> (LiteRT's LiteRtLogSeverity, TFLite's tflite::LogSeverity, LiteRT-LM's LogSeverity)
_SEVERITIES = {"verbose": (0, 0, 0), "info": (1, 1, 2), "warning": (2, 2, 3), "error": (3, 3, 4)}
_LITERT_LIBRARY = "libpywrap_litert_common.so"
_SET_SEVERITY = "LiteRtSetMinLoggerSeverity"
_DEFAULT_LOGGER = "LiteRtGetDefaultLogger"
_TFLITE_SEVERITY = "_ZN6tflite16logging_internal13MinimalLogger21minimum_log_severity_E"

_level = "info" if os.environ.get("LITERT_TORCH_RUNTIME_LOGS") == "1" else "warning"
_applied: dict[str, str] = {}  # runtime -> the level it was last given


log = logging.getLogger(__name__)


def set_level(level: str) -> None:
    """The lowest severity of native log line shown from now on: 'verbose', 'info', 'warning' (the default) or
    'error'; at 'info' and below, third-party progress bars and warnings are shown too."""
    global _level
    if level not in _SEVERITIES:
        from litert_torch.errors import InvalidArgumentError

        raise InvalidArgumentError(f"unknown log level {level!r}; one of {', '.join(_SEVERITIES)}")
    _level = level
    apply_native()


def level() -> str:
    return _level


def apply_native() -> None:
    """Give the runtimes that are loaded (LiteRT is loaded here if it is not yet) the current level: what our
    runtime calls before it makes an interpreter or a compiled model."""
    if _applied.get("litert") != _level:
        _set_litert(*_SEVERITIES[_level][:2])
        _applied["litert"] = _level  # tried once per level: where it cannot be set, it stays as it is
    if "litert_lm" in sys.modules and _applied.get("litert_lm") != _level:
        import litert_lm

        if hasattr(litert_lm, "set_min_log_severity"):
            litert_lm.set_min_log_severity(litert_lm.LogSeverity(_SEVERITIES[_level][2]))
            _applied["litert_lm"] = _level


@contextlib.contextmanager
def third_party_output() -> Iterator[None]:
    """Keep what third-party code writes to sys.stderr (tqdm's progress bars) and the Python warnings it raises
    out of the output while the block runs, logging them at debug level; at level 'info' or below, let them
    through."""
    if _level in ("info", "verbose"):
        yield
        return
    captured = io.StringIO()
    with warnings.catch_warnings(record=True) as raised, contextlib.redirect_stderr(captured):
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in raised:
                log.debug("%s: %s (%s:%s)", w.category.__name__, w.message, w.filename, w.lineno)
            if captured.getvalue().strip():
                log.debug("third-party output:\n%s", captured.getvalue())


def _set_litert(litert_severity: int, tflite_severity: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    import ai_edge_litert.interpreter  # noqa: F401 - loads the library

    path = os.path.join(os.path.dirname(ai_edge_litert.interpreter.__file__), _LITERT_LIBRARY)
    base = _load_address(path)
    if base is None:
        return False
    symbols = _symbols(path)
    if set(symbols) != {_SET_SEVERITY, _DEFAULT_LOGGER, _TFLITE_SEVERITY}:
        return False
    tflite = ctypes.c_int.from_address(base + symbols[_TFLITE_SEVERITY])
    if not 0 <= tflite.value <= 4:  # not TFLite's severity: leave it
        return False
    logger = ctypes.CFUNCTYPE(ctypes.c_void_p)(base + symbols[_DEFAULT_LOGGER])()
    if not logger:
        return False
    status = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int)(base + symbols[_SET_SEVERITY])(
        logger, litert_severity)
    tflite.value = tflite_severity
    return status == 0


def _load_address(path: str) -> int | None:
    """Where the library at `path` is mapped in this process (its first mapping, at file offset 0)."""
    real = os.path.realpath(path)
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and int(fields[2], 16) == 0 and os.path.realpath(fields[5].strip()) == real:
                    return int(fields[0].split("-")[0], 16)
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def _symbols(path: str) -> dict[str, int]:
    """The addresses (relative to the load address) of our three names in an ELF64 library's symbol table: the
    two functions and the 4-byte variable, each with the kind and size it should have."""
    wanted = {_SET_SEVERITY: (2, None), _DEFAULT_LOGGER: (2, None), _TFLITE_SEVERITY: (1, 4)}  # STT_FUNC, OBJECT
    with open(path, "rb") as f:
        data = f.read()
    if data[:6] != b"\x7fELF\x02\x01":  # 64-bit, little-endian
        return {}
    section_offset, = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, section_offset + i * entry_size) for i in range(count)]
    found: dict[str, int] = {}
    for _, kind, _, _, offset, size, link, _, _, _ in sections:
        if kind != 2:  # SHT_SYMTAB
            continue
        names = sections[link][4]
        for entry in range(offset, offset + size, 24):
            name, info, _, _, value, length = struct.unpack_from("<IBBHQQ", data, entry)
            start = names + name
            symbol = data[start:data.index(b"\0", start)].decode("ascii", "replace")
            if symbol in wanted and wanted[symbol][0] == info & 0xF and wanted[symbol][1] in (None, length):
                found[symbol] = value
    return found
