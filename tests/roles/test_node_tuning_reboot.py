"""node_tuning decides its reboot for kernel arguments from the running kernel's command line.

The kernel-argument tasks of tasks/main.yml after GRUB is written (read /proc/cmdline, the pending
fact, the report and the reboot) and the kernel-argument checks of tasks/verify.yml run under
ansible-playbook on this machine, one inventory host per case, each reading a command line from a
file of its own instead of /proc/cmdline. The GRUB step is simulated by its facts: it did not change
anything on this run, so only the running kernel can say that a reboot is due. The reboot becomes a
debug task (nothing here reboots this machine).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import BIN, ROOT
from tests.local_play import local_hosts, play_results

ROLE = ROOT / "roles" / "node_tuning"
FIRST = "Apply configuration now"  # the kernel-argument decision follows GRUB and the handlers
LAST = "Verify the tuning"
REPORT = "Report a pending reboot for kernel arguments"
REBOOT = "Reboot for kernel arguments"
FACT = "node_tuning_kernel_args_pending"
CMDLINE = "BOOT_IMAGE=/vmlinuz-6.8.0-45-generic root=UUID=0b1c ro quiet splash"
# name: (host vars over the role's defaults, the running command line, pending, missing)
CASES: dict[str, tuple[dict[str, Any], str, bool, list[str]]] = {
    # GRUB put the arguments in another order than the list: still all applied.
    "applied": (
        {"node_tuning_kernel_args": ["iommu=pt", "intel_iommu=on", "nosmt"]},
        f"{CMDLINE} nosmt intel_iommu=on iommu=pt vt.handoff=7",
        False,
        [],
    ),
    "one_missing": (
        {"node_tuning_kernel_args": ["iommu=pt", "intel_iommu=on"]},
        f"{CMDLINE} iommu=pt",
        True,
        ["intel_iommu=on"],
    ),
    "other_value": ({}, f"{CMDLINE} iommu=off", True, ["iommu=pt"]),
    # A prefix of the argument or the key alone is not the argument.
    "key_only": ({}, f"{CMDLINE} iommu iommu=ptx", True, ["iommu=pt"]),
    # With node_tuning_apply_runtime false the running kernel is not this host's: not judged.
    "not_runtime": ({"node_tuning_apply_runtime": False}, CMDLINE, False, ["iommu=pt"]),
}


def _yaml(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def _kernel_tasks(cmdline_var: str) -> list[dict[str, Any]]:
    """main.yml's tasks between the handlers' flush and verify, then verify.yml's kernel-argument
    checks (those that read the command line), reading the file cmdline_var names."""
    main = _yaml("main.yml")
    names = [t.get("name") for t in main]
    tasks = main[names.index(FIRST) + 1 : names.index(LAST)]
    tasks += [t for t in _yaml("verify.yml") if "cmdline" in yaml.safe_dump(t)]
    out = []
    for task in tasks:
        task = {k: v for k, v in task.items() if k != "tags"}
        if "ansible.builtin.reboot" in task:
            del task["ansible.builtin.reboot"]
            task["ansible.builtin.debug"] = {"msg": "would reboot"}
        if "__node_tuning_cmdline_path" in (task.get("vars") or {}):
            task["vars"] = {**task["vars"], "__node_tuning_cmdline_path": f"{{{{ {cmdline_var} }}}}"}
        out.append(task)
    return out


def _hosts(tmp_path: Path, cases: dict[str, tuple[dict[str, Any], str]]) -> dict[str, Any]:
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    hosts = {}
    for name, (given, cmdline) in cases.items():
        (tmp_path / f"{name}.cmdline").write_text(cmdline + "\n")
        hosts[name] = {
            **defaults,
            # What the GRUB step sets: it wrote nothing on this run, and GRUB is there.
            "node_tuning_kernel_args_changed": False,
            "node_tuning_grub_present": True,
            "test_cmdline_file": str(tmp_path / f"{name}.cmdline"),
            **given,
        }
    return {"all": {"hosts": local_hosts(hosts)}}


def _results(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Task name -> host -> result (a name met twice keeps its last result per host)."""
    out: dict[str, dict[str, Any]] = {}
    for task in doc["plays"][0]["tasks"]:
        out.setdefault(task["task"]["name"], {}).update(task["hosts"])
    return out


def _facts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    for task in doc["plays"][0]["tasks"]:
        for host, result in task["hosts"].items():
            facts.setdefault(host, {}).update(result.get("ansible_facts") or {})
    return facts


def _ran(result: dict[str, Any] | None) -> bool:
    return result is not None and not result.get("skipped")


def test_the_pending_reboot_is_read_from_the_running_kernel(tmp_path: Path) -> None:
    inventory = _hosts(tmp_path, {name: (given, cmdline) for name, (given, cmdline, _, _) in CASES.items()})
    doc = play_results(tmp_path, inventory, _kernel_tasks("test_cmdline_file"))
    facts, results = _facts(doc), _results(doc)
    shown = json.dumps(doc)[-3000:]
    assert {h: facts[h].get(FACT) for h in CASES} == {h: c[2] for h, c in CASES.items()}, shown
    assert {h: facts[h].get("node_tuning_kernel_args_missing") for h in CASES} == {
        h: c[3] for h, c in CASES.items()
    }, shown
    report = results.get(REPORT, {})
    for host, (_, _, pending, missing) in CASES.items():
        assert _ran(report.get(host)) == pending, (host, shown)
        if pending:
            assert all(arg in report[host]["msg"] for arg in missing), report[host]["msg"]
            assert "node_tuning_reboot is false" in report[host]["msg"]
        assert not _ran(results.get(REBOOT, {}).get(host)), host  # node_tuning_reboot is false
    # Verify reports what still waits for a reboot, and does not fail for it.
    waiting = results.get("Verify | report kernel arguments that wait for a reboot", {})
    for host, (given, _, _, missing) in CASES.items():
        judged = given.get("node_tuning_apply_runtime", True)
        assert _ran(waiting.get(host)) == bool(judged and missing), (host, shown)
        if judged and missing:
            assert all(arg in waiting[host]["msg"] for arg in missing), waiting[host]["msg"]
    assert all(s["failures"] == 0 and s["changed"] == 0 for s in doc["stats"].values()), doc["stats"]


def test_a_reboot_left_undone_is_done_on_a_later_run(tmp_path: Path) -> None:
    """node_tuning_reboot: GRUB was written by a run that failed before its reboot; this run changes
    nothing in GRUB, the kernel still lacks the argument: reboot. Where the reboot did not bring the
    argument (the file is the same after it), verify fails and names it."""
    reboot = {"node_tuning_reboot": True}
    cases = {
        "left_undone": (reboot, f"{CMDLINE} iommu=off"),
        "applied": (reboot, f"{CMDLINE} iommu=pt"),
        # No update-grub (an image build): a reboot would not bring the arguments.
        "no_grub": ({**reboot, "node_tuning_grub_present": False}, CMDLINE),
        "not_runtime": ({**reboot, "node_tuning_apply_runtime": False}, CMDLINE),
    }
    doc = play_results(tmp_path, _hosts(tmp_path, cases), _kernel_tasks("test_cmdline_file"))
    results, shown = _results(doc), json.dumps(doc)[-3000:]
    rebooted = {h: _ran(r) for h, r in results.get(REBOOT, {}).items()}
    assert rebooted == {"left_undone": True, "applied": False, "no_grub": False, "not_runtime": False}, shown
    reported = {h: _ran(r) for h, r in results.get(REPORT, {}).items()}
    assert reported == {"left_undone": False, "applied": False, "no_grub": True, "not_runtime": False}, shown
    assert "no update-grub" in results[REPORT]["no_grub"]["msg"]
    check = results.get("Verify | kernel arguments are on the running kernel's command line", {})
    assert check["left_undone"].get("failed") and "iommu=pt" in check["left_undone"]["msg"], shown
    assert check["no_grub"].get("failed"), shown
    assert {h: doc["stats"][h]["failures"] for h in cases} == {
        "left_undone": 1,
        "applied": 0,
        "no_grub": 1,
        "not_runtime": 0,
    }, shown


@pytest.mark.parametrize("reboot", [False, True])
def test_check_mode_reads_the_pending_reboot_and_changes_nothing(tmp_path: Path, reboot: bool) -> None:
    cases = {
        "one_missing": ({"node_tuning_reboot": reboot}, f"{CMDLINE} iommu=off"),
        "applied": ({"node_tuning_reboot": reboot}, f"{CMDLINE} iommu=pt"),
    }
    tasks = [t for t in _kernel_tasks("test_cmdline_file") if not t.get("name", "").startswith("Verify")]
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(_hosts(tmp_path, cases)))
    (tmp_path / "play.yml").write_text(
        yaml.safe_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}])
    )
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "--check", "-i", "inventory.yml", "play.yml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"},
    )
    doc = json.loads(done.stdout[done.stdout.index("{") :])
    shown = json.dumps(doc)[-3000:]
    assert {h: _facts(doc)[h].get(FACT) for h in cases} == {"one_missing": True, "applied": False}, shown
    acted = _results(doc).get(REBOOT if reboot else REPORT, {})
    assert {h: _ran(r) for h, r in acted.items()} == {"one_missing": True, "applied": False}, shown
    assert all(s["failures"] == 0 and s["changed"] == 0 for s in doc["stats"].values()), doc["stats"]
    assert all((tmp_path / f"{h}.cmdline").read_text().startswith(CMDLINE) for h in cases)
