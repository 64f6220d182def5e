"""Fabric stage vs bisection: rounds and wall time to name every bad host, fleets of 8 to 4,096.

Both methods work on the same simulated fleet (validation/fabric/simulate.py: a pair runs at the
slower of its hosts times its link, 5 % Gaussian noise per measurement) with the same bad hosts,
and both see only measurements drawn through SimulatedFabric, noise included.

  fabric     the whole-fleet all-reduce, then 3 pairwise rounds from the circle-method schedule, all
             pairs of a round at the same time, attributed by validation.fabric.attribute; when a
             host comes out inconclusive, one more round pairs it with a proven-healthy host.
  bisection  the whole-fleet all-reduce; a slow set is halved and both halves rerun, recursively,
             down to single hosts (a single host runs with a known-good partner). Halves at the same
             depth are disjoint, so they are counted as one parallel round (generous to bisection);
             `runs` counts the all-reduces one at a time, as done by hand. A set is slow when its
             measured busbw is more than 15 % below the healthy figure (the margin the pairs'
             rule uses), so noise can send it down a healthy half (extra rounds) or, rarely, miss
             or name a host; a set's all-reduce runs at its slowest member times any bad link
             inside it, with SimulatedFabric's noise (a single host: a real pair with a
             known-good partner). Bisection cannot localise a link (the halving separates its
             ends and both halves are fast), so it reports the set instead.

Wall time model (explicit, simulated, not measured): an all-reduce over n hosts costs a launch and
rendezvous of 20 s + 5 ms per host (torchrun, c10d store), plus 20 iterations of 1 GiB at the
slowest member's bandwidth (25 GB/s healthy) with the ring's 2(n-1)/n factor and 2(n-1) steps of
30 us latency. A round's time is its slowest run.

`attr ms`: validation.fabric.attribute's compute time on the fabric rounds' results, after one
warm-up call, median [min-max] of 5 calls.

    .venv/bin/python benchmarks/fabric_rounds.py [--sizes 8,64,256,1024,4096] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from validation.fabric import Attribution, Pair, attribute, pairing_schedule  # noqa: E402
from validation.fabric.simulate import SimulatedFabric  # noqa: E402
from validation.fabric.stage import merge_results, run_schedule  # noqa: E402

HEALTHY_GBPS = 25.0
BAD_FACTOR = 0.1
NOISE = 0.05
SLOW_BELOW = 0.85 * HEALTHY_GBPS  # bisection's threshold: 15 % below healthy, the pairs' rule margin
ATTRIBUTE_REPEAT = 5
LAUNCH_S, PER_HOST_S = 20.0, 0.005
ITERATIONS, PAYLOAD_GB, STEP_LATENCY_S = 20, 2**30 / 1e9, 30e-6


def allreduce_s(n: int, slowest_factor: float) -> float:
    """Simulated wall time of one all-reduce over n hosts whose slowest member runs at this factor."""
    bandwidth = HEALTHY_GBPS * slowest_factor
    per_iteration = 2 * (n - 1) / n * PAYLOAD_GB / bandwidth + 2 * (n - 1) * STEP_LATENCY_S
    return LAUNCH_S + PER_HOST_S * n + ITERATIONS * per_iteration


@dataclass(frozen=True)
class Truth:
    hosts: list[str]
    bad_hosts: dict[str, float]
    bad_links: dict[Pair, float]

    def factor(self, members: list[str]) -> float:
        inside = set(members)
        worst = min([self.bad_hosts.get(h, 1.0) for h in members])
        for link, f in self.bad_links.items():
            if link.a in inside and link.b in inside:
                worst = min(worst, f)
        return worst


@dataclass(frozen=True)
class Row:
    hosts: int
    scenario: str
    fabric_rounds: int
    bisection_rounds: int
    bisection_runs: int
    fabric_wall_s: float
    bisection_wall_s: float
    fabric_found_all: bool
    fabric_false_rejects: int
    bisection_found_all: bool
    bisection_false_rejects: int
    attribute_ms: float  # median of ATTRIBUTE_REPEAT calls after a warm-up
    attribute_ms_min: float
    attribute_ms_max: float

    @property
    def rounds_ratio(self) -> float:
        return self.bisection_rounds / self.fabric_rounds

    @property
    def wall_ratio(self) -> float:
        return self.bisection_wall_s / self.fabric_wall_s


def fabric(truth: Truth, seed: int) -> tuple[int, float, Attribution, list[float]]:
    """Rounds (fleet-wide run included), simulated wall time, the attribution, and its compute ms
    (ATTRIBUTE_REPEAT samples after one warm-up call)."""
    sim = SimulatedFabric(HEALTHY_GBPS, np.random.default_rng(seed), NOISE, truth.bad_hosts, truth.bad_links)
    schedule = pairing_schedule(truth.hosts, seed=seed)
    rounds, wall = 1, allreduce_s(len(truth.hosts), truth.factor(truth.hosts))
    results = run_schedule(schedule, sim).results
    for r in schedule.rounds:
        rounds += 1
        wall += max(allreduce_s(2, truth.factor([p.a, p.b])) for p in r.pairs)
    found = attribute(truth.hosts, results)  # the warm-up, and the answer
    compute_ms = []
    for _ in range(ATTRIBUTE_REPEAT):
        started = time.perf_counter()
        attribute(truth.hosts, results)
        compute_ms.append((time.perf_counter() - started) * 1e3)
    if found.inconclusive:
        # One more round: each inconclusive host with its own proven-healthy partner.
        suspects = {f.host for f in found.inconclusive} | set(found.guilty_hosts)
        healthy = (h for h in truth.hosts if h not in suspects)
        pairs = [Pair.of(f.host, next(healthy)) for f in found.inconclusive]
        rerun = [sim.measure(p, len(schedule.rounds)) for p in pairs]
        rounds += 1
        wall += max(allreduce_s(2, truth.factor([p.a, p.b])) for p in pairs)
        found = attribute(truth.hosts, merge_results(results, rerun))
    return rounds, wall, found, compute_ms


def measure_set(sim: SimulatedFabric, members: list[str], good: str) -> float:
    """One all-reduce over members as bisection sees it: measured, with SimulatedFabric's noise."""
    if len(members) == 1:  # a single host runs with a known-good partner: a real pair
        measured = sim.measure(Pair.of(members[0], good)).busbw_gbps
        return 0.0 if measured is None else measured
    inside = set(members)
    slowest = min(sim.host_factor.get(h, 1.0) for h in members)
    links = [f for link, f in sim.link_factor.items() if link.a in inside and link.b in inside]
    true = sim.nominal_gbps * min([slowest, *links])
    return max(true * (1.0 + sim.noise * float(sim.rng.standard_normal())), 0.0)


def bisection(truth: Truth, seed: int) -> tuple[int, int, float, set[str], bool]:
    """Parallel rounds, all-reduce runs one at a time, simulated wall time, hosts named, and whether
    some slow set could not be split further (a bad link's ends ended up in different halves).
    Every decision reads a measurement (measure_set) against SLOW_BELOW, never the truth."""
    sim = SimulatedFabric(
        HEALTHY_GBPS, np.random.default_rng([seed, 1]), NOISE, truth.bad_hosts, truth.bad_links
    )
    healthy = [
        h
        for h in truth.hosts
        if h not in truth.bad_hosts and not any(h in (p.a, p.b) for p in truth.bad_links)
    ]
    good = healthy[0] if healthy else truth.hosts[0]  # the known-good partner, outside the fleet's faults

    def slow(members: list[str]) -> bool:
        return measure_set(sim, members, good) < SLOW_BELOW

    # Sibling groups: the two halves of one slow set, measured in the same round (the whole fleet
    # alone first).
    level: list[list[list[str]]] = [[truth.hosts]]
    rounds = runs = 0
    wall = 0.0
    named: set[str] = set()
    lost = False
    while level:
        rounds += 1
        sets = [members for group in level for members in group]
        runs += len(sets)
        # A single host runs with a known-good partner: a 2-host all-reduce.
        wall += max(allreduce_s(max(len(s), 2), truth.factor(s)) for s in sets)
        following: list[list[list[str]]] = []
        for group in level:
            verdicts = [slow(members) for members in group]
            if len(group) == 2 and not any(verdicts):
                lost = True  # slow as a whole, fast in halves: a link between the halves (or noise)
            for members, is_slow in zip(group, verdicts, strict=True):
                if not is_slow:
                    continue
                if len(members) == 1:
                    named.add(members[0])
                    continue
                half = len(members) // 2
                following.append([members[:half], members[half:]])
        level = following
    return rounds, runs, wall, named, lost


Scenario = tuple[str, dict[str, float], dict[Pair, float]]


def scenarios(n: int, rng: np.random.Generator, seed: int) -> list[Scenario]:
    hosts = [f"node{i}" for i in range(1, n + 1)]

    def pick(k: int) -> dict[str, float]:
        return {hosts[int(i)]: BAD_FACTOR for i in rng.choice(n, size=k, replace=False)}

    made: list[Scenario] = [("1 bad host", pick(1), {})]
    if n >= 64:  # 3 in 8 would spoil most pairs: beyond any fleet-relative rule, the SKU floor's job
        made.append(("3 bad hosts", pick(3), {}))
    if n >= 200:
        made.append(("1 % bad hosts", pick(n // 100), {}))
    # The bad link lies on a path the pairwise rounds exercise: a path between two hosts that are
    # never paired (nor ring neighbours in the whole-fleet run) is visible to no method at all.
    scheduled = [p for r in pairing_schedule(hosts, seed=seed).rounds for p in r.pairs]
    made.append(("1 bad link", {}, {scheduled[int(rng.integers(len(scheduled)))]: 0.2}))
    return made


def measure(sizes: list[int], seed: int) -> list[Row]:
    rng = np.random.default_rng(seed)
    rows: list[Row] = []
    for n in sizes:
        hosts = [f"node{i}" for i in range(1, n + 1)]
        for label, bad, links in scenarios(n, rng, seed):
            truth = Truth(hosts, bad, links)
            f_rounds, f_wall, found, ms = fabric(truth, seed)
            b_rounds, b_runs, b_wall, named, lost = bisection(truth, seed)
            guilty = set(found.guilty_hosts)
            if links:
                link = next(iter(links))
                f_ok = not guilty and [x.pair for x in found.suspect_links] == [link]
                b_ok = not lost and named == set()  # never true: the ends split and no half is slow
            else:
                f_ok = guilty == set(bad)
                b_ok = named == set(bad)
            rows.append(
                Row(
                    n,
                    label,
                    f_rounds,
                    b_rounds,
                    b_runs,
                    f_wall,
                    b_wall,
                    f_ok,
                    len(guilty - set(bad)),
                    b_ok,
                    len(named - set(bad)),
                    statistics.median(ms),
                    min(ms),
                    max(ms),
                )
            )
    return rows


def ratio(value: float, row: Row) -> str:
    # A ratio against a method that did not find the fault compares nothing.
    return f"{value:.2f}" if row.bisection_found_all and row.fabric_found_all else "n/a"


def table(rows: list[Row]) -> str:
    head = (
        f"{'hosts':>5} {'scenario':<13} {'fabric':>6} {'bisect':>6} {'runs':>5} {'rounds x':>8} "
        f"{'fabric s':>8} {'bisect s':>8} {'wall x':>6} {'fabric ok':>9} {'false rej':>9} {'bisect ok':>9} "
        f"{'b false rej':>11} {'attr ms [min-max]':>21}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r.hosts:>5} {r.scenario:<13} {r.fabric_rounds:>6} {r.bisection_rounds:>6} {r.bisection_runs:>5} "
            f"{ratio(r.rounds_ratio, r):>8} {r.fabric_wall_s:>8.0f} {r.bisection_wall_s:>8.0f} "
            f"{ratio(r.wall_ratio, r):>6} "
            f"{'yes' if r.fabric_found_all else 'NO':>9} {r.fabric_false_rejects:>9} "
            f"{'yes' if r.bisection_found_all else 'NO':>9} {r.bisection_false_rejects:>11} "
            f"{f'{r.attribute_ms:.1f} [{r.attribute_ms_min:.1f}-{r.attribute_ms_max:.1f}]':>21}"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--sizes", default="8,64,256,1024,4096", help="comma-separated fleet sizes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    rows = measure(sizes, args.seed)
    if args.json:
        print(
            json.dumps(
                [{**asdict(r), "rounds_ratio": r.rounds_ratio, "wall_ratio": r.wall_ratio} for r in rows],
                indent=2,
            )
        )
    else:
        print(table(rows))
        print(
            "\nrounds: sequential all-reduce rounds incl. the whole-fleet run; runs: bisection's all-reduces "
            "one at a time;\nrounds x / wall x: bisection / fabric (n/a: bisection did not find it); fabric ok: every bad host guilty (or the "
            "bad link a suspect) and nobody else;\nbisect ok: every bad host named and nobody else; b false rej: healthy hosts "
            "bisection named; attr ms: attribute's compute time, median [min-max] of 5 after a warm-up."
        )
    return 0 if all(r.fabric_found_all and r.fabric_false_rejects == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
