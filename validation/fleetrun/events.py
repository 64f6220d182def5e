"""What happened on each host, read from ansible-runner's events and stats, and the gate's reasons.

ansible-runner reports every task result as an event (`runner_on_ok`, `runner_on_failed`,
`runner_on_unreachable`, ...) with `event_data` = {host, task, res, ignore_errors, ...}, and the
play's recap as `stats` ({"ok": {host: n}, "failures": {...}, "dark": {...}, ...}). From them:

- an unreachable host -> `unreachable: <Ansible's message>`;
- a failed task -> `task failed: <task>: <message>`;
- the burn-in's exit code (0 / 1 / 2 are findings the results hold; anything else failed the task)
  and the all-reduce's, for the run summary;
- the tasks that changed something, so a second run can show the installation is idempotent.

The stats cross-check the events: a host Ansible counted unreachable or failed is reported even if
its event was lost. Pure functions: the tests feed them recorded events.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from validation.gate import Reason, natural_key

# Task names in roles/burnin/tasks/*.yml that the summary reads results from (a test keeps them in step).
BURNIN_TASK = "Run the burn-in"
COLLECTIVES_TASK = "Wait for the all-reduce across nodes"
FETCH_TASK = "Fetch the results to the controller"
_MAX_MESSAGE = 400
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class TaskFailure:
    task: str
    message: str


@dataclass
class HostRun:
    host: str
    unreachable: str | None = None
    failures: list[TaskFailure] = field(default_factory=list)
    burnin_rc: int | None = None
    collectives_rc: int | None = None
    changed: list[str] = field(default_factory=list)
    seen: bool = False  # at least one event named this host
    fetched: bool = False  # its results' fetch finished (a file without it may be cut short)

    @property
    def ok(self) -> bool:
        return self.unreachable is None and not self.failures

    def reasons(self) -> list[Reason]:
        """The gate's reasons for this host: unreachable first, then each failed task."""
        out = []
        if self.unreachable is not None:
            out.append(
                Reason(
                    "missing",
                    None,
                    None,
                    self.unreachable,
                    "reachable over SSH",
                    f"unreachable: {self.unreachable}",
                )
            )
        for f in self.failures:
            out.append(
                Reason(
                    "error", None, None, f.message, "the task succeeds", f"task failed: {f.task}: {f.message}"
                )
            )
        return out

    def as_dict(self) -> dict[str, object]:
        return {
            "host": self.host,
            "ok": self.ok,
            "unreachable": self.unreachable,
            "failures": [{"task": f.task, "message": f.message} for f in self.failures],
            "burnin_rc": self.burnin_rc,
            "collectives_rc": self.collectives_rc,
            "changed": list(self.changed),
        }


def host_runs(
    events: Iterable[Mapping[str, Any]],
    stats: Mapping[str, Any] | None,
    expected: Sequence[str],
) -> dict[str, HostRun]:
    """One HostRun per expected host (and per host the events name), in natural name order."""
    runs: dict[str, HostRun] = {h: HostRun(h) for h in expected}

    def run_of(host: str) -> HostRun:
        found = runs.get(host)
        if found is None:
            found = runs[host] = HostRun(host)
        return found

    for event in events:
        data = event.get("event_data") or {}
        host = data.get("host")
        if not isinstance(host, str) or not host:
            continue
        run = run_of(host)
        run.seen = True
        kind = event.get("event")
        task = str(data.get("task") or "(unnamed task)").strip()
        res = result_of(data)
        if kind == "runner_on_unreachable":
            if run.unreachable is None:
                run.unreachable = _unreachable_message(res)
        elif kind == "runner_on_failed":
            if data.get("ignore_errors"):
                continue  # the role never ignores errors; a caller's play might
            run.failures.append(TaskFailure(task, failure_message(task, res)))
            _take_rc(run, task, res)
        elif kind == "runner_on_ok":
            _take_rc(run, task, res)
            run.fetched = run.fetched or task == FETCH_TASK
            if res.get("changed") and task not in run.changed:
                run.changed.append(task)
    _cross_check(runs, stats or {})
    return {h: runs[h] for h in sorted(runs, key=natural_key)}


def result_of(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """The task result of an event's data ({} when absent)."""
    res = data.get("res")
    return res if isinstance(res, Mapping) else {}


def _take_rc(run: HostRun, task: str, res: Mapping[str, Any]) -> None:
    rc = res.get("rc")
    if not isinstance(rc, int):
        return
    if task == BURNIN_TASK:
        run.burnin_rc = rc
    elif task == COLLECTIVES_TASK:
        run.collectives_rc = rc


def _cross_check(runs: dict[str, HostRun], stats: Mapping[str, Any]) -> None:
    for host, count in (stats.get("dark") or {}).items():
        run = runs.setdefault(host, HostRun(host))
        if count and run.unreachable is None:
            run.unreachable = "Ansible counted the host unreachable (its event was not recorded)"
    for host, count in (stats.get("failures") or {}).items():
        run = runs.setdefault(host, HostRun(host))
        if count and not run.failures:
            run.failures.append(
                TaskFailure(
                    "(unknown task)",
                    f"Ansible counted {count} failed task(s); their events were not recorded",
                )
            )


def _unreachable_message(res: Mapping[str, Any]) -> str:
    return clean(str(res.get("msg") or "no message from Ansible"))


def failure_message(task: str, res: Mapping[str, Any]) -> str:
    """One line: Ansible's message, the exit code, and the last words of stderr where they add something."""
    msg = clean(str(res.get("msg") or ""))
    rc = res.get("rc")
    stderr = _last_line(res.get("stderr"))
    if task == BURNIN_TASK and rc == 124:
        return (
            "the burn-in ran past burnin_timeout_s and was stopped (`timeout` exit 124); "
            "the records it had written were fetched"
        )
    if "async task did not complete within the requested time" in msg:
        return clean(f"{msg}: the node did not finish in time and was stopped")
    parts = [msg or "failed"]
    if isinstance(rc, int) and f"rc {rc}" not in msg:
        parts.append(f"(rc {rc})")
    text = " ".join(parts)
    if stderr and stderr not in text:
        text = f"{text}: {stderr}"
    return clean(text)


def _last_line(value: object) -> str:
    if not isinstance(value, str):
        return ""
    lines = [line.strip() for line in value.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def clean(text: str) -> str:
    """Whitespace collapsed, cut to a readable length (a reason is one line in every report)."""
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 3] + "..."


def stopped_reasons(
    runs: Mapping[str, HostRun], problem: str, with_results: Iterable[str]
) -> dict[str, list[Reason]]:
    """For a run that stopped as a whole (time limit, ansible-playbook error): every host with
    neither results nor a reason of its own gets this one, so none is left without an explanation.
    A host whose results came back whole (its fetch finished) is judged on them; one whose file is
    there without a finished fetch may hold half a line, or lack its last records: rejected too."""
    fetched = set(with_results)
    out: dict[str, list[Reason]] = {}
    for host, run in runs.items():
        if not run.ok or (host in fetched and run.fetched):
            continue
        what = (
            "before this host finished" if host not in fetched else "while this host's results were fetched"
        )
        out[host] = [
            Reason(
                "error",
                None,
                None,
                problem,
                "the fleet run completes",
                f"fleet run stopped {what}: {problem}",
            )
        ]
    return out
