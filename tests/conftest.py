"""Shared test helpers: the repository root and its examples, and the session's test hosts (one
set, booted once, shared by every module that needs hosts: tests/hosts/fixtures.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from tests.hosts.fixtures import host_pool

__all__ = ["host_pool"]

# CI runs the same examples every time (a red run must be reproducible, not a lucky draw);
# developers' runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


@pytest.fixture
def examples_dir() -> Path:
    return EXAMPLES
