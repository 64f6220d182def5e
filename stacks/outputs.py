"""The stack outputs every cloud's component registers and the program exports, in one shape.

Inventory, burn-in and humans read these without knowing which cloud made the fleet, so the GCP
and Azure components (later) fill the same six sections; a section that does not apply is `None`,
never missing. Values may be Pulumi Outputs while the program runs; exported, they are plain JSON.

fleet        what was asked for
  name, cloud, sku, machine_type, accelerator, accelerators_per_node (what each node has: the
  SKU's, except a TPU VM's chips, which follow the slice: 1, 4 or 8 on a one-VM v5e/v6e slice, 4
  on a VM of a larger one), region, zone, nodes (the job's), spares (hot spares of the same SKU),
  size (nodes + spares), capacity (on-demand | reservation | capacity-block | spot | queued)
group        the one scale-out group that holds every node, and how to list its members
  kind        aws-autoscaling-group | gcp-managed-instance-group | gcp-tpu-queued-resource |
              azure-vm-scale-set
  name, region, zone, min_size, max_size, desired; project (GCP only); subscription_id,
  resource_group and scale_sets (Azure only: one {name, ib_domain, capacity} per InfiniBand
  domain; name is the first scale set's)
  node_filter how to list the nodes with the cloud's own API: a mapping of filter name -> value
              (AWS: {"tag:aws:autoscaling:groupName": <group name>} for ec2 describe-instances;
              GCP: {"labels.fleetforge-group": <label value>} for the instances list API;
              GCP TPU: {"name": [projects/<p>/locations/<zone>/nodes/<node id>, one per slice]}
              for the TPU API's nodes.get (a queued resource cannot label the VMs it creates);
              Azure: {"tags.fleet": <fleet tag>} for the azure_rm inventory plugin)
fabric       the high-speed network between nodes
  kind (efa | gpudirect-tcpx | gpudirect-tcpxo | gpudirect-rdma | infiniband | ici), nic_kind,
  nics (per node), gbps_per_nic, total_gbps (per node),
  interfaces  per-node NIC layout: [{network_card_index, device_index, interface_type}]
  placement   {strategy, name}: the placement group / compact policy / reservation that keeps the
              fabric in one place (AWS: cluster-placement-group with the group's name, or the
              capacity reservation / Capacity Block id that carries its own placement; GCP TPU:
              tpu-slice with the accelerator type, plus topology, slices, tpu_nodes,
              hosts_per_tpu_node, chips_per_tpu_vm and list_hosts, the commands that list each
              slice's VMs;
              Azure: azure-ib-domains with the proximity placement group's name, domain_size and
              domains [{ib_domain, scale_set, capacity}], which nodes share one fabric)
storage      the shared parallel file system, or None
  kind (fsx-lustre | managed-lustre | amlfs), dns_name (mount target), mount_name, mount_point,
  capacity_gib, throughput_mbps_per_tib, mount_source (what `mount -t lustre` takes)
checkpoints  the object store for checkpoints, or None
  kind (s3 | gcs | azure-blob), bucket, uri (where jobs write), prefix, retention_days,
  noncurrent_retention_days, kms_key, filesystem_path (where the file system mirrors the
  bucket when it does, else None)
tags         the tags every resource carries: owner, fleet, dataset, managed-by, extra tags
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from fleet.catalog import Sku
from fleet.spec import FleetSpec

SECTIONS = ("fleet", "group", "fabric", "storage", "checkpoints", "tags")


class FleetSection(TypedDict):
    name: str
    cloud: str
    sku: str
    machine_type: str
    accelerator: str
    accelerators_per_node: int
    region: str | None
    zone: str | None
    nodes: int
    spares: int
    size: int
    capacity: str


class GroupSection(TypedDict):
    kind: str
    name: Any
    project: NotRequired[Any]  # GCP only: the project the group lives in
    subscription_id: NotRequired[Any]  # Azure only: the subscription of the scale sets
    resource_group: NotRequired[Any]  # Azure only: their resource group
    scale_sets: NotRequired[list[dict[str, Any]]]  # Azure: [{name, ib_domain, capacity}], one per IB domain
    region: str | None
    zone: str | None
    min_size: int
    max_size: int
    desired: int
    node_filter: Any


class FabricSection(TypedDict):
    kind: str
    nic_kind: str
    nics: int
    gbps_per_nic: float
    total_gbps: float
    interfaces: list[dict[str, Any]]
    placement: dict[str, Any]


class StorageSection(TypedDict):
    kind: str
    dns_name: Any
    mount_name: Any
    mount_point: str
    capacity_gib: int
    throughput_mbps_per_tib: int | None
    mount_source: Any


class CheckpointsSection(TypedDict):
    kind: str
    bucket: Any
    uri: Any
    prefix: str
    retention_days: int
    noncurrent_retention_days: int
    kms_key: Any
    filesystem_path: str | None


class FleetOutputs(TypedDict):
    fleet: FleetSection
    group: GroupSection
    fabric: FabricSection
    storage: StorageSection | None
    checkpoints: CheckpointsSection | None
    tags: dict[str, str]


def fleet_tags(spec: FleetSpec) -> dict[str, str]:
    """Tags for every taggable resource. `dataset` is always present so a fleet without lineage is
    found by asking for dataset=unspecified, rather than by the absence of a key."""
    return {
        **spec.tags.extra,
        "owner": spec.tags.owner,
        "fleet": spec.fleet_tag,
        "dataset": spec.tags.dataset or "unspecified",
        "managed-by": "fleetforge",
    }


@dataclass(frozen=True)
class CheckpointArgs:
    """The checkpoint store every cloud makes: `bucket` is the spec's name for it (an S3 or GCS
    bucket, an Azure storage account), None when the stack names it."""

    bucket: str | None
    retention_days: int
    noncurrent_retention_days: int


def checkpoint_args(spec: FleetSpec) -> CheckpointArgs | None:
    ckpt = spec.storage.checkpoints
    if ckpt is None:
        return None
    return CheckpointArgs(ckpt.bucket, ckpt.retention_days, ckpt.noncurrent_retention_days)


def fleet_section(
    cloud: str,
    sku: Sku,
    *,
    name: str,
    region: str | None,
    zone: str | None,
    nodes: int,
    spares: int,
    capacity: str,
    accelerators_per_node: int | None = None,
) -> FleetSection:
    """The `fleet` output section, the same on every cloud. `accelerators_per_node`: what each node
    has when the SKU's figure is not it (a TPU VM's chips follow its slice); default the SKU's."""
    return FleetSection(
        name=name,
        cloud=cloud,
        sku=sku.sku,
        machine_type=sku.machine_type,
        accelerator=sku.accelerator.model,
        accelerators_per_node=sku.accelerators_per_node
        if accelerators_per_node is None
        else accelerators_per_node,
        region=region,
        zone=zone,
        nodes=nodes,
        spares=spares,
        size=nodes + spares,
        capacity=capacity,
    )
