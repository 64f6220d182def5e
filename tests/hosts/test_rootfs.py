"""The root cache keeps what is current or in use and drops roots of other keys a week unused."""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts import rootfs

WEEK_AGO = time.time() - rootfs.STALE_AFTER_S - 3600


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(rootfs, "CACHE_DIR", tmp_path)
    return tmp_path


def cached(cache: Path, key: str, last_use: float) -> None:
    """A root as cached_root_tree leaves it: tarball, extracted tree, ready mark, lock files."""
    (cache / f"{key}.tar").write_bytes(b"tar")
    (cache / f"{key}.root" / "etc").mkdir(parents=True)
    (cache / f"{key}.root" / "etc" / "hostname").write_text("root\n")
    for name in (f"{key}.root.ready", f"{key}.lock", f"{key}.root.lock"):
        (cache / name).touch()
    for path in (cache / f"{key}.tar", cache / f"{key}.root.ready"):
        os.utime(path, (last_use, last_use))


def present(cache: Path, key: str) -> bool:
    return (cache / f"{key}.tar").exists() or (cache / f"{key}.root").exists()


def test_a_root_unused_for_a_week_goes_and_the_current_and_recent_ones_stay(cache: Path) -> None:
    cached(cache, "current", WEEK_AGO)
    cached(cache, "stale", WEEK_AGO)
    cached(cache, "recent", time.time() - 3600)
    assert rootfs.prune_stale(keep="current") == ["stale"]
    assert not present(cache, "stale") and not (cache / "stale.root.ready").exists()
    assert present(cache, "current") and present(cache, "recent")


def test_a_root_whose_lock_a_harness_holds_stays(cache: Path) -> None:
    cached(cache, "stale", WEEK_AGO)
    with open(cache / "stale.root.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Another open file description, as another harness's: flock is held per open file.
        assert rootfs.prune_stale(keep="current") == []
    assert present(cache, "stale")
    assert rootfs.prune_stale(keep="current") == ["stale"]


@pytest.fixture
def overlay(cache: Path) -> Iterator[Path]:
    """A host-style overlay mount with the stale root as its lower layer (root only, as test hosts)."""
    if os.geteuid() != 0:
        pytest.skip("mounting an overlay takes root")
    cached(cache, "stale", WEEK_AGO)
    upper, work, merged = (cache / n for n in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        d.mkdir()
    options = f"lowerdir={cache / 'stale.root'},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True, timeout=30)
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True, timeout=30)


def test_a_root_a_host_mounts_stays(cache: Path, overlay: Path) -> None:
    assert rootfs.prune_stale(keep="current") == []
    assert (overlay / "etc" / "hostname").read_text() == "root\n"
