"""nvidia_driver refuses a kernel module flavor that cannot drive the GPUs gpu_facts found.

The role's own task file (tasks/flavor.yml) runs under ansible-playbook on this machine, one
inventory host per case, with the PCI devices as gpu.fact reports them (vendor, device id, class as
read from sysfs) and delivered as the fact is, parsed from JSON, so a string in them is data.
Device ids: NVIDIA's open-gpu-kernel-modules compatibility table (595.45.04) for T4 0x1EB8, A100
0x20B0, H100 0x2330, GH200 0x2342, B200 0x2901; pci.ids for V100 SXM2 0x1DB1 (GV100GL) and the
NVSwitch 0x22A3; AMD's MI300X is 0x74A1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import ROOT
from tests.local_play import local_hosts, run_play


def gpu(
    device_id: str, address: str = "0000:18:00.0", vendor_id: str = "0x10de", kind: str = "gpu"
) -> dict[str, Any]:
    return {
        "address": address,
        "vendor": "nvidia" if vendor_id == "0x10de" else "amd",
        "vendor_id": vendor_id,
        "device_id": device_id,
        "class": "0x030200",
        "kind": kind,
        "driver": None,
        "numa_node": 0,
    }


NVSWITCH = gpu("0x22a3", "0000:05:00.0", kind="nvswitch")
CASES: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "h100_open": ("open", [gpu("0x2330"), NVSWITCH]),
    "t4_open": ("open", [gpu("0x1eb8")]),  # Turing: the first generation the open modules drive
    "a100_proprietary": ("proprietary", [gpu("0x20b0")]),
    "v100_proprietary": ("proprietary", [gpu("0x1db1")]),
    "b200_open": ("open", [gpu("0x2901")]),
    "amd_open": ("open", [gpu("0x74a1", vendor_id="0x1002")]),  # not the NVIDIA driver's to judge
    "declared_open": ("open", []),  # gpu_facts_override: counts, no ids
    "v100_open": ("open", [gpu("0x2330", "0000:18:00.0"), gpu("0x1DB1", "0000:3b:00.0")]),
    "b200_proprietary": ("proprietary", [gpu("0x2901")]),
    "gh200_proprietary": ("proprietary", [gpu("0x2342", "0009:01:00.0")]),
    "hostile_open": ("open", [gpu("0x{{ 7 * 7 }}")]),
}
REFUSED = {
    "v100_open": "the GPU at 0000:3b:00.0 (device id 0x1db1): older than Turing, it needs proprietary",
    "b200_proprietary": "the GPU at 0000:18:00.0 (device id 0x2901): Grace Hopper or Blackwell, it needs open",
    "gh200_proprietary": "the GPU at 0009:01:00.0 (device id 0x2342): Grace Hopper or Blackwell, it needs open",
    "hostile_open": "(device id 0x{{ 7 * 7 }}): not a PCI device id, so its generation is unknown",
}


def test_a_flavor_that_cannot_drive_a_gpu_found_is_refused_naming_the_gpu(tmp_path: Path) -> None:
    hosts = local_hosts(
        {name: {"nvidia_driver_kernel_modules": modules} for name, (modules, _) in CASES.items()}
    )
    for name, (_, devices) in CASES.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(devices))
    tasks = [
        # As gpu_facts sets it: parsed from what the node printed (its direct scan's stdout).
        {
            "name": "The node prints its devices",
            "ansible.builtin.command": {"argv": ["cat", f"{tmp_path}/{{{{ inventory_hostname }}}}.json"]},
            "register": "scan",
            "changed_when": False,
        },
        {
            "name": "Devices as gpu_facts sets them",
            "ansible.builtin.set_fact": {"gpu_facts_devices": "{{ scan.stdout | from_json }}"},
        },
        # The task file alone: the role's dependency (gpu_facts) would scan this machine instead.
        {
            "name": "The role's check",
            "ansible.builtin.include_tasks": str(ROOT / "roles" / "nvidia_driver" / "tasks" / "flavor.yml"),
        },
    ]
    done = run_play(
        tmp_path, {"all": {"hosts": hosts}}, tasks, env={"ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"}
    )
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr[-2000:]  # 2: some host failed
    results = json.loads(done.stdout)["plays"][0]["tasks"][-1]["hosts"]
    assert set(results) == set(CASES)
    refused = {name: r["msg"] for name, r in results.items() if r.get("failed")}
    assert set(refused) == set(REFUSED)
    for name, reason in REFUSED.items():
        modules = CASES[name][0]
        assert refused[name].startswith(
            f"nvidia_driver_kernel_modules is '{modules}' on {name}, which cannot drive "
        )
        assert reason in refused[name], refused[name]
    assert "0000:18:00.0" not in refused["v100_open"]  # the H100 beside it is fine
    assert "0x49" not in refused["hostile_open"]  # a node's string is never templated
