"""storage: sequential write and read throughput on a path (fio when installed, else Python).

Raw (fio): {"method": "fio", "write": {"rc", "output"}, "read": {...}, "path", "bytes"}.
Raw (python): {"method": "python-odirect" | "python-fadvise", "bytes", "write_s", "read_s",
"mismatched_blocks", "path"}.
"""

from __future__ import annotations

from validation.burnin.backends.base import Backend
from validation.burnin.context import CheckContext
from validation.burnin.outcome import CheckOutcome, error, judge
from validation.burnin.parsers.fio import iops, throughput_mbps
from validation.burnin.registry import Check, Raw, register

MiB = 2**20


@register
class Storage(Check):
    name = "storage"
    description = "sequential read / write throughput on the storage path"
    order = 80
    timeouts = {"quick": 120.0, "standard": 600.0, "extended": 1800.0}
    level_params = {
        "quick": {"bytes": 128 * MiB, "block": 1 * MiB},
        "standard": {"bytes": 2048 * MiB, "block": 1 * MiB},
        "extended": {"bytes": 16384 * MiB, "block": 1 * MiB},
    }

    def collect(self, backend: Backend, ctx: CheckContext) -> Raw:
        p = self.params(ctx)
        return backend.storage(ctx.storage_path, int(p["bytes"]), int(p["block"]))

    def parse(self, raw: Raw, ctx: CheckContext) -> CheckOutcome:
        method = str(raw.get("method"))
        notes = [f"{method} on {raw.get('path')}: {float(raw.get('bytes', 0)) / MiB:.0f} MiB sequential"]
        faults: list[str] = []
        if method == "fio":
            for direction in ("write", "read"):
                if raw[direction]["rc"] != 0:
                    return error(
                        f"fio {direction} exited {raw[direction]['rc']}: {raw[direction].get('stderr', '')[-300:]}"
                    )
            try:
                metrics = {
                    "storage_write_mbps": throughput_mbps(raw["write"]["output"], "write"),
                    "storage_read_mbps": throughput_mbps(raw["read"]["output"], "read"),
                }
                notes.append(
                    f"fio: {iops(raw['read']['output'], 'read'):.0f} read IOPS, "
                    f"{iops(raw['write']['output'], 'write'):.0f} write IOPS"
                )
            except (ValueError, KeyError) as exc:
                return error(f"fio output not understood: {exc}")
        else:
            size = float(raw["bytes"])
            metrics = {
                "storage_write_mbps": size / float(raw["write_s"]) / 1e6,
                "storage_read_mbps": size / float(raw["read_s"]) / 1e6,
            }
            if raw.get("mismatched_blocks"):
                faults.append(f"{raw['mismatched_blocks']} blocks read back differ from what was written")
            if method == "python-fadvise":
                notes.append("the file system refused O_DIRECT: reads timed after evicting the page cache")
        return judge(ctx, metrics, faults=faults, notes=notes)
