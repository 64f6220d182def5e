"""What every GCP part shares: the fleet's typed args, its labels, and options that parent each
child to the component and pin it to the component's own provider (the spec's region and zone).

`nodes` counts every VM, as the spec does: for a TPU fleet, every TPU VM of every slice
(`hosts_per_slice` of them in each of `slices`). Without `kms_key`, Google's default encryption at
rest applies. `run_duration_s`, how long a queued GPU fleet runs once provisioned, is the spec's
`capacity.run_duration_hours`, else Dynamic Workload Scheduler's flex-start maximum of 7 days.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_gcp as gcp

from fleet.catalog import Sku
from fleet.spec import FleetSpec
from stacks.outputs import CheckpointArgs, checkpoint_args, fleet_tags

CapacityType = Literal["on-demand", "reservation", "spot", "queued"]
FLEX_START_MAX_RUN_S = 7 * 24 * 3600
# The label every node of the fleet's group carries: inventory lists nodes by it (group.node_filter).
GROUP_LABEL = "fleetforge-group"
_LABEL_UNSAFE = re.compile(r"[^a-z0-9_-]")


@dataclass(frozen=True)
class FileSystemArgs:
    capacity_gib: int
    throughput_mbps_per_tib: int | None  # None: the Dynamic tier
    mount_point: str

    @property
    def dynamic(self) -> bool:
        return self.throughput_mbps_per_tib is None


@dataclass(frozen=True)
class GcpFleetArgs:
    """Everything `GcpFleet` needs, read once from a validated FleetSpec and its catalog SKU."""

    name: str
    region: str
    zone: str
    sku: Sku
    nodes: int
    spares: int
    capacity: CapacityType
    reservation: str | None
    vpc_cidr: ipaddress.IPv4Network
    ssh_cidr: ipaddress.IPv4Network | None
    bastion: str | None
    image: str | None
    filesystem: FileSystemArgs | None
    checkpoints: CheckpointArgs | None
    tags: dict[str, str] = field(default_factory=dict)
    kms_key: str | None = None
    slices: int = 1
    tpu_topology: str | None = None
    tpu_runtime_version: str | None = None
    run_duration_s: int = FLEX_START_MAX_RUN_S

    @property
    def size(self) -> int:
        return self.nodes + self.spares

    @property
    def hosts_per_slice(self) -> int:
        return self.nodes // self.slices

    @property
    def group_label(self) -> str:
        return label_value(f"{self.name}-nodes")

    @classmethod
    def from_spec(cls, spec: FleetSpec) -> GcpFleetArgs:
        if spec.cloud != "gcp" or spec.region is None or spec.zone is None:
            raise ValueError(f"{spec.name}: GcpFleetArgs needs a validated gcp spec with region and zone")
        if spec.capacity.type == "capacity-block":
            raise ValueError("capacity.type capacity-block is aws only")  # FleetSpec already rejects it
        fs = spec.storage.filesystem
        filesystem = None
        if fs is not None and fs.kind == "managed-lustre":
            # The spec allows a throughput tier or `tier: dynamic`, never both (fleet.spec).
            filesystem = FileSystemArgs(fs.provider_gib or 0, fs.throughput_mbps_per_tib, fs.mount_point)
        return cls(
            name=spec.name,
            region=spec.region,
            zone=spec.zone,
            sku=spec.catalog_sku,
            nodes=spec.nodes,
            spares=spec.spares,
            capacity=spec.capacity.type,
            reservation=spec.capacity.reservation_id,
            run_duration_s=(
                spec.capacity.run_duration_hours * 3600
                if spec.capacity.run_duration_hours is not None
                else FLEX_START_MAX_RUN_S
            ),
            vpc_cidr=spec.network.vpc_cidr,
            ssh_cidr=spec.network.ssh_cidr,
            bastion=spec.network.bastion,
            image=spec.image,
            filesystem=filesystem,
            checkpoints=checkpoint_args(spec),
            tags=fleet_tags(spec),
            kms_key=spec.kms_key,
            slices=spec.tpu.slices if spec.tpu is not None else 1,
            tpu_topology=spec.tpu.topology if spec.tpu is not None else None,
            tpu_runtime_version=spec.tpu.runtime_version if spec.tpu is not None else None,
        )


def label_value(value: str) -> str:
    """GCP labels allow lowercase letters, digits, `_` and `-` (63 at most); tags may hold more."""
    return _LABEL_UNSAFE.sub("_", value.lower())[:63]


@dataclass(frozen=True)
class Context:
    """Logical-name prefix, labels and resource options shared by every child of one GcpFleet."""

    args: GcpFleetArgs
    parent: pulumi.Resource
    provider: gcp.Provider
    project: pulumi.Output[str]

    def name(self, suffix: str) -> str:
        return f"{self.args.name}-{suffix}"

    def labels(self, role: str) -> dict[str, str]:
        return {
            **{k: label_value(v) for k, v in self.args.tags.items()},
            "role": label_value(role),
        }

    def opts(
        self,
        depends_on: list[pulumi.Resource] | None = None,
        ignore_changes: list[str] | None = None,
    ) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(
            parent=self.parent,
            provider=self.provider,
            depends_on=depends_on,
            ignore_changes=ignore_changes,
        )

    def invoke_opts(self) -> pulumi.InvokeOutputOptions:
        return pulumi.InvokeOutputOptions(parent=self.parent, provider=self.provider)
