"""ansible-runner events and stats -> per-host outcomes -> the gate's reasons (no hosts needed).

The events are shaped as ansible-runner writes them (artifacts/<ident>/job_events/*.json), cut
down to the fields the summary reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.conftest import ROOT
from validation.fleetrun.events import (
    BURNIN_TASK,
    COLLECTIVES_TASK,
    FETCH_TASK,
    HostRun,
    TaskFailure,
    clean,
    failure_message,
    host_runs,
    stopped_reasons,
)


def event(kind: str, host: str, task: str, **res: Any) -> dict[str, Any]:
    return {
        "event": kind,
        "event_data": {"host": host, "task": task, "role": "burnin", "res": res, "ignore_errors": None},
    }


def test_a_clean_run_has_exit_codes_changes_and_no_reasons() -> None:
    events = [
        {"event": "playbook_on_start", "event_data": {}},
        event("runner_on_ok", "h0", "Gathering Facts"),
        event("runner_on_ok", "h0", "Copy the dependency wheels", changed=True),
        event("runner_on_ok", "h0", BURNIN_TASK, rc=1, changed=True),
        event("runner_on_ok", "h0", COLLECTIVES_TASK, rc=0, changed=False),
        event("runner_on_ok", "h1", BURNIN_TASK, rc=0, changed=True),
    ]
    runs = host_runs(events, {"ok": {"h0": 4, "h1": 1}}, ["h0", "h1"])
    assert list(runs) == ["h0", "h1"]
    h0 = runs["h0"]
    assert h0.ok and h0.seen and h0.reasons() == []
    # Exit 1 is a finding the results hold, not a failure of the run.
    assert (h0.burnin_rc, h0.collectives_rc) == (1, 0)
    assert h0.changed == ["Copy the dependency wheels", BURNIN_TASK]


def test_unreachable_host_gets_ansibles_message_as_its_reason() -> None:
    msg = "Failed to connect to the host via ssh: ssh: connect to host 10.0.0.7 port 22: Connection refused"
    events = [
        event("runner_on_ok", "h0", "Gathering Facts"),
        event("runner_on_unreachable", "h3", "Gathering Facts", msg=msg, unreachable=True, changed=False),
        # A later unreachable event does not overwrite the first, more telling, message.
        event("runner_on_unreachable", "h3", FETCH_TASK, msg="timed out", unreachable=True),
    ]
    runs = host_runs(events, {"dark": {"h3": 1}}, ["h0", "h3"])
    assert not runs["h3"].ok
    (reason,) = runs["h3"].reasons()
    assert reason.rule == "missing"
    assert reason.message == f"unreachable: {msg}"
    assert reason.measured == msg and reason.expected == "reachable over SSH"
    assert runs["h0"].ok


def test_failed_task_reason_names_the_task_the_message_the_exit_code_and_stderr() -> None:
    res = {
        "msg": "non-zero return code",
        "rc": 127,
        "stderr": "some noise\ntimeout: failed to run command '/opt/fleetforge/venv/bin/fleetforge': No such file or directory\n",
    }
    runs = host_runs([event("runner_on_failed", "h2", BURNIN_TASK, **res)], None, ["h2"])
    run = runs["h2"]
    assert run.burnin_rc == 127
    (reason,) = run.reasons()
    assert reason.rule == "error"
    assert reason.message == (
        f"task failed: {BURNIN_TASK}: non-zero return code (rc 127): timeout: failed to run command "
        "'/opt/fleetforge/venv/bin/fleetforge': No such file or directory"
    )


def test_a_stopped_burnin_and_an_async_limit_read_as_timeouts() -> None:
    assert "ran past burnin_timeout_s" in failure_message(
        BURNIN_TASK, {"rc": 124, "msg": "non-zero return code"}
    )
    late = failure_message(
        COLLECTIVES_TASK, {"msg": "async task did not complete within the requested time - 390s"}
    )
    assert late.startswith("async task did not complete within the requested time - 390s")
    assert "did not finish in time" in late


def test_assert_failures_keep_their_message_and_several_failures_all_count() -> None:
    events = [
        event(
            "runner_on_failed",
            "h1",
            "Check the wheels fit this node's Python and CPU",
            msg="built for Python 3.11",
        ),
        event("runner_on_failed", "h1", FETCH_TASK, msg="the remote file does not exist"),
    ]
    reasons = host_runs(events, None, ["h1"])["h1"].reasons()
    assert [r.message for r in reasons] == [
        "task failed: Check the wheels fit this node's Python and CPU: built for Python 3.11",
        f"task failed: {FETCH_TASK}: the remote file does not exist",
    ]


def test_ignored_failures_do_not_count() -> None:
    ignored = event("runner_on_failed", "h0", "A caller's optional task", msg="nope")
    ignored["event_data"]["ignore_errors"] = True
    assert host_runs([ignored], None, ["h0"])["h0"].ok


def test_stats_catch_what_the_events_lost() -> None:
    runs = host_runs([], {"dark": {"h1": 1}, "failures": {"h2": 2}, "ok": {"h0": 5}}, ["h0", "h1", "h2"])
    assert runs["h0"].ok
    assert runs["h1"].unreachable is not None and "unreachable" in runs["h1"].reasons()[0].message
    assert runs["h2"].failures == [
        TaskFailure("(unknown task)", "Ansible counted 2 failed task(s); their events were not recorded")
    ]


def test_hosts_the_events_name_beyond_the_inventory_are_kept_and_sorted_naturally() -> None:
    runs = host_runs(
        [event("runner_on_ok", "node10", "x"), event("runner_on_ok", "node2", "x")], None, ["node1"]
    )
    assert list(runs) == ["node1", "node2", "node10"]
    assert not runs["node1"].seen  # expected, never heard from: the gate rejects it as missing


def test_stopped_run_explains_only_hosts_with_neither_results_nor_a_reason() -> None:
    runs = {
        "h0": HostRun("h0", fetched=True),  # results came back: judged on them
        "h1": HostRun("h1"),  # nothing came back, nothing said: gets the run's reason
        "h2": HostRun("h2", unreachable="refused"),  # has its own reason
        "h3": HostRun("h3"),  # a file, but its fetch never finished: maybe half a line
    }
    out = stopped_reasons(runs, "the fleet run passed its time limit of 100 s and was stopped", ["h0", "h3"])
    assert list(out) == ["h1", "h3"]
    assert out["h1"][0].message.startswith(
        "fleet run stopped before this host finished: the fleet run passed"
    )
    assert out["h3"][0].message.startswith("fleet run stopped while this host's results were fetched")


def test_a_finished_fetch_is_read_from_its_event() -> None:
    runs = host_runs(
        [
            event("runner_on_ok", "h0", FETCH_TASK, changed=True),
            event("runner_on_ok", "h1", BURNIN_TASK, rc=0),
        ],
        {},
        ["h0", "h1"],
    )
    assert runs["h0"].fetched and not runs["h1"].fetched


def test_messages_are_one_bounded_line() -> None:
    text = clean("a\n  b\t c" + "x" * 1000)
    assert text.startswith("a b c") and len(text) == 400 and text.endswith("...")


def _task_names() -> set[str]:
    names: set[str] = set()

    def walk(items: list[dict[str, Any]] | None) -> None:
        for item in items or []:
            if "name" in item:
                names.add(item["name"])
            for key in ("block", "rescue", "always"):
                walk(item.get(key))

    for path in sorted(Path(ROOT / "roles/burnin/tasks").glob("*.yml")):
        walk(yaml.safe_load(path.read_text()))
    return names


def test_the_task_names_the_summary_reads_exist_in_the_role() -> None:
    assert {BURNIN_TASK, COLLECTIVES_TASK, FETCH_TASK} <= _task_names()
