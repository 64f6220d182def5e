"""Catalog invariants: every SKU complete and sourced, and consistent with the published tables."""

from __future__ import annotations

import pytest

from fleet.catalog import (
    NIC_KINDS_BY_FABRIC,
    UnknownSkuError,
    all_skus,
    fabric_environment,
    get_sku,
    load_catalog,
)
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
    # TPUs: the largest VM's chips; ICI links per chip and Gb/s a link in one direction
    # (v5p: 4,800 Gb/s a chip over 6 links).
    "tpu-v5e": (8, 4, 400),
    "tpu-v5p": (4, 6, 800),
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


def test_blackwell_boards_reach_their_nvswitches_through_nvlink5_management_ports() -> None:
    """HGX B200's fourth-generation NVSwitches are no PCI functions of the host: Fabric Manager
    needs the NVLink subnet manager there (Fabric Manager user guide, fourth-generation NVSwitch)."""
    fabric = {s.sku: s.nvswitch_fabric for s in SKUS}
    assert {s for s, f in fabric.items() if f == "nvlink5"} == {
        "p6-b200.48xlarge",
        "a4-highgpu-8g",
        "hgx-b200-8",
    }
    assert fabric["p5.48xlarge"] == fabric["hgx-h100-8"] == fabric["Standard_ND96isr_H200_v5"] == "nvswitch"
    assert fabric["tpu-v5p"] == fabric["cpu"] == "none"


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


# ------------------------------------------------------------------ fabric floors and environments

FABRIC_METRICS = ("multinode_allreduce_busbw_gbps", "fabric_pair_busbw_gbps")
# AWS's published minimum busbw of all_reduce_perf across 2+ nodes, per instance type (GB/s).
AWS_MULTINODE = {
    "p5.48xlarge": 800,
    "p5e.48xlarge": 800,
    "p5en.48xlarge": 800,
    "p6-b200.48xlarge": 900,
}


@pytest.mark.parametrize("name", sorted(AWS_MULTINODE))
def test_aws_skus_carry_the_published_multinode_all_reduce_floor(name: str) -> None:
    sku = get_sku(name)
    for metric in FABRIC_METRICS:
        ref = sku.reference[metric]
        assert (ref.value, ref.kind) == (AWS_MULTINODE[name], "threshold")
        # AWS's own PCS page measured 377 GB/s on a healthy 4 x p6-b200 cluster: the floor must pass it.
        assert ref.floor < 377 or name != "p6-b200.48xlarge"
        assert "awsome-distributed-training" in ref.source and "5-nccl-allreduce.sh" in ref.source


def test_p4d_fabric_floor_is_a_fraction_of_its_line_rate() -> None:
    # AWS's check names 300 GB/s for p4d, six times its 4 x 100 Gb/s: no healthy p4d reaches it.
    sku = get_sku("p4d.24xlarge")
    for metric in FABRIC_METRICS:
        ref = sku.reference[metric]
        assert (ref.value, ref.kind) == (sku.fabric.nics * sku.fabric.gbps_per_nic / 8, "datasheet")
        assert "4 x 100 Gbps EFA" in ref.source


# The cpu SKU's fabric floors are measured on its own test bed (test_cpu_sku_fabric_floors_are_measured).
FABRIC_FLOORED = tuple(
    s for s in SKUS if set(FABRIC_METRICS) & set(s.reference) and s.accelerator.kind != "cpu"
)


@pytest.mark.parametrize("sku", FABRIC_FLOORED, ids=_ids(FABRIC_FLOORED))
def test_no_fabric_floor_asks_more_than_the_nodes_network_carries(sku: Sku) -> None:
    # An all-reduce across many nodes moves at most the node's line rate in busbw (2(r-1)/r of it
    # on 2 nodes): a floor above it rejects every healthy fleet.
    line_rate = sku.fabric.nics * sku.fabric.gbps_per_nic / 8  # Gb/s -> GB/s
    for metric in FABRIC_METRICS:
        assert sku.reference[metric].floor <= line_rate, (metric, sku.reference[metric].floor, line_rate)


# The same script's NVLink-only test: one node's all-reduce over NVLink/NVSwitch alone (GB/s). The
# intra-node figure is the board's, never the fabric's multi-node one above.
AWS_NVLINK_ONLY = {"p4d.24xlarge": 200, "p6-b200.48xlarge": 600}


@pytest.mark.parametrize("name", sorted(AWS_NVLINK_ONLY))
def test_the_intra_node_all_reduce_reference_is_the_nvlink_only_figure(name: str) -> None:
    ref = get_sku(name).reference["allreduce_busbw_gbps"]
    assert (ref.value, ref.kind) == (AWS_NVLINK_ONLY[name], "threshold")
    assert "NVLink-only" in ref.source and "5-nccl-allreduce.sh" in ref.source


def test_fabric_floors_are_never_borrowed_across_clouds() -> None:
    # Google's figures are all_gather, Azure's single-node: no GPU SKU outside AWS has a fabric floor.
    for sku in SKUS:
        if sku.accelerator.kind != "gpu":
            continue
        has = {m for m in FABRIC_METRICS if m in sku.reference}
        assert has == (set(FABRIC_METRICS) if sku.cloud == "aws" else set()), sku.sku


def test_cpu_sku_fabric_floors_are_measured() -> None:
    cpu = get_sku("cpu")
    for metric in FABRIC_METRICS:
        ref = cpu.reference[metric]
        assert ref.kind == "measured" and "all-reduce across" in ref.source
        # A cpu fleet on 1 GbE (0.125 GB/s line rate) passes; a host cut to a tenth of it does not.
        assert 0.0125 < ref.floor < 0.1


@pytest.mark.parametrize("sku", SKUS, ids=_ids(SKUS))
def test_every_sku_has_a_sourced_fabric_environment(sku: Sku) -> None:
    env = fabric_environment(sku)
    assert env.source.strip()
    if sku.accelerator.kind == "gpu":
        assert env.nccl_fabric not in {"none", "tcp"}, "a GPU fabric needs its own NCCL transport"
    # Node-specific values are named, never given a value here.
    assert not set(env.environment) & set(env.node_specific)
    assert not [k for k in env.environment if k.endswith(("IFNAME", "CTRL_DEV", "_HCA", "BINDINGS"))]


@pytest.mark.parametrize(
    ("kind", "nccl_fabric", "net", "library", "profile"),
    [
        ("efa", "efa", None, None, None),
        ("gpudirect-tcpx", "gpudirect-tcpx", "GPUDirectTCPX_v7", "/var/lib/tcpx/lib64", None),
        (
            "gpudirect-tcpxo",
            "gpudirect-tcpxo",
            None,
            "/var/lib/tcpxo/lib64",
            "/var/lib/tcpxo/lib64/nccl-env-profile.sh",
        ),
        ("gpudirect-rdma", "gib", "gIB", "/usr/local/gib/lib64", "/usr/local/gib/scripts/set_nccl_env.sh"),
        ("infiniband", "infiniband", None, None, None),
        ("ethernet", "tcp", None, None, None),
        ("ici", "none", None, None, None),
    ],
)
def test_fabric_environment_per_kind(
    kind: str, nccl_fabric: str, net: str | None, library: str | None, profile: str | None
) -> None:
    env = load_catalog().fabrics[kind]  # type: ignore[index]
    assert env.nccl_fabric == nccl_fabric
    assert env.environment.get("NCCL_NET") == net
    assert env.library_path == library and env.profile == profile
    process = env.process_environment()
    assert process.get("LD_LIBRARY_PATH") == library
    assert "LD_LIBRARY_PATH" not in env.nccl_conf()
    if kind == "efa":
        assert (process["FI_PROVIDER"], process["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1")
    if kind == "gpudirect-tcpxo":
        assert env.profile_environment == {"NCCL_LIB_DIR": "/var/lib/tcpxo/lib64"}
        assert {"NCCL_FASTRAK_CTRL_DEV", "NCCL_FASTRAK_IFNAME"} <= set(env.node_specific)


def test_a_fabric_environment_that_names_a_node_value_is_refused() -> None:
    from pydantic import ValidationError

    from fleet.catalog import FabricEnvironment

    with pytest.raises(ValidationError, match="NCCL_SOCKET_IFNAME: node-specific"):
        FabricEnvironment(
            nccl_fabric="efa",
            environment={"NCCL_SOCKET_IFNAME": "eth0"},
            node_specific=("NCCL_SOCKET_IFNAME",),
            source="x" * 3,
        )
    with pytest.raises(ValidationError, match="not an environment variable name"):
        FabricEnvironment(nccl_fabric="efa", environment={"fi provider": "efa"}, source="src")


def test_a_catalog_without_an_environment_for_a_used_fabric_is_refused() -> None:
    from pydantic import ValidationError

    from fleet.catalog import Catalog

    data = load_catalog().model_dump(mode="json")
    del data["fabrics"]["efa"]
    with pytest.raises(ValidationError, match="fabrics: no entry for efa"):
        Catalog.model_validate(data)
