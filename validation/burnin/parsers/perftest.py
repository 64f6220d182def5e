"""perftest (ib_write_bw, ib_read_bw, ib_send_bw, ...) bandwidth report: the average bandwidth
column of the result table.

perftest prints the average in one of three units:
  BW average[Gb/sec]   with --report_gbits: 10^9 bits per second;
  BW average[MiB/sec]  the default since perftest 24.x (2024);
  BW average[MB/sec]   the default before that. Its "MB" was always 2^20 bytes: perftest divides
                       bytes by 0x100000 (perftest_parameters.c, format_factor), the MiB/sec label
                       only renamed it.
"""

from __future__ import annotations

import re

_HEADER = re.compile(r"BW average\[(?P<unit>Gb/sec|MiB/sec|MB/sec)\]")
_MIB_PER_S_IN_GBITPS = 2**20 * 8 / 1e9
_TO_GBITPS = {"Gb/sec": 1.0, "MiB/sec": _MIB_PER_S_IN_GBITPS, "MB/sec": _MIB_PER_S_IN_GBITPS}


def bw_average(text: str) -> tuple[float, str]:
    """(value, unit as printed) of the average bandwidth; with one row per message size (-a) the
    row of the largest message. ValueError when the report has no result."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = _HEADER.search(line)
        if not m:
            continue
        columns = line.replace("#", "").split()
        avg_col = next(j for j, c in enumerate(columns) if c.startswith("average["))
        # The header reads "bytes iterations BW peak[..] BW average[..] MsgRate[..]"; values have
        # one token per column, where "BW" stands alone in the header.
        value_index = avg_col - columns[: avg_col + 1].count("BW")
        rows: list[list[float]] = []
        for data in lines[i + 1 :]:
            if data.startswith("----") and rows:
                break
            tokens = data.split()
            # Warnings ("Conflicting CPU frequency values detected ...") can sit between the
            # header and the rows: only all-numeric lines are results.
            if len(tokens) > value_index and all(_is_number(t) for t in tokens):
                rows.append([float(t) for t in tokens])
        if not rows:
            raise ValueError("perftest: 'BW average' header found but no result line after it")
        largest = max(rows, key=lambda r: r[0])
        return largest[value_index], m["unit"]
    raise ValueError("perftest: no 'BW average' column in the output")


def bw_average_gbitps(text: str) -> float:
    """Average bandwidth in Gb/s (10^9 bits per second), whatever unit perftest printed."""
    value, unit = bw_average(text)
    return value * _TO_GBITPS[unit]


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
