"""Which networks may reach a node's SSH port: one judgement shared by the spec and the policy pack.

A source range is acceptable when it cannot stand for a meaningful slice of the internet: either it
lies entirely inside address space that is not routed publicly, or it is a small block (one IPv4 /24,
one IPv6 /64 subnet) that an operator can name and own.
"""

from __future__ import annotations

import ipaddress

# Address space that never appears on the public internet, so a wide source range inside it is a
# statement about the operator's own network, not an opening to the world.
PRIVATE_V4: tuple[ipaddress.IPv4Network, ...] = (
    ipaddress.IPv4Network("10.0.0.0/8"),  # RFC 1918
    ipaddress.IPv4Network("172.16.0.0/12"),  # RFC 1918
    ipaddress.IPv4Network("192.168.0.0/16"),  # RFC 1918
    ipaddress.IPv4Network("100.64.0.0/10"),  # RFC 6598 carrier-grade NAT
)
PRIVATE_V6: tuple[ipaddress.IPv6Network, ...] = (ipaddress.IPv6Network("fc00::/7"),)  # RFC 4193 ULA

# The widest public block accepted: an IPv4 /24 is the smallest block routed between networks, so
# anything wider spans more than one organisation's edge. For IPv6 the limit is /64, not /48: a /64
# is one subnet (one LAN), while a /48 is a whole site's allocation of 65,536 subnets, far more than
# "the office's range" ever needs to be.
MIN_PUBLIC_PREFIX_V4 = 24
MIN_PUBLIC_PREFIX_V6 = 64

# IPv6 ranges whose low 32 bits carry an IPv4 address: ::ffff:0:0/96 is a perfectly "long" IPv6
# prefix that nonetheless means every IPv4 host, so these are judged as the IPv4 range they embed.
_EMBEDS_V4: tuple[ipaddress.IPv6Network, ...] = (
    ipaddress.IPv6Network("::ffff:0:0/96"),  # IPv4-mapped (RFC 4291)
    ipaddress.IPv6Network("64:ff9b::/96"),  # NAT64 well-known prefix (RFC 6052)
    ipaddress.IPv6Network("::/96"),  # IPv4-compatible, deprecated but still parsed (RFC 4291)
)

# Longest legal text: a full IPv6 address with an embedded IPv4 tail plus "/128" is 49 characters.
_MAX_TEXT = 64

ALLOWED = (
    "an 'address/prefix' CIDR that is either inside 10/8, 172.16/12, 192.168/16, 100.64/10 or fc00::/7, "
    f"or no wider than an IPv4 /{MIN_PUBLIC_PREFIX_V4} or an IPv6 /{MIN_PUBLIC_PREFIX_V6}"
)


def _shown(cidr: object) -> str:
    """The input as it can be printed on one line: repr escapes control characters and newlines."""
    text = repr(cidr)
    return text if len(text) <= _MAX_TEXT + 2 else text[:_MAX_TEXT] + "...'"


def _parse(cidr: object) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    if not isinstance(cidr, str) or not cidr or len(cidr) > _MAX_TEXT:
        return None
    # A bare address would silently mean /32; a scope id (fe80::1%eth0) names an interface, not a range.
    if cidr.count("/") != 1 or "%" in cidr:
        return None
    try:
        # strict=False: "203.0.113.7/8" reaches all of 203.0.0.0/8 wherever the host bits point,
        # so it is judged as that whole network rather than refused for a typo it does not have.
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return None


def _v4_problem(net: ipaddress.IPv4Network, shown: str) -> str | None:
    if net.prefixlen == 0:
        return f"{shown} opens SSH to the whole internet; allowed: {ALLOWED}"
    if net.prefixlen >= MIN_PUBLIC_PREFIX_V4:
        return None
    if any(net.subnet_of(private) for private in PRIVATE_V4):
        return None
    return (
        f"{shown} covers public addresses wider than a /{MIN_PUBLIC_PREFIX_V4} "
        f"({net.num_addresses} addresses); allowed: {ALLOWED}"
    )


def _v6_problem(net: ipaddress.IPv6Network, shown: str) -> str | None:
    if net.prefixlen == 0:
        return f"{shown} opens SSH to the whole internet; allowed: {ALLOWED}"
    for carrier in _EMBEDS_V4:
        if carrier.subnet_of(net):
            return f"{shown} contains {carrier}, which carries every IPv4 address; allowed: {ALLOWED}"
        if net.prefixlen >= carrier.prefixlen and net.subnet_of(carrier):
            embedded = ipaddress.IPv4Network(
                (int(net.network_address) & 0xFFFFFFFF, net.prefixlen - carrier.prefixlen)
            )
            return _v4_problem(embedded, shown)
    if net.prefixlen >= MIN_PUBLIC_PREFIX_V6:
        return None
    if any(net.subnet_of(private) for private in PRIVATE_V6):
        return None
    return f"{shown} covers public addresses wider than an IPv6 /{MIN_PUBLIC_PREFIX_V6}; allowed: {ALLOWED}"


def ssh_source_problem(cidr: object) -> str | None:
    """None when `cidr` is acceptable as the source of SSH ingress, else a one-line reason.

    Takes `object`, not `str`: values reach it from YAML and from CrossGuard untyped. Anything that
    is not a well-formed CIDR string is refused too: a rule that cannot read its
    input must fail closed.
    """
    shown = _shown(cidr)
    net = _parse(cidr)
    if net is None:
        return f"{shown} is not a CIDR; allowed: {ALLOWED}"
    if isinstance(net, ipaddress.IPv4Network):
        return _v4_problem(net, shown)
    return _v6_problem(net, shown)
