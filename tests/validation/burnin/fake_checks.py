"""Test-only checks in their own registry (never the product's): they hang, crash, raise, or
measure something small for real, so the runner's handling of each can be tested."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np

from validation.burnin.backends.base import Backend
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.registry import Check, Raw, Registry

TEST_REGISTRY = Registry()


def _mark(ctx: CheckContext, name: str, *pids: int) -> None:
    marker = ctx.options.get(name, {}).get("pidfile")
    if marker:
        Path(marker).write_text(" ".join(str(p) for p in pids))


def _measure() -> Raw:
    src = np.random.default_rng(1).random(2**20)
    t0 = time.perf_counter()
    dst = src.copy()
    elapsed = time.perf_counter() - t0
    return {"gbps": 2 * dst.nbytes / elapsed / 1e9}


class _Measures(Check):
    timeouts = {"quick": 60.0}

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        return _measure()

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        return judge(ctx, {"probe_gbps": raw["gbps"]})


@TEST_REGISTRY.register
class Ok(_Measures):
    name = "ok"
    order = 1


@TEST_REGISTRY.register
class Ok2(_Measures):
    name = "ok2"
    order = 5


@TEST_REGISTRY.register
class Ok3(_Measures):
    name = "ok3"
    order = 6


@TEST_REGISTRY.register
class Slow(_Measures):
    name = "slow"
    order = 2

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        _mark(ctx, self.name, os.getpid())
        time.sleep(float(self.params(ctx).get("sleep", 2.0)))
        return _measure()


@TEST_REGISTRY.register
class Hang(_Measures):
    name = "hang"
    order = 10

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        child = subprocess.Popen(["sleep", "3600"])  # something it started: must die with it
        _mark(ctx, self.name, os.getpid(), child.pid)
        time.sleep(3600)
        return _measure()


@TEST_REGISTRY.register
class Crash(_Measures):
    name = "crash"
    order = 11

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        os._exit(3)


@TEST_REGISTRY.register
class Segfault(_Measures):
    name = "segfault"
    order = 12

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        os.kill(os.getpid(), signal.SIGSEGV)
        time.sleep(10)
        return _measure()


@TEST_REGISTRY.register
class Raises(_Measures):
    name = "raises"
    order = 13

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        raise RuntimeError("sensor read failed")


@TEST_REGISTRY.register
class Unserialisable(_Measures):
    name = "unserialisable"
    order = 14

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        return {"values": {1, 2, 3}}


@TEST_REGISTRY.register
class PassWithoutMetrics(_Measures):
    name = "pass_without_metrics"
    order = 15

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        return CheckOutcome(status="pass")


@TEST_REGISTRY.register
class Flaky(_Measures):
    """Errors on its first run, measures on the next: what --resume is for."""

    name = "flaky"
    order = 16

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        marker = Path(self.params(ctx)["marker"])
        if not marker.exists():
            marker.write_text("failed once")
            raise OSError("device busy")
        return _measure()


@TEST_REGISTRY.register
class Closing(_Measures):
    """Reads what the checks before it left behind, as health_after_load does."""

    name = "closing"
    order = 50
    reads_the_run = True
