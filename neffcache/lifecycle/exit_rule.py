"""The exit rule every lifecycle result shares: its ``error()`` decides the exit code."""

from __future__ import annotations

from neffcache.errors import NeffcacheError, exit_code_for


class ExitRule:
    """A result's exit rule: ``exit_code`` is 0 when ``error()`` is None, else that error's code
    (``errors.exit_code_for``). Results whose outcome is always a success keep this ``error()``."""

    __slots__ = ()

    def error(self) -> NeffcacheError | None:
        """The error the CLI raises for this outcome (None: a success)."""
        return None

    @property
    def exit_code(self) -> int:
        """0 for a success, else the exit code of ``error()``."""
        err = self.error()
        return 0 if err is None else exit_code_for(err)
