"""A check killed at its timeout leaves no scratch behind: the storage check's test file and the
gloo store are removed by the runner once the check ends, and stale ones (their process gone) by
the next measurement; another host's files on a shared path and a live process's are kept."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.validation.burnin.helpers import run_options
from validation.burnin.probes import scratch, storage_io
from validation.burnin.runner import run_burnin

SCRATCH = "tests.validation.burnin.scratch_checks:SCRATCH_REGISTRY"


def dead_pid() -> int:
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


@pytest.mark.parametrize("check", ["leaves_storage", "leaves_gloo"])
def test_a_check_killed_at_its_timeout_leaves_no_scratch(tmp_path: Path, check: str) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    marker = tmp_path / "marker"
    summary = run_burnin(
        run_options(
            tmp_path,
            only=[check],
            registry=SCRATCH,
            storage_path=storage,
            # The timeout covers the worker's start too: 6 s leaves it time on a loaded machine.
            timeouts={check: 6.0},
            options={check: {"marker": str(marker)}},
        )
    )
    record = summary.final[check]
    assert record.status == "error" and record.reason == "timeout after 6 s"
    assert marker.exists(), "the check never made its scratch: nothing was tested"
    pid, left = marker.read_text().split(" ", 1)
    assert not scratch.pid_alive(int(pid))
    assert not Path(left).exists(), f"{left} was left behind by the killed check"
    assert [p.name for p in storage.iterdir()] == []


def test_the_storage_measurement_sweeps_only_this_hosts_dead_files(tmp_path: Path) -> None:
    gone = dead_pid()
    stale = [
        scratch.storage_file(tmp_path, ".bin", gone),
        scratch.storage_file(tmp_path, ".fio", gone),
        tmp_path / f".fleetforge-storage-{gone}.bin",  # named before the host was in it
    ]
    kept = [
        scratch.storage_file(tmp_path, ".bin", os.getppid()),  # a live process's (not this one:
        # the measurement here writes and removes its own)
        tmp_path / f".fleetforge-storage-othernode-{gone}.bin",  # another node on a shared path
        tmp_path / "data.bin",
    ]
    for path in stale + kept:
        path.write_bytes(b"x" * 4096)
    link = tmp_path / f".fleetforge-storage-{scratch.host_tag()}-{gone + 1}.bin"
    link.symlink_to(tmp_path / "data.bin")
    raw = storage_io.measure(tmp_path, 1 << 20, 1 << 16, prefer_fio=False)
    assert raw["mismatched_blocks"] == 0
    assert not any(p.exists() for p in stale)
    assert all(p.exists() for p in kept)
    # The measurement's own file is gone too; nothing else was created or removed.
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*(p.name for p in kept), link.name])


def test_a_gloo_sweep_removes_dead_processes_stores_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    gone = dead_pid()
    dead = Path(scratch.gloo_store_dir(gone))
    (dead / "store").write_bytes(b"x")
    live = Path(scratch.gloo_store_dir())
    other = tmp_path / "fleetforge-gloo-unrelated"
    other.mkdir()
    planted = tmp_path / f"fleetforge-gloo-{gone}-planted"
    planted.symlink_to(other)
    assert scratch.sweep_gloo() == [str(dead)]
    assert not dead.exists() and live.exists() and other.exists() and planted.is_symlink()
    assert scratch.remove_left_by(os.getpid(), None) == [str(live)]
