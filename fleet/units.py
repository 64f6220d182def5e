"""Storage units, written once: a TiB is 1024 GiB everywhere in fleetforge.

Where a provider's API defines its own numbers (FSx for Lustre calls 1,200 GiB "1.2 TiB"), the rule
for that provider keeps the provider's definition beside it and says so; nothing else converts.
"""

from __future__ import annotations

GIB_PER_TIB = 1024


def tib_to_gib(tib: float) -> float:
    return tib * GIB_PER_TIB


def gib_to_tib(gib: float) -> float:
    return gib / GIB_PER_TIB
