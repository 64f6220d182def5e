"""Runs one check in its own process and hands back a JSON result.

The runner starts this through a preloaded multiprocessing forkserver (so a check's process
costs a fork, not an interpreter start and numpy import), calls `child_main`, and enforces the
timeout from outside by killing the process group. `python -m validation.burnin.worker --check NAME
--sku SKU` runs one check by hand and prints the result.

Result: {"status", "reason", "metrics", "per_device", "findings", "versions", "backend",
"error", "collect_s"}. Any exception in collect or parse becomes status "error" with its type
and message: a check that breaks never passes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, cast

# Preloading these in the forkserver is the point: every check forks with them imported.
import validation.burnin.checks  # noqa: F401
from fleet.results import LEVELS, Level
from validation.burnin.backends import MissingDependencyError, Unsupported, make_backend
from validation.burnin.context import CheckContext
from validation.burnin.ownfile import open_own
from validation.burnin.procutil import die_with_parent, pin_blas_threads
from validation.burnin.registry import PRODUCT_REGISTRY, load_registry


@dataclass(frozen=True)
class Job:
    check: str
    ctx: CheckContext
    registry: str = PRODUCT_REGISTRY
    log_path: Path | None = None

    def to_json(self) -> str:
        return json.dumps(
            {
                "check": self.check,
                "ctx": self.ctx.to_json(),
                "registry": self.registry,
                "log_path": None if self.log_path is None else str(self.log_path),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Job:
        data = json.loads(text)
        log = data.get("log_path")
        return cls(
            data["check"],
            CheckContext.from_json(data["ctx"]),
            data["registry"],
            None if log is None else Path(log),
        )


def _result(status: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "status": status,
        "reason": None,
        "metrics": {},
        "per_device": {},
        "findings": [],
        "versions": {},
        "backend": "",
        "error": None,
        "collect_s": 0.0,
    }
    base.update(fields)
    return base


def execute(job: Job) -> dict[str, Any]:
    """Run one check in this process. Never raises for a check's own failure."""
    ctx = job.ctx
    check = load_registry(job.registry).get(job.check)
    why = check.applies_to(ctx.sku)
    if why is not None:
        return _result("skip", reason=why)
    try:
        backend = make_backend(ctx)
    except MissingDependencyError as exc:
        return _result("error", reason=str(exc), error=f"{type(exc).__name__}: {exc}")
    t0 = time.perf_counter()
    try:
        raw = check.collect(backend, ctx)
    except Unsupported as exc:
        return _result("skip", reason=str(exc), backend=backend.name, collect_s=time.perf_counter() - t0)
    except Exception as exc:
        return _failed(exc, backend.name, time.perf_counter() - t0, "collect")
    collect_s = time.perf_counter() - t0
    try:
        text = json.dumps(raw, indent=1, sort_keys=True)  # also proves raw is JSON-serialisable
    except (TypeError, ValueError) as exc:  # not JSON: the check broke its own contract
        return _failed(exc, backend.name, collect_s, "collect returned data that is not JSON")
    # Best effort: a full or broken disk under the raw folder must not cost what was measured.
    not_kept = _keep_raw(ctx, job.check, text)
    try:
        outcome = check.parse(raw, ctx)
    except Exception as exc:
        return _failed(exc, backend.name, collect_s, "parse")
    return _result(
        outcome.status,
        reason=outcome.reason,
        metrics=outcome.metrics,
        per_device=outcome.per_device,
        findings=[*outcome.findings, *([not_kept] if not_kept else [])],
        versions=outcome.versions,
        backend=backend.name,
        collect_s=collect_s,
    )


def _failed(exc: Exception, backend: str, collect_s: float, stage: str) -> dict[str, Any]:
    _print_traceback()
    text = f"{type(exc).__name__}: {exc}"
    return _result(
        "error",
        reason=f"{stage} failed: {text}"[:500],
        error=text[:2000],
        backend=backend,
        collect_s=collect_s,
    )


def _print_traceback() -> None:
    """The traceback to the check's log file; a log on a full or broken disk must not stop the
    result from going back (it is the record that counts)."""
    with contextlib.suppress(Exception):
        traceback.print_exc()
        sys.stderr.flush()


def _keep_raw(ctx: CheckContext, check: str, text: str) -> str | None:
    """Keep what was collected beside the results: the captured output parse() was given (JSON
    text). Returns a finding when it could not be written; never raises for the disk."""
    if ctx.raw_dir is None:
        return None
    target = ctx.raw_dir / f"{check}.json"
    try:
        ctx.raw_dir.mkdir(parents=True, exist_ok=True)
        with os.fdopen(open_output(target), "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
    except OSError as exc:
        with contextlib.suppress(OSError):
            target.unlink()  # a half-written sidecar is no record of what parse() was given
        return f"raw output not kept ({target}: {exc.strerror or type(exc).__name__})"
    return None


def open_output(path: Path) -> int:
    """A descriptor on `path` for writing, emptied only once it is known to be the burn-in's own
    file (validation/burnin/ownfile.py): a root burn-in must not write outside its folder."""
    fd = open_own(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _release_forkserver() -> None:
    """Drop this process's copy of the forkserver's liveness pipe.

    multiprocessing hands every forkserver child the write end of the pipe whose EOF tells the
    forkserver its client is gone. While a check holds it, a killed runner leaves the forkserver
    (the check's parent) alive, so the parent-death signal never fires."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if isinstance(fd, int):
        with contextlib.suppress(OSError):
            os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[union-attr]


def _watch_runner(runner_pid: int) -> None:
    """SIGKILL this check's process group when the runner exits (a pidfd turns readable)."""
    try:
        pidfd = os.pidfd_open(runner_pid)
    except (AttributeError, OSError):  # runner already gone, or a kernel without pidfd
        if not _alive(runner_pid):
            os.killpg(0, signal.SIGKILL)
        return

    def watch() -> None:
        select.select([pidfd], [], [])
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="runner-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def child_main(job_json: str, conn: Connection, runner_pid: int | None = None) -> None:
    """Entry point in the check's own process (forked from the runner's forkserver)."""
    os.setsid()  # own process group: the runner kills the check and all it started at once
    _release_forkserver()
    die_with_parent()
    if runner_pid is not None:
        _watch_runner(runner_pid)
    job = Job.from_json(job_json)
    try:
        if job.log_path is not None:
            job.log_path.parent.mkdir(parents=True, exist_ok=True)
            fd = open_output(job.log_path)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.close(fd)
        result = execute(job)
        payload = json.dumps(result, allow_nan=False)
    except Exception as exc:
        _print_traceback()
        payload = json.dumps(
            _result(
                "error", reason=f"worker failed: {type(exc).__name__}: {exc}"[:500], error=str(exc)[:2000]
            )
        )
    conn.send_bytes(payload.encode("utf-8"))  # always: a result lost is a measurement lost
    conn.close()


def main(argv: list[str] | None = None) -> int:
    from fleet.catalog import get_sku

    parser = argparse.ArgumentParser(
        prog="python -m validation.burnin.worker", description="Run one burn-in check."
    )
    parser.add_argument("--check", required=True)
    parser.add_argument("--sku", default="cpu")
    parser.add_argument("--level", default="quick", choices=LEVELS)
    parser.add_argument("--storage-path", default=".")
    args = parser.parse_args(argv)
    if argv is None and "OPENBLAS_NUM_THREADS" not in os.environ:
        # numpy is already loaded and BLAS read its thread count then: pin it and start again.
        pin_blas_threads()
        os.execv(sys.executable, [sys.executable, "-m", "validation.burnin.worker", *sys.argv[1:]])
    ctx = CheckContext(
        sku=get_sku(args.sku), level=cast(Level, args.level), storage_path=Path(args.storage_path)
    )
    print(json.dumps(execute(Job(args.check, ctx)), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
