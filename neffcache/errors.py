"""The domain exception tree; the CLI and the HTTP API map these classes to exit codes/statuses.

    NeffcacheError                      (exit 1)
    ├── UsageError                      (exit 2)  bad flags, settings or arguments
    │   ├── ConfigError                           unknown key, bad URL, bad value
    │   └── MatrixError                           malformed matrix file (names file + field)
    ├── CacheMissError                  (exit 3)  requested cells have no entry (partial restore)
    ├── IntegrityError                  (exit 4)  a blob or manifest fails size/sha256/schema checks
    │   ├── ManifestError                         hostile or malformed manifest
    │   ├── ReportError                           hostile or malformed restore report object
    │   └── UntrustedEntryError                   unsigned, or signed by a key not trusted
    ├── FingerprintMismatchError        (exit 5)  entry built for another environment
    ├── UnavailableError                (exit 6)  store or index unreachable after retries
    ├── SchemaOutdatedError             (exit 7)  index schema older than this code
    ├── NotFoundError                   (exit 1)  the one "not found" a store raises
    ├── DeadlineExceededError           (exit 3)  restore ran out of time (treated as partial)
    ├── WorkerError                     (exit 1)  a warm-up failed, crashed or timed out
    └── CompiledAfterRestoreError       (exit 1)  a warm-up against a restored entry compiled
"""

from __future__ import annotations


class NeffcacheError(Exception):
    """Root of every error neffcache raises on purpose."""

    hint: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint


class UsageError(NeffcacheError):
    """Bad flags, arguments or settings."""


class ConfigError(UsageError):
    """A setting is unknown or has a value that cannot be used."""


class MatrixError(UsageError):
    """A matrix file is malformed; the message names the file, the field and what was expected."""


class CacheMissError(NeffcacheError):
    """Some requested cells have no entry for this fingerprint."""


class IntegrityError(NeffcacheError):
    """Stored bytes do not match their recorded size or sha256."""


class ManifestError(IntegrityError):
    """A manifest is malformed or hostile (absolute path, `..`, duplicates, unknown root)."""


class ReportError(IntegrityError):
    """A restore report object is malformed or hostile; ingestion skips it with a warning."""


class UntrustedEntryError(IntegrityError):
    """With trusted keys configured: an entry is unsigned, signed by a key not trusted, or its
    signature does not match its manifest."""


class FingerprintMismatchError(NeffcacheError):
    """An entry was built for a different environment than this host's."""


class UnavailableError(NeffcacheError):
    """The store or the index cannot be reached."""


class SchemaOutdatedError(NeffcacheError):
    """The index schema is older than this code expects."""

    hint = "neffcache db upgrade"


class NotFoundError(NeffcacheError):
    """The object asked for does not exist in the store (the only 'not found' a store raises)."""


class DeadlineExceededError(NeffcacheError):
    """Work stopped because its deadline passed."""


class WorkerError(NeffcacheError):
    """A warm-up subprocess failed, crashed or timed out."""


class CompiledAfterRestoreError(NeffcacheError):
    """A warm-up against a restored entry still compiled something (the cache did not hit)."""


EXIT_CODES: dict[type[BaseException], int] = {
    NeffcacheError: 1,
    UsageError: 2,
    CacheMissError: 3,
    DeadlineExceededError: 3,
    IntegrityError: 4,
    FingerprintMismatchError: 5,
    UnavailableError: 6,
    SchemaOutdatedError: 7,
}


def exit_code_for(exc: BaseException) -> int:
    """Exit code for an exception, resolved by walking its class hierarchy (table order is moot)."""
    for cls in type(exc).__mro__:
        if cls in EXIT_CODES:
            return EXIT_CODES[cls]
    return 1


class ExitRule:
    """The exit rule every use case's result shares: ``exit_code`` is 0 when ``error()`` is
    None, else that error's code (``exit_code_for``). A result overrides ``error()`` with its
    own judgement; one whose outcome is always a success keeps this one."""

    __slots__ = ()

    def error(self) -> NeffcacheError | None:
        """The error the CLI raises for this outcome (None: a success)."""
        return None

    @property
    def exit_code(self) -> int:
        """0 for a success, else the exit code of ``error()``."""
        err = self.error()
        return 0 if err is None else exit_code_for(err)


# The exit-code table as every command's --help shows it (exit_code_for is the mapping).
EXIT_CODE_HELP = """\b
Exit codes (the same for every command):
  0  success, or nothing to do
  1  unexpected error
  2  usage or configuration error
  3  cache miss: some requested cells have no entry (partial restore)
  4  integrity failure: a blob or manifest does not match its sha256/schema
  5  fingerprint mismatch: entries exist only for another environment
  6  store or index unavailable
  7  index schema out of date (run: neffcache db upgrade)
"""
