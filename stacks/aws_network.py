"""The fleet's network: one private subnet in the spec's zone, egress, and security groups.

Egress choice: a NAT gateway (in a /28 public subnet that holds nothing else) plus a free S3
gateway endpoint. Training nodes pull containers and packages from registries outside AWS (NGC,
Docker Hub, PyPI, OS mirrors), which interface endpoints cannot reach; the S3 gateway endpoint keeps
checkpoint and data traffic, the bulk of the bytes, off the NAT gateway's per-GB charge. Nodes never
get a public address: the private subnet does not map one and launch templates ask for none.

Security groups use one rule resource per rule (`aws.vpc.SecurityGroup*Rule`), not inline rules:
the node and file-system groups reference each other, which inline rules cannot express without a
cycle. The AWS provider removes the allow-all egress a new group starts with, so the rules below are
the complete set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_aws as aws

from fleet.network import private_subnet, public_subnet
from stacks.aws_context import Context

# Lustre LNet: 988 for the file system, 1018-1023 for client connections (FSx for Lustre guide).
LUSTRE_PORTS = ((988, 988), (1018, 1023))
INTERNET = "0.0.0.0/0"


@dataclass(frozen=True)
class Network:
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    created: bool


@dataclass(frozen=True)
class SecurityGroups:
    nodes: aws.ec2.SecurityGroup
    lustre: aws.ec2.SecurityGroup | None


def network(ctx: Context) -> Network:
    if ctx.args.subnet_id is not None:
        return _existing(ctx, ctx.args.subnet_id)
    return _created(ctx)


def _existing(ctx: Context, subnet_id: str) -> Network:
    """Use the operator's subnet; check at deploy time that it lies in the spec's zone and VPC."""
    subnet = aws.ec2.get_subnet_output(id=subnet_id, opts=ctx.invoke_opts())
    zone, wanted_vpc = ctx.args.zone, ctx.args.vpc_id

    def checked(found: list[str]) -> str:
        vpc_id, az = found
        if az != zone:
            raise pulumi.RunError(f"network.subnet_id: {subnet_id} is in {az}, not the spec's zone {zone}")
        if wanted_vpc is not None and vpc_id != wanted_vpc:
            raise pulumi.RunError(
                f"network.subnet_id: {subnet_id} is in {vpc_id}, not network.vpc_id {wanted_vpc}"
            )
        return vpc_id

    vpc_id = pulumi.Output.all(subnet.vpc_id, subnet.availability_zone).apply(checked)
    return Network(vpc_id=vpc_id, subnet_id=subnet.id, created=False)


def _created(ctx: Context) -> Network:
    cidr = ctx.args.vpc_cidr
    vpc = aws.ec2.Vpc(
        ctx.name("vpc"),
        cidr_block=str(cidr),
        enable_dns_support=True,  # FSx mount targets are DNS names
        enable_dns_hostnames=True,
        tags=ctx.tags("vpc"),
        opts=ctx.opts(),
    )
    # Adopt the VPC's default group and strip its rules, so nothing joins it by accident.
    aws.ec2.DefaultSecurityGroup(
        ctx.name("default-sg"),
        vpc_id=vpc.id,
        ingress=[],
        egress=[],
        tags=ctx.tags("default-sg"),
        opts=ctx.opts(),
    )
    private = aws.ec2.Subnet(
        ctx.name("private"),
        vpc_id=vpc.id,
        cidr_block=str(private_subnet(cidr)),
        availability_zone=ctx.args.zone,
        map_public_ip_on_launch=False,
        tags=ctx.tags("private"),
        opts=ctx.opts(),
    )
    public = aws.ec2.Subnet(
        ctx.name("public"),
        vpc_id=vpc.id,
        cidr_block=str(public_subnet(cidr)),
        availability_zone=ctx.args.zone,
        map_public_ip_on_launch=False,  # only the NAT gateway lives here, on its Elastic IP
        tags=ctx.tags("public"),
        opts=ctx.opts(),
    )
    igw = aws.ec2.InternetGateway(ctx.name("igw"), vpc_id=vpc.id, tags=ctx.tags("igw"), opts=ctx.opts())
    eip = aws.ec2.Eip(
        ctx.name("nat-ip"), domain="vpc", tags=ctx.tags("nat-ip"), opts=ctx.opts(depends_on=[igw])
    )
    nat = aws.ec2.NatGateway(
        ctx.name("nat"),
        allocation_id=eip.id,
        subnet_id=public.id,
        connectivity_type="public",
        tags=ctx.tags("nat"),
        opts=ctx.opts(depends_on=[igw]),
    )
    public_rt = aws.ec2.RouteTable(
        ctx.name("public-rt"),
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block=INTERNET, gateway_id=igw.id)],
        tags=ctx.tags("public-rt"),
        opts=ctx.opts(),
    )
    aws.ec2.RouteTableAssociation(
        ctx.name("public-rta"), subnet_id=public.id, route_table_id=public_rt.id, opts=ctx.opts()
    )
    private_rt = aws.ec2.RouteTable(
        ctx.name("private-rt"),
        vpc_id=vpc.id,
        routes=[aws.ec2.RouteTableRouteArgs(cidr_block=INTERNET, nat_gateway_id=nat.id)],
        tags=ctx.tags("private-rt"),
        opts=ctx.opts(),
    )
    aws.ec2.RouteTableAssociation(
        ctx.name("private-rta"), subnet_id=private.id, route_table_id=private_rt.id, opts=ctx.opts()
    )
    aws.ec2.VpcEndpoint(
        ctx.name("s3-endpoint"),
        vpc_id=vpc.id,
        service_name=f"com.amazonaws.{ctx.args.region}.s3",
        vpc_endpoint_type="Gateway",
        route_table_ids=[private_rt.id],
        tags=ctx.tags("s3-endpoint"),
        opts=ctx.opts(),
    )
    return Network(vpc_id=vpc.id, subnet_id=private.id, created=True)


def security_groups(ctx: Context, net: Network, with_lustre: bool) -> SecurityGroups:
    nodes = aws.ec2.SecurityGroup(
        ctx.name("nodes-sg"),
        description=f"fleetforge {ctx.args.name} nodes: EFA among themselves, SSH only from the named source",
        vpc_id=net.vpc_id,
        revoke_rules_on_delete=True,
        tags=ctx.tags("nodes-sg"),
        opts=ctx.opts(),
    )
    # EFA requires all traffic to and from the group itself (EC2 EFA guide); NCCL's TCP bootstrap
    # and torchrun's rendezvous ride the same rules.
    _rule(ctx, "nodes-self-in", nodes, "in", "-1", None, peer=nodes.id, why="EFA and NCCL among nodes")
    _rule(ctx, "nodes-self-out", nodes, "out", "-1", None, peer=nodes.id, why="EFA and NCCL among nodes")
    # SSM, S3 (through the gateway endpoint) and container registries speak HTTPS; OS package
    # mirrors (Ubuntu's EC2 mirrors) still speak plain HTTP with signed packages.
    _rule(ctx, "nodes-https-out", nodes, "out", "tcp", (443, 443), cidr=INTERNET, why="HTTPS egress via NAT")
    _rule(ctx, "nodes-http-out", nodes, "out", "tcp", (80, 80), cidr=INTERNET, why="OS package mirrors")
    if ctx.args.ssh_cidr is not None:
        _rule(ctx, "ssh-from-cidr", nodes, "in", "tcp", (22, 22), cidr=str(ctx.args.ssh_cidr), why="SSH")
    bastion = ctx.args.bastion
    if bastion is not None and bastion.startswith("sg-"):
        _rule(ctx, "ssh-from-bastion", nodes, "in", "tcp", (22, 22), peer=bastion, why="SSH from the bastion")
    elif bastion is not None:
        _rule(
            ctx,
            "ssh-from-bastion",
            nodes,
            "in",
            "tcp",
            (22, 22),
            cidr=f"{bastion}/32",
            why="SSH from the bastion",
        )
    if not with_lustre:
        return SecurityGroups(nodes=nodes, lustre=None)
    lustre = aws.ec2.SecurityGroup(
        ctx.name("lustre-sg"),
        description=f"fleetforge {ctx.args.name} FSx for Lustre: Lustre ports from the fleet and itself only",
        vpc_id=net.vpc_id,
        revoke_rules_on_delete=True,
        tags=ctx.tags("lustre-sg"),
        opts=ctx.opts(),
    )
    for low, high in LUSTRE_PORTS:
        ports = (low, high)
        # File servers talk among themselves and with clients; FSx refuses to create a file system
        # whose group does not allow its own Lustre traffic.
        _rule(ctx, f"lustre-self-in-{low}", lustre, "in", "tcp", ports, peer=lustre.id, why="Lustre servers")
        _rule(
            ctx, f"lustre-self-out-{low}", lustre, "out", "tcp", ports, peer=lustre.id, why="Lustre servers"
        )
        _rule(
            ctx, f"lustre-from-nodes-{low}", lustre, "in", "tcp", ports, peer=nodes.id, why="Lustre clients"
        )
        _rule(ctx, f"lustre-to-nodes-{low}", lustre, "out", "tcp", ports, peer=nodes.id, why="Lustre clients")
        _rule(ctx, f"nodes-to-lustre-{low}", nodes, "out", "tcp", ports, peer=lustre.id, why="Lustre client")
        _rule(ctx, f"nodes-from-lustre-{low}", nodes, "in", "tcp", ports, peer=lustre.id, why="Lustre client")
    return SecurityGroups(nodes=nodes, lustre=lustre)


def _rule(
    ctx: Context,
    suffix: str,
    group: aws.ec2.SecurityGroup,
    direction: str,
    protocol: str,
    ports: tuple[int, int] | None,
    *,
    why: str,
    cidr: str | None = None,
    peer: pulumi.Input[str] | None = None,
) -> None:
    from_port, to_port = ports if ports else (None, None)
    # Ingress and egress rules take the same arguments; only the resource type differs.
    fields: dict[str, Any] = {
        "security_group_id": group.id,
        "ip_protocol": protocol,
        "from_port": from_port,
        "to_port": to_port,
        "cidr_ipv4": cidr,
        "referenced_security_group_id": peer,
        "description": why,
        "tags": ctx.tags(suffix),
    }
    if direction == "in":
        aws.vpc.SecurityGroupIngressRule(
            ctx.name(suffix), aws.vpc.SecurityGroupIngressRuleArgs(**fields), ctx.opts()
        )
    else:
        aws.vpc.SecurityGroupEgressRule(
            ctx.name(suffix), aws.vpc.SecurityGroupEgressRuleArgs(**fields), ctx.opts()
        )
