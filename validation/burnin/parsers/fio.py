"""fio --output-format=json: throughput and IOPS per direction, summed over the jobs.

fio 3.2 added `bw_bytes` (bytes/s). Older fio, still shipped by long-term distributions, has only
`bw`, in KiB/s (fio's default kb_base of 1024). `iops` is in both.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Direction:
    bytes_per_s: float
    iops: float


def totals(text: str, direction: str) -> Direction:
    """Bandwidth and IOPS of 'read' or 'write', summed over the jobs of one fio run."""
    total_bytes = total_iops = 0.0
    for job in _jobs(text):
        if job.get("error"):
            raise ValueError(f"fio job {job.get('jobname')!r} failed with error {job['error']}")
        stats = job.get(direction)
        if not isinstance(stats, dict):
            raise ValueError(f"fio job {job.get('jobname')!r} has no {direction!r} section")
        if "bw_bytes" in stats:
            total_bytes += float(stats["bw_bytes"])
        elif "bw" in stats:
            total_bytes += float(stats["bw"]) * 1024
        else:
            raise ValueError(f"fio job {job.get('jobname')!r}: {direction} has neither bw_bytes nor bw")
        total_iops += float(stats.get("iops") or 0.0)
    return Direction(total_bytes, total_iops)


def throughput_mbps(text: str, direction: str) -> float:
    """Throughput of 'read' or 'write' in MB/s (10^6 bytes); ValueError when none was measured."""
    bandwidth = totals(text, direction).bytes_per_s
    if bandwidth <= 0:
        raise ValueError(f"fio: no {direction} bandwidth reported")
    return bandwidth / 1e6


def iops(text: str, direction: str) -> float:
    return totals(text, direction).iops


def _jobs(text: str) -> list[dict[str, Any]]:
    # fio prints notes before the JSON document when it falls back (e.g. no O_DIRECT), and the
    # normal report after it when run with --output-format=json,normal.
    start = text.find("{")
    if start < 0:
        raise ValueError("fio: no JSON document in the output")
    try:
        data, _ = json.JSONDecoder().raw_decode(text[start:])
    except json.JSONDecodeError as exc:
        raise ValueError(f"fio: JSON not readable: {exc}") from None
    jobs = data.get("jobs") if isinstance(data, dict) else None
    if not jobs or not isinstance(jobs, list):
        raise ValueError("fio: JSON has no jobs")
    return [j for j in jobs if isinstance(j, dict)]
