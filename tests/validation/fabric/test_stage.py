"""run_schedule, the plug-in point for a fleet run's measuring: what comes back is reconciled
against the schedule, failing closed."""

from __future__ import annotations

from collections.abc import Sequence

from validation.fabric import Pair, PairResult, Round, attribute, pairing_schedule
from validation.fabric.stage import NO_RESULT, run_schedule

HOSTS = [f"n{i}" for i in range(1, 7)]


def test_missing_extra_and_duplicate_results_are_reconciled() -> None:
    schedule = pairing_schedule(HOSTS, rounds=3)

    def runner(round_: Round) -> Sequence[PairResult]:
        rest = round_.pairs[1:]
        forged = PairResult(Pair.of("n1", "intruder"), 99.0)
        # The first pair never reports; the second reports twice; one result names an unscheduled pair.
        return [PairResult(p, 40.0) for p in rest] + [PairResult(rest[0], 1.0), forged]

    run = run_schedule(schedule, runner)
    assert len(run.results) == sum(len(r.pairs) for r in schedule.rounds)
    missing = [r for r in run.results if r.busbw_gbps is None]
    assert [r.pair for r in missing] == [r.pairs[0] for r in schedule.rounds]
    assert all(r.reason == NO_RESULT for r in missing)
    assert [r.round for r in run.results] == [r.index for r in schedule.rounds for _ in r.pairs]
    assert (
        sum("unscheduled" in n for n in run.notes) == 3 and sum("second result" in n for n in run.notes) == 3
    )
    assert all(r.busbw_gbps != 1.0 for r in run.results)  # the first report of a pair stands
    attribute(HOSTS, run.results)  # nothing unlisted reached the attribution


def test_stage_wall_time_is_rounds_not_hosts() -> None:
    calls: list[int] = []

    def runner(round_: Round) -> Sequence[PairResult]:
        calls.append(len(round_.pairs))
        return [PairResult(p, 40.0) for p in round_.pairs]

    run_schedule(pairing_schedule([f"h{i}" for i in range(1000)], rounds=3), runner)
    assert calls == [500, 500, 500]  # one call per round, every pair of the round at once
