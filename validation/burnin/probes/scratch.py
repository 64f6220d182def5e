"""Scratch files a measurement leaves on disk, named so they can be found again and removed.

A check killed at its timeout (SIGKILL to its process group) runs no `finally`: the storage check's
test file (up to the level's size, 16 GiB at extended) and the gloo rendezvous folder stay behind,
a new one per attempt, until the free-space check fails. So each is named for the host and the
process that made it:

- `<storage path>/.fleetforge-storage-<host>-<pid>.{bin,fio}`
- `<tmp>/fleetforge-gloo-<pid>-<random>/`

and removed twice over: by the runner once the check that made them has ended, whatever its outcome
(`remove_left_by`), and by the next measurement at its start (`sweep_*`), which takes only those
whose process is gone (a runner killed itself cleans nothing). The host is in the storage name
because a storage path may be shared (NFS, Lustre): another node's live process id means nothing
here, so its files are never touched. Only regular files and folders of our own user are removed.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

STORAGE_PREFIX = ".fleetforge-storage-"
STORAGE_SUFFIXES = (".bin", ".fio")
GLOO_PREFIX = "fleetforge-gloo-"
# Also the names written before the host was part of them (<pid> alone): local by assumption.
_STORAGE_NAME = re.compile(
    r"\.fleetforge-storage-(?:(?P<host>[A-Za-z0-9._]+)-)?(?P<pid>[0-9]{1,10})\.(?:bin|fio)"
)
_GLOO_NAME = re.compile(r"fleetforge-gloo-(?P<pid>[0-9]{1,10})-[A-Za-z0-9_]+")


def host_tag() -> str:
    """This host's name as it appears in a scratch file's name: safe characters only, no '-'
    (which ends it)."""
    name = re.sub(r"[^A-Za-z0-9._]", "_", socket.gethostname() or "localhost")[:64]
    return name or "localhost"


def storage_file(path: Path, suffix: str, pid: int | None = None) -> Path:
    """The storage check's test file on `path` for process `pid` (this one by default)."""
    return Path(path) / f"{STORAGE_PREFIX}{host_tag()}-{os.getpid() if pid is None else pid}{suffix}"


def gloo_store_dir(pid: int | None = None) -> str:
    """A fresh, private folder for one all-reduce's gloo file store, named for process `pid`."""
    return tempfile.mkdtemp(prefix=f"{GLOO_PREFIX}{os.getpid() if pid is None else pid}-")


def remove_left_by(pid: int, storage_path: Path | None) -> list[str]:
    """Remove what process `pid` (ended) left: its storage test files and its gloo folders.
    Returns what was removed; never raises."""
    removed: list[str] = []
    if storage_path is not None:
        for suffix in STORAGE_SUFFIXES:
            target = storage_file(storage_path, suffix, pid)
            if _remove_file(target):
                removed.append(str(target))
    removed += _remove_gloo(lambda found: found == pid)
    return removed


def sweep_storage(path: Path) -> list[str]:
    """Remove this host's storage test files on `path` whose process is gone. Never raises."""
    mine, folder = host_tag(), Path(path)
    removed: list[str] = []
    for name, found in _named(folder, _STORAGE_NAME):
        if found["host"] in (None, mine) and not pid_alive(int(found["pid"])) and _remove_file(folder / name):
            removed.append(str(folder / name))
    return removed


def sweep_gloo() -> list[str]:
    """Remove gloo store folders whose process is gone. Never raises."""
    return _remove_gloo(lambda pid: not pid_alive(pid))


def pid_alive(pid: int) -> bool:
    """True unless no process `pid` exists here (a zombie or another user's process is alive)."""
    if pid <= 0:
        return True  # never a scratch file's owner: leave it alone
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _remove_file(target: Path) -> bool:
    try:
        info = target.lstat()
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
            return False
        target.unlink()
    except OSError:
        return False
    return True


def _named(folder: Path, pattern: re.Pattern[str]) -> list[tuple[str, re.Match[str]]]:
    """The entries of `folder` whose whole name `pattern` matches; none when it cannot be listed."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return [(name, found) for name in names if (found := pattern.fullmatch(name)) is not None]


def _remove_gloo(select: Callable[[int], bool]) -> list[str]:
    removed: list[str] = []
    root = Path(tempfile.gettempdir())
    for name, found in _named(root, _GLOO_NAME):
        if not select(int(found["pid"])):
            continue
        folder = str(root / name)
        with contextlib.suppress(OSError):
            info = os.lstat(folder)
            # /tmp is everyone's: only a real folder of our own, never a link planted there.
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            shutil.rmtree(folder)
            removed.append(folder)
    return removed
