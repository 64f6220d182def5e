"""collectives: intra-node all-reduce bus bandwidth (NCCL on GPUs, psum on TPUs, gloo or a
shared-memory ring across processes on a CPU host), busbw as nccl-tests defines it.

Raw: {"impl", "world", "bytes", "iters", "times_s": [per iteration], "correct", "exit_codes"?}, or,
where nccl-tests' all_reduce_perf is on the node, {"impl": "nccl-tests", "world", "bytes", "rc",
"output", "stderr"}: its table is read (busbw at the largest size, the #wrong counts).
"""

from __future__ import annotations

from fleet.catalog import Sku
from validation.burnin.backends.base import Backend
from validation.burnin.checks._util import median
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge
from validation.burnin.parsers.nccl_tests import parse_table
from validation.burnin.probes.allreduce_cpu import bus_factor
from validation.burnin.registry import Check, Raw, register


@register
class Collectives(Check):
    name = "collectives"
    description = "intra-node all-reduce bus bandwidth"
    order = 60
    timeouts = {"quick": 180.0, "standard": 420.0, "extended": 900.0}
    level_params = {
        "quick": {"iters": 5},
        "standard": {"iters": 20},
        "extended": {"iters": 50},
    }
    size_params = {"bytes": 2**20}

    def applies_to(self, sku: Sku) -> str | None:
        if sku.accelerators_per_node == 1:
            return f"{sku.sku} has one accelerator: no intra-node all-reduce"
        return None

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.allreduce(p.get("bytes"), int(p["iters"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        if raw.get("impl") == "nccl-tests":
            return _nccl_tests(raw, ctx)
        times = [float(t) for t in raw.get("times_s") or [] if t and t > 0]
        codes = raw.get("exit_codes") or []
        if any(c != 0 for c in codes):
            return error(f"{raw.get('impl')}: ranks exited with {codes}")
        if not times:
            return error(f"{raw.get('impl')}: no timed iteration completed")
        world = int(raw["world"])
        t = median(times)
        algbw = float(raw["bytes"]) / t / 1e9
        busbw = algbw * bus_factor(world)
        faults = (
            [] if raw.get("correct") else [f"{raw.get('impl')}: all-reduce result is wrong (data corruption)"]
        )
        notes = [
            f"{raw.get('impl')}: {world} ranks, {float(raw['bytes']) / 2**20:.0f} MiB, "
            f"median of {len(times)} iterations {t * 1e3:.2f} ms, algbw {algbw:.3g} GB/s"
        ]
        return judge(ctx, {"allreduce_busbw_gbps": busbw}, faults=faults, notes=notes)


def _nccl_tests(raw: Raw, ctx: CheckContext) -> CheckOutcome:
    rc = raw.get("rc")
    try:
        result = parse_table(str(raw.get("output") or ""))
    except ValueError as exc:
        stderr = str(raw.get("stderr") or "").strip()[-300:]
        return error(f"all_reduce_perf exited {rc}: {exc}" + (f"; {stderr}" if stderr else ""))
    faults = [] if rc == 0 else [f"all_reduce_perf exited {rc}"]
    if result.wrong is None:
        faults.append("nccl-tests did not count wrong results (#wrong N/A): data corruption not ruled out")
    elif result.wrong:
        faults.append(f"nccl-tests: {result.wrong} wrong results (data corruption)")
    notes = [
        f"nccl-tests all_reduce_perf: {raw.get('world')} GPUs, {result.bytes / 2**20:.0f} MiB, busbw "
        f"out-of-place {result.busbw_out_gbps:g} GB/s, in-place {result.busbw_in_gbps:g} GB/s (the lower is judged)"
    ]
    return judge(ctx, {"allreduce_busbw_gbps": result.busbw_gbps}, faults=faults, notes=notes)
