"""Run the real Ansible over a written inventory: what it lists and what every host's vars render to.

`ansible -m debug -a var=hostvars[inventory_hostname]` renders every variable of every host, so a
value Ansible would template is templated here; the canary fixture then proves none was.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BIN


def _env() -> dict[str, str]:
    return {
        **os.environ,
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_STDOUT_CALLBACK": "json",
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_FAILED": "1",
    }


def plain(value: Any) -> Any:
    """`--list` writes an unsafe string as {"__ansible_unsafe": s}; the string itself."""
    if isinstance(value, dict):
        if set(value) == {"__ansible_unsafe"}:
            return value["__ansible_unsafe"]
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def ansible_list(inventory: Path) -> dict[str, Any]:
    """`ansible-inventory -i INV --list`: groups and merged host vars as Ansible reads them
    (unsafe strings unwrapped with `plain`)."""
    pytest.importorskip("ansible")
    done = subprocess.run(
        [str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=inventory.parent,
        env=_env(),
    )
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = plain(json.loads(done.stdout))
    return data


def ansible_hostvars(inventory: Path) -> dict[str, dict[str, Any]]:
    """Every host's vars after Ansible rendered them (`debug var=hostvars[inventory_hostname]`)."""
    pytest.importorskip("ansible")
    done = subprocess.run(
        [
            str(BIN / "ansible"),
            "all",
            "-i",
            str(inventory),
            "-c",
            "local",
            "-m",
            "ansible.builtin.debug",
            "-a",
            "var=hostvars[inventory_hostname]",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=inventory.parent,
        env=_env(),
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    hosts = doc["plays"][0]["tasks"][0]["hosts"]
    return {name: result["hostvars[inventory_hostname]"] for name, result in hosts.items()}
