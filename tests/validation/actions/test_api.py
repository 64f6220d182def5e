"""The API the gate CLI calls: building actions, identifiers from inventories, one plan for dry run
and apply, errors that name what is wrong and the exit code they map to."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

from fleetforge import exitcodes
from tests.conftest import BIN
from tests.validation.actions.fakes import node
from validation.actions import (
    ACTION_NAMES,
    ActionConfigError,
    ActionOptions,
    InventoryFileError,
    KubernetesTaint,
    MissingSdkError,
    NodeIdentifierError,
    NodeIds,
    SlurmDrain,
    UnknownActionError,
    apply_actions,
    build_actions,
    hostvars_from_inventory_list,
    ids_from_hostvars,
    load_inventory_hostvars,
    plan_actions,
    rejected_nodes,
    run_actions,
)

FIXTURE = Path(__file__).parent / "fixtures" / "inventory.yml"


def test_names_and_build_order(tmp_path: Path) -> None:
    assert ACTION_NAMES == (
        "inventory",
        "aws-unhealthy",
        "gcp-recreate",
        "azure-replace",
        "slurm-drain",
        "k8s-taint",
    )
    actions = build_actions(
        ["slurm-drain", "inventory", "slurm-drain"], ActionOptions(inventory_path=tmp_path / "r.yml")
    )
    assert [a.name for a in actions] == ["slurm-drain", "inventory"]


def test_unknown_action_lists_the_allowed_ones() -> None:
    with pytest.raises(UnknownActionError) as err:
        build_actions(["aws-unhealthy", "reboot"])
    assert "unknown action 'reboot'; allowed: inventory, aws-unhealthy" in str(err.value)
    assert getattr(exitcodes, err.value.exit_name) == exitcodes.USAGE == 64


def test_option_errors_are_usage_errors() -> None:
    with pytest.raises(ActionConfigError, match="needs the inventory file") as err:
        build_actions(["inventory"])
    assert getattr(exitcodes, err.value.exit_name) == exitcodes.USAGE
    with pytest.raises(ActionConfigError, match="taint effect"):
        build_actions(["k8s-taint"], ActionOptions(taint_effect="Evict"))


@pytest.mark.parametrize(
    ("name", "module"),
    [
        ("gcp-recreate", "google.cloud.compute_v1"),
        ("azure-replace", "azure.mgmt.compute"),
        ("azure-replace", "azure.identity"),
        ("k8s-taint", "kubernetes"),
        ("aws-unhealthy", "boto3"),
    ],
)
def test_a_missing_sdk_names_the_extra_and_maps_to_69(name: str, module: str) -> None:
    real = importlib.util.find_spec

    def find_spec(fullname: str, *args: Any) -> Any:
        return None if fullname == module else real(fullname, *args)

    with mock.patch("importlib.util.find_spec", find_spec), pytest.raises(MissingSdkError) as err:
        build_actions([name])
    assert f"action {name!r} needs" in str(err.value) and "pip install 'fleetforge[cloud]'" in str(err.value)
    assert getattr(exitcodes, err.value.exit_name) == exitcodes.UNAVAILABLE == 69


def test_importing_the_package_imports_no_sdk() -> None:
    code = (
        "import sys, validation.actions as a; a.build_actions(['slurm-drain', 'k8s-taint']); "
        "print([m for m in ('boto3', 'google.cloud.compute_v1', 'azure.mgmt.compute', 'kubernetes') if m in sys.modules])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]"


def test_identifier_problems_of_every_action_come_in_one_error(tmp_path: Path) -> None:
    actions = build_actions(["slurm-drain", "aws-unhealthy", "k8s-taint"])
    nodes = [
        node("gpu-01", slurm_node_name="gpu-01", k8s_node_name="n1"),
        node("gpu-02", ec2_instance_id="i-0123456789abcdef0"),
    ]
    with pytest.raises(NodeIdentifierError) as err:
        plan_actions(actions, nodes)
    assert [(n, v) for n, v, _ in err.value.problems] == [
        ("gpu-02", "slurm_node_name"),
        ("gpu-01", "ec2_instance_id"),
        ("gpu-01", "aws_region"),
        ("gpu-02", "aws_region"),
        ("gpu-02", "k8s_node_name"),
    ]
    assert getattr(exitcodes, err.value.exit_name) == exitcodes.DATA


def test_dry_run_and_apply_share_the_same_steps(tmp_path: Path) -> None:
    api = mock.MagicMock()
    api.read_node.return_value.metadata.resource_version = "7"
    api.read_node.return_value.spec.taints = []
    actions = [KubernetesTaint(api=api), SlurmDrain(scontrol=str(tmp_path / "absent-scontrol"))]
    nodes = [node("gpu-01", "slow", k8s_node_name="n1", slurm_node_name="gpu-01")]
    dry = run_actions(actions, nodes, dry_run=True)
    real = run_actions(actions, nodes, dry_run=False)
    assert dry.steps == real.steps
    assert [r.step for r in real.results] == list(real.steps)
    assert [r.ok for r in real.results] == [True, False] and not real.ok
    assert real.render().startswith("1 of 2 step(s) done, 1 FAILED")
    # Both reports are JSON documents the gate can embed in its --json output.
    for report in (dry, real):
        again = json.loads(json.dumps(report.to_json()))
        assert again["dry_run"] is report.dry_run and len(again["steps"]) == 2
    assert json.loads(json.dumps(real.to_json()))["results"][0]["done"][1]["method"] == "patch_node"


def test_apply_refuses_steps_of_an_action_not_given() -> None:
    steps = plan_actions([SlurmDrain()], [node("gpu-01", slurm_node_name="gpu-01")])
    with pytest.raises(ValueError, match="slurm-drain"):
        apply_actions([KubernetesTaint(api=mock.MagicMock())], steps)


def test_yaml_inventory_vars_merge_like_ansible() -> None:
    hostvars = load_inventory_hostvars(FIXTURE)
    ids = {host: ids_from_hostvars(v, host=host) for host, v in hostvars.items()}
    assert ids["gpu-01"] == NodeIds(
        ec2_instance_id="i-0123456789abcdef0",
        aws_region="us-east-1",
        gce_project="train-prod-42",
        gce_zone="us-central1-a",
        gce_instance="fleet-a3-x7k2",
        gce_mig="fleet-a3",
        azure_vmss_instance_id="3",
        slurm_node_name="gpu-01",
        k8s_node_name="ip-10-0-1-7",
    )
    assert (ids["gpu-02"].aws_region, ids["gpu-02"].gce_zone, ids["gpu-02"].gce_mig) == (
        "us-west-2",
        "us-central1-b",
        "fleet-a3",
    )
    assert ids["gpu-03"].aws_region == "eu-west-1"


def test_yaml_reader_agrees_with_ansible_inventory() -> None:
    pytest.importorskip("ansible")
    exe = BIN / "ansible-inventory"
    out = subprocess.run(
        [str(exe), "-i", str(FIXTURE), "--list"], capture_output=True, text=True, check=True, timeout=120
    )
    from_ansible = hostvars_from_inventory_list(json.loads(out.stdout))
    ours = load_inventory_hostvars(FIXTURE)
    for host in ("gpu-01", "gpu-02", "gpu-03"):
        assert ids_from_hostvars(ours[host]) == ids_from_hostvars(from_ansible[host])


def test_a_host_ansible_lists_without_vars_is_still_a_host(tmp_path: Path) -> None:
    pytest.importorskip("ansible")
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\nbare-01\nnamed-02 slurm_node_name=gpu002\n")
    exe = BIN / "ansible-inventory"
    out = subprocess.run(
        [str(exe), "-i", str(ini), "--list"], capture_output=True, text=True, check=True, timeout=120
    )
    listing = json.loads(out.stdout)
    assert "bare-01" not in listing["_meta"]["hostvars"]  # Ansible leaves it out of _meta
    assert hostvars_from_inventory_list(listing) == {"bare-01": {}, "named-02": {"slurm_node_name": "gpu002"}}
    assert load_inventory_hostvars(ini) == hostvars_from_inventory_list(listing)  # INI: read by Ansible


def test_rejected_nodes_pairs_reasons_with_ids_and_names_what_is_missing() -> None:
    nodes = rejected_nodes(
        [("gpu-02", ["slow"]), ("stray-9", ["unreachable"])], load_inventory_hostvars(FIXTURE)
    )
    assert nodes[0].ids.ec2_instance_id == "i-0fedcba9876543210" and nodes[0].reasons == ("slow",)
    assert nodes[1].ids == NodeIds()
    with pytest.raises(
        NodeIdentifierError,
        match=re.escape("node 'stray-9': aws-unhealthy: missing (host var 'ec2_instance_id')"),
    ):
        plan_actions(build_actions(["aws-unhealthy"]), nodes)


def test_inventory_read_errors(tmp_path: Path) -> None:
    with pytest.raises(InventoryFileError) as err:
        load_inventory_hostvars(tmp_path / "nope.yml")
    assert getattr(exitcodes, err.value.exit_name) == exitcodes.NO_INPUT and "no such file" in str(err.value)
    bad = tmp_path / "bad.yml"
    for text, message in [
        ("all:\n  hostz: {}\n", "allowed: hosts, vars, children"),
        ("- a\n", "mapping of group names"),
        ("all: {hosts: {gpu-01: {ec2_instance_id: [1]}}}\n", None),
        ("a: {children: {b: {children: {a: {}}}}}\n", "its own ancestor"),
    ]:
        bad.write_text(text)
        if message is None:
            with pytest.raises(
                InventoryFileError, match="host var 'ec2_instance_id' must be a string, got list"
            ):
                ids_from_hostvars(load_inventory_hostvars(bad)["gpu-01"], host="gpu-01")
            continue
        with pytest.raises(InventoryFileError, match=message) as err:
            load_inventory_hostvars(bad)
        assert getattr(exitcodes, err.value.exit_name) == exitcodes.DATA
    with pytest.raises(InventoryFileError, match=r"_meta\.hostvars"):
        hostvars_from_inventory_list({"all": {}})
