"""node_tuning on RHEL: which kernel arguments grubby's default entry lacks.

The task's expression is rendered with Ansible's own templar over `grubby --info=DEFAULT` output
in the form Red Hat's "Managing kernel command-line parameters" guide (RHEL 8 and 9) prints it.
"""

from __future__ import annotations

from typing import Any

import pytest
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.roles.test_vendor_pins import _tasks, _trust

GRUBBY_INFO = """index=0
kernel="/boot/vmlinuz-4.18.0-80.el8.x86_64"
args="ro crashkernel=auto resume=/dev/mapper/rhel-swap rd.lvm.lv=rhel/root rd.lvm.lv=rhel/swap rhgb quiet iommu=pt"
root="/dev/mapper/rhel-root"
initrd="/boot/initramfs-4.18.0-80.el8.x86_64.img"
title="Red Hat Enterprise Linux (4.18.0-80.el8.x86_64) 8.0 (Ootpa)"
"""


@pytest.mark.parametrize(
    ("info", "missing"),
    [
        (GRUBBY_INFO, ["numa_balancing=disable"]),
        (GRUBBY_INFO.replace(" iommu=pt", ""), ["iommu=pt", "numa_balancing=disable"]),
        ("index=0\n", ["iommu=pt", "numa_balancing=disable"]),  # no args line: everything is missing
    ],
)
def test_the_arguments_grubbys_default_entry_lacks(info: str, missing: list[str]) -> None:
    task = next(
        t for t in _tasks("node_tuning") if t.get("name") == "Add missing kernel arguments to every kernel"
    )
    variables: dict[str, Any] = {
        "node_tuning_kernel_args": ["iommu=pt", "numa_balancing=disable"],
        "node_tuning_grubby": {"stdout": info},
    }
    templar = Templar(loader=DataLoader(), variables=_trust(variables))
    assert templar.template(trust_as_template(task["vars"]["node_tuning_missing_args"])) == missing
