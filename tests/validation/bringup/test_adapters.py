"""The real actions behind the Replacer interface: AwsSetUnhealthy with a recording Auto Scaling
client (the SDK call and its parameters exactly), identifiers checked before anything is changed,
an SDK error an outcome of its node, and only actions that bring a replacement are accepted. And the
inventory as the loop reads it: hosts and vars from one real `ansible-inventory --list`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from botocore.exceptions import ClientError

from validation.actions import (
    AwsSetUnhealthy,
    GcpRecreate,
    InventoryGroup,
    NodeIdentifierError,
    NodeIds,
    RejectedNode,
    UnknownActionError,
)
from validation.bringup.adapters import ActionReplacer, AnsibleInventory
from validation.fleetrun.hosts import HostListError


class AutoScaling:
    def __init__(self, refuse: frozenset[str] = frozenset()) -> None:
        self.calls: list[dict[str, Any]] = []
        self.refuse = refuse

    def set_instance_health(self, **params: Any) -> dict[str, Any]:
        if params["InstanceId"] in self.refuse:
            raise ClientError(
                {"Error": {"Code": "Throttling", "Message": "Rate exceeded"}}, "SetInstanceHealth"
            )
        self.calls.append(params)
        return {"ResponseMetadata": {"RequestId": "req-1"}}


def node(name: str, instance: str | None) -> RejectedNode:
    return RejectedNode(
        name, ("gemm_bf16_tflops below floor",), NodeIds(ec2_instance_id=instance, aws_region="us-east-2")
    )


def test_aws_replacement_marks_the_instance_unhealthy_and_reports_per_node() -> None:
    client = AutoScaling(refuse=frozenset({"i-0bbbbbbbbbbbbbbbb"}))
    regions: list[str] = []

    def factory(region: str) -> AutoScaling:
        regions.append(region)
        return client

    replacer = ActionReplacer(AwsSetUnhealthy(client_for_region=factory))
    assert replacer.name == "aws-unhealthy" and replacer.keeps_names is False
    nodes = [node("ip-10-0-0-1", "i-0aaaaaaaaaaaaaaaa"), node("ip-10-0-0-2", "i-0bbbbbbbbbbbbbbbb")]
    replacer.check(nodes)
    outcomes = replacer.replace(nodes)
    assert [(o.node, o.ok) for o in outcomes] == [("ip-10-0-0-1", True), ("ip-10-0-0-2", False)]
    assert "Throttling" in outcomes[1].detail
    assert client.calls == [
        {"InstanceId": "i-0aaaaaaaaaaaaaaaa", "HealthStatus": "Unhealthy", "ShouldRespectGracePeriod": False}
    ]
    assert regions == ["us-east-2"]


def test_a_node_without_its_identifiers_is_refused_before_anything_changes() -> None:
    client = AutoScaling()
    replacer = ActionReplacer(AwsSetUnhealthy(client_for_region=lambda region: client))
    with pytest.raises(NodeIdentifierError, match="ec2_instance_id"):
        replacer.check([node("ip-10-0-0-1", "i-0aaaaaaaaaaaaaaaa"), node("ip-10-0-0-3", None)])
    assert client.calls == []


def test_only_actions_that_bring_a_replacement_are_replacers(tmp_path: Any) -> None:
    assert ActionReplacer(GcpRecreate()).keeps_names is True  # a recreated instance keeps its name
    # What tells a replacement from the machine it replaces, where a name may stay the same.
    assert ActionReplacer(GcpRecreate()).identity_var == "gce_instance_id"
    assert ActionReplacer(AwsSetUnhealthy()).identity_var == "ec2_instance_id"
    with pytest.raises(ValueError, match="does not replace a node"):
        ActionReplacer(InventoryGroup(tmp_path / "inv.yml", "rejected"))
    with pytest.raises(UnknownActionError, match="allowed: aws-unhealthy, gcp-recreate, azure-replace"):
        ActionReplacer.named("slurm-drain")


def test_one_reading_gives_the_hosts_and_their_vars(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yml"
    hosts = {
        "node10": {"ec2_instance_id": "i-0aaaaaaaaaaaaaaaa"},
        "node9": {"ec2_instance_id": "i-0bbbbbbbbbbbbbbbb"},
    }
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    view = AnsibleInventory(inventory).read()
    assert view.hosts == ["node9", "node10"]  # natural order
    assert view.hostvars["node10"]["ec2_instance_id"] == "i-0aaaaaaaaaaaaaaaa"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"bad name": None}}}))
    with pytest.raises(HostListError, match="not allowed"):
        AnsibleInventory(inventory).read()
