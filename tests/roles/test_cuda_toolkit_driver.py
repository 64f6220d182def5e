"""cuda_toolkit refuses a CUDA release the play's driver branch cannot run.

CUDA 12.x needs a 525 or newer driver, CUDA 13.x a 580 or newer (NVIDIA's minor version
compatibility table: https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html).
The role's assert is rendered with Ansible's own templar (tests/roles/test_vendor_pins.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.roles.test_vendor_pins import _assert_passes

TASK = "Check the driver branch runs this CUDA release"


@pytest.mark.parametrize(
    ("pins", "ok"),
    [
        ({"cuda_toolkit_version": "12.8", "nvidia_driver_branch": "570"}, True),
        ({"cuda_toolkit_version": "12.8", "nvidia_driver_branch": "525"}, True),
        ({"cuda_toolkit_version": "12.8", "nvidia_driver_branch": "470"}, False),
        ({"cuda_toolkit_version": "13.0", "nvidia_driver_branch": "580"}, True),
        ({"cuda_toolkit_version": "13.0", "nvidia_driver_branch": "570"}, False),
        ({"cuda_toolkit_version": "11.8", "nvidia_driver_branch": "470"}, True),
        # No driver in this play: the node's own driver is not known here, so nothing is judged.
        ({"cuda_toolkit_version": "13.0"}, True),
    ],
)
def test_a_cuda_release_newer_than_the_driver_branch_is_refused(pins: dict[str, Any], ok: bool) -> None:
    release = f"{pins['cuda_toolkit_version']}.0"
    assert _assert_passes("cuda_toolkit", TASK, "ubuntu2204", cuda_toolkit_release=release, **pins) is ok
