"""FleetSpec: every example loads; each bad spec is rejected with its field path and what is allowed."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.spec import FleetSpec, SpecError, load_spec, spec_from_mapping
from tests.conftest import EXAMPLES

AWS: dict[str, Any] = yaml.safe_load((EXAMPLES / "aws-p5-fleet.yaml").read_text())
AZURE: dict[str, Any] = yaml.safe_load((EXAMPLES / "azure-ndh100-fleet.yaml").read_text())
GCP: dict[str, Any] = yaml.safe_load((EXAMPLES / "gcp-a3-mega-fleet.yaml").read_text())
TPU: dict[str, Any] = yaml.safe_load((EXAMPLES / "gcp-tpu-v5e-slice.yaml").read_text())
ONPREM: dict[str, Any] = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())


def with_(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of base with the dotted path set (or removed when value is DELETE)."""
    doc = copy.deepcopy(base)
    *parents, leaf = path.split(".")
    node = doc
    for part in parents:
        node = node.setdefault(part, {}) if isinstance(node, dict) else node[int(part)]
    if value is DELETE:
        del node[leaf]
    else:
        node[leaf] = value
    return doc


DELETE = object()

# (id, document, field path the error must name, fragment of what is allowed / why)
BAD: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "gcs-bucket-google",
        with_(GCP, "storage.checkpoints.bucket", "google-ckpt"),
        "storage.checkpoints.bucket",
        "goog",
    ),
    (
        "gcs-bucket-dotted",
        with_(GCP, "storage.checkpoints.bucket", "ckpt.example.com"),
        "storage.checkpoints.bucket",
        "dots",
    ),
    (
        "s3-bucket-alias-suffix",
        with_(AWS, "storage.checkpoints.bucket", "ckpt-s3alias"),
        "storage.checkpoints.bucket",
        "-s3alias",
    ),
    (
        "s3-bucket-xn",
        with_(AWS, "storage.checkpoints.bucket", "xn--ckpt"),
        "storage.checkpoints.bucket",
        "xn--",
    ),
    (
        "aws-vpc-without-subnet",
        with_(AWS, "network.vpc_id", "vpc-0abc1234def567890"),
        "network.subnet_id",
        "required with network.vpc_id",
    ),
    (
        "aws-subnet-id-format",
        with_(AWS, "network.subnet_id", "my-subnet"),
        "network.subnet_id",
        "subnet-<8 to 17 hex",
    ),
    ("aws-ami-format", with_(AWS, "image", "ubuntu-22.04"), "image", "ami-<8 to 17 hex"),
    (
        "aws-bastion-form",
        with_(AWS, "network.bastion", "jump.example"),
        "network.bastion",
        "security group id",
    ),
    ("unknown-top-key", with_(AWS, "colour", "blue"), "colour", "allowed here"),
    (
        "unknown-nested-key",
        with_(AWS, "storage.filesystem.capasity_gib", 1200),
        "storage.filesystem.capasity_gib",
        "capacity_gib",
    ),
    ("name-not-dns", with_(AWS, "name", "LLM_Pretrain"), "name", "pattern"),
    ("name-missing", with_(AWS, "name", DELETE), "name", "required"),
    ("cloud-unknown", with_(AWS, "cloud", "oracle"), "cloud", "'aws', 'gcp', 'azure' or 'onprem'"),
    ("sku-unknown", with_(AWS, "sku", "p9.96xlarge"), "sku", "allowed for aws"),
    ("sku-wrong-cloud", with_(AWS, "sku", "a3-megagpu-8g"), "sku", "is a gcp SKU"),
    ("nodes-zero", with_(AWS, "nodes", 0), "nodes", "greater than 0"),
    ("nodes-not-int", with_(AWS, "nodes", "many"), "nodes", "integer"),
    ("spares-not-below-nodes", with_(AWS, "spares", 16), "spares", "fewer spares than nodes"),
    ("spares-negative", with_(AWS, "spares", -1), "spares", "greater than or equal to 0"),
    (
        "zone-outside-region",
        with_(AWS, "zone", "us-west-2a"),
        "zone",
        "is not a zone of aws region us-east-1",
    ),
    ("region-missing", with_(AWS, "region", DELETE), "region", "required for aws"),
    ("capacity-type-unknown", with_(AWS, "capacity.type", "free"), "capacity.type", "'on-demand'"),
    (
        "capacity-block-no-id",
        with_(AWS, "capacity.reservation_id", DELETE),
        "capacity.reservation_id",
        "required",
    ),
    (
        "capacity-block-bad-id",
        with_(AWS, "capacity.reservation_id", "my-block"),
        "capacity.reservation_id",
        "cr-<hex>",
    ),
    ("capacity-block-on-gcp", with_(GCP, "capacity.type", "capacity-block"), "capacity.type", "aws only"),
    (
        "queued-on-aws",
        with_(with_(AWS, "capacity.type", "queued"), "capacity.reservation_id", DELETE),
        "capacity.type",
        "gcp only",
    ),
    ("ssh-from-internet", with_(AWS, "network.ssh_cidr", "0.0.0.0/0"), "network.ssh_cidr", "whole internet"),
    ("ssh-cidr-garbage", with_(AWS, "network.ssh_cidr", "10.0.0.0/33"), "network.ssh_cidr", "IPv4"),
    (
        "fsx-capacity-step",
        with_(AWS, "storage.filesystem.capacity_gib", 3000),
        "storage.filesystem.capacity_gib",
        "multiple of 2.4 TiB",
    ),
    (
        "fsx-capacity-tib-step",
        with_(with_(AWS, "storage.filesystem.capacity_gib", DELETE), "storage.filesystem.capacity_tib", 3.0),
        "storage.filesystem.capacity_tib",
        "1.2 TiB",
    ),
    (
        "fsx-throughput",
        with_(AWS, "storage.filesystem.throughput_mbps_per_tib", 200),
        "storage.filesystem.throughput_mbps_per_tib",
        "125, 250, 500, 1000",
    ),
    (
        "fs-kind-wrong-cloud",
        with_(AWS, "storage.filesystem.kind", "amlfs"),
        "storage.filesystem.kind",
        "allowed: fsx-lustre",
    ),
    (
        "fs-capacity-missing",
        with_(AWS, "storage.filesystem.capacity_gib", DELETE),
        "storage.filesystem.capacity_gib",
        "required",
    ),
    (
        "managed-lustre-step",
        with_(GCP, "storage.filesystem.capacity_gib", 40000),
        "storage.filesystem.capacity_gib",
        "steps of 36,000 GiB",
    ),
    (
        "amlfs-step",
        with_(AZURE, "storage.filesystem.capacity_tib", 20),
        "storage.filesystem.capacity_tib",
        "multiple of 16 TiB",
    ),
    (
        "amlfs-tier",
        with_(AZURE, "storage.filesystem.throughput_mbps_per_tib", 1000),
        "storage.filesystem.throughput_mbps_per_tib",
        "40, 125, 250, 500",
    ),
    ("azure-ib-placement-group", with_(AZURE, "nodes", 120), "nodes", "<= 100"),
    ("azure-zone", with_(AZURE, "zone", "eastus-1"), "zone", "1, 2, 3"),
    (
        "azure-bucket-name",
        with_(AZURE, "storage.checkpoints.bucket", "nd-h100-ckpt"),
        "storage.checkpoints.bucket",
        "3-24 lowercase",
    ),
    ("tpu-slice-shape", with_(with_(TPU, "tpu", DELETE), "nodes", 3), "nodes", "slice sizes"),
    ("tpu-vms-unnamed", with_(TPU, "tpu", DELETE), "tpu.topology", "name the shape"),
    ("tpu-vms-of-topology", with_(TPU, "nodes", 8), "nodes", "allowed: nodes = 16"),
    ("tpu-spares", with_(TPU, "spares", 1), "spares", "provisioned whole"),
    ("onprem-no-hosts", with_(ONPREM, "hosts", DELETE), "hosts", "names its hosts"),
    ("onprem-host-count", with_(ONPREM, "nodes", 4), "hosts", "nodes + spares = 5"),
    ("onprem-duplicate-host", with_(ONPREM, "hosts.3.name", "gpu01"), "hosts.3.name", "duplicate"),
    (
        "onprem-lustre-needs-mgs",
        with_(ONPREM, "storage.filesystem.mgs_nids", DELETE),
        "storage.filesystem.mgs_nids",
        "required",
    ),
    (
        "cloud-lists-hosts",
        with_(AWS, "hosts", [{"name": "a", "address": "10.0.0.1"}]),
        "hosts",
        "only on-prem",
    ),
    ("owner-missing", with_(AWS, "tags.owner", DELETE), "tags.owner", "required"),
    ("tag-value-uppercase", with_(AWS, "tags.dataset", "Web 2026"), "tags.dataset", "pattern"),
    (
        "threshold-unknown-metric",
        with_(AWS, "validation.thresholds", {"gemm_tf32_flops": {"fraction": 0.5}}),
        "validation.thresholds",
        "gemm_bf16_tflops",
    ),
    (
        "level-unknown",
        with_(AWS, "validation.level", "thorough"),
        "validation.level",
        "'quick', 'standard' or 'extended'",
    ),
    (
        "pinned-unknown-component",
        with_(AWS, "validation.pinned_versions", {"bios": "1.0"}),
        "validation.pinned_versions",
        "driver",
    ),
    (
        "retention-noncurrent-longer",
        with_(AWS, "storage.checkpoints.noncurrent_retention_days", 90),
        "storage.checkpoints.noncurrent_retention_days",
        "exceeds",
    ),
]


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_is_valid(path: Path) -> None:
    spec = load_spec(path)
    assert spec.catalog_sku.cloud == spec.cloud


def test_corpus_is_large_enough() -> None:
    assert len(BAD) >= 25
    assert len({case[0] for case in BAD}) == len(BAD)


@pytest.mark.parametrize(("doc", "field", "allowed"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_spec_names_field_and_what_is_allowed(doc: dict[str, Any], field: str, allowed: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_from_mapping(doc, source="case.yaml")
    paths = [p for p, _ in info.value.problems]
    assert field in paths, info.value.render()
    message = dict(info.value.problems)[field]
    assert allowed in message, message


def test_a_fleet_has_exactly_one_sku_field() -> None:
    # Homogeneity is a property of the type: there is nowhere to write a second SKU.
    assert "sku" in FleetSpec.model_fields
    assert not any(name in FleetSpec.model_fields for name in ("skus", "node_groups", "pools"))
    with pytest.raises(SpecError):
        spec_from_mapping(with_(AWS, "skus", ["p5.48xlarge", "p4d.24xlarge"]))
    with pytest.raises(SpecError):
        spec_from_mapping(with_(AWS, "sku", ["p5.48xlarge", "p4d.24xlarge"]))


def test_valid_spec_size_counts_spares() -> None:
    spec = spec_from_mapping(AWS)
    assert spec.size == 18
    assert spec.fleet_tag == "llm-pretrain-p5"


def test_fsx_accepts_1200_and_multiples_of_2400() -> None:
    for gib in (1200, 2400, 4800, 96000):
        assert spec_from_mapping(with_(AWS, "storage.filesystem.capacity_gib", gib))
    tib = with_(with_(AWS, "storage.filesystem.capacity_gib", DELETE), "storage.filesystem.capacity_tib", 1.2)
    assert spec_from_mapping(tib).storage.filesystem is not None


def test_several_problems_are_reported_together() -> None:
    doc = with_(with_(AWS, "spares", 40), "zone", "eu-west-1a")
    with pytest.raises(SpecError) as info:
        spec_from_mapping(doc)
    assert {"spares", "zone"} <= {p for p, _ in info.value.problems}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("name: [unclosed\n", "not valid YAML at line"),
        ("- a\n- b\n", "a mapping of fields"),
        ("", "got NoneType"),
    ],
)
def test_unreadable_files_are_named(tmp_path: Path, text: str, fragment: str) -> None:
    f = tmp_path / "fleet.yaml"
    f.write_text(text)
    with pytest.raises(SpecError) as info:
        load_spec(f)
    assert str(f) in info.value.render()
    assert fragment in info.value.render()
