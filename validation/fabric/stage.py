"""Running a schedule: the plug-in point for whatever measures the pairs (torchrun, ib_write_bw).

A fleet run implements `RoundRunner`: given one round, it starts every pair of the round at the same
time and returns one `PairResult` per pair, with busbw None and the reason when a pair did not
complete (timeout, rendezvous error, host unreachable). `run_schedule` calls it once per round, so
the stage's wall time is rounds x the slowest pair of a round, whatever the fleet size.

What comes back is reconciled against the schedule, failing closed: a scheduled pair with no result
is a failed pair; a result for a pair that was not scheduled in that round (or a second result for
one that was) is dropped and noted, never counted.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from validation.fabric.model import Pair, PairResult, Round, Schedule

NO_RESULT = "no result returned for this pair"


class RoundRunner(Protocol):
    def __call__(self, round_: Round, /) -> Sequence[PairResult]: ...


@dataclass(frozen=True)
class StageRun:
    results: tuple[PairResult, ...]
    notes: tuple[str, ...]


def reconcile(round_: Round, returned: Iterable[PairResult]) -> tuple[list[PairResult], list[str]]:
    """One result per scheduled pair of the round, stamped with the round's index."""
    scheduled = set(round_.pairs)
    got: dict[Pair, PairResult] = {}
    notes: list[str] = []
    for r in returned:
        if r.pair not in scheduled:
            notes.append(f"round {round_.index}: dropped a result for unscheduled pair {r.pair.a}-{r.pair.b}")
        elif r.pair in got:
            notes.append(f"round {round_.index}: dropped a second result for {r.pair.a}-{r.pair.b}")
        else:
            got[r.pair] = PairResult(r.pair, r.busbw_gbps, r.reason, round_.index)
    results = [got.get(p) or PairResult(p, None, NO_RESULT, round_.index) for p in round_.pairs]
    return results, notes


def run_schedule(schedule: Schedule, measure: RoundRunner) -> StageRun:
    results: list[PairResult] = []
    notes: list[str] = []
    for round_ in schedule.rounds:
        got, said = reconcile(round_, measure(round_))
        results.extend(got)
        notes.extend(said)
    return StageRun(tuple(results), tuple(notes))


def merge_results(earlier: Iterable[PairResult], later: Iterable[PairResult]) -> tuple[PairResult, ...]:
    """A rerun of some pairs (`--hosts` the suspects) replaces those pairs' earlier measurements and
    keeps every other pair's."""
    newer = list(later)
    rerun = {r.pair for r in newer}
    return (*[r for r in earlier if r.pair not in rerun], *newer)
