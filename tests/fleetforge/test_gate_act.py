"""`fleetforge gate --act`: dry runs change nothing; real runs act on exactly the rejected nodes."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleet import ansible_yaml
from fleetforge import exitcodes
from fleetforge.cli import main
from tests.hostile.conftest import Canary
from tests.hostile.helpers import ansible_hostvars
from tests.validation.gate.helpers import check_record, fleet, write


def run(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def results(tmp_path: Path) -> Path:
    # node3 computes at 60 % of its peers: below the p5.48xlarge floor and a fleet outlier
    return write(tmp_path / "r", fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.6}}))


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "hosts.yaml"
    hosts = {f"node{i}": {"slurm_node_name": f"gpu{i:03d}"} for i in range(1, 6)}
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def test_dry_run_prints_the_steps_and_changes_nothing(
    results: Path, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = inventory.read_text()
    code, out, _ = run(
        capsys, "gate", results, "--act", "inventory", "--hosts-inventory", inventory, "--dry-run"
    )
    assert code == exitcodes.REJECTED
    assert "dry run" in out and "node3" in out
    assert inventory.read_text() == before


def test_inventory_action_groups_exactly_the_rejected_node(
    results: Path, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys, "gate", results, "--act", "inventory", "--hosts-inventory", inventory, "--json"
    )
    assert code == exitcodes.REJECTED
    doc = json.loads(out)
    assert doc["actions"]["ok"] is True
    assert [s["node"] for s in doc["actions"]["steps"]] == ["node3"]
    written = ansible_yaml.load(inventory.read_text())
    assert set(written["all"]["children"]["rejected"]["hosts"]) == {"node3"}


def test_a_failed_action_exits_75(
    results: Path,
    inventory: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = tmp_path / "bin" / "scontrol"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'slurm_update error: Invalid node name specified' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{fake.parent}{os.pathsep}{os.environ['PATH']}")
    code, out, _ = run(capsys, "gate", results, "--act", "slurm-drain", "--hosts-inventory", inventory)
    assert code == exitcodes.ACTION_FAILED
    assert "FAILED" in out and "node3" in out


def test_bad_act_usage(results: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "gate", results, "--dry-run")[0] == exitcodes.USAGE
    code, _, err = run(capsys, "gate", results, "--act", "reboot")
    assert code == exitcodes.USAGE and "inventory" in err


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def test_a_rejected_node_nobody_listed_never_becomes_a_host(
    tmp_path: Path, inventory: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.6}})
    records["intruder"] = [r.model_copy(update={"node": "intruder"}) for r in records.pop("node5")]
    records["intruder"].append(check_record("intruder", "storage", "fail", reason="forged"))
    results = write(tmp_path / "r2", records)
    code, out, _ = run(
        capsys, "gate", results, "--act", "inventory", "--hosts-inventory", inventory, "--json"
    )
    # Left out, and said so: no action acts on a node no inventory lists. node5 has no results,
    # so the gate's verdict is incomplete.
    assert code == exitcodes.INCOMPLETE
    acted = json.loads(out)["actions"]
    assert "intruder" not in {s["node"] for s in acted["steps"]}
    assert acted["left_out"] == [
        {"action": "inventory", "node": "intruder", "why": "no inventory lists it: nothing to act on"}
    ]
    written = ansible_yaml.load(inventory.read_text())
    assert "intruder" not in written["all"]["hosts"]
    # node3 is slow; node5, whose records were renamed to the intruder, left no results of its own.
    assert set(written["all"]["children"]["rejected"]["hosts"]) == {"node3", "node5"}


def test_reasons_a_node_wrote_are_data_to_ansible(
    tmp_path: Path, inventory: Path, capsys: pytest.CaptureFixture[str], canary: Canary
) -> None:
    records = fleet(5)
    records["node4"].append(check_record("node4", "storage", "fail", reason=canary.pipe))
    results = write(tmp_path / "r3", records)
    code, _, err = run(capsys, "gate", results, "--act", "inventory", "--hosts-inventory", inventory)
    assert code == exitcodes.REJECTED, err
    reasons = ansible_hostvars(inventory)["node4"]["fleetforge_reject_reasons"]
    assert any(canary.pipe in r for r in reasons), reasons
    canary.assert_untouched()


def ec2_inventory(tmp_path: Path, count: int, **ids: str) -> Path:
    """node1..nodeN with EC2 ids (`ids` overrides a node's)."""
    path = tmp_path / "ec2.yaml"
    hosts = {
        f"node{i}": {"ec2_instance_id": ids.get(f"node{i}", f"i-{i:017x}"), "aws_region": "us-east-1"}
        for i in range(1, count + 1)
    }
    path.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return path


def test_a_node_the_gate_saw_nothing_of_is_grouped_but_never_replaced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = fleet(8, node3={"scale": {"gemm_bf16_tflops": 0.6}})
    del records["node5"]  # listed, no results: unreachable, or its burn-in never ran
    results = write(tmp_path / "r", records)
    inventory = ec2_inventory(tmp_path, 8)
    argv = ["gate", results, "--hosts-inventory", inventory, "--json", "--dry-run"]
    code, out, _ = run(capsys, *argv, "--act", "aws-unhealthy", "--act", "inventory")
    assert code == exitcodes.INCOMPLETE
    acted = json.loads(out)["actions"]
    # The quarantine takes both; only node3, which measured slow, goes back to the cloud.
    assert [(s["action"], s["node"]) for s in acted["steps"]] == [
        ("aws-unhealthy", "node3"),
        ("inventory", "node3"),
        ("inventory", "node5"),
    ]
    (left,) = acted["left_out"]
    assert (left["action"], left["node"]) == ("aws-unhealthy", "node5")
    assert "no measurement" in left["why"] and "rerun its burn-in" in left["why"]


def test_replacing_more_than_a_quarter_of_the_fleet_is_refused_unless_asked_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every node below the floor: a cause the fleet shares (an image, a driver), not six bad machines.
    slow = {f"node{i}": {"scale": {"gemm_bf16_tflops": 0.5}} for i in range(1, 7)}
    results = write(tmp_path / "r", fleet(6, **slow))
    inventory = ec2_inventory(tmp_path, 6)
    before = inventory.read_text()
    argv = ["gate", results, "--hosts-inventory", inventory, "--act", "aws-unhealthy", "--act", "inventory"]
    code, out, err = run(capsys, *argv)
    assert code == exitcodes.ACTION_FAILED, out + err
    said = " ".join(err.split())
    assert "aws-unhealthy: 6 node(s) to replace" in said and "a quarter of the 6 node(s) judged" in said
    assert "--max-replace 6" in said and "Nothing was changed" in said
    assert inventory.read_text() == before  # refused as a whole: the quarantine did not run either
    code, out, _ = run(capsys, *argv, "--max-replace", "6", "--dry-run", "--json")
    assert code == exitcodes.REJECTED
    assert [s["node"] for s in json.loads(out)["actions"]["steps"] if s["action"] == "aws-unhealthy"] == [
        f"node{i}" for i in range(1, 7)
    ]


def test_two_hosts_carrying_one_instance_id_are_refused_naming_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = write(tmp_path / "r", fleet(5, node3={"scale": {"gemm_bf16_tflops": 0.6}}))
    # node3's id copied from node4's line: replacing "node3" would replace node4's machine.
    inventory = ec2_inventory(tmp_path, 5, node3=f"i-{4:017x}")
    code, out, err = run(
        capsys, "gate", results, "--hosts-inventory", inventory, "--act", "aws-unhealthy", "--dry-run"
    )
    assert code == exitcodes.DATA, out + err
    assert f"node 'node3': aws-unhealthy: i-{4:017x} is also on 'node4'" in err
    assert "\\n" not in err  # one problem a line, not escaped newlines


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            ["--max-replace", "2"],
            "--max-replace: only with an --act that replaces machines: aws-unhealthy, gcp-recreate, "
            "azure-replace",
        ),
        (["--max-replace", "0", "--act", "slurm-drain"], "--max-replace: only with an --act that replaces"),
        (["--max-replace", "2", "--act", "inventory", "--dry-run"], "--max-replace: only with an --act"),
        (["--azure-capacity", "4"], "--azure-capacity: only with --act azure-replace"),
        (
            ["--azure-capacity", "4", "--act", "slurm-drain"],
            "--azure-capacity: only with --act azure-replace",
        ),
        (
            ["--azure-capacity", "4", "--act", "aws-unhealthy", "--dry-run"],
            "--azure-capacity: only with --act azure-replace",
        ),
    ],
)
def test_an_action_option_without_its_action_is_refused(
    results: Path, inventory: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    before = inventory.read_text()
    code, out, err = run(capsys, "gate", results, "--hosts-inventory", inventory, *extra)
    assert code == exitcodes.USAGE, out + err
    assert words in " ".join(err.split()) and out == "" and "Traceback" not in err
    assert inventory.read_text() == before
