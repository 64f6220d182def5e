"""Group already-read result files by node and pick each node's latest run.

Which run wins: the one whose run record says it started last (ISO 8601, compared as instants,
so `Z` and `+00:00` agree); a run whose run record was lost is dated by its earliest check record.
Two runs starting at the same instant are ordered by run_id, the greater winning, so the choice
never depends on file order. A `--resume` keeps its run_id, so a resumed run is one run: its
checks are the union of what its run records expect, and each check's latest record counts.

Identity is bound to the file: the runner writes `<out>/<node>.jsonl`, so a file speaks for the
node it is named after and no other. A record in it claiming another node is refused and counted
against the file's own node, so one node's file can never add to, or change, another's verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from fleet.results import (
    OLDEST,
    BadLine,
    CheckRecord,
    ResultFile,
    RunRecord,
    instant,
    node_from_path,
    parsed_instant,
)


@dataclass(slots=True)
class RunEvidence:
    run_id: str
    runs: list[RunRecord] = field(default_factory=list)
    checks: list[CheckRecord] = field(default_factory=list)
    files: set[str] = field(default_factory=set)

    def expected_checks(self) -> list[str]:
        seen: dict[str, None] = {}
        for run in self.runs:
            for name in run.checks:
                seen.setdefault(name)
        return list(seen)

    def started(self) -> datetime:
        stamps = [r.started for r in self.runs] or [c.started for c in self.checks]
        return min((instant(s) for s in stamps), default=OLDEST)

    def known_start(self) -> datetime | None:
        """When the run started, or None when a stamp it needs cannot be read (or there is none)."""
        stamps = [r.started for r in self.runs] or [c.started for c in self.checks]
        parsed = [parsed_instant(s) for s in stamps]
        if not parsed or any(p is None for p in parsed):
            return None
        return min(p for p in parsed if p is not None)

    @property
    def partial(self) -> bool:
        runs = self.runs
        return runs[0].partial if len(runs) == 1 else any(r.partial for r in runs)

    def started_text(self) -> str | None:
        if len(self.runs) == 1:
            return self.runs[0].started
        stamps = [r.started for r in self.runs] or [c.started for c in self.checks]
        return min(stamps, key=instant) if stamps else None


@dataclass(slots=True)
class NodeEvidence:
    node: str
    runs: dict[str, RunEvidence] = field(default_factory=dict)
    files: set[str] = field(default_factory=set)
    bad_lines: list[BadLine] = field(default_factory=list)
    # records in this node's files that claim another node: (file, claimed node, how many)
    foreign: list[tuple[str, str, int]] = field(default_factory=list)
    # each file's last run record's run: the runner only appends, so it is that file's newest run
    appended_last: set[str] = field(default_factory=set)

    def run(self, run_id: str) -> RunEvidence:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = RunEvidence(run_id)
        return found

    def latest_candidates(self) -> list[RunEvidence]:
        """Runs that may be the latest: those tied at the latest known start, any whose start
        cannot be read (it could be later than all), and each file's last run. A start is the
        node's own clock: one that ran ahead dates an old run after a new one, while the runner
        only ever appends (and two files of one node name may be two machines' results). The gate
        judges each candidate and keeps the worst."""
        if len(self.runs) <= 1:  # the common case, and the one 10,000-node fleets pay for
            return list(self.runs.values())
        starts = {run_id: run.known_start() for run_id, run in self.runs.items()}
        known = [s for s in starts.values() if s is not None]
        newest = max(known, default=None)
        return [
            r
            for r in self.runs.values()
            if starts[r.run_id] is None or starts[r.run_id] == newest or r.run_id in self.appended_last
        ]


def group_by_node(files: Sequence[ResultFile]) -> dict[str, NodeEvidence]:
    nodes: dict[str, NodeEvidence] = {}
    for result in files:
        path = str(result.path)
        owner = node_from_path(path)
        ev = nodes.get(owner)
        if ev is None:
            ev = nodes[owner] = NodeEvidence(owner)
        ev.files.add(path)
        foreign: dict[str, int] = {}
        # Consecutive records nearly always share a run: look it up once per stretch.
        last: str | None = None
        run: RunEvidence | None = None
        records: list[RunRecord | CheckRecord] = [*result.runs, *result.checks]
        for rec in records:
            if rec.node != owner:
                foreign[rec.node] = foreign.get(rec.node, 0) + 1
                continue
            if rec.run_id != last or run is None:
                run = ev.run(rec.run_id)
                run.files.add(path)
                last = rec.run_id
            if isinstance(rec, RunRecord):
                run.runs.append(rec)
            else:
                run.checks.append(rec)
        ev.foreign.extend((path, claimed, n) for claimed, n in foreign.items())
        own_runs = [r.run_id for r in result.runs if r.node == owner]
        if own_runs:
            ev.appended_last.add(own_runs[-1])
        if result.bad_lines:
            ev.bad_lines.extend(result.bad_lines)
    return nodes
