"""Pairing rounds for the fabric stage: disjoint pairs per round, a new partner every round.

The construction is the circle method of round-robin tournaments: fix one seat, rotate the others
one place per round, and pair seat i with seat n-1-i. Over n-1 rounds (n even) every two hosts meet
exactly once, so any prefix of R rounds gives every host R distinct partners.

Odd counts: a phantom seat is added and whoever faces it sits the round out. The circle method
meets the phantom once per host, so the sitter is a different host every round. A sitter was
chosen over a triple because a three-host all-reduce is a different measurement (its busbw factor
is 4/3, not 1, and one slow member drags two others), which would make the pairs of a round
incomparable and blur attribution to two suspects at once; a sitter keeps every figure a clean
pair at the cost of one partner fewer for R hosts (use 3 rounds so they still meet two).

Determinism: hosts are sorted naturally (node2 before node10); a seed, when given, shuffles the
seats with its own `random.Random`, so the same host list and seed always give the same rounds.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence

from validation.fabric.model import Pair, Round, Schedule
from validation.gate.model import natural_key

DEFAULT_ROUNDS = 3


class ScheduleError(ValueError):
    """The host list or round count cannot make a schedule."""


def max_rounds(host_count: int) -> int:
    """Rounds with all-new partners that exist for this many hosts (every pair once)."""
    if host_count < 2:
        return 0
    return host_count - 1 if host_count % 2 == 0 else host_count


def _seats(hosts: Iterable[str], seed: int | None) -> list[str]:
    names = list(hosts)
    twice = sorted((h for h, n in Counter(names).items() if n > 1), key=natural_key)
    if twice:
        raise ScheduleError(f"host listed twice: {twice[0]!r}")
    if any(not h for h in names):
        raise ScheduleError("a host name is empty")
    seats = sorted(names, key=natural_key)
    if seed is not None:
        random.Random(seed).shuffle(seats)
    return seats


def pairing_schedule(hosts: Sequence[str], rounds: int = DEFAULT_ROUNDS, seed: int | None = None) -> Schedule:
    """Up to `rounds` rounds of disjoint pairs; fewer when the fleet has fewer new partners to offer
    (2 hosts: one round; 3 hosts: three). Fewer than two hosts: no rounds (nothing to pair)."""
    if rounds < 1:
        raise ScheduleError(f"rounds must be at least 1, got {rounds}")
    seats: list[str | None] = list(_seats(hosts, seed))
    ordered = tuple(sorted((s for s in seats if s is not None), key=natural_key))
    count = min(rounds, max_rounds(len(seats)))
    if len(seats) % 2:
        seats.append(None)  # the phantom: its partner sits the round out
    n = len(seats)
    fixed, ring = seats[0], seats[1:]
    made: list[Round] = []
    for r in range(count):
        # Rotate the ring r places; seat 0 stays put.
        table = [fixed, *ring[r:], *ring[:r]] if ring else [fixed]
        pairs: list[Pair] = []
        idle: list[str] = []
        for i in range(n // 2):
            x, y = table[i], table[n - 1 - i]
            if x is None or y is None:
                idle.extend(h for h in (x, y) if h is not None)
            else:
                pairs.append(Pair.of(x, y))
        made.append(Round(index=r, pairs=tuple(sorted(pairs, key=_pair_key)), idle=tuple(idle)))
    return Schedule(hosts=ordered, rounds=tuple(made), requested_rounds=rounds, seed=seed)


def _pair_key(p: Pair) -> tuple[object, ...]:
    return (natural_key(p.a), natural_key(p.b))
