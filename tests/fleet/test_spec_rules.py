"""Rules the spec shares with the stack and the policy pack: `spec check` refuses what `plan` refuses."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleet import units
from fleet.spec import FSX_GIB_PER_TIB, SpecError, load_spec, spec_from_mapping
from stacks.prerequisites import spec_problems
from tests.conftest import EXAMPLES
from tests.fleet.test_spec import AWS, AZURE, DELETE, GCP, with_


def field_problems(doc: dict[str, Any]) -> dict[str, str]:
    try:
        spec_from_mapping(doc)
    except SpecError as exc:
        return dict(exc.problems)
    return {}


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.integers(min_value=8, max_value=28),
    nodes=st.integers(min_value=1, max_value=600),
    spares=st.integers(min_value=0, max_value=8),
)
def test_a_spec_check_accepts_is_one_the_stack_accepts(prefix: int, nodes: int, spares: int) -> None:
    doc = with_(AWS, "network.vpc_cidr", f"10.0.0.0/{prefix}")
    doc = with_(with_(doc, "nodes", nodes), "spares", min(spares, nodes - 1))
    doc = with_(doc, "sku", "p4d.24xlarge")  # no placement-group cap, so the range decides
    try:
        spec = spec_from_mapping(doc)
    except SpecError:
        return
    assert spec_problems(spec) == [], "plan refuses a spec that spec check accepted"


@pytest.mark.parametrize(
    ("cidr", "nodes", "fragment"),
    [
        ("10.0.0.0/8", 16, "allowed: /16 to /24"),
        ("10.0.0.0/26", 4, "allowed: /16 to /24"),
        ("10.0.0.0/24", 100, "for 102 nodes"),
    ],
)
def test_vpc_range_is_a_spec_rule(cidr: str, nodes: int, fragment: str) -> None:
    doc = with_(with_(with_(AWS, "network.vpc_cidr", cidr), "nodes", nodes), "sku", "p4d.24xlarge")
    assert fragment in field_problems(doc)["network.vpc_cidr"]


def test_vpc_range_is_not_judged_when_the_spec_names_its_subnet() -> None:
    doc = with_(AWS, "network.vpc_cidr", "10.0.0.0/8")
    doc = with_(with_(doc, "network.vpc_id", "vpc-0abc1234def567890"), "network.subnet_id", "subnet-0abc1234")
    assert field_problems(doc) == {}


@pytest.mark.parametrize(
    ("cidr", "fragment"),
    [
        ("0.0.0.0/0", "whole internet"),
        ("0.0.0.0/1", "covers public addresses"),
        ("8.0.0.0/8", "covers public addresses"),
        ("203.0.112.0/23", "wider than a /24"),
    ],
)
def test_ssh_from_public_space_wider_than_a_small_block_is_refused(cidr: str, fragment: str) -> None:
    for base in (AWS, GCP, AZURE):
        assert fragment in field_problems(with_(base, "network.ssh_cidr", cidr))["network.ssh_cidr"]


@pytest.mark.parametrize(
    "cidr", ["10.0.0.0/8", "172.16.0.0/12", "100.64.0.0/10", "203.0.113.0/24", "198.51.100.7/32"]
)
def test_ssh_from_private_space_or_a_small_public_block_is_allowed(cidr: str) -> None:
    assert field_problems(with_(AWS, "network.ssh_cidr", cidr)) == {}


def test_a_tib_is_1024_gib() -> None:
    assert units.tib_to_gib(1) == 1024 == units.GIB_PER_TIB
    assert units.gib_to_tib(2048) == 2
    spec = spec_from_mapping(AZURE)  # AMLFS: 16 TiB, Azure's API takes TiB
    assert spec.storage.filesystem is not None and spec.storage.filesystem.gib == 16 * 1024


def test_managed_lustre_capacity_tib_uses_1024() -> None:
    # 36,000 GiB is a valid 250 MB/s/TiB size; as TiB it is 35.15625 (1024-based), not 36.
    doc = with_(
        with_(GCP, "storage.filesystem.capacity_gib", DELETE), "storage.filesystem.capacity_tib", 35.15625
    )
    spec = spec_from_mapping(doc)
    assert spec.storage.filesystem is not None and spec.storage.filesystem.provider_gib == 36_000
    assert "storage.filesystem.capacity_tib" in field_problems(
        with_(doc, "storage.filesystem.capacity_tib", 36)
    )


@pytest.mark.parametrize(("tib", "gib"), [(1.2, 1200), (2.4, 2400), (4.8, 4800), (9.6, 9600)])
def test_fsx_capacity_tib_is_awss_tib(tib: float, gib: int) -> None:
    # FSx for Lustre's API takes GiB and AWS calls 1,200 GiB "1.2 TiB": the provider's definition.
    assert FSX_GIB_PER_TIB == 1000
    doc = with_(with_(AWS, "storage.filesystem.capacity_gib", DELETE), "storage.filesystem.capacity_tib", tib)
    fs = spec_from_mapping(doc).storage.filesystem
    assert fs is not None and fs.provider_gib == gib


def test_fsx_capacity_tib_must_be_a_whole_number_of_gib() -> None:
    doc = with_(
        with_(AWS, "storage.filesystem.capacity_gib", DELETE), "storage.filesystem.capacity_tib", 2.4000004
    )
    assert "1.2 TiB" in field_problems(doc)["storage.filesystem.capacity_tib"]


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_the_pulumi_config_path_reads_what_plan_writes(example: str) -> None:
    # `fleetforge plan` hands the stack `model_dump_json()`; Pulumi's get_object gives it back as
    # JSON data, which the strict types must read to the same spec.
    spec = load_spec(EXAMPLES / example)
    assert spec_from_mapping(json.loads(spec.model_dump_json())) == spec


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("nodes", "16"),
        ("nodes", True),
        ("network.vpc_cidr", 0),
        ("network.ssh_cidr", "0.0.0.0/0"),
        ("zone", "us-east-1-x"),
    ],
)
def test_the_pulumi_config_path_gets_the_same_validation(path: str, value: Any) -> None:
    data = json.loads(json.dumps(with_(AWS, path, value)))
    with pytest.raises(SpecError) as info:
        spec_from_mapping(data, source="fleetforge:fleet")
    assert path in dict(info.value.problems)
