"""The Debian root every test host boots from: built once with debootstrap, cached as a tarball and
extracted once beside it as the read-only lower layer of every host's overlay root.

The tarball is keyed by a hash of what goes into it, so a change to the package lists builds a new
one and two harnesses that want the same root share it (a file lock stops them building it twice).
Roots of other keys (about 800 MB each, tarball and tree) go once no harness has used them for a
week, unless one still holds or mounts them.

Test hosts have no route off their private subnet, so the root carries what they may install later:
`apt-get install --download-only` fills /var/cache/apt/archives with OFFLINE_DEBS (and their
dependencies) and leaves the signed package lists in place. An `apt install` on a test host then
resolves and verifies against those lists and installs from that cache, without a mirror.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

SUITE = "bookworm"
MIRROR = os.environ.get("FLEETFORGE_TESTHOSTS_MIRROR", "http://deb.debian.org/debian")
CACHE_DIR = Path(os.environ.get("FLEETFORGE_TESTHOSTS_CACHE", "/var/cache/fleetforge-testhosts"))

# Installed in the root: what sshd + Ansible need, plus the Python modules Ansible's apt and
# deb822_repository modules import on the target, plus systemctl for offline unit enabling.
ROOT_PACKAGES = (
    "openssh-server",
    "python3",
    "python3-venv",
    "python3-apt",
    "python3-debian",
    "sudo",
    "iproute2",
    "procps",
    "kmod",
    "systemd",
    "ca-certificates",
    "gnupg",
)
# Downloaded, not installed: the Debian packages the roles install for real on test hosts.
OFFLINE_DEBS = (
    "rdma-core",
    "ibverbs-utils",
    "infiniband-diags",
    "perftest",
    "nvme-cli",
    "tuned",
    "numactl",
    "fio",
    "pciutils",
)
# Bump when the build steps change in a way the package lists do not show.
RECIPE = "4"
# A root of another key unused this long is removed.
STALE_AFTER_S = 7 * 24 * 3600
# What root_key() names roots by: nothing else in the cache folder is ever removed.
_KEY = re.compile(r"[0-9a-f]{16}")


class RootfsUnavailable(RuntimeError):
    """debootstrap cannot work here (not installed and not installable, or no mirror)."""


def root_key() -> str:
    text = "\n".join([RECIPE, SUITE, MIRROR, *ROOT_PACKAGES, "--", *OFFLINE_DEBS])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cached_root_tarball() -> Path:
    """Path of the root tarball, building it first when the cache does not hold it."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tarball = CACHE_DIR / f"{root_key()}.tar"
    with open(CACHE_DIR / f"{root_key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second harness waits here while the first builds
        if not tarball.exists():
            _build(tarball)
    return tarball


def cached_root_tree() -> Path:
    """The cached root extracted once, read-only from then on: the lower layer every test host's
    root overlays (harness.py). Extracting the tarball for each host cost 0.8 CPU-s alone and 3.6 on
    average during a full test run (34 hosts, 121 CPU-s of tar, mostly the kernel's writes); an
    overlay mount costs nothing and a host's writes go to its own upper layer."""
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    tree = CACHE_DIR / f"{root_key()}.root"
    ready = CACHE_DIR / f"{root_key()}.root.ready"
    # Its own lock file (flock on a second open of cached_root_tarball's would wait on this process
    # itself), held from before the tarball is asked for: prune_stale never takes a root in between.
    with open(CACHE_DIR / f"{root_key()}.root.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        tarball = cached_root_tarball()
        if not ready.exists():
            if tree.exists():  # half extracted by a run that was killed
                subprocess.run(["rm", "-rf", "--one-file-system", str(tree)], check=True, timeout=300)
            tree.mkdir()
            subprocess.run(
                ["tar", "--numeric-owner", "-xpf", str(tarball), "-C", str(tree)],
                check=True,
                capture_output=True,
                timeout=600,
            )
        ready.touch()  # also when it was ready: the mark of its last use
    prune_stale(keep=root_key())
    return tree


def prune_stale(keep: str) -> list[str]:
    """Remove the roots of keys other than `keep` whose last use is older than STALE_AFTER_S, and
    return those keys. A root a harness is building or extracting (its lock is held) or that a host
    mounts as its lower layer stays, however old; both are read again once the locks are held, as
    is the last use. Best effort: what cannot be removed now stays for a later run. Only names this
    module writes are touched, whatever else the cache folder holds; the empty lock files stay (a
    harness may have one open)."""
    removed: list[str] = []
    for tarball in sorted(CACHE_DIR.glob("*.tar")):
        key = tarball.stem
        if key == keep or not _KEY.fullmatch(key):
            continue
        try:
            if not _stale(key):
                continue
            with (
                open(CACHE_DIR / f"{key}.lock", "a") as build,
                open(CACHE_DIR / f"{key}.root.lock", "a") as tree_lock,
            ):
                fcntl.flock(build, fcntl.LOCK_EX | fcntl.LOCK_NB)
                fcntl.flock(tree_lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if not _stale(key):
                    continue
                # The mark first: a half-removed tree is never taken for a ready one.
                (CACHE_DIR / f"{key}.root.ready").unlink(missing_ok=True)
                tree = CACHE_DIR / f"{key}.root"
                if tree.exists():
                    subprocess.run(["rm", "-rf", "--one-file-system", str(tree)], check=True, timeout=300)
                tarball.unlink()
        except (BlockingIOError, FileNotFoundError):
            continue
        except (OSError, subprocess.SubprocessError) as exc:
            print(f"rootfs cache: could not remove the root {key} ({exc}); a later run tries again")
            continue
        removed.append(key)
    return removed


def _stale(key: str) -> bool:
    """Unused for STALE_AFTER_S and mounted by no host; FileNotFoundError once it is gone."""
    ready = CACHE_DIR / f"{key}.root.ready"
    last = max((CACHE_DIR / f"{key}.tar").stat().st_mtime, ready.stat().st_mtime if ready.exists() else 0.0)
    mounted = str(CACHE_DIR / f"{key}.root") in Path("/proc/self/mountinfo").read_text()
    return last < time.time() - STALE_AFTER_S and not mounted


def ensure_tools() -> None:
    """debootstrap and ssh-keygen/ssh on the machine running the tests; installed via apt if missing."""
    if not _missing_tools():
        return
    # scripts/test starts several pytest processes at once and each asks here: unlocked, the ones
    # that lost the race for dpkg's lock failed and skipped every host test on a fresh machine.
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "tools.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        missing = _missing_tools()
        if not missing:
            return
        if shutil.which("apt-get") is None:
            raise RootfsUnavailable(f"{', '.join(missing)} missing and no apt-get to install them")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        # Another apt on the machine (not one of ours): wait for its lock rather than fail.
        wait = ["-o", "DPkg::Lock::Timeout=600"]
        for cmd in (
            ["apt-get", *wait, "update", "-qq"],
            ["apt-get", *wait, "install", "-y", "-qq", *missing],
        ):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
            if done.returncode != 0:
                raise RootfsUnavailable(f"`{' '.join(cmd)}` failed: {done.stderr.strip()[-400:]}")


def _missing_tools() -> list[str]:
    """The Debian packages of the tools the harness runs that this machine lacks."""
    needed = {"debootstrap": "debootstrap", "ssh": "openssh-client", "ssh-keygen": "openssh-client"}
    return sorted({pkg for tool, pkg in needed.items() if shutil.which(tool) is None})


def _mirror_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{MIRROR}/dists/{SUITE}/Release", timeout=20) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, TimeoutError, OSError):
        return False


def _build(tarball: Path) -> None:
    ensure_tools()
    if not _mirror_reachable():
        raise RootfsUnavailable(f"Debian mirror {MIRROR} unreachable: cannot debootstrap {SUITE}")
    work = Path(tempfile.mkdtemp(prefix="build-", dir=CACHE_DIR))
    root = work / "root"
    try:
        _run(
            [
                "debootstrap",
                "--variant=minbase",
                f"--include={','.join(ROOT_PACKAGES)}",
                SUITE,
                str(root),
                MIRROR,
            ],
            timeout=1800,
        )
        (root / "etc/apt/sources.list").write_text(f"deb {MIRROR} {SUITE} main\n")
        resolv = root / "etc/resolv.conf"
        resolv.unlink(missing_ok=True)
        shutil.copyfile("/etc/resolv.conf", resolv)  # only while downloading; removed below
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        _run(["chroot", str(root), "apt-get", "update", "-qq"], env=env, timeout=600)
        _run(
            ["chroot", str(root), "apt-get", "install", "-y", "-qq", "--download-only", *OFFLINE_DEBS],
            env=env,
            timeout=900,
        )
        resolv.unlink()
        # Slimmer root, faster copies: no docs, man pages or translations, now or on later installs.
        (root / "etc/dpkg/dpkg.cfg.d/01-fleetforge-nodoc").write_text(
            "path-exclude /usr/share/doc/*\npath-exclude /usr/share/man/*\npath-exclude /usr/share/locale/*\n"
            "path-exclude /usr/share/info/*\npath-include /usr/share/locale/locale.alias\n"
        )
        for sub in ("usr/share/doc", "usr/share/man", "usr/share/locale", "usr/share/info"):
            _run(
                ["find", str(root / sub), "-mindepth", "1", "-not", "-name", "locale.alias", "-delete"],
                timeout=300,
            )
        (root / "var/cache/apt/srcpkgcache.bin").unlink(missing_ok=True)
        # Per-host keys are generated at host start: no two hosts may share the image's host keys.
        for key in (root / "etc/ssh").glob("ssh_host_*"):
            key.unlink()
        (root / "etc/machine-id").write_text("")
        for d in ("run/sshd", "root/.ssh", "var/lib/apt/periodic"):
            (root / d).mkdir(parents=True, exist_ok=True)
        partial = tarball.with_suffix(".tar.partial")
        _run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], timeout=600)
        partial.rename(tarball)
    finally:
        _run(["rm", "-rf", "--one-file-system", str(work)], timeout=600)


def _run(cmd: list[str], timeout: int, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(cmd[:4])} ...` failed ({done.returncode}): {done.stderr[-2000:]}")
