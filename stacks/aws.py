"""AwsFleet: a FleetSpec for an AWS SKU as one homogeneous, EFA-connected, placement-grouped fleet
with FSx for Lustre and an S3 checkpoint bucket, secure by default.

The parts live beside this file, one concern each: aws_network (VPC, egress, security groups),
aws_compute (instance profile, launch template, Auto Scaling group), aws_storage (KMS, FSx, S3).
Every child is parented to the component and pinned to its provider, which deploys in the spec's
region. The registered outputs follow stacks.outputs, the shape every cloud shares.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws

from fleet.catalog.layout import aws_network_interfaces
from stacks import aws_compute, aws_network, aws_storage
from stacks.aws_context import AwsFleetArgs, Context
from stacks.outputs import (
    CheckpointsSection,
    FabricSection,
    FleetOutputs,
    FleetSection,
    GroupSection,
    StorageSection,
    fleet_section,
)

__all__ = ["AwsFleet", "AwsFleetArgs"]

TYPE_TOKEN = "fleetforge:aws:Fleet"


class AwsFleet(pulumi.ComponentResource):
    outputs: FleetOutputs

    def __init__(self, name: str, args: AwsFleetArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        provider = aws.Provider(
            f"{args.name}-aws", aws.ProviderArgs(region=args.region), pulumi.ResourceOptions(parent=self)
        )
        ctx = Context(args=args, parent=self, provider=provider)

        acct = aws_compute.account(ctx)
        with_dra = args.filesystem is not None and args.checkpoints is not None
        key = aws_storage.kms_key(ctx, acct, for_data_repository=with_dra)
        bucket = aws_storage.bucket(ctx, key)
        role, profile = aws_compute.instance_role(
            ctx, bucket.arn if bucket is not None else None, key.arn if bucket is not None else None
        )
        net = aws_network.network(ctx)
        groups = aws_network.security_groups(ctx, net, with_lustre=args.filesystem is not None)
        compute = aws_compute.nodes(ctx, net.subnet_id, groups.nodes, profile, role)
        fs = (
            aws_storage.filesystem(ctx, net.subnet_id, groups.lustre, key)
            if groups.lustre is not None
            else None
        )
        dra = aws_storage.data_repository(ctx, fs, bucket)

        self.outputs = FleetOutputs(
            fleet=_fleet(args),
            group=_group(args, compute),
            fabric=_fabric(args, compute),
            storage=_storage(args, fs),
            checkpoints=_checkpoints(args, bucket, key, dra is not None),
            tags=dict(args.tags),
        )
        self.register_outputs(dict(self.outputs))


def _fleet(args: AwsFleetArgs) -> FleetSection:
    return fleet_section(
        "aws",
        args.sku,
        name=args.name,
        region=args.region,
        zone=args.zone,
        nodes=args.nodes,
        spares=args.spares,
        capacity=args.capacity,
    )


def _group(args: AwsFleetArgs, compute: aws_compute.Compute) -> GroupSection:
    return GroupSection(
        kind="aws-autoscaling-group",
        name=compute.group.name,
        region=args.region,
        zone=args.zone,
        min_size=compute.min_size,
        max_size=compute.max_size,
        desired=compute.desired,
        node_filter=compute.group.name.apply(lambda n: {"tag:aws:autoscaling:groupName": n}),
    )


def _fabric(args: AwsFleetArgs, compute: aws_compute.Compute) -> FabricSection:
    fabric = args.sku.fabric
    if compute.placement_group is not None:
        placement: dict[str, Any] = {
            "strategy": "cluster-placement-group",
            "name": compute.placement_group.name,
        }
    else:
        placement = {"strategy": args.capacity, "name": args.reservation_id}
    return FabricSection(
        kind=fabric.kind,
        nic_kind=fabric.nic_kind,
        nics=fabric.nics,
        gbps_per_nic=fabric.gbps_per_nic,
        total_gbps=fabric.total_gbps,
        interfaces=[
            {
                "network_card_index": s.network_card_index,
                "device_index": s.device_index,
                "interface_type": s.interface_type,
            }
            for s in aws_network_interfaces(args.sku)
        ],
        placement=placement,
    )


def _storage(args: AwsFleetArgs, fs: aws.fsx.LustreFileSystem | None) -> StorageSection | None:
    if fs is None or args.filesystem is None:
        return None
    return StorageSection(
        kind="fsx-lustre",
        dns_name=fs.dns_name,
        mount_name=fs.mount_name,
        mount_point=args.filesystem.mount_point,
        capacity_gib=args.filesystem.capacity_gib,
        throughput_mbps_per_tib=args.filesystem.throughput_mbps_per_tib,
        mount_source=pulumi.Output.format("{0}@tcp:/{1}", fs.dns_name, fs.mount_name),
    )


def _checkpoints(
    args: AwsFleetArgs, bucket: aws.s3.Bucket | None, key: aws.kms.Key, mirrored: bool
) -> CheckpointsSection | None:
    if bucket is None or args.checkpoints is None:
        return None
    mount_point = args.filesystem.mount_point if args.filesystem is not None else None
    return CheckpointsSection(
        kind="s3",
        bucket=bucket.bucket,
        uri=pulumi.Output.concat("s3://", bucket.bucket, "/", aws_compute.CHECKPOINT_PREFIX),
        prefix=aws_compute.CHECKPOINT_PREFIX,
        retention_days=args.checkpoints.retention_days,
        noncurrent_retention_days=args.checkpoints.noncurrent_retention_days,
        kms_key=key.arn,
        filesystem_path=(
            f"{mount_point.rstrip('/')}{aws_storage.FILESYSTEM_CHECKPOINT_PATH}"
            if mirrored and mount_point
            else None
        ),
    )
