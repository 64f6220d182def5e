"""decide(): already-read result files in, a GateResult out. No I/O, no printing.

Order of work: group records by node and take each node's latest run (collect.py); judge each
node's records (checks.py); settle the SKU; account for the spec's hosts; apply floors and
fleet-relative outliers (measures.py) and version homogeneity (versions.py); then the fleet
verdict (fleet.py). Nodes are listed in natural name order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta

from fleet.catalog import Sku, UnknownSkuError, get_sku
from fleet.metrics import FABRIC_CHECK, METRICS, MULTINODE_CHECK, Metric
from fleet.results import ResultFile, parsed_instant
from validation.gate.collect import NodeEvidence, group_by_node
from validation.gate.fleet import fleet_verdict
from validation.gate.measures import judge_measures, resolve_limits
from validation.gate.model import (
    FileReport,
    FleetPlan,
    GateInputError,
    GateResult,
    GateSettings,
    NodeVerdict,
    Reason,
    natural_key,
)
from validation.gate.node_rules import collective_set_aside, judge_records
from validation.gate.versions import judge_versions

_SHOWN = 8  # node names quoted in one message before "and N more"
# A fleet's burn-in runs within hours; results a day older than its newest are from another one.
STALE_AFTER = timedelta(hours=24)


def decide(
    files: Sequence[ResultFile],
    *,
    sku: str | None = None,
    sku_from: str = "--sku",
    settings: GateSettings | None = None,
    plan: FleetPlan | None = None,
    vocabulary: Mapping[str, Metric] = METRICS,
    expected: Sequence[str] = (),
    host_reasons: Mapping[str, Sequence[Reason]] | None = None,
    listed: Sequence[str] | None = None,
) -> GateResult:
    """Judge every node in `files`. Raises GateInputError when the results cannot be judged as asked.

    `expected` names nodes that must have results (a fleet run's inventory): each one without any
    is rejected as `missing`, like a host the spec lists. `host_reasons` are rejections found
    outside the results (a fleet run's unreachable host, a failed task): each named node is
    rejected with them, whether or not it left results; for a node without results they replace
    the generic `missing` reason, since they say why.

    Which nodes may take part: when the spec lists hosts, or `listed` (an inventory's hosts) or
    `expected` name nodes, a node with results that none of them names is rejected as `unlisted`
    and never joins the job group; without any such list every node with results is judged. A host
    any of them names without results is rejected as `missing`.
    """
    settings = settings or GateSettings()
    notes: list[str] = []
    evidence = group_by_node(files)
    # Which SKU the results are for is asked of the fleet's own nodes: a stray file of a node no
    # list names is rejected as unlisted below, and must not stop every listed node's verdict.
    members = _members(plan, listed, expected)
    own = {n: ev for n, ev in evidence.items() if members is None or n in members[0]}
    catalog_sku = _resolve_sku(own, sku, sku_from)
    limits = resolve_limits(catalog_sku, settings)
    verdicts = [judge_records(ev, settings, vocabulary) for ev in evidence.values()]
    _file_notes(evidence, notes)
    outside = {node: list(reasons) for node, reasons in (host_reasons or {}).items() if reasons}
    verdicts += _absent_nodes(verdicts, plan, [*expected, *outside], notes, listed or ())
    _unlisted_nodes(verdicts, members)
    for v in verdicts:
        if v.node in outside:
            # A node without results got the generic `missing` reason above; the outside one says why.
            if v.run_id is None and not v.files:
                v.reasons.clear()
            v.reasons.extend(outside[v.node])
    verdicts.sort(key=lambda v: natural_key(v.node))
    _level_notes(verdicts, notes)
    _collective_notes(verdicts, notes)
    stats = judge_measures(verdicts, settings, limits, vocabulary, notes, catalog_sku)
    judge_versions(verdicts, settings, notes)
    _age_notes(verdicts, notes)
    reports = [FileReport(str(f.path), len(f.runs) + len(f.checks), _bad(f)) for f in files]
    for report in reports:
        if report.bad_lines:
            line, problem = report.bad_lines[0]
            if line == 0:  # the entry itself: a FIFO, a folder, a dangling symlink
                notes.append(f"{report.path}: unreadable entry: {problem}")
                continue
            notes.append(
                f"{report.path}: {len(report.bad_lines)} unreadable line(s), first at line {line}: {problem}"
            )
    fleet = fleet_verdict(verdicts, catalog_sku.sku if catalog_sku else None, plan)
    return GateResult(verdicts, fleet, stats, notes, reports, settings)


def _bad(f: ResultFile) -> tuple[tuple[int, str], ...]:
    return tuple((b.line, b.problem) for b in f.bad_lines)


def _listed(names: Sequence[str]) -> str:
    ordered = sorted(names, key=natural_key)
    more = f" and {len(ordered) - _SHOWN} more" if len(ordered) > _SHOWN else ""
    return ", ".join(ordered[:_SHOWN]) + more


def _resolve_sku(evidence: Mapping[str, NodeEvidence], asked: str | None, asked_from: str) -> Sku | None:
    """The SKU asked for, else the one the results name; a gate run judges exactly one SKU."""
    by_sku: dict[str, list[str]] = {}
    for ev in evidence.values():
        names: set[str] = set()
        for run in ev.latest_candidates():
            names.update([r.sku for r in run.runs])
            names.update([c.sku for c in run.checks])
        for name in names:
            by_sku.setdefault(name, []).append(ev.node)
    if asked is not None:
        others = {name: nodes for name, nodes in by_sku.items() if name != asked}
        if others:
            shown = "; ".join(f"{name} on {_listed(nodes)}" for name, nodes in sorted(others.items()))
            raise GateInputError(
                f"results are not all for SKU {asked} (from {asked_from}): {shown}. "
                f"One gate run judges one SKU; split the results or drop the foreign files"
            )
    elif len(by_sku) > 1:
        shown = "; ".join(f"{name} on {_listed(nodes)}" for name, nodes in sorted(by_sku.items()))
        raise GateInputError(
            f"results mix SKUs: {shown}. One gate run judges one SKU; split the results or pass --sku"
        )
    chosen = asked if asked is not None else next(iter(by_sku), None)
    if chosen is None:
        return None
    try:
        return get_sku(chosen)
    except UnknownSkuError as exc:
        raise GateInputError(
            f"SKU {chosen!r} ({asked_from if asked else 'named by the results'}): {exc}"
        ) from None


def _absent_nodes(
    verdicts: Sequence[NodeVerdict],
    plan: FleetPlan | None,
    expected: Sequence[str],
    notes: list[str],
    listed: Sequence[str] = (),
) -> list[NodeVerdict]:
    """Nodes the spec's hosts, the caller's `expected` or the inventory (`listed`) name without
    results: rejected, never omitted."""
    seen = {v.node for v in verdicts}
    if plan is not None and not plan.hosts:
        size = plan.required + plan.spares
        if len(seen) != size:
            notes.append(
                f"results name {len(seen)} node(s); the spec provisions {size} ({plan.required} nodes + "
                f"{plan.spares} spares)"
            )
    why: dict[str, str] = {}
    for name in expected:
        why.setdefault(
            name, "no results for this node, which the fleet run expected (unreachable, or burn-in never ran)"
        )
    if plan is not None and plan.hosts:
        for host in plan.hosts:
            why.setdefault(
                host.name,
                "no results for this host, which the spec lists (unreachable, or burn-in never ran)",
            )
    for name in listed:
        why.setdefault(
            name, "no results for this host, which the inventory lists (unreachable, or burn-in never ran)"
        )
    return [
        NodeVerdict(name, reasons=[Reason("missing", None, None, None, "results", message)])
        for name, message in why.items()
        if name not in seen
    ]


def _members(
    plan: FleetPlan | None, listed: Sequence[str] | None, expected: Sequence[str]
) -> tuple[set[str], str] | None:
    """The nodes the lists name, and which lists those are; None when nothing lists the fleet."""
    sources: list[str] = []
    allowed: set[str] = set()
    if plan is not None and plan.hosts:
        sources.append("the spec's hosts")
        allowed.update(h.name for h in plan.hosts)
    if listed is not None:
        sources.append("the inventory")
        allowed.update(listed)
    if expected:
        sources.append("the fleet run's hosts")
        allowed.update(expected)
    return (allowed, " or ".join(sources)) if sources else None


def _unlisted_nodes(verdicts: Sequence[NodeVerdict], members: tuple[set[str], str] | None) -> None:
    """A node that no list names cannot vouch for itself: its results may be anyone's."""
    if members is None:
        return
    allowed, where = members
    for v in verdicts:
        if v.node not in allowed:
            v.reasons.append(
                Reason(
                    "unlisted",
                    None,
                    None,
                    v.node,
                    where,
                    f"node {v.node!r} is not among {where}: its results are not judged into the fleet",
                )
            )


def _file_notes(evidence: Mapping[str, NodeEvidence], notes: list[str]) -> None:
    for ev in evidence.values():
        if len(ev.files) > 1:
            # A resumed run appends to its one file: two files of one node may be two machines.
            notes.append(
                f"{ev.node}: results in {len(ev.files)} files ({', '.join(sorted(ev.files))}); each file's "
                f"latest run is judged and the worst counts"
            )


def _age_notes(verdicts: Sequence[NodeVerdict], notes: list[str]) -> None:
    """Results that predate the fleet's newest burn-in by more than STALE_AFTER are judged as the
    rest, and said: a node whose burn-in did not run this time may still have last month's file."""
    started = {v.node: parsed_instant(v.started) for v in verdicts if v.started and v.accepted}
    known = {node: t for node, t in started.items() if t is not None}
    if len(known) < 2:
        return
    newest = max(known.values())
    old = {node: t for node, t in known.items() if newest - t > STALE_AFTER}
    if old:
        oldest = min(old.values())
        notes.append(
            f"accepted on results older than the fleet's newest burn-in ({newest.isoformat()}) by more than "
            f"{STALE_AFTER.total_seconds() / 3600:g} h: {_listed(list(old))} (oldest {oldest.isoformat()}); "
            f"burn them in again if anything changed since"
        )


def _collective_notes(verdicts: Sequence[NodeVerdict], notes: list[str]) -> None:
    """The whole-fleet all-reduce's errors set aside on the hosts' own pairs (node_rules.py)."""
    aside = [v for v in verdicts if not v.unlisted and collective_set_aside(v)]
    if not aside:
        return
    hosts = _listed([v.node for v in aside])
    detail = (aside[0].checks[MULTINODE_CHECK].detail or "error")[:200]
    notes.append(
        f"{MULTINODE_CHECK}: the whole-fleet all-reduce could not be measured on {hosts} ({detail}); every "
        f"member times out when one host hangs it, so it names no host: each host is judged on its own "
        f"pairs ({FABRIC_CHECK}), which passed"
    )


def _level_notes(verdicts: Sequence[NodeVerdict], notes: list[str]) -> None:
    levels: dict[str, list[str]] = {}
    for v in verdicts:
        if v.level is not None:
            levels.setdefault(v.level, []).append(v.node)
    if len(levels) > 1:
        shown = "; ".join(f"{level} on {_listed(nodes)}" for level, nodes in sorted(levels.items()))
        notes.append(f"burn-in levels differ across the fleet ({shown}); their numbers may not compare")
