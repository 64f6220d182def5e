"""beegfs_client's first task refuses a management host that would change beegfs-client.conf.

The role writes beegfs_client_mgmtd_host into the config file as `sysMgmtdHost = <value>`, so a
value with a space or a line break would add settings of its own. The role's own first task (the
platform and input check) runs under ansible-playbook on this machine, one inventory host per
value; nothing after it runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

VALID = {"name": "mgmt01.cluster.example", "ipv4": "10.1.0.2", "ipv6": "fd00:10::2"}
HOSTILE = {
    "line": "mgmt01\nsysMgmtdPortTCP = 1",
    "space": "mgmt01 connAuthFile=/tmp/x",
    "empty": "",
    "dash": "-mgmt01",
}


def test_the_management_host_must_be_a_host_name_or_an_address(tmp_path: Path) -> None:
    check = yaml.safe_load((ROOT / "roles/beegfs_client/tasks/main.yml").read_text())[0]
    common = {
        "ansible_os_family": "Debian",
        "ansible_distribution_version": "12",
        "beegfs_client_conn_auth_secret": "test-only-secret-42",
        "beegfs_client_version": "20:7.4.6",
    }
    values = {**VALID, **HOSTILE}
    hosts = local_hosts({name: {**common, "beegfs_client_mgmtd_host": v} for name, v in values.items()})
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, [check])
    failed = {host for host, s in doc["stats"].items() if s["failures"]}
    assert failed == set(HOSTILE), json.dumps(doc)[-3000:]
