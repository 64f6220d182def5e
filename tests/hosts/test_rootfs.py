"""The root cache keeps what is current or in use and drops roots of other keys a week unused."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.hosts import rootfs

WEEK_AGO = time.time() - rootfs.STALE_AFTER_S - 3600
# Keys as root_key() writes them.
CURRENT, STALE, RECENT = "0" * 16, "5" * 16, "a" * 16


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
    cached(cache, CURRENT, WEEK_AGO)
    cached(cache, STALE, WEEK_AGO)
    cached(cache, RECENT, time.time() - 3600)
    assert rootfs.prune_stale(keep=CURRENT) == [STALE]
    assert not present(cache, STALE) and not (cache / f"{STALE}.root.ready").exists()
    assert present(cache, CURRENT) and present(cache, RECENT)


def test_nothing_but_roots_is_ever_removed_and_a_vanished_one_is_no_error(cache: Path) -> None:
    cached(cache, "backup", WEEK_AGO)  # the cache folder is configurable: it may hold anything
    (cache / f"{STALE}.tar").symlink_to(cache / "gone.tar")  # removed by another harness meanwhile
    assert rootfs.prune_stale(keep=CURRENT) == []
    assert present(cache, "backup")


@pytest.mark.parametrize("lock", [".lock", ".root.lock"], ids=["building", "extracting"])
def test_a_root_whose_lock_a_harness_holds_stays(cache: Path, lock: str) -> None:
    cached(cache, STALE, WEEK_AGO)
    with open(cache / f"{STALE}{lock}", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        # Another open file description, as another harness's: flock is held per open file.
        assert rootfs.prune_stale(keep=CURRENT) == []
    assert present(cache, STALE)
    assert rootfs.prune_stale(keep=CURRENT) == [STALE]


@pytest.fixture
def overlay(cache: Path) -> Iterator[Path]:
    """A host-style overlay mount with the stale root as its lower layer (root only, as test hosts)."""
    if os.geteuid() != 0:
        pytest.skip("mounting an overlay takes root")
    cached(cache, STALE, WEEK_AGO)
    upper, work, merged = (cache / n for n in ("upper", "work", "merged"))
    for d in (upper, work, merged):
        d.mkdir()
    options = f"lowerdir={cache / f'{STALE}.root'},upperdir={upper},workdir={work}"
    subprocess.run(["mount", "-t", "overlay", "overlay", "-o", options, str(merged)], check=True, timeout=30)
    try:
        yield merged
    finally:
        subprocess.run(["umount", str(merged)], check=True, timeout=30)


def test_a_root_a_host_mounts_stays(cache: Path, overlay: Path) -> None:
    assert rootfs.prune_stale(keep=CURRENT) == []
    assert (overlay / "etc" / "hostname").read_text() == "root\n"


# apt-get as dpkg's lock makes it behave: an install while another holds the lock fails at once.
FAKE_APT = """#!/bin/sh
case " $* " in *" install "*) ;; *) exit 0 ;; esac
if ! /bin/mkdir "$FAKE_APT_LOCK" 2>/dev/null; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend" >&2
  exit 100
fi
echo "$*" >> "$FAKE_APT_LOG"
/bin/sleep 0.5
/bin/ln -s /bin/true "$FAKE_APT_BIN/debootstrap"
/bin/rmdir "$FAKE_APT_LOCK"
"""


def test_processes_missing_the_tools_at_once_install_them_once_and_all_go_on(tmp_path: Path) -> None:
    """scripts/test starts its pytest processes together: each finds debootstrap missing on a fresh
    machine, and none may fail (and skip its host tests) because another holds dpkg's lock."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("ssh", "ssh-keygen"):
        (bin_dir / tool).symlink_to("/bin/true")
    (bin_dir / "apt-get").write_text(FAKE_APT)
    (bin_dir / "apt-get").chmod(0o755)
    env = {
        **os.environ,
        "PATH": str(bin_dir),
        "FLEETFORGE_TESTHOSTS_CACHE": str(tmp_path / "cache"),
        "FAKE_APT_LOCK": str(tmp_path / "dpkg.lock"),
        "FAKE_APT_LOG": str(tmp_path / "installs"),
        "FAKE_APT_BIN": str(bin_dir),
    }
    code = "from tests.hosts import rootfs; rootfs.ensure_tools()"
    root = Path(__file__).resolve().parents[2]
    procs = [
        subprocess.Popen([sys.executable, "-c", code], cwd=root, env=env, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    errors = [p.communicate(timeout=60)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errors
    assert (tmp_path / "installs").read_text().splitlines() == [
        "-o DPkg::Lock::Timeout=600 install -y -qq debootstrap"
    ]
