"""fio --output-format=json: sequential throughput per direction."""

from __future__ import annotations

import json
from typing import Any


def throughput_mbps(text: str, direction: str) -> float:
    """Sum of `bw_bytes` over jobs for 'read' or 'write', in MB/s (10^6 bytes)."""
    # fio prints notes before the JSON document when it falls back (e.g. no O_DIRECT).
    start = text.find("{")
    if start < 0:
        raise ValueError("fio: no JSON document in the output")
    data: Any = json.loads(text[start:])
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not jobs:
        raise ValueError("fio: JSON has no jobs")
    total = 0.0
    for job in jobs:
        if job.get("error"):
            raise ValueError(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
        total += float(job[direction]["bw_bytes"])
    if total <= 0:
        raise ValueError(f"fio: no {direction} bandwidth reported")
    return total / 1e6
