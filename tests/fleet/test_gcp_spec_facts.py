"""GCP facts a spec is checked against, as Google documents them today (sources in the modules).

Managed Lustre: capacity per performance tier with both step sizes up to each tier's real maximum,
and the Dynamic tier (fleet/catalog/managed_lustre.py). TPU: slice shapes by topology per
generation, chips not cores, the largest v5p slice smaller than the pod (fleet/catalog/tpu.py).
"""

from __future__ import annotations

from typing import Any

import pytest

from fleet.catalog import managed_lustre
from fleet.spec import SpecError, spec_from_mapping
from tests.fleet.test_spec import DELETE, GCP, with_


def lustre(gib: int, tput: int | None = 250, **extra: Any) -> dict[str, Any]:
    doc = with_(GCP, "storage.filesystem.capacity_gib", gib)
    doc = with_(doc, "storage.filesystem.throughput_mbps_per_tib", DELETE if tput is None else tput)
    for key, value in extra.items():
        doc = with_(doc, f"storage.filesystem.{key}", value)
    return doc


def problems(doc: dict[str, Any]) -> dict[str, str]:
    try:
        spec_from_mapping(doc)
    except SpecError as exc:
        return dict(exc.problems)
    return {}


# (throughput, capacity GiB, accepted)
LUSTRE_CASES = [
    (1000, 9_000, True),
    (1000, 954_000 + 9_000, True),  # beyond the old single-step maximum
    (1000, 1_530_000, True),  # the threshold itself, small step
    (1000, 1_530_000 + 9_000, False),  # above the threshold the small step no longer applies
    (1000, 22 * 72_000, True),  # the first multiple of the large step above the threshold
    (1000, 10_008_000, True),  # the tier's maximum
    (1000, 10_008_000 + 72_000, False),
    (1000, 4_500, False),
    (500, 18_000, True),
    (500, 3_060_000, True),
    (500, 3_060_000 + 18_000, False),
    (500, 20_016_000, True),
    (500, 20_016_000 + 144_000, False),
    (250, 36_000, True),
    (250, 40_000, False),
    (250, 6_120_000 + 36_000, False),
    (250, 40_032_000, True),
    (125, 72_000, True),
    (125, 12_240_000, True),
    (125, 12_240_000 + 72_000, False),
    (125, 100_000, False),
]


@pytest.mark.parametrize(("tput", "gib", "ok"), LUSTRE_CASES, ids=[f"{t}-{g}" for t, g, _ in LUSTRE_CASES])
def test_managed_lustre_capacity_per_tier(tput: int, gib: int, ok: bool) -> None:
    found = problems(lustre(gib, tput))
    if ok:
        assert found == {}
    else:
        assert set(found) == {"storage.filesystem.capacity_gib"}
        assert managed_lustre.SOURCE in found["storage.filesystem.capacity_gib"]


@pytest.mark.parametrize(
    ("gib", "ok"),
    [(472_000, True), (944_000, True), (84_016_000, True), (500_000, False), (84_488_000, False)],
)
def test_managed_lustre_dynamic_tier(gib: int, ok: bool) -> None:
    found = problems(lustre(gib, None, tier="dynamic"))
    assert (found == {}) is ok
    if not ok:
        assert "Dynamic" in found["storage.filesystem.capacity_gib"]


def test_the_dynamic_tier_takes_no_fixed_throughput_and_is_managed_lustres_only() -> None:
    assert set(problems(lustre(472_000, 250, tier="dynamic"))) == {
        "storage.filesystem.throughput_mbps_per_tib"
    }
    assert "tier: dynamic" in problems(lustre(36_000, 300))["storage.filesystem.throughput_mbps_per_tib"]


def test_only_managed_lustre_has_a_dynamic_tier() -> None:
    from tests.fleet.test_spec import AWS

    assert set(problems(with_(AWS, "storage.filesystem.tier", "dynamic"))) == {"storage.filesystem.tier"}
