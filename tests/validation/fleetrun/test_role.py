"""The burnin role's contract without hosts: documented defaults, FQCN modules, no ignored errors,
a syntax-clean playbook, and the fail-closed shape the fleet run relies on."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleet.results import ResultsWriter
from tests.conftest import BIN, ROOT
from tests.validation.fleetrun.helpers import RUN, flat_tasks

ROLE = ROOT / "roles" / "burnin"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _tasks() -> list[dict[str, Any]]:
    return [t for path in sorted((ROLE / "tasks").glob("*.yml")) for t in flat_tasks(_yaml(path))]


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
    pair_steps = [t for t in flat_tasks(rounds) if "environment" in t]
    assert [t["name"] for t in pair_steps] == [
        "Start the all-reduce of the pair",
        "Look for ib_write_bw and the fabric's RDMA devices",
        "Start ib_write_bw of the pair",
    ]
    for task in pair_steps:
        assert _render(task["environment"], variables) == {**fabric, **operator}, task["name"]


def _fabric_play(tmp_path: Path, inventory: Path, extravars: dict[str, Any]) -> Any:
    """playbooks/fabric-round.yml through ansible-runner, as the fleet run starts it."""
    import ansible_runner

    from validation.fleetrun.run import FABRIC_PLAYBOOK, ansible_env

    return ansible_runner.run(
        private_data_dir=str(tmp_path / "ansible"),
        project_dir=str(ROOT / "playbooks"),
        playbook=FABRIC_PLAYBOOK,
        inventory=str(inventory),
        roles_path=[str(ROOT / "roles")],
        extravars=extravars,
        envvars={**ansible_env(), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"},
        quiet=True,
    )


def test_a_pair_without_its_all_reduce_still_runs_its_ib_write_bw_step(tmp_path: Path) -> None:
    """playbooks/fabric-round.yml for real (ansible-runner, as the fleet run starts it) on two hosts
    that are this machine: a pair the controller marks `allreduce` false starts no all-reduce, and
    still probes and runs its ib_write_bw step, whose record the controller reads back. The HCA
    named for the pairs is on no machine, so both sides record a skip, with or without perftest."""

    from fleet.results import RunRecord
    from tests.local_play import local_hosts
    from validation.fabric.model import Pair
    from validation.fleetrun.fabric import START_TASK, ib_pair_result, read_round

    hosts = {}
    for name in ("h0", "h1"):
        results = tmp_path / name
        with ResultsWriter(results / f"{name}.jsonl") as writer:
            writer.append(RunRecord.model_validate({**RUN, "node": name, "checks": []}))
        hosts[name] = {"burnin_results_dir": str(results), "ansible_become": False}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": local_hosts(hosts)}}))
    (tmp_path / "ansible").mkdir()
    pair = {
        "members": "h0,h1",
        "endpoint_host": "h0",
        "port": 29999,
        "rdzv_id": "t-r0-p0",
        "allreduce": False,
    }
    runner = _fabric_play(
        tmp_path,
        inventory,
        {
            "burnin_venv": sys.prefix,
            "burnin_fabric_round": {"h0": pair, "h1": pair},
            "burnin_fabric_ib_timeout_s": 30,
            "burnin_fabric_ib_devices": "fleetforge-no-such-hca",
        },
    )
    events = list(runner.events)
    assert runner.status == "successful", runner.stdout.read()[-3000:]
    ran = {(e["event"], e["event_data"].get("task")) for e in events if e["event"].startswith("runner_on_")}
    assert ("runner_on_skipped", START_TASK) in ran and ("runner_on_ok", START_TASK) not in ran
    seen = read_round(events)
    assert seen.records == {} and seen.problems == {} and set(seen.ib_records) == {"h0", "h1"}
    assert all(r.status == "skip" for r in seen.ib_records.values())
    result, skipped = ib_pair_result(Pair.of("h0", "h1"), seen, 0, allreduce=False)
    assert result is None and skipped


def test_a_node_that_renames_itself_in_returned_facts_writes_no_file_on_the_controller(
    tmp_path: Path,
) -> None:
    """Any module's result is the node's to write, and facts it returns outrank role defaults and
    inventory vars: a compromised node setting burnin_node must not choose the controller's path."""
    from fleet.results import RunRecord
    from tests.local_play import local_hosts, run_play

    library = tmp_path / "library"
    library.mkdir()
    node = tmp_path / "node" / "a" / "b"
    fetched = tmp_path / "controller" / "results"
    fetched.mkdir(parents=True)
    (fetched / "h0.jsonl").write_text("h0's own results\n")
    hosts = local_hosts({"h1": {"burnin_results_dir": str(node), "burnin_fetch_dir": str(fetched)}})
    for name in ("../../escaped", "h0"):  # out of the results folder; another host's file
        # Stands in for any module result: the node's own Python prints it.
        facts = {"changed": False, "ansible_facts": {"burnin_node": name}}
        (library / "node_says.py").write_text(
            f"#!/usr/bin/python3\nimport json\nprint(json.dumps({facts!r}))\n"
        )
        with ResultsWriter(node / f"{name}.jsonl") as writer:  # what the node would send
            writer.append(RunRecord.model_validate({**RUN, "node": "h0", "checks": []}))
        done = run_play(
            tmp_path,
            {"all": {"hosts": hosts}},
            [
                {"name": "Any task", "node_says": {}},
                {"ansible.builtin.include_role": {"name": "burnin", "tasks_from": "fetch.yml"}},
            ],
            env={"ANSIBLE_LIBRARY": str(library), "ANSIBLE_ROLES_PATH": str(ROOT / "roles")},
        )
        assert done.returncode == 2, done.stdout[-2000:]  # the host fails: the gate rejects it
        assert "not this host's inventory name" in done.stdout, done.stdout[-2000:]
        on_controller = [p for p in tmp_path.rglob("*.jsonl") if tmp_path / "node" not in p.parents]
        landed = sorted(str(p.relative_to(tmp_path)) for p in on_controller)
        assert landed == ["controller/results/h0.jsonl"], landed
        assert (fetched / "h0.jsonl").read_text() == "h0's own results\n"


def _one_round(tmp_path: Path, venvs: dict[str, str], stale: str) -> list[dict[str, Any]]:
    """playbooks/fabric-round.yml for real on hosts that are this machine, all-reduce pairs of the
    hosts in order (h0-h1, h2-h3), each host with its own `burnin_venv`; every node's results end
    with `stale`, an older all-reduce record of its own. The play's events."""

    from fleet.results import RunRecord
    from tests.local_play import local_hosts

    hosts: dict[str, dict[str, Any]] = {}
    for name, venv in venvs.items():
        results = tmp_path / name
        with ResultsWriter(results / f"{name}.jsonl") as writer:
            writer.append(RunRecord.model_validate({**RUN, "node": name, "checks": []}))
        with (results / f"{name}.jsonl").open("a") as fh:
            fh.write(stale.replace('"h0"', f'"{name}"') + "\n")
        hosts[name] = {"burnin_results_dir": str(results), "ansible_become": False, "burnin_venv": venv}
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": local_hosts(hosts)}}))
    (tmp_path / "ansible").mkdir()
    names = list(venvs)
    mapping: dict[str, dict[str, object]] = {}
    for i in range(0, len(names), 2):
        a, b = names[i], names[i + 1]
        pair = {"members": f"{a},{b}", "endpoint_host": a, "port": 29990 + i, "rdzv_id": f"t-r0-p{i}"}
        mapping[a] = mapping[b] = {**pair, "allreduce": True}
    runner = _fabric_play(
        tmp_path,
        inventory,
        {"burnin_fabric_round": mapping, "burnin_fabric_ib": False, "burnin_fabric_timeout_s": 30},
    )
    return list(runner.events)


def test_the_pairs_record_is_only_what_its_launcher_appended_never_an_older_line(tmp_path: Path) -> None:
    """A launcher that exits 0 without a record (it should never, but a stand-in python here does):
    the read gives nothing, where `tail -n 1` gave the node's older whole-fleet all-reduce, read
    back as this pair's figure."""
    from tests.validation.fleetrun.helpers import record
    from validation.fleetrun.fabric import read_round

    fake = tmp_path / "venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    venv = str(tmp_path / "venv")
    events = _one_round(tmp_path, {"h0": venv, "h1": venv}, record("h0", busbw=9.87))
    seen = read_round(events)
    assert seen.records == {}, seen.records
    assert set(seen.problems) == {"h0", "h1"}
    assert all("no record of the pair's all-reduce was written" in p for p in seen.problems.values())


def test_a_launcher_that_fails_itself_leaves_its_pair_not_measured(tmp_path: Path) -> None:
    """The real launcher, failing before it starts any rank (a file stands where its log folder
    goes): exit 70, which the play does not take as "wrong sum, record written", so nothing is
    read back, least of all the node's older all-reduce record."""
    import importlib.util

    from tests.validation.fleetrun.helpers import record
    from validation.fleetrun.fabric import WAIT_TASK, read_round

    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: the launcher would record a skip before it fails")
    for name in ("h0", "h1"):
        (tmp_path / name / "fabric").mkdir(parents=True)
        (tmp_path / name / "fabric" / f"{name}.raw").write_text("")
    events = _one_round(tmp_path, {"h0": sys.prefix, "h1": sys.prefix}, record("h0", busbw=9.87))
    failed = {
        e["event_data"]["host"]: e["event_data"]["res"].get("rc")
        for e in events
        if e["event"] == "runner_on_failed" and e["event_data"].get("task") == WAIT_TASK
    }
    assert failed == {"h0": 70, "h1": 70}, failed
    seen = read_round(events)
    assert seen.records == {}
    assert all("the all-reduce launcher failed (exit 70)" in p for p in seen.problems.values())
