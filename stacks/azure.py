"""AzureFleet: a FleetSpec for an Azure SKU as one fleet of VM scale sets, one per InfiniBand
domain, with Azure Managed Lustre and a checkpoint storage account, secure by default.

The parts live beside this file, one concern each: azure_context (args, InfiniBand domains),
azure_network (VNet, subnets, NSG, NAT gateway), azure_compute (identity, proximity placement
group, scale sets), azure_storage (AMLFS, checkpoint account and its grant). Every child is
parented to the component and pinned to its provider in the spec's location; the subscription
is the provider's, read once at deploy time. The registered outputs follow stacks.outputs.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_azure_native as azure_native
from pulumi_azure_native import authorization, resources, storagecache

from stacks import azure_compute, azure_network, azure_storage
from stacks.azure_context import AzureFleetArgs, Context
from stacks.outputs import (
    CheckpointsSection,
    FabricSection,
    FleetOutputs,
    FleetSection,
    GroupSection,
    StorageSection,
    fleet_section,
)

__all__ = ["AzureFleet", "AzureFleetArgs"]

TYPE_TOKEN = "fleetforge:azure:Fleet"


class AzureFleet(pulumi.ComponentResource):
    outputs: FleetOutputs

    def __init__(self, name: str, args: AzureFleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        key = azure_compute.ssh_key(args)  # no key, no fleet: nodes never take passwords
        provider = azure_native.Provider(
            f"{args.name}-azure",
            azure_native.ProviderArgs(location=args.location),
            pulumi.ResourceOptions(parent=self),
        )
        subscription = authorization.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self, provider=provider)
        ).subscription_id
        group = _resource_group(args, self, provider)
        ctx = Context(
            args=args, parent=self, provider=provider, resource_group=group, subscription_id=subscription
        )

        net = azure_network.networks(ctx, with_lustre=args.filesystem is not None)
        who = azure_compute.identity(ctx)
        ckpt = azure_storage.checkpoints(ctx)
        if ckpt is not None:
            azure_storage.grant_checkpoints(ctx, ckpt, who)
        fs = azure_storage.filesystem(ctx, net.lustre.id) if net.lustre is not None else None
        compute = azure_compute.nodes(ctx, net.nodes.id, who, key)

        self.outputs = FleetOutputs(
            fleet=_fleet(args),
            group=_group(ctx, compute),
            fabric=_fabric(args, compute),
            storage=_storage(args, fs),
            checkpoints=_checkpoints(args, ckpt),
            tags=dict(args.tags),
        )
        self.register_outputs(dict(self.outputs))


def _resource_group(
    args: AzureFleetArgs, parent: pulumi.Resource, provider: azure_native.Provider
) -> pulumi.Output[str]:
    if args.resource_group is not None:
        return pulumi.Output.from_input(args.resource_group)
    created = resources.ResourceGroup(
        f"{args.name}-rg",
        resources.ResourceGroupArgs(
            resource_group_name=f"{args.name}-rg",
            location=args.location,
            tags={**args.tags, "role": "fleet"},
        ),
        pulumi.ResourceOptions(parent=parent, provider=provider),
    )
    return created.name


def _fleet(args: AzureFleetArgs) -> FleetSection:
    return fleet_section(
        "azure",
        args.sku,
        name=args.name,
        region=args.location,
        zone=args.zone,
        nodes=args.nodes,
        spares=args.spares,
        capacity=args.capacity,
    )


def _domains(compute: azure_compute.Compute) -> list[dict[str, Any]]:
    return [
        {"ib_domain": s.ib_domain, "scale_set": s.name, "capacity": s.capacity} for s in compute.scale_sets
    ]


def _group(ctx: Context, compute: azure_compute.Compute) -> GroupSection:
    args = ctx.args
    return GroupSection(
        kind="azure-vm-scale-set",
        name=compute.scale_sets[0].name,
        subscription_id=ctx.subscription_id,
        resource_group=ctx.resource_group,
        region=args.location,
        zone=args.zone,
        scale_sets=[
            {"name": s.name, "ib_domain": s.ib_domain, "capacity": s.capacity} for s in compute.scale_sets
        ],
        min_size=args.nodes,
        max_size=args.size,
        desired=args.size,
        node_filter={"tags.fleet": args.tags["fleet"]},
    )


def _fabric(args: AzureFleetArgs, compute: azure_compute.Compute) -> FabricSection:
    fabric = args.sku.fabric
    return FabricSection(
        kind=fabric.kind,
        nic_kind=fabric.nic_kind,
        nics=fabric.nics,
        gbps_per_nic=fabric.gbps_per_nic,
        total_gbps=fabric.total_gbps,
        interfaces=[
            {"network_card_index": i, "device_index": 0, "interface_type": fabric.nic_kind}
            for i in range(fabric.nics)
        ],
        placement={
            "strategy": "azure-ib-domains",
            "name": f"{args.name}-ppg",
            "domain_size": args.ib_domain_size,
            "domains": _domains(compute),
        },
    )


def _storage(args: AzureFleetArgs, fs: storagecache.AmlFilesystem | None) -> StorageSection | None:
    if fs is None or args.filesystem is None:
        return None
    mgs = fs.client_info.apply(lambda c: (c.mgs_address if c is not None else None) or "")
    return StorageSection(
        kind="amlfs",
        dns_name=mgs,
        mount_name=azure_storage.AMLFS_FSNAME,
        mount_point=args.filesystem.mount_point,
        capacity_gib=args.filesystem.capacity_tib * 1024,
        throughput_mbps_per_tib=args.filesystem.throughput_mbps_per_tib,
        mount_source=pulumi.Output.concat(mgs, "@tcp:/", azure_storage.AMLFS_FSNAME),
    )


def _checkpoints(args: AzureFleetArgs, ckpt: azure_storage.Checkpoints | None) -> CheckpointsSection | None:
    if ckpt is None or args.checkpoints is None:
        return None
    endpoint = ckpt.account.name.apply(lambda n: f"https://{n}.blob.core.windows.net/")
    return CheckpointsSection(
        kind="azure-blob",
        bucket=ckpt.account.name,
        uri=pulumi.Output.concat(endpoint, azure_storage.CHECKPOINT_CONTAINER, "/"),
        prefix=azure_storage.CHECKPOINT_CONTAINER,
        retention_days=args.checkpoints.retention_days,
        noncurrent_retention_days=args.checkpoints.noncurrent_retention_days,
        kms_key=args.key_url,
        filesystem_path=None,
    )
