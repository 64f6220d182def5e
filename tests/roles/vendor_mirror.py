"""A local stand-in for the vendors' apt repositories, built from tests/roles/vendor_packages.yaml.

Each repository keeps the vendor's URL path (host name dropped), layout (flat or dists/) and
signature (signed with a throwaway key generated per build, or unsigned), and carries placeholder
packages under the vendors' real names, versions, epochs, architectures and Depends. Debian's own
tools build it (dpkg-deb, dpkg-scanpackages, gpg) and apt resolves it, so a wrong name, pin, epoch,
layout or signature setting fails against the mirror as it would against the vendor.

    root = build_mirror()                       # cached under ~/.cache/fleetforge/mirror/<hash>
    with serve(root, "10.77.0.1") as mirror:    # threaded HTTP server on the given address
        extra_vars = mirror.role_vars()         # nvidia_driver_cuda_repo_base, ... -> the mirror

The rpm side (RHEL 9 repositories: rpmbuild placeholders, rpmsign where the vendor signs packages,
createrepo_c metadata, repomd.xml.asc where the vendor signs metadata) is built too when rpmbuild,
rpmsign and createrepo_c are installed (Debian: rpm, createrepo-c).

Needs dpkg-dev (dpkg-scanpackages), dpkg (dpkg-deb) and gnupg; no root, no network.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import http.server
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from email.utils import formatdate
from functools import partial
from pathlib import Path
from typing import Any

import yaml

TABLE = Path(__file__).with_name("vendor_packages.yaml")
TOOLS = ("dpkg-deb", "dpkg-scanpackages", "gpg")
RPM_TOOLS = ("rpmbuild", "rpmsign", "createrepo_c")
RPM_ARCHES = ("x86_64", "noarch")
RPM_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
RPM_VR_RE = re.compile(r"^[A-Za-z0-9._+~]+$")
MARKER_DIR = "usr/share/fleetforge-mirror"
ARCHES = ("amd64", "arm64")
STALE_AFTER_S = 7 * 24 * 3600
# Debian policy 5.6.1 (package names) and 5.6.12 (version: [epoch:]upstream[-revision]).
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
VERSION_RE = re.compile(r"^(?:(?P<epoch>[0-9]+):)?[0-9][A-Za-z0-9.+~:-]*$")
PATH_RE = re.compile(r"^[A-Za-z0-9._+-]+(?:/[A-Za-z0-9._+-]+)*$")
SUITE_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
UNIT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9@._-]*\.service$")
# Where bookworm and jammy/noble packages ship their systemd units.
UNIT_DIR = "lib/systemd/system"


class MirrorError(Exception):
    """The table is malformed or a build tool is missing or failed."""


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    arch: str
    depends: str = ""
    provides: str = ""
    source: str = ""
    units: tuple[str, ...] = ()

    @property
    def deb_name(self) -> str:
        # dpkg's own file naming drops the epoch (it is not allowed in file names on every system).
        version = self.version.split(":", 1)[-1]
        return f"{self.name}_{version}_{self.arch}.deb"


@dataclass(frozen=True)
class Vendor:
    id: str
    name: str
    host: str
    signing_key: str | None
    key_paths: tuple[str, ...]
    role_vars: dict[str, str]


@dataclass(frozen=True)
class Repository:
    vendor: Vendor
    path: str
    layout: str
    architectures: tuple[str, ...]
    packages: tuple[Package, ...]
    suites: tuple[str, ...] = ()
    component: str = ""
    key_file: str = ""
    source: str = ""

    @property
    def signed(self) -> bool:
        return self.vendor.signing_key is not None


@dataclass(frozen=True)
class RpmPackage:
    name: str
    epoch: int | None
    version: str
    release: str
    arch: str
    requires: str = ""
    provides: str = ""
    source: str = ""

    @property
    def evr(self) -> str:
        head = f"{self.epoch}:" if self.epoch is not None else ""
        return f"{head}{self.version}-{self.release}"

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.evr}.{self.arch}"


@dataclass(frozen=True)
class RpmRepository:
    vendor: Vendor
    path: str
    packages_dir: str
    gpgcheck: bool
    repo_gpgcheck: bool
    packages: tuple[RpmPackage, ...]
    key_file: str = ""
    source: str = ""


@dataclass(frozen=True)
class Table:
    vendors: dict[str, Vendor]
    repositories: tuple[Repository, ...]
    rpm_repositories: tuple[RpmRepository, ...]
    digest: str = field(compare=False)

    def repository(self, path: str) -> Repository:
        for repo in self.repositories:
            if repo.path == path:
                return repo
        raise KeyError(f"no repository at {path!r} in {TABLE.name}")

    def rpm_repository(self, path: str) -> RpmRepository:
        for repo in self.rpm_repositories:
            if repo.path == path:
                return repo
        raise KeyError(f"no rpm repository at {path!r} in {TABLE.name}")


def _need(mapping: Any, key: str, where: str, kind: type | tuple[type, ...] = str) -> Any:
    if not isinstance(mapping, dict) or key not in mapping:
        raise MirrorError(f"{where}: missing {key!r}")
    value = mapping[key]
    if not isinstance(value, kind) or (isinstance(value, str) and not value):
        raise MirrorError(f"{where}.{key}: {value!r} is not a non-empty {getattr(kind, '__name__', kind)}")
    return value


def _package(raw: Any, where: str, arches: tuple[str, ...]) -> list[Package]:
    name = _need(raw, "name", where)
    version = str(_need(raw, "version", where, (str, int, float)))
    arch = _need(raw, "arch", where)
    if not NAME_RE.match(name):
        raise MirrorError(f"{where}.name: {name!r} is not a Debian package name ([a-z0-9][a-z0-9+.-]+)")
    if not VERSION_RE.match(version):
        raise MirrorError(
            f"{where}.version: {version!r} is not a Debian version ([epoch:]upstream[-revision])"
        )
    if arch not in (*ARCHES, "all", "native"):
        raise MirrorError(f"{where}.arch: {arch!r}: allowed amd64, arm64, all, native")
    extra = {k: raw.get(k, "") for k in ("depends", "provides")}
    for key, value in extra.items():
        if not isinstance(value, str) or "\n" in value.strip():
            raise MirrorError(f"{where}.{key}: {value!r} is not a one-line string")
    unknown = set(raw) - {"name", "version", "arch", "depends", "provides", "units", "source"}
    if unknown:
        raise MirrorError(f"{where}: unknown keys {sorted(unknown)}")
    units = raw.get("units") or []
    if not isinstance(units, list) or not all(isinstance(u, str) and UNIT_RE.match(u) for u in units):
        raise MirrorError(f"{where}.units: {units!r} is not a list of systemd unit names (<name>.service)")
    _need(raw, "source", where)
    chosen = arches if arch == "native" else (arch,)
    return [
        Package(
            name,
            version,
            a,
            " ".join(extra["depends"].split()),
            extra["provides"].strip(),
            raw["source"],
            tuple(units),
        )
        for a in chosen
        if a == "all" or a in arches
    ]


def load_table(path: Path = TABLE) -> Table:
    """The table, validated: every error names the entry and what is allowed."""
    text = path.read_bytes()
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise MirrorError(f"{path}: not YAML: {exc}") from None
    vendors: dict[str, Vendor] = {}
    for vid, raw in (_need(doc, "vendors", path.name, dict)).items():
        where = f"vendors.{vid}"
        key_paths = tuple(raw.get("key_paths") or ())
        role_vars = raw.get("role_vars") or {}
        for p in (*key_paths, *role_vars.values()):
            if not isinstance(p, str) or not PATH_RE.match(p):
                raise MirrorError(f"{where}: path {p!r} is not a relative URL path")
        signing_key = raw.get("signing_key")
        if signing_key is not None and not (isinstance(signing_key, str) and SUITE_RE.match(signing_key)):
            raise MirrorError(f"{where}.signing_key: {signing_key!r}: a short lower-case name or absent")
        if signing_key is None and key_paths:
            raise MirrorError(f"{where}: key_paths without a signing_key")
        vendors[vid] = Vendor(
            vid, _need(raw, "name", where), _need(raw, "host", where), signing_key, key_paths, dict(role_vars)
        )
    sets = _need(doc, "package_sets", path.name, dict)
    repos: list[Repository] = []
    seen: set[str] = set()
    for i, raw in enumerate(_need(doc, "repositories", path.name, list)):
        where = f"repositories[{i}]"
        vid = _need(raw, "vendor", where)
        if vid not in vendors:
            raise MirrorError(f"{where}.vendor: {vid!r}: allowed {sorted(vendors)}")
        rpath = _need(raw, "path", where)
        if not PATH_RE.match(rpath) or rpath in seen:
            raise MirrorError(f"{where}.path: {rpath!r} is not a relative URL path, or repeats one")
        seen.add(rpath)
        layout = _need(raw, "layout", where)
        if layout not in ("flat", "dists"):
            raise MirrorError(f"{where}.layout: {layout!r}: allowed flat, dists")
        arches = tuple(_need(raw, "architectures", where, list))
        if not arches or any(a not in ARCHES for a in arches):
            raise MirrorError(
                f"{where}.architectures: {list(arches)!r}: allowed a list of {', '.join(ARCHES)}"
            )
        suites: tuple[str, ...] = ()
        component = ""
        if layout == "dists":
            suites = tuple(_need(raw, "suites", where, list))
            component = _need(raw, "component", where)
            if not suites or not all(isinstance(s, str) and SUITE_RE.match(s) for s in (*suites, component)):
                raise MirrorError(f"{where}: suites and component must be lower-case names")
        elif "suites" in raw or "component" in raw:
            raise MirrorError(f"{where}: suites/component belong to the dists layout only")
        key_file = raw.get("key_file", "")
        if key_file and (vendors[vid].signing_key is None or not PATH_RE.match(key_file)):
            raise MirrorError(f"{where}.key_file: {key_file!r} needs a signing vendor and a file name")
        packages: list[Package] = []
        for set_id in _need(raw, "sets", where, list):
            if set_id not in sets:
                raise MirrorError(f"{where}.sets: {set_id!r}: allowed {sorted(sets)}")
            for j, praw in enumerate(sets[set_id]):
                packages += _package(praw, f"package_sets.{set_id}[{j}]", arches)
        keys = [(p.name, p.version, p.arch) for p in packages]
        if len(set(keys)) != len(keys):
            raise MirrorError(f"{where}: a package name, version and architecture appears twice")
        repos.append(
            Repository(
                vendors[vid],
                rpath,
                layout,
                arches,
                tuple(packages),
                suites,
                component,
                key_file,
                _need(raw, "source", where),
            )
        )
    rpm_repos = _rpm_repositories(doc, vendors, path.name)
    digest = hashlib.sha256(text + Path(__file__).read_bytes()).hexdigest()[:16]
    return Table(vendors, tuple(repos), rpm_repos, digest)


def _rpm_package(raw: Any, where: str) -> RpmPackage:
    name = _need(raw, "name", where)
    version = str(_need(raw, "version", where, (str, int, float)))
    release = str(_need(raw, "release", where, (str, int)))
    arch = _need(raw, "arch", where)
    epoch = raw.get("epoch")
    if not RPM_NAME_RE.match(name):
        raise MirrorError(f"{where}.name: {name!r} is not an rpm package name")
    for key, value in (("version", version), ("release", release)):
        if not RPM_VR_RE.match(value):
            raise MirrorError(f"{where}.{key}: {value!r}: letters, digits and . _ + ~ only (no '-' or ':')")
    if epoch is not None and not (isinstance(epoch, int) and not isinstance(epoch, bool) and epoch >= 0):
        raise MirrorError(f"{where}.epoch: {epoch!r} is not a non-negative integer")
    if arch not in RPM_ARCHES:
        raise MirrorError(f"{where}.arch: {arch!r}: allowed {', '.join(RPM_ARCHES)}")
    unknown = set(raw) - {"name", "epoch", "version", "release", "arch", "requires", "provides", "source"}
    if unknown:
        raise MirrorError(f"{where}: unknown keys {sorted(unknown)}")
    extra = {k: raw.get(k) or "" for k in ("requires", "provides")}
    for key, value in extra.items():
        if not isinstance(value, str) or "\n" in value.strip():
            raise MirrorError(f"{where}.{key}: {value!r} is not a one-line string")
    return RpmPackage(
        name,
        epoch,
        version,
        release,
        arch,
        extra["requires"].strip(),
        extra["provides"].strip(),
        _need(raw, "source", where),
    )


def _rpm_repositories(doc: Any, vendors: dict[str, Vendor], file: str) -> tuple[RpmRepository, ...]:
    if "rpm_repositories" not in doc:
        return ()
    sets = _need(doc, "rpm_package_sets", file, dict)
    repos: list[RpmRepository] = []
    for i, raw in enumerate(_need(doc, "rpm_repositories", file, list)):
        where = f"rpm_repositories[{i}]"
        vid = _need(raw, "vendor", where)
        if vid not in vendors:
            raise MirrorError(f"{where}.vendor: {vid!r}: allowed {sorted(vendors)}")
        vendor = vendors[vid]
        rpath = _need(raw, "path", where)
        packages_dir = raw.get("packages_dir", "")
        if not PATH_RE.match(rpath) or not (packages_dir == "" or PATH_RE.match(packages_dir)):
            raise MirrorError(
                f"{where}: path {rpath!r} / packages_dir {packages_dir!r} is not a relative URL path"
            )
        checks = {k: raw.get(k) for k in ("gpgcheck", "repo_gpgcheck")}
        for key, value in checks.items():
            if not isinstance(value, bool):
                raise MirrorError(f"{where}.{key}: {value!r}: allowed true, false")
            if value and vendor.signing_key is None:
                raise MirrorError(f"{where}.{key}: true needs a vendor with a signing_key")
        key_file = raw.get("key_file", "")
        if key_file and (vendor.signing_key is None or not PATH_RE.match(key_file)):
            raise MirrorError(f"{where}.key_file: {key_file!r} needs a signing vendor and a file name")
        packages: list[RpmPackage] = []
        for set_id in _need(raw, "sets", where, list):
            if set_id not in sets:
                raise MirrorError(f"{where}.sets: {set_id!r}: allowed {sorted(sets)}")
            packages += [
                _rpm_package(p, f"rpm_package_sets.{set_id}[{j}]") for j, p in enumerate(sets[set_id])
            ]
        if len({p.nevra for p in packages}) != len(packages):
            raise MirrorError(f"{where}: a package name, version and architecture appears twice")
        repos.append(
            RpmRepository(
                vendor,
                rpath,
                packages_dir,
                checks["gpgcheck"] is True,
                checks["repo_gpgcheck"] is True,
                tuple(packages),
                key_file,
                _need(raw, "source", where),
            )
        )
    return tuple(repos)


def _run(cmd: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, **kwargs)
    except FileNotFoundError:
        raise MirrorError(f"{cmd[0]} not found: install dpkg-dev and gnupg") from None
    if done.returncode != 0:
        raise MirrorError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr.strip()[-800:]}")
    return done


def missing_tools() -> list[str]:
    return [t for t in TOOLS if shutil.which(t) is None]


def _build_deb(pkg: Package, vendor: Vendor, work: Path, out: Path) -> None:
    stage = work / f"{pkg.name}_{pkg.arch}_{hashlib.sha256(pkg.version.encode()).hexdigest()[:8]}"
    (stage / "DEBIAN").mkdir(parents=True)
    marker = stage / MARKER_DIR / pkg.name
    marker.parent.mkdir(parents=True)
    marker.write_text(f"{pkg.name} {pkg.version} {pkg.arch}: placeholder for {vendor.name}\n")
    # The unit files the vendor's package ships, so a role enables the unit under the name the
    # package really installs (systemctl refuses a unit no package provides); they run nothing.
    for unit in pkg.units:
        path = stage / UNIT_DIR / unit
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"[Unit]\nDescription=placeholder for {unit} from {pkg.name} ({vendor.name})\n\n"
            "[Service]\nType=oneshot\nExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\n"
        )
    control = [
        f"Package: {pkg.name}",
        f"Version: {pkg.version}",
        f"Architecture: {pkg.arch}",
        "Maintainer: fleetforge test mirror <mirror@fleetforge.invalid>",
        "Section: misc",
        "Priority: optional",
    ]
    if pkg.depends:
        control.append(f"Depends: {pkg.depends}")
    if pkg.provides:
        control.append(f"Provides: {pkg.provides}")
    control.append(f"Description: placeholder for {pkg.name} ({vendor.name})")
    control.append(f" Stands in for the vendor's package in fleetforge's tests; installs {marker.name} only.")
    (stage / "DEBIAN/control").write_text("\n".join(control) + "\n")
    # Uncompressed members: the payload is a few bytes and -Znone keeps a cold build fast.
    _run(["dpkg-deb", "--root-owner-group", "-Znone", "--build", str(stage), str(out / pkg.deb_name)])


def _write_packages(index_dir: Path, scan_cwd: Path, scan_dir: str, arch: str | None) -> list[Path]:
    cmd = ["dpkg-scanpackages", "--multiversion"]
    if arch is not None:
        cmd += ["--arch", arch]
    text = _run([*cmd, scan_dir, "/dev/null"], cwd=scan_cwd).stdout
    index_dir.mkdir(parents=True, exist_ok=True)
    plain = index_dir / "Packages"
    plain.write_text(text)
    gz = index_dir / "Packages.gz"
    gz.write_bytes(gzip.compress(text.encode(), mtime=0))
    return [plain, gz]


def _write_release(release_dir: Path, files: list[Path], fields: dict[str, str]) -> Path:
    lines = [f"{k}: {v}" for k, v in fields.items()]
    lines.append(f"Date: {formatdate(time.time(), usegmt=True)}")
    lines.append("SHA256:")
    for f in files:
        data = f.read_bytes()
        lines.append(f" {hashlib.sha256(data).hexdigest()} {len(data):>8} {f.relative_to(release_dir)}")
    release = release_dir / "Release"
    release.write_text("\n".join(lines) + "\n")
    return release


def _sign(release: Path, gnupg: Path, key: str) -> None:
    base = [
        "gpg",
        "--homedir",
        str(gnupg),
        "--batch",
        "--yes",
        "--local-user",
        key,
        "--digest-algo",
        "SHA256",
    ]
    _run([*base, "--clearsign", "--output", str(release.with_name("InRelease")), str(release)])
    _run([*base, "--armor", "--detach-sign", "--output", str(release.with_name("Release.gpg")), str(release)])


def _generate_keys(table: Table, gnupg: Path) -> dict[str, tuple[str, str]]:
    """One throwaway signing key per vendor key name: name -> (fingerprint, armored public key)."""
    keys: dict[str, tuple[str, str]] = {}
    for vendor in table.vendors.values():
        name = vendor.signing_key
        if name is None or name in keys:
            continue
        uid = f"fleetforge test mirror ({name}) <{name}@mirror.fleetforge.invalid>"
        base = ["gpg", "--homedir", str(gnupg), "--batch"]
        _run(
            [
                *base,
                "--pinentry-mode",
                "loopback",
                "--passphrase",
                "",
                "--quick-gen-key",
                uid,
                "ed25519",
                "sign",
                "never",
            ]
        )
        listing = _run([*base, "--with-colons", "--list-secret-keys", uid]).stdout
        fpr = next(line.split(":")[9] for line in listing.splitlines() if line.startswith("fpr:"))
        armored = _run([*base, "--armor", "--export", fpr]).stdout
        keys[name] = (fpr, armored)
    return keys


def _build_repository(
    repo: Repository, root: Path, work: Path, gnupg: Path, keys: dict[str, tuple[str, str]]
) -> None:
    base = root / repo.path
    origin = {"Origin": repo.vendor.name, "Label": repo.vendor.name}
    if repo.layout == "flat":
        base.mkdir(parents=True, exist_ok=True)
        for pkg in repo.packages:
            _build_deb(pkg, repo.vendor, work / repo.path, base)
        flat_indexes = _write_packages(base, base, ".", None)
        release = _write_release(
            base, flat_indexes, {**origin, "Architectures": " ".join((*repo.architectures, "all"))}
        )
        releases = [release]
    else:
        releases = []
        for suite in repo.suites:
            pool = base / "pool" / suite / repo.component
            pool.mkdir(parents=True, exist_ok=True)
            for pkg in repo.packages:
                _build_deb(pkg, repo.vendor, work / repo.path / suite, pool)
            dist = base / "dists" / suite
            files: list[Path] = []
            for arch in repo.architectures:
                files += _write_packages(
                    dist / repo.component / f"binary-{arch}", base, str(pool.relative_to(base)), arch
                )
            fields = {
                **origin,
                "Suite": suite,
                "Codename": suite,
                "Architectures": " ".join(repo.architectures),
                "Components": repo.component,
            }
            releases.append(_write_release(dist, files, fields))
    if repo.vendor.signing_key is not None:
        fpr, armored = keys[repo.vendor.signing_key]
        for release in releases:
            _sign(release, gnupg, fpr)
        if repo.key_file:
            (base / repo.key_file).write_text(armored)


def _spec(pkg: RpmPackage, vendor: Vendor) -> str:
    marker = f"/{MARKER_DIR}/{pkg.name}"
    lines = [
        f"Name: {pkg.name}",
        *([f"Epoch: {pkg.epoch}"] if pkg.epoch is not None else []),
        f"Version: {pkg.version}",
        f"Release: {pkg.release}",
        f"Summary: placeholder for {pkg.name} ({vendor.name})",
        "License: LicenseRef-placeholder",
        f"BuildArch: {pkg.arch}",
        *([f"Requires: {pkg.requires}"] if pkg.requires else []),
        *([f"Provides: {pkg.provides}"] if pkg.provides else []),
        "%description",
        "Stands in for the vendor's package in fleetforge's tests.",
        "%install",
        f"mkdir -p %{{buildroot}}/{MARKER_DIR}",
        f"echo '{pkg.name} {pkg.evr} {pkg.arch}' > %{{buildroot}}{marker}",
        "%files",
        marker,
    ]
    return "\n".join(lines) + "\n"


def _build_rpm_repository(
    repo: RpmRepository, root: Path, work: Path, gnupg: Path, keys: dict[str, tuple[str, str]]
) -> None:
    top = work / repo.path
    specs = top / "SPECS"
    specs.mkdir(parents=True)
    for n, pkg in enumerate(repo.packages):
        (specs / f"{n}.spec").write_text(_spec(pkg, repo.vendor))
    defines = {
        "_topdir": str(top),
        "_build_id_links": "none",
        "debug_package": "%{nil}",
        "__os_install_post": "%{nil}",
    }
    args = [a for k, v in defines.items() for a in ("--define", f"{k} {v}")]
    _run(["rpmbuild", "--quiet", "-bb", *args, *(str(p) for p in sorted(specs.iterdir()))])
    base = root / repo.path
    target = base / repo.packages_dir if repo.packages_dir else base
    target.mkdir(parents=True, exist_ok=True)
    built = sorted((top / "RPMS").rglob("*.rpm"))
    for rpm in built:
        shutil.copy2(rpm, target / rpm.name)
    signing = repo.vendor.signing_key
    if repo.gpgcheck and signing is not None:
        sign = {
            "__gpg": shutil.which("gpg") or "gpg",
            "_gpg_path": str(gnupg),
            "_gpg_name": keys[signing][0],
            "_gpg_sign_cmd_extra_args": "--batch --pinentry-mode loopback",
        }
        sign_args = [a for k, v in sign.items() for a in ("--define", f"{k} {v}")]
        _run(["rpmsign", *sign_args, "--addsign", *(str(target / r.name) for r in built)])
    _run(["createrepo_c", "--quiet", "--no-database", str(base)])
    if repo.repo_gpgcheck and signing is not None:
        repomd = base / "repodata" / "repomd.xml"
        _run(["gpg", "--homedir", str(gnupg), "--batch", "--yes", "--local-user", keys[signing][0],
              "--armor", "--detach-sign", "--output", str(repomd) + ".asc", str(repomd)])  # fmt: skip
    if repo.key_file and signing is not None:
        (base / repo.key_file).write_text(keys[signing][1])


def _prune(cache: Path, keep: Path) -> None:
    """Drop builds of earlier tables unused for a week; a current one rebuilds in seconds anyway."""
    cutoff = time.time() - STALE_AFTER_S
    for old in cache.iterdir():
        if old != keep and (old / ".complete").is_file() and (old / ".complete").stat().st_mtime < cutoff:
            shutil.rmtree(old, ignore_errors=True)


def rpm_tools_present() -> bool:
    return all(shutil.which(t) for t in RPM_TOOLS)


def mirror_cache() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "fleetforge" / "mirror"


def build_mirror(table: Table | None = None, cache: Path | None = None, rpm: bool | None = None) -> Path:
    """The mirror's root directory for this table, built on first use and reused after.

    The directory name is the hash of the table and this builder, so an edit to either builds anew;
    a finished build is renamed into place in one step, so a reader never sees half of one. The rpm
    side is built when rpm is true, or (None) when rpmbuild, rpmsign and createrepo_c are installed."""
    table = table or load_table()
    cache = cache or mirror_cache()
    rpm = rpm_tools_present() if rpm is None else rpm
    final = cache / (f"{table.digest}-rpm" if rpm and table.rpm_repositories else table.digest)
    if (final / ".complete").is_file():
        with suppress(OSError):
            (final / ".complete").touch()
        return final
    absent = missing_tools() + ([t for t in RPM_TOOLS if shutil.which(t) is None] if rpm else [])
    if absent:
        raise MirrorError(f"missing {', '.join(absent)}: apt-get install dpkg-dev gnupg rpm createrepo-c")
    cache.mkdir(parents=True, exist_ok=True)
    # The keyring lives apart, under the system temp directory: gpg-agent's socket path must stay
    # short (108 bytes), however deep the cache is.
    with (
        tempfile.TemporaryDirectory(prefix="build-", dir=cache) as tmp,
        tempfile.TemporaryDirectory(prefix="ffm-gpg-") as gtmp,
    ):
        work = Path(tmp)
        root = work / "root"
        gnupg = Path(gtmp)
        try:
            keys = _generate_keys(table, gnupg)
            for repo in table.repositories:
                _build_repository(repo, root, work / "stage", gnupg, keys)
            if rpm:
                for rpm_repo in table.rpm_repositories:
                    _build_rpm_repository(rpm_repo, root, work / "rpmbuild", gnupg, keys)
                (root / ".rpm").write_text("built\n")
            for vendor in table.vendors.values():
                if vendor.signing_key is not None:
                    for key_path in vendor.key_paths:
                        (root / key_path).parent.mkdir(parents=True, exist_ok=True)
                        (root / key_path).write_text(keys[vendor.signing_key][1])
            (root / ".complete").write_text(f"{table.digest}\n")
            try:
                root.rename(final)
            except OSError:
                # Another session finished the same build first; its copy is as good as this one.
                if not (final / ".complete").is_file():
                    raise
            _prune(cache, final)
        finally:
            # The secret keys die with the build: nothing can sign for this mirror afterwards.
            subprocess.run(
                ["gpgconf", "--homedir", str(gnupg), "--kill", "all"], capture_output=True, check=False
            )
    return final


class _Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args: Any, seen: list[tuple[str, str, int]], **kwargs: Any) -> None:
        self._seen = seen
        super().__init__(*args, **kwargs)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        # Who fetched what, for tests that must show a file came from this mirror.
        status = int(code) if isinstance(code, int) or str(code).isdigit() else 0
        self._seen.append((self.client_address[0], self.path, status))

    def log_message(self, format: str, *args: Any) -> None:
        pass


@dataclass
class Mirror:
    """A running mirror: its URL and what it serves."""

    root: Path
    url: str
    table: Table
    # (client address, request path, HTTP status) of every request answered, in order.
    requests: list[tuple[str, str, int]] = field(default_factory=list)

    def role_vars(self) -> dict[str, str]:
        """Role variable -> URL on this mirror, for every vendor the table carries."""
        return {
            var: f"{self.url}/{path}"
            for vendor in self.table.vendors.values()
            for var, path in vendor.role_vars.items()
        }

    @property
    def rpm(self) -> bool:
        """Whether this build carries the rpm repositories too."""
        return (self.root / ".rpm").is_file()

    def repo_url(self, path: str) -> str:
        return f"{self.url}/{path}"

    def key(self, signing_key: str) -> str:
        """The armored public key a vendor's repositories are signed with."""
        for vendor in self.table.vendors.values():
            if vendor.signing_key == signing_key:
                for repo in self.table.repositories:
                    if repo.vendor is vendor and repo.key_file:
                        return (self.root / repo.path / repo.key_file).read_text()
                return (self.root / vendor.key_paths[0]).read_text()
        raise KeyError(f"no signing key {signing_key!r} in {TABLE.name}")


@contextmanager
def serve(root: Path, host: str = "127.0.0.1", port: int = 0, table: Table | None = None) -> Iterator[Mirror]:
    """Serve root over HTTP on host:port (an IPv4 address; port 0: any free one) in a thread;
    port 80 gives URLs without a port, like the vendors'."""
    seen: list[tuple[str, str, int]] = []
    handler = partial(_Handler, directory=str(root), seen=seen)
    server = http.server.ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="vendor-mirror", daemon=True)
    thread.start()
    # On port 80 the URLs carry no port, as the vendors' do (apt's origin pins match the host).
    netloc = host if server.server_port == 80 else f"{host}:{server.server_port}"
    try:
        yield Mirror(root, f"http://{netloc}", table or load_table(), seen)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build (and optionally serve) the vendor package mirror.")
    parser.add_argument("--serve", metavar="HOST:PORT", help="serve the mirror until interrupted")
    args = parser.parse_args(argv)
    try:
        start = time.monotonic()
        root = build_mirror()
        print(f"{root} ({time.monotonic() - start:.1f} s)")
        if args.serve:
            host, _, port = args.serve.rpartition(":")
            with serve(root, host or "127.0.0.1", int(port)) as mirror:
                for var, url in mirror.role_vars().items():
                    print(f"{var}={url}")
                threading.Event().wait()
    except (MirrorError, ValueError, OSError) as exc:
        print(f"vendor_mirror: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
