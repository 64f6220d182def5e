"""Attribution on synthetic fleets: the guilty host, the suspect link, failures, and noise that
must reject nobody. Measurements come from the simulated fabric run round by round through the
real schedule, with a seeded RNG."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from validation.fabric import (
    HOST_METRIC,
    AttributionInputError,
    Pair,
    PairResult,
    Round,
    attribute,
    pairing_schedule,
)
from validation.fabric.model import Attribution
from validation.fabric.simulate import SimulatedFabric
from validation.fabric.stage import merge_results, run_schedule

NOMINAL = 40.0


def hosts(n: int) -> list[str]:
    return [f"node{i}" for i in range(1, n + 1)]


def stage(
    n: int,
    *,
    seed: int,
    bad: dict[str, float] | None = None,
    links: dict[Pair, float] | None = None,
    dead: frozenset[str] = frozenset(),
    noise: float = 0.05,
    rounds: int = 3,
) -> Attribution:
    fabric = SimulatedFabric(NOMINAL, np.random.default_rng(seed), noise, bad or {}, links or {}, dead)
    names = hosts(n)
    run = run_schedule(pairing_schedule(names, rounds=rounds, seed=seed), fabric)
    assert not run.notes
    return attribute(names, run.results)


def linked(a: Attribution) -> set[str]:
    return {h for f in a.suspect_links for h in (f.pair.a, f.pair.b)}


@pytest.mark.parametrize("seed", range(5))
def test_one_bad_host_in_64(seed: int) -> None:
    a = stage(64, seed=seed, bad={"node17": 0.1})
    assert a.guilty_hosts == ("node17",)
    assert a.guilty[0].kind == "slow_with_every_partner"
    evidence = a.guilty[0].evidence
    assert len(evidence) == 3 and all("node17" in e.result.pair and e.verdict == "slow" for e in evidence)
    assert not a.suspect_links and not a.inconclusive
    # The partners of the bad host keep healthy per-host figures; the bad host does not.
    metrics = {h: f.metrics() for h, f in a.figures.items()}
    assert metrics["node17"][HOST_METRIC] < NOMINAL * 0.2
    assert min(v[HOST_METRIC] for h, v in metrics.items() if h != "node17") > NOMINAL * 0.8


@pytest.mark.parametrize("seed", range(5))
def test_three_bad_hosts_in_256(seed: int) -> None:
    bad = {"node3": 0.1, "node128": 0.5, "node255": 0.3}
    a = stage(256, seed=seed, bad=bad)
    assert set(a.guilty_hosts) == set(bad)
    assert not a.inconclusive


@pytest.mark.parametrize("seed", range(5))
def test_one_bad_link_names_both_and_rejects_neither(seed: int) -> None:
    schedule = pairing_schedule(hosts(64), seed=seed)
    link = schedule.rounds[1].pairs[5]
    a = stage(64, seed=seed, links={link: 0.2})
    assert a.guilty == ()
    assert [f.pair for f in a.suspect_links] == [link]
    assert not a.suspect_links[0].repeated


@pytest.mark.parametrize("n", [64, 256, 1024])
@pytest.mark.parametrize("seed", range(3))
def test_noise_of_five_percent_rejects_no_one(n: int, seed: int) -> None:
    a = stage(n, seed=seed)
    assert a.guilty == () and a.inconclusive == ()
    # A stray slow pair could only ever be a suspect link, never a rejection.
    assert len(a.suspect_links) <= 1


def test_dead_host_is_guilty_and_its_partners_are_not() -> None:
    a = stage(16, seed=1, dead=frozenset({"node5"}))
    assert a.guilty_hosts == ("node5",)
    assert a.guilty[0].kind == "failed_with_every_partner"
    assert "host unreachable" in a.guilty[0].reason
    assert not a.suspect_links and not a.inconclusive
    # Nothing measured: no figure goes into its results, and the gate fails it closed.
    assert a.figures["node5"].best_gbps is None and HOST_METRIC not in a.figures["node5"].metrics()


def test_host_slow_with_two_of_three_partners_repeats_and_is_guilty() -> None:
    schedule = pairing_schedule(hosts(32), seed=3)
    (p1,), (p2,) = ([p for p in r.pairs if "node9" in p] for r in schedule.rounds[:2])
    a = stage(32, seed=3, links={p1: 0.2, p2: 0.2})
    assert a.guilty_hosts == ("node9",)
    assert a.guilty[0].kind == "repeated_links"
    assert a.suspect_links == ()


def test_pair_of_two_hosts_cannot_be_split_so_it_is_a_link() -> None:
    results = [PairResult(Pair.of("a", "b"), 5.0)]
    a = attribute(["a", "b"], results, floor_gbps=10.0)
    assert a.guilty == () and [f.pair for f in a.suspect_links] == [Pair("a", "b")]
    assert "relative rule not applied" in a.rule.notes[0]


def test_host_bad_only_with_bad_partners_is_inconclusive_not_guilty() -> None:
    # x met only y and z; y and z are bad with everyone, so nobody vouches for x's side. y and z
    # each met two healthy hosts besides x: enough witnesses to find them guilty.
    res = [
        PairResult(Pair.of("x", "y"), 1.0),
        PairResult(Pair.of("x", "z"), 1.0),
        PairResult(Pair.of("y", "w1"), 1.0),
        PairResult(Pair.of("y", "w3"), 1.0),
        PairResult(Pair.of("z", "w2"), 1.0),
        PairResult(Pair.of("z", "w4"), 1.0),
        *(PairResult(Pair.of(f"w{i}", f"w{i + 1}"), 40.0) for i in range(1, 8)),
    ]
    a = attribute(["x", "y", "z", *(f"w{i}" for i in range(1, 9))], res)
    assert set(a.guilty_hosts) == {"y", "z"}
    assert [f.host for f in a.inconclusive] == ["x"]
    assert a.inconclusive[0].kind == "bad_only_with_bad_partners"


def test_unmeasured_host_is_inconclusive() -> None:
    a = attribute(["a", "b", "c"], [PairResult(Pair.of("a", "b"), 10.0)])
    assert [(f.host, f.kind) for f in a.inconclusive] == [("c", "not_measured")]
    assert not a.clean


def test_floor_catches_a_fleet_that_is_uniformly_slow() -> None:
    rng = np.random.default_rng(0)
    fabric = SimulatedFabric(NOMINAL, rng, 0.05, {"node4": 0.1})
    run = run_schedule(pairing_schedule(hosts(8)), fabric)
    assert attribute(hosts(8), run.results, floor_gbps=50.0).clean is False
    assert attribute(hosts(8), run.results).guilty_hosts == ("node4",)


def test_unlisted_host_and_duplicates_are_refused() -> None:
    with pytest.raises(AttributionInputError, match="unlisted host 'c'"):
        attribute(["a", "b"], [PairResult(Pair.of("a", "c"), 1.0)])
    with pytest.raises(AttributionInputError, match="listed twice"):
        attribute(["a", "a"], [])
    with pytest.raises(ValueError, match="itself"):
        Pair.of("a", "a")
    with pytest.raises(ValueError, match="finite"):
        PairResult(Pair.of("a", "b"), float("nan"))


def test_rerun_replaces_earlier_measurements_of_the_same_pair() -> None:
    p, q = Pair.of("a", "b"), Pair.of("c", "d")
    merged = merge_results([PairResult(p, 1.0), PairResult(q, 9.0)], [PairResult(p, 10.0)])
    assert sorted((r.pair, r.busbw_gbps) for r in merged) == [(p, 10.0), (q, 9.0)]


def test_a_host_at_sixty_percent_is_found_when_a_small_fleet_inflates_the_mad() -> None:
    # Found by the property below: 9 healthy pairs gave a MAD of 3.6 GB/s on a 39 GB/s median, so
    # median - 4 x MAD let node8's three pairs at 24-25 GB/s pass as healthy.
    a = stage(8, seed=32, bad={"node8": 0.6})
    assert a.guilty_hosts == ("node8",)
    assert not a.suspect_links


# Derandomized: CI reruns the same examples; new seeds are explored by running with --hypothesis-seed.
@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    n=st.integers(min_value=8, max_value=200),
    seed=st.integers(0, 2**32),
    bad_count=st.integers(min_value=0, max_value=3),
    factor=st.floats(min_value=0.05, max_value=0.6),
)
def test_property_bad_hosts_found_and_only_them(n: int, seed: int, bad_count: int, factor: float) -> None:
    rng = np.random.default_rng(seed)
    # Up to one host in eight: with more, bad pairs near a majority leave the fleet-relative rule
    # no healthy centre (3 of 8 at half speed spoil 9 of 12 pairs) and the SKU floor must judge.
    bad_count = min(bad_count, n // 8)
    bad = {f"node{int(i) + 1}": factor for i in rng.choice(n, size=bad_count, replace=False)}
    a = stage(n, seed=seed, bad=bad)
    guilty, unsure = set(a.guilty_hosts), {f.host for f in a.inconclusive}
    assert guilty <= set(bad), f"healthy host rejected: {guilty - set(bad)}"
    # A bad host whose every partner was bad too (rare, small fleets) is inconclusive, never missed.
    assert set(bad) <= guilty | unsure


def test_a_quarter_of_hosts_bad_still_found() -> None:
    # 2 bad hosts in 8 spoil about half the pairs: a median over pairs alone breaks down here, so the
    # statistics leave out hosts slow with everyone (found by Hypothesis: n=8, seed=0, factor 0.5).
    a = stage(8, seed=0, bad={"node6": 0.5, "node8": 0.5})
    assert set(a.guilty_hosts) == {"node6", "node8"}
    assert any("without far-slow hosts" in n for n in a.rule.notes)


def test_small_fleet_noise_names_no_link() -> None:
    # 8 hosts, 3 rounds, 5 % noise, one real bad link (node4-node7). A dozen pairs gave a MAD a third
    # of the real spread, and a 5 % margin then named node6-node8 (-8 %, noise) a suspect link too.
    measured = {
        ("node1", "node2"): 25.43, ("node3", "node4"): 26.03, ("node5", "node7"): 25.41,
        ("node6", "node8"): 23.37, ("node1", "node8"): 26.13, ("node2", "node3"): 25.56,
        ("node4", "node7"): 4.87, ("node5", "node6"): 25.73, ("node1", "node5"): 25.46,
        ("node2", "node4"): 25.37, ("node3", "node8"): 25.04, ("node6", "node7"): 25.68,
    }  # fmt: skip
    a = attribute(hosts(8), [PairResult(Pair.of(x, y), v) for (x, y), v in measured.items()])
    assert [f.pair for f in a.suspect_links] == [Pair("node4", "node7")] and a.guilty == ()


def _rounds(figures: list[list[tuple[str, str, float]]]) -> list[PairResult]:
    return [
        PairResult(Pair.of(a, b), bw, round=i)
        for i, pairs in enumerate(figures, start=1)
        for a, b, bw in pairs
    ]


# The fabric e2e's healthy fleet on a machine busy with other work (4 hosts, 3 rounds, GB/s): both
# pairs of round 1 came out slow at once, every other pair at the shaped rate.
BUSY_ROUND_1 = [
    [("h0", "h1", 0.0718), ("h2", "h3", 0.0492)],
    [("h0", "h2", 0.0958), ("h1", "h3", 0.0966)],
    [("h0", "h3", 0.0956), ("h1", "h2", 0.0961)],
]


def test_a_round_where_every_pair_is_slow_blames_no_host_and_no_link() -> None:
    a = attribute(["h0", "h1", "h2", "h3"], _rounds(BUSY_ROUND_1))
    assert a.guilty == () and a.suspect_links == () and a.inconclusive == ()
    assert {j.verdict for j in a.pairs if j.result.round == 1} == {"round"}
    assert any(n.startswith("round(s) 1: every pair slow at once") for n in a.rule.notes), a.rule.notes


def test_two_busy_rounds_reject_nobody() -> None:
    # Before the round rule, each host was slow with two different partners: all four guilty.
    busy = [[("h0", "h1", 0.05), ("h2", "h3", 0.05)], [("h0", "h2", 0.05), ("h1", "h3", 0.05)]]
    quiet = [[("h0", "h3", 0.096), ("h1", "h2", 0.096)], [("h0", "h1", 0.096), ("h2", "h3", 0.095)]]
    a = attribute(["h0", "h1", "h2", "h3"], _rounds([*busy, *quiet]))
    assert a.guilty == () and a.suspect_links == ()


def test_a_slow_host_is_still_found_when_one_round_was_slow_for_everyone() -> None:
    # h2 at a tenth in every round; round 1 was also slow for the other pair.
    figures = [
        [("h0", "h1", 0.05), ("h2", "h3", 0.0096)],
        [("h0", "h2", 0.0095), ("h1", "h3", 0.096)],
        [("h0", "h3", 0.095), ("h1", "h2", 0.0097)],
    ]
    a = attribute(["h0", "h1", "h2", "h3"], _rounds(figures))
    assert a.guilty_hosts == ("h2",), a
    assert "2 of 3" in a.guilty[0].reason


def test_a_round_with_one_healthy_pair_is_judged_pair_by_pair() -> None:
    figures = [
        [("h0", "h1", 0.096), ("h2", "h3", 0.0096)],
        [("h0", "h2", 0.0095), ("h1", "h3", 0.096)],
        [("h0", "h3", 0.095), ("h1", "h2", 0.0097)],
    ]
    a = attribute(["h0", "h1", "h2", "h3"], _rounds(figures))
    assert a.guilty_hosts == ("h2",) and "3 of 3" in a.guilty[0].reason
    assert all(j.verdict != "round" for j in a.pairs)


def test_rounds_where_every_pair_failed_blame_no_host() -> None:
    # 8 hosts, the first round measured, the next two stopped as a whole (the run's deadline): every
    # pair of them failed at once. Before, each host was bad with two partners fast elsewhere: all
    # eight guilty.
    names = hosts(8)
    schedule = pairing_schedule(names, rounds=3, seed=0)
    results = [
        PairResult(
            p, 40.0 if r.index == 0 else None, None if r.index == 0 else "no record came back", r.index
        )
        for r in schedule.rounds
        for p in r.pairs
    ]
    a = attribute(names, results)
    assert a.guilty == () and a.suspect_links == () and a.inconclusive == ()
    assert {j.verdict for j in a.pairs if j.result.round != 0} == {"round"}
    assert any(n.startswith("round(s) 1, 2: every pair failed at once") for n in a.rule.notes), a.rule.notes
    # One failed pair beside completed ones is still the pair's: a dead host stays guilty.
    assert stage(16, seed=1, dead=frozenset({"node5"})).guilty_hosts == ("node5",)


def _pairs(figures: list[list[tuple[str, str, float | None]]]) -> list[PairResult]:
    return [
        PairResult(Pair.of(a, b), bw, None if bw is not None else "unreachable", round=i)
        for i, pairs in enumerate(figures)
        for a, b, bw in pairs
    ]


def test_guilt_needs_two_partners_proven_healthy_elsewhere() -> None:
    names = [f"n{i}" for i in range(8)]
    # n0's NIC is bad; n7 is lost after round 0; n3 is healthy, but met only n0 and n7.
    lost = _pairs(
        [
            [("n3", "n0", 40), ("n7", "n1", 100), ("n2", "n4", 100), ("n5", "n6", 100)],
            [("n3", "n7", None), ("n0", "n1", 40), ("n2", "n5", 100), ("n4", "n6", 100)],
        ]
    )
    a = attribute(names, lost, lost={"n7"})
    assert "n3" not in a.guilty_hosts and "n3" in {f.host for f in a.inconclusive}
    (n3,) = [f for f in a.inconclusive if f.host == "n3"]
    assert n3.kind == "bad_only_with_bad_partners" and "rerun with healthy partners" in n3.reason
    # n3 healthy; n0 and n1 bad with everyone; n3-n2 a noisy pair just under the limit: n3's one
    # healthy witness (n2) cannot tell its side from the link.
    noisy = _pairs(
        [
            [("n3", "n0", 40), ("n1", "n4", 40), ("n2", "n5", 100), ("n6", "n7", 100)],
            [("n3", "n1", 40), ("n0", "n5", 40), ("n2", "n6", 100), ("n4", "n7", 100)],
            [("n3", "n2", 84), ("n0", "n7", 40), ("n1", "n6", 40), ("n4", "n5", 100)],
        ]
    )
    a = attribute(names, noisy)
    assert set(a.guilty_hosts) == {"n0", "n1"}
    assert [f.host for f in a.inconclusive] == ["n3"]
    assert "only 1 of them (n2) is proven healthy" in a.inconclusive[0].reason


def test_a_host_lost_during_the_rounds_is_no_witness() -> None:
    names = [f"n{i}" for i in range(6)]
    # n5 is lost in the last round, paired with n0; n0-n1 came out slow once (noise). Unless n5 is
    # known lost, n0 is "bad with 2 partners fast elsewhere, none of them guilty".
    figures = _pairs(
        [
            [("n0", "n1", 80), ("n2", "n3", 100), ("n4", "n5", 100)],
            [("n0", "n2", 100), ("n1", "n4", 100), ("n3", "n5", 100)],
            [("n0", "n5", None), ("n1", "n3", 100), ("n2", "n4", 100)],
        ]
    )
    a = attribute(names, figures, lost={"n5"})
    assert a.guilty == ()
    assert {(f.pair.a, f.pair.b) for f in a.suspect_links} == {("n0", "n1"), ("n0", "n5")}


def test_a_host_lost_midway_never_gets_a_healthy_one_rejected() -> None:
    # One bad host and one lost from the second round on, in fleets of 8 to 32 over 2 and 3 rounds.
    # Before, a healthy host that met both was rejected in some runs of every size.
    class Lost(SimulatedFabric):
        """`who` is unreachable from the second round on."""

        who = ""

        def __call__(self, round_: Round, /) -> Sequence[PairResult]:
            self.dead = frozenset({self.who}) if round_.index >= 1 else frozenset()
            return super().__call__(round_)

    blamed: list[tuple[int, int, int, str, str, list[str]]] = []
    for n in (8, 16, 32):
        names = hosts(n)
        for rounds in (2, 3):
            for seed in range(60):
                rng = np.random.default_rng(seed)
                bad, gone = (str(x) for x in rng.choice(names, size=2, replace=False))
                fabric = Lost(NOMINAL, np.random.default_rng(seed), host_factor={bad: 0.4})
                fabric.who = gone
                run = run_schedule(pairing_schedule(names, rounds=rounds, seed=seed), fabric)
                wrong = set(attribute(names, run.results).guilty_hosts) - {bad, gone}
                if wrong:
                    blamed.append((n, rounds, seed, bad, gone, sorted(wrong)))
    assert blamed == []


def test_two_dead_hosts_are_guilty_whoever_they_met_last() -> None:
    # A healthy host whose last two partners were the dead ones fails its last two pairs: that is
    # not being lost midway, and it stays their witness. Every pair of dead hosts among 8, 3 rounds.
    names = hosts(8)
    escaped = [
        (dead, seed)
        for dead in itertools.combinations(names, 2)
        for seed in range(3)
        if not set(dead) <= set(stage(8, seed=seed, dead=frozenset(dead)).guilty_hosts)
    ]
    assert escaped == []
