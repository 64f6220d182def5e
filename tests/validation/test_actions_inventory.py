"""inventory: the rejected group lands in a YAML inventory atomically, and Ansible itself reads it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.validation.actions_fakes import node
from validation.actions import ActionConfigError, InventoryGroup, load_inventory_hostvars, run_actions

FIXTURE = Path(__file__).parent / "fixtures" / "actions" / "inventory.yml"
R1 = ("gemm_bf16_tflops 512 < 700 (floor 0.9 x reference)",)
R2 = ("unreachable: ssh timed out",)


def ansible_list(path: Path) -> dict[str, object]:
    """What Ansible makes of the file (skipped where the onprem extra is not installed)."""
    pytest.importorskip("ansible")
    exe = Path(sys.executable).parent / "ansible-inventory"
    out = subprocess.run(
        [str(exe), "-i", str(path), "--list"], capture_output=True, text=True, check=True, timeout=120
    )
    data: dict[str, object] = json.loads(out.stdout)
    return data


def test_new_file_holds_the_group_and_ansible_reads_it(tmp_path: Path) -> None:
    path = tmp_path / "inventory" / "rejected.yml"
    report = run_actions([InventoryGroup(path)], [node("gpu-01", *R1), node("gpu-02", *R2)], dry_run=False)
    assert report.ok, report.render()
    assert yaml.safe_load(path.read_text()) == {
        "all": {
            "children": {
                "rejected": {
                    "hosts": {
                        "gpu-01": {"fleetforge_reject_reasons": list(R1)},
                        "gpu-02": {"fleetforge_reject_reasons": list(R2)},
                    }
                }
            }
        }
    }
    listed = ansible_list(path)
    assert sorted(listed["rejected"]["hosts"]) == ["gpu-01", "gpu-02"]  # type: ignore[index]
    assert listed["_meta"]["hostvars"]["gpu-02"]["fleetforge_reject_reasons"] == list(R2)  # type: ignore[index]
    assert [p.name for p in path.parent.iterdir()] == ["rejected.yml"]  # no temp file left


def test_update_keeps_everything_else_and_accumulates(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    shutil.copy(FIXTURE, path)
    path.chmod(0o640)
    before = load_inventory_hostvars(path)
    assert run_actions([InventoryGroup(path)], [node("gpu-02", *R1)], dry_run=False).ok
    assert run_actions([InventoryGroup(path)], [node("gpu-03", *R2), node("gpu-02", *R2)], dry_run=False).ok
    after = load_inventory_hostvars(path)
    for host, values in before.items():
        extra = {k: v for k, v in after[host].items() if k not in values}
        assert {k: after[host][k] for k in values} == values
        assert extra == ({"fleetforge_reject_reasons": list(R2)} if host in {"gpu-02", "gpu-03"} else {})
    data = yaml.safe_load(path.read_text())
    assert list(data["all"]["children"]) == ["gpu_nodes", "rejected"]
    assert list(data["all"]["children"]["rejected"]["hosts"]) == ["gpu-02", "gpu-03"]
    assert path.stat().st_mode & 0o777 == 0o640
    listed = ansible_list(path)
    assert listed["_meta"]["hostvars"]["gpu-02"]["ec2_instance_id"] == "i-0fedcba9876543210"  # type: ignore[index]


def test_a_top_level_group_of_that_name_is_the_one_updated(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text("quarantine:\n  hosts:\n    old-node: {fleetforge_reject_reasons: [earlier]}\n")
    assert run_actions([InventoryGroup(path, group="quarantine")], [node("gpu-01", *R1)], dry_run=False).ok
    assert yaml.safe_load(path.read_text()) == {
        "quarantine": {
            "hosts": {
                "old-node": {"fleetforge_reject_reasons": ["earlier"]},
                "gpu-01": {"fleetforge_reject_reasons": list(R1)},
            }
        }
    }


@pytest.mark.parametrize(
    "content",
    [
        "all: [not, a, mapping]\n",
        "all:\n  children: {rejected: {hosts: [a, b]}}\n",
        "key: [unclosed\n",
        "- a list\n",
    ],
)
def test_an_unusable_file_fails_every_step_and_is_left_unchanged(tmp_path: Path, content: str) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(content)
    report = run_actions([InventoryGroup(path)], [node("gpu-01"), node("gpu-02")], dry_run=False)
    assert [r.ok for r in report.results] == [False, False]
    assert "unchanged" in report.results[0].detail
    assert path.read_text() == content
    assert [p.name for p in tmp_path.iterdir()] == ["hosts.yml"]


def test_dry_run_writes_nothing_and_plans_one_step_per_node(tmp_path: Path) -> None:
    path = tmp_path / "rejected.yml"
    report = run_actions([InventoryGroup(path)], [node("gpu-01", *R1), node("gpu-02", *R2)], dry_run=True)
    assert not path.exists()
    assert [dict(s.calls[0].params) for s in report.steps] == [
        {"group": "rejected", "host": "gpu-01", "vars": {"fleetforge_reject_reasons": list(R1)}},
        {"group": "rejected", "host": "gpu-02", "vars": {"fleetforge_reject_reasons": list(R2)}},
    ]


@pytest.mark.parametrize("group", ["all", "1bad", "has-dash", ""])
def test_group_name_must_be_an_ansible_group(tmp_path: Path, group: str) -> None:
    with pytest.raises(ActionConfigError, match="inventory group"):
        InventoryGroup(tmp_path / "x.yml", group=group)
