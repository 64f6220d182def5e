"""Open a file the burn-in writes in its output folder as a file of its own.

A burn-in often runs as root, and its output folder may hold entries someone else planted: a
symbolic or hard link to a file elsewhere, a FIFO. Nothing is written, created or emptied through
one of them.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotOwnFile(OSError):
    """The entry is not a regular file of its own; `what` says what it is instead."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(errno.EPERM, f"{what}; refused", str(path))
        self.what = what


def open_own(path: Path, flags: int) -> int:
    """A blocking descriptor on `path` (created 0644 when missing) opened with `flags` plus
    O_CREAT: never through a symbolic link (O_NOFOLLOW), never hanging on a FIFO (O_NONBLOCK until
    checked), and only a regular file with one link. Raises NotOwnFile, or the OSError of the open."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotOwnFile(path, "a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
            raise NotOwnFile(path, "not a regular file of its own")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
