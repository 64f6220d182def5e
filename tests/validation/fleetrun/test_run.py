"""The fleet run's own logic without hosts: role variables, time limits, stale results, run-level
problems, inventory listing through Ansible, and the command line's refusals."""

from __future__ import annotations

import dataclasses
import io
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from fleetforge import exitcodes
from fleetforge.cli import main
from fleetforge.install import ansible_root
from tests.conftest import ROOT
from validation.fleetrun.bundle import Bundle
from validation.fleetrun.events import BURNIN_TASK, COLLECTIVES_TASK, HostRun
from validation.fleetrun.hosts import HostListError, hosts_from_listing, list_hosts
from validation.fleetrun.run import (
    FleetRun,
    FleetRunError,
    FleetRunOptions,
    _fresh_results_dir,
    _Progress,
    _rerun_results_dir,
    _run_playbook,
    _run_problem,
    limited_hosts,
    playbook_paths,
    role_vars,
    run_time_limit,
)


def bundle(tmp_path: Path) -> Bundle:
    return Bundle(
        wheel=tmp_path / "fleetforge-0.1.0-py3-none-any.whl",
        wheel_sha="ab" * 32,
        deps_tar=tmp_path / "deps-0123456789abcdef.tar",
        deps_key="0123456789abcdef",
        deps_wheels=("numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl",),
        python="3.11",
        machine="x86_64",
    )


def test_role_vars_carry_the_bundle_the_options_and_let_var_override(tmp_path: Path) -> None:
    spec = tmp_path / "fleet.yaml"
    spec.write_text("name: x\n")
    opts = FleetRunOptions(
        inventory=tmp_path / "inv.yml",
        out_dir=tmp_path / "out",
        sku="cpu",
        level="quick",
        spec=spec,
        timeout_s=600,
        throttle=2,
        collectives=False,
        extravars={"burnin_blas_threads": 1, "burnin_timeout_s": 900},
    )
    results = tmp_path / "out" / "results"
    ev = role_vars(opts, bundle(tmp_path), results)
    assert ev["burnin_deps_key"] == "0123456789abcdef" and ev["burnin_python_version"] == "3.11"
    assert ev["burnin_sku"] == "cpu" and ev["burnin_level"] == "quick"
    assert ev["burnin_spec_src"] == str(spec.resolve())
    assert ev["burnin_fetch_dir"] == str(results)
    assert ev["burnin_throttle"] == 2 and ev["burnin_collectives_enabled"] is False
    assert ev["burnin_blas_threads"] == 1 and ev["burnin_timeout_s"] == 900  # --var wins
    # Every variable set is one the role declares (a typo would be silently ignored by Ansible).
    declared = yaml.safe_load((ROOT / "roles/burnin/meta/argument_specs.yml").read_text())
    assert set(ev) <= set(declared["argument_specs"]["main"]["options"])
    # Each run has its own rendezvous id: a straggler of an earlier run cannot join this one.
    assert role_vars(opts, bundle(tmp_path), results)["burnin_collectives_id"] != ev["burnin_collectives_id"]


def test_the_whole_run_has_a_limit_above_every_per_host_limit(tmp_path: Path) -> None:
    opts = FleetRunOptions(inventory=tmp_path, out_dir=tmp_path, timeout_s=600, collectives_timeout_s=120)
    limit = run_time_limit(opts)
    assert limit > 600 + 60 + 120
    assert (
        run_time_limit(
            FleetRunOptions(inventory=tmp_path, out_dir=tmp_path, timeout_s=600, collectives=False)
        )
        < limit
    )


def test_a_deadline_caps_every_plays_limit(tmp_path: Path) -> None:
    asked: list[int] = []
    ansible_runner = SimpleNamespace(run=lambda **kw: asked.append(kw["timeout"]))

    def play(opts: FleetRunOptions, timeout: int | None = None) -> None:
        _run_playbook(
            ansible_runner, opts, tmp_path / "burnin.yml", tmp_path, tmp_path / "ansible-playbook", {},
            tmp_path, lambda _: None, timeout=timeout,
        )  # fmt: skip

    free = FleetRunOptions(inventory=tmp_path / "inv.yml", out_dir=tmp_path, timeout_s=600)
    play(free)
    play(free, timeout=30)
    soon = dataclasses.replace(free, deadline=time.monotonic() + 100)
    play(soon)
    play(soon, timeout=30)  # a fabric round's own limit, when it is the shorter
    play(dataclasses.replace(free, deadline=time.monotonic() - 5))  # already past: at once
    assert asked[:2] == [run_time_limit(free), 30]
    assert 98 <= asked[2] <= 100 and asked[3] == 30 and asked[4] == 1


def test_every_play_of_a_fleet_run_keeps_its_events(tmp_path: Path) -> None:
    from ansible_runner.utils import cleanup_artifact_dir

    asked: list[dict[str, Any]] = []
    ansible_runner = SimpleNamespace(run=lambda **kw: asked.append(kw))
    opts = FleetRunOptions(inventory=tmp_path / "inv.yml", out_dir=tmp_path)
    _run_playbook(
        ansible_runner, opts, tmp_path / "burnin.yml", tmp_path, tmp_path / "ansible-playbook", {},
        tmp_path, lambda _: None,
    )  # fmt: skip
    # The burn-in play, then 7 fabric rounds (a fleet of 8): ansible-runner's own rotation, as it
    # applies it before each run, with what the fleet run asks, leaves the burn-in's events.
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    for play in range(8):
        cleanup_artifact_dir(str(artifacts), asked[0]["rotate_artifacts"])
        (artifacts / f"play-{play}").mkdir()
        time.sleep(0.01)  # ansible-runner rotates the oldest by modification time
    assert sorted(p.name for p in artifacts.iterdir())[0] == "play-0"


def test_results_of_an_earlier_run_are_moved_aside_never_judged_again(tmp_path: Path) -> None:
    first = _fresh_results_dir(tmp_path)
    (first / "h0.jsonl").write_text("old\n")
    second = _fresh_results_dir(tmp_path)
    assert second == first and list(second.iterdir()) == []
    assert (tmp_path / "results.prev" / "h0.jsonl").read_text() == "old\n"
    _fresh_results_dir(tmp_path)  # an empty folder stays; the .prev of the run before is kept
    assert (tmp_path / "results.prev" / "h0.jsonl").exists()


def test_a_rerun_replaces_only_the_named_hosts_results(tmp_path: Path) -> None:
    results = _fresh_results_dir(tmp_path)
    for host in ("h0", "h1", "h2"):
        (results / f"{host}.jsonl").write_text(f"{host} first run\n")
    again = _rerun_results_dir(tmp_path, ["h1"])
    assert again == results
    assert sorted(p.name for p in results.iterdir()) == ["h0.jsonl", "h2.jsonl"]
    assert (tmp_path / "results.prev" / "h1.jsonl").read_text() == "h1 first run\n"
    assert (results / "h0.jsonl").read_text() == "h0 first run\n"


def test_a_limit_names_inventory_hosts_only() -> None:
    hosts = ["h0", "h1", "h2"]
    assert limited_hosts(hosts, ()) == hosts
    assert limited_hosts(hosts, ("h2", "h0", "h2")) == ["h0", "h2"]  # inventory order, once each
    with pytest.raises(FleetRunError, match="--limit: h9 not in the inventory; allowed: h0, h1, h2"):
        limited_hosts(hosts, ("h1", "h9"))


def _runner(status: str, rc: int, stdout: str = "") -> Any:
    return SimpleNamespace(status=status, rc=rc, stdout=io.StringIO(stdout))


def test_run_level_problems() -> None:
    recap = [{"event": "playbook_on_stats", "event_data": {}}]
    assert _run_problem(_runner("failed", 2), recap, 100) is None  # hosts failed: their own reasons say why
    assert "time limit of 100 s" in (_run_problem(_runner("timeout", 254), [], 100) or "")
    assert _run_problem(_runner("canceled", 254), [], 100) == "the fleet run was canceled"
    broken = _run_problem(_runner("failed", 4, "ERROR! the role 'burnin' was not found"), [], 100)
    assert (
        broken == "ansible-playbook stopped without a recap (exit 4): ERROR! the role 'burnin' was not found"
    )


def test_fleet_run_reasons_combine_host_outcomes_and_a_stopped_run(tmp_path: Path) -> None:
    hosts = {
        "h0": HostRun("h0", burnin_rc=0, fetched=True),
        "h1": HostRun("h1", unreachable="Connection refused"),
        "h2": HostRun("h2"),
    }
    run = FleetRun(
        expected=["h0", "h1", "h2"],
        hosts=hosts,
        results_dir=tmp_path,
        fetched=[tmp_path / "h0.jsonl"],
        status="timeout",
        rc=254,
        problem="the fleet run passed its time limit of 100 s and was stopped",
        bundle=None,
        artifacts=tmp_path,
        timings={"total": 1.0},
    )
    reasons = run.reasons()
    assert sorted(reasons) == ["h1", "h2"]
    assert reasons["h1"][0].message == "unreachable: Connection refused"
    assert reasons["h2"][0].message.startswith("fleet run stopped before this host finished")
    doc = run.as_dict()
    assert json.loads(json.dumps(doc))["hosts"]["h1"]["unreachable"] == "Connection refused"


def test_progress_lines_name_host_and_milestone() -> None:
    lines: list[str] = []
    progress = _Progress(lines.append)

    def ev(kind: str, host: str | None, task: str, **res: Any) -> dict[str, Any]:
        return {"event": kind, "event_data": {"host": host, "task": task, "res": res}}

    assert progress(ev("playbook_on_task_start", None, BURNIN_TASK))
    progress(ev("runner_on_ok", "h0", BURNIN_TASK, rc=1))
    progress(ev("runner_on_ok", "h0", COLLECTIVES_TASK, rc=0))
    progress(ev("runner_on_unreachable", "h1", "Gathering Facts", msg="refused"))
    progress(
        ev(
            "runner_on_failed",
            "h2",
            "Fetch the results to the controller",
            msg="the remote file does not exist",
        )
    )
    progress(ev("runner_on_ok", "h0", "Gathering Facts"))  # quiet
    assert lines == [
        "run the burn-in ...",
        "h0: burn-in exited 1",
        "h0: all-reduce across nodes exited 0",
        "h1: unreachable: refused",
        "h2: task failed: Fetch the results to the controller: the remote file does not exist",
    ]


def test_what_a_node_wrote_reaches_the_terminal_as_text_never_as_control() -> None:
    lines: list[str] = []
    progress = _Progress(lines.append)
    forged = "\x1b]0;owned\x07\x1b[2J\x1b[31mFAKE: all accepted"
    event = {
        "event": "runner_on_failed",
        "event_data": {
            "host": "h1",
            "task": BURNIN_TASK,
            "res": {"msg": "non-zero return code", "rc": 70, "stderr": forged},
        },
    }
    progress(event)
    (line,) = lines
    assert "\x1b" not in line and "\x07" not in line
    assert line.endswith("\\x1b]0;owned\\x07\\x1b[2J\\x1b[31mFAKE: all accepted"), line


def test_a_failed_task_is_written_into_the_results_it_fetched_so_the_files_alone_reject(
    tmp_path: Path,
) -> None:
    from fleet.metrics import FLEET_RUN_CHECK
    from fleet.results import read_results
    from tests.validation.gate.helpers import SKU, fleet, write
    from validation.fleetrun.events import TaskFailure
    from validation.fleetrun.run import write_failure_records
    from validation.gate import decide

    # node2's burn-in exited 70 after writing a complete file, which the `always` fetch brought home.
    results = write(tmp_path / "results", fleet(4))
    hosts = {f"node{i}": HostRun(f"node{i}") for i in range(1, 5)}
    hosts["node2"].failures.append(TaskFailure(BURNIN_TASK, "non-zero return code (rc 70)"))
    hosts["node5"] = HostRun("node5", unreachable="ssh: connect to host refused")  # nothing fetched
    assert write_failure_records(results, hosts) == ["node2"]
    (record,) = [c for c in read_results(results / "node2.jsonl").checks if c.check == FLEET_RUN_CHECK]
    assert record.status == "error" and f"task failed: {BURNIN_TASK}: non-zero return code" in (
        record.reason or ""
    )
    # A later `gate <out>/results`, or a --limit rerun keeping node2, judges the files alone.
    files = [read_results(p) for p in sorted(results.glob("*.jsonl"))]
    verdicts = {v.node: v.accepted for v in decide(files, sku=SKU).nodes}
    assert verdicts == {"node1": True, "node2": False, "node3": True, "node4": True}


def test_playbook_and_roles_come_from_the_checkout() -> None:
    playbook, roles = playbook_paths(ansible_root())
    assert playbook == ROOT / "playbooks/burnin.yml" and (roles / "burnin/tasks/main.yml").is_file()


def test_no_ansible_content_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FleetRunError, match=r"playbooks/burnin\.yml not found"):
        playbook_paths(tmp_path)


def test_hosts_from_a_listing_include_hosts_without_vars() -> None:
    doc = {
        "_meta": {"hostvars": {"node1": {"ansible_host": "10.0.0.1"}}},
        "all": {"children": ["ungrouped", "gpu"]},
        "gpu": {"hosts": ["node10", "node2"]},
        "ungrouped": {"hosts": ["node1"]},
    }
    assert hosts_from_listing(doc) == ["node1", "node2", "node10"]


def test_inventories_are_parsed_by_ansible(tmp_path: Path) -> None:
    ini = tmp_path / "hosts.ini"
    ini.write_text("[gpu]\nnode2 ansible_host=10.0.0.2\nnode10\n[cpu]\nnode1\n")
    assert list_hosts(ini) == ["node1", "node2", "node10"]
    yml = tmp_path / "hosts.yml"
    yml.write_text(yaml.safe_dump({"all": {"hosts": {"a": None}, "children": {"g": {"hosts": {"b": None}}}}}))
    assert list_hosts(yml) == ["a", "b"]
    empty = tmp_path / "empty.yml"
    empty.write_text("all:\n  hosts: {}\n")
    with pytest.raises(HostListError, match="names no host"):
        list_hosts(empty)
    broken = tmp_path / "broken.yml"
    broken.write_text("all: [unclosed\n")
    with pytest.raises(HostListError, match="Ansible cannot read it"):
        list_hosts(broken)


def _cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["fleet", "burnin", *args])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_cli_refuses_bad_options_before_touching_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("node1\n")
    out = tmp_path / "out"
    assert _cli(["-i", str(tmp_path / "nope.ini"), "--out", str(out)], capsys)[0] == exitcodes.NO_INPUT
    code, text = _cli(["-i", str(inv), "--level", "fast", "--out", str(out)], capsys)
    assert code == exitcodes.USAGE and "quick, standard, extended" in text
    code, text = _cli(["-i", str(inv), "--var", "no-equals", "--out", str(out)], capsys)
    assert code == exitcodes.USAGE and "KEY=VALUE" in text
    code, text = _cli(["-i", str(inv), "--sku", "nope", "--out", str(out)], capsys)
    assert code == exitcodes.USAGE and "unknown SKU" in text
    code, text = _cli(["-i", str(inv), "--junit", str(tmp_path / "no" / "x.xml"), "--out", str(out)], capsys)
    assert code == exitcodes.USAGE and "does not exist" in text
    for port in ("80", "70000", "'29400'"):
        code, text = _cli(
            ["-i", str(inv), "--var", f"burnin_collectives_port={port}", "--out", str(out)], capsys
        )
        assert code == exitcodes.USAGE and "burnin_collectives_port" in text and "1024 to 65000" in text
    # A fabric option with the stage off would be ignored: refused instead, naming both.
    code, text = _cli(["-i", str(inv), "--no-fabric", "--fabric-rounds", "2", "--out", str(out)], capsys)
    assert code == exitcodes.USAGE and "--fabric-rounds" in text and "--no-fabric" in text
    assert not out.exists()


@pytest.mark.parametrize("limit", [(), ("--limit", "node1")])
def test_a_bundle_that_cannot_be_built_leaves_the_earlier_results_as_they_were(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limit: tuple[str, ...]
) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("node1\nnode2\n")
    out = tmp_path / "out"
    earlier = {"results/node1.jsonl": "last run\n", "results.prev/node1.jsonl": "the run before\n"}
    for rel, text in earlier.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    empty = tmp_path / "wheelhouse"  # a folder, so the options pass; the bundle build refuses it
    empty.mkdir()
    code, text = _cli(["-i", str(inv), "--out", str(out), "--wheelhouse", str(empty), *limit], capsys)
    assert code != exitcodes.OK and f"--wheelhouse {empty}: 0 fleetforge-*.whl files" in text, text
    assert {str(p.relative_to(out)): p.read_text() for p in out.rglob("*.jsonl")} == earlier


def test_the_collectives_port_a_var_sets_is_every_plays() -> None:
    from fleetforge.run_options import collectives_port

    # The burn-in play reads the extravar; the rerun's all-reduce and the fabric pairs read the option.
    assert collectives_port({"burnin_collectives_port": 31000}) == 31000
    assert collectives_port({}) == 29400


def test_cli_says_an_unreadable_inventory_is_bad_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text("all: [unclosed\n")
    code, text = _cli(["-i", str(inv), "--out", str(tmp_path / "out")], capsys)
    assert code == exitcodes.DATA and "Ansible cannot read it" in text
    assert not (tmp_path / "out" / "results").exists()


def test_help_works_without_ansible_runner_imported() -> None:
    probe = (
        "import sys; from fleetforge.cli import main; code = main(['fleet', 'burnin', '--help']); "
        "sys.exit(1 if 'ansible_runner' in sys.modules or code != 0 else 0)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "--inventory" in done.stdout


def test_phase_seconds_span_the_task_start_to_its_last_result() -> None:
    from validation.fleetrun.run import phase_seconds

    def ev(kind: str, created: str, task: str = BURNIN_TASK) -> dict[str, Any]:
        return {"event": kind, "created": created, "event_data": {"task": task}}

    events = [
        ev("playbook_on_task_start", "2026-11-29T10:00:00+00:00"),
        ev("runner_on_ok", "2026-11-29T10:00:12+00:00"),
        ev("runner_on_failed", "2026-11-29T10:00:30.5+00:00"),
        ev("runner_on_ok", "2026-11-29T10:05:00+00:00", task="Fetch the results to the controller"),
    ]
    assert phase_seconds(events, BURNIN_TASK) == 30.5
    assert phase_seconds(events, COLLECTIVES_TASK) == 0.0


def test_cli_says_an_unusable_out_folder_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv = tmp_path / "inv.ini"
    inv.write_text("node1\n")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, text = _cli(["-i", str(inv), "--out", str(blocker / "out")], capsys)
    assert code == exitcodes.USAGE and "--out" in text and "cannot prepare it" in text


def test_a_play_that_could_not_start_is_the_runs_problem_never_the_hosts(tmp_path: Path) -> None:
    """ansible-runner refusing a fabric round's play (or the deadline passing before it): the rounds
    measured nothing, so the stage is incomplete, no host is guilty, and the run has a problem."""
    from validation.fleetrun.run import _fabric_stage, _Plays, later_problem

    class Refused(Exception):
        pass

    def refuse(**kw: Any) -> None:
        raise Refused("no such playbook")

    ansible_runner = SimpleNamespace(run=refuse, exceptions=SimpleNamespace(AnsibleRunnerException=Refused))
    opts = FleetRunOptions(inventory=tmp_path / "inv.yml", out_dir=tmp_path, sku="cpu")
    said: list[str] = []
    plays = _Plays(
        ansible_runner, opts, tmp_path, tmp_path, tmp_path / "ansible-playbook", {}, tmp_path, said.append
    )
    stage = _fabric_stage(plays, ["h0", "h1", "h2", "h3"], {})
    assert stage.status == "incomplete" and stage.attribution is None
    assert all(r.rule == "missing" for rs in stage.reasons().values() for r in rs)
    assert (
        len(plays.failures) == 3
        and "fabric round 1: ansible-runner could not start the play" in plays.failures[0]
    )
    problem = later_problem(None, plays.failures, stage)
    assert problem is not None and "could not start the play: no such playbook" in problem
    assert "the fabric stage is incomplete" in problem
    # Past the deadline no play starts, and the run says which did not.
    late = _Plays(
        ansible_runner, dataclasses.replace(opts, deadline=time.monotonic() - 1), tmp_path, tmp_path,
        tmp_path / "ansible-playbook", {}, tmp_path, said.append,
    )  # fmt: skip
    assert late.run("fabric-round.yml", {}, ["h0"], 10, "fabric round 2") == []
    assert late.failures == ["fabric round 2: not started, the run was past its deadline"]
    assert later_problem("cut short", late.failures, None) == (
        "cut short; fabric round 2: not started, the run was past its deadline"
    )
    assert later_problem(None, [], None) is None
