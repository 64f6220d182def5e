"""Two small costs kept out of what is measured or read: the storage read timer times the reads,
not the comparison of each block; a check's log tail is read from the log's end, not whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from validation.burnin.probes import storage_io
from validation.burnin.runner import _tail


class Clock:
    """A clock that moves only when told: what is timed is decided by the code, not the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_read_timer_leaves_the_verify_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(storage_io.time, "perf_counter", clock)
    real_equal = np.array_equal

    def slow_verify(a: object, b: object) -> bool:
        clock.now += 100.0  # comparing a block "takes" 100 s
        return bool(real_equal(a, b))  # type: ignore[arg-type]

    monkeypatch.setattr(storage_io.np, "array_equal", slow_verify)
    raw = storage_io.measure(tmp_path, 8 * 2**16, 2**16, prefer_fio=False)
    assert raw["mismatched_blocks"] == 0
    assert raw["read_s"] == 0.0  # the clock moved only while blocks were compared


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_the_log_tail_is_read_from_the_end(tmp_path: Path) -> None:
    log = tmp_path / "check.log"
    with log.open("wb") as fh:
        fh.truncate(64 * 2**20)  # a long log (sparse: nothing to write)
        fh.seek(0, 2)
        fh.write(("é" * 50 + "\n").encode() * 40 + b"Traceback: the end\n\n")
    before = _bytes_read()
    tail = _tail(log)
    read = _bytes_read() - before
    assert tail.endswith("Traceback: the end") and len(tail) == len("; log tail: ") + 600
    assert "\ufffd" not in tail and "\0" not in tail
    assert read < 2**20, f"{read} bytes read for a 600-character tail"
    assert _tail(tmp_path / "missing.log") == "" and _tail(None) == ""
