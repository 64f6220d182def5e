"""nccl-tests result table (all_reduce_perf and its siblings): bus bandwidth at the largest
message size and the data-corruption count.

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
      1073741824     268435456     float     sum      -1   8109.1  132.41  231.72      0   8109.7  132.40  231.70      0

The first busbw / #wrong pair is out-of-place, the second in-place. #wrong reads N/A when the run
did not validate its results (-c 0). Versions before nccl-tests 2.0 printed a maximum "error"
instead of a count, and no redop / root columns: the columns are found by name, not position.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(?P<v>[0-9.]+)")


@dataclass(frozen=True)
class CollectiveResult:
    bytes: int  # the largest message size in the table
    busbw_out_gbps: float
    busbw_in_gbps: float
    # Rows whose result was wrong, summed over every size and both placements; None when the
    # run did not count them (validation off, or a version that printed an error magnitude).
    wrong: int | None
    avg_busbw_gbps: float | None  # nccl-tests' own summary line, when present
    sizes: int  # rows read

    @property
    def busbw_gbps(self) -> float:
        """The slower of out-of-place and in-place at the largest size."""
        return min(self.busbw_out_gbps, self.busbw_in_gbps)


def parse_table(text: str) -> CollectiveResult:
    header: list[str] | None = None
    rows: list[list[str]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            tokens = stripped.lstrip("#").split()
            if "size" in tokens and tokens.count("busbw") == 2:
                header = tokens
            continue
        tokens = stripped.split()
        if header is not None and len(tokens) == len(header) and tokens[0].isdigit():
            rows.append(tokens)
    if header is None:
        raise ValueError("nccl-tests: no result table header (size ... busbw) in the output")
    if not rows:
        raise ValueError("nccl-tests: result table has no rows (the run failed before measuring)")
    size_col = header.index("size")
    busbw = [i for i, name in enumerate(header) if name == "busbw"]
    checks = [i + 1 for i in busbw]  # "#wrong" (or "error" in old versions) follows busbw
    counted = all(header[i] in ("#wrong", "wrong") for i in checks)
    wrong: int | None = 0 if counted else None
    for row in rows:
        for i in checks:
            if wrong is None or not row[i].isdigit():
                wrong = None
                break
            wrong += int(row[i])
    largest = max(rows, key=lambda r: int(r[size_col]))
    avg = _AVG.search(text)
    return CollectiveResult(
        bytes=int(largest[size_col]),
        busbw_out_gbps=_bandwidth(largest[busbw[0]], "out-of-place", largest[size_col]),
        busbw_in_gbps=_bandwidth(largest[busbw[1]], "in-place", largest[size_col]),
        wrong=wrong,
        avg_busbw_gbps=float(avg["v"]) if avg else None,
        sizes=len(rows),
    )


def _bandwidth(token: str, placement: str, size: str) -> float:
    """A busbw cell as a number; `-nan` or `inf` (a run whose timing broke) is no measurement, and
    min() would quietly judge the other placement alone."""
    try:
        value = float(token)
    except ValueError:
        raise ValueError(f"nccl-tests: {placement} busbw at {size} B is {token!r}, not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"nccl-tests: {placement} busbw at {size} B is {token!r}, not a bandwidth")
    return value
