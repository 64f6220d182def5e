"""A full disk under the raw folder and the check's log costs neither the measurement nor the
reason: the raw sidecar is best effort (its loss is a finding), a traceback that cannot be written
is dropped, and the worker always sends its result."""

from __future__ import annotations

import errno
import io
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import validation.burnin.worker as worker
from tests.validation.burnin.helpers import FAKE_REGISTRY, ctx, run_options
from validation.burnin.runner import run_burnin
from validation.burnin.worker import Job, child_main


class _FullDisk(io.TextIOBase):
    def write(self, text: str) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")


def _no_space(path: Path) -> int:
    raise OSError(errno.ENOSPC, "No space left on device", str(path))


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raw sidecar hits a full disk (in this process and its forks); so does the traceback,
    in the fork (_in_child: pytest's capture sets sys.stderr again after fixtures run)."""
    monkeypatch.setattr(worker, "open_output", _no_space)


@pytest.mark.usefixtures("full_disk")
def test_a_measured_check_keeps_its_result_when_the_raw_sidecar_cannot_be_written(tmp_path: Path) -> None:
    job = Job("ok", ctx(raw_dir=tmp_path / "raw"), FAKE_REGISTRY)
    # child_main calls setsid(): run it in a forked process of its own, not in pytest's.
    result = _in_child(job)
    assert result["status"] == "pass" and result["metrics"]["probe_gbps"] > 0
    assert any(f.startswith("raw output not kept") and "No space left" in f for f in result["findings"])


@pytest.mark.usefixtures("full_disk")
def test_a_failing_check_sends_its_reason_when_the_traceback_cannot_be_written(tmp_path: Path) -> None:
    result = _in_child(Job("raises", ctx(raw_dir=tmp_path / "raw"), FAKE_REGISTRY))
    assert result["status"] == "error" and "RuntimeError: sensor read failed" in result["reason"]


def _in_child(job: Job) -> dict[str, Any]:
    """child_main in a forked copy of this process (monkeypatches included); its payload back."""
    import json

    recv, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        code = 0
        try:
            recv.close()
            sys.stderr = _FullDisk()
            child_main(job.to_json(), send)
        except BaseException:
            code = 1
        os._exit(code)
    send.close()
    try:
        payload = recv.recv_bytes() if recv.poll(120) else b""
    except EOFError:
        payload = b""
    finally:
        os.waitpid(pid, 0)
        recv.close()
    assert payload, "the worker exited without sending its result"
    return dict(json.loads(payload))


# -- the same on a real full file system -------------------------------------------------------


@pytest.fixture
def full_raw_dir(tmp_path: Path) -> Iterator[Path]:
    """<out>/t1.raw on a 64 KiB tmpfs, filled to the last byte (needs root: skipped otherwise)."""
    raw = tmp_path / "out" / "t1.raw"
    raw.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(raw)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        fd = os.open(raw / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
        finally:
            os.close(fd)
        yield raw
    finally:
        subprocess.run(["umount", "-l", str(raw)], check=False)


def test_a_full_raw_folder_loses_no_result_and_no_reason(tmp_path: Path, full_raw_dir: Path) -> None:
    summary = run_burnin(run_options(tmp_path, only=["ok", "raises"]))
    ok, raises = summary.final["ok"], summary.final["raises"]
    assert ok.status == "pass" and ok.metrics["probe_gbps"] > 0
    assert any(f.startswith("raw output not kept") for f in ok.findings)
    assert raises.status == "error" and "RuntimeError: sensor read failed" in (raises.reason or "")
