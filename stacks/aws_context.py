"""What every AWS part shares: the fleet's typed args, its tags, and options that parent each
child to the component and pin it to the component's own provider (the spec's region)."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Literal

import pulumi
import pulumi_aws as aws

from fleet.catalog import Sku
from fleet.spec import FleetSpec
from stacks.outputs import CheckpointArgs, checkpoint_args, fleet_tags

CapacityType = Literal["on-demand", "reservation", "capacity-block", "spot"]


@dataclass(frozen=True)
class FileSystemArgs:
    capacity_gib: int
    throughput_mbps_per_tib: int
    mount_point: str


@dataclass(frozen=True)
class AwsFleetArgs:
    """Everything `AwsFleet` needs, read once from a validated FleetSpec and its catalog SKU."""

    name: str
    region: str
    zone: str
    sku: Sku
    nodes: int
    spares: int
    capacity: CapacityType
    reservation_id: str | None
    vpc_cidr: ipaddress.IPv4Network
    vpc_id: str | None
    subnet_id: str | None
    ssh_cidr: ipaddress.IPv4Network | None
    bastion: str | None
    image: str | None
    filesystem: FileSystemArgs | None
    checkpoints: CheckpointArgs | None
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return self.nodes + self.spares

    @classmethod
    def from_spec(cls, spec: FleetSpec) -> AwsFleetArgs:
        if spec.cloud != "aws" or spec.region is None or spec.zone is None:
            raise ValueError(f"{spec.name}: AwsFleetArgs needs a validated aws spec with region and zone")
        if spec.capacity.type == "queued":
            raise ValueError("capacity.type queued is gcp only")  # FleetSpec already rejects it
        fs = spec.storage.filesystem
        filesystem = None
        if fs is not None and fs.kind == "fsx-lustre" and fs.throughput_mbps_per_tib is not None:
            # FSx counts 1.2 TiB as 1,200 GiB: the spec owns that conversion (provider_gib).
            filesystem = FileSystemArgs(fs.provider_gib or 0, fs.throughput_mbps_per_tib, fs.mount_point)
        return cls(
            name=spec.name,
            region=spec.region,
            zone=spec.zone,
            sku=spec.catalog_sku,
            nodes=spec.nodes,
            spares=spec.spares,
            capacity=spec.capacity.type,
            reservation_id=spec.capacity.reservation_id,
            vpc_cidr=spec.network.vpc_cidr,
            vpc_id=spec.network.vpc_id,
            subnet_id=spec.network.subnet_id,
            ssh_cidr=spec.network.ssh_cidr,
            bastion=spec.network.bastion,
            image=spec.image,
            filesystem=filesystem,
            checkpoints=checkpoint_args(spec),
            tags=fleet_tags(spec),
        )


@dataclass(frozen=True)
class Context:
    """Logical-name prefix, tags and resource options shared by every child of one AwsFleet."""

    args: AwsFleetArgs
    parent: pulumi.Resource
    provider: aws.Provider

    def name(self, suffix: str) -> str:
        return f"{self.args.name}-{suffix}"

    def tags(self, role: str) -> dict[str, str]:
        return {**self.args.tags, "Name": self.name(role)}

    def opts(
        self, depends_on: list[pulumi.Resource] | None = None, delete_before_replace: bool = False
    ) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(
            parent=self.parent,
            provider=self.provider,
            depends_on=depends_on,
            delete_before_replace=delete_before_replace,
        )

    def invoke_opts(self) -> pulumi.InvokeOutputOptions:
        return pulumi.InvokeOutputOptions(parent=self.parent, provider=self.provider)
