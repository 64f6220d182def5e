"""The burn-in runner: plans a run, starts each check in its own process with a timeout enforced
from outside, and appends a record as each check ends (docs/results.md).

- Isolation: checks run in processes forked from a preloaded multiprocessing forkserver; each
  check calls setsid(), so a timeout kills its whole process group (all-reduce ranks, fio, ...).
  Each also asks for SIGKILL when its parent dies, so a runner killed mid-run leaves nothing
  measuring behind it.
- Durability: ResultsWriter fsyncs every record. A run record comes first, then one check record
  per check as it ends.
- Resume: `resume=True` keeps the run_id of the file's last run and skips every check that run
  already recorded as pass, fail or skip. A check recorded as `error` (crash, timeout, could not
  measure) is run again and its new record appended; readers take the last record of a check.
  Only a record of the run's node, SKU and level, measured under the same settings, is kept; a run
  record whose plan is empty, unknown or shorter than its level without saying it is partial is
  refused, as is a file another machine wrote.
- Without resume an existing results file is moved aside to `<node>.jsonl.prev` (one file holds
  one run, and the gate reads `*.jsonl`).
- One writer per node file: the run holds an exclusive flock on `<node>.jsonl.lock` from before it
  reads the file until its last record; a second run on the same file stops at once (RunBusy).
  The kernel drops the lock when the holder dies, so a crash never leaves the file locked.
- Output faults stop the run closed (OutputError): what was fsynced stays, nothing is guessed.
- Entries the run writes through (results, .prev, .raw, lock) must be what they seem: a planted
  symbolic link, FIFO or folder is refused, so a root burn-in never writes outside its folder.
- The forkserver preloads the caller's `__main__`: a script that calls `run_burnin` needs the usual
  multiprocessing `if __name__ == "__main__":` guard (the `fleetforge` command has it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing as mp
import os
import re
import signal
import socket
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import ValidationError

from fleet.catalog import Sku
from fleet.results import (
    CheckRecord,
    Level,
    NewerSchemaError,
    Record,
    ResultsWriter,
    RunRecord,
    Status,
    parse_line,
    read_results,
    utc_now,
)
from fleet.spec import ThresholdOverride
from validation.burnin.context import CheckContext
from validation.burnin.ownfile import NotOwnFile, open_own
from validation.burnin.probes import scratch
from validation.burnin.procutil import kill_group, pin_blas_threads
from validation.burnin.registry import PRODUCT_REGISTRY, Registry, load_registry
from validation.burnin.worker import Job, child_main

Verdict = Literal["ok", "rejected", "incomplete"]
# The node name becomes file names (<node>.jsonl.prev is the longest): keep them under NAME_MAX.
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,243}")
# After a result arrives, how long a check may take to exit before its group is killed.
_EXIT_GRACE_S = 5.0


class RunError(Exception):
    """The run cannot start as asked (bad node name, resume of a different run, unknown check)."""


class RunBusy(Exception):
    """Another process holds the node's results file."""


class OutputError(Exception):
    """The results cannot be written. `during_run`: records were being appended when it failed
    (disk full, I/O error); otherwise nothing could be created (read-only or missing folder)."""

    def __init__(self, message: str, *, during_run: bool) -> None:
        super().__init__(message)
        self.during_run = during_run


class Observer(Protocol):
    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None: ...

    def started(self, check: str, timeout: float) -> None: ...

    def finished(self, record: CheckRecord) -> None: ...


class _Silent:
    def planned(self, run_id: str, todo: Sequence[str], kept: Sequence[str]) -> None:
        pass

    def started(self, check: str, timeout: float) -> None:
        pass

    def finished(self, record: CheckRecord) -> None:
        pass


@dataclass
class RunOptions:
    sku: Sku
    level: Level
    out_dir: Path
    node: str
    only: Sequence[str] | None = None
    resume: bool = False
    thresholds: Mapping[str, ThresholdOverride] = field(default_factory=dict)
    storage_path: Path | None = None  # default: the output folder
    sysfs_root: Path = Path("/sys")
    registry: str = PRODUCT_REGISTRY
    options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Per-check timeout overrides in seconds (tests, slow sites); otherwise the level's default.
    timeouts: Mapping[str, float] = field(default_factory=dict)
    keep_raw: bool = True
    # Accelerators the node must have, when the fleet says (CheckContext.expected_accelerators).
    expected_accelerators: int | None = None


@dataclass
class CheckRun:
    record: CheckRecord
    collect_s: float  # time inside the check's collect(): the measurement itself
    wall_s: float  # fork to result, as the runner saw it


@dataclass
class RunSummary:
    run_id: str
    path: Path
    planned: list[str]
    kept: list[str]  # already recorded by an earlier invocation of this run (resume)
    runs: list[CheckRun]
    final: dict[str, CheckRecord]  # the record that counts for each check: the last one
    wall_s: float

    @property
    def missing(self) -> list[str]:
        return [n for n in self.planned if n not in self.final]

    @property
    def verdict(self) -> Verdict:
        """incomplete: a check errored or has no record (resume to complete it; this outranks a
        failure, as in the gate, because the results are not whole); rejected: every check has
        an answer and one measured below a floor or found a fault; ok."""
        statuses = {r.status for r in self.final.values()}
        if "error" in statuses or self.missing:
            return "incomplete"
        if "fail" in statuses:
            return "rejected"
        return "ok"


def check_node_name(node: str) -> None:
    """RunError unless `node` can name files inside the output folder and nothing else: no
    separator, no leading dot or dash, no control character, short enough for every sidecar."""
    if not NODE_NAME.fullmatch(node):
        raise RunError(
            f"--node {node!r}: a node name is 1 to 244 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit (it names the results file)"
        )


def results_path(out_dir: Path, node: str) -> Path:
    return out_dir / f"{node}.jsonl"


def run_burnin(opts: RunOptions, observer: Observer | None = None) -> RunSummary:
    t_start = time.perf_counter()
    observer = observer or _Silent()
    check_node_name(opts.node)
    registry = load_registry(opts.registry)
    path = results_path(opts.out_dir, opts.node)
    only = _known(registry, opts.only) if opts.only else None
    try:
        opts.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{opts.out_dir}: cannot create it ({_why(exc)})", during_run=False) from None
    with hold_results(path):
        # The folder may be shared or prepared by someone else: write only through entries that
        # are what they seem, never through a link that points outside it.
        _require_kind(path, stat.S_ISREG, "a regular file")
        _require_kind(path.with_name(path.name + ".prev"), stat.S_ISREG, "a regular file")
        if opts.keep_raw:
            _require_kind(opts.out_dir / f"{opts.node}.raw", stat.S_ISDIR, "a folder")
        return _run_locked(opts, observer, registry, path, only, t_start)


def _require_kind(path: Path, is_kind: Callable[[int], bool], kind: str) -> None:
    """OutputError when `path` exists (even as a dangling link) and is not `kind` itself."""
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise OutputError(f"{path}: cannot inspect it ({_why(exc)})", during_run=False) from None
    if not is_kind(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not " + kind
        raise OutputError(
            f"{path}: is {what}; the burn-in writes only {kind} of its own here: move it away",
            during_run=False,
        )


def _run_locked(
    opts: RunOptions,
    observer: Observer,
    registry: Registry,
    path: Path,
    only: list[str] | None,
    t_start: float,
) -> RunSummary:
    level_checks = [c.name for c in registry.for_level(opts.level)]
    run, kept_records = _existing_run(path, opts, registry, level_checks) if opts.resume else (None, {})
    if run is not None:
        run_id, planned = run.run_id, list(run.checks)
        todo = [n for n in planned if n not in kept_records and (only is None or n in only)]
        if any(not registry.get(n).reads_the_run for n in todo):
            # What the rerun checks load onto the node is read again by the checks that close the run.
            closing = [n for n in planned if registry.get(n).reads_the_run and n not in todo]
            for name in closing:
                kept_records.pop(name, None)
            todo = [n for n in planned if n in todo or n in closing]
        if only is not None and set(only) - set(planned):
            raise RunError(
                f"--only {sorted(set(only) - set(planned))}: not part of run {run_id} ({', '.join(planned)})"
            )
        _output(_trim_partial_tail, path, during_run=False)
    else:
        planned = only or level_checks
        todo = list(planned)
        run_id = f"{opts.node}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:6]}"
        if path.exists() and path.stat().st_size > 0:
            _output(path.replace, path.with_name(path.name + ".prev"), during_run=False)

    observer.planned(run_id, todo, list(kept_records))
    base = {"run_id": run_id, "node": opts.node, "sku": opts.sku.sku, "level": opts.level}
    raw_dir = opts.out_dir / f"{opts.node}.raw" if opts.keep_raw else None
    ctx = CheckContext(
        sku=opts.sku,
        level=opts.level,
        node=opts.node,
        thresholds=dict(opts.thresholds),
        storage_path=opts.storage_path or opts.out_dir,
        sysfs_root=opts.sysfs_root,
        raw_dir=raw_dir,
        options={k: dict(v) for k, v in opts.options.items()},
        expected_accelerators=opts.expected_accelerators,
    )
    launcher = Launcher()
    runs: list[CheckRun] = []
    with _GuardedWriter(path) as writer:
        if run is None:
            # Partial: --only narrowed the level's checks, so the gate must not read this run as whole.
            writer.append(
                RunRecord.model_validate(
                    {
                        **base,
                        "started": utc_now(),
                        "checks": planned,
                        "versions": _host_versions(),
                        # Which machine began the run: --resume continues it only there.
                        "machine": _machine_identity(),
                        "partial": set(planned) != set(level_checks),
                    }
                )
            )
        for name in todo:
            timeout = float(opts.timeouts.get(name, registry.get(name).timeout(ctx)))
            observer.started(name, timeout)
            log = raw_dir / f"{name}.log" if raw_dir is not None else None
            started = utc_now()
            result, wall = launcher.run(Job(name, ctx, opts.registry, log), timeout)
            record = _record(base, name, started, wall, result, log).model_copy(
                update={"settings": check_settings(opts, name)}
            )
            if log is not None and log.exists() and log.stat().st_size == 0:
                log.unlink()  # keep logs only for checks that said something
            writer.append(record)
            runs.append(CheckRun(record, float(result.get("collect_s") or 0.0), wall))
            observer.finished(record)
    final = dict(kept_records)
    final.update({r.record.check: r.record for r in runs})
    return RunSummary(run_id, path, planned, list(kept_records), runs, final, time.perf_counter() - t_start)


def lock_path(results: Path) -> Path:
    return results.with_name(results.name + ".lock")


@contextmanager
def hold_results(results: Path) -> Iterator[None]:
    """Hold the exclusive, non-blocking lock of one node's results file for the block.

    A sidecar file carries the lock because the results file itself is renamed to `.prev` by a
    new run; the sidecar stays (removing it would let two runs lock two different inodes).
    """
    path = lock_path(results)
    try:
        # A planted link must not make root create or truncate a file elsewhere, nor a FIFO hang it.
        fd = open_own(path, os.O_RDWR)
    except NotOwnFile as exc:
        raise OutputError(f"{path}: the lock file is {exc.what}; move it away", during_run=False) from None
    except OSError as exc:
        raise OutputError(f"{path}: cannot create the lock file ({_why(exc)})", during_run=False) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _lock_holder(fd)
            raise RunBusy(
                f"{results}: another burn-in{holder} is writing it; wait for it to end, "
                "or give this run another --node or --out"
            ) from None
        except OSError as exc:  # e.g. ENOLCK on a network filesystem without locking: fail closed
            raise OutputError(f"{path}: cannot lock it ({_why(exc)})", during_run=False) from None
        _note_holder(fd)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def _lock_holder(fd: int) -> str:
    """' (pid N on HOST)' from the holder's note, or '' when it left none yet."""
    try:
        words = os.pread(fd, 300, 0).decode("ascii", errors="replace").split()
    except OSError:
        return ""
    if len(words) != 2 or not words[0].isdigit() or not NODE_NAME.fullmatch(words[1]):
        return ""  # never echo an arbitrary file's bytes to the terminal
    return f" (pid {words[0]} on {words[1]})"


def _note_holder(fd: int) -> None:
    # Only to name this process in a second run's error (the host too: --out may be shared over
    # NFS); a full disk must not stop the run here.
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname() or 'localhost'}\n".encode(), 0)
    except (OSError, UnicodeError):
        pass


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _output(action: Any, *args: Any, during_run: bool) -> Any:
    """Run one file operation on the results; an OSError becomes an OutputError naming the file."""
    try:
        return action(*args)
    except OSError as exc:
        where = exc.filename or args[0]
        raise OutputError(f"{where}: {_why(exc)}", during_run=during_run) from None


class _GuardedWriter:
    """ResultsWriter whose OS faults (read-only, ENOSPC, EIO) stop the run as an OutputError."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._failed = False
        try:
            self._writer = ResultsWriter(path)
        except OSError as exc:
            raise OutputError(f"{path}: cannot open it for writing ({_why(exc)})", during_run=False) from None

    def append(self, record: Record) -> None:
        try:
            self._writer.append(record)
        except OSError as exc:
            self._failed = True
            what = f"check {record.check}" if isinstance(record, CheckRecord) else "run"
            raise OutputError(
                f"{self.path}: writing the {what} record failed ({_why(exc)}); the records before it "
                "are kept: free the space or fix the disk, then continue with --resume",
                during_run=True,
            ) from None

    def __enter__(self) -> _GuardedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._writer.close()
        except OSError as error:
            if self._failed or exc[0] is not None:
                return  # the first fault is already on its way out; the close repeats it
            raise OutputError(f"{self.path}: closing it failed ({_why(error)})", during_run=True) from None


def _known(registry: Registry, names: Sequence[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        registry.get(name)  # raises UnknownCheckError listing the known ones
        if name not in out:
            out.append(name)
    return out


def _existing_run(
    path: Path, opts: RunOptions, registry: Registry, level_checks: Sequence[str]
) -> tuple[RunRecord | None, dict[str, CheckRecord]]:
    if not path.exists():
        return None, {}
    found = read_results(path)
    if not found.runs:
        return None, {}
    run = found.runs[-1]
    if run.sku != opts.sku.sku or run.level != opts.level or run.node != opts.node:
        raise RunError(
            f"{path} holds run {run.run_id} (node {run.node}, sku {run.sku}, level {run.level}); "
            f"--resume needs the same --node, --sku and --level, or drop --resume to start a new run"
        )
    _check_planned(path, run, registry, level_checks)
    _check_machine(path, run)
    kept: dict[str, CheckRecord] = {}
    for rec in found.checks:
        if rec.run_id != run.run_id:
            continue
        if rec.status == "error" or not _keeps(rec, run, opts):
            # Re-run: an error is not an answer, and a record of another node, SKU or level, or one
            # measured or judged under other (or unrecorded) thresholds, options or storage is
            # another run's answer. Readers take the last record: the rerun's is the one that counts.
            kept.pop(rec.check, None)
        else:
            kept[rec.check] = rec
    return run, kept


def _keeps(rec: CheckRecord, run: RunRecord, opts: RunOptions) -> bool:
    """A check record `--resume` may keep: one of the run's planned checks, of its node, SKU and
    level, and measured under these settings (a record without them cannot show it was)."""
    same_run = rec.check in run.checks and (rec.node, rec.sku, rec.level) == (run.node, run.sku, run.level)
    return same_run and rec.settings is not None and rec.settings == check_settings(opts, rec.check)


def _check_planned(path: Path, run: RunRecord, registry: Registry, level_checks: Sequence[str]) -> None:
    """RunError unless the run record's plan is one this runner could have written: checks it
    knows, none twice, and the level's whole list unless the run says it was narrowed (--only).
    Resume runs what the plan lists, so a short or empty plan would otherwise read as complete."""
    planned = list(run.checks)
    unknown = [n for n in planned if n not in registry]
    problem = ""
    if not planned:
        problem = "lists no checks"
    elif unknown:
        problem = f"lists unknown checks ({', '.join(unknown)}; this fleetforge does not know them)"
    elif len(set(planned)) != len(planned):
        problem = "lists a check twice"
    elif not run.partial and set(planned) != set(level_checks):
        problem = (
            f"is not partial but lists {', '.join(planned)}, not the {run.level} level's checks "
            f"({', '.join(level_checks)})"
        )
    if problem:
        raise RunError(
            f"{path}: run {run.run_id} {problem}; it cannot be resumed: drop --resume to start a new run"
        )


def _check_machine(path: Path, run: RunRecord) -> None:
    """RunError unless the run was begun on this machine: another machine's records (a shared or
    copied --out, the same --node on two hosts) are not this one's measurements."""
    recorded: Mapping[str, str] = run.machine
    here = _machine_identity()
    if dict(recorded) == here:
        return
    began = _shown_identity(recorded) if recorded else "no machine identity (an older fleetforge wrote it)"
    raise RunError(
        f"{path}: run {run.run_id} was begun on {began}; this is {_shown_identity(here)}: "
        "--resume continues a run only on the machine that began it; drop --resume to start a new run"
    )


def _shown_identity(identity: Mapping[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in sorted(identity.items()))


def _machine_identity() -> dict[str, str]:
    from validation.burnin.probes.host import machine_identity

    return machine_identity()


def check_settings(opts: RunOptions, check: str) -> str:
    """What decides how `check` measures and is judged, as a short digest for its record."""
    settings: dict[str, object] = {
        "thresholds": {k: v.model_dump(mode="json") for k, v in sorted(opts.thresholds.items())},
        "options": dict(opts.options.get(check, {})),
        "storage_path": str((opts.storage_path or opts.out_dir).resolve()),
    }
    if opts.expected_accelerators is not None:
        # Judged against this count (a TPU VM's chips); absent otherwise, so older digests still hold.
        settings["expected_accelerators"] = opts.expected_accelerators
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _trim_partial_tail(path: Path) -> None:
    """Make appends start on a clean line. Called under the results lock, so no live writer can be
    mid-line: an unfinished tail is a runner that died mid-write and is cut. A tail that parses as
    a whole record only lacks its newline, so it is kept and completed, never cut."""
    with path.open("rb+") as fh:
        data = fh.read()
        if not data or data.endswith(b"\n"):
            return
        start = data.rfind(b"\n") + 1
        try:
            parse_line(data[start:].decode("utf-8"))
        except NewerSchemaError:
            fh.write(b"\n")  # whole, from a newer writer: not ours to cut
        except (ValueError, UnicodeDecodeError):
            fh.truncate(start)
        else:
            fh.write(b"\n")
        fh.flush()
        os.fsync(fh.fileno())


def _host_versions() -> dict[str, str]:
    from validation.burnin.probes.host import HostProbe

    return HostProbe().host_versions()


def _record(
    base: dict[str, Any], name: str, started: str, wall: float, result: dict[str, Any], log: Path | None
) -> CheckRecord:
    fields = {
        **base,
        "check": name,
        "started": started,
        "duration_s": round(wall, 3),
        "status": result.get("status"),
        "reason": result.get("reason"),
        "metrics": result.get("metrics") or {},
        "per_device": result.get("per_device") or {},
        "findings": result.get("findings") or [],
        "versions": result.get("versions") or {},
        "backend": result.get("backend") or "",
        "error": result.get("error"),
    }
    try:
        return CheckRecord.model_validate(fields)
    except ValidationError as exc:
        # Fail closed: a result the format rejects (a pass without metrics, a bad status) is an error.
        problem = "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors(include_url=False)
        )
        return _error_record(base, name, started, wall, f"check result rejected: {problem}")


def _error_record(base: dict[str, Any], name: str, started: str, wall: float, text: str) -> CheckRecord:
    return CheckRecord.model_validate(
        {
            **base,
            "check": name,
            "started": started,
            "duration_s": round(wall, 3),
            "status": "error",
            "reason": text[:500],
            "error": text,
        }
    )


def error_result(text: str) -> dict[str, Any]:
    return {"status": "error", "reason": text[:500], "error": text}


@contextmanager
def _signals_held(signums: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Hold SIGINT and SIGTERM while a check's process is handed to the forkserver, then deliver
    them. A stop that lands between the request's connect and its file descriptors leaves the
    forkserver reading half a request: it dies printing a traceback on the user's terminal. Only
    the main thread can set handlers; elsewhere nothing is held."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda n, _: caught.append(n)) for signum in signums}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            # None: a handler set outside Python, which cannot be put back; the default is closest.
            signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        for held in dict.fromkeys(caught):
            signal.raise_signal(held)  # to the handler the caller set, as if it came now


class Launcher:
    """Starts checks in processes forked from one preloaded forkserver; enforces timeouts."""

    def __init__(self) -> None:
        pin_blas_threads()  # before the forkserver starts: it and every check inherit the env
        self._mp = mp.get_context("forkserver")
        self._mp.set_forkserver_preload(["__main__", "validation.burnin.worker"])

    def run(self, job: Job, timeout: float) -> tuple[dict[str, Any], float]:
        recv, send = self._mp.Pipe(duplex=False)
        proc = self._mp.Process(
            target=child_main, args=(job.to_json(), send, os.getpid()), name=f"check-{job.check}"
        )
        t0 = time.perf_counter()
        try:
            with _signals_held():
                proc.start()
            send.close()
            result = self._wait(proc, recv, t0 + timeout, timeout, job.log_path)
        finally:
            if proc.pid is not None:
                kill_group(proc.pid)  # stragglers: ranks, fio, a check that hung in teardown
                proc.join(1.0)
                # Killed at its timeout, a check ran no `finally`: its storage test file (GiBs)
                # and gloo store stay behind unless removed here, whatever the outcome.
                scratch.remove_left_by(proc.pid, job.ctx.storage_path)
            send.close()
            recv.close()
        return result, time.perf_counter() - t0

    def _wait(
        self, proc: Any, recv: Any, deadline: float, timeout: float, log: Path | None
    ) -> dict[str, Any]:
        while True:
            left = deadline - time.perf_counter()
            if left <= 0:
                return error_result(f"timeout after {timeout:g} s")
            ready = wait([recv, proc.sentinel], timeout=left)
            if recv in ready:
                try:
                    payload = recv.recv_bytes()
                except (EOFError, OSError):  # the process closed its end without a result: it died
                    proc.join(max(0.0, min(_EXIT_GRACE_S, deadline - time.perf_counter())))
                    return error_result(
                        f"check process exited with {_exit(proc)} without a result{_tail(log)}"
                    )
                proc.join(_EXIT_GRACE_S)
                return _decode(payload)
            if proc.sentinel in ready:
                if recv.poll(0):
                    continue  # the result arrived as the process exited: read it
                proc.join(1.0)
                return error_result(f"check process exited with {_exit(proc)} without a result{_tail(log)}")


def _decode(payload: bytes) -> dict[str, Any]:
    try:
        data = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return error_result(f"check result is not JSON: {exc}")
    if not isinstance(data, dict) or data.get("status") not in {"pass", "fail", "error", "skip"}:
        return error_result(f"check result has no valid status: {str(data)[:200]}")
    return data


def _exit(proc: Any) -> str:
    code = proc.exitcode
    if code is None:
        return "no exit code"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"code {code}"


def _tail(log: Path | None, limit: int = 600) -> str:
    """The last `limit` characters of a check's log, read from its end (a log can be GiBs)."""
    if log is None:
        return ""
    try:
        with log.open("rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - 4 * limit - 64))  # UTF-8: at most 4 bytes a character
            data = fh.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace").strip()
    return f"; log tail: {text[-limit:]}" if text else ""


def final_status(records: Mapping[str, CheckRecord]) -> dict[Status, int]:
    counts: dict[Status, int] = {"pass": 0, "fail": 0, "error": 0, "skip": 0}
    for rec in records.values():
        counts[rec.status] += 1
    return counts


def default_node() -> str:
    return socket.gethostname() or "localhost"
