"""AwsFleet under Pulumi's mocks: what `pulumi up` would create for every AWS SKU in the catalog."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fleet.catalog import get_sku
from stacks.aws_compute import CHECKPOINT_PREFIX, IMDS_HOP_LIMIT, SESSION_MANAGER_ACTIONS
from stacks.aws_network import LUSTRE_PORTS
from stacks.mocks import MOCK_ROOT_DEVICE
from tests.stacks.plans import (
    ASG,
    AWS_SKUS,
    BUCKET,
    DRA,
    EGRESS,
    FSX,
    INGRESS,
    KEY,
    LT,
    PG,
    SG,
    SUBNET,
    VPC,
    layout,
    of_type,
    on_demand,
    one,
    plan_of,
    spec_doc,
)

EXAMPLE_NODES = 16
EXAMPLE_SIZE = 18  # 16 nodes + 2 spares in examples/aws-p5-fleet.yaml


# --------------------------------------------------------------------------- per SKU


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_efa_interfaces_follow_the_catalog_layout(sku: str) -> None:
    plan = plan_of(on_demand(sku))
    nodes_sg = one(plan, SG, "nodes-sg").id
    interfaces = one(plan, LT).inputs["networkInterfaces"]
    efa = [ni for ni in interfaces if ni["interfaceType"] in {"efa", "efa-only"}]
    assert len(efa) == get_sku(sku).fabric.nics
    cards = [ni["networkCardIndex"] for ni in efa]
    assert len(set(cards)) == len(cards), "one EFA per network card"
    assert [(ni["networkCardIndex"], ni["deviceIndex"], ni["interfaceType"]) for ni in interfaces] == layout(
        sku
    )
    assert all(ni["securityGroups"] == [nodes_sg] for ni in interfaces)


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_launch_template_is_hardened(sku: str) -> None:
    plan = plan_of(on_demand(sku))
    lt = one(plan, LT).inputs
    assert lt["instanceType"] == get_sku(sku).machine_type
    assert lt["metadataOptions"]["httpTokens"] == "required"
    assert lt["metadataOptions"]["httpPutResponseHopLimit"] == IMDS_HOP_LIMIT
    (root,) = lt["blockDeviceMappings"]
    assert root["deviceName"] == MOCK_ROOT_DEVICE  # read from the image, so it replaces its root volume
    assert root["ebs"]["encrypted"] == "true" and root["ebs"]["volumeType"] == "gp3"
    primary, *others = lt["networkInterfaces"]
    assert (primary["networkCardIndex"], primary["deviceIndex"]) == (0, 0)
    assert primary["associatePublicIpAddress"] == "false"
    assert all("associatePublicIpAddress" not in ni for ni in others)
    assert (
        lt["iamInstanceProfile"]["arn"]
        == f"arn:aws:iam::123456789012:instance-profile/{_physical(plan, 'node-profile')}"
    )
    assert "instanceMarketOptions" not in lt and "capacityReservationSpecification" not in lt


def _physical(plan: Any, suffix: str) -> str:
    return str(one(plan, "aws:iam/instanceProfile:InstanceProfile", suffix).id)


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_nodes_group_allows_all_traffic_within_itself_only(sku: str) -> None:
    plan = plan_of(on_demand(sku))
    sg = one(plan, SG, "nodes-sg").id
    self_in = one(plan, INGRESS, "nodes-self-in").inputs
    self_out = one(plan, EGRESS, "nodes-self-out").inputs
    for rule in (self_in, self_out):
        assert rule["securityGroupId"] == sg and rule["referencedSecurityGroupId"] == sg
        assert rule["ipProtocol"] == "-1" and "cidrIpv4" not in rule
    open_ingress = [
        r for r in of_type(plan, INGRESS) if r.inputs["securityGroupId"] == sg and "cidrIpv4" in r.inputs
    ]
    assert [(r.inputs["fromPort"], r.inputs["cidrIpv4"]) for r in open_ingress] == [(22, "10.0.0.0/8")]


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_one_group_of_nodes_plus_spares_in_a_cluster_placement_group(sku: str) -> None:
    plan = plan_of(on_demand(sku))
    pg = one(plan, PG)
    asg = one(plan, ASG).inputs
    assert pg.inputs["strategy"] == "cluster"
    assert asg["placementGroup"] == pg.id
    assert asg["desiredCapacity"] == asg["maxSize"] == EXAMPLE_SIZE
    assert asg["minSize"] == EXAMPLE_NODES  # spares may be shed, the job's nodes never
    assert asg["vpcZoneIdentifiers"] == [one(plan, SUBNET, "private").id]
    assert asg["launchTemplate"] == {"id": one(plan, LT).id, "version": "1"}
    assert asg["waitForCapacityTimeout"] == "0"
    propagated = {t["key"]: t["value"] for t in asg["tags"] if t["propagateAtLaunch"]}
    assert {"owner", "fleet", "dataset"} <= set(propagated)


@pytest.mark.parametrize("sku", AWS_SKUS)
def test_capacity_block_is_static_and_targets_the_block(sku: str) -> None:
    plan = plan_of(spec_doc(sku=sku))  # the example asks for a Capacity Block
    lt = one(plan, LT).inputs
    asg = one(plan, ASG).inputs
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    target = lt["capacityReservationSpecification"]["capacityReservationTarget"]
    assert target == {"capacityReservationId": "cr-0123456789abcdef0"}
    assert asg["minSize"] == asg["maxSize"] == asg["desiredCapacity"] == EXAMPLE_SIZE
    # EC2 places a Capacity Block itself and refuses launches into a placement group.
    assert of_type(plan, PG) == [] and "placementGroup" not in asg
    assert plan.outputs["fabric"]["placement"] == {
        "strategy": "capacity-block",
        "name": "cr-0123456789abcdef0",
    }


# --------------------------------------------------------------------------- capacity variants


def test_reservation_targets_the_odcr_without_market_options() -> None:
    plan = plan_of(spec_doc(capacity={"type": "reservation", "reservation_id": "cr-0aaaabbbbccccdddd"}))
    lt = one(plan, LT).inputs
    asg = one(plan, ASG).inputs
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0aaaabbbbccccdddd"
    }
    assert "instanceMarketOptions" not in lt
    assert of_type(plan, PG) == [] and asg["minSize"] == EXAMPLE_NODES


def test_spot_uses_one_time_terminating_requests_in_a_placement_group() -> None:
    plan = plan_of(spec_doc(capacity={"type": "spot"}))
    market = one(plan, LT).inputs["instanceMarketOptions"]
    assert market == {
        "marketType": "spot",
        "spotOptions": {"spotInstanceType": "one-time", "instanceInterruptionBehavior": "terminate"},
    }
    assert one(plan, ASG).inputs["placementGroup"] == one(plan, PG).id


# --------------------------------------------------------------------------- storage


def test_fsx_lustre_is_persistent_2_encrypted_and_reachable_from_the_fleet_only() -> None:
    plan = plan_of(spec_doc())
    fs = one(plan, FSX).inputs
    key = one(plan, KEY)
    lustre_sg = one(plan, SG, "lustre-sg").id
    nodes_sg = one(plan, SG, "nodes-sg").id
    assert fs["deploymentType"] == "PERSISTENT_2"
    assert fs["perUnitStorageThroughput"] == 250 and fs["storageCapacity"] == 9600
    assert fs["kmsKeyId"] == f"arn:aws:kms:us-east-1:123456789012:key/{key.id}"
    assert fs["subnetIds"] == one(plan, SUBNET, "private").id
    assert fs["securityGroupIds"] == [lustre_sg]
    assert key.inputs["enableKeyRotation"] is True
    lustre_in = [r.inputs for r in of_type(plan, INGRESS) if r.inputs["securityGroupId"] == lustre_sg]
    assert lustre_in, "the file system's group admits its clients"
    for rule in lustre_in:
        assert "cidrIpv4" not in rule and rule["referencedSecurityGroupId"] in {nodes_sg, lustre_sg}
        assert rule["ipProtocol"] == "tcp" and (rule["fromPort"], rule["toPort"]) in LUSTRE_PORTS
    assert {(r["referencedSecurityGroupId"], r["fromPort"]) for r in lustre_in} == {
        (sg, low) for sg in (nodes_sg, lustre_sg) for low, _ in LUSTRE_PORTS
    }
    assert plan.outputs["storage"]["mount_point"] == "/fsx"
    assert plan.outputs["storage"]["mount_source"].endswith(f"@tcp:/{plan.outputs['storage']['mount_name']}")


def test_checkpoint_bucket_is_versioned_kms_encrypted_private_tls_only_and_expires() -> None:
    plan = plan_of(spec_doc(storage__checkpoints={"retention_days": 45, "noncurrent_retention_days": 5}))
    bucket = one(plan, BUCKET)
    key_arn = f"arn:aws:kms:us-east-1:123456789012:key/{one(plan, KEY).id}"
    attached = {
        r.type.rsplit(":", 1)[-1]: r.inputs for r in plan.resources if r.inputs.get("bucket") == bucket.id
    }
    assert attached["BucketVersioning"]["versioningConfiguration"] == {"status": "Enabled"}
    (sse,) = attached["BucketServerSideEncryptionConfiguration"]["rules"]
    assert sse["applyServerSideEncryptionByDefault"] == {"sseAlgorithm": "aws:kms", "kmsMasterKeyId": key_arn}
    pab = attached["BucketPublicAccessBlock"]
    assert all(
        pab[k] is True
        for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
    )
    (rule,) = attached["BucketLifecycleConfiguration"]["rules"]
    assert rule["status"] == "Enabled" and rule["expiration"]["days"] == 45
    assert rule["noncurrentVersionExpiration"]["noncurrentDays"] == 5
    (deny,) = json.loads(attached["BucketPolicy"]["policy"])["Statement"]
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert deny["Resource"] == [f"arn:aws:s3:::{bucket.id}", f"arn:aws:s3:::{bucket.id}/*"]
    assert plan.outputs["checkpoints"]["uri"] == f"s3://{bucket.id}/{CHECKPOINT_PREFIX}"


def test_named_bucket_and_data_repository_association() -> None:
    plan = plan_of(spec_doc(storage__checkpoints={"bucket": "acme-llm-checkpoints"}))
    assert one(plan, BUCKET).inputs["bucket"] == "acme-llm-checkpoints"
    dra = one(plan, DRA).inputs
    assert dra["dataRepositoryPath"] == f"s3://acme-llm-checkpoints/{CHECKPOINT_PREFIX}"
    assert dra["fileSystemId"] == one(plan, FSX).id and dra["fileSystemPath"] == "/checkpoints"
    assert "DELETED" not in dra["s3"]["autoExportPolicy"]["events"]  # a Lustre rm never deletes a checkpoint
    assert plan.outputs["checkpoints"]["filesystem_path"] == "/fsx/checkpoints"
    policy = json.loads(one(plan, KEY).inputs["policy"])
    assert "FsxDataRepositoryThroughS3" in {s["Sid"] for s in policy["Statement"]}


def test_without_file_system_or_checkpoints_nothing_of_them_is_made() -> None:
    plan = plan_of(spec_doc(storage={"checkpoints": None}))
    kinds = {r.type for r in plan.resources}
    assert not kinds & {FSX, DRA, BUCKET}
    assert [r.name.rpartition("-node-")[2] for r in of_type(plan, "aws:iam/rolePolicy:RolePolicy")] == [
        "session-manager"
    ]
    assert [r.name for r in of_type(plan, SG)] == ["llm-pretrain-p5-nodes-sg"]
    assert plan.outputs["storage"] is None and plan.outputs["checkpoints"] is None
    policy = json.loads(one(plan, KEY).inputs["policy"])
    assert [s["Sid"] for s in policy["Statement"]] == ["AccountAdministersThroughIam"]


# --------------------------------------------------------------------------- identity


def test_node_role_reads_the_bucket_and_writes_only_its_checkpoint_prefix() -> None:
    plan = plan_of(spec_doc())
    bucket_arn = f"arn:aws:s3:::{one(plan, BUCKET).id}"
    checkpoints = one(plan, "aws:iam/rolePolicy:RolePolicy", "node-checkpoints").inputs
    statements = json.loads(checkpoints["policy"])["Statement"]
    actions = {a for s in statements for a in s["Action"]}
    assert not any(a.endswith("*") for a in actions) and not any("Delete" in a for a in actions)
    write = next(s for s in statements if "s3:PutObject" in s["Action"])
    assert write["Resource"] == f"{bucket_arn}/{CHECKPOINT_PREFIX}*"
    kms = next(s for s in statements if "kms:Decrypt" in s["Action"])
    assert kms["Condition"] == {"StringEquals": {"kms:ViaService": "s3.us-east-1.amazonaws.com"}}
    trust = json.loads(one(plan, "aws:iam/role:Role").inputs["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}


def test_node_role_gets_session_manager_actions_only_never_every_parameter() -> None:
    plan = plan_of(spec_doc())
    assert of_type(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment") == []
    assert "managedPolicyArns" not in one(plan, "aws:iam/role:Role").inputs
    session = one(plan, "aws:iam/rolePolicy:RolePolicy", "node-session-manager").inputs
    assert session["role"] == one(plan, "aws:iam/role:Role").id
    (statement,) = json.loads(session["policy"])["Statement"]
    assert statement["Effect"] == "Allow"
    assert sorted(statement["Action"]) == sorted(SESSION_MANAGER_ACTIONS)
    every = [
        a
        for s in _node_statements(plan)
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
        if a.lower().startswith("ssm:get") or a in {"*", "ssm:*"}
    ]
    assert every == [], "no node policy reads SSM parameters"


def _node_statements(plan: Any) -> list[dict[str, Any]]:
    return [
        s
        for r in of_type(plan, "aws:iam/rolePolicy:RolePolicy")
        for s in json.loads(r.inputs["policy"])["Statement"]
    ]


def test_image_from_the_spec_is_pinned_instead_of_the_dlami() -> None:
    assert (
        one(plan_of(spec_doc(image="ami-0123456789abcdef0")), LT).inputs["imageId"] == "ami-0123456789abcdef0"
    )
    assert one(plan_of(spec_doc()), LT).inputs["imageId"].startswith("ami-")


# --------------------------------------------------------------------------- network


def test_new_vpc_private_subnet_nat_egress_and_s3_endpoint() -> None:
    plan = plan_of(spec_doc())
    private, public = one(plan, SUBNET, "private").inputs, one(plan, SUBNET, "public").inputs
    assert private["availabilityZone"] == public["availabilityZone"] == "us-east-1a"
    assert private["cidrBlock"] == "10.64.0.0/17" and public["cidrBlock"] == "10.64.255.240/28"
    assert private["mapPublicIpOnLaunch"] is False and public["mapPublicIpOnLaunch"] is False
    nat = one(plan, "aws:ec2/natGateway:NatGateway")
    assert nat.inputs["subnetId"] == one(plan, SUBNET, "public").id
    private_rt = one(plan, "aws:ec2/routeTable:RouteTable", "private-rt")
    assert private_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "natGatewayId": nat.id}]
    endpoint = one(plan, "aws:ec2/vpcEndpoint:VpcEndpoint").inputs
    assert endpoint["vpcEndpointType"] == "Gateway" and endpoint["routeTableIds"] == [private_rt.id]
    default_sg = one(plan, "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup").inputs
    assert default_sg["ingress"] == [] and default_sg["egress"] == []


def test_existing_subnet_is_used_and_no_network_is_created() -> None:
    plan = plan_of(
        spec_doc(network={"vpc_id": "vpc-0abc1234def567890", "subnet_id": "subnet-0abc1234def567890"})
    )
    kinds = {r.type for r in plan.resources}
    assert not kinds & {
        VPC,
        SUBNET,
        "aws:ec2/natGateway:NatGateway",
        "aws:ec2/internetGateway:InternetGateway",
    }
    assert all(sg.inputs["vpcId"] == "vpc-0abc1234def567890" for sg in of_type(plan, SG))
    assert one(plan, ASG).inputs["vpcZoneIdentifiers"] == ["subnet-0abc1234def567890"]
    assert one(plan, FSX).inputs["subnetIds"] == "subnet-0abc1234def567890"
    # No SSH source in this spec: no port 22 at all.
    assert not [r for r in of_type(plan, INGRESS) if r.inputs.get("fromPort") == 22]


@pytest.mark.parametrize(
    ("bastion", "expected"),
    [
        ("sg-0123456789abcdef0", ("referencedSecurityGroupId", "sg-0123456789abcdef0")),
        ("10.1.2.3", ("cidrIpv4", "10.1.2.3/32")),
    ],
)
def test_ssh_only_from_the_bastion(bastion: str, expected: tuple[str, str]) -> None:
    plan = plan_of(spec_doc(network={"bastion": bastion}))
    (ssh,) = [r.inputs for r in of_type(plan, INGRESS) if r.inputs.get("fromPort") == 22]
    assert ssh[expected[0]] == expected[1] and ssh["toPort"] == 22


# --------------------------------------------------------------------------- scale and outputs


def test_8_and_1024_nodes_make_the_same_resources_and_differ_only_in_group_size() -> None:
    small = plan_of(spec_doc(nodes=8, spares=1))
    large = plan_of(spec_doc(nodes=1024, spares=1))
    assert {(r.type, r.name) for r in small.resources} == {(r.type, r.name) for r in large.resources}
    assert len(small.resources) == len(large.resources)
    by_name = {(r.type, r.name): r.inputs for r in large.resources}
    differing = {
        (r.type, key)
        for r in small.resources
        for key in set(r.inputs) | set(by_name[(r.type, r.name)])
        if r.inputs.get(key) != by_name[(r.type, r.name)].get(key)
    }
    assert differing == {(ASG, "minSize"), (ASG, "maxSize"), (ASG, "desiredCapacity")}


def test_outputs_have_the_common_shape() -> None:
    plan = plan_of(spec_doc())
    out = plan.outputs
    assert set(out) == {"fleet", "group", "fabric", "storage", "checkpoints", "tags"}
    assert out["fleet"] == {
        "name": "llm-pretrain-p5",
        "cloud": "aws",
        "sku": "p5.48xlarge",
        "machine_type": "p5.48xlarge",
        "accelerator": "H100-SXM5-80GB",
        "accelerators_per_node": 8,
        "region": "us-east-1",
        "zone": "us-east-1a",
        "nodes": 16,
        "spares": 2,
        "size": 18,
        "capacity": "capacity-block",
    }
    asg_name = one(plan, ASG).id
    assert out["group"]["kind"] == "aws-autoscaling-group" and out["group"]["name"] == asg_name
    assert out["group"]["node_filter"] == {"tag:aws:autoscaling:groupName": asg_name}
    assert out["fabric"]["nics"] == 32 and len(out["fabric"]["interfaces"]) == 33
    assert out["tags"]["owner"] == "ml-platform" and out["tags"]["dataset"] == "web-2026-10"
    assert plan.warnings == ()  # no deprecated provider arguments


def test_every_resource_is_a_child_of_the_component() -> None:
    plan = plan_of(spec_doc())
    (component,) = [r for r in plan.resources if r.type == "fleetforge:aws:Fleet"]
    assert (
        component.urn
        == "urn:pulumi:plan::fleetforge::pulumi:pulumi:Stack$fleetforge:aws:Fleet::llm-pretrain-p5"
    )
    for r in plan.resources:
        if r is not component:
            assert r.urn.split("::")[2] == f"fleetforge:aws:Fleet${r.type}", r.urn  # parent=self


def test_capacity_in_tib_counts_as_fsx_does() -> None:
    plan = plan_of(
        spec_doc(
            storage={
                "filesystem": {"kind": "fsx-lustre", "capacity_tib": 2.4, "throughput_mbps_per_tib": 500}
            }
        )
    )
    fs = one(plan, FSX).inputs
    assert fs["storageCapacity"] == 2400 and fs["perUnitStorageThroughput"] == 500
