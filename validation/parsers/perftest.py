"""perftest (ib_write_bw) report: the average bandwidth line after the column header."""

from __future__ import annotations

import re

_HEADER = re.compile(r"BW average\[(?P<unit>Gb/sec|MB/sec)\]")


def write_bw_gbitps(text: str) -> float:
    """Average bandwidth in Gb/s from an ib_write_bw report; ValueError when absent."""
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
        for data in lines[i + 1 :]:
            tokens = data.split()
            if tokens and all(_is_number(t) for t in tokens):
                value = float(tokens[value_index])
                return value if m["unit"] == "Gb/sec" else value * 8 / 1000
        raise ValueError("ib_write_bw: header found but no result line after it")
    raise ValueError("ib_write_bw: no 'BW average' column in the output")


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
