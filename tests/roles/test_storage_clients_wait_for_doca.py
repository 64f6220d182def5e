"""The Lustre and BeeGFS clients do not mount or start while DOCA-OFED's drivers wait for a reboot.

Their modules are built against DOCA-OFED (DKMS, and BeeGFS's autobuild with DOCA's headers), whose
drivers load only at the reboot doca_ofed reports pending; nvidia_driver's reboot, when it ran, was
that reboot. Each role's own fact task runs under ansible-playbook on this machine, one inventory
host per case; the tasks that mount, start or verify are read from the role and must obey it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

FACT_TASK = "Note whether DOCA-OFED's drivers still wait for a reboot"
CASES: dict[str, tuple[dict[str, Any], bool]] = {
    "doca_pending": ({"doca_ofed_reboot_pending": True}, True),
    "driver_rebooted": ({"doca_ofed_reboot_pending": True, "nvidia_driver_rdma_pending": False}, False),
    "driver_did_not_reboot": ({"doca_ofed_reboot_pending": True, "nvidia_driver_rdma_pending": True}, True),
    "doca_loaded": ({"doca_ofed_reboot_pending": False}, False),
    "no_doca_role": ({}, False),
}
# LNet over tcp alone loads no module built against DOCA-OFED: nothing to wait for.
LUSTRE_OVER_TCP = {
    "lustre_tcp_only": (
        {"doca_ofed_reboot_pending": True, "lustre_client_lnet_networks": "tcp0(eth0)"},
        False,
    )
}
LUSTRE_NETWORKS = {"lustre_client_lnet_networks": "o2ib0(ib0)"}
# The tasks (and handler) that need the client's modules loaded now.
RUNTIME = {
    "lustre_client": ["Mount the file system, persistent across reboots", "Verify the mount"],
    "beegfs_client": ["Start the client services", "Verify the mount", "Beegfs client restart"],
}


def _tasks(role: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for sub in ("tasks", "handlers"):
        for path in sorted((ROOT / "roles" / role / sub).glob("main.yml")):
            found += yaml.safe_load(path.read_text())
    return found


@pytest.mark.parametrize("role", sorted(RUNTIME))
def test_a_pending_doca_reboot_holds_the_client_back(role: str, tmp_path: Path) -> None:
    tasks = _tasks(role)
    (fact_task,) = [t for t in tasks if t.get("name") == FACT_TASK]
    (fact,) = fact_task["ansible.builtin.set_fact"]
    cases = CASES
    if role == "lustre_client":
        cases = {name: ({**LUSTRE_NETWORKS, **given}, want) for name, (given, want) in CASES.items()}
        cases |= LUSTRE_OVER_TCP
    hosts = local_hosts({name: given for name, (given, _) in cases.items()})
    show = {"name": "show", "ansible.builtin.debug": {"var": fact}}
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, [fact_task, show])
    shown = {host: result[fact] for host, result in doc["plays"][0]["tasks"][-1]["hosts"].items()}
    assert shown == {name: pending for name, (_, pending) in cases.items()}, json.dumps(doc)[-2000:]
    # What reads the fact runs under tags of its own: the fact must be set under each of them
    # (`--tags beegfs_client:config` notifies the client's restart).
    readers = [t for t in tasks if t.get("name") in RUNTIME[role]]
    readers += [t for t in tasks if set(_listed(t.get("notify"))) & set(RUNTIME[role])]
    for task in readers:
        if task.get("name") in RUNTIME[role]:
            assert fact in json.dumps(task), f"{role}: {task['name']!r} does not wait for {fact}"
        missing = set(_listed(task.get("tags"))) - set(_listed(fact_task.get("tags")))
        assert not missing, f"{role}: {task['name']!r} runs under {sorted(missing)}, which do not set {fact}"


def _listed(value: Any) -> list[str]:
    return [value] if isinstance(value, str) else list(value or [])
