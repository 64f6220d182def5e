"""Per-node rules on the records themselves: fail closed on anything not measured.

A check the run expected without a record is `missing`; `error` (crash, timeout, could not
measure) rejects; `fail` rejects with the check's own reason; `skip` with a reason is accepted.
A node with no run record has no list of expected checks, so nothing it holds can be trusted to
be complete: `unreadable`. Lines that did not parse are reported for their file; they reject a
node only when its run is incomplete (they may have held what is missing). A complete run that a
resume wrote past a damaged line is judged on what it holds, and the line stays in the notes,
unless the problem refuses the whole file (a newer schema, an entry that is no regular file).

Records claiming another node than the file's are refused (`unreadable`). A run narrowed by
`--only` (partial) lists only the checks it ran, so it cannot pass unless the operator names the
checks the gate expects (`--expect-checks`). When the latest run, or a check's latest record,
cannot be told apart (equal or unreadable start times), the worst of the candidates counts.

The whole-fleet all-reduce (MULTINODE_CHECK) times out on every member when one host hangs it, so
its error names no host: on a host whose own pairs the fleet run measured after it and passed
(FABRIC_CHECK, with FABRIC_METRIC), that error is a note (collective_set_aside) and the host is
judged on its pairs, as measures.py does with a whole-fleet figure below its floor. Without such
pair evidence the error rejects, as any other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from fleet.metrics import FABRIC_CHECK, FABRIC_METRIC, MULTINODE_CHECK, Metric
from fleet.results import LEVELS, CheckRecord, parsed_instant
from validation.gate.collect import NodeEvidence, RunEvidence
from validation.gate.model import CheckVerdict, GateSettings, NodeVerdict, Reason

# Which of two indistinguishable records counts: the worse one (fail closed).
_SEVERITY = {"pass": 0, "skip": 1, "fail": 2, "error": 3}


def judge_records(ev: NodeEvidence, settings: GateSettings, metrics: Mapping[str, Metric]) -> NodeVerdict:
    candidates = ev.latest_candidates()
    if len(candidates) <= 1:
        verdict = _judge_run(ev, candidates[0] if candidates else None, settings, metrics)
    else:
        judged = [_judge_run(ev, run, settings, metrics) for run in candidates]
        verdict = max(judged, key=_badness)
        # The floors and the fleet's statistics come later: whichever run is kept, each of its
        # figures is the worse the candidates measured, so a tie never picks the faster run.
        for other in judged:
            _worse_figures(verdict.metrics, other.metrics, metrics)
    _file_rules(verdict, ev)
    return verdict


def _badness(v: NodeVerdict) -> tuple[bool, bool, int, str]:
    return (v.incomplete, not v.accepted, len(v.reasons), v.run_id or "")


def _file_rules(verdict: NodeVerdict, ev: NodeEvidence) -> None:
    """Problems of the files themselves: they reject the node however complete its run looks."""
    listed = verdict.incomplete  # _judge_run listed every bad line of an incomplete run already
    for path, claimed, count in ev.foreign:
        verdict.reasons.append(
            Reason(
                "unreadable",
                None,
                None,
                claimed,
                ev.node,
                f"{path}: {count} record(s) claim node {claimed!r}, but this file is node {ev.node!r}'s "
                f"(<node>.jsonl); refused",
            )
        )
    if verdict.run_id is None:
        return  # _no_run_record already listed every bad line
    for bad in ev.bad_lines:
        if bad.refuses_file and not listed:
            verdict.reasons.append(
                Reason("unreadable", None, None, str(bad), "a readable file", f"unreadable: {bad}")
            )


def _judge_run(
    ev: NodeEvidence, run: RunEvidence | None, settings: GateSettings, metrics: Mapping[str, Metric]
) -> NodeVerdict:
    verdict = NodeVerdict(ev.node, files=tuple(sorted(ev.files)))
    if run is None or not run.runs:
        _no_run_record(verdict, ev, run)
        return verdict
    first = run.runs[0]
    verdict.run_id = run.run_id
    verdict.started = run.started_text()
    verdict.level = first.level
    verdict.files = tuple(sorted(run.files))
    latest = _latest_per_check(run, metrics)
    expected = run.expected_checks()
    if settings.expect_checks is not None:
        expected += [c for c in settings.expect_checks if c not in expected]
    elif run.partial:
        verdict.reasons.append(
            Reason(
                "missing",
                None,
                None,
                "partial run: " + ", ".join(expected),
                "a full run, or --expect-checks",
                f"run {run.run_id} was narrowed by --only to {', '.join(expected) or 'no checks'}; "
                f"a partial run passes only when --expect-checks names the checks the gate expects",
            )
        )
    # Outcomes in the run's own order, then checks the run recorded without listing them.
    on_pairs = _judged_on_pairs(latest)
    for name in [*expected, *(c for c in latest if c not in expected)]:
        rec = latest.get(name)
        if rec is not None:
            _judge_check(verdict, rec, set_aside=on_pairs and name == MULTINODE_CHECK)
            continue
        verdict.checks[name] = CheckVerdict(name, "missing", "no record of this check", 0.0)
        verdict.reasons.append(
            Reason(
                "missing",
                name,
                None,
                None,
                "a record",
                f"{name}: the run expected this check and holds no record of it",
            )
        )
    _take_metrics(verdict, latest, metrics)
    _take_versions(verdict, run, latest)
    _level_rule(verdict, settings)
    if ev.bad_lines and verdict.incomplete:
        for bad in ev.bad_lines:
            verdict.reasons.append(
                Reason("unreadable", None, None, str(bad), "a readable record", f"unreadable line {bad}")
            )
    return verdict


def _no_run_record(verdict: NodeVerdict, ev: NodeEvidence, run: RunEvidence | None) -> None:
    if run is not None:
        verdict.run_id = run.run_id
        verdict.started = run.started_text()
    files = ", ".join(sorted(ev.files)) or "(none)"
    if run is None and ev.foreign and not ev.bad_lines:
        what = "no record of its own"
    elif run is None and not ev.bad_lines:
        what = "no records at all"
    elif run is None:
        what = "no readable record"
    else:
        what = f"check records of run {run.run_id} but no run record (the list of expected checks is lost)"
    verdict.reasons.append(
        Reason("unreadable", None, None, what, "a run record", f"results in {files}: {what}")
    )
    for bad in ev.bad_lines:
        verdict.reasons.append(
            Reason("unreadable", None, None, str(bad), "a readable record", f"unreadable line {bad}")
        )


def _latest_per_check(run: RunEvidence, metrics: Mapping[str, Metric]) -> dict[str, CheckRecord]:
    """A resumed or retried check: the record that started last is the one that counts.

    Records that started at the same instant, or whose start cannot be read, cannot be ordered:
    among them (and the latest readable one) the worst status counts, and of the records with that
    status each metric's worst value.
    """
    latest: dict[str, CheckRecord] = {}
    repeated: set[str] = set()
    for rec in run.checks:
        if rec.check in latest:
            repeated.add(rec.check)
        latest[rec.check] = rec
    for name in repeated:
        records = [r for r in run.checks if r.check == name]
        stamps = [parsed_instant(r.started) for r in records]
        newest = max((s for s in stamps if s is not None), default=None)
        candidates = [r for r, s in zip(records, stamps, strict=True) if s is None or s == newest]
        chosen = max(reversed(candidates), key=lambda r: _SEVERITY[r.status])
        peers = [r for r in candidates if r.status == chosen.status]
        latest[name] = _worst_values(chosen, peers, metrics) if len(peers) > 1 else chosen
    return latest


def _worst_values(
    chosen: CheckRecord, peers: list[CheckRecord], metrics: Mapping[str, Metric]
) -> CheckRecord:
    worst: dict[str, float] = {}
    for rec in peers:
        for metric, value in rec.metrics.items():
            if metric not in worst:
                worst[metric] = value
        _worse_figures(worst, rec.metrics, metrics)
    return chosen.model_copy(update={"metrics": worst})


def _worse_figures(kept: dict[str, float], other: Mapping[str, float], metrics: Mapping[str, Metric]) -> None:
    """Lower each of `kept`'s figures to `other`'s where that is worse."""
    for metric, prev in kept.items():
        value = other.get(metric)
        if value is not None and _worse(metric, value, prev, metrics):
            kept[metric] = value


def _worse(metric: str, value: float, prev: float, metrics: Mapping[str, Metric]) -> bool:
    """Whether `value` is a worse figure of `metric` than `prev`. NaN, no measurement, is the worst
    of all: it stays, and measures.py rejects the node for it."""
    if math.isnan(prev):
        return False
    if math.isnan(value):
        return True
    known = metrics.get(metric)
    return value < prev if known is None or known.higher_is_better else value > prev


def _judged_on_pairs(latest: Mapping[str, CheckRecord]) -> bool:
    """Whether the run's whole-fleet all-reduce errored and its own pairs, measured after that
    record, passed with a finite figure: then the error is set aside (see the module docstring)."""
    collective, pairs = latest.get(MULTINODE_CHECK), latest.get(FABRIC_CHECK)
    if collective is None or collective.status != "error" or pairs is None or pairs.status != "pass":
        return False
    figure = pairs.metrics.get(FABRIC_METRIC)
    if figure is None or not math.isfinite(figure):
        return False
    errored, paired = parsed_instant(collective.started), parsed_instant(pairs.started)
    return errored is not None and paired is not None and paired > errored


def collective_set_aside(verdict: NodeVerdict) -> bool:
    """Whether the node's whole-fleet all-reduce errored and the error was set aside on its pairs."""
    outcome = verdict.checks.get(MULTINODE_CHECK)
    return (
        outcome is not None
        and outcome.state == "error"
        and not any(r.check == MULTINODE_CHECK for r in verdict.reasons)
    )


def _judge_check(verdict: NodeVerdict, rec: CheckRecord, *, set_aside: bool = False) -> None:
    name = rec.check
    why = rec.reason or rec.error or ""
    verdict.checks[name] = CheckVerdict(name, rec.status, why or None, rec.duration_s)
    if rec.status == "error" and set_aside:
        return  # a note, collective_set_aside(): the node is judged on its pairs
    if rec.status == "error":
        detail = rec.error or rec.reason or "error"
        verdict.reasons.append(
            Reason("error", name, None, detail, "pass", f"{name}: could not measure: {detail}")
        )
    elif rec.status == "fail":
        findings = f" ({'; '.join(rec.findings)})" if rec.findings else ""
        verdict.reasons.append(
            Reason("fail", name, None, why + findings, "pass", f"{name} failed: {why}{findings}")
        )


def _take_metrics(
    verdict: NodeVerdict, latest: dict[str, CheckRecord], metrics: Mapping[str, Metric]
) -> None:
    """Measured values of pass and fail records; an errored check's partial numbers are not used.

    Non-finite values are taken as they are; measures.py turns them into `error` reasons in one
    vectorised pass instead of testing 300,000 floats one by one here.
    """
    values, producers = verdict.metrics, verdict.metric_checks
    for name, rec in latest.items():
        if rec.status != "pass" and rec.status != "fail":
            continue
        measured = rec.metrics
        if values.keys().isdisjoint(measured):  # the usual case: each metric has one producer
            values.update(measured)
            producers.update(dict.fromkeys(measured, name))
            continue
        for metric, value in measured.items():
            prev = values.get(metric)
            # Two checks reported one metric: the worse value stands (fail closed).
            if prev is not None and not _worse(metric, value, prev, metrics):
                continue
            values[metric] = value
            producers[metric] = name


def _take_versions(verdict: NodeVerdict, run: RunEvidence, latest: dict[str, CheckRecord]) -> None:
    sources = [r.versions for r in run.runs if r.versions]
    sources += [c.versions for c in latest.values() if c.versions]
    if len(sources) == 1:  # the runner's usual shape: versions on the run record only
        verdict.versions = dict(sorted(sources[0].items()))
        return
    seen: dict[str, set[str]] = {}
    for versions in sources:
        for component, value in versions.items():
            seen.setdefault(component, set()).add(value)
    for component, found in sorted(seen.items()):
        if len(found) == 1:
            verdict.versions[component] = next(iter(found))
            continue
        shown = ", ".join(sorted(found))
        verdict.versions[component] = shown
        verdict.reasons.append(
            Reason(
                "version",
                None,
                component,
                shown,
                "one value per node",
                f"{component}: this node's records disagree ({shown})",
            )
        )


def _level_rule(verdict: NodeVerdict, settings: GateSettings) -> None:
    if settings.level is None or verdict.level is None:
        return
    if LEVELS.index(verdict.level) < LEVELS.index(settings.level):
        verdict.reasons.append(
            Reason(
                "missing",
                None,
                None,
                verdict.level,
                settings.level,
                f"burn-in ran at level {verdict.level}; the spec's validation.level is {settings.level}, "
                f"so that level's checks were not run",
            )
        )
