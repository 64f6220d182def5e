"""The nodes: an instance profile, one launch template, and one Auto Scaling group.

One group holds every node and spare, so 8 and 1,024 nodes make the same resources and replacing a
rejected node is the group's job (terminate it; the group launches a like one). Choices:

- Image: `spec.image`, or the AWS Deep Learning Base OSS NVIDIA driver AMI (Ubuntu 22.04) read from
  its public SSM parameter at deploy time with `aws.ssm.get_parameter`, then pinned into the launch
  template. A `resolve:ssm:` image id would be re-read at every launch, so a replacement node could
  boot a newer driver than the rest of the fleet, which the burn-in gate rejects as heterogeneous;
  pinning makes an image change an explicit `pulumi up` with a visible diff. The invoke is answered
  by the mocks under `fleetforge plan`. The root device name is read from the image the same way, so
  the encrypted gp3 mapping replaces the image's root volume rather than adding an empty one.
- Root volume: encrypted with the account's EBS key, not the fleet's KMS key: a customer key would
  also need a grant to the Auto Scaling service-linked role, whose absence makes every launch fail.
- IMDSv2 only, hop limit 2: training runs in containers, one network hop behind the host.
- Placement: a cluster placement group for on-demand and spot. A Capacity Block is already placed
  together by EC2 and rejects launches into a placement group (AWS ParallelCluster refuses that
  combination); a targeted reservation carries the placement group it was created in. Both therefore
  launch without one.
- Sizes: desired = max = nodes + spares. min = nodes, so spares can be shed but never the job's
  nodes; a Capacity Block is static (min = max), as EC2 expects for Capacity Blocks.
- `wait_for_capacity_timeout = 0`: a Capacity Block may start in the future and 1,000 instances take
  long to boot; burn-in, not `pulumi up`, is where a fleet proves it is whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from fleet.catalog.layout import aws_network_interfaces
from stacks.aws_context import Context

DLAMI_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-22.04/latest/ami-id"
ROOT_VOLUME_GIB = 512  # DLAMI root plus container images and logs; data lives on Lustre
CHECKPOINT_PREFIX = "checkpoints/"
IMDS_HOP_LIMIT = 2


# Session Manager's minimum for the SSM Agent on the node, instead of AmazonSSMManagedInstanceCore,
# which also grants ssm:GetParameter* on every parameter in the account plus Run Command, State
# Manager and inventory, none of which fleetforge uses. AWS documents this set as the custom instance
# profile for Session Manager:
# https://docs.aws.amazon.com/systems-manager/latest/userguide/getting-started-create-iam-instance-profile.html
# Session logging to S3/CloudWatch or KMS-encrypted sessions would add s3:PutObject,
# s3:GetEncryptionConfiguration, logs:* and kms:Decrypt on their own resources; fleetforge configures
# neither, so none is granted. The node role also gets no ssm:GetParameter: the image's parameter is
# read by `pulumi up` with the operator's credentials, never by a node.
SESSION_MANAGER_ACTIONS = (
    "ssm:UpdateInstanceInformation",
    "ssmmessages:CreateControlChannel",
    "ssmmessages:CreateDataChannel",
    "ssmmessages:OpenControlChannel",
    "ssmmessages:OpenDataChannel",
)
SESSION_MANAGER_POLICY: dict[str, Any] = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "SessionManagerAgent",
            "Effect": "Allow",
            "Action": list(SESSION_MANAGER_ACTIONS),
            # These actions take no resource-level permissions: the agent acts on its own instance.
            "Resource": "*",
        }
    ],
}


@dataclass(frozen=True)
class Compute:
    group: aws.autoscaling.Group
    launch_template: aws.ec2.LaunchTemplate
    placement_group: aws.ec2.PlacementGroup | None
    role: aws.iam.Role
    min_size: int
    max_size: int
    desired: int


@dataclass(frozen=True)
class Account:
    partition: pulumi.Output[str]
    account_id: pulumi.Output[str]


def account(ctx: Context) -> Account:
    partition = aws.get_partition_output(opts=ctx.invoke_opts()).partition
    account_id = aws.get_caller_identity_output(opts=ctx.invoke_opts()).account_id
    return Account(partition=partition, account_id=account_id)


def instance_role(
    ctx: Context, bucket_arn: pulumi.Output[str] | None, key_arn: pulumi.Output[str] | None
) -> tuple[aws.iam.Role, aws.iam.InstanceProfile]:
    """Least privilege: Session Manager's own actions (no inbound SSH needed) and, with a checkpoint bucket,
    read of the bucket plus write (never delete) under checkpoints/. Versioning and the lifecycle
    own retention, so a compromised node cannot destroy a checkpoint."""
    role = aws.iam.Role(
        ctx.name("node-role"),
        description=f"fleetforge {ctx.args.name} nodes",
        assume_role_policy=json.dumps(
            {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"Service": "ec2.amazonaws.com"},
                        "Action": "sts:AssumeRole",
                    }
                ],
            }
        ),
        tags=ctx.tags("node-role"),
        opts=ctx.opts(),
    )
    aws.iam.RolePolicy(
        ctx.name("node-session-manager"),
        role=role.id,
        policy=json.dumps(SESSION_MANAGER_POLICY),
        opts=ctx.opts(),
    )
    if bucket_arn is not None and key_arn is not None:
        aws.iam.RolePolicy(
            ctx.name("node-checkpoints"),
            role=role.id,
            policy=pulumi.Output.json_dumps(_checkpoint_policy(ctx.args.region, bucket_arn, key_arn)),
            opts=ctx.opts(),
        )
    profile = aws.iam.InstanceProfile(
        ctx.name("node-profile"), role=role.name, tags=ctx.tags("node-profile"), opts=ctx.opts()
    )
    return role, profile


def _checkpoint_policy(region: str, bucket_arn: pulumi.Output[str], key_arn: pulumi.Output[str]) -> Any:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Sid": "ListCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:ListBucket", "s3:GetBucketLocation"],
                "Resource": bucket_arn,
            },
            {
                "Sid": "ReadCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:GetObject", "s3:GetObjectVersion"],
                "Resource": pulumi.Output.concat(bucket_arn, "/*"),
            },
            {
                "Sid": "WriteCheckpoints",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
                "Resource": pulumi.Output.concat(bucket_arn, "/", CHECKPOINT_PREFIX, "*"),
            },
            {
                "Sid": "UseTheBucketKeyThroughS3",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": key_arn,
                "Condition": {"StringEquals": {"kms:ViaService": f"s3.{region}.amazonaws.com"}},
            },
        ],
    }


def nodes(
    ctx: Context,
    subnet_id: pulumi.Input[str],
    nodes_sg: aws.ec2.SecurityGroup,
    profile: aws.iam.InstanceProfile,
    role: aws.iam.Role,
) -> Compute:
    args = ctx.args
    image_id: pulumi.Input[str] = (
        args.image or aws.ssm.get_parameter_output(name=DLAMI_PARAMETER, opts=ctx.invoke_opts()).value
    )
    image = aws.ec2.get_ami_output(
        filters=pulumi.Output.from_input(image_id).apply(
            lambda i: [aws.ec2.GetAmiFilterArgs(name="image-id", values=[i])]
        ),
        most_recent=True,
        opts=ctx.invoke_opts(),
    )
    launch_template = aws.ec2.LaunchTemplate(
        ctx.name("lt"),
        aws.ec2.LaunchTemplateArgs(
            name_prefix=ctx.name("lt-"),
            description=f"fleetforge {args.name}: {args.sku.sku} nodes",
            image_id=image.id,
            instance_type=args.sku.machine_type,
            ebs_optimized="true",
            update_default_version=True,
            iam_instance_profile=aws.ec2.LaunchTemplateIamInstanceProfileArgs(arn=profile.arn),
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=IMDS_HOP_LIMIT,
                instance_metadata_tags="disabled",
            ),
            block_device_mappings=[
                aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                    device_name=image.root_device_name,
                    ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                        volume_type="gp3",
                        volume_size=ROOT_VOLUME_GIB,
                        encrypted="true",
                        delete_on_termination="true",
                    ),
                )
            ],
            network_interfaces=_interfaces(ctx, nodes_sg),
            instance_market_options=_market(ctx),
            capacity_reservation_specification=_reservation(ctx),
            tag_specifications=[
                aws.ec2.LaunchTemplateTagSpecificationArgs(resource_type=kind, tags=ctx.tags("node"))
                for kind in ("instance", "volume", "network-interface")
            ],
            tags=ctx.tags("lt"),
        ),
        # The profile's role must exist before an instance can assume it.
        ctx.opts(depends_on=[role]),
    )
    placement = None
    if args.capacity in {"on-demand", "spot"}:
        placement = aws.ec2.PlacementGroup(
            ctx.name("pg"), strategy="cluster", tags=ctx.tags("pg"), opts=ctx.opts()
        )
    static = args.capacity == "capacity-block"
    min_size, max_size, desired = (args.size if static else args.nodes), args.size, args.size
    group = aws.autoscaling.Group(
        ctx.name("nodes"),
        aws.autoscaling.GroupArgs(
            min_size=min_size,
            max_size=max_size,
            desired_capacity=desired,
            vpc_zone_identifiers=[subnet_id],
            placement_group=placement.id if placement is not None else None,
            launch_template=aws.autoscaling.GroupLaunchTemplateArgs(
                id=launch_template.id, version=launch_template.latest_version.apply(str)
            ),
            health_check_type="EC2",
            health_check_grace_period=900,
            capacity_rebalance=False,
            wait_for_capacity_timeout="0",
            tags=[
                aws.autoscaling.GroupTagArgs(key=k, value=v, propagate_at_launch=True)
                for k, v in sorted(ctx.tags("node").items())
            ],
        ),
        ctx.opts(),
    )
    return Compute(group, launch_template, placement, role, min_size, max_size, desired)


def _interfaces(
    ctx: Context, nodes_sg: aws.ec2.SecurityGroup
) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One interface per catalog slot: the ENA primary carries IP, one EFA per network card carries
    the fabric. Only the primary may state associate_public_ip_address (EC2 rejects it on the
    others when launching with several interfaces); it says "false"."""
    interfaces = []
    for slot in aws_network_interfaces(ctx.args.sku):
        primary = slot.network_card_index == 0 and slot.device_index == 0
        interfaces.append(
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                network_card_index=slot.network_card_index,
                device_index=slot.device_index,
                interface_type=slot.interface_type,
                security_groups=[nodes_sg.id],
                delete_on_termination="true",
                associate_public_ip_address="false" if primary else None,
                description=f"{ctx.args.name} card {slot.network_card_index} {slot.interface_type}",
            )
        )
    return interfaces


def _market(ctx: Context) -> aws.ec2.LaunchTemplateInstanceMarketOptionsArgs | None:
    if ctx.args.capacity == "capacity-block":
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")
    if ctx.args.capacity == "spot":
        return aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(
            market_type="spot",
            # Auto Scaling launches one-time Spot requests; cluster placement groups refuse
            # stop/hibernate interruption behaviour.
            spot_options=aws.ec2.LaunchTemplateInstanceMarketOptionsSpotOptionsArgs(
                spot_instance_type="one-time", instance_interruption_behavior="terminate"
            ),
        )
    return None


def _reservation(ctx: Context) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs | None:
    if ctx.args.capacity in {"reservation", "capacity-block"}:
        return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
            capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                capacity_reservation_id=ctx.args.reservation_id
            )
        )
    return None
