"""The pairing schedule: disjoint pairs per round, a partner never met before, odd counts sit out."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.fabric import Pair, ScheduleError, max_rounds, pairing_schedule
from validation.fabric.model import Schedule


def hosts(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def assert_valid(schedule: Schedule, n: int, rounds: int) -> None:
    assert len(schedule.rounds) == min(rounds, max_rounds(n))
    met: set[Pair] = set()
    idle: list[str] = []
    for r in schedule.rounds:
        seen = Counter(h for p in r.pairs for h in (p.a, p.b)) + Counter(r.idle)
        # Disjoint: every host exactly once per round, paired or sitting out.
        assert seen == Counter(schedule.hosts), f"round {r.index}: {seen}"
        assert len(r.idle) == n % 2
        for p in r.pairs:
            assert p not in met, f"{p} met twice"
            met.add(p)
        idle.extend(r.idle)
    assert len(idle) == len(set(idle)), f"the same host sat out twice: {idle}"
    for h in schedule.hosts:
        partners = schedule.partners(h)
        assert len(partners) == len(set(partners))


@pytest.mark.parametrize("n", [2, 3, 4, 5, 64, 255])
@pytest.mark.parametrize("rounds", [2, 3])
def test_every_host_meets_new_partners_each_round(n: int, rounds: int) -> None:
    schedule = pairing_schedule(hosts(n), rounds=rounds)
    assert_valid(schedule, n, rounds)
    if n >= 4:
        # Every host meets `rounds` partners, or one fewer if it sat a round out.
        for h in schedule.hosts:
            assert len(schedule.partners(h)) == rounds - (h in {x for r in schedule.rounds for x in r.idle})


def test_small_fleets_get_only_the_rounds_that_exist() -> None:
    assert [r.pairs for r in pairing_schedule(["b", "a"], rounds=3).rounds] == [(Pair("a", "b"),)]
    three = pairing_schedule(["x", "y", "z"], rounds=3)
    assert {p for r in three.rounds for p in r.pairs} == {Pair("x", "y"), Pair("x", "z"), Pair("y", "z")}
    assert sorted(h for r in three.rounds for h in r.idle) == ["x", "y", "z"]
    assert pairing_schedule(["solo"]).rounds == ()


def test_deterministic_natural_order_and_seeded() -> None:
    shuffled = ["node10", "node2", "node1", "node3"]
    a = pairing_schedule(shuffled)
    assert a.hosts == ("node1", "node2", "node3", "node10")
    assert a == pairing_schedule(sorted(shuffled))
    assert pairing_schedule(hosts(64), seed=7) == pairing_schedule(list(reversed(hosts(64))), seed=7)
    assert pairing_schedule(hosts(64), seed=7).rounds != pairing_schedule(hosts(64), seed=8).rounds
    assert_valid(pairing_schedule(hosts(64), seed=7), 64, 3)


@pytest.mark.parametrize(
    ("names", "rounds", "message"),
    [(["a", "b", "a"], 2, "listed twice"), (["a", ""], 2, "empty"), (["a", "b"], 0, "at least 1")],
)
def test_bad_input_is_refused(names: list[str], rounds: int, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        pairing_schedule(names, rounds=rounds)


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(min_value=2, max_value=300),
    rounds=st.integers(min_value=1, max_value=5),
    seed=st.none() | st.integers(0, 2**32),
)
def test_any_fleet_any_rounds(n: int, rounds: int, seed: int | None) -> None:
    assert_valid(pairing_schedule(hosts(n), rounds=rounds, seed=seed), n, rounds)
