"""lustre_client mounts only where fleet.grammar lets a spec mount: an absolute, normalized path
outside the system trees. The inventory from stack outputs checks the same rule; the role checks it
again, before anything is installed, for a mount point set any other way (group_vars, --var).

The role's first task runs under ansible-playbook on this machine, one inventory host per case.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet import grammar
from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

ROLE = ROOT / "roles" / "lustre_client"
FIRST = "Check the platform and the file system coordinates"
COMMON = {
    "ansible_os_family": "Debian",
    "ansible_distribution_version": "12",
    "lustre_client_mgs_nids": ["10.9.0.2@tcp"],
    "lustre_client_lnet_networks": "tcp0",
    "lustre_client_fsname": "lfs",
    "lustre_client_version": "2.15.6",
    "lustre_client_kernel_modules": "prebuilt",
    "lustre_client_el_release": "",
}
GOOD = ["/lustre", "/mnt/scratch", "/data/fsx-01", "/home/shared", "/var/scratch", "/fsx", "/lustre.v2/a_b"]
BAD: list[Any] = [
    "/",
    "/etc",
    "/etc/ssh",
    "/usr",
    "/usr/local",
    "/boot",
    "/proc",
    "/sys/fs",
    "/dev/shm",
    "/var",
    "/var/lib/docker",
    "/bin",
    "/sbin",
    "/lib",
    "/lib64",
    "/root",
    "/run/lustre",
    "/tmp",
    "/mnt",
    "relative/dir",
    "lustre",
    "/lustre/",
    "//lustre",
    "/lustre/../etc",
    "/data/./x",
    "/data/x y",
    "/data/$(id)",
    "/lustre\n",
    "",
    7,
]


def _first_task() -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    assert tasks[0]["name"] == FIRST
    task: dict[str, Any] = tasks[0]
    return task


# Other coordinates with a trailing newline, which a regex ending in $ lets through (fstab, modprobe.d).
BAD_COORDINATES = {
    "lustre_client_fsname": "lfs\n",
    "lustre_client_mgs_nids": ["10.9.0.2@tcp\n"],
    "lustre_client_lnet_networks": "tcp0\n",
    "lustre_client_version": "2.15.6\n",
}


def test_the_first_check_refuses_mount_points_outside_the_spec_grammar(tmp_path: Path) -> None:
    mounts = {f"good{i}": m for i, m in enumerate(GOOD)} | {f"bad{i}": m for i, m in enumerate(BAD)}
    host_vars = {name: {**COMMON, "lustre_client_mount_point": m} for name, m in mounts.items()}
    for i, (var, value) in enumerate(BAD_COORDINATES.items()):
        host_vars[f"bad_coordinate{i}"] = {**COMMON, "lustre_client_mount_point": "/lustre", var: value}
    hosts = local_hosts(host_vars)
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, [_first_task()])
    failed = {host for host, stats in doc["stats"].items() if stats["failures"]}
    assert failed == {name for name in hosts if name.startswith("bad")}, json.dumps(doc)[-3000:]
    results = doc["plays"][0]["tasks"][0]["hosts"]
    for name in failed:
        assert "lustre_client_mount_point" in results[name]["msg"], results[name]
        assert "outside the system trees" in results[name]["msg"], results[name]


def test_the_roles_system_trees_are_fleet_grammars() -> None:
    """The role keeps its own copy of fleet.grammar's lists (a role has no Python to import)."""
    checks = _first_task()["vars"]
    assert sorted(checks["__lustre_client_system_roots"]) == sorted(grammar.SYSTEM_ROOTS)
    trees = re.fullmatch(
        r"\^/\((?P<trees>[^)]*)\)\(/\|\$\)", checks["__lustre_client_system_trees_re"].strip()
    )
    assert trees is not None, checks["__lustre_client_system_trees_re"]
    assert sorted("/" + t for t in trees["trees"].split("|")) == sorted(grammar.SYSTEM_TREES)


@pytest.mark.parametrize("mount", [*GOOD, *(m for m in BAD if isinstance(m, str))])
def test_the_role_and_fleet_grammar_agree(mount: str) -> None:
    """Each case the role accepts is one fleet.grammar accepts, and the other way round."""
    checks = _first_task()["vars"]
    role_ok = (
        re.match(checks["__lustre_client_path_re"], mount) is not None
        and not {".", ".."} & set(mount.split("/"))
        and mount not in checks["__lustre_client_system_roots"]
        and re.match(checks["__lustre_client_system_trees_re"].strip(), mount) is None
    )
    try:
        grammar.mount_point(mount)
        grammar_ok = True
    except ValueError:
        grammar_ok = False
    assert role_ok == grammar_ok == (mount in GOOD)
