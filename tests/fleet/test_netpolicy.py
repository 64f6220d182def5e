"""ssh_source_problem: which source ranges may reach SSH, and a one-line reason for each refusal."""

from __future__ import annotations

import pytest

from fleet.netpolicy import ssh_source_problem

ACCEPTED = [
    "10.0.0.0/8",  # RFC 1918, however wide
    "172.16.0.0/12",
    "192.168.10.0/24",
    "100.64.0.0/10",  # RFC 6598
    "203.0.113.0/24",  # a small public block
    "198.51.100.7/32",
    "fd12:3456::/32",  # ULA, however wide
    "fc00::/7",
    "2001:db8:1:2::/64",  # one public IPv6 subnet
    "2001:db8::1/128",
    "::ffff:198.51.100.0/120",  # IPv4-mapped, judged as 198.51.100.0/24
    "::ffff:10.0.0.0/104",  # IPv4-mapped 10/8
]

REFUSED = [
    ("0.0.0.0/0", "whole internet"),
    ("::/0", "whole internet"),
    ("0.0.0.0/1", "wider than a /24"),
    ("203.0.112.0/23", "wider than a /24"),
    ("10.0.0.0/7", "wider than a /24"),  # spills outside 10/8
    ("172.16.0.0/11", "wider than a /24"),
    ("100.64.0.0/9", "wider than a /24"),
    ("169.254.0.0/16", "wider than a /24"),  # not in the allowed private list
    ("203.0.113.9/8", "wider than a /24"),  # host bits set: judged as the whole /8 it reaches
    ("2001:db8::/48", "IPv6 /64"),
    ("2000::/3", "IPv6 /64"),
    ("fc00::/6", "IPv6 /64"),
    ("::ffff:0:0/96", "every IPv4 address"),  # IPv4-mapped: every IPv4 host in a 'long' prefix
    ("::/80", "every IPv4 address"),
    ("64:ff9b::/96", "every IPv4 address"),  # NAT64
    ("::ffff:1.2.0.0/112", "wider than a /24"),
]

MALFORMED = [
    "",
    "10.0.0.0",
    "10.0.0.0/33",
    "10.0.0.0/8/8",
    "010.0.0.0/8",
    " 10.0.0.0/8",
    "any",
    "fe80::1%eth0/64",
]


@pytest.mark.parametrize("cidr", ACCEPTED)
def test_private_ranges_and_small_public_blocks_are_accepted(cidr: str) -> None:
    assert ssh_source_problem(cidr) is None


@pytest.mark.parametrize(("cidr", "why"), REFUSED)
def test_wide_public_ranges_are_refused_with_the_reason(cidr: str, why: str) -> None:
    problem = ssh_source_problem(cidr)
    assert problem is not None
    assert why in problem
    assert repr(cidr) in problem
    assert "allowed:" in problem


@pytest.mark.parametrize("cidr", MALFORMED)
def test_malformed_text_is_refused_and_says_what_is_allowed(cidr: str) -> None:
    problem = ssh_source_problem(cidr)
    assert problem is not None
    assert "is not a CIDR" in problem
    assert "address/prefix" in problem


@pytest.mark.parametrize("value", [None, 0, 24, b"10.0.0.0/8", ["10.0.0.0/8"], True])
def test_values_that_are_not_text_are_refused(value: object) -> None:
    assert ssh_source_problem(value) is not None


def test_a_reason_stays_on_one_line_whatever_the_input() -> None:
    problem = ssh_source_problem("10.0.0.0/8\n\x1b[2Jok")
    assert problem is not None
    assert "\n" not in problem and "\x1b" not in problem


def test_a_huge_input_is_refused_and_its_echo_is_bounded() -> None:
    problem = ssh_source_problem("1" * 100_000)
    assert problem is not None
    assert len(problem) < 400
