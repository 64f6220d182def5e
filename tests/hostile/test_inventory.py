"""Hostile input to every inventory fleetforge writes or reads: spec fields, stack outputs, node
names and reasons carrying Jinja, names that would expand, leave a folder or split a list.

Each case runs the real CLI, asserts the exact exit code and the files created, and where an
inventory was written, runs the real Ansible over it: the canary proves nothing was templated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet import ansible_yaml
from fleetforge import exitcodes
from tests.conftest import EXAMPLES
from tests.hostile.conftest import Canary, tree
from tests.hostile.helpers import ansible_hostvars, ansible_list
from tests.validation.gate.helpers import check_record, fleet, write

# --------------------------------------------------------------------------- fleetforge inventory SPEC


def spec_with(tmp_path: Path, path: tuple[Any, ...], value: str) -> Path:
    doc = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    out = tmp_path / "spec.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


# Every spec string the inventory carries, with a Jinja payload: the spec's grammar refuses each.
SPEC_FIELDS = [
    ("name",),
    ("hosts", 1, "name"),
    ("hosts", 1, "address"),
    ("hosts", 1, "user"),
    ("storage", "filesystem", "mount_point"),
    ("storage", "filesystem", "fsname"),
    ("storage", "filesystem", "mgs_nids", 0),
    ("validation", "pinned_versions", "driver"),
]


@pytest.mark.parametrize("field", SPEC_FIELDS, ids=lambda f: ".".join(map(str, f)))
def test_a_spec_field_holding_jinja_is_refused_and_nothing_is_written(
    cli: Any, tmp_path: Path, canary: Canary, field: tuple[Any, ...]
) -> None:
    spec = spec_with(tmp_path, field, canary.pipe)
    before = tree(tmp_path)
    run = cli("inventory", spec, "-o", tmp_path / "inv.yml")
    assert run.code == exitcodes.DATA, run.err
    assert len(run.err.strip().splitlines()) == 1
    assert tree(tmp_path) == before


def test_the_written_spec_inventory_is_plain_yaml_ansible_reads_as_written(cli: Any, tmp_path: Path) -> None:
    # Values the spec allows hold no '{': written plain, readable by any YAML reader, and
    # Ansible renders them to exactly what the spec says.
    run = cli("inventory", EXAMPLES / "onprem-hgx-h100.yaml", "-o", tmp_path / "inv.yml")
    assert run.code == exitcodes.OK, run.err
    assert tree(tmp_path) == {"inv.yml"}
    doc = yaml.safe_load((tmp_path / "inv.yml").read_text())
    assert doc["all"]["hosts"]["gpu02"]["ansible_host"] == "10.1.0.12"
    rendered = ansible_hostvars(tmp_path / "inv.yml")["gpu02"]
    assert (rendered["ansible_host"], rendered["lustre_client_mount_point"]) == ("10.1.0.12", "/lustre")


# --------------------------------------------------------------------------- --stack-outputs


def outputs(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "fleet": {"name": "train-a", "cloud": "aws", "sku": "p5.48xlarge", "region": "us-east-2", "nodes": 4},
        "group": {
            "kind": "aws-autoscaling-group",
            "region": "us-east-2",
            "node_filter": {"tag:aws:autoscaling:groupName": "train-a-asg"},
        },
        "storage": {"kind": "fsx-lustre", "mount_source": "fs-1.fsx@tcp:/x7yz", "mount_point": "/fsx"},
    }
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        doc[section][key] = value
    return doc


@pytest.mark.parametrize(
    ("change", "code", "needle"),
    [
        ("fleet__name", exitcodes.DATA, "fleet.name"),
        ("storage__mount_point", exitcodes.DATA, "storage.mount_point"),
        ("storage__mount_source", exitcodes.DATA, "storage.mount_source"),
        ("fleet__sku", exitcodes.DATA, "fleet.sku"),
    ],
)
def test_stack_outputs_that_would_template_are_refused(
    cli: Any, tmp_path: Path, canary: Canary, change: str, code: int, needle: str
) -> None:
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs(**{change: canary.pipe})))
    run = cli("inventory", "--stack-outputs", src, "-o", tmp_path / "x.aws_ec2.yml")
    assert (run.code, run.out) == (code, "")
    assert needle in run.err and len(run.err.strip().splitlines()) == 1
    assert tree(tmp_path) == {"outputs.json"}


@pytest.mark.parametrize("change", ["group__region", "group__node_filter"])
def test_plugin_options_from_outputs_are_written_unsafe(
    cli: Any, tmp_path: Path, canary: Canary, change: str
) -> None:
    value: Any = canary.pipe if change == "group__region" else {"tag:Name": canary.pipe}
    src = tmp_path / "outputs.json"
    src.write_text(json.dumps(outputs(**{change: value})))
    run = cli("inventory", "--stack-outputs", src, "-o", tmp_path / "x.aws_ec2.yml")
    assert run.code == exitcodes.OK, run.err
    assert tree(tmp_path) == {"outputs.json", "x.aws_ec2.yml"}
    doc = ansible_yaml.load((tmp_path / "x.aws_ec2.yml").read_text())
    written = doc["regions"][0] if change == "group__region" else doc["filters"]["tag:Name"]
    assert isinstance(written, ansible_yaml.Unsafe) and written == canary.pipe


# --------------------------------------------------------------------------- gate --act inventory


@pytest.fixture
def hosts_file(tmp_path: Path) -> Path:
    path = tmp_path / "inv" / "hosts.yml"
    path.parent.mkdir()
    hosts = {f"node{i}": {"ansible_connection": "local"} for i in range(1, 6)}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def results_with(tmp_path: Path, node: str | None = None, reason: str | None = None) -> Path:
    """Five nodes; node3 slow. `node` renames node5 (its file too); `reason` is node4's failure."""
    records = fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.6}})
    if node is not None:
        records[node] = [r.model_copy(update={"node": node}) for r in records.pop("node5")]
        records[node].append(check_record(node, "storage", "fail", reason="slow"))
    if reason is not None:
        records["node4"].append(check_record("node4", "storage", "fail", reason=reason))
    return write(tmp_path / "results", records)


# Names a node could give itself (its file is named after it): each would template, expand into
# many hosts, set a port or split an argument list if it became a host.
HOSTILE_NAMES = [
    "{{ lookup('pipe', 'touch PWNED') }}",
    "{% set x = lookup('pipe', 'touch PWNED') %}",
    "node[1:9999]",
    "node5:2222",
    "node5 node6",
    "node5,node6",
    "-i",
    "..",
    "intruder",  # a plain name, but nobody listed it
]


@pytest.mark.parametrize("name", HOSTILE_NAMES)
def test_a_node_nobody_listed_never_enters_the_inventory(
    cli: Any, tmp_path: Path, hosts_file: Path, name: str
) -> None:
    results = results_with(tmp_path, node=name)
    before = tree(tmp_path)
    run = cli("gate", results, "--act", "inventory", "--hosts-inventory", hosts_file)
    # Left out, and said so; node5 left no results, so the verdict is incomplete.
    assert run.code == exitcodes.INCOMPLETE, run.out + run.err
    assert f"left out: inventory {name}: no inventory lists it" in run.out
    assert tree(tmp_path) == before  # the inventory file is rewritten in place, nothing else appears
    listed = ansible_list(hosts_file)
    assert set(listed["_meta"]["hostvars"]) == {f"node{i}" for i in range(1, 6)}
    # node3 is slow; node5, whose file now speaks for another name, left no results of its own.
    assert listed["rejected"]["hosts"] == ["node3", "node5"]
    ansible_hostvars(hosts_file)
    assert not (hosts_file.parent / "PWNED").exists() and not (tmp_path / "PWNED").exists()


@pytest.mark.parametrize("kind", ["pipe", "block"])
def test_jinja_in_a_reason_stays_a_reason(
    cli: Any, tmp_path: Path, hosts_file: Path, canary: Canary, kind: str
) -> None:
    payload = canary.pipe if kind == "pipe" else canary.block
    results = results_with(tmp_path, reason=payload)
    run = cli("gate", results, "--act", "inventory", "--hosts-inventory", hosts_file)
    assert run.code == exitcodes.REJECTED, run.out + run.err
    rendered = ansible_hostvars(hosts_file)
    assert any(payload in r for r in rendered["node4"]["fleetforge_reject_reasons"])
    canary.assert_untouched()


# --------------------------------------------------------------------------- fleet burnin --inventory


@pytest.mark.parametrize("name", ["../escape", "{{ lookup('env', 'HOME') }}", "a,b", "fe80::1%eth0"])
def test_a_fleet_run_inventory_host_that_is_not_a_plain_name_exits_65(
    cli: Any, tmp_path: Path, name: str
) -> None:
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"gpu": {"hosts": {"node1": None, name: None}}}))
    run = cli("fleet", "burnin", "-i", inv, "--out", tmp_path / "out", "--sku", "cpu")
    assert run.code == exitcodes.DATA, run.err
    assert "not allowed" in run.err and len(run.err.strip().splitlines()) == 1
    assert tree(tmp_path) == {"hosts.yml"}


@pytest.mark.parametrize("act", [True, False], ids=["act", "judge"])
def test_a_hosts_inventory_that_is_a_fifo_is_one_line_never_a_hang(
    cli: Any, tmp_path: Path, act: bool
) -> None:
    results = results_with(tmp_path)
    inv = tmp_path / "hosts.yml"
    os.mkfifo(inv)
    before = tree(tmp_path)
    run = cli("gate", results, *(["--act", "inventory"] if act else []), "--hosts-inventory", inv)
    assert run.code == exitcodes.DATA, run.err
    assert "not a regular file" in run.err and len(run.err.strip().splitlines()) == 1
    assert tree(tmp_path) == before


def test_the_inventory_action_refuses_a_folder_it_cannot_write_before_judging(
    cli: Any, tmp_path: Path
) -> None:
    results = results_with(tmp_path)
    inv = tmp_path / "inventory"
    inv.mkdir()
    before = tree(tmp_path)
    run = cli("gate", results, "--act", "inventory", "--hosts-inventory", inv)
    assert run.code == exitcodes.USAGE, run.err
    assert "is a folder" in run.err and len(run.err.strip().splitlines()) == 1
    assert tree(tmp_path) == before
