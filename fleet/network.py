"""How the AWS stack lays out a fleet's VPC, and the rule that the spec's range can hold it.

The spec (fleet.spec) applies the rule, so `fleetforge spec check` refuses exactly what the stack
program and `fleetforge plan` would; the stack uses the same subnet helpers to build the network.
"""

from __future__ import annotations

import ipaddress

# Addresses the private subnet keeps free beside one per node: FSx for Lustre file servers take
# ENIs in the same subnet (several per file system), and a rolling replacement briefly runs a node
# twice. AWS reserves 5 addresses in every subnet.
SUBNET_HEADROOM = 64
AWS_RESERVED = 5
# AWS allows a VPC range of /16 at most; the public subnet is a /28 that only holds the NAT
# gateway, and the VPC must be large enough to hold it beside a private half.
WIDEST_VPC_PREFIX = 16
NARROWEST_VPC_PREFIX = 24


def private_subnet(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The nodes' subnet: the first half of the VPC range."""
    return next(vpc_cidr.subnets(prefixlen_diff=1))


def public_subnet(vpc_cidr: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
    """The NAT gateway's subnet: the last /28 of the VPC range, outside the private half."""
    return list(vpc_cidr.subnets(new_prefix=28))[-1]


def vpc_range_problem(cidr: ipaddress.IPv4Network, size: int) -> str | None:
    """Why a VPC the stack creates in `cidr` cannot hold `size` nodes, or None."""
    if not WIDEST_VPC_PREFIX <= cidr.prefixlen <= NARROWEST_VPC_PREFIX:
        return (
            f"{cidr} is a /{cidr.prefixlen}; allowed: /{WIDEST_VPC_PREFIX} to /{NARROWEST_VPC_PREFIX} "
            "(AWS allows /16 at most; the stack needs a private half and a /28 for the NAT gateway)"
        )
    usable = private_subnet(cidr).num_addresses - AWS_RESERVED
    needed = size + SUBNET_HEADROOM
    if usable < needed:
        return (
            f"{cidr} leaves {usable} addresses in its private half for {size} nodes "
            f"(+{SUBNET_HEADROOM} for file servers and replacements); allowed: a larger range"
        )
    return None
