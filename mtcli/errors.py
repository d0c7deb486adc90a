"""The one exception type for user mistakes. The CLI turns it into a one-line message."""

from __future__ import annotations


class UserError(Exception):
    """A mistake the user can fix (bad file, bad option): shown as one line, no traceback.

    `exit_code` 2 follows the Unix convention for bad usage / bad input.
    """

    exit_code = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class Interrupted(Exception):
    """Training stopped by a signal after saving a resumable checkpoint (exit 130 or 143)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code
