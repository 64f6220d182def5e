"""The fleet verdict: can the job land on `nodes` healthy nodes, and on which.

Accepted nodes are ordered by pace, best first: a node's pace is its worst value / fleet median
over the higher-is-better metrics, because a synchronized step runs at its slowest member's
speed. The first `nodes` are the job's, the rest stand by as spares, so rejects are replaced by
spares and the slowest accepted nodes are the ones kept in reserve. Equal paces, or fleets too
small for statistics (no pace), fall back to the node name in natural order (node2 < node10).
When the fleet is not ready there is no job set at all: a launcher must not land on a short fleet.
"""

from __future__ import annotations

from collections.abc import Sequence

from validation.gate.model import FleetPlan, FleetVerdict, NodeVerdict, natural_key


def _order(v: NodeVerdict) -> tuple[int, float, tuple[tuple[int, int | str], ...]]:
    if v.pace is None:
        return (1, 0.0, natural_key(v.node))
    return (0, -v.pace, natural_key(v.node))


def fleet_verdict(verdicts: Sequence[NodeVerdict], sku: str | None, plan: FleetPlan | None) -> FleetVerdict:
    accepted = sorted((v for v in verdicts if v.accepted), key=_order)
    rejected = sorted((v.node for v in verdicts if not v.accepted), key=natural_key)
    if plan is None:
        job, spare, ready = accepted, [], None
    else:
        ready = len(accepted) >= plan.required
        job = accepted[: plan.required] if ready else []
        spare = accepted[plan.required :] if ready else []
    for v in job:
        v.role = "job"
    for v in spare:
        v.role = "spare"
    return FleetVerdict(
        sku=sku,
        judged=len(verdicts),
        accepted=tuple(v.node for v in accepted),
        rejected=tuple(rejected),
        required=plan.required if plan else None,
        spares=plan.spares if plan else None,
        ready=ready,
        job=tuple(v.node for v in job),
        spare=tuple(v.node for v in spare),
        name=plan.name if plan else None,
    )
