"""Attribution: which host, or which link, made the pairs of a fabric stage slow or fail.

Each pair is judged against the fleet's pairs, robustly, with the gate's outlier rule: slow when
below the median of completed pairs by more than k x MAD *and* by more than a fraction of the
median (so a tight fleet's 5 % noise is not a fault), always when more than 30 % below it (a small
fleet's MAD can be inflated), or below the SKU's absolute floor when one is given. A pair that did not complete (timeout, rendezvous error) is bad whatever the numbers say.

Then, per host, with its partners as witnesses. A witness is a host fast with at least one
partner (its own side is proven healthy) and not lost during the rounds (`lost`: a host that
became unreachable mid-stage fails its later pairs whatever its partners are, so it vouches for
nobody):
- a host bad with every partner (two at least), two of whom (MIN_PARTNERS_FOR_GUILT) are
  witnesses, is guilty: those partners are proven healthy, so the fault is on its side. All-failed
  reads as unreachable. With one witness, host and link cannot be told apart.
- a pair bad only together is a suspect link: both hosts named, neither rejected, unless a host
  keeps turning up in suspect links with two or more different witnesses: the fault repeats on its
  side, and it is guilty too.
- a host bad with every partner but with fewer than two witnesses among them (its other partners
  are bad everywhere, or were lost) has no healthy evidence against it: inconclusive (rerun it with
  healthy partners); likewise a host in no measured pair at all.

A round in which every completed pair (two at least) is slow says nothing about any one host or
link: the pairs run at the same time, so what slowed all of them was common to that moment (the
machines busy with something else, a congested spine). Those pairs count as neither bad nor
good, and the rule's notes name the round; otherwise one busy minute would make every host look
slow with two partners, and all of them guilty. Likewise a round in which every pair (two at
least) failed: what stopped all of them at once was the round (its play, the controller, the
network it ran over), not every host in it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace

import numpy as np

from validation.fabric.model import (
    BUSBW_UNIT,
    HOST_METRIC,
    Attribution,
    HostFigures,
    HostFinding,
    HostKind,
    JudgedPair,
    LinkFinding,
    Pair,
    PairResult,
    SlowRule,
    Verdict,
)
from validation.gate.model import MAD_SCALE, natural_key

DEFAULT_MAD_K = 4.0
# Wider than the gate's 5 %: a pair figure is one short two-host run, noisier than a node's own
# figures, and in a small fleet the MAD of a dozen pairs can come out at a fraction of the real
# spread; with 5 % noise a 5 % margin named links from noise alone (8 hosts, 12 pairs). 15 % is
# three standard deviations of that noise, and far above it sit the faults worth naming.
DEFAULT_MIN_RELATIVE_MARGIN = 0.15
# A pair this far below the median is slow whatever the MAD says: a dozen pairs can give a MAD
# that is twice the real spread, and then k x MAD let a host at 60 % of the fleet pass. 30 % is six
# standard deviations of 5 % noise, so no healthy pair reaches it.
MAX_RELATIVE_MARGIN = 0.30
MIN_PAIRS_FOR_STATS = 3  # fewer completed pairs: no fleet-relative rule, the floor alone
MIN_PARTNERS_FOR_GUILT = 2  # with one partner, host and link cannot be told apart
MIN_PAIRS_FOR_ROUND_RULE = 2  # a round of one pair has nothing to be compared with
REPEATED_LINKS_FOR_GUILT = 2


class AttributionInputError(ValueError):
    """The measurements name hosts that were not listed, or list a host twice."""


def slow_rule(
    busbw: Sequence[float],
    *,
    mad_k: float = DEFAULT_MAD_K,
    min_relative_margin: float = DEFAULT_MIN_RELATIVE_MARGIN,
    floor_gbps: float | None = None,
    min_pairs: int = MIN_PAIRS_FOR_STATS,
) -> SlowRule:
    """The limit a completed pair must reach, from the fleet's completed pairs and the floor."""
    notes: list[str] = []
    if len(busbw) < min_pairs:
        notes.append(f"{len(busbw)} completed pair(s), fewer than {min_pairs}: relative rule not applied")
        return SlowRule(None, None, None, floor_gbps, mad_k, min_relative_margin, tuple(notes))
    values = np.asarray(busbw, dtype=float)
    median = float(np.median(values))
    mad = float(np.median(np.abs(values - median))) * MAD_SCALE
    if median <= 0:
        notes.append("median busbw is 0: no scale for a relative rule")
        return SlowRule(median, mad, None, floor_gbps, mad_k, min_relative_margin, tuple(notes))
    relative = max(
        min(median - mad_k * mad, median * (1 - min_relative_margin)),
        median * (1 - max(MAX_RELATIVE_MARGIN, min_relative_margin)),
    )
    return SlowRule(median, mad, relative, floor_gbps, mad_k, min_relative_margin, tuple(notes))


def reference_pairs(
    results: Sequence[PairResult],
    *,
    mad_k: float = DEFAULT_MAD_K,
    min_relative_margin: float = DEFAULT_MIN_RELATIVE_MARGIN,
) -> tuple[list[float], set[str]]:
    """The completed pairs the fleet's median and MAD come from, and the hosts left out of them.

    Every bad host spoils all of its pairs, so bad pairs outnumber bad hosts about two to one and
    a pair median breaks down once some 30 % of hosts are bad. Judged by its best pair instead,
    a host is an outlier only when slow with everyone, which keeps the 50 % breakdown of a median
    over hosts; hosts that are outliers on that figure are left out of the pair statistics.
    """
    completed = [(r.pair, r.busbw_gbps) for r in results if r.busbw_gbps is not None]
    values = [v for _, v in completed]
    best: dict[str, float] = {}
    for pair, v in completed:
        for h in (pair.a, pair.b):
            best[h] = max(best.get(h, 0.0), v)
    host_rule = slow_rule(list(best.values()), mad_k=mad_k, min_relative_margin=min_relative_margin)
    limit = host_rule.relative_limit_gbps
    if limit is None:
        return values, set()
    slow_hosts = {h for h, v in best.items() if v < limit}
    kept = [v for pair, v in completed if pair.a not in slow_hosts and pair.b not in slow_hosts]
    if len(kept) < MIN_PAIRS_FOR_STATS:
        return values, set()
    return kept, slow_hosts


def _verdict(result: PairResult, rule: SlowRule) -> Verdict:
    if result.busbw_gbps is None:
        return "failed"
    limit = rule.limit_gbps
    return "slow" if limit is not None and result.busbw_gbps < limit else "ok"


def _check_hosts(hosts: Sequence[str], results: Iterable[PairResult]) -> None:
    twice = sorted((h for h, n in Counter(hosts).items() if n > 1), key=natural_key)
    if twice:
        raise AttributionInputError(f"host listed twice: {twice[0]!r}")
    known = set(hosts)
    for r in results:
        for h in (r.pair.a, r.pair.b):
            if h not in known:
                raise AttributionInputError(f"pair {r.pair.a!r}-{r.pair.b!r} names an unlisted host {h!r}")


def attribute(
    hosts: Sequence[str],
    results: Sequence[PairResult],
    *,
    mad_k: float = DEFAULT_MAD_K,
    min_relative_margin: float = DEFAULT_MIN_RELATIVE_MARGIN,
    floor_gbps: float | None = None,
    metric: str = HOST_METRIC,
    unit: str = BUSBW_UNIT,
    lost: Collection[str] = (),
) -> Attribution:
    """Judge every pair, then name the guilty hosts, suspect links and inconclusive hosts.

    The figures may be any bandwidth where higher is better (all-reduce busbw in GB/s, ib_write_bw
    in Gb/s): `metric` names each host's best pair in its results and `unit` is what reasons say.
    `lost` are hosts that became unreachable during the rounds: never a witness for a partner."""
    _check_hosts(hosts, results)
    ordered = tuple(sorted(hosts, key=natural_key))
    reference, left_out = reference_pairs(results, mad_k=mad_k, min_relative_margin=min_relative_margin)
    rule = slow_rule(reference, mad_k=mad_k, min_relative_margin=min_relative_margin, floor_gbps=floor_gbps)
    if left_out:
        shown = ", ".join(sorted(left_out, key=natural_key)[:10]) + (" ..." if len(left_out) > 10 else "")
        note = f"statistics from {len(reference)} completed pairs without far-slow hosts ({shown})"
        rule = replace(rule, notes=(*rule.notes, note))
    judged, slow_rounds, failed_rounds = _discount_slow_rounds(
        tuple(JudgedPair(r, _verdict(r, rule), unit) for r in results), floor_gbps
    )
    if slow_rounds:
        note = (
            f"round(s) {', '.join(map(str, slow_rounds))}: every pair slow at once, common to the moment "
            "(load, congestion), not counted against any host or link"
        )
        rule = replace(rule, notes=(*rule.notes, note))
    if failed_rounds:
        note = (
            f"round(s) {', '.join(map(str, failed_rounds))}: every pair failed at once, common to the "
            "round (its play, the controller, the network), not counted against any host or link"
        )
        rule = replace(rule, notes=(*rule.notes, note))
    # host -> partner -> every measurement of that pair (a pair may be measured in several runs)
    table: dict[str, dict[str, list[JudgedPair]]] = {h: {} for h in ordered}
    for j in judged:
        p = j.result.pair
        table[p.a].setdefault(p.b, []).append(j)
        table[p.b].setdefault(p.a, []).append(j)

    def bad_with(host: str, partner: str) -> bool:
        # Fail closed: one bad measurement of a pair makes the pair bad.
        return any(j.bad for j in table[host][partner])

    def fast_with(host: str, partner: str) -> bool:
        return not bad_with(host, partner) and any(j.verdict == "ok" for j in table[host][partner])

    def counted(host: str, partner: str) -> bool:
        """The pair says something about the two hosts: not only measured in all-slow rounds."""
        return any(j.verdict != "round" for j in table[host][partner])

    # Fast with at least one partner: the host's own side of the fabric is proven healthy. A witness
    # is such a host that was not lost during the rounds: one lost mid-stage fails its later pairs
    # whatever its partner, so a pair failed with it says nothing about the partner.
    proven = {h for h in ordered if any(fast_with(h, p) for p in table[h])}
    witnesses = proven - set(lost) - _lost_midway(judged)
    guilty: dict[str, HostFinding] = {}
    inconclusive: dict[str, HostFinding] = {}
    for h in ordered:
        partners = table[h]
        if not partners:
            inconclusive[h] = HostFinding(h, "not_measured", "in no measured pair: never measured", ())
            continue
        # Not proven: bad with every partner whose pair counts.
        judged_by = [p for p in partners if counted(h, p)]
        if h in proven or len(judged_by) < MIN_PARTNERS_FOR_GUILT:
            continue
        evidence = _evidence(table, h)
        shown = "; ".join(e.describe(h) for e in evidence)
        # Only a bad pair with a witness is evidence against this host's side; one witness cannot
        # tell the host from the link between them.
        witnessed = [p for p in judged_by if p in witnesses and bad_with(h, p)]
        if len(witnessed) >= MIN_PARTNERS_FOR_GUILT:
            failed = all(e.verdict == "failed" for e in evidence if e.bad)
            kind: HostKind = "failed_with_every_partner" if failed else "slow_with_every_partner"
            word = "failed" if failed else "bad"
            reason = f"{word} with every partner ({len(judged_by)} of {len(partners)}): {shown}"
            note = "" if failed else _limit_note(rule, unit)
            guilty[h] = HostFinding(h, kind, reason + note, evidence)
        else:
            if witnessed:
                said = (
                    f"bad with every partner, but only {len(witnessed)} of them ({', '.join(witnessed)}) "
                    f"is proven healthy, fewer than {MIN_PARTNERS_FOR_GUILT}; the others are bad with "
                    "everyone or were lost during the rounds"
                )
            else:
                said = "bad only with partners that are bad with everyone or were lost during the rounds"
            reason = f"{said}: {shown}; rerun with healthy partners"
            inconclusive[h] = HostFinding(h, "bad_only_with_bad_partners", reason, evidence)

    explained = set(guilty) | set(inconclusive)
    links = _bad_pairs(table, bad_with, explained)
    # A host whose side keeps failing with different, otherwise healthy, partners is guilty.
    link_partners: dict[str, set[str]] = {}
    for pair in links:
        # A partner counts only as a witness: healthy elsewhere and not lost during the rounds.
        if pair.b in witnesses:
            link_partners.setdefault(pair.a, set()).add(pair.b)
        if pair.a in witnesses:
            link_partners.setdefault(pair.b, set()).add(pair.a)
    for h in ordered:
        bad = link_partners.get(h, set())
        if len(bad) >= REPEATED_LINKS_FOR_GUILT:
            evidence = tuple(j for p in sorted(bad, key=natural_key) for j in table[h][p] if j.bad)
            shown = "; ".join(e.describe(h) for e in evidence)
            reason = f"bad with {len(bad)} of {len(table[h])} partners, none of them guilty: {shown}"
            guilty[h] = HostFinding(h, "repeated_links", reason + _limit_note(rule, unit), evidence)
    suspect = tuple(
        LinkFinding(pair, tuple(j for j in table[pair.a][pair.b] if j.bad))
        for pair in links
        if pair.a not in guilty and pair.b not in guilty
    )
    return Attribution(
        hosts=ordered,
        rule=rule,
        pairs=judged,
        guilty=tuple(guilty[h] for h in ordered if h in guilty),
        suspect_links=suspect,
        inconclusive=tuple(inconclusive[h] for h in ordered if h in inconclusive),
        figures={h: _figures(h, table[h], metric) for h in ordered},
        metric=metric,
        unit=unit,
    )


def _discount_slow_rounds(
    judged: tuple[JudgedPair, ...], floor_gbps: float | None
) -> tuple[tuple[JudgedPair, ...], list[int], list[int]]:
    """The pairs with those of every all-slow round and every all-failed round marked "round", and
    those rounds (all-slow, all-failed). A pair below the SKU's absolute floor stays slow: the floor
    does not move with the moment."""
    by_round: dict[int, list[JudgedPair]] = {}
    every: dict[int, list[JudgedPair]] = {}
    for j in judged:
        if j.result.round is None:
            continue
        every.setdefault(j.result.round, []).append(j)
        if j.verdict != "failed":
            by_round.setdefault(j.result.round, []).append(j)
    slow_rounds = sorted(
        n
        for n, pairs in by_round.items()
        if len(pairs) >= MIN_PAIRS_FOR_ROUND_RULE and all(j.verdict == "slow" for j in pairs)
    )
    failed_rounds = sorted(
        n
        for n, pairs in every.items()
        if len(pairs) >= MIN_PAIRS_FOR_ROUND_RULE and all(j.verdict == "failed" for j in pairs)
    )
    if not slow_rounds and not failed_rounds:
        return judged, [], []
    marked = tuple(
        replace(j, verdict="round")
        if (j.result.round in slow_rounds and j.verdict == "slow" and not _below(j, floor_gbps))
        or (j.result.round in failed_rounds and j.verdict == "failed")
        else j
        for j in judged
    )
    return marked, slow_rounds, failed_rounds


def _lost_midway(judged: Sequence[JudgedPair]) -> set[str]:
    """Hosts that look lost during the rounds even where nobody said so (a pairs file, a simulated
    fabric): they completed pairs, then failed every pair from some round on, in two rounds at
    least. Their partners in those rounds were fine or not, the pairs cannot say: such a host is no
    witness. Pairs of an all-failed round ("round") are the round's, not the host's. A failed pair
    counts toward that only when its partner completed a pair of its own: failing with hosts that
    complete nothing (a dead HCA) says nothing about this host, and must not take a healthy
    witness away from them."""
    completed_any = {h for j in judged if j.result.completed for h in (j.result.pair.a, j.result.pair.b)}
    by_host: dict[str, list[tuple[int, bool, str]]] = {}
    for j in judged:
        r = j.result
        if r.round is None or (j.verdict == "round" and not r.completed):
            continue
        for h, partner in ((r.pair.a, r.pair.b), (r.pair.b, r.pair.a)):
            by_host.setdefault(h, []).append((r.round, r.completed, partner))
    lost: set[str] = set()
    for h, seen in by_host.items():
        seen.sort()
        trailing = 0
        for _, completed, partner in reversed(seen):
            if completed or partner not in completed_any:
                break
            trailing += 1
        if MIN_PARTNERS_FOR_GUILT <= trailing < len(seen):
            lost.add(h)
    return lost


def _below(j: JudgedPair, floor_gbps: float | None) -> bool:
    bw = j.result.busbw_gbps
    return floor_gbps is not None and bw is not None and bw < floor_gbps


def _evidence(table: dict[str, dict[str, list[JudgedPair]]], host: str) -> tuple[JudgedPair, ...]:
    return tuple(j for p in sorted(table[host], key=natural_key) for j in table[host][p])


def _limit_note(rule: SlowRule, unit: str) -> str:
    limit = rule.limit_gbps
    return "" if limit is None else f" (limit {limit:.4g} {unit})"


def _bad_pairs(
    table: dict[str, dict[str, list[JudgedPair]]],
    bad_with: Callable[[str, str], bool],
    explained: Collection[str],
) -> list[Pair]:
    """Bad pairs neither of whose hosts is already explained (guilty or inconclusive)."""
    found: list[Pair] = []
    for h, partners in table.items():
        for p in partners:
            pair = Pair.of(h, p)
            if pair.a == h and bad_with(h, p) and h not in explained and p not in explained:
                found.append(pair)
    return sorted(found, key=lambda x: (natural_key(x.a), natural_key(x.b)))


def _figures(host: str, partners: dict[str, list[JudgedPair]], metric: str) -> HostFigures:
    measured = [j for js in partners.values() for j in js]
    values = [j.result.busbw_gbps for j in measured if j.result.busbw_gbps is not None]
    return HostFigures(
        host=host,
        partners=len(partners),
        completed=len(values),
        failed=len(measured) - len(values),
        best_gbps=max(values) if values else None,
        median_gbps=float(np.median(values)) if values else None,
        worst_gbps=min(values) if values else None,
        metric=metric,
    )
