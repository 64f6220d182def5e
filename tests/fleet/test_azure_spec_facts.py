"""Azure facts a spec is checked against, as Microsoft documents them today (sources in fleet/spec.py).

Azure Managed Lustre: per SKU the capacity step, which is also the minimum, and the largest size
sold without a support request. InfiniBand: a scale set in one placement group holds at most 100
VMs, spares counted; a larger fleet names `network.ib_domain_size` and becomes several scale sets,
one per domain. Azure-only fields: an existing resource group, the nodes' SSH public key, the image.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from fleet.spec import AMLFS_SOURCE, IB_DOMAIN_SOURCE, azure_ib_domains, spec_from_mapping
from tests.fleet.test_gcp_spec_facts import problems
from tests.fleet.test_spec import AWS, AZURE, DELETE, GCP, with_


def amlfs(tib: int, tput: int) -> dict[str, Any]:
    doc = with_(AZURE, "storage.filesystem.capacity_tib", tib)
    return with_(doc, "storage.filesystem.throughput_mbps_per_tib", tput)


# (tier, TiB, accepted): step = minimum; the documented maximum; one step past it
AMLFS_CASES = [
    (40, 48, True),
    (40, 768, True),
    (40, 816, False),
    (40, 24, False),
    (125, 16, True),
    (125, 128, True),
    (125, 144, False),
    (125, 8, False),
    (250, 8, True),
    (250, 128, True),
    (250, 136, False),
    (250, 12, False),
    (500, 4, True),
    (500, 128, True),
    (500, 132, False),
    (500, 6, False),
]


@pytest.mark.parametrize(("tput", "tib", "accepted"), AMLFS_CASES)
def test_amlfs_sizes_per_sku(tput: int, tib: int, accepted: bool) -> None:
    found = problems(amlfs(tib, tput))
    if accepted:
        assert found == {}
    else:
        assert "storage.filesystem.capacity_tib" in found
        assert AMLFS_SOURCE.split()[0] in found["storage.filesystem.capacity_tib"], (
            "the rule cites its source"
        )


def test_amlfs_above_the_maximum_names_the_range() -> None:
    message = problems(amlfs(144, 125))["storage.filesystem.capacity_tib"]
    assert "128 TiB" in message and "16 to 128 TiB in steps of 16" in message


def sized(nodes: int, spares: int = 0, domain: int | None = None) -> dict[str, Any]:
    doc = with_(with_(AZURE, "nodes", nodes), "spares", spares)
    return doc if domain is None else with_(doc, "network.ib_domain_size", domain)


def test_one_placement_group_counts_spares() -> None:
    assert problems(sized(98, 2)) == {}
    message = problems(sized(99, 2))["nodes"]
    assert "<= 100" in message and "network.ib_domain_size" in message


@pytest.mark.parametrize(
    ("nodes", "spares", "domain", "expected"),
    [
        (32, 2, None, (34,)),
        (98, 2, None, (100,)),
        (240, 10, 100, (84, 83, 83)),
        (200, 0, 100, (100, 100)),
        (64, 4, 32, (23, 23, 22)),
        (32, 2, 100, (34,)),
    ],
)
def test_a_larger_fleet_splits_into_balanced_ib_domains(
    nodes: int, spares: int, domain: int | None, expected: tuple[int, ...]
) -> None:
    spec = spec_from_mapping(sized(nodes, spares, domain))
    domains = azure_ib_domains(spec)
    assert domains == expected
    assert sum(domains) == spec.size
    assert max(domains) <= (domain or 100)


def test_ib_domain_size_above_the_placement_group_limit_is_refused() -> None:
    message = problems(sized(240, 10, 101))["network.ib_domain_size"]
    assert "at most 100" in message and IB_DOMAIN_SOURCE in message


@pytest.mark.parametrize("value", [0, -1, "100", 1.5, True])
def test_ib_domain_size_grammar(value: Any) -> None:
    assert "network.ib_domain_size" in problems(sized(32, 2, value))


def test_azure_only_fields_are_refused_elsewhere() -> None:
    found = problems(with_(with_(AWS, "network.ib_domain_size", 8), "azure", {"resource_group": "rg"}))
    assert set(found) >= {"network.ib_domain_size", "azure"}


def _field(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _key(kind: str, *fields: bytes) -> str:
    """An OpenSSH public key line (RFC 4253 6.6): ed25519 = type + 32 bytes; rsa = type + e + n."""
    if not fields:
        fields = (b"\x07" * 32,) if kind == "ssh-ed25519" else (b"\x01\x00\x01", b"\x00" + b"\xc5" * 256)
    blob = _field(kind.encode()) + b"".join(_field(f) for f in fields)
    return f"{kind} {base64.b64encode(blob).decode()}"


@pytest.mark.parametrize(
    "key",
    [_key("ssh-ed25519"), _key("ssh-ed25519") + " ops@fleet", _key("ssh-rsa")],
)
def test_an_openssh_public_key_is_a_plain_spec_value(key: str) -> None:
    spec = spec_from_mapping(
        with_(AZURE, "azure", {"ssh_public_key": key, "resource_group": "ml-fleet.rg_1"})
    )
    assert spec.azure is not None and spec.azure.ssh_public_key == key
    assert spec.azure.resource_group == "ml-fleet.rg_1"


@pytest.mark.parametrize(
    "key",
    [
        "ssh-dss " + _key("ssh-dss").split()[1],  # DSA: Azure takes RSA and Ed25519 only
        "ssh-rsa " + _key("ssh-ed25519").split()[1],  # the blob is another key type
        _key("ssh-ed25519")[:-8],  # truncated
        _key("ssh-rsa", b"\x01\x00\x01", b"\x00" + b"\xc5" * 128),  # 1024-bit RSA: Azure wants 2048+
        _key("ssh-ed25519", b"\x07" * 32, b"extra"),  # two keys pasted into one blob
        _key("ssh-ed25519") + " {{ lookup('pipe','id') }}",
        _key("ssh-ed25519") + "\nssh-ed25519 AAAA",
        "-----BEGIN OPENSSH PRIVATE KEY-----",
        "",
    ],
)
def test_anything_else_is_no_public_key(key: str) -> None:
    assert "azure.ssh_public_key" in problems(with_(AZURE, "azure", {"ssh_public_key": key}))


@pytest.mark.parametrize("group", ["", "rg.", "a" * 91, "rg/other", "rg name", "{{x}}"])
def test_resource_group_grammar(group: str) -> None:
    assert "azure.resource_group" in problems(with_(AZURE, "azure", {"resource_group": group}))


@pytest.mark.parametrize(
    ("image", "accepted"),
    [
        ("microsoft-dsvm:ubuntu-hpc:2204:22.04.2025041101", True),
        ("microsoft-dsvm:ubuntu-hpc:2204:latest", True),
        (
            "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/img-rg/providers/"
            "Microsoft.Compute/galleries/hpc_gallery/images/ubuntu-hpc/versions/1.2.3",
            True,
        ),
        (
            "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/img-rg/providers/"
            "Microsoft.Compute/images/golden",
            True,
        ),
        ("ami-0123456789abcdef0", False),
        ("microsoft-dsvm:ubuntu-hpc:2204", False),
        ("/subscriptions/x/resourceGroups/rg/providers/Microsoft.Storage/storageAccounts/a", False),
    ],
)
def test_azure_image_grammar(image: str, accepted: bool) -> None:
    found = problems(with_(AZURE, "image", image))
    assert ("image" not in found) is accepted, found


def test_the_example_still_needs_no_azure_section() -> None:
    assert problems(with_(AZURE, "azure", DELETE) if "azure" in AZURE else AZURE) == {}


CAPACITY_RESERVATION_GROUP = (
    "/subscriptions/00000000-0000-4000-8000-00000000f1ee/resourceGroups/capacity/providers/"
    "Microsoft.Compute/capacityReservationGroups/ndh100-crg"
)


def test_a_capacity_reservation_group_id_is_a_reservation_id_on_azure_only() -> None:
    # The Azure stack takes a capacity reservation group by its full id (stacks.prerequisites);
    # the grammar lets it through, and a GCP fleet, whose reservations are names, refuses it.
    reserved = {"type": "reservation", "reservation_id": CAPACITY_RESERVATION_GROUP}
    spec = spec_from_mapping(with_(AZURE, "capacity", reserved))
    assert spec.capacity.reservation_id == CAPACITY_RESERVATION_GROUP
    assert problems(with_(GCP, "capacity", reserved)) == {
        "capacity.reservation_id": "an Azure capacity reservation group id; allowed on gcp: a reservation name"
    }
    # Any other value starting with '/' is still no resource id.
    assert "capacity.reservation_id" in problems(
        with_(
            AZURE,
            "capacity",
            {**reserved, "reservation_id": CAPACITY_RESERVATION_GROUP.replace("Compute", "X")},
        )
    )
