"""One error base class for everything perfgate raises on purpose, and its exit codes.

Exit codes (documented in README.md, mapped only by :mod:`perfgate.cli`):

====  =====================================================================
 0    pass: every gated metric unchanged or improved
 1    regression: at least one gated metric regressed
 2    usage or policy error (bad option, bad YAML, unknown key)
 3    invalid capture: missing / empty / truncated file, unknown header,
      failed self-check. Nothing is compared, nothing is written.
 4    no baseline, or a baseline that cannot be read / is incompatible
 5    store error (baseline or history write failed; nothing half-written),
      or a damaged baseline store (``check`` reports DAMAGED_BASELINE), or
      one that cannot be opened (``check`` reports STORE_ERROR)
====  =====================================================================
"""
from __future__ import annotations

import re

EXIT_PASS = 0
EXIT_REGRESSION = 1
EXIT_USAGE = 2
EXIT_INVALID_CAPTURE = 3
EXIT_NO_BASELINE = 4
EXIT_STORE = 5


# C0 controls but TAB and LF, DEL and the C1 controls (\x9b is a CSI on some terminals)
_CONTROL_RUN = re.compile(r"([\x00-\x08\x0b-\x1f\x7f-\x9f])\1*")


def printable(text):
    """``text`` with every control character written as its escape (``\\x1b``), a run of one
    written once with its length (``\\x00×96``); TAB and LF kept. Error texts quote cells and
    parser excerpts of damaged files: raw, an ESC or NUL would reach the terminal, the PR comment
    and JUnit. Non-text passes through unchanged."""
    if not isinstance(text, str):
        return text

    def esc(m):
        n = len(m.group(0))
        return f"\\x{ord(m.group(1)):02x}" + (f"×{n}" if n > 1 else "")
    return _CONTROL_RUN.sub(esc, text)


class PerfgateError(Exception):
    """Base of every deliberate perfgate error.

    Args:
        message: one full sentence saying what is wrong.
        path: the file (or directory) the problem is in, if any.
        row: 1-based data row number in that file (header excluded), if any.
        byte_offset: byte offset into the file, for JSON errors.
        hint: what the user can do about it.

    ``message``, ``path`` and ``hint`` are kept :func:`printable` however they are set (callers
    assign ``hint`` after construction).
    """

    exit_code = EXIT_USAGE
    kind = "error"

    def __setattr__(self, name, value):
        super().__setattr__(name, printable(value) if name in ("message", "path", "hint") else value)

    def __init__(self, message: str, *, path=None, row: int | None = None,
                 byte_offset: int | None = None, hint: str | None = None):
        self.message = message
        self.path = str(path) if path is not None else None
        self.row = row
        self.byte_offset = byte_offset
        self.hint = hint
        super().__init__(self.render())

    def render(self) -> str:
        where = ""
        if self.path:
            where = self.path
            if self.row is not None:
                where += f" row {self.row}"
            if self.byte_offset is not None:
                where += f" byte {self.byte_offset}"
            where += ": "
        text = where + self.message
        if self.hint:
            text += f" (hint: {self.hint})"
        return text

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "path": self.path, "row": self.row,
                "byte_offset": self.byte_offset, "hint": self.hint, "exit_code": self.exit_code}


class UsageError(PerfgateError):
    """Bad command-line usage or arguments (exit 2)."""
    exit_code = EXIT_USAGE
    kind = "usage_error"


#: optional parts of perfgate: the extra to install and the module it brings (pyproject.toml)
EXTRAS = {"html": "matplotlib", "xlsx": "openpyxl", "dask": "distributed"}


def require_extra(extra: str, what: str):
    """Import and return the module of an optional part of perfgate (``EXTRAS``).

    Raises:
        UsageError: the module is not installed (exit 2); the message names ``what`` needs it
            and the commands that install it (the module itself, or the extra from a clone:
            perfgate is not on PyPI).
    """
    import importlib
    module = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(f"{what} needs {module}, which is not installed (an optional part of perfgate)",
                         hint=f"pip install {module} (the '{extra}' extra: pip install '.[{extra}]' from a clone)") from None


#: perfgate's required dependencies (pyproject.toml ``dependencies``): the module imported -> the
#: requirement that installs it
REQUIRED = {"pandas": "pandas>=2.2.2", "numpy": "numpy>=2.0", "pyarrow": "pyarrow>=16", "orjson": "orjson>=3.8",
            "msgspec": "msgspec>=0.14", "ijson": "ijson>=3.2", "yaml": "PyYAML>=6", "click": "click>=8.1",
            "junit_xml": "junit-xml>=1.9", "sqlite_utils": "sqlite-utils>=4.0", "scipy": "scipy>=1.10",
            "ruptures": "ruptures>=1.1.8", "rich": "rich>=13", "github3": "github3.py>=4"}


def missing_dependency(e: BaseException) -> "UsageError | None":
    """The usage error (exit 2) for an ImportError of one of perfgate's dependencies, or None.

    ``e.name``'s top-level module decides: one of :data:`REQUIRED` or of the optional parts
    (:data:`EXTRAS`) is an environment problem, not a bug in perfgate; the message names the
    package and the hint the command that installs it into the running interpreter. Any other
    ImportError (a perfgate module, a module perfgate does not depend on) is None: it stays an
    internal error (exit 70).
    """
    import sys
    if not isinstance(e, ImportError) or not e.name:
        return None
    top = e.name.split(".")[0]
    extra = next((x for x, m in EXTRAS.items() if m == top), None)
    requirement = REQUIRED.get(top) or (top if extra else None)
    if requirement is None:
        return None
    what = "is not installed" if isinstance(e, ModuleNotFoundError) else f"cannot be imported ({e})"
    part = f"the '{extra}' extra of perfgate" if extra else "a dependency of perfgate"
    return UsageError(f"{top} {what}: it is {part}, and this Python ({sys.executable}) does not have it",
                      hint=f"{sys.executable} -m pip install '{requirement}'; or reinstall perfgate from "
                           f"its clone: pip install .")


class PolicyError(PerfgateError):
    """The policy file is malformed; the message names file and key (exit 2)."""
    exit_code = EXIT_USAGE
    kind = "policy_error"


class InvalidCaptureError(PerfgateError):
    """The capture cannot be trusted: nothing is compared and nothing is written (exit 3).

    ``problems`` holds every individual problem found (each a PerfgateError-like dict)
    when more than one was collected before failing closed.
    """
    exit_code = EXIT_INVALID_CAPTURE
    kind = "invalid_capture"

    def __init__(self, message: str, *, problems: list | None = None, **kw):
        self.problems = list(problems or [])
        super().__init__(message, **kw)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["problems"] = self.problems
        return d

    @classmethod
    def combine(cls, problems: list) -> "InvalidCaptureError":
        """One error for several per-rank problems: the first one's message (with a count of
        the others) and location; all of them in ``problems``."""
        first = problems[0]
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        return cls(first.message + more, path=first.path, row=first.row, byte_offset=first.byte_offset,
                   hint=first.hint, problems=[p.to_dict() for p in problems])


class NoBaselineError(PerfgateError):
    """No stored baseline of that name, or it is unreadable / of another schema (exit 4)."""
    exit_code = EXIT_NO_BASELINE
    kind = "no_baseline"


class IncompatibleBaselineError(NoBaselineError):
    """A stored baseline exists and is intact but holds a fingerprint schema this perfgate does
    not read (exit 4, INCOMPATIBLE_BASELINE): re-record it with this perfgate version. Never
    forgiven by ``--no-baseline-ok`` (the baseline is there; it cannot judge). A NoBaselineError
    subclass so ``baseline list`` lists it and ``baseline save`` replaces it."""
    kind = "incompatible_baseline"


class StoreError(PerfgateError):
    """A write to the baseline store or history failed; nothing was half-written (exit 5)."""
    exit_code = EXIT_STORE
    kind = "store_error"


class StoreUnopenableError(StoreError):
    """The store cannot be opened at all, which is not damage: a history database path that is a
    directory or lies under a regular file, a file SQLite cannot open (permissions, a read-only
    location without the WAL's side files). Exit 5 and the same words as any store error
    ("store error: cannot open the history database ..."); ``check`` reports it as STORE_ERROR,
    never DAMAGED_BASELINE, and ``--no-baseline-ok`` never passes it."""
    kind = "store_error"


class CorruptBaselineError(StoreError):
    """A stored baseline file exists but is damaged: unreadable, not UTF-8, not JSON, without the
    perfgate format marker, or with a malformed fingerprint (exit 5). Never NO_BASELINE: a damaged
    store must not pass a check under ``--no-baseline-ok``. ``baseline save`` replaces it."""
    kind = "corrupt_baseline"


def path_too_long(path) -> str | None:
    """Why ``path`` cannot name anything on this system, or None: a component longer than the
    file system's name limit (``NAME_MAX``, 255 bytes on Linux) or the whole path longer than
    ``PATH_MAX`` (4096). Judged on the text, before the path is used (``os.stat`` raises
    ENAMETOOLONG for it, which would surface as an internal error, exit 70)."""
    import os
    text = os.fsencode(str(path))
    name_max, path_max = 255, 4096
    try:
        name_max = os.pathconf("/", "PC_NAME_MAX")
        path_max = os.pathconf("/", "PC_PATH_MAX")
    except (OSError, ValueError, AttributeError):
        pass
    long = next((c for c in text.split(b"/") if len(c) > name_max), None)
    if long is not None:
        return (f"a path component is {len(long)} bytes long, more than the file system's {name_max}-byte "
                f"name limit ({os.fsdecode(long[:24])}...)")
    if len(text) > path_max:
        return f"the path is {len(text)} bytes long, more than the system's {path_max}-byte limit"
    return None
