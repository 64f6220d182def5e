"""Plans of AWS, GCP and Azure fleet specs, shared by the stack, policy and CLI tests.

Each distinct spec is planned once per test session (a plan runs the whole stack program under
Pulumi's mocks), so the many small assertions below cost one program run per variant.
"""

from __future__ import annotations

import copy
import json
from functools import cache
from typing import Any

import yaml

from fleet.catalog import all_skus, get_sku
from fleet.catalog.layout import aws_network_interfaces
from fleet.spec import spec_from_mapping
from fleetforge.plan import Plan, PlannedResource, plan_spec
from tests.conftest import EXAMPLES

AWS_SKUS = [s.sku for s in all_skus() if s.cloud == "aws"]
EXAMPLE: dict[str, Any] = yaml.safe_load((EXAMPLES / "aws-p5-fleet.yaml").read_text())

LT = "aws:ec2/launchTemplate:LaunchTemplate"
ASG = "aws:autoscaling/group:Group"
PG = "aws:ec2/placementGroup:PlacementGroup"
SG = "aws:ec2/securityGroup:SecurityGroup"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
BUCKET = "aws:s3/bucket:Bucket"
KEY = "aws:kms/key:Key"
SUBNET = "aws:ec2/subnet:Subnet"
VPC = "aws:ec2/vpc:Vpc"


GCP_GPU_SKUS = [s.sku for s in all_skus() if s.cloud == "gcp" and not s.is_tpu]
GCP_TPU_SKUS = [s.sku for s in all_skus() if s.cloud == "gcp" and s.is_tpu]
GCP_EXAMPLE: dict[str, Any] = yaml.safe_load((EXAMPLES / "gcp-a3-mega-fleet.yaml").read_text())
GCP_TPU_EXAMPLE: dict[str, Any] = yaml.safe_load((EXAMPLES / "gcp-tpu-v5e-slice.yaml").read_text())

NETWORK = "gcp:compute/network:Network"
SUBNETWORK = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
TEMPLATE = "gcp:compute/instanceTemplate:InstanceTemplate"
MIG = "gcp:compute/instanceGroupManager:InstanceGroupManager"
POLICY = "gcp:compute/resourcePolicy:ResourcePolicy"
RESIZE = "gcp:compute/resizeRequest:ResizeRequest"
QUEUED = "gcp:tpu/v2QueuedResource:V2QueuedResource"
LUSTRE = "gcp:lustre/instance:Instance"
GCS = "gcp:storage/bucket:Bucket"
GCS_IAM = "gcp:storage/bucketIAMMember:BucketIAMMember"


def spec_doc(**changes: Any) -> dict[str, Any]:
    """The example AWS spec with dotted-path changes; a value of None removes the key."""
    return _changed(EXAMPLE, changes)


def gcp_doc(**changes: Any) -> dict[str, Any]:
    """The example GCP GPU spec (a3-megagpu-8g on a reservation) with dotted-path changes."""
    return _changed(GCP_EXAMPLE, changes)


def tpu_doc(**changes: Any) -> dict[str, Any]:
    """The example TPU spec (one queued v5e 8x8 slice: 16 VMs of 4 chips) with dotted-path changes;
    another sku or nodes drops the example's topology unless `tpu` is given too."""
    example = GCP_TPU_EXAMPLE
    if {"sku", "nodes"} & set(changes) and "tpu" not in changes:
        example = {k: v for k, v in example.items() if k != "tpu"}
    return _changed(example, changes)


def _changed(example: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(example)
    for path, value in changes.items():
        *parents, leaf = path.split("__")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return doc


def on_demand(sku: str, **changes: Any) -> dict[str, Any]:
    return spec_doc(sku=sku, capacity={"type": "on-demand"}, **changes)


def plan_of(doc: dict[str, Any]) -> Plan:
    return _plan(json.dumps(doc, sort_keys=True))


@cache
def _plan(frozen: str) -> Plan:
    return plan_spec(spec_from_mapping(json.loads(frozen)), source="test spec")


def of_type(plan: Plan, type_: str) -> list[PlannedResource]:
    return [r for r in plan.resources if r.type == type_]


def one(plan: Plan, type_: str, suffix: str | None = None) -> PlannedResource:
    found = [r for r in of_type(plan, type_) if suffix is None or r.name.endswith(suffix)]
    assert len(found) == 1, (type_, suffix, [r.name for r in found])
    return found[0]


def layout(sku: str) -> list[tuple[int, int, str]]:
    return [
        (s.network_card_index, s.device_index, s.interface_type) for s in aws_network_interfaces(get_sku(sku))
    ]


AZURE_SKUS = [s.sku for s in all_skus() if s.cloud == "azure"]
AZURE_EXAMPLE: dict[str, Any] = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())

VMSS = "azure-native:compute:VirtualMachineScaleSet"
PPG = "azure-native:compute:ProximityPlacementGroup"
NSG = "azure-native:network:NetworkSecurityGroup"
AZ_SUBNET = "azure-native:network:Subnet"
NAT = "azure-native:network:NatGateway"
PUBLIC_IP = "azure-native:network:PublicIPAddress"
AMLFS = "azure-native:storagecache:AmlFilesystem"
ACCOUNT = "azure-native:storage:StorageAccount"
BLOB_SERVICE = "azure-native:storage:BlobServiceProperties"
LIFECYCLE = "azure-native:storage:ManagementPolicy"
ROLE = "azure-native:authorization:RoleAssignment"
ROLE_DEFINITION = "azure-native:authorization:RoleDefinition"
IDENTITY = "azure-native:managedidentity:UserAssignedIdentity"


def azure_doc(**changes: Any) -> dict[str, Any]:
    """The example Azure spec (32 + 2 ND H100 v5, AMLFS, checkpoints) with dotted-path changes."""
    return _changed(AZURE_EXAMPLE, changes)
