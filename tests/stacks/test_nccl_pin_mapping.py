"""A spec's nccl pin reaches roles/nccl as a build NVIDIA publishes for the pinned CUDA.

NVIDIA's packages name the CUDA release each build was made with: libnccl2=2.30.7-1+cuda12.9
(Debian, Ubuntu), libnccl-2.30.7-1+cuda12.9 (RHEL). 2.30.7 has +cuda12.9 and +cuda13.3 builds and
no +cuda12.8, so `nccl: 2.30.7` alone must not become 2.30.7-1+cuda12.8 under a cuda 12.9 pin, and a
cuda 13 toolkit must not get a CUDA 12 build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.ansible_inventory import InventoryConfigError, fleet_vars, from_spec
from tests.conftest import EXAMPLES


def _nccl_vars(pinned: dict[str, str]) -> dict[str, Any]:
    from fleet.catalog import get_sku

    got = fleet_vars("train-a", get_sku("hgx-h100-8"), pinned)
    return {k: v for k, v in got.items() if k.startswith(("nccl_", "cuda_toolkit_"))}


@pytest.mark.parametrize(
    ("pinned", "expected"),
    [
        # A bare release takes the toolkit's CUDA MAJOR.MINOR: libnccl2=2.30.7-1+cuda12.9.
        (
            {"nccl": "2.30.7", "cuda": "12.9"},
            {"nccl_version": "2.30.7-1", "nccl_cuda_version": "12.9", "cuda_toolkit_version": "12.9"},
        ),
        (
            {"nccl": "2.30.7-1", "cuda": "12.9.1"},
            {
                "nccl_version": "2.30.7-1",
                "nccl_cuda_version": "12.9",
                "cuda_toolkit_version": "12.9",
                "cuda_toolkit_release": "12.9.1",
            },
        ),
        # The whole build named: split into the two role variables.
        ({"nccl": "2.30.7-1+cuda12.9"}, {"nccl_version": "2.30.7-1", "nccl_cuda_version": "12.9"}),
        # A CUDA 13.0 toolkit with the CUDA 13 build NVIDIA publishes (there is no +cuda13.0).
        (
            {"nccl": "2.30.7-1+cuda13.3", "cuda": "13.0"},
            {"nccl_version": "2.30.7-1", "nccl_cuda_version": "13.3", "cuda_toolkit_version": "13.0"},
        ),
    ],
)
def test_the_nccl_pin_names_a_build_for_the_pinned_cuda(
    pinned: dict[str, str], expected: dict[str, str]
) -> None:
    assert _nccl_vars(pinned) == expected


def test_a_build_for_another_cuda_major_than_the_cuda_pin_is_refused() -> None:
    with pytest.raises(InventoryConfigError) as caught:
        _nccl_vars({"nccl": "2.30.7-1+cuda12.9", "cuda": "13.0"})
    assert caught.value.field == "validation.pinned_versions.nccl"
    assert "'2.30.7-1+cuda12.9' is a CUDA 12 build" in caught.value.message
    assert "'13.0' installs CUDA 13" in caught.value.message


def _onprem(tmp_path: Path, pinned: dict[str, str]) -> Any:
    from fleet.spec import load_spec

    doc = yaml.safe_load((EXAMPLES / "onprem-hgx-h100.yaml").read_text())
    doc["validation"]["pinned_versions"] = pinned
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_spec(path)


def test_the_onprem_inventory_writes_the_pinned_build(tmp_path: Path) -> None:
    """`fleetforge inventory <spec>`: the static inventory's vars carry the build the pins name."""
    fleet = from_spec(_onprem(tmp_path, {"nccl": "2.30.7", "cuda": "12.9.1"}))["all"]["vars"]
    assert (fleet["nccl_version"], fleet["nccl_cuda_version"], fleet["cuda_toolkit_version"]) == (
        "2.30.7-1",
        "12.9",
        "12.9",
    )
    fleet = from_spec(_onprem(tmp_path, {"nccl": "2.30.7-1+cuda13.3", "cuda": "13.0.2"}))["all"]["vars"]
    assert (fleet["nccl_version"], fleet["nccl_cuda_version"], fleet["cuda_toolkit_version"]) == (
        "2.30.7-1",
        "13.3",
        "13.0",
    )
    with pytest.raises(InventoryConfigError):
        from_spec(_onprem(tmp_path, {"nccl": "2.30.7-1+cuda12.9", "cuda": "13.0.2"}))
