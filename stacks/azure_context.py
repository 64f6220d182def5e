"""What every Azure part shares: the fleet's typed args, its tags, and options that parent each
child to the component and pin it to the component's own provider (the spec's location).

InfiniBand connects only the VMs of one placement group, and a scale set with
`singlePlacementGroup=true` holds at most 100 VMs (Azure, "Working with large virtual machine
scale sets"). A fleet larger than one domain is split into several scale sets, one InfiniBand
domain each, sizes balanced and spares counted: the count of resources grows with domains, never
with nodes inside a domain.

From the spec: `network.ib_domain_size` (default: the SKU's placement-group limit, so the
domains are fleet.spec.azure_ib_domains'), `azure.resource_group` (None: the stack creates
`<name>-rg`), `azure.ssh_public_key` (None: Pulumi config `fleetforge:sshPublicKey`),
`azure.key_url` + `azure.key_vault_id` (None: Microsoft-managed keys for the file system and the checkpoint account).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import pulumi
import pulumi_azure_native as azure_native

from fleet.catalog import Sku
from fleet.spec import FleetSpec
from stacks.azure_layout import amlfs_capacity_tib
from stacks.outputs import CheckpointArgs, checkpoint_args, fleet_tags

IB_DOMAIN_MAX = 100  # singlePlacementGroup=true: 100 VMs per scale set
SSH_KEY_CONFIG = "sshPublicKey"


@dataclass(frozen=True)
class FileSystemArgs:
    capacity_tib: int
    throughput_mbps_per_tib: int
    mount_point: str


@dataclass(frozen=True)
class AzureFleetArgs:
    """Everything `AzureFleet` needs, read once from a validated FleetSpec and its catalog SKU."""

    name: str
    location: str
    zone: str | None
    sku: Sku
    nodes: int
    spares: int
    capacity: str
    reservation: str | None
    vnet_cidr: ipaddress.IPv4Network
    ssh_cidr: ipaddress.IPv4Network | None
    image: str | None
    filesystem: FileSystemArgs | None
    checkpoints: CheckpointArgs | None
    tags: dict[str, str] = field(default_factory=dict)
    resource_group: str | None = None
    ssh_public_key: str | None = None
    ib_domain_size: int = IB_DOMAIN_MAX
    # A Key Vault key for the file system (customer-managed), when the spec names one, with its vault.
    key_url: str | None = None
    key_vault_id: str | None = None

    @property
    def size(self) -> int:
        return self.nodes + self.spares

    @property
    def domains(self) -> tuple[int, ...]:
        return ib_domains(self.size, self.ib_domain_size)

    @classmethod
    def from_spec(cls, spec: FleetSpec) -> AzureFleetArgs:
        if spec.cloud != "azure" or spec.region is None:
            raise ValueError(f"{spec.name}: AzureFleetArgs needs a validated azure spec with a region")
        fs = spec.storage.filesystem
        filesystem = None
        if fs is not None and fs.kind == "amlfs":
            filesystem = FileSystemArgs(
                amlfs_capacity_tib(fs), fs.throughput_mbps_per_tib or 125, fs.mount_point
            )
        azure = spec.azure
        return cls(
            name=spec.name,
            location=spec.region,
            zone=spec.zone,
            sku=spec.catalog_sku,
            nodes=spec.nodes,
            spares=spec.spares,
            capacity=spec.capacity.type,
            reservation=spec.capacity.reservation_id,
            vnet_cidr=spec.network.vpc_cidr,
            ssh_cidr=spec.network.ssh_cidr,
            image=spec.image,
            filesystem=filesystem,
            checkpoints=checkpoint_args(spec),
            tags=fleet_tags(spec),
            resource_group=azure.resource_group if azure is not None else None,
            ssh_public_key=azure.ssh_public_key if azure is not None else None,
            key_url=azure.key_url if azure is not None else None,
            key_vault_id=azure.key_vault_id if azure is not None else None,
            ib_domain_size=(
                spec.network.ib_domain_size or spec.catalog_sku.placement.max_nodes or IB_DOMAIN_MAX
            ),
        )


def ib_domains(size: int, domain_size: int) -> tuple[int, ...]:
    """Instances per scale set: ceil(size / domain_size) sets, balanced, larger first."""
    if size < 1 or domain_size < 1:
        raise ValueError(f"size {size} and domain size {domain_size} must be positive")
    count = -(-size // domain_size)
    base, extra = divmod(size, count)
    return tuple(base + 1 if i < extra else base for i in range(count))


@dataclass(frozen=True)
class Context:
    """Logical-name prefix, tags and resource options shared by every child of one AzureFleet."""

    args: AzureFleetArgs
    parent: pulumi.Resource
    provider: azure_native.Provider
    resource_group: pulumi.Output[str]
    subscription_id: pulumi.Output[str]

    def name(self, suffix: str) -> str:
        return f"{self.args.name}-{suffix}"

    def tags(self, role: str) -> dict[str, str]:
        return {**self.args.tags, "role": role}

    @property
    def zones(self) -> list[str] | None:
        return [self.args.zone] if self.args.zone else None

    def opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self.parent, provider=self.provider, depends_on=depends_on)
