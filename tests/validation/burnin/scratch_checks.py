"""Test-only checks that leave scratch on disk the way the storage and all-reduce checks do (through
the product's naming, validation/burnin/probes/scratch.py), then hang until the runner kills them
at their timeout: what a SIGKILL skips (`finally`) must still be removed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from validation.burnin.backends.base import Backend
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, judge
from validation.burnin.probes import scratch
from validation.burnin.registry import Check, Raw, Registry

SCRATCH_REGISTRY = Registry()


class _Leaves(Check):
    timeouts = {"quick": 60.0}

    def leave(self, ctx: CheckContext) -> Path:
        raise NotImplementedError

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        left = self.leave(ctx)
        try:
            # Written once the scratch exists: the test knows the kill came after it.
            Path(self.params(ctx)["marker"]).write_text(f"{os.getpid()} {left}")
            time.sleep(3600)
        finally:
            # What a check that ends normally does; SIGKILL never gets here.
            pass
        return {}

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        return judge(ctx, {"probe_gbps": 1.0})


@SCRATCH_REGISTRY.register
class LeavesStorage(_Leaves):
    name = "leaves_storage"
    order = 1

    def leave(self, ctx: CheckContext) -> Path:
        target = scratch.storage_file(ctx.storage_path, ".bin")
        with target.open("wb") as fh:
            fh.write(os.urandom(1 << 20))
        return target


@SCRATCH_REGISTRY.register
class LeavesGloo(_Leaves):
    name = "leaves_gloo"
    order = 2

    def leave(self, ctx: CheckContext) -> Path:
        store = Path(scratch.gloo_store_dir())
        (store / "store").write_bytes(b"rendezvous")
        return store
