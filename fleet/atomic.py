"""The one way fleetforge puts a report or an inventory on disk: whole, durable, readable.

A reader (CI, Ansible, a Prometheus textfile collector running as another user) sees either the
old file or the new one, never half of one: the text goes to a temporary file in the same folder,
is fsynced, renamed over the target, and the folder is fsynced so the rename survives a crash.
`mkstemp` creates 0600; the file then gets the mode an ordinary `open()` would give it (0666 less
the umask), or keeps the mode of the file it replaces, so an operator's chmod is not undone.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


class AtomicWriteError(OSError):
    """The file could not be written; the target is as it was and no temporary file is left."""

    def __init__(self, path: Path, reason: str, errno: int | None = None) -> None:
        # strerror is the reason alone, as for any OSError, so callers that print
        # "cannot write PATH (strerror)" say why.
        super().__init__(errno, reason)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"cannot write {self.path}: {self.reason}"


def _umask() -> int:
    # os.umask can only be read by setting it; put it straight back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def write_atomic(path: Path, content: str | bytes) -> None:
    """Replace `path` with `content` (str is written as UTF-8). The folder must exist.

    Raises AtomicWriteError (an OSError) naming the path and the reason; nothing is changed then.
    """
    data = content.encode("utf-8") if isinstance(content, str) else content
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise AtomicWriteError(path, "it is a folder")
    if not folder.is_dir():
        raise AtomicWriteError(path, f"folder {folder} does not exist")
    mode = _mode_for(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise AtomicWriteError(path, exc.strerror or type(exc).__name__, exc.errno) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise AtomicWriteError(path, exc.strerror or type(exc).__name__, exc.errno) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(folder)


def _fsync_dir(folder: Path) -> None:
    """Make the rename durable: the new directory entry is on disk only once the folder is synced."""
    try:
        dir_fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # the file is in place; a folder we cannot open for sync is not a failed write
    try:
        os.fsync(dir_fd)
    except OSError:
        pass  # some file systems refuse fsync on a directory (EINVAL); the rename itself succeeded
    finally:
        os.close(dir_fd)
