"""A simulated fabric: a `RoundRunner` over a made-up fleet, for tests, benchmarks and dry runs.

Each host has a speed factor (1 healthy, 0.1 a host whose NIC runs at a tenth), each pair a link
factor (1 unless a bad link), and every measurement multiplicative Gaussian noise. A pair runs at
the slower of its two hosts times its link, which is how a two-rank all-reduce behaves: the
collective finishes when the slower side does. Dead hosts never complete a pair.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from validation.fabric.model import Pair, PairResult, Round

DEAD_REASON = "timeout: rendezvous did not complete (host unreachable)"


@dataclass
class SimulatedFabric:
    nominal_gbps: float
    rng: np.random.Generator
    noise: float = 0.05  # standard deviation, as a fraction of the pair's true busbw
    host_factor: Mapping[str, float] = field(default_factory=dict)
    link_factor: Mapping[Pair, float] = field(default_factory=dict)
    dead: frozenset[str] = frozenset()

    def true_busbw(self, pair: Pair) -> float:
        slower = min(self.host_factor.get(pair.a, 1.0), self.host_factor.get(pair.b, 1.0))
        return self.nominal_gbps * slower * self.link_factor.get(pair, 1.0)

    def measure(self, pair: Pair, round_index: int | None = None) -> PairResult:
        if pair.a in self.dead or pair.b in self.dead:
            return PairResult(pair, None, DEAD_REASON, round_index)
        value = self.true_busbw(pair) * (1.0 + self.noise * float(self.rng.standard_normal()))
        return PairResult(pair, max(value, 0.0), None, round_index)

    def __call__(self, round_: Round, /) -> Sequence[PairResult]:
        return [self.measure(p, round_.index) for p in round_.pairs]
