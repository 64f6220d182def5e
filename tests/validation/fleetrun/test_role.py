"""The burnin role's contract without hosts: documented defaults, FQCN modules, no ignored errors,
a syntax-clean playbook, and the fail-closed shape the fleet run relies on."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import BIN, ROOT

ROLE = ROOT / "roles" / "burnin"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []

    def walk(items: list[dict[str, Any]] | None) -> None:
        for item in items or []:
            found.append(item)
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    for path in sorted((ROLE / "tasks").glob("*.yml")):
        walk(_yaml(path))
    return found


def _task(name: str) -> dict[str, Any]:
    return next(t for t in _tasks() if t.get("name") == name)


def test_every_variable_is_prefixed_documented_and_defaulted_alike() -> None:
    options = _yaml(ROLE / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = _yaml(ROLE / "defaults/main.yml")
    assert all(name.startswith("burnin_") for name in options)
    assert set(defaults) == set(options)
    for name, value in defaults.items():
        assert options[name]["default"] == value, name
        assert options[name]["description"], name
    text = (ROLE / "defaults/main.yml").read_text()
    for name in defaults:  # each default has a comment above it (or its group's)
        before = text.split(f"\n{name}:")[0].rstrip().splitlines()[-1]
        assert before.startswith("#") or before.split(":")[0].startswith("burnin_"), name


def test_tasks_use_fqcn_never_ignore_errors_and_commands_say_when_they_change() -> None:
    for task in _tasks():
        assert "ignore_errors" not in task, task.get("name")
        for key in (k for k in task if "." in k):
            assert key.count(".") >= 2, (task.get("name"), key)
        if "ansible.builtin.command" in task:
            assert "changed_when" in task, task.get("name")


def test_burnin_exit_codes_1_and_2_are_findings_and_a_hung_run_is_bounded() -> None:
    run = _task("Run the burn-in")
    assert run["failed_when"] == "burnin_run.rc is not defined or burnin_run.rc not in [0, 1, 2]"
    assert "async" in run and "poll" in run and "throttle" in run
    assert "timeout" in (ROLE / "tasks/run.yml").read_text()  # stopped on the node before the async limit


def test_results_are_fetched_in_always_and_measuring_is_skipped_in_check_mode() -> None:
    main = _yaml(ROLE / "tasks/main.yml")
    block = next(t for t in main if "block" in t)
    assert block["when"] == "not ansible_check_mode"
    assert [t["ansible.builtin.import_tasks"] for t in block["always"]] == ["fetch.yml"]
    fetch = _task("Fetch the results to the controller")["ansible.builtin.fetch"]
    assert fetch["fail_on_missing"] is True and fetch["flat"] is True


def test_packages_are_installed_per_os_family() -> None:
    assert "ansible.builtin.apt" in (ROLE / "tasks/Debian.yml").read_text()
    assert "ansible.builtin.dnf" in (ROLE / "tasks/RedHat.yml").read_text()
    assert "{{ ansible_facts['os_family'] }}.yml" in (ROLE / "tasks/install.yml").read_text()


def test_playbook_syntax() -> None:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", "-i", "localhost,", "playbooks/burnin.yml"],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_ROLES_PATH": str(ROOT / "roles"), "PATH": f"{BIN}:{os.environ['PATH']}"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def _render(expression: str, variables: dict[str, Any]) -> Any:
    """A role expression as Ansible templates it (the real Templar)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expression))


def test_the_operators_environment_is_laid_over_the_fabrics_never_replacing_it() -> None:
    fabric = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "NCCL_NET_GDR_LEVEL": "2"}
    operator = {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_NET_GDR_LEVEL": "5"}
    variables = {
        "burnin_fabric_environment": fabric,
        "burnin_environment": operator,
        "burnin_blas_threads": 1,
    }
    burn_in = _task("Put the burn-in command and its environment together")["ansible.builtin.set_fact"]
    env = _render(burn_in["burnin_env"], variables)
    assert env["FI_PROVIDER"] == "efa" and env["NCCL_SOCKET_IFNAME"] == "eth1"
    assert env["NCCL_NET_GDR_LEVEL"] == "5" and env["OPENBLAS_NUM_THREADS"] == "1"
    # The fabric rounds' all-reduce and ib_write_bw run with the same mapping.
    rounds = _yaml(ROLE / "tasks/fabric_round.yml")
    pair_steps = [t for block in rounds for t in block.get("block", [block]) if "environment" in t]
    assert [t["name"] for t in pair_steps] == [
        "Start the all-reduce of the pair",
        "Look for ib_write_bw and the fabric's RDMA devices",
        "Start ib_write_bw of the pair",
    ]
    for task in pair_steps:
        assert _render(task["environment"], variables) == {**fabric, **operator}, task["name"]
