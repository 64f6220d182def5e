"""Which regions and zones exist, per cloud (fleet/catalog/regions.yaml), and the spec's rule for them.

A zone is checked against its cloud's own list, not by prefix: `us-east-1-evil` starts with
`us-east-1` and is still no zone. Each message names the list's public source.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

from fleet import yamlsafe


@cache
def _regions() -> dict[str, Any]:
    text = resources.files("fleet.catalog").joinpath("regions.yaml").read_text(encoding="utf-8")
    data: dict[str, Any] = yamlsafe.loads(text)
    return data


def source(cloud: str) -> str:
    return str(_regions()[cloud]["source"])


def regions(cloud: str) -> tuple[str, ...]:
    """Every region the cloud offers (for Azure, with and without availability zones)."""
    doc = _regions()[cloud]
    if cloud == "aws":
        return tuple(doc["regions"])
    if cloud == "gcp":
        return tuple(doc["regions"])
    return tuple(doc["regions_with_zones"]) + tuple(doc["regions_without_zones"])


def zones(cloud: str, region: str) -> tuple[str, ...]:
    """The zone names a fleet in `region` may name; empty for an unknown region."""
    doc = _regions()[cloud]
    if region not in regions(cloud):
        return ()
    if cloud == "aws":
        return tuple(f"{region}{letter}" for letter in doc["zone_letters"])
    if cloud == "gcp":
        return tuple(f"{region}-{letter}" for letter in doc["regions"][region])
    return tuple(doc["zones"]) if region in doc["regions_with_zones"] else ()


def location_problems(cloud: str, region: str | None, zone: str | None) -> Iterator[tuple[str, str]]:
    """(field, message) for a region or zone the cloud does not have."""
    if cloud not in ("aws", "gcp", "azure"):
        return
    if not region:
        yield "region", f"required for {cloud}"
    elif region not in regions(cloud):
        yield (
            "region",
            f"{region!r} is not a region of {cloud}; allowed: the regions listed at {source(cloud)}",
        )
        return
    if not zone:
        yield "zone", f"required for {cloud}: the fabric spans one zone"
        return
    if not region:
        return
    allowed = zones(cloud, region)
    if zone not in allowed:
        shown = ", ".join(allowed) if allowed else f"none: {region} has no availability zones"
        yield (
            "zone",
            f"{zone!r} is not a zone of {cloud} region {region}; allowed: {shown} (per {source(cloud)})",
        )
