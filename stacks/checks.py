"""What a valid FleetSpec still needs before the stack can provision it.

`fleet.spec` knows every cloud's general rules; these are the stack's own: which clouds this
program provisions today, and the AWS network facts it relies on (a subnet it can place nodes in,
a VPC range large enough for the fleet, a bastion it can reference). Pure Python with no Pulumi
import, so `fleetforge plan` reports them with field paths before it loads Pulumi or records a
resource, exactly like `fleetforge spec check` reports spec errors.
"""

from __future__ import annotations

import ipaddress

from fleet.spec import FleetSpec

PROVISIONED_CLOUDS = ("aws",)

# Addresses the private subnet keeps free beside one per node: FSx for Lustre file servers take
# ENIs in the same subnet (several per file system), and a rolling replacement briefly runs a node
# twice. AWS reserves 5 addresses in every subnet.
_SUBNET_HEADROOM = 64
_AWS_RESERVED = 5
# The public subnet is a /28 that only holds the NAT gateway; the VPC must be large enough to hold
# it beside a private half.
_LARGEST_VPC_PREFIX = 24


def spec_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    """(field path, message) for each reason this stack cannot provision `spec`; empty if it can."""
    if spec.cloud == "onprem":
        return [
            (
                "cloud",
                "on-prem fleets are configured with Ansible (playbooks/site.yml), not provisioned by the "
                f"Pulumi stack; allowed here: {', '.join(PROVISIONED_CLOUDS)}",
            )
        ]
    if spec.cloud not in PROVISIONED_CLOUDS:
        return [
            (
                "cloud",
                f"{spec.cloud} fleets are not provisioned by the fleetforge stack yet; "
                f"allowed here: {', '.join(PROVISIONED_CLOUDS)}",
            )
        ]
    return list(_aws_problems(spec))


def private_subnet(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The nodes' subnet: the first half of the VPC range."""
    return next(vpc_cidr.subnets(prefixlen_diff=1))


def public_subnet(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The NAT gateway's subnet: the last /28 of the VPC range, outside the private half."""
    return list(vpc_cidr.subnets(new_prefix=28))[-1]


def _aws_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    # Id formats, vpc_id without subnet_id and the bastion's form are spec rules (fleet.spec);
    # what is left here depends on how this stack lays out its network.
    if spec.network.subnet_id is None:
        return _vpc_range_problems(spec)
    return []


def _vpc_range_problems(spec: FleetSpec) -> list[tuple[str, str]]:
    cidr = spec.network.vpc_cidr
    if not 16 <= cidr.prefixlen <= _LARGEST_VPC_PREFIX:
        return [
            (
                "network.vpc_cidr",
                f"{cidr} is a /{cidr.prefixlen}; allowed: /16 to /{_LARGEST_VPC_PREFIX} "
                "(AWS allows /16 at most; the stack needs a private half and a /28 for the NAT gateway)",
            )
        ]
    usable = private_subnet(cidr).num_addresses - _AWS_RESERVED
    needed = spec.size + _SUBNET_HEADROOM
    if usable < needed:
        return [
            (
                "network.vpc_cidr",
                f"{cidr} leaves {usable} addresses in its private half for {spec.size} nodes "
                f"(+{_SUBNET_HEADROOM} for file servers and replacements); allowed: a larger range",
            )
        ]
    return []
