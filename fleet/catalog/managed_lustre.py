"""Google Cloud Managed Lustre: the capacities each performance tier accepts.

Source: https://cloud.google.com/managed-lustre/docs/performance-tiers (the table of minimum and
maximum capacity and step size per tier; the same table heads
https://cloud.google.com/managed-lustre/docs/increase-capacity). The three fastest tiers have two
step sizes: a small one up to a threshold and a larger one above it, up to the tier's maximum
(every capacity above the threshold is a multiple of the larger step). The 125 MB/s/TiB tier and
the Dynamic tier have one step each. Older copies of the page list lower maximums (954,000 GiB at
1000 MB/s/TiB with one step); specs follow today's table.
"""

from __future__ import annotations

from dataclasses import dataclass

SOURCE = "https://cloud.google.com/managed-lustre/docs/performance-tiers"
DYNAMIC = "dynamic"


@dataclass(frozen=True)
class Tier:
    name: str
    minimum_gib: int
    step_gib: int
    threshold_gib: int  # the small step applies up to here ...
    large_step_gib: int  # ... and this one above it
    maximum_gib: int

    def fits(self, gib: float) -> bool:
        if not float(gib).is_integer() or gib < self.minimum_gib or gib > self.maximum_gib:
            return False
        step = self.step_gib if gib <= self.threshold_gib else self.large_step_gib
        return int(gib) % step == 0

    def allowed(self) -> str:
        text = f"{self.minimum_gib:,} to {self.threshold_gib:,} GiB in steps of {self.step_gib:,} GiB"
        if self.threshold_gib < self.maximum_gib:
            text += (
                f", or above that up to {self.maximum_gib:,} GiB in multiples of {self.large_step_gib:,} GiB"
            )
        return text


# Throughput (MB/s per TiB) -> tier.
TIERS: dict[int, Tier] = {
    1000: Tier("1000 MB/s/TiB", 9_000, 9_000, 1_530_000, 72_000, 10_008_000),
    500: Tier("500 MB/s/TiB", 18_000, 18_000, 3_060_000, 144_000, 20_016_000),
    250: Tier("250 MB/s/TiB", 36_000, 36_000, 6_120_000, 288_000, 40_032_000),
    125: Tier("125 MB/s/TiB", 72_000, 72_000, 12_240_000, 72_000, 12_240_000),
}
# Dynamic tier: throughput follows the access pattern (25 MB/s/TiB aggregate); no fixed throughput.
DYNAMIC_TIER = Tier("Dynamic", 472_000, 472_000, 84_016_000, 472_000, 84_016_000)
