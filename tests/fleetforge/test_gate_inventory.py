"""`fleetforge gate --hosts-inventory` on inventories only Ansible reads (a folder with host_vars/,
INI, a plugin's configuration): the real `ansible-inventory` lists them, and the gate judges and
acts on what it listed. A YAML file is read without Ansible: tests/fleetforge/test_gate_act.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from tests.conftest import BIN
from tests.validation.gate.helpers import fleet, write

pytestmark = pytest.mark.usefixtures("ansible_inventory")


@pytest.fixture
def ansible_inventory() -> None:
    if not (BIN / "ansible-inventory").exists():
        pytest.skip("ansible-inventory is not installed: pip install 'fleetforge[onprem]'")


def gate(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, dict[str, Any], str]:
    code = main(["gate", *(str(a) for a in argv), "--json"])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out) if captured.out.strip() else {}, captured.err


@pytest.fixture
def results(tmp_path: Path) -> Path:
    # node3 computes at 60 % of its peers (rejected); node5 is not in any inventory below.
    return write(tmp_path / "r", fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.6}}))


def drained(doc: dict[str, Any]) -> dict[str, list[str]]:
    """The slurm-drain plan: node -> the scontrol argv that drains it (after the one that checks the
    name is that one node)."""
    plan = {}
    for step in doc["actions"]["steps"]:
        show, drain = (c["params"]["argv"] for c in step["calls"])
        assert show[-3:] == ["show", "node", drain[2].removeprefix("NodeName=")], show
        plan[step["node"]] = drain
    return plan


def verdicts(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {n["node"]: sorted(r["rule"] for r in n["reasons"]) for n in doc["nodes"]}


def ini(path: Path, count: int) -> Path:
    lines = "".join(f"node{i} slurm_node_name=gpu{i:03d}\n" for i in range(1, count + 1))
    path.write_text(f"[gpu]\n{lines}\n[gpu:vars]\nrack=r1\n")
    return path


def test_an_ini_inventory_lists_the_nodes_and_gives_their_identifiers(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, _ = gate(capsys, results, "--hosts-inventory", ini(tmp_path / "four.ini", 4))
    assert code == exitcodes.REJECTED
    assert verdicts(doc)["node5"] == ["unlisted"] and verdicts(doc)["node1"] == []
    every = ini(tmp_path / "hosts.ini", 5)
    code, doc, _ = gate(capsys, results, "--hosts-inventory", every, "--act", "slurm-drain", "--dry-run")
    assert code == exitcodes.REJECTED, doc
    assert "unlisted" not in {rule for rules in verdicts(doc).values() for rule in rules}
    assert list(drained(doc)) == ["node3"]
    assert "NodeName=gpu003" in drained(doc)["node3"]


def test_a_folder_inventory_merges_host_vars_and_group_vars_as_ansible_does(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "inventory"
    (folder / "host_vars").mkdir(parents=True)
    (folder / "group_vars").mkdir()
    hosts = {f"node{i}": None for i in range(1, 6)}
    (folder / "hosts.yml").write_text(yaml.safe_dump({"gpu": {"hosts": hosts}}))
    # The identifier lives only in host_vars/: a YAML file read alone would not have it.
    (folder / "host_vars" / "node3.yml").write_text("slurm_node_name: gpu-rack2-03\n")
    (folder / "group_vars" / "gpu.yml").write_text("slurm_node_name: unset-in-group\n")
    code, doc, _ = gate(capsys, results, "--hosts-inventory", folder, "--act", "slurm-drain", "--dry-run")
    assert code == exitcodes.REJECTED
    assert "unlisted" not in {r for rules in verdicts(doc).values() for r in rules}
    assert list(drained(doc)) == ["node3"]
    assert "NodeName=gpu-rack2-03" in drained(doc)["node3"]  # the host's var over its group's


@pytest.mark.parametrize(
    ("name", "text", "said", "not_said"),
    [
        # Broken INI: only Ansible reads INI, and its ini plugin's reason is the message.
        ("hosts.ini", "[gpu\nnode1 ansible_port=notaport=\n", "Ansible cannot read it: ini: ", "yaml:"),
        # Broken YAML in a YAML file: the parser's line and column, not Ansible's guesses.
        (
            "hosts.yml",
            "all:\n  hosts:\n    node1: {slurm_node_name: [unclosed\n",
            "is not valid YAML at line 4, column 1: expected ','",
            "Ansible",
        ),
    ],
    ids=["ini", "yaml"],
)
def test_a_broken_inventory_is_one_line_naming_the_file_and_the_fault(
    results: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    name: str,
    text: str,
    said: str,
    not_said: str,
) -> None:
    broken = tmp_path / name
    broken.write_text(text)
    code, doc, err = gate(capsys, results, "--hosts-inventory", broken)
    assert code == exitcodes.DATA and doc == {}
    assert str(broken) in err and said in err and not_said not in err
    assert len(err.strip().splitlines()) == 1


def test_without_ansible_an_inventory_only_ansible_reads_names_the_extra(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "inventory"
    folder.mkdir()
    (folder / "hosts.ini").write_text("[gpu]\nnode1\n")
    # Neither beside this Python nor on PATH: where fleetforge looks for ansible-inventory.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, doc, err = gate(capsys, results, "--hosts-inventory", folder)
    assert code == exitcodes.UNAVAILABLE and doc == {}
    assert "is a folder" in err and "fleetforge[onprem]" in err
    assert len(err.strip().splitlines()) == 1


def test_the_inventory_action_refuses_a_plugins_configuration_it_cannot_write(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "train-a.aws_ec2.yml"
    config.write_text("plugin: amazon.aws.aws_ec2\nregions: [us-east-1]\n")
    before = config.read_text()
    code, doc, err = gate(capsys, results, "--hosts-inventory", config, "--act", "inventory")
    assert code == exitcodes.USAGE and doc == {}  # refused before anything was judged or asked
    assert "inventory plugin 'amazon.aws.aws_ec2'" in err and "YAML file of its own" in err
    assert config.read_text() == before


def test_host_vars_beside_a_yaml_file_are_merged_as_ansible_merges_them(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "inventory"
    (folder / "host_vars").mkdir(parents=True)
    hosts = {f"node{i}": {"slurm_node_name": f"gpu{i}"} for i in range(1, 6)}
    (folder / "hosts.yml").write_text(yaml.safe_dump({"gpu": {"hosts": hosts}}))
    # The node was moved; the file still names its old slot, host_vars/ the new one, and Ansible
    # (so every playbook) takes host_vars/: so must the action, or it drains the wrong node.
    (folder / "host_vars" / "node3.yml").write_text("slurm_node_name: rack2-node3\n")
    code, doc, _ = gate(
        capsys, results, "--hosts-inventory", folder / "hosts.yml", "--act", "slurm-drain", "--dry-run"
    )
    assert code == exitcodes.REJECTED
    assert "NodeName=rack2-node3" in drained(doc)["node3"]


def test_an_executable_script_inventory_is_run_by_ansible(
    results: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    listing = {
        "gpu": {"hosts": [f"node{i}" for i in range(1, 6)]},
        "_meta": {"hostvars": {"node3": {"slurm_node_name": "from-cmdb-3"}}},
    }
    script = tmp_path / "cmdb"
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(listing)}\nEOF\n")
    script.chmod(0o755)
    code, doc, _ = gate(capsys, results, "--hosts-inventory", script, "--act", "slurm-drain", "--dry-run")
    assert code == exitcodes.REJECTED
    assert "NodeName=from-cmdb-3" in drained(doc)["node3"]
