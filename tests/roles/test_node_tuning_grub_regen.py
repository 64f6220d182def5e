"""node_tuning on Debian and Ubuntu reruns update-grub while the GRUB configuration it wrote lacks
a kernel argument, not only on the run that changed the drop-in (an update-grub that failed once
would otherwise never run again). The task's conditions are rendered with Ansible's own templar."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from tests.conftest import ROOT
from tests.roles.test_vendor_pins import _trust

ARGS = ["iommu=pt", "numa_balancing=disable"]
# A menuentry's linux line as update-grub writes it into /boot/grub/grub.cfg (Ubuntu 22.04).
CFG = (
    "menuentry 'Ubuntu' --class ubuntu {\n"
    "\tlinux\t/boot/vmlinuz-5.15.0-88-generic root=UUID=0f1e ro quiet splash {args}\n"
    "\tinitrd\t/boot/initrd.img-5.15.0-88-generic\n"
    "}\n"
)


def _regenerates(dropin_changed: bool, cfg: str | None) -> bool:
    tasks = yaml.safe_load((ROOT / "roles/node_tuning/tasks/kernel_args_Debian.yml").read_text())
    task = next(t for t in tasks if t.get("name") == "Regenerate the GRUB configuration")
    slurped: dict[str, Any] = (
        {"failed": True} if cfg is None else {"content": base64.b64encode(cfg.encode()).decode()}
    )
    variables = {
        "node_tuning_kernel_args": ARGS,
        "node_tuning_grub_dropin": {"changed": dropin_changed},
        "node_tuning_update_grub": {"stat": {"exists": True}},
        "node_tuning_grub_cfg": slurped,
        "ansible_check_mode": False,
    }
    templar = Templar(loader=DataLoader(), variables=_trust(variables))
    return all(templar.template(trust_as_template("{{ (" + c + ") | bool }}")) for c in task["when"])


@pytest.mark.parametrize(
    ("dropin_changed", "cfg", "runs"),
    [
        (True, CFG.replace("{args}", " ".join(ARGS)), True),
        (False, CFG.replace("{args}", " ".join(ARGS)), False),
        (False, CFG.replace("{args}", "iommu=pt"), True),  # an earlier update-grub never finished
        (False, None, True),  # no grub.cfg to read
    ],
)
def test_update_grub_runs_while_its_configuration_lacks_an_argument(
    dropin_changed: bool, cfg: str | None, runs: bool
) -> None:
    assert _regenerates(dropin_changed, cfg) is runs
