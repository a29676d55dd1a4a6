"""Errors the CLI turns into exit codes: BadInput -> 2 (bad usage or input), Failure -> 1."""


class BadInput(Exception):
    """A missing or malformed file, source or option: exit code 2."""

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.hint = hint


class Failure(Exception):
    """The command ran and the answer is no (validation failed): exit code 1."""
