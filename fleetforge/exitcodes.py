"""Exit codes, stable for CI. Documented in docs/exit-codes.md; change both together."""

import errno

OK = 0
REJECTED = 1  # burn-in: a check failed its floor; gate: a node was rejected
INCOMPLETE = 2  # burn-in: a check errored or timed out; gate: results missing or unreadable
BUDGET_SPENT = 3  # bringup: rounds, wall time or replacements spent (or only patterns left), not READY
USAGE = 64  # EX_USAGE: bad command line
DATA = 65  # EX_DATAERR: the spec or another input file is invalid
NO_INPUT = 66  # EX_NOINPUT: an input file does not exist or cannot be read
UNAVAILABLE = 69  # EX_UNAVAILABLE: an optional dependency (pulumi, ansible, torch) is missing
SOFTWARE = 70  # EX_SOFTWARE: an internal error; a bug report is welcome
CANT_CREATE = 73  # EX_CANTCREAT: an output cannot be created (read-only folder, held by another run)
IO_ERROR = 74  # EX_IOERR: writing an output failed part way (disk full, I/O error)
ACTION_FAILED = 75  # EX_TEMPFAIL: gate --act: an action on a rejected node failed; retry or act by hand
INTERRUPTED = 130

# A verdict (burn-in summary or gate outcome) -> its exit code.
VERDICT = {"ok": OK, "rejected": REJECTED, "incomplete": INCOMPLETE}


def write_failed(exc: OSError) -> int:
    """The code for an output that could not be written: the place cannot take the file (73), or
    the write failed part way (74: disk full, quota, I/O error)."""
    return IO_ERROR if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT) else CANT_CREATE
