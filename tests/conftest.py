"""Shared test helpers: the repository root and its examples, and the session's test hosts (one
set, booted once, shared by every module that needs hosts: tests/hosts/fixtures.py)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from tests.hosts.fixtures import host_pool

__all__ = ["host_pool"]

# No per-example deadline anywhere: the suite runs as processes beside the host tests on 2 cores, a
# busy machine stretches one example past hypothesis's 200 ms, and no property here is about time.
# CI runs the same examples every time (a red run must be reproducible, not a lucky draw);
# developers' runs explore new ones.
settings.register_profile("dev", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("ci" if os.environ.get("CI") else "dev")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
# The environment running the tests: the project's commands and Ansible's are installed beside its Python.
BIN = Path(sys.executable).parent
# `scripts/test` runs the suite as pytest processes at once: `-m measures` per module (the fleet runs
# on test hosts, tests/e2e: a pool of hosts each, measuring one host at a time), `-m "serial and not
# measures"` (the other host tests, on background hosts) and the rest; `-m measures_this_machine`
# (tests that judge this machine) runs before the hosts start. Every host test is serial; so is
# every module marked serial itself (tests/roles/test_vendor_mirror.py).


# scripts/test gives the serial run only the modules this finds in their text: a serial test in any
# other module would run in neither process.
SERIAL_MODULE_TEXT = re.compile(r"pytest\.mark\.(hosts|serial)\b")


# First, so that `-m serial` selects by it.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    serial: set[Path] = set()
    for item in items:
        if item.get_closest_marker("hosts") is not None:
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("serial") is not None:
            serial.add(item.path)
    unfound = {path for path in serial if not SERIAL_MODULE_TEXT.search(path.read_text())}
    if unfound:
        raise pytest.UsageError(
            f"serial tests in {', '.join(sorted(map(str, unfound)))}: mark them with pytest.mark.hosts or "
            "pytest.mark.serial in the module's text, which scripts/test looks for"
        )


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES
