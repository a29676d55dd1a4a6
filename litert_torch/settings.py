"""`litert_torch.config`: process-wide settings, as the official litert-torch's `config` object has them.

Each is read from (and written to) an environment variable, so child processes inherit it.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("litert_torch")

_TRUE = ("1", "y", "yes", "t", "true", "on")
_FALSE = ("0", "n", "no", "f", "false", "off")


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in _TRUE or value in _FALSE:
        return value in _TRUE
    log.warning("ignoring %s=%r (not a yes/no value)", name, value)
    return default


class Config:
    """litert_torch.config.show_progress = False, ..."""

    @property
    def in_oss(self) -> bool:
        """True: this is the open-source package (the official tests skip Google-internal cases on it)."""
        return True

    @property
    def show_progress(self) -> bool:
        """Whether `convert` logs each stage as it starts (logger "litert_torch", level INFO);
        LITERT_TORCH_SHOW_PROGRESS. Off by default; the CLI has its own progress display."""
        return _flag("LITERT_TORCH_SHOW_PROGRESS", False)

    @show_progress.setter
    def show_progress(self, value: bool) -> None:
        os.environ["LITERT_TORCH_SHOW_PROGRESS"] = "y" if value else "n"

    @property
    def silence_torch_logs(self) -> bool:
        """Whether torch.export's own warnings are kept quiet during conversion (our errors still say what
        failed); LITERT_TORCH_SILENCE_TORCH_LOGS, on by default."""
        return _flag("LITERT_TORCH_SILENCE_TORCH_LOGS", True)

    @silence_torch_logs.setter
    def silence_torch_logs(self, value: bool) -> None:
        os.environ["LITERT_TORCH_SILENCE_TORCH_LOGS"] = "y" if value else "n"

    def __repr__(self) -> str:
        return (f"Config(in_oss={self.in_oss}, show_progress={self.show_progress}, "
                f"silence_torch_logs={self.silence_torch_logs})")


config = Config()
