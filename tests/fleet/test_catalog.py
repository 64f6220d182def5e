"""Catalog invariants: every SKU complete and sourced, and consistent with the published tables."""

from __future__ import annotations

import pytest

from fleet.catalog import NIC_KINDS_BY_FABRIC, UnknownSkuError, all_skus, get_sku
from fleet.catalog.layout import aws_network_interfaces
from fleet.catalog.model import Sku
from fleet.metrics import METRICS

SKUS = all_skus()
REQUIRED = {
    "aws": {"p4d.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge", "p6-b200.48xlarge"},
    "gcp": {
        "a3-highgpu-8g",
        "a3-megagpu-8g",
        "a3-ultragpu-8g",
        "a4-highgpu-8g",
        "tpu-v5e",
        "tpu-v5p",
        "tpu-v6e",
    },
    "azure": {"Standard_ND96isr_H100_v5", "Standard_ND96isr_H200_v5"},
    "onprem": {"hgx-h100-8", "hgx-h200-8", "hgx-b200-8", "cpu"},
}
# (accelerators per node, fabric NICs, Gb/s per NIC) as the clouds' instance documentation publishes them
PUBLISHED = {
    "p4d.24xlarge": (8, 4, 100),
    "p5.48xlarge": (8, 32, 100),
    "p5e.48xlarge": (8, 32, 100),
    "p5en.48xlarge": (8, 16, 200),
    "p6-b200.48xlarge": (8, 8, 400),
    "a3-highgpu-8g": (8, 4, 200),
    "a3-megagpu-8g": (8, 8, 200),
    "a3-ultragpu-8g": (8, 8, 400),
    "a4-highgpu-8g": (8, 8, 400),
    "Standard_ND96isr_H100_v5": (8, 8, 400),
    "Standard_ND96isr_H200_v5": (8, 8, 400),
    "tpu-v5e": (8, 4, 400),
    "tpu-v5p": (4, 6, 1600),
    "tpu-v6e": (8, 4, 896),
}
AWS_EFA_TOTAL_GBPS = 3200


def _ids(skus: tuple[Sku, ...]) -> list[str]:
    return [s.sku for s in skus]


def test_catalog_holds_every_required_sku() -> None:
    by_cloud: dict[str, set[str]] = {}
    for s in SKUS:
        by_cloud.setdefault(s.cloud, set()).add(s.sku)
    for cloud, names in REQUIRED.items():
        assert names <= by_cloud.get(cloud, set()), names - by_cloud.get(cloud, set())


@pytest.mark.parametrize("sku", SKUS, ids=_ids(SKUS))
def test_every_fact_has_a_source(sku: Sku) -> None:
    facts = [sku, sku.accelerator, sku.fabric, sku.placement, *sku.reference.values()]
    if sku.host is not None:
        facts.append(sku.host)
    for fact in facts:
        assert fact.source.strip(), f"{sku.sku}: {type(fact).__name__} has no source"


@pytest.mark.parametrize("sku", SKUS, ids=_ids(SKUS))
def test_fabric_nic_kind_matches_fabric(sku: Sku) -> None:
    assert sku.fabric.nic_kind in NIC_KINDS_BY_FABRIC[sku.fabric.kind]


@pytest.mark.parametrize("sku", SKUS, ids=_ids(SKUS))
def test_reference_metrics_are_known_and_floors_positive(sku: Sku) -> None:
    assert sku.reference, f"{sku.sku} has no reference performance for the gate"
    for name, fig in sku.reference.items():
        assert name in METRICS, name
        assert METRICS[name].higher_is_better, f"{name}: floors only make sense for higher-is-better metrics"
        assert 0 < fig.floor <= fig.value
        if fig.kind == "threshold":
            assert fig.fraction <= 1.0


@pytest.mark.parametrize("sku", [s for s in SKUS if s.accelerator.kind == "gpu"], ids=lambda s: s.sku)
def test_gpu_skus_have_gemm_and_memory_references(sku: Sku) -> None:
    assert {"gemm_bf16_tflops", "mem_copy_gbps"} <= set(sku.reference)
    assert sku.nvswitch, "every 8-GPU SXM SKU here is an NVSwitch system (fabric manager required)"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_matches_published_tables(name: str) -> None:
    sku = get_sku(name)
    per_node, nics, gbps = PUBLISHED[name]
    assert sku.accelerators_per_node == per_node
    assert sku.fabric.nics == nics
    assert sku.fabric.gbps_per_nic == gbps


@pytest.mark.parametrize("sku", [s for s in SKUS if s.cloud == "aws"], ids=lambda s: s.sku)
def test_aws_efa_count_equals_network_cards(sku: Sku) -> None:
    slots = aws_network_interfaces(sku)
    efas = [s for s in slots if s.interface_type in {"efa", "efa-only"}]
    assert len(efas) == sku.fabric.nics
    assert len({s.network_card_index for s in efas}) == sku.fabric.nics  # one EFA per network card
    primary = [s for s in slots if (s.network_card_index, s.device_index) == (0, 0)]
    assert [p.interface_type for p in primary] == ["interface"]  # efa-only cannot be primary
    assert all(s.device_index == 0 for s in efas if s.network_card_index > 0)
    assert sku.placement.strategy == "cluster-placement-group"
    if sku.sku != "p4d.24xlarge":
        assert sku.fabric.total_gbps == AWS_EFA_TOTAL_GBPS


def test_non_efa_skus_have_no_efa_layout() -> None:
    with pytest.raises(ValueError, match="no EFA"):
        aws_network_interfaces(get_sku("a3-megagpu-8g"))


def test_azure_infiniband_spans_one_placement_group() -> None:
    for s in SKUS:
        if s.cloud == "azure":
            assert s.fabric.kind == "infiniband"
            assert s.placement.max_nodes == 100


def test_tpu_slices_are_listed() -> None:
    for s in SKUS:
        if s.is_tpu:
            assert s.fabric.kind == "ici"
            assert s.placement.slice_chips
            assert s.accelerators_per_node in s.placement.slice_chips or s.accelerators_per_node == 4


def test_cpu_sku_is_measured_not_invented() -> None:
    cpu = get_sku("cpu")
    assert cpu.accelerators_per_node == 0
    assert all(fig.kind == "measured" for fig in cpu.reference.values())


def test_unknown_sku_lists_known_ones() -> None:
    with pytest.raises(UnknownSkuError, match=r"p5\.48xlarge"):
        get_sku("p9")


def test_reference_figures_cite_the_skus_own_cloud_or_say_they_are_borrowed() -> None:
    # An AWS or GCP SKU's threshold must not silently rest on another cloud's health checks.
    own = {"aws": ("AWS",), "gcp": ("Google",), "azure": ("Azure",)}
    for sku in all_skus():
        for metric, ref in sku.reference.items():
            if sku.cloud not in own or ref.kind != "threshold":
                continue
            source = ref.source
            assert any(w in source for w in own[sku.cloud]) or "borrowed" in source.lower(), (
                sku.sku,
                metric,
                source,
            )
