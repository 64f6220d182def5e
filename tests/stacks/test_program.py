"""The Pulumi program itself: stack config in, a clear refusal for anything it cannot provision."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest
import yaml

from stacks.mocks import FleetMocks, run
from stacks.program import main
from tests.conftest import EXAMPLES
from tests.stacks.plans import EXAMPLE, spec_doc


def _run(config: dict[str, Any]) -> FleetMocks:
    mocks = FleetMocks(region="us-east-1", zone="us-east-1a")
    run(main, mocks, {key: json.dumps(value) for key, value in config.items()})
    return mocks


def test_onprem_is_refused_by_name_before_any_resource() -> None:
    doc = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())
    mocks = FleetMocks(region="r", zone="z")
    with pytest.raises(pulumi.RunError, match="cloud: on-prem fleets are configured with Ansible") as caught:
        run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})
    assert "allowed here: aws, gcp, azure" in str(caught.value)
    assert mocks.recorded == []


def test_azure_config_builds_the_azure_fleet() -> None:
    doc = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())
    mocks = FleetMocks(region=doc["region"], zone=doc["zone"])
    run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})
    assert [r.type for r in mocks.recorded if r.type == "fleetforge:azure:Fleet"] == [
        "fleetforge:azure:Fleet"
    ]
    assert not any(r.type.startswith(("aws:", "gcp:")) for r in mocks.recorded)


def test_azure_without_an_ssh_key_is_refused_before_any_resource() -> None:
    doc = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())
    doc.pop("azure", None)
    mocks = FleetMocks(region=doc["region"], zone=doc["zone"])
    # An empty key is "not set": no password fallback, and nothing is created.
    with pytest.raises(pulumi.RunError, match=r"azure\.ssh_public_key: missing; nodes take SSH keys only"):
        run(main, mocks, {"fleetforge:fleet": json.dumps(doc), "fleetforge:sshPublicKey": ""})
    assert mocks.recorded == []


def test_missing_config_names_the_key_and_how_to_set_it() -> None:
    with pytest.raises(
        pulumi.RunError, match=r"fleetforge:fleet: missing; set it with `pulumi config set --path"
    ):
        _run({})


def test_bad_spec_in_config_reports_field_paths() -> None:
    doc = spec_doc(colour="blue", network={"vpc_id": "vpc-0abc1234def567890"})
    with pytest.raises(pulumi.RunError) as caught:
        _run({"fleetforge:fleet": doc})
    assert "colour: unknown key" in str(caught.value)
    doc = spec_doc(network={"vpc_id": "vpc-0abc1234def567890"})
    with pytest.raises(pulumi.RunError, match=r"network\.subnet_id: required with network\.vpc_id"):
        _run({"fleetforge:fleet": doc})


def test_config_object_builds_the_fleet() -> None:
    mocks = _run({"fleetforge:fleet": EXAMPLE})
    assert [r.type for r in mocks.recorded if r.type == "fleetforge:aws:Fleet"] == ["fleetforge:aws:Fleet"]
    assert all(r.name.startswith(EXAMPLE["name"]) for r in mocks.recorded)


@pytest.mark.parametrize(
    ("example", "component"),
    [("aws-p5-fleet.yaml", "fleetforge:aws:Fleet"), ("gcp-a3-mega-fleet.yaml", "fleetforge:gcp:Fleet")],
)
def test_the_program_picks_the_component_by_cloud(example: str, component: str) -> None:
    doc = yaml.safe_load((EXAMPLES / example).read_text())
    mocks = FleetMocks(region=doc["region"], zone=doc["zone"])
    result = run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})
    assert [r.type for r in mocks.recorded if r.type.startswith("fleetforge:")] == [component]
    cloud = component.split(":")[1]
    assert {r.type.split(":")[0] for r in mocks.recorded} == {"fleetforge", "pulumi", cloud}
    assert [r.type for r in mocks.recorded if r.type.startswith("pulumi:")] == [f"pulumi:providers:{cloud}"]
    assert list(result.outputs) == ["fleet", "group", "fabric", "storage", "checkpoints", "tags"]


def test_existing_subnet_in_another_zone_is_refused_at_deploy_time() -> None:
    doc = spec_doc(network={"subnet_id": "subnet-0abc1234def567890"})
    mocks = FleetMocks(region="us-east-1", zone="us-east-1b")  # AWS says the subnet is elsewhere
    with pytest.raises(
        pulumi.RunError, match="subnet-0abc1234def567890 is in us-east-1b, not the spec's zone us-east-1a"
    ):
        run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})


def test_existing_subnet_alone_finds_its_vpc() -> None:
    doc = spec_doc(network={"subnet_id": "subnet-0abc1234def567890"})
    mocks = FleetMocks(region="us-east-1", zone="us-east-1a", vpc_id="vpc-0fedcba9876543210")
    run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})
    groups = [r for r in mocks.recorded if r.type == "aws:ec2/securityGroup:SecurityGroup"]
    assert groups and all(g.inputs["vpcId"] == "vpc-0fedcba9876543210" for g in groups)


def test_gcp_spec_the_stack_cannot_lay_out_is_refused_before_any_resource() -> None:
    doc = yaml.safe_load((EXAMPLES / "gcp-a3-mega-fleet.yaml").read_text())
    doc["network"] = {"vpc_id": "shared-vpc"}
    mocks = FleetMocks(region="us-central1", zone="us-central1-a")
    with pytest.raises(pulumi.RunError, match=r"network\.vpc_id: the gcp stack creates its own VPCs"):
        run(main, mocks, {"fleetforge:fleet": json.dumps(doc)})
    assert mocks.recorded == []
