"""A play of a role's own tasks, run by this environment's ansible-playbook against hosts that are
this machine (`ansible_connection: local`): how a test runs a task file without a host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import BIN


def local_hosts(names_to_vars: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """Inventory hosts that Ansible reaches on this machine, with this test's Python."""
    return {
        name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **host_vars}
        for name, host_vars in names_to_vars.items()
    }


def run_play(
    folder: Path,
    inventory: Mapping[str, Any],
    tasks: Sequence[Mapping[str, Any]],
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Write the inventory document and a play of tasks on every host (no fact gathering) into
    folder, run it, and return the finished process (exit 2: some host failed)."""
    (folder / "inventory.yml").write_text(yaml.safe_dump(dict(inventory)))
    (folder / "play.yml").write_text(
        yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": [dict(t) for t in tasks]}])
    )
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(folder / "inventory.yml"), str(folder / "play.yml")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", **(env or {})},
    )


def play_results(
    folder: Path, inventory: Mapping[str, Any], tasks: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """run_play through Ansible's JSON callback: the document it prints (stats, and each task's
    result per host)."""
    done = run_play(folder, inventory, tasks, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    try:
        doc: dict[str, Any] = json.loads(done.stdout[done.stdout.index("{") :])
    except ValueError:
        raise AssertionError(
            f"ansible-playbook exited {done.returncode} without a JSON document:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
        ) from None
    return doc
