"""What `litert-convert` prints besides its results: errors as a short paragraph with their exit code, progress
(a spinner or bar on a terminal, timed lines in a log), and the console they go to."""

from __future__ import annotations

import functools
import sys
import time
import traceback
from typing import TYPE_CHECKING, Callable

import click

from litert_convert.errors import BadInput, Failure

if TYPE_CHECKING:
    from rich.console import Console
    from rich.status import Status


def make_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)  # long lines (paths) unbroken in logs


def handled(fn: Callable) -> Callable:
    """Turn errors into a short paragraph and an exit code (a traceback only with --debug)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from litert_torch.errors import (
            CalibrationError, ConversionError, InvalidArgumentError, LiteRTTorchError, ModelFileError,
            ModelInputError, OnnxError,
        )

        debug = kwargs.get("debug", False)
        try:
            return fn(*args, **kwargs)
        except (BadInput, ModelFileError, ModelInputError, CalibrationError, OnnxError, InvalidArgumentError) as exc:
            report(exc, debug, "error", BAD_INPUT_LINES)
            hint = getattr(exc, "hint", None)
            if hint:
                click.echo(f"hint: {hint}", err=True)
            sys.exit(2)
        except Failure as exc:
            report(exc, debug, "failed")
            sys.exit(1)
        except ConversionError as exc:
            report(exc, debug, "conversion failed")
            sys.exit(1)
        except LiteRTTorchError as exc:
            report(exc, debug, "error")
            sys.exit(1)
        except (click.exceptions.Exit, click.exceptions.ClickException, SystemExit):
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:  # noqa: BLE001 - an error we did not foresee: say so plainly
            report(exc, debug, "internal error")
            if not debug:
                click.echo("(run again with --debug for the traceback)", err=True)
            sys.exit(1)

    return wrapper


def quiet_torch(debug: bool) -> None:
    """Without --debug, torch's own log lines (warnings with stack traces from torch.export, ...) stay out of the
    output: our error message says what went wrong. (--debug and --verbose also show the runtimes' INFO lines:
    litert_torch.logs.)"""
    if debug:
        return
    import logging

    import torch._logging

    torch._logging.set_logs(all=logging.ERROR)


# An error is a short paragraph (--debug prints all of it): bad input (exit 2) a few lines, a failed conversion
# (exit 1) up to a list of the ops it could not lower with their source lines.
MAX_LINES, BAD_INPUT_LINES, MAX_LINE = 24, 6, 400


def bounded(message: str, max_lines: int = MAX_LINES) -> str:
    """At most `max_lines` lines of at most MAX_LINE characters (a torch error can quote a whole graph)."""
    lines = [line if len(line) <= MAX_LINE else line[:MAX_LINE] + f" ... ({len(line) - MAX_LINE} more characters)"
             for line in message.splitlines() or [""]]
    if len(lines) > max_lines:
        lines = lines[:max_lines - 1] + [f"... ({len(lines) - max_lines + 1} more lines; --debug shows them)"]
    return "\n".join(lines)


def report(exc: BaseException, debug: bool, label: str, max_lines: int = MAX_LINES) -> None:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    message = str(exc) if str(exc) else type(exc).__name__
    if label == "internal error":
        message = f"{type(exc).__name__}: {message}"
    click.echo(f"{label}: {message}" if debug else bounded(f"{label}: {message}", max_lines), err=True)


class NoStatus:
    def update(self, *args, **kwargs) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class LogStatus:
    """Progress for a log (stderr not a terminal): silent while the work is short; once it has run
    `after` seconds, a line per stage as it starts, and a line each `every` seconds a stage goes on."""

    def __init__(self, console, message: str, after: float = 10.0, every: float = 30.0):
        import threading

        self.console, self.message, self.after, self.every = console, message, after, every
        self.start = self.stage_start = time.perf_counter()
        self.next_note = after
        self.lock, self.done = threading.Lock(), threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _say(self, now: float, text: str) -> None:
        self.console.print(f"[{now - self.start:6.1f} s] {text}")

    def _watch(self) -> None:
        while not self.done.wait(0.5):
            with self.lock:
                now = time.perf_counter()
                if now - self.start >= self.next_note:
                    self._say(now, f"{self.message} (for {now - self.stage_start:.0f} s)")
                    self.next_note = now - self.start + self.every

    def update(self, message: str, *args, **kwargs) -> None:
        with self.lock:
            now = time.perf_counter()
            self.message, self.stage_start = message, now
            if now - self.start >= self.after:
                self._say(now, message)
                self.next_note = now - self.start + self.every

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join()
        return False


def open_status(console: Console, quiet: bool, message: str) -> NoStatus | LogStatus | Status:
    if quiet:
        return NoStatus()
    if not console.is_terminal:
        return LogStatus(console, message)
    return console.status(message)


class ProgressBar:
    """A rich progress bar on a terminal; nothing otherwise."""

    def __init__(self, console, quiet: bool, label: str, total: int):
        self.console, self.quiet, self.label, self.total = console, quiet, label, total
        self.bar = None

    def __enter__(self):
        if self.quiet or not self.console.is_terminal:
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                            console=self.console, transient=True)
        self.bar.start()
        task = self.bar.add_task(self.label, total=self.total)
        return lambda: self.bar.advance(task)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False
