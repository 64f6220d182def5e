"""The Python storage path writes data no storage can shrink: every 4 KiB sector distinct."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from validation.burnin.probes import storage_io


def test_every_sector_written_is_distinct_so_deduplication_cannot_flatter_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    written: list[bytes] = []
    real_write = os.write

    def capture(fd: int, data: Any) -> int:
        written.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(storage_io.os, "write", capture)
    block = 64 * 1024
    raw = storage_io.measure(tmp_path, 40 * block, block, prefer_fio=False)
    assert raw["mismatched_blocks"] == 0  # what was read back is what was written, stamps included
    data = b"".join(written)
    assert len(data) == 40 * block  # more blocks than the rotation of random blocks
    sectors = [data[i : i + 4096] for i in range(0, len(data), 4096)]
    assert len(set(sectors)) == len(sectors)


def test_blocks_smaller_than_a_sector_are_still_distinct() -> None:
    import numpy as np

    rng = np.random.default_rng(1)
    blocks = [rng.integers(0, 256, 512, dtype=np.uint8) for _ in range(2)]
    seen = {storage_io.stamped(blocks, i).tobytes() for i in range(10)}
    assert len(seen) == 10
