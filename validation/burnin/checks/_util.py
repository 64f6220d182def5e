"""Small helpers the check modules share."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from fleet.catalog import Sku


def device_label(sku: Sku, device: Any) -> str:
    kind = {"gpu": "GPU", "tpu": "TPU"}.get(sku.accelerator.kind, "")
    return f"{kind} {device}" if kind and str(device) != "cpu" else str(device)


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def versions_of(raw: Mapping[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in raw.items() if v not in (None, "")}
