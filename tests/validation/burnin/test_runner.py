"""The runner: timeouts enforced from outside, crashes recorded as errors, durable records,
resume after the runner itself is killed, no pass without measurements, one writer per node
file, and output faults that stop the run without losing what was recorded."""

from __future__ import annotations

import errno
import json
import multiprocessing.context
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from fleet.catalog import get_sku
from fleet.results import ResultsWriter, read_results
from fleet.spec import ThresholdOverride
from tests.validation.burnin.fake_checks import Ok
from tests.validation.burnin.helpers import FAKE_REGISTRY, run_options
from validation.burnin.registry import Registry
from validation.burnin.runner import (
    OutputError,
    RunBusy,
    RunError,
    RunOptions,
    RunSummary,
    _decode,
    _record,
    _trim_partial_tail,
    run_burnin,
)

ROOT = Path(__file__).resolve().parents[3]
HOST = re.escape(socket.gethostname())
# A level of one check: running "all of it" stays cheap, for the partial flag.
ONE_CHECK = Registry()
ONE_CHECK.register(Ok)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes (its parent has not reaped it yet).
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def wait_dead(pids: list[int], within: float = 10.0) -> list[int]:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_hung_check_is_killed_at_its_timeout_with_what_it_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "hang.pids"
    # The timeout covers the worker's start too (a fresh interpreter importing numpy): 6 s leaves it
    # time to start its child even on a loaded CI machine, where 1.5 s once did not.
    summary = run_burnin(
        run_options(
            tmp_path, ["hang", "ok"], timeouts={"hang": 6.0}, options={"hang": {"pidfile": str(pidfile)}}
        )
    )
    hang = summary.final["hang"]
    assert hang.status == "error"
    assert hang.error == "timeout after 6 s" and hang.reason == "timeout after 6 s"
    # Killed at the timeout, not when something else ended: the check itself sleeps forever. The
    # upper bound is loose so a loaded CI machine cannot fail it; a missed kill would never return.
    assert 6.0 <= hang.duration_s < 40.0
    pids = [int(p) for p in pidfile.read_text().split()]
    assert wait_dead(pids) == [], "the hung check or the process it started survived the timeout"
    # The run went on after the hang and measured the next check.
    assert summary.final["ok"].status == "pass" and summary.final["ok"].metrics["probe_gbps"] > 0
    assert summary.verdict == "incomplete"


@pytest.mark.parametrize(
    ("check", "expect"),
    [
        ("crash", "exited with code 3 without a result"),
        ("segfault", "exited with signal SIGSEGV without a result"),
        ("raises", "RuntimeError: sensor read failed"),
        ("unserialisable", "TypeError"),
        ("pass_without_metrics", "cannot pass without metrics"),
    ],
)
def test_broken_checks_are_errors_never_passes(tmp_path: Path, check: str, expect: str) -> None:
    summary = run_burnin(run_options(tmp_path, [check]))
    record = summary.final[check]
    assert record.status == "error"
    assert expect in (record.error or "") + (record.reason or "")
    assert not record.metrics
    assert summary.verdict == "incomplete"
    on_disk = read_results(summary.path)
    assert [c.status for c in on_disk.checks] == ["error"] and not on_disk.bad_lines


def test_records_are_appended_in_order_with_the_run_record_first(tmp_path: Path) -> None:
    summary = run_burnin(run_options(tmp_path, ["ok", "ok2"]))
    lines = [json.loads(x) for x in summary.path.read_text().splitlines()]
    assert [x["kind"] for x in lines] == ["run", "check", "check"]
    assert lines[0]["checks"] == ["ok", "ok2"] and lines[0]["versions"]["kernel"]
    assert {x["run_id"] for x in lines} == {summary.run_id}
    assert all(x["backend"] == "cpu" and x["duration_s"] > 0 for x in lines[1:])
    assert summary.verdict == "ok"


def test_a_result_that_breaks_the_format_is_an_error(tmp_path: Path) -> None:
    base = {"run_id": "r", "node": "n", "sku": "cpu", "level": "quick"}
    forged = {"status": "pass", "metrics": {}, "backend": "cpu"}
    record = _record(base, "x", "2026-11-29T00:00:00Z", 0.1, forged, None)
    assert record.status == "error" and "check result rejected" in (record.reason or "")
    assert _decode(b"\xff not json")["status"] == "error"
    assert _decode(b'{"status": "great"}')["status"] == "error"


def test_new_run_moves_the_old_file_aside(tmp_path: Path) -> None:
    first = run_burnin(run_options(tmp_path, ["ok"]))
    second = run_burnin(run_options(tmp_path, ["ok"]))
    assert first.run_id != second.run_id
    prev = first.path.with_name(first.path.name + ".prev")
    assert read_results(prev).runs[0].run_id == first.run_id
    assert read_results(second.path).runs[0].run_id == second.run_id


def test_resume_reruns_errors_and_keeps_the_rest(tmp_path: Path) -> None:
    marker = tmp_path / "flaky.marker"
    options = {"flaky": {"marker": str(marker)}}
    first = run_burnin(run_options(tmp_path, ["ok", "flaky", "ok2"], options=options))
    assert first.final["flaky"].status == "error" and "device busy" in (first.final["flaky"].error or "")
    second = run_burnin(run_options(tmp_path, None, resume=True, options=options))  # type: ignore[arg-type]
    assert second.run_id == first.run_id
    assert second.kept == ["ok", "ok2"]
    assert [r.record.check for r in second.runs] == ["flaky"]
    assert second.final["flaky"].status == "pass" and second.verdict == "ok"
    on_disk = read_results(first.path)
    assert len(on_disk.runs) == 1
    assert [c.check for c in on_disk.checks] == ["ok", "flaky", "ok2", "flaky"]  # readers take the last


def test_resume_reads_the_run_again_after_any_check_it_reruns(tmp_path: Path) -> None:
    # health_after_load reads what the load checks raised: a rerun check's load is read again too.
    marker = tmp_path / "flaky.marker"
    options = {"flaky": {"marker": str(marker)}}
    first = run_burnin(run_options(tmp_path, ["ok", "flaky", "closing"], options=options))
    assert first.final["flaky"].status == "error" and first.final["closing"].status == "pass"
    second = run_burnin(run_options(tmp_path, None, resume=True, options=options))  # type: ignore[arg-type]
    assert second.kept == ["ok"]
    assert [r.record.check for r in second.runs] == ["flaky", "closing"]
    # Nothing left to rerun: the closing check's record stands.
    third = run_burnin(run_options(tmp_path, None, resume=True, options=options))  # type: ignore[arg-type]
    assert third.runs == [] and sorted(third.kept) == ["closing", "flaky", "ok"]


def test_resume_reruns_what_was_measured_under_other_settings(tmp_path: Path) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"], options={"ok2": {"note": "a"}}))
    same = {"options": {"ok2": {"note": "a"}}}
    # The same settings: both kept.
    assert run_burnin(run_options(tmp_path, None, resume=True, **same)).kept == ["ok", "ok2"]  # type: ignore[arg-type]
    # ok2's options changed: ok2 alone is measured again; a pass judged before is not this run's.
    again = run_burnin(run_options(tmp_path, None, resume=True, options={"ok2": {"note": "b"}}))  # type: ignore[arg-type]
    assert again.run_id == first.run_id and again.kept == ["ok"]
    assert [r.record.check for r in again.runs] == ["ok2"]
    # Thresholds or the storage path judge and measure every check: nothing is kept.
    for change in (
        {"thresholds": {"x": ThresholdOverride(floor=1.0)}},
        {"storage_path": tmp_path / "elsewhere"},
    ):
        redone = run_burnin(
            run_options(tmp_path, None, resume=True, options={"ok2": {"note": "b"}}, **change)
        )  # type: ignore[arg-type]
        assert redone.kept == [] and [r.record.check for r in redone.runs] == ["ok", "ok2"]


def test_resume_refuses_a_different_run(tmp_path: Path) -> None:
    run_burnin(run_options(tmp_path, ["ok"]))
    with pytest.raises(RunError, match="--resume needs the same"):
        run_burnin(
            RunOptions(
                sku=get_sku("cpu"),
                level="standard",
                out_dir=tmp_path / "out",
                node="t1",
                registry=FAKE_REGISTRY,
                resume=True,
            )
        )
    with pytest.raises(RunError, match="node name"):
        run_burnin(
            RunOptions(
                sku=get_sku("cpu"), level="quick", out_dir=tmp_path, node="../etc", registry=FAKE_REGISTRY
            )
        )


_KILLED_RUNNER = """
import sys
from pathlib import Path
from fleet.catalog import get_sku
from validation.burnin.runner import RunOptions, run_burnin
run_burnin(RunOptions(sku=get_sku("cpu"), level="quick", out_dir=Path(sys.argv[1]), node="t1",
    only=["ok", "slow", "ok2", "ok3"], registry={registry!r},
    options={{"slow": {{"sleep": 60, "pidfile": sys.argv[2]}}}}))
"""


def test_killing_the_runner_keeps_finished_records_and_resume_completes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    pidfile = tmp_path / "slow.pid"
    runner = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUNNER.format(registry=FAKE_REGISTRY), str(out), str(pidfile)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not pidfile.exists() and time.monotonic() < deadline and runner.poll() is None:
            time.sleep(0.05)
        assert pidfile.exists(), runner.stderr.read().decode() if runner.stderr else "runner died"
        slow_pid = int(pidfile.read_text())
        runner.send_signal(signal.SIGKILL)  # mid-run: "slow" is measuring
        runner.wait(10)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.wait()
    assert wait_dead([slow_pid]) == [], "the check kept running after its runner was killed"

    path = out / "t1.jsonl"
    before = read_results(path)
    assert not before.bad_lines
    assert [c.check for c in before.checks] == ["ok"] and before.checks[0].status == "pass"
    run_id = before.runs[0].run_id

    summary: RunSummary = run_burnin(
        RunOptions(
            sku=get_sku("cpu"),
            level="quick",
            out_dir=out,
            node="t1",
            resume=True,
            registry=FAKE_REGISTRY,
            options={"slow": {"sleep": 0.1}},
        )
    )
    assert summary.run_id == run_id and summary.kept == ["ok"]
    after = read_results(path)
    assert not after.bad_lines and len(after.runs) == 1
    assert [c.check for c in after.checks] == ["ok", "slow", "ok2", "ok3"]
    assert all(c.status == "pass" and c.run_id == run_id for c in after.checks)
    assert summary.verdict == "ok"


def test_resume_trims_a_partial_last_line(tmp_path: Path) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"]))
    lines = first.path.read_text().splitlines(keepends=True)
    # The runner died while writing ok2's record: half a line, no newline.
    first.path.write_text("".join(lines[:2]) + lines[2][:40])
    summary = run_burnin(run_options(tmp_path, None, resume=True))  # type: ignore[arg-type]
    assert [r.record.check for r in summary.runs] == ["ok2"]
    after = read_results(first.path)
    assert not after.bad_lines and [c.check for c in after.checks] == ["ok", "ok2"]


def test_resume_keeps_a_whole_last_record_that_only_lacks_its_newline(tmp_path: Path) -> None:
    first = run_burnin(run_options(tmp_path, ["ok", "ok2"]))
    text = first.path.read_text()
    first.path.write_text(text.rstrip("\n"))  # ok2's record is whole; only the newline is missing
    summary = run_burnin(run_options(tmp_path, None, resume=True))  # type: ignore[arg-type]
    assert summary.runs == [] and summary.kept == ["ok", "ok2"]  # nothing cut, nothing rerun
    assert first.path.read_text() == text


def test_a_whole_tail_line_from_a_newer_writer_is_never_cut(tmp_path: Path) -> None:
    path = tmp_path / "n1.jsonl"
    newer = '{"schema":"fleetforge.result/2","kind":"run","node":"n1"}'
    path.write_text('{"half": ' + "\n" + newer)  # a cut line, then a newer writer's whole line
    _trim_partial_tail(path)
    assert path.read_text() == '{"half": ' + "\n" + newer + "\n"
    path.write_text(newer + "\n" + '{"kind":"check","no')  # a line cut mid-write is cut
    _trim_partial_tail(path)
    assert path.read_text() == newer + "\n"


def _start_slow_runner(out: Path, pidfile: Path) -> subprocess.Popen[bytes]:
    runner = subprocess.Popen(
        [sys.executable, "-c", _KILLED_RUNNER.format(registry=FAKE_REGISTRY), str(out), str(pidfile)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 60
    while not pidfile.exists() and time.monotonic() < deadline and runner.poll() is None:
        time.sleep(0.05)
    assert pidfile.exists(), runner.stderr.read().decode() if runner.stderr else "runner died"
    return runner


def test_a_second_run_on_a_file_in_use_stops_at_once_and_touches_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    runner = _start_slow_runner(out, tmp_path / "slow.pid")  # holds t1.jsonl while "slow" runs
    try:
        path = out / "t1.jsonl"
        before = path.read_bytes()
        # Stopped, the live run cannot finish: a second run that raises was refused, not queued
        # for the lock, however slowly this machine runs it. Should it queue, the live run resumes
        # after a while and the second runs once the lock is free (no RunBusy: caught).
        runner.send_signal(signal.SIGSTOP)
        guard = threading.Timer(120, runner.send_signal, (signal.SIGCONT,))
        guard.start()
        try:
            for resume in (False, True):
                with pytest.raises(
                    RunBusy, match=rf"t1\.jsonl: another burn-in \(pid {runner.pid} on {HOST}\)"
                ):
                    run_burnin(run_options(tmp_path, None if resume else ["ok"], resume=resume))  # type: ignore[arg-type]
            # Not moved aside, not trimmed, not appended to: the live run's file is as it was
            # (read while it is still stopped: resumed, it appends the slow check's record).
            assert path.read_bytes() == before and not path.with_name("t1.jsonl.prev").exists()
        finally:
            guard.cancel()
            runner.send_signal(signal.SIGCONT)
    finally:
        runner.kill()  # a crash: the kernel releases the lock with the process
        runner.wait()
    assert run_burnin(run_options(tmp_path, ["ok"])).verdict == "ok"


def test_a_write_that_fails_mid_run_stops_closed_and_keeps_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_append = ResultsWriter.append
    calls: list[int] = []

    def append_until_full(self: ResultsWriter, record: Any) -> None:
        calls.append(1)
        if len(calls) == 3:  # the run record and ok's record land; ok2's finds the disk full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_append(self, record)

    monkeypatch.setattr(ResultsWriter, "append", append_until_full)
    with pytest.raises(OutputError, match=r"writing the check ok2 record failed \(No space left") as exc:
        run_burnin(run_options(tmp_path, ["ok", "ok2", "ok3"]))
    assert exc.value.during_run
    on_disk = read_results(tmp_path / "out" / "t1.jsonl")
    assert len(on_disk.runs) == 1 and [c.check for c in on_disk.checks] == ["ok"]  # ok3 never ran
    assert not on_disk.bad_lines


def test_a_results_file_that_cannot_be_opened_is_an_output_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def read_only(self: ResultsWriter, path: Path) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(ResultsWriter, "__init__", read_only)
    with pytest.raises(OutputError, match=r"t1\.jsonl: cannot open it for writing \(Read-only") as exc:
        run_burnin(run_options(tmp_path, ["ok"]))
    assert not exc.value.during_run


def test_a_run_narrowed_by_only_is_partial(tmp_path: Path) -> None:
    narrowed = run_burnin(run_options(tmp_path, ["ok"]))
    assert read_results(narrowed.path).runs[0].partial is True
    whole = RunOptions(
        sku=get_sku("cpu"), level="quick", out_dir=tmp_path / "whole", node="t1", registry=ONE_CHECK_NAME
    )
    assert read_results(run_burnin(whole).path).runs[0].partial is False
    # Naming every check of the level is the whole level, not a partial run.
    every = RunOptions(
        sku=get_sku("cpu"),
        level="quick",
        out_dir=tmp_path / "every",
        node="t1",
        registry=ONE_CHECK_NAME,
        only=["ok"],
    )
    assert read_results(run_burnin(every).path).runs[0].partial is False


ONE_CHECK_NAME = f"{__name__}:ONE_CHECK"


@pytest.mark.parametrize("node", ["n1\n", "n1\nforged: pass", "a" * 245, "n\x1b[31m", ".hidden"])
def test_node_names_that_cannot_be_a_file_name_are_refused(tmp_path: Path, node: str) -> None:
    with pytest.raises(RunError, match="node name is 1 to 244"):
        run_burnin(
            RunOptions(sku=get_sku("cpu"), level="quick", out_dir=tmp_path, node=node, registry=FAKE_REGISTRY)
        )
    assert list(tmp_path.iterdir()) == []


class StoppedWhileStarting(multiprocessing.context.ForkServerProcess):
    """A check's process whose start is interrupted by SIGTERM (pickled by name to the forkserver)."""

    started: list[StoppedWhileStarting] = []

    def start(self) -> None:
        self.started.append(self)
        os.kill(os.getpid(), signal.SIGTERM)
        super().start()


def test_a_stop_during_a_checks_start_waits_for_the_start_and_leaves_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SIGTERM lands inside Process.start(), where a stop between the forkserver request's connect
    # and its file descriptors once left the forkserver dying with a traceback on the terminal.
    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # as `fleetforge burnin` stops on SIGTERM

    monkeypatch.setattr(multiprocessing.context.ForkServerContext, "Process", StoppedWhileStarting)
    monkeypatch.setattr(StoppedWhileStarting, "started", [])
    sigint = signal.getsignal(signal.SIGINT)  # SIG_IGN where the suite runs as a background job
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_burnin(run_options(tmp_path, ["ok"]))
    finally:
        signal.signal(signal.SIGTERM, previous)
    (proc,) = StoppedWhileStarting.started
    assert proc.pid is not None  # the start completed before the stop was delivered
    assert wait_dead([proc.pid]) == []
    assert signal.getsignal(signal.SIGINT) == sigint  # handlers are back


def test_signals_held_are_delivered_to_the_callers_handler_once_released() -> None:
    from validation.burnin.runner import _signals_held

    seen: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda n, f: seen.append("handler"))
    try:
        with _signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)
            seen.append("held")
        time.sleep(0.01)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert seen == ["held", "handler"]
