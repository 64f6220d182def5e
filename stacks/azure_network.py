"""The fleet's network: one VNet with a node subnet and (with Managed Lustre) a file-system
subnet, one NSG, and a NAT gateway for egress.

- Nodes get no public IP: their scale sets carry no public IP configuration, and the subnet turns
  off Azure's default outbound access, so egress goes through the NAT gateway only. The NAT
  gateway's own Standard public address is the fleet's single way out, never a way in.
- The Managed Lustre subnet takes the same NAT gateway (and no default outbound access either):
  the file system must reach Azure cloud services (the AzureCloud service tag) from its subnet,
  and without a way out its creation and management traffic fail.
- The NSG allows SSH only from the spec's `network.ssh_cidr` (no rule at all without one),
  allows the VNet to itself (Lustre on 988, MPI bootstrap), and denies every other inbound flow
  from the internet explicitly, above Azure's default rules, so a later rule cannot open it by
  accident.
- Nodes take the VNet's first half; the file-system subnet starts the second half, as large as
  Microsoft sizes it for the file system's capacity (stacks.azure_layout).
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
from pulumi_azure_native import network

from stacks.azure_context import Context
from stacks.azure_layout import amlfs_subnet_prefix, subnet_ranges

SSH_PRIORITY = 100
VNET_PRIORITY = 200
DENY_INTERNET_PRIORITY = 4000


@dataclass(frozen=True)
class Networks:
    vnet: network.VirtualNetwork
    nodes: network.Subnet
    lustre: network.Subnet | None
    nsg: network.NetworkSecurityGroup
    nat: network.NatGateway


def networks(ctx: Context, with_lustre: bool) -> Networks:
    args = ctx.args
    fs = args.filesystem
    # AMLFS wants a dedicated subnet sized by its capacity (stacks.azure_layout).
    lustre_prefix = amlfs_subnet_prefix(fs.capacity_tib) if with_lustre and fs is not None else None
    try:
        nodes_range, lustre_range = subnet_ranges(args.vnet_cidr, lustre_prefix)
    except ValueError as exc:
        # stacks.prerequisites refuses this first; kept for args built without a validated spec.
        raise pulumi.RunError(f"network.vpc_cidr: {exc}; allowed: a larger range") from exc
    nsg = network.NetworkSecurityGroup(
        ctx.name("nsg"),
        network.NetworkSecurityGroupInitArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            security_rules=_rules(ctx),
            tags=ctx.tags("network"),
        ),
        ctx.opts(),
    )
    egress_ip = network.PublicIPAddress(
        ctx.name("nat-ip"),
        network.PublicIPAddressInitArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            sku=network.PublicIPAddressSkuArgs(name="Standard", tier="Regional"),
            public_ip_allocation_method="Static",
            public_ip_address_version="IPv4",
            zones=ctx.zones,
            tags=ctx.tags("egress"),
        ),
        ctx.opts(),
    )
    nat = network.NatGateway(
        ctx.name("nat"),
        network.NatGatewayInitArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            sku=network.NatGatewaySkuArgs(name="Standard"),
            public_ip_addresses=[network.SubResourceArgs(id=egress_ip.id)],
            idle_timeout_in_minutes=10,
            zones=ctx.zones,
            tags=ctx.tags("egress"),
        ),
        ctx.opts(),
    )
    vnet = network.VirtualNetwork(
        ctx.name("vnet"),
        network.VirtualNetworkInitArgs(
            resource_group_name=ctx.resource_group,
            location=args.location,
            address_space=network.AddressSpaceArgs(address_prefixes=[str(args.vnet_cidr)]),
            tags=ctx.tags("network"),
        ),
        ctx.opts(),
    )
    nodes = network.Subnet(
        ctx.name("nodes-subnet"),
        network.SubnetInitArgs(
            resource_group_name=ctx.resource_group,
            virtual_network_name=vnet.name,
            address_prefix=str(nodes_range),
            network_security_group=network.NetworkSecurityGroupArgs(id=nsg.id),
            nat_gateway=network.SubResourceArgs(id=nat.id),
            default_outbound_access=False,
        ),
        ctx.opts(),
    )
    lustre = None
    if lustre_range is not None:
        lustre = network.Subnet(
            ctx.name("lustre-subnet"),
            network.SubnetInitArgs(
                resource_group_name=ctx.resource_group,
                virtual_network_name=vnet.name,
                address_prefix=str(lustre_range),
                network_security_group=network.NetworkSecurityGroupArgs(id=nsg.id),
                # AMLFS needs outbound access to the AzureCloud service tag from within its subnet
                # (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites,
                # "Subnet access and permissions"). The NAT gateway gives it that way out and takes
                # no unsolicited inbound flow
                # (https://learn.microsoft.com/en-us/azure/nat-gateway/nat-overview).
                nat_gateway=network.SubResourceArgs(id=nat.id),
                default_outbound_access=False,
            ),
            # Two subnets of one VNet cannot be written at the same time.
            ctx.opts(depends_on=[nodes]),
        )
    return Networks(vnet, nodes, lustre, nsg, nat)


def _rules(ctx: Context) -> list[network.SecurityRuleArgs]:
    args = ctx.args
    rules = []
    if args.ssh_cidr is not None:
        rules.append(
            network.SecurityRuleArgs(
                name="allow-ssh-from-spec-cidr",
                priority=SSH_PRIORITY,
                direction="Inbound",
                access="Allow",
                protocol="Tcp",
                source_address_prefix=str(args.ssh_cidr),
                source_port_range="*",
                destination_address_prefix=str(args.vnet_cidr),
                destination_port_range="22",
                description="SSH only from network.ssh_cidr",
            )
        )
    rules += [
        network.SecurityRuleArgs(
            name="allow-fleet-internal",
            priority=VNET_PRIORITY,
            direction="Inbound",
            access="Allow",
            protocol="*",
            source_address_prefix=str(args.vnet_cidr),
            source_port_range="*",
            destination_address_prefix=str(args.vnet_cidr),
            destination_port_range="*",
            description="Nodes and the file system reach each other",
        ),
        network.SecurityRuleArgs(
            name="deny-internet-inbound",
            priority=DENY_INTERNET_PRIORITY,
            direction="Inbound",
            access="Deny",
            protocol="*",
            source_address_prefix="Internet",
            source_port_range="*",
            destination_address_prefix="*",
            destination_port_range="*",
            description="Nothing from the internet reaches the fleet",
        ),
    ]
    return rules
