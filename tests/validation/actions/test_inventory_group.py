"""inventory: the rejected group lands in a YAML inventory atomically, and Ansible itself reads it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from fleet import ansible_yaml
from tests.conftest import BIN
from tests.hostile.conftest import Canary
from tests.hostile.helpers import ansible_hostvars, plain
from tests.validation.actions.fakes import node
from validation.actions import ActionConfigError, InventoryGroup, load_inventory_hostvars, run_actions

FIXTURE = Path(__file__).parent / "fixtures" / "inventory.yml"
R1 = ("gemm_bf16_tflops 512 < 700 (floor 0.9 x reference)",)
R2 = ("unreachable: ssh timed out",)


@pytest.fixture
def canary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Canary]:
    c = Canary(tmp_path_factory.mktemp("canary") / "pwned")
    yield c
    c.assert_untouched()


def ansible_list(path: Path) -> dict[str, object]:
    """What Ansible makes of the file (skipped where the onprem extra is not installed)."""
    pytest.importorskip("ansible")
    exe = BIN / "ansible-inventory"
    out = subprocess.run(
        [str(exe), "-i", str(path), "--list"], capture_output=True, text=True, check=True, timeout=120
    )
    data: dict[str, object] = plain(json.loads(out.stdout))
    return data


def listing(folder: Path, *hosts: str) -> Path:
    """The operator's own inventory file in `folder`, listing `hosts`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {h: {"ansible_connection": "local"} for h in hosts}}}))
    return path


def test_new_file_beside_the_hosts_file_holds_the_group_and_ansible_reads_it(tmp_path: Path) -> None:
    listing(tmp_path / "inventory", "gpu-01", "gpu-02")
    path = tmp_path / "inventory" / "rejected.yml"
    report = run_actions([InventoryGroup(path)], [node("gpu-01", *R1), node("gpu-02", *R2)], dry_run=False)
    assert report.ok, report.render()
    assert ansible_yaml.load(path.read_text()) == {
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
    assert sorted(p.name for p in path.parent.iterdir()) == ["hosts.yml", "rejected.yml"]  # no temp file


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
    data = ansible_yaml.load(path.read_text())
    assert list(data["all"]["children"]) == ["gpu_nodes", "rejected"]
    assert list(data["all"]["children"]["rejected"]["hosts"]) == ["gpu-02", "gpu-03"]
    assert path.stat().st_mode & 0o777 == 0o640
    listed = ansible_list(path)
    assert listed["_meta"]["hostvars"]["gpu-02"]["ec2_instance_id"] == "i-0fedcba9876543210"  # type: ignore[index]


def test_a_top_level_group_of_that_name_is_the_one_updated(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yml"
    path.write_text(
        "quarantine:\n  hosts:\n    old-node: {fleetforge_reject_reasons: [earlier]}\n"
        "workers:\n  hosts:\n    gpu-01:\n"
    )
    assert run_actions([InventoryGroup(path, group="quarantine")], [node("gpu-01", *R1)], dry_run=False).ok
    assert ansible_yaml.load(path.read_text()) == {
        "quarantine": {
            "hosts": {
                "old-node": {"fleetforge_reject_reasons": ["earlier"]},
                "gpu-01": {"fleetforge_reject_reasons": list(R1)},
            }
        },
        "workers": {"hosts": {"gpu-01": None}},
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


def test_a_node_nobody_listed_fails_its_step_and_never_becomes_a_host(tmp_path: Path) -> None:
    path = listing(tmp_path, "gpu-01")
    before = path.read_text()
    report = run_actions(
        [InventoryGroup(path)], [node("gpu-01", *R1), node("intruder-9", *R2)], dry_run=False
    )
    assert [(r.step.node, r.ok) for r in report.results] == [("gpu-01", True), ("intruder-9", False)]
    assert "nobody listed" in report.results[1].detail
    hosts = load_inventory_hostvars(path)
    assert set(hosts) == {"gpu-01"}
    assert path.read_text() != before
    report = run_actions([InventoryGroup(path)], [node("intruder-9", *R2)], dry_run=False)
    assert not report.ok
    assert set(load_inventory_hostvars(path)) == {"gpu-01"}


@pytest.mark.parametrize("name", ["gpu[01:99]", "gpu-01:2222", "{{ x }}", "a b", "-flag", "gpu-01\n"])
def test_a_node_name_that_is_not_a_host_name_is_refused(tmp_path: Path, name: str) -> None:
    path = listing(tmp_path, "gpu-01")
    before = path.read_text()
    report = run_actions([InventoryGroup(path)], [node(name, *R1)], dry_run=False)
    assert not report.ok and "not an inventory host name" in report.results[0].detail
    assert path.read_text() == before


def test_reasons_are_never_templated_by_ansible(tmp_path: Path, canary: Canary) -> None:
    path = listing(tmp_path, "gpu-01")
    reasons = (canary.pipe, canary.block, "{# comment #} plain")
    assert run_actions([InventoryGroup(path)], [node("gpu-01", *reasons)], dry_run=False).ok
    assert "!unsafe" in path.read_text()
    rendered = ansible_hostvars(path)
    assert rendered["gpu-01"]["fleetforge_reject_reasons"] == list(reasons)
    canary.assert_untouched()
    # a second run reads its own `!unsafe` values back and keeps them unsafe
    assert run_actions([InventoryGroup(path)], [node("gpu-01", *reasons)], dry_run=False).ok
    assert ansible_hostvars(path)["gpu-01"]["fleetforge_reject_reasons"] == list(reasons)


def test_a_new_file_is_readable_per_the_umask(tmp_path: Path) -> None:
    listing(tmp_path, "gpu-01")
    path = tmp_path / "rejected.yml"
    old = os.umask(0o027)
    try:
        assert run_actions([InventoryGroup(path)], [node("gpu-01")], dry_run=False).ok
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o640
