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
    ├── StoppedError                    (exit 1)  work stopped at a safe point: its stop was set
    ├── WorkerError                     (exit 1)  a warm-up failed, crashed or timed out
    └── CompiledAfterRestoreError       (exit 1)  a warm-up against a restored entry compiled
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


class NeffcacheError(Exception):
    """Root of every error neffcache raises on purpose."""

    hint: str | None = None
    environment: Mapping[str, str] = MappingProxyType({})  # a restore's cache variables

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        if hint is not None:
            self.hint = hint

    @property
    def exit_code(self) -> int:
        return exit_code_for(self)


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


class StoppedError(NeffcacheError):
    """Work stopped at a safe point because its caller's stop event was set (nothing
    half-written: what it wrote is content-addressed, and its commit point was not reached)."""


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
    return by_class(EXIT_CODES, exc, 1)


def by_class(table: Mapping[type[BaseException], int], exc: BaseException, default: int) -> int:
    """The value of ``exc``'s nearest class in the table."""
    return next((table[cls] for cls in type(exc).__mro__ if cls in table), default)


class ExitRule:
    """Every use case's result: ``exit_code`` is 0 when ``error()`` is None, else that error's
    code; a result that can fail overrides ``error()``."""

    __slots__ = ()

    def error(self) -> NeffcacheError | None:
        """The error the CLI raises for this outcome (None: a success)."""
        return None

    @property
    def exit_code(self) -> int:
        err = self.error()
        return 0 if err is None else exit_code_for(err)


def repair_hint(store_url: str) -> str:
    """The hint for damage found in a store: the fix, the workaround and the listing."""
    import shlex

    url = shlex.quote(store_url)
    return (f"neffcache repair --store {url} --from GOOD_STORE_OR_bundle:FILE rewrites the "
            f"damaged objects (neffcache verify --store {url} lists them); until then "
            f"restore --mirror GOOD_STORE reads them from there")


# every command's --help (EXIT_CODE_HELP) and restore's (restore_exit_rules) are made from it
EXIT_MEANINGS: dict[int, str] = {
    0: "success, or nothing to do",
    1: "unexpected error, or a file could not be written",
    2: "usage or configuration error (bad flag, matrix or config; a DIR not writable)",
    3: "cache miss: some requested cells have no entry, or the deadline stopped a restore",
    4: "integrity failure: a blob or manifest does not match its sha256/schema",
    5: "fingerprint mismatch: entries exist only for another environment",
    6: "store or index unavailable",
    7: "index schema out of date (run: neffcache db upgrade)",
}
EXIT_CODE_HELP = "\b\nExit codes (the same for every command):\n" + "".join(
    f"  {code}  {meaning}\n" for code, meaning in EXIT_MEANINGS.items())


def restore_exit_rules() -> str:
    """Restore's exit rule, in the order it applies."""
    rules = [
        (IntegrityError, "a manifest was rejected or a blob was missing, corrupt or truncated "
                         "(that file is never installed)"),
        (UsageError, "DIR (or a cache root in it) cannot be created or written, e.g. read-only"),
        (NeffcacheError, "a file could not be written under DIR"),
        (UnavailableError, "the store could not be reached"),
        (DeadlineExceededError, "the deadline stopped the restore"),
        (FingerprintMismatchError, "no requested cell could be restored and some missing cells "
                                   "were built for another fingerprint (the hint is a `neffcache "
                                   "fingerprint --explain KEY` command carrying this restore's "
                                   "--python and --store, shell-quoted: run as printed, it "
                                   "names the fields that differ)"),
        (CacheMissError, "some cells have no entry")]
    return "; ".join(f"{EXIT_CODES[cls]} {text}" for cls, text in rules) + \
        "; 0 every requested cell is in place."
