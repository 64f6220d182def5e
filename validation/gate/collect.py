"""Group already-read result files by node and pick each node's latest run.

Which run wins: the one whose run record says it started last (ISO 8601, compared as instants,
so `Z` and `+00:00` agree); a run whose run record was lost is dated by its earliest check record.
Two runs starting at the same instant are ordered by run_id, the greater winning, so the choice
never depends on file order. A `--resume` keeps its run_id, so a resumed run is one run: its
checks are the union of what its run records expect, and each check's latest record counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache

from validation.records import BadLine, CheckRecord, ResultFile, RunRecord

_OLDEST = datetime.min.replace(tzinfo=UTC)


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
        return min((instant(s) for s in stamps), default=_OLDEST)

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

    def run(self, run_id: str) -> RunEvidence:
        found = self.runs.get(run_id)
        if found is None:
            found = self.runs[run_id] = RunEvidence(run_id)
        return found

    def latest_run(self) -> RunEvidence | None:
        if len(self.runs) <= 1:  # the common case, and the one 10,000-node fleets pay for
            return next(iter(self.runs.values()), None)
        return max(self.runs.values(), key=lambda r: (r.started(), r.run_id))


@lru_cache(maxsize=65536)
def instant(stamp: str) -> datetime:
    """An ISO 8601 time as an aware instant; an unparsable one sorts as the oldest."""
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return _OLDEST
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def node_from_path(path: str) -> str:
    """The runner writes `<out>/<node>.jsonl`; a file with nothing readable is named by its stem."""
    name = path.replace("\\", "/").rsplit("/", 1)[-1]
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name


def group_by_node(files: Sequence[ResultFile]) -> dict[str, NodeEvidence]:
    nodes: dict[str, NodeEvidence] = {}

    def evidence(name: str) -> NodeEvidence:
        found = nodes.get(name)
        if found is None:
            found = nodes[name] = NodeEvidence(name)
        return found

    for result in files:
        path = str(result.path)
        in_file: set[str] = set()
        # Consecutive records nearly always share node and run: look them up once per stretch.
        last: tuple[str, str] | None = None
        run: RunEvidence | None = None
        records: list[RunRecord | CheckRecord] = [*result.runs, *result.checks]
        for rec in records:
            key = (rec.node, rec.run_id)
            if key != last or run is None:
                ev = evidence(rec.node)
                run = ev.run(rec.run_id)
                run.files.add(path)
                ev.files.add(path)
                in_file.add(rec.node)
                last = key
            if isinstance(rec, RunRecord):
                run.runs.append(rec)
            else:
                run.checks.append(rec)
        if not in_file:
            # Nothing readable: the node is known only by the file's name, and is judged unreadable.
            in_file.add(node_from_path(path))
            evidence(node_from_path(path)).files.add(path)
        if result.bad_lines:
            for name in in_file:
                nodes[name].bad_lines.extend(result.bad_lines)
    return nodes
