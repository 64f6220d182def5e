"""The bundle nodes install fleetforge from: wheel, dependency set, tar with MANIFEST last."""

from __future__ import annotations

import hashlib
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT
from validation.fleetrun import bundle
from validation.fleetrun.bundle import (
    BundleError,
    build_bundle,
    constraints_from_freeze,
    requirements_of,
    sha256_file,
)

NUMPY = "numpy-2.4.6-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"


def fake_wheel(folder: Path, name: str, metadata: str = "Metadata-Version: 2.1\nName: x\n") -> Path:
    path = folder / name
    dist = name.split("-")[0] + "-" + name.split("-")[1] + ".dist-info"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}/METADATA", metadata)
    return path


def test_freeze_becomes_constraints_without_the_project_editables_or_urls() -> None:
    text = "\n".join(
        [
            "# Editable install with no version control (fleetforge==0.1.0)",
            "-e /work/main",
            "fleetforge==0.1.0",
            "numpy==2.4.6",
            "Pydantic==2.14.4",
            "somepkg @ file:///tmp/somepkg-1.0.tar.gz",
            "ansible-core==2.19.14",
            "",
        ]
    )
    assert constraints_from_freeze(text) == ["ansible-core==2.19.14", "numpy==2.4.6", "Pydantic==2.14.4"]


def test_requirements_leave_out_the_extras(tmp_path: Path) -> None:
    meta = "\n".join(
        [
            "Metadata-Version: 2.1",
            "Name: fleetforge",
            "Requires-Dist: pydantic<3,>=2.6",
            "Requires-Dist: numpy>=1.26",
            'Requires-Dist: pulumi<4,>=3.100; extra == "cloud"',
            "Requires-Dist: tomli; python_version < '3.11'",
        ]
    )
    wheel = fake_wheel(tmp_path, "fleetforge-0.1.0-py3-none-any.whl", meta)
    assert requirements_of(wheel) == ["pydantic<3,>=2.6", "numpy>=1.26", "tomli; python_version < '3.11'"]


def _wheelhouse(tmp_path: Path) -> Path:
    house = tmp_path / "house"
    house.mkdir()
    fake_wheel(house, "fleetforge-0.1.0-py3-none-any.whl")
    fake_wheel(house, NUMPY)
    fake_wheel(house, "pyyaml-6.0.4-cp311-cp311-manylinux2014_x86_64.whl")
    fake_wheel(house, "typer-0.29.2-py3-none-any.whl")
    return house


def test_wheelhouse_bundle_lists_every_dependency_and_puts_manifest_last(tmp_path: Path) -> None:
    house = _wheelhouse(tmp_path)
    bundle = build_bundle(tmp_path / "work", tmp_path / "cache", wheelhouse=house)
    assert bundle.wheel == house / "fleetforge-0.1.0-py3-none-any.whl"
    assert bundle.version == "0.1.0"
    assert bundle.wheel_sha == hashlib.sha256(bundle.wheel.read_bytes()).hexdigest()
    assert bundle.deps_wheels == (
        NUMPY,
        "pyyaml-6.0.4-cp311-cp311-manylinux2014_x86_64.whl",
        "typer-0.29.2-py3-none-any.whl",
    )
    # The Python and CPU the binary wheels are for, which the role checks on each node.
    assert (bundle.python, bundle.machine) == ("3.11", "x86_64")
    with tarfile.open(bundle.deps_tar) as tf:
        names = tf.getnames()
        manifest = tf.extractfile("MANIFEST")
        assert manifest is not None
        lines = manifest.read().decode().splitlines()
    assert names == [*bundle.deps_wheels, "MANIFEST"]
    assert [line.split()[1] for line in lines] == list(bundle.deps_wheels)
    assert lines[0].split()[0] == sha256_file(house / NUMPY)
    ev = bundle.extravars()
    assert ev["burnin_deps_key"] == bundle.deps_key and ev["burnin_deps_wheels"] == list(bundle.deps_wheels)
    assert ev["burnin_fleetforge_wheel"] == str(bundle.wheel)


def test_same_wheels_same_key_and_tar_changed_wheel_new_key(tmp_path: Path) -> None:
    house = _wheelhouse(tmp_path)
    first = build_bundle(tmp_path / "work", tmp_path / "cache", wheelhouse=house)
    mtime = first.deps_tar.stat().st_mtime_ns
    again = build_bundle(tmp_path / "work", tmp_path / "cache", wheelhouse=house)
    assert again.deps_key == first.deps_key and again.deps_tar.stat().st_mtime_ns == mtime
    fake_wheel(
        house, "typer-0.29.2-py3-none-any.whl", "Metadata-Version: 2.1\nName: typer\nVersion: 0.29.2\n"
    )
    changed = build_bundle(tmp_path / "work", tmp_path / "cache", wheelhouse=house)
    assert changed.deps_key != first.deps_key


@pytest.mark.parametrize(
    ("own", "deps", "problem"),
    [
        (0, 1, r"0 fleetforge-\*\.whl files"),
        (2, 1, r"2 fleetforge-\*\.whl files"),
        (1, 0, "no dependency wheels"),
    ],
)
def test_wheelhouse_without_exactly_one_fleetforge_and_some_deps_is_refused(
    tmp_path: Path, own: int, deps: int, problem: str
) -> None:
    house = tmp_path / "house"
    house.mkdir()
    for i in range(own):
        fake_wheel(house, f"fleetforge-0.{i}.0-py3-none-any.whl")
    for _ in range(deps):
        fake_wheel(house, NUMPY)
    with pytest.raises(BundleError, match=problem):
        build_bundle(tmp_path / "work", tmp_path / "cache", wheelhouse=house)


def test_no_source_and_no_wheelhouse_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(BundleError, match="--wheelhouse"):
        build_bundle(tmp_path / "work", tmp_path / "cache", source=None)


def test_the_project_wheel_is_built_from_a_copy_and_is_reproducible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {p.name for p in ROOT.iterdir()}
    # Two caches: both wheels are built by pip.
    first = bundle.project_wheel(ROOT, tmp_path / "a", tmp_path / "cache-a")
    second = bundle.project_wheel(ROOT, tmp_path / "b", tmp_path / "cache-b")
    # Same tree, same bytes: the nodes do not reinstall an unchanged fleetforge.
    assert sha256_file(first) == sha256_file(second)
    assert first.name.startswith("fleetforge-") and first.name.endswith("-py3-none-any.whl")
    with zipfile.ZipFile(first) as zf:
        names = zf.namelist()
    assert "validation/burnin/multinode.py" in names and "fleetforge/cli.py" in names
    assert not any(n.startswith(("tests/", "roles/")) for n in names)
    assert {p.name for p in ROOT.iterdir()} == before  # nothing built inside the checkout
    # The same tree again: the cached wheel, and pip is not run.
    monkeypatch.setattr(bundle, "_pip", lambda *a, **k: pytest.fail("built a wheel the cache holds"))
    said: list[str] = []
    third = bundle.project_wheel(ROOT, tmp_path / "c", tmp_path / "cache-a", log=said.append)
    assert third.parent == tmp_path / "c" / "wheel" and sha256_file(third) == sha256_file(first)
    assert "cached" in said[0]


def test_a_changed_file_or_mode_builds_again_and_only_the_newest_wheels_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pyproject.toml").write_text(
        "[project]\nname = 'fleetforge'\n[tool.setuptools.packages.find]\ninclude = ['pkg*']\n"
    )
    module = source / "pkg" / "__init__.py"
    module.write_text("A = 1\n")
    (source / "tests").mkdir()
    (source / "tests" / "__init__.py").write_text("")
    (source / "pkg" / "__pycache__").mkdir()
    builds: list[str] = []

    def pip_wheel(python: str, args: list[str], what: str, env: dict[str, str] | None = None) -> None:
        """pip wheel as far as the cache sees it: one wheel in -w, its bytes the tree's."""
        copy = Path(args[-1])
        builds.append(bundle._tree_digest(copy))
        (Path(args[args.index("-w") + 1]) / "fleetforge-0.1.0-py3-none-any.whl").write_text(builds[-1])

    monkeypatch.setattr(bundle, "_pip", pip_wheel)
    cache = tmp_path / "cache"
    cache.mkdir()

    def wheel(pip: str = "24.0") -> str:
        return bundle._build_wheel(
            source, tmp_path / "work", cache, "python3", pip, lambda _: None
        ).read_text()

    first = wheel()
    (source / "pkg" / "__pycache__" / "x.pyc").write_bytes(b"\0")  # not part of the build
    (source / "tests" / "__init__.py").write_text("X = 1\n")  # a package the build does not pack
    assert wheel() == first and len(builds) == 1
    module.write_text("A = 2\n")
    assert wheel() != first and len(builds) == 2
    module.chmod(0o755)
    wheel()
    assert len(builds) == 3
    wheel(pip="25.0")  # another pip may build other bytes
    assert len(builds) == 4
    for n in range(bundle._WHEELS_KEPT + 2):
        module.write_text(f"A = {n + 10}\n")
        wheel()
    assert len(list(cache.glob("wheel-*"))) == bundle._WHEELS_KEPT
    assert not list(cache.glob(".wheel-*"))


def test_a_set_another_run_published_meanwhile_stays_and_an_incomplete_one_is_replaced(
    tmp_path: Path,
) -> None:
    def made(name: str, manifest: bool) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "a-1.0-py3-none-any.whl").write_bytes(name.encode())
        if manifest:
            (folder / "MANIFEST").write_text(f"{name}\n")
        return folder

    final = made("set-k", manifest=True)  # another run's, complete: someone may be reading it
    bundle._publish(made(".set-k-ours", manifest=True), final)
    assert (final / "MANIFEST").read_text() == "set-k\n" and not (tmp_path / ".set-k-ours").exists()
    leftover = made("set-j", manifest=False)
    bundle._publish(made(".set-j-ours", manifest=True), leftover)
    assert (leftover / "MANIFEST").read_text() == ".set-j-ours\n"


def test_the_source_copy_holds_what_setuptools_packs_and_the_ansible_folders(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for folder in ("pkg", "other", "tests", "unlisted", "roles", "playbooks", "scripts"):
        (source / folder).mkdir(parents=True)
        (source / folder / "__init__.py").write_text("")
    (source / "pyproject.toml").write_text(
        "[project]\nname = 'fleetforge'\n[tool.setuptools.packages.find]\ninclude = ['pkg.core*', 'oth*']\n"
    )
    copy = bundle._source_copy(source, tmp_path / "copy")
    assert sorted(p.name for p in copy.iterdir()) == ["other", "pkg", "playbooks", "pyproject.toml", "roles"]
    (source / "pyproject.toml").write_text("[tool.setuptools\n")
    with pytest.raises(BundleError, match=r"pyproject\.toml: cannot read the build configuration"):
        bundle._source_copy(source, tmp_path / "again")
    assert not (tmp_path / "again").exists()
