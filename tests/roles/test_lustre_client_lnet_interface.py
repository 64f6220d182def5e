"""lustre_client gives a tcp LNet network named without an interface the default route's interface.

Managed Lustre (FSx, GCP Managed Lustre, AMLFS) is reached over the interface of the node's default
IPv4 route, whose name only the node knows (ens5 on AWS, ens4 or enp0s12 on GCP, one NIC of up to
ten), so the inventory writes "tcp0" and the role fills the interface in from the node's facts. The
role's tasks/main.yml runs under ansible-playbook on this machine, one inventory host per case, from
its first task through the one that writes the LNet options (the installs and the vars loader
left out), with that task writing into the test's folder; each host carries the facts a gathered
run would (ansible_default_ipv4) as host vars.
"""

from __future__ import annotations

import configparser
import copy
import json
import re
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from tests.local_play import local_hosts, play_results

ROLE = ROOT / "roles" / "lustre_client"
WRITE_TASK = "Configure LNet networks"
# Left out: they install packages or need the play to run as the role (role_path).
NOT_RUN = {"ansible.builtin.include_tasks", "ansible.builtin.include_vars"}
COMMON = {
    "ansible_os_family": "Debian",
    "ansible_distribution_version": "12",
    "lustre_client_mgs_nids": ["10.9.0.2@tcp"],
    "lustre_client_fsname": "lfs",
    "lustre_client_version": "2.15.6",
    "lustre_client_kernel_modules": "prebuilt",
    "lustre_client_el_release": "",
    "lustre_client_mount_point": "/lustre",
}
ROUTE_ENS5 = {"interface": "ens5", "address": "10.0.3.17", "gateway": "10.0.0.1"}
ROUTE_ENS4 = {"interface": "ens4", "address": "10.128.0.9", "gateway": "10.128.0.1"}
# host -> (networks, default route fact or None for none gathered, networks LNet gets, or None: fails)
CASES: dict[str, tuple[str, dict[str, Any] | None, str | None]] = {
    "aws_fsx": ("tcp0", ROUTE_ENS5, "tcp0(ens5)"),
    "gcp_managed": ("tcp0", ROUTE_ENS4, "tcp0(ens4)"),
    "named_kept": ("tcp0(ens5)", ROUTE_ENS4, "tcp0(ens5)"),
    "o2ib_kept": ("o2ib0(ib0)", ROUTE_ENS4, "o2ib0(ib0)"),
    "o2ib_bare_kept": ("o2ib1", ROUTE_ENS4, "o2ib1"),
    "o2ib_without_route": ("o2ib0(ib0)", {}, "o2ib0(ib0)"),
    "mixed": ("o2ib0(ib0,ib1),tcp1[0,1]", ROUTE_ENS4, "o2ib0(ib0,ib1),tcp1(ens4)[0,1]"),
    "no_default_route": ("tcp0", {}, None),
    "facts_not_gathered": ("tcp0", None, None),
    # The fact lands in a modprobe options line: nothing but an interface name.
    "odd_interface": ("tcp0", {"interface": 'ens5"\ninstall lnet /bin/true'}, None),
}


def _play_tasks(out: Path) -> list[dict[str, Any]]:
    tasks = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
    names = [t.get("name") for t in tasks]
    run = [t for t in tasks[: names.index(WRITE_TASK) + 1] if not NOT_RUN & set(t)]
    write = copy.deepcopy(run[-1])
    args = write["ansible.builtin.template"]
    args |= {"src": str(ROLE / "templates" / args["src"]), "dest": f"{out}/{{{{ inventory_hostname }}}}.conf"}
    return [*run[:-1], write]


def _lnet_networks(conf: Path) -> str:
    """The networks option of the modprobe line the role wrote."""
    found = re.findall(r'^options lnet networks="([^"]*)"$', conf.read_text(), re.MULTILINE)
    assert len(found) == 1, conf.read_text()
    return str(found[0])


def test_a_tcp_network_without_an_interface_gets_the_default_routes(tmp_path: Path) -> None:
    out = tmp_path / "written"
    out.mkdir()
    hosts = local_hosts(
        {
            name: {
                **COMMON,
                "lustre_client_lnet_networks": networks,
                **({} if route is None else {"ansible_default_ipv4": route}),
            }
            for name, (networks, route, _) in CASES.items()
        }
    )
    doc = play_results(tmp_path, {"all": {"hosts": hosts}}, _play_tasks(out))
    failed = {host for host, stats in doc["stats"].items() if stats["failures"]}
    assert failed == {name for name, (_, _, want) in CASES.items() if want is None}, json.dumps(doc)[-3000:]
    written = {
        name: _lnet_networks(out / f"{name}.conf") for name in CASES if (out / f"{name}.conf").exists()
    }
    assert written == {name: want for name, (_, _, want) in CASES.items() if want is not None}
    # The failure says which variable to set, and what with, before anything is installed.
    for task in doc["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            if result.get("failed"):
                assert "lustre_client_lnet_networks" in result["msg"], result
                assert "tcp0(ens5)" in result["msg"] and "default" in result["msg"], result
                assert task["task"]["name"] != WRITE_TASK, (host, result)


def test_the_site_play_gathers_the_default_route_the_role_reads() -> None:
    """ansible_default_ipv4 comes from the network facts: the plays before and of lustre_client gather
    them (gathering smart: the first play's facts hold for the run), and no setting narrows them."""
    assert "ansible_default_ipv4" in (ROLE / "tasks" / "main.yml").read_text()
    plays = yaml.safe_load((ROOT / "playbooks" / "site.yml").read_text())
    lustre = next(i for i, p in enumerate(plays) if "lustre_client" in json.dumps(p.get("roles")))
    for play in plays[: lustre + 1]:
        assert play.get("gather_facts", True) is not False, play["name"]
        subset = play.get("gather_subset", ["all"])
        assert {"all", "network"} & set(subset) and "!network" not in subset, play["name"]
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.get("defaults", "gathering", fallback="implicit") in {"implicit", "smart"}
    assert not cfg.has_option("defaults", "gather_subset")
