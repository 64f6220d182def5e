"""Build hook: the wheel carries the Ansible content as package data.

The checkout keeps playbooks/ and roles/ at the top level (where Ansible, ansible-lint and the role
tests expect them); an installed fleetforge has no checkout, so `fleetforge fleet burnin` finds the
copy this hook puts at fleetforge/ansible/{playbooks,roles} (fleetforge/install.py). Everything else
about the distribution is in pyproject.toml.

The files join build_py's package data rather than being copied after it, so the sdist lists them
too (a wheel built from the sdist has them) and an editable install maps them like any other data
file (install.py uses the checkout's own folders there).
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.errors import FileError

ROOT = Path(__file__).resolve().parent
ANSIBLE_FOLDERS = ("playbooks", "roles")
ANSIBLE_PACKAGE = "fleetforge.ansible"  # a data folder inside fleetforge, not an import package
# Tests and caches stay in the checkout; hidden files are editor and VCS litter.
_SKIP_DIRS = frozenset({"__pycache__", "tests"})
_SKIP_SUFFIXES = (".pyc", ".pyo", ".retry")


def ansible_files() -> list[str]:
    """playbooks/ and roles/ files, relative to the project root, sorted (reproducible wheels)."""
    found: list[str] = []
    for folder in ANSIBLE_FOLDERS:
        top = ROOT / folder
        if not top.is_dir():
            raise FileError(
                f"{top}: not found. The wheel ships {' and '.join(ANSIBLE_FOLDERS)} as "
                f"{ANSIBLE_PACKAGE.replace('.', '/')}/ for `fleetforge fleet burnin`; build from a full "
                "checkout or from the sdist"
            )
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
            for name in filenames:
                if name.startswith(".") or name.endswith(_SKIP_SUFFIXES):
                    continue
                found.append((Path(dirpath) / name).relative_to(ROOT).as_posix())
    if "playbooks/burnin.yml" not in found:
        raise FileError(f"{ROOT / 'playbooks' / 'burnin.yml'}: not found; `fleet burnin` runs it")
    return sorted(found)


class BuildPyWithAnsible(build_py):
    """build_py whose package data also holds playbooks/ and roles/ under fleetforge/ansible/."""

    def _ansible_data(self) -> tuple[str, str, str, list[str]]:
        build_dir = os.path.join(self.build_lib, *ANSIBLE_PACKAGE.split("."))
        # Relative names (pip builds with the project root as the working folder): the sdist then
        # lists the files as roles/... and playbooks/..., as MANIFEST rules would.
        src_dir = os.path.relpath(ROOT)
        return ANSIBLE_PACKAGE, "" if src_dir == "." else src_dir, build_dir, ansible_files()

    def _get_data_files(self) -> list[tuple[str, str, str, list[str]]]:
        return [*super()._get_data_files(), self._ansible_data()]

    def get_data_files_without_manifest(self) -> list[tuple[str, str, str, list[str]]]:
        return [*super().get_data_files_without_manifest(), self._ansible_data()]


setup(cmdclass={"build_py": BuildPyWithAnsible})
