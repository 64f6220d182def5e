"""GcpFleet: a FleetSpec for a GCP SKU as one homogeneous fleet on its GPUDirect networks (one
managed instance group) or one queued set of TPU slices, with Managed Lustre and a Cloud Storage
checkpoint bucket, secure by default.

The parts live beside this file, one concern each: gcp_layout (networks and slices derived from the
catalog, no Pulumi), gcp_network (VPCs, firewalls, Cloud NAT, private services access),
gcp_compute (service account, instance template, MIG), gcp_tpu (queued resource), gcp_storage
(Managed Lustre, bucket), gcp_keys (the service agents' grants on the spec's `kms_key`, which the
bucket, Managed Lustre and the nodes wait for). Every child is parented to the component and
pinned to its provider, which deploys in the spec's region and zone; the project is the
provider's (`gcp:project` stack config or the environment), read once at deploy time. The registered outputs follow
stacks.outputs, the shape every cloud shares.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_gcp as gcp

from stacks import gcp_compute, gcp_network, gcp_storage, gcp_tpu
from stacks.gcp_context import GROUP_LABEL, Context, GcpFleetArgs
from stacks.outputs import (
    CheckpointsSection,
    FabricSection,
    FleetOutputs,
    FleetSection,
    GroupSection,
    StorageSection,
    fleet_section,
)

__all__ = ["GcpFleet", "GcpFleetArgs"]

TYPE_TOKEN = "fleetforge:gcp:Fleet"


class GcpFleet(pulumi.ComponentResource):
    outputs: FleetOutputs

    def __init__(self, name: str, args: GcpFleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        provider = gcp.Provider(
            f"{args.name}-gcp",
            gcp.ProviderArgs(region=args.region, zone=args.zone),
            pulumi.ResourceOptions(parent=self),
        )
        project = gcp.organizations.get_client_config_output(
            opts=pulumi.InvokeOutputOptions(parent=self, provider=provider)
        ).project
        ctx = Context(args=args, parent=self, provider=provider, project=project)

        # TPU VMs take no service account from a queued resource (stacks.gcp_tpu).
        who = None if args.sku.is_tpu else gcp_compute.identity(ctx)
        net = gcp_network.networks(
            ctx, who.account.email if who is not None else None, with_lustre=args.filesystem is not None
        )
        bucket = gcp_storage.bucket(ctx)
        if bucket is not None and who is not None:
            gcp_storage.grant_checkpoints(ctx, bucket, who.member)
        fs = gcp_storage.filesystem(ctx, net.primary, net.services_connection)
        chips_per_vm = None  # the SKU's accelerators per node, except on a TPU VM
        if who is None:
            slices = gcp_tpu.slices(ctx, net)
            group, fabric = _tpu_group(ctx, slices), _tpu_fabric(args, net, slices)
            chips_per_vm = slices.shape.chips_per_vm
        else:
            compute = gcp_compute.nodes(ctx, net, who)
            group, fabric = _mig_group(ctx, compute), _mig_fabric(args, net, compute)

        self.outputs = FleetOutputs(
            fleet=_fleet(args, chips_per_vm),
            group=group,
            fabric=fabric,
            storage=_storage(args, fs),
            checkpoints=_checkpoints(args, bucket),
            tags=dict(args.tags),
        )
        self.register_outputs(dict(self.outputs))


def _fleet(args: GcpFleetArgs, chips_per_vm: int | None) -> FleetSection:
    """`chips_per_vm`: a TPU fleet's chips on each VM, which its slice decides (None: the SKU's)."""
    return fleet_section(
        "gcp",
        args.sku,
        name=args.name,
        region=args.region,
        zone=args.zone,
        nodes=args.nodes,
        spares=args.spares,
        capacity=args.capacity,
        accelerators_per_node=chips_per_vm,
    )


def _mig_group(ctx: Context, compute: gcp_compute.Compute) -> GroupSection:
    args = ctx.args
    return GroupSection(
        kind="gcp-managed-instance-group",
        name=compute.group.name,
        project=ctx.project,
        region=args.region,
        zone=args.zone,
        min_size=compute.min_size,
        max_size=compute.max_size,
        desired=compute.desired,
        node_filter={f"labels.{GROUP_LABEL}": args.group_label},
    )


def _tpu_group(ctx: Context, s: gcp_tpu.Slices) -> GroupSection:
    args = ctx.args
    hosts = args.nodes  # every TPU VM of every slice
    return GroupSection(
        kind="gcp-tpu-queued-resource",
        name=s.queued.name,
        project=ctx.project,
        region=args.region,
        zone=args.zone,
        min_size=hosts,
        max_size=hosts,
        desired=hosts,
        # The queued resource cannot label the TPU VMs it creates (stacks.gcp_tpu), so no label
        # finds them; the node ids the stack chose do, one TPU API node per slice.
        node_filter={
            "name": [
                pulumi.Output.concat("projects/", ctx.project, "/locations/", args.zone, "/nodes/", node_id)
                for node_id in s.node_ids
            ]
        },
    )


def _interfaces(net: gcp_network.Networks) -> list[dict[str, Any]]:
    return [
        {
            "network_card_index": nic.index,
            "device_index": 0,
            "interface_type": nic.nic_type,
            "network": nic.network,
            "subnetwork": nic.subnet,
            "role": nic.role,
        }
        for nic in net.layout.nics
    ]


def _mig_fabric(args: GcpFleetArgs, net: gcp_network.Networks, compute: gcp_compute.Compute) -> FabricSection:
    fabric = args.sku.fabric
    placement: dict[str, Any]
    if compute.placement is not None:
        placement = {"strategy": "compact-placement-policy", "name": compute.placement.name}
    elif compute.resize is not None:
        placement = {"strategy": "flex-start", "name": compute.resize.name}
    else:
        placement = {"strategy": args.capacity, "name": args.reservation}
    return FabricSection(
        kind=fabric.kind,
        nic_kind=fabric.nic_kind,
        nics=fabric.nics,
        gbps_per_nic=fabric.gbps_per_nic,
        total_gbps=fabric.total_gbps,
        interfaces=_interfaces(net),
        placement=placement,
    )


def _tpu_fabric(args: GcpFleetArgs, net: gcp_network.Networks, s: gcp_tpu.Slices) -> FabricSection:
    fabric = args.sku.fabric
    return FabricSection(
        kind=fabric.kind,
        nic_kind=fabric.nic_kind,
        nics=fabric.nics,
        gbps_per_nic=fabric.gbps_per_nic,
        total_gbps=fabric.total_gbps,
        interfaces=_interfaces(net),
        placement={
            "strategy": "tpu-slice",
            "name": s.shape.accelerator_type,
            "topology": s.shape.topology,
            "slices": len(s.node_ids),
            # How to list the slice VMs (hosts) with the TPU API, one command per slice.
            "tpu_nodes": list(s.node_ids),
            "hosts_per_tpu_node": s.shape.hosts,
            # Chips on each of those VMs (v5e/v6e: 4 on a multi-host slice, not the 8 of the largest VM).
            "chips_per_tpu_vm": s.shape.chips_per_vm,
            "list_hosts": [gcp_tpu.host_listing(args.zone, i) for i in s.node_ids],
        },
    )


def _storage(args: GcpFleetArgs, fs: gcp.lustre.Instance | None) -> StorageSection | None:
    if fs is None or args.filesystem is None:
        return None
    return StorageSection(
        kind="managed-lustre",
        dns_name=fs.mount_point.apply(lambda m: (m or "").split("@", 1)[0]),
        mount_name=fs.filesystem,
        mount_point=args.filesystem.mount_point,
        capacity_gib=args.filesystem.capacity_gib,
        throughput_mbps_per_tib=args.filesystem.throughput_mbps_per_tib,
        mount_source=fs.mount_point,
    )


def _checkpoints(args: GcpFleetArgs, bucket: gcp.storage.Bucket | None) -> CheckpointsSection | None:
    if bucket is None or args.checkpoints is None:
        return None
    return CheckpointsSection(
        kind="gcs",
        bucket=bucket.name,
        uri=pulumi.Output.concat("gs://", bucket.name, "/", gcp_storage.CHECKPOINT_PREFIX),
        prefix=gcp_storage.CHECKPOINT_PREFIX,
        retention_days=args.checkpoints.retention_days,
        noncurrent_retention_days=args.checkpoints.noncurrent_retention_days,
        kms_key=args.kms_key,
        filesystem_path=None,
    )
