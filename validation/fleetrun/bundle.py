"""The bundle a node installs fleetforge from: one fleetforge wheel and a tar of its dependency wheels.

Built on the controller so the nodes need no package index (air-gapped fleets): the project's wheel
with `pip wheel --no-deps` from a copy of the source tree, the runtime dependencies with
`pip download --only-binary=:all:`, pinned to the versions the controller itself runs (`pip freeze`
as constraints), so the nodes run what the operator tested. Extra packages (torch for the
all-reduce across nodes, nvidia-ml-py on GPU nodes) join the dependency set.

Or the operator brings a wheelhouse (`--wheelhouse DIR`: fleetforge-*.whl plus every dependency
wheel, e.g. made with `pip wheel`/`pip download` on a machine like the nodes): nothing is fetched.

The dependency set is cached by what decides it (Python, platform, requirements, constraints,
extras), and its tar is keyed by its content: a node reinstalls only when the wheels changed. The
project's wheel is cached by the files it is built from, so an unchanged tree is not built again.
The tar lists the wheels first and MANIFEST (sha256 and name of each) last, so a node that finds
MANIFEST unpacked knows the rest is there too.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

PROJECT = "fleetforge"
# Top-level files a wheel build needs besides the packages (pyproject names README.md as readme;
# setup.py packs the Ansible folders into the wheel, which refuses to build without them).
_SOURCE_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "setup.cfg")
_ANSIBLE_FOLDERS = ("playbooks", "roles")
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist", ".*")
_PIP_TIMEOUT_S = 1800
_WHEELS_KEPT = 8
_ZIP_EPOCH = "315532800"  # 1980-01-01, the earliest time a zip entry can carry
_EXTRA_MARKER = re.compile(r"\bextra\s*==")


class BundleError(RuntimeError):
    """The bundle cannot be built (no source tree, pip failed, a wheelhouse without fleetforge)."""


@dataclass(frozen=True)
class Bundle:
    wheel: Path  # fleetforge-<version>-py3-none-any.whl
    wheel_sha: str  # sha256 of the wheel
    deps_tar: Path  # the dependency wheels, MANIFEST last
    deps_key: str  # content key of the dependency set
    deps_wheels: tuple[str, ...]  # file names inside the tar
    python: str  # "3.11": the Python the wheels are for
    machine: str  # platform.machine() of the build

    @property
    def version(self) -> str:
        return self.wheel.name.split("-")[1]

    @property
    def pip_wheel(self) -> str:
        """pip's wheel in the set, if any: nodes run pip from it instead of bootstrapping ensurepip."""
        return next((w for w in self.deps_wheels if w.startswith("pip-")), "")

    def extravars(self) -> dict[str, object]:
        """The burnin role's bundle variables (roles/burnin/defaults/main.yml)."""
        return {
            "burnin_fleetforge_wheel": str(self.wheel),
            "burnin_fleetforge_sha": self.wheel_sha,
            "burnin_deps_tar": str(self.deps_tar),
            "burnin_deps_key": self.deps_key,
            "burnin_deps_wheels": list(self.deps_wheels),
            "burnin_pip_wheel": self.pip_wheel,
            "burnin_python_version": self.python,
            "burnin_machine": self.machine,
        }


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def build_bundle(
    work: Path,
    cache: Path,
    *,
    source: Path | None = None,
    wheelhouse: Path | None = None,
    extra_packages: Sequence[str] = (),
    python: str = sys.executable,
    log: Callable[[str], None] = lambda _: None,
) -> Bundle:
    """Build (or reuse) the bundle. `work` holds this run's wheel; `cache` the dependency sets."""
    work.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    if wheelhouse is not None:
        return _from_wheelhouse(wheelhouse, cache, log)
    if source is None:
        raise BundleError(
            "no fleetforge source tree to build the node wheel from (fleetforge is installed from a "
            "wheel here): pass --wheelhouse DIR with fleetforge-*.whl and its dependency wheels"
        )
    # Each is a Python start when `python` is not this interpreter: asked once per bundle.
    pip_version, tag_python, tag_machine = _pip_version(python), _tag_python(python), _tag_machine(python)
    wheel = _build_wheel(source, work, cache, python, pip_version, log)
    deps_dir = _download_deps(
        wheel, cache, extra_packages, python, (pip_version, tag_python, tag_machine), log
    )
    return _bundle(wheel, deps_dir, cache, tag_python, tag_machine)


def project_wheel(
    source: Path,
    work: Path,
    cache: Path,
    python: str = sys.executable,
    log: Callable[[str], None] = lambda _: None,
) -> Path:
    """fleetforge's wheel for the tree at source, in work/wheel: from the cache when the same files
    were built before by the same pip."""
    return _build_wheel(source, work, cache, python, _pip_version(python), log)


def _build_wheel(
    source: Path, work: Path, cache: Path, python: str, pip_version: str, log: Callable[[str], None]
) -> Path:
    """The project's wheel for this tree: from the cache when the same files were built before."""
    out = work / "wheel"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    # Build from a copy: an in-tree build leaves build/ and *.egg-info in the operator's checkout.
    with tempfile.TemporaryDirectory(prefix="fleetforge-src-") as tmp:
        copy = _source_copy(source, Path(tmp) / "src")
        key = _wheel_key(copy, pip_version)
        cached = _cached_wheel(cache / f"wheel-{key}", out)
        if cached is not None:
            log(f"the {PROJECT} wheel of this tree is cached: {cached.name}")
            return cached
        log(f"building the {PROJECT} wheel from {source}")
        _pip(
            python,
            ["wheel", "--no-deps", "--no-cache-dir", "-w", str(out), str(copy)],
            "pip wheel",
            env={"SOURCE_DATE_EPOCH": _ZIP_EPOCH},
        )
    wheels = sorted(out.glob(f"{PROJECT}-*.whl"))
    if len(wheels) != 1:
        raise BundleError(f"pip wheel made {len(wheels)} {PROJECT} wheels in {out}, expected one")
    _keep_wheel(wheels[0], cache, key)
    return wheels[0]


def _source_copy(source: Path, copy: Path) -> Path:
    """What a wheel build needs of the tree: the top-level files, the packages the build packs and
    the Ansible folders. Nothing else, so that an edit to the tests neither costs a copy nor
    misses the wheel cache."""
    packed = _packed_patterns(source / "pyproject.toml")
    copy.mkdir()
    for name in _SOURCE_FILES:
        if (source / name).is_file():
            shutil.copy2(source / name, copy / name)
    for item in sorted(source.iterdir()):
        if not item.is_dir() or item.name.startswith("."):
            continue
        # A pattern names dotted packages (validation.burnin*): its first part picks the folder.
        package = (item / "__init__.py").is_file() and any(
            fnmatch.fnmatchcase(item.name, p.split(".")[0]) for p in packed
        )
        if package or item.name in _ANSIBLE_FOLDERS:
            shutil.copytree(item, copy / item.name, ignore=_SKIP)
    return copy


def _packed_patterns(pyproject: Path) -> list[str]:
    """The top-level packages setuptools' find packs: its `include` patterns, every package without."""
    try:
        config = tomllib.loads(pyproject.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BundleError(f"{pyproject}: cannot read the build configuration: {exc}") from exc
    find = config.get("tool", {}).get("setuptools", {}).get("packages", {})
    include = find.get("find", {}).get("include") if isinstance(find, dict) else None
    if isinstance(include, list) and all(isinstance(p, str) for p in include):
        return include
    return ["*"]


def _wheel_key(copy: Path, pip_version: str) -> str:
    """The cache key of the wheel built from `copy`: exactly the files the build reads, and the pip
    that builds it. A build costs 4-8 CPU-s (an isolated build environment, then setuptools:
    benchmarks/fleet_run_setup.py), and SOURCE_DATE_EPOCH makes the same files the same bytes."""
    recipe = f"wheel/1\n{pip_version}\n{_tree_digest(copy)}"
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def _tree_digest(root: Path) -> str:
    """sha256 over every file's path, executable bit and bytes, in path order."""
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(f"{path.relative_to(root).as_posix()}\0{os.access(path, os.X_OK):d}\0".encode())
        h.update(sha256_file(path).encode())
    return h.hexdigest()


def _cached_wheel(folder: Path, out: Path) -> Path | None:
    wheels = sorted(folder.glob(f"{PROJECT}-*.whl"))
    if len(wheels) != 1:
        return None
    try:
        copied = Path(shutil.copy2(wheels[0], out / wheels[0].name))
        os.utime(folder)  # recently used: the last to be pruned
    except OSError:  # pruned by another run meanwhile: build it
        return None
    return copied


def _keep_wheel(wheel: Path, cache: Path, key: str) -> None:
    """Publish the wheel under its key, keeping the newest few trees' wheels (a developer's edits
    make a new one each run)."""
    cache.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".wheel-{key}-", dir=cache))
    shutil.copy2(wheel, tmp / wheel.name)
    _publish(tmp, cache / f"wheel-{key}", f"{PROJECT}-*.whl")
    kept = sorted(cache.glob("wheel-*"), key=lambda p: p.stat().st_mtime, reverse=True)
    for old in kept[_WHEELS_KEPT:]:
        shutil.rmtree(old, ignore_errors=True)


def requirements_of(wheel: Path) -> list[str]:
    """The wheel's unconditional Requires-Dist lines (extras' requirements left out)."""
    with zipfile.ZipFile(wheel) as zf:
        name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA")), None)
        if name is None:
            raise BundleError(f"{wheel}: no METADATA in the wheel")
        text = zf.read(name).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = line.split(":", 1)[1].strip()
            if not _EXTRA_MARKER.search(req):
                out.append(req)
    return out


def controller_constraints(python: str) -> list[str]:
    """`pip freeze` of the controller's environment, as constraints: the nodes get the same versions."""
    done = subprocess.run(
        [python, "-m", "pip", "freeze", "--exclude-editable", "--disable-pip-version-check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise BundleError(f"pip freeze failed ({done.returncode}): {done.stderr.strip()[-400:]}")
    return constraints_from_freeze(done.stdout)


def constraints_from_freeze(text: str) -> list[str]:
    """Keep `name==version` pins; drop fleetforge itself, editables, direct URLs and comments."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")) or " @ " in line or "==" not in line:
            continue
        name = line.split("==", 1)[0].strip().lower().replace("_", "-")
        if name == PROJECT:
            continue
        out.append(line)
    return sorted(out, key=str.lower)


def _download_deps(
    wheel: Path,
    cache: Path,
    extra: Sequence[str],
    python: str,
    tags: tuple[str, str, str],
    log: Callable[[str], None],
) -> Path:
    """`tags`: the controller's pip version, Python major.minor and machine."""
    constraints = controller_constraints(python)
    pip_version, tag_python, tag_machine = tags
    recipe = "\n".join(
        [
            "deps/1",
            f"pip=={pip_version}",
            tag_python,
            tag_machine,
            *requirements_of(wheel),
            "--extra",
            *sorted(extra),
            "--constraints",
            *constraints,
        ]
    )
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    final = cache / f"set-{key}"
    if (final / "MANIFEST").is_file():
        return final
    tmp = Path(tempfile.mkdtemp(prefix=f".set-{key}-", dir=cache))
    try:
        (tmp / "constraints.txt").write_text("\n".join(constraints) + "\n")
        log(f"downloading the dependency wheels{' with ' + ', '.join(extra) if extra else ''}")
        args = [
            "download",
            "--only-binary=:all:",
            "--disable-pip-version-check",
            "-d",
            str(tmp),
            "-c",
            str(tmp / "constraints.txt"),
            str(wheel),
            # pip itself, as the controller runs it: a node runs pip from this wheel to fill a
            # virtual environment made without ensurepip (faster, and the same pip everywhere).
            f"pip=={pip_version}",
            *extra,
        ]
        _pip(python, args, "pip download")
        (tmp / "constraints.txt").unlink()
        for own in tmp.glob(f"{PROJECT}-*.whl"):
            own.unlink()  # the project's wheel travels on its own
        _write_manifest(tmp)
        _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def _publish(tmp: Path, final: Path, complete: str = "MANIFEST") -> None:
    """Move a complete folder into its place in the cache. Another run on this controller may have
    put the same one there meanwhile (the key is its content): that one stays, whoever reads it."""
    try:
        tmp.rename(final)
    except OSError:
        if any(final.glob(complete)):
            shutil.rmtree(tmp)
            return
        shutil.rmtree(final)  # incomplete (sets are published whole): never read by anyone
        tmp.rename(final)


def _from_wheelhouse(wheelhouse: Path, cache: Path, log: Callable[[str], None]) -> Bundle:
    if not wheelhouse.is_dir():
        raise BundleError(f"--wheelhouse {wheelhouse}: not a folder")
    own = sorted(wheelhouse.glob(f"{PROJECT}-*.whl"))
    if len(own) != 1:
        raise BundleError(
            f"--wheelhouse {wheelhouse}: {len(own)} {PROJECT}-*.whl files; it needs exactly one, "
            f"beside its dependency wheels"
        )
    deps = sorted(p for p in wheelhouse.glob("*.whl") if p not in own)
    if not deps:
        raise BundleError(f"--wheelhouse {wheelhouse}: no dependency wheels beside {own[0].name}")
    log(f"using the wheelhouse {wheelhouse}")
    tmp = Path(tempfile.mkdtemp(prefix=".set-wheelhouse-", dir=cache))
    try:
        for p in deps:
            shutil.copy2(p, tmp / p.name)
        _write_manifest(tmp)
        key = hashlib.sha256((tmp / "MANIFEST").read_bytes()).hexdigest()[:16]
        final = cache / f"set-{key}"
        if (final / "MANIFEST").is_file():
            shutil.rmtree(tmp)
        else:
            _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    python, machine = _tags_of_wheels(deps)
    return _bundle(own[0], final, cache, python, machine)


def _tags_of_wheels(wheels: Sequence[Path]) -> tuple[str, str]:
    """Python and machine a wheelhouse is for, from its binary wheels' tags ("" when all are pure)."""
    python = machine = ""
    for w in wheels:
        parts = w.name[: -len(".whl")].split("-")
        if len(parts) < 5:
            continue
        py, plat = parts[-3], parts[-1]
        if py.startswith("cp") and py[2:].isdigit() and len(py) >= 4:
            python = f"{py[2]}.{py[3:]}"
        if plat != "any":
            for arch in ("x86_64", "aarch64", "ppc64le", "s390x"):
                if plat.endswith(arch):
                    machine = arch
    return python, machine


def _bundle(wheel: Path, deps_dir: Path, cache: Path, python: str, machine: str) -> Bundle:
    manifest = (deps_dir / "MANIFEST").read_text()
    deps_key = hashlib.sha256(manifest.encode()).hexdigest()[:16]
    names = tuple(line.split(None, 1)[1] for line in manifest.splitlines() if line.strip())
    tar = cache / f"deps-{deps_key}.tar"
    if not tar.is_file():
        partial = tar.with_name(tar.name + f".{os.getpid()}.partial")
        with tarfile.open(partial, "w") as tf:
            for name in names:
                tf.add(deps_dir / name, arcname=name)
            tf.add(deps_dir / "MANIFEST", arcname="MANIFEST")  # last: its presence means complete
        partial.rename(tar)
    return Bundle(wheel, sha256_file(wheel), tar, deps_key, names, python, machine)


def _write_manifest(folder: Path) -> None:
    wheels = sorted(p for p in folder.glob("*.whl"))
    if not wheels:
        raise BundleError(f"{folder}: no wheels to bundle")
    (folder / "MANIFEST").write_text("".join(f"{sha256_file(p)}  {p.name}\n" for p in wheels))


def _pip_version(python: str) -> str:
    return _probe(python, "import pip; print(pip.__version__)")


def _tag_python(python: str) -> str:
    if python == sys.executable:
        return f"{sys.version_info[0]}.{sys.version_info[1]}"
    return _probe(python, "import sys; print('%d.%d' % sys.version_info[:2])")


def _tag_machine(python: str) -> str:
    if python == sys.executable:
        return platform.machine()
    return _probe(python, "import platform; print(platform.machine())")


def _probe(python: str, code: str) -> str:
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise BundleError(f"{python} -c ...: {done.stderr.strip()[-300:]}")
    return done.stdout.strip()


def _pip(python: str, args: list[str], what: str, env: dict[str, str] | None = None) -> None:
    try:
        done = subprocess.run(
            [python, "-m", "pip", *args],
            capture_output=True,
            text=True,
            timeout=_PIP_TIMEOUT_S,
            env={**os.environ, **(env or {})},
        )
    except subprocess.TimeoutExpired:
        raise BundleError(f"{what} did not finish in {_PIP_TIMEOUT_S} s") from None
    if done.returncode != 0:
        tail = (done.stderr.strip() or done.stdout.strip())[-1500:]
        raise BundleError(f"{what} failed ({done.returncode}): {tail}")
