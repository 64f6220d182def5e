"""GCP facts a spec is checked against, as Google documents them today (sources in the modules).

Managed Lustre: capacity per performance tier with both step sizes up to each tier's real maximum,
and the Dynamic tier (fleet/catalog/managed_lustre.py). TPU: slice shapes by topology per
generation, chips not cores, the largest v5p slice smaller than the pod (fleet/catalog/tpu.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.catalog import get_sku, managed_lustre, tpu
from fleet.spec import SpecError, spec_from_mapping
from tests.fleet.test_spec import AWS, DELETE, GCP, TPU, with_


def lustre(gib: int, tput: int | None = 250, **extra: Any) -> dict[str, Any]:
    doc = with_(GCP, "storage.filesystem.capacity_gib", gib)
    doc = with_(doc, "storage.filesystem.throughput_mbps_per_tib", DELETE if tput is None else tput)
    for key, value in extra.items():
        doc = with_(doc, f"storage.filesystem.{key}", value)
    return doc


def problems(doc: dict[str, Any]) -> dict[str, str]:
    try:
        spec_from_mapping(doc)
    except SpecError as exc:
        return dict(exc.problems)
    return {}


# (throughput, capacity GiB, accepted)
LUSTRE_CASES = [
    (1000, 9_000, True),
    (1000, 954_000 + 9_000, True),  # beyond the old single-step maximum
    (1000, 1_530_000, True),  # the threshold itself, small step
    (1000, 1_530_000 + 9_000, False),  # above the threshold the small step no longer applies
    (1000, 22 * 72_000, True),  # the first multiple of the large step above the threshold
    (1000, 10_008_000, True),  # the tier's maximum
    (1000, 10_008_000 + 72_000, False),
    (1000, 4_500, False),
    (500, 18_000, True),
    (500, 3_060_000, True),
    (500, 3_060_000 + 18_000, False),
    (500, 20_016_000, True),
    (500, 20_016_000 + 144_000, False),
    (250, 36_000, True),
    (250, 40_000, False),
    (250, 6_120_000 + 36_000, False),
    (250, 40_032_000, True),
    (125, 72_000, True),
    (125, 12_240_000, True),
    (125, 12_240_000 + 72_000, False),
    (125, 100_000, False),
]


@pytest.mark.parametrize(("tput", "gib", "ok"), LUSTRE_CASES, ids=[f"{t}-{g}" for t, g, _ in LUSTRE_CASES])
def test_managed_lustre_capacity_per_tier(tput: int, gib: int, ok: bool) -> None:
    found = problems(lustre(gib, tput))
    if ok:
        assert found == {}
    else:
        assert set(found) == {"storage.filesystem.capacity_gib"}
        assert managed_lustre.SOURCE in found["storage.filesystem.capacity_gib"]


@pytest.mark.parametrize(
    ("gib", "ok"),
    [(472_000, True), (944_000, True), (84_016_000, True), (500_000, False), (84_488_000, False)],
)
def test_managed_lustre_dynamic_tier(gib: int, ok: bool) -> None:
    found = problems(lustre(gib, None, tier="dynamic"))
    assert (found == {}) is ok
    if not ok:
        assert "Dynamic" in found["storage.filesystem.capacity_gib"]


def test_the_dynamic_tier_takes_no_fixed_throughput_and_is_managed_lustres_only() -> None:
    assert set(problems(lustre(472_000, 250, tier="dynamic"))) == {
        "storage.filesystem.throughput_mbps_per_tib"
    }
    assert "tier: dynamic" in problems(lustre(36_000, 300))["storage.filesystem.throughput_mbps_per_tib"]


def test_only_managed_lustre_has_a_dynamic_tier() -> None:
    assert set(problems(with_(AWS, "storage.filesystem.tier", "dynamic"))) == {"storage.filesystem.tier"}


# --------------------------------------------------------------------------- TPU slices


def tpu_spec(sku: str, nodes: int, **settings: Any) -> dict[str, Any]:
    doc = with_(with_({k: v for k, v in TPU.items() if k != "tpu"}, "sku", sku), "nodes", nodes)
    return with_(doc, "tpu", settings) if settings else doc


# (sku, topology, chips, TPU VMs per slice, chips per VM): v5e/v6e slices of up to 8 chips are one
# VM with all of them; larger ones are 4-chip VMs (the v6e and v5e pages' configurations); v5p VMs
# have 4 chips.
GOOD_SHAPES = [
    ("tpu-v5e", "1x1", 1, 1, 1),
    ("tpu-v5e", "2x2", 4, 1, 4),
    ("tpu-v5e", "2x4", 8, 1, 8),
    ("tpu-v5e", "4x4", 16, 4, 4),
    ("tpu-v5e", "4x8", 32, 8, 4),
    ("tpu-v5e", "8x8", 64, 16, 4),
    ("tpu-v5e", "8x16", 128, 32, 4),
    ("tpu-v5e", "16x16", 256, 64, 4),
    ("tpu-v6e", "1x1", 1, 1, 1),
    ("tpu-v6e", "2x2", 4, 1, 4),
    ("tpu-v6e", "2x4", 8, 1, 8),
    ("tpu-v6e", "4x4", 16, 4, 4),
    ("tpu-v6e", "4x8", 32, 8, 4),
    ("tpu-v6e", "8x8", 64, 16, 4),
    ("tpu-v6e", "8x16", 128, 32, 4),
    ("tpu-v6e", "16x16", 256, 64, 4),
    ("tpu-v5p", "2x2x1", 4, 1, 4),
    ("tpu-v5p", "2x2x2", 8, 2, 4),
    ("tpu-v5p", "2x4x4", 32, 8, 4),
    ("tpu-v5p", "4x4x4", 64, 16, 4),
    ("tpu-v5p", "4x8x8", 256, 64, 4),
    ("tpu-v5p", "16x16x16", 4096, 1024, 4),
    ("tpu-v5p", "16x16x24", 6144, 1536, 4),  # the largest slice
]


@pytest.mark.parametrize(
    ("sku", "topology", "chips", "hosts", "per_vm"),
    GOOD_SHAPES,
    ids=[f"{s}-{t}" for s, t, *_ in GOOD_SHAPES],
)
def test_documented_shapes_are_accepted_with_their_vm_count(
    sku: str, topology: str, chips: int, hosts: int, per_vm: int
) -> None:
    generation = get_sku(sku).accelerator.generation
    shape = tpu.slice_of(generation, topology)
    assert (shape.chips, shape.hosts, shape.chips_per_vm) == (chips, hosts, per_vm)
    assert tpu.hosts_for(generation, chips) == hosts and tpu.chips_per_vm(generation, chips) == per_vm
    assert problems(tpu_spec(sku, hosts, topology=topology, runtime_version="v2-alpha-tpuv5")) == {}
    assert problems(tpu_spec(sku, hosts * 3, topology=topology, slices=3)) == {}  # Multislice
    assert "nodes" in problems(tpu_spec(sku, hosts + 1, topology=topology))
    # What a burn-in on one of the VMs is told to find (fleetforge burnin --spec).
    assert spec_from_mapping(tpu_spec(sku, hosts * 2, topology=topology, slices=2)).tpu_chips_per_vm == per_vm


def test_a_multi_host_v6e_slice_is_four_chip_vms_and_the_old_eight_chip_count_is_refused() -> None:
    # 4x4 is 4 VMs of 4 chips (not 2 of 8); 2 VMs name no slice.
    found = problems(tpu_spec("tpu-v6e", 2, topology="4x4"))
    assert found["nodes"] == (
        "2 TPU VMs, but 1 slice(s) of 4x4 (16 chips, 4 VM(s) each) have 4; allowed: nodes = 4"
    )
    assert problems(tpu_spec("tpu-v6e", 4, topology="4x4")) == {}


# (sku, nodes without a topology, slice chips, chips per VM); None: no slice has that many VMs
UNNAMED_SHAPES = [
    ("tpu-v6e", 1, 8, 8),  # one VM: the largest, 2x4 (1x1 and 2x2 need their topology named)
    ("tpu-v6e", 2, None, None),  # 8 chips are one VM, not two
    ("tpu-v5e", 3, None, None),
    ("tpu-v5p", 1, 4, 4),
    ("tpu-v5p", 2, 8, 4),
    ("tpu-v5p", 1536, 6144, 4),
]


@pytest.mark.parametrize(
    ("sku", "nodes", "chips", "per_vm"), UNNAMED_SHAPES, ids=[f"{s}-{n}" for s, n, *_ in UNNAMED_SHAPES]
)
def test_without_a_topology_the_vm_count_makes_the_slice(
    sku: str, nodes: int, chips: int | None, per_vm: int | None
) -> None:
    generation = get_sku(sku).accelerator.generation
    found = problems(tpu_spec(sku, nodes))
    if chips is None:
        assert (
            "no tpu-" in found["nodes"] and "nodes: " in found["nodes"] and "tpu.topology" in found["nodes"]
        )
        return
    assert found == {}
    assert tpu.chips_for_hosts(generation, nodes) == chips
    assert spec_from_mapping(tpu_spec(sku, nodes)).tpu_chips_per_vm == per_vm


# (sku, nodes): a v5e/v6e slice of several VMs without its shape. Earlier fleetforge counted 8-chip
# hosts, so the same nodes asked for twice the chips: such a spec must name its shape, not silently
# shrink.
MULTI_VM_UNNAMED = [("tpu-v6e", 4, "4x4"), ("tpu-v6e", 64, "16x16"), ("tpu-v5e", 16, "8x8")]


@pytest.mark.parametrize(
    ("sku", "nodes", "shape"), MULTI_VM_UNNAMED, ids=[f"{s}-{n}" for s, n, _ in MULTI_VM_UNNAMED]
)
def test_a_multi_vm_v5e_or_v6e_slice_must_name_its_shape(sku: str, nodes: int, shape: str) -> None:
    found = problems(tpu_spec(sku, nodes))
    assert set(found) == {"tpu.topology"}
    assert f"{nodes} VMs a slice are {shape}" in found["tpu.topology"]
    assert problems(tpu_spec(sku, nodes, topology=shape)) == {}


def test_the_allowed_node_counts_are_whole_vms_of_the_slice_sizes() -> None:
    message = problems(tpu_spec("tpu-v6e", 3))["nodes"]
    assert (
        "allowed slice sizes (chips): 1, 4, 8, 16, 32, 64, 128, 256 (nodes: 1, 4, 8, 16, 32, 64)" in message
    )


def test_chips_per_vm_follows_the_slice() -> None:
    assert [tpu.chips_per_vm("v6e", c) for c in (1, 4, 8, 16, 256)] == [1, 4, 8, 4, 4]
    assert [tpu.chips_per_vm("v5e", c) for c in (1, 4, 8, 16, 256)] == [1, 4, 8, 4, 4]
    assert [tpu.chips_per_vm("v5p", c) for c in (4, 8, 6144)] == [4, 4, 4]
    assert tpu.VM_CHIPS == {"v5e": (1, 4, 8), "v6e": (1, 4, 8), "v5p": (4,)}
    # The catalog's figure is the largest VM's.
    for sku in ("tpu-v5e", "tpu-v6e", "tpu-v5p"):
        s = get_sku(sku)
        assert s.accelerators_per_node == max(tpu.VM_CHIPS[s.accelerator.generation])


def test_a_gpu_fleet_has_no_tpu_chips_per_vm() -> None:
    assert spec_from_mapping(GCP).tpu_chips_per_vm is None


# (sku, topology, fragment of the error)
BAD_SHAPES = [
    ("tpu-v5e", "32x32", "allowed (2D, chips)"),  # beyond the 256-chip pod
    ("tpu-v5e", "4x2", "allowed (2D, chips)"),
    ("tpu-v5e", "3x3", "allowed (2D, chips)"),
    ("tpu-v5e", "2x2x2", "allowed (2D, chips)"),
    ("tpu-v6e", "16x32", "allowed (2D, chips)"),
    ("tpu-v5p", "8x8", "3D"),
    ("tpu-v5p", "2x2x6", "multiple of 4"),
    ("tpu-v5p", "4x4x6", "multiple of 4"),
    ("tpu-v5p", "16x16x32", "largest slice is 16x16x24"),  # 8,192 chips: more than a slice
    ("tpu-v5p", "16x24x24", "largest slice is 16x16x24"),
    ("tpu-v5p", "4x4x28", "largest slice is 16x16x24"),  # few chips, but a side longer than the pod's
]


@pytest.mark.parametrize(
    ("sku", "topology", "fragment"), BAD_SHAPES, ids=[f"{s}-{t}" for s, t, _ in BAD_SHAPES]
)
def test_shapes_a_generation_does_not_offer_are_refused_naming_the_field(
    sku: str, topology: str, fragment: str
) -> None:
    found = problems(tpu_spec(sku, 1, topology=topology))
    assert set(found) == {"tpu.topology"}
    assert fragment in found["tpu.topology"] and "cloud.google.com/tpu/docs/" in found["tpu.topology"]


def test_v5p_counts_chips_not_cores_and_its_largest_slice_is_smaller_than_the_pod() -> None:
    shape = tpu.slice_of("v5p", "2x2x2")
    assert shape.chips == 8 and shape.accelerator_type == "v5p-16"  # the API's name counts cores
    assert tpu.slice_of("v5e", "8x8").accelerator_type == "v5litepod-64"
    assert tpu.slice_of("v6e", "4x4").accelerator_type == "v6e-16"
    sizes = get_sku("tpu-v5p").placement.slice_chips or ()
    assert max(sizes) == 6144 < tpu.V5P_POD_CHIPS
    # Without a topology, 8,960 chips (the pod) is refused as a slice size: 2,240 hosts x 4 chips.
    assert "nodes" in problems(tpu_spec("tpu-v5p", 2240))
    assert problems(tpu_spec("tpu-v5p", 1536)) == {}


def test_the_catalogs_slice_sizes_are_the_documented_shapes() -> None:
    for sku in ("tpu-v5e", "tpu-v6e"):
        expected = sorted(tpu.slice_of(sku[4:], t).chips for t in tpu.TWO_D_SHAPES)
        assert list(get_sku(sku).placement.slice_chips or ()) == expected
    for chips in get_sku("tpu-v5p").placement.slice_chips or ():
        assert chips <= 6144


def test_tpu_section_is_for_tpu_skus_and_its_fields_are_checked() -> None:
    assert set(problems(with_(GCP, "tpu", {"topology": "2x2"}))) == {"tpu"}
    assert "tpu.topology" in problems(tpu_spec("tpu-v5e", 8, topology="8 x 8"))
    assert "tpu.runtime_version" in problems(
        tpu_spec("tpu-v5e", 8, topology="8x8", runtime_version="{{ x }}")
    )
    assert "tpu.slices" in problems(tpu_spec("tpu-v5e", 8, topology="8x8", slices=0))
    # Two slices: nodes split evenly into slice-sized halves, whose shape a multi-VM v5e names.
    assert problems(tpu_spec("tpu-v5e", 16, topology="4x8", slices=2)) == {}
    assert set(problems(tpu_spec("tpu-v5e", 16, slices=2))) == {"tpu.topology"}
    assert "nodes" in problems(tpu_spec("tpu-v5e", 15, slices=2))
    assert problems(tpu_spec("tpu-v5p", 16, slices=2)) == {}  # v5p VMs are 4 chips at any size


# --------------------------------------------------------------------------- customer-managed key

KEY = "projects/ml-research-1/locations/us-central1/keyRings/fleet/cryptoKeys/disks"


def test_a_gcp_fleet_may_name_its_kms_key_in_its_region() -> None:
    assert spec_from_mapping(with_(GCP, "kms_key", KEY)).kms_key == KEY
    elsewhere = KEY.replace("us-central1", "europe-west4")
    assert "fleet's region" in problems(with_(GCP, "kms_key", elsewhere))["kms_key"]
    assert "kms_key" in problems(with_(GCP, "kms_key", "alias/fleet"))
    assert "kms_key" in problems(with_(AWS, "kms_key", KEY))


def test_v5p_multislice_stops_at_18432_chips() -> None:
    assert problems(tpu_spec("tpu-v5p", 1536 * 3, topology="16x16x24", slices=3)) == {}
    assert "tpu.slices" in problems(tpu_spec("tpu-v5p", 1536 * 4, topology="16x16x24", slices=4))
