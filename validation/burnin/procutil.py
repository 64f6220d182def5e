"""Process plumbing shared by the runner, the worker and multi-process measurements."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import math
import os
import signal
import sys
from pathlib import Path
from typing import NoReturn

_PR_SET_PDEATHSIG = 1
USAGE = 64  # EX_USAGE
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies, so a killed runner leaves no
    measurement running behind it. A no-op where prctl is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (a check and everything it started)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process may really use: its affinity mask, capped by a cgroup v2 CPU quota."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        count = os.cpu_count() or 1
    try:
        quota, period = (cgroup_root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            count = min(count, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return max(1, count)


def pin_blas_threads(environ: dict[str, str] | None = None) -> int:
    """Fix the BLAS / OpenMP thread count before numpy loads, unless the operator already did.

    BLAS libraries default to every CPU they can see, which in a container or under a CPU quota
    oversubscribes the node and makes GEMM figures swing from run to run. One thread per usable
    CPU gives the highest stable figure. Returns the count in effect."""
    env = os.environ if environ is None else environ
    for var in BLAS_THREAD_VARS:
        if env.get(var, "").isdigit():
            return int(env[var])
    threads = usable_cpus()
    for var in BLAS_THREAD_VARS:
        env[var] = str(threads)
    return threads


def blas_threads() -> int:
    value = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or ""
    return int(value) if value.isdigit() else usable_cpus()


class UsageExitParser(argparse.ArgumentParser):
    """An argument parser that exits 64 on a usage error: argparse's own exit 2 would read as "the
    measurement could not be made" to the role, which takes 2 from the tools it starts."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(USAGE)
