"""The all-reduce across the whole fleet when a run burns in only some hosts again (`--limit`).

The burn-in play of such a run reaches only the hosts it burns in, so the role's all-reduce across
nodes spans those alone: one host records a skip ("nothing to measure across"), two or more a
figure for a part of the fleet. Either, as the host's latest record, leaves it without the figure
the hosts kept from the earlier run hold, and the gate rejects it as missing: a replacement could
never join a fleet with PyTorch. So after the play the controller measures that all-reduce again
over every host ready for it, kept and rerun together, through one play of the fabric round with
all of them in a single group (roles/burnin/tasks/fabric_round.yml), and appends to each host's
results the record its node wrote, as the latest of the check. A host the all-reduce did not
answer for (unreachable, a failed task, a record naming another node) gets an error record
instead: it is rejected with the reason, never judged on its earlier figure.

When no member passed, the all-reduce failed as a whole (one host hanging it times every member
out) and names no host: the kept hosts keep their earlier records and only the rerun hosts, whose
own burn-in is what is new, get the errors. Written into a kept host's file, such an error would
reject it and, no longer ending with a measured all-reduce, keep it out of every later `--limit`
all-reduce (`_joined_before`) until a full rerun.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleet.metrics import MULTINODE_CHECK
from fleet.results import (
    CheckRecord,
    ResultFile,
    ResultsWriter,
    controller_record,
    read_results,
    stamp_after_latest,
)
from validation.fleetrun.fabric import read_round
from validation.gate import natural_key

# One play over the given hosts with these role variables; its ansible-runner events.
PlayGroup = Callable[[Mapping[str, object], Sequence[str]], Sequence[Mapping[str, Any]]]


@dataclass(frozen=True)
class FleetCollective:
    """The whole fleet's all-reduce on a rerun: who took part and what each host's results got."""

    hosts: tuple[str, ...]
    status: str  # measured | skipped
    reason: str | None = None
    written: tuple[str, ...] = ()  # hosts that got their node's record
    failed: dict[str, str] = field(default_factory=dict)  # host -> why it got an error record instead
    # kept host -> the error it was spared: no member passed, so its earlier record stands
    kept: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "hosts": list(self.hosts),
            "status": self.status,
            "reason": self.reason,
            "written": list(self.written),
            "failed": dict(self.failed),
            "kept": dict(self.kept),
        }


def group_vars(hosts: Sequence[str], *, port: int, rdzv_id: str) -> dict[str, dict[str, object]]:
    """`burnin_fabric_round` for one group of every host: all in one rendezvous on the first."""
    spec: dict[str, object] = {
        "members": ",".join(hosts),
        "endpoint_host": hosts[0],
        "port": port,
        "rdzv_id": rdzv_id,
    }
    return {h: dict(spec) for h in hosts}


def measure_fleet_collective(
    play: PlayGroup,
    ready: Sequence[str],
    rerun: Sequence[str],
    results_dir: Path,
    *,
    port: int,
    rdzv_id: str,
) -> FleetCollective:
    """Run the all-reduce over `ready` (kept and rerun hosts) when a rerun host is among them, and
    append every host's record to its results. A kept host joins only if it took part in the
    earlier run's all-reduce (a host without PyTorch would leave the others waiting)."""
    joining = [h for h in ready if h in rerun or _joined_before(results_dir / f"{h}.jsonl")]
    hosts = tuple(sorted(joining, key=natural_key))
    if not any(h in rerun for h in hosts):
        return FleetCollective(hosts, "skipped", "no host burned in again is ready for the all-reduce")
    if len(hosts) < 2:
        return FleetCollective(hosts, "skipped", "fewer than 2 hosts ready: nothing to measure across")
    seen = read_round(play({"burnin_fabric_round": group_vars(hosts, port=port, rdzv_id=rdzv_id)}, hosts))
    outcomes: dict[str, tuple[Path, ResultFile, CheckRecord | None, str | None]] = {}
    for host in hosts:
        path = results_dir / f"{host}.jsonl"
        found = read_results(path) if path.is_file() else ResultFile(path)
        record, why = _outcome(host, found, seen.records.get(host), seen.problems.get(host))
        outcomes[host] = (path, found, record, why)
    # Nobody passed: the all-reduce failed as a whole and names no host (see the module docstring).
    as_a_whole = not any(rec is not None and rec.status == "pass" for _, _, rec, _ in outcomes.values())
    written: list[str] = []
    failed: dict[str, str] = {}
    kept: dict[str, str] = {}
    for host, (path, found, record, why) in outcomes.items():
        if not found.runs:
            failed[host] = "its results file holds no run to add the all-reduce to"
            continue
        error = why if record is None else _error_of(record)
        if as_a_whole and error is not None and host not in rerun:
            kept[host] = f"the all-reduce across the fleet after the rerun: {error}"[:500]
            continue
        if why is not None:
            reason = f"the all-reduce across the fleet after the rerun: {why}"[:500]
            record = controller_record(
                found,
                check=MULTINODE_CHECK,
                status="error",
                reason=reason,
                error=reason,
                duration_s=0.0,
            )
            failed[host] = reason
        else:
            assert record is not None
            run = found.runs[-1]
            # The node's file may hold a later run than the one judged here (it was burned in since,
            # into another --out); the figure is this host's now, so it joins the run judged.
            joined = {
                "run_id": run.run_id,
                "sku": run.sku,
                "level": run.level,
                "started": stamp_after_latest(found, record.started),
            }
            record = record.model_copy(update=joined)
            written.append(host)
        with ResultsWriter(path) as writer:
            writer.append(record)
    return FleetCollective(hosts, "measured", None, tuple(written), failed, kept)


def _outcome(
    host: str, found: ResultFile, record: CheckRecord | None, why: str | None
) -> tuple[CheckRecord | None, str | None]:
    """The node's record of the all-reduce, or why the host gets an error record instead."""
    if why is None and record is None:
        why = f"{host}: no record of the all-reduce came back"
    elif why is None and record is not None and found.runs and record.node != found.runs[-1].node:
        why = f"{host}: the all-reduce's record names node {record.node}, not {found.runs[-1].node}"
    return (None, why) if why is not None else (record, None)


def _error_of(record: CheckRecord) -> str | None:
    """What the node's record says it could not measure; None unless it is an error."""
    return (record.error or record.reason or "error") if record.status == "error" else None


def _joined_before(path: Path) -> bool:
    """Whether the host's results end with a measured all-reduce across nodes."""
    if not path.is_file():
        return False
    records = [c for c in read_results(path).checks if c.check == MULTINODE_CHECK]
    return bool(records) and records[-1].status == "pass"
